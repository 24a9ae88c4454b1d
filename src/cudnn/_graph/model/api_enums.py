"""Enums of the documented Python API that no cuDNN header enum stands behind as is.

``scalar_type`` says how ``pygraph.tensor_scalar`` carries its value (a frontend notion: a
by-value tensor, or a constant baked into the graph through CUDNN_ATTR_TENSOR_CONSTANT_VALUE).
``moe_grouped_matmul_mode`` mirrors cudnnMoeGroupedMatmulMode_t under the documented names.
Values match the official frontend's, so code that stores them as ints keeps working; they
print as the official's do (``scalar_type.RUNTIME_PARAM``: `ApiEnum`).
"""

from __future__ import annotations

from ..._lib.api_enum import ApiEnum


class scalar_type(ApiEnum):
    """RUNTIME_PARAM: a pass-by-value tensor whose value travels with each execute.
    COMPILE_TIME_CONST: the value is part of the graph (cuDNN >= 9.22)."""

    RUNTIME_PARAM = 0
    COMPILE_TIME_CONST = 1


class moe_grouped_matmul_mode(ApiEnum):
    """How a MoE grouped matmul reads its tokens: NONE (already grouped by expert), GATHER
    (rows picked through token_index) or SCATTER (results written through token_index).
    The official's values (the C++ frontend's MoeGroupedMatmulMode_t, after its NOT_SET = 0);
    lowering maps them to cudnnMoeGroupedMatmulMode_t by name."""

    NONE = 1
    GATHER = 2
    SCATTER = 3
