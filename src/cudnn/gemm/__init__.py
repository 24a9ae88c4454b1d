"""``cudnn.gemm``: the official package's GEMM family, as far as cuDNN's Graph API serves it:
``moe_grouped_matmul`` (`cudnn.experimental.moe`; also ``cudnn.gemm.ops.moe_grouped_matmul``).
Its CuTe-DSL, FROST and cuTile kernels (``swiglu_mlp``, ``situ_mlp``, ``swiglu_moe``,
``MhcProjectionBackward``) are absent and say what they need (`cudnn._unavailable`). Names
resolve on first use, so importing this package imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["moe_grouped_matmul", "ops"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    if name == "ops":
        return importlib.import_module(".ops", __name__)
    if name == "moe_grouped_matmul":
        value = importlib.import_module(".ops", __name__).moe_grouped_matmul
        globals()[name] = value
        return value
    from .._unavailable import missing

    raise missing(__name__, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
