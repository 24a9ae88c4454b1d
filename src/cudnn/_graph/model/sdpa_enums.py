"""Frontend-only enums of the attention API (no cuDNN header defines them).

``diagonal_alignment`` says where the diagonal of a causal or banded mask starts when
s_q != s_kv; ``attention_implementation`` picks the lowering of ``pygraph.sdpa``. Values
match the official frontend's, so code that stores them as ints keeps working; they print as
the official's do (``diagonal_alignment.TOP_LEFT``: `ApiEnum`).
"""

from __future__ import annotations

from ..._lib.api_enum import ApiEnum


class diagonal_alignment(ApiEnum):  # the documented name
    """TOP_LEFT: query i sees keys j <= i. BOTTOM_RIGHT: the diagonal ends in the last
    row's last column (query i sees keys j <= i + s_kv - s_q)."""

    TOP_LEFT = 0
    BOTTOM_RIGHT = 1


class attention_implementation(ApiEnum):  # the documented name
    """AUTO: the native SDPA_FWD operation where the loaded cuDNN accepts every requested
    feature, else the composite graph. COMPOSITE: matmul/pointwise/reduction graph.
    UNIFIED: one SDPA_FWD operation (cuDNN >= 9.13.1), an error where it cannot express the call."""

    AUTO = 0
    COMPOSITE = 1
    UNIFIED = 2
