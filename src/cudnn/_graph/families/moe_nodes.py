"""Mixture-of-experts grouped matmul (cuDNN >= 9.15) and its weight gradient (>= 9.22).

Tokens are rows of ``token`` [1, M, K] grouped by expert; ``first_token_offset`` [E, 1, 1]
(INT32) gives the row where each expert's group starts, and expert e multiplies its rows by
``weight[e]`` [K, N]. GATHER reads the rows through ``token_index`` [1, M_out, 1] (the output
has M_out rows); SCATTER writes them through ``token_index`` and ``token_ks`` (which of the
token's ``top_k`` experts the row is). The backward op gives dweight [E, K, N] from doutput
[1, M, N] and the tokens.
"""

from __future__ import annotations

from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import C_ENUMS, data_type
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.status import FeatureUnavailableError
from ...backend.descriptor import Descriptor
from ..model.api_enums import moe_grouped_matmul_mode
from ..model.arguments import as_int
from ..model.graph_errors import GraphError
from ..model.lower import Lowering
from ..model.node import Context, Node, number_error, row_major
from ..model.tensor import NOT_SET, Tensor, column_major_order, packed

INDEX_PORTS = ("first_token_offset", "token_index", "token_ks")
# GATHER mode finalizes on cuDNN 9.19.0 but its kernel then faults (illegal memory access, H200,
# even for an in-range permutation); it is refused up to this version rather than run
GATHER_FAULTS_THROUGH = 91900
INDEX_TYPES = (data_type.INT32,)


def as_mode(value: Any, where: str) -> moe_grouped_matmul_mode:
    """A moe_grouped_matmul_mode from the enum, its int value or its name ("gather")."""
    if isinstance(value, str):
        try:
            return moe_grouped_matmul_mode[value.upper()]
        except KeyError:
            pass
    elif hasattr(value, "__index__") and not isinstance(value, bool):
        try:
            return moe_grouped_matmul_mode(int(value))
        except ValueError:
            pass
    raise GraphError(f"{where}: mode must be a cudnn.moe_grouped_matmul_mode "
                     f"({', '.join(m.name for m in moe_grouped_matmul_mode)}), got {value!r}")


class _MoeNode(Node):
    """Shared checks: rank-3 tensors, INT32 routing tensors, a floating compute type."""

    def __init__(self, name: str, compute_data_type: Any) -> None:
        super().__init__(name, data_type.FLOAT if compute_data_type is None else compute_data_type)

    def infer(self, ctx: Context) -> None:
        for port, t in self.inputs.items():
            if t.get_value() is not None and not t.get_dim():
                raise number_error(self, port, t)
            if port in INDEX_PORTS and t.get_data_type() == NOT_SET:
                t.set_data_type(data_type.INT32)  # not the io type: offsets and indices are integers
        super().infer(ctx)
        for port, t in self.inputs.items():
            if len(t.get_dim()) != 3:
                raise GraphError(f"{self.at(port)}: expected 3 dims, got {t.get_dim()}")
            if port in INDEX_PORTS and t.get_data_type() not in INDEX_TYPES:
                raise GraphError(f"{self.at(port)}: expected an INT32 tensor, got {t.get_data_type().name}")
        if self.compute_data_type not in (data_type.FLOAT, data_type.HALF, data_type.BFLOAT16):
            raise GraphError(f"{self.label()}: compute_data_type must be FLOAT, HALF or BFLOAT16, got "
                             f"{self.compute_data_type.name}")

    def experts(self) -> int:
        """E: the number of expert groups (rows of first_token_offset)."""
        fto = self.inputs["first_token_offset"].get_dim()
        if fto[1:] != [1, 1]:
            raise GraphError(f"{self.at('first_token_offset')}: expected dims [E, 1, 1] (one start row per "
                             f"expert), got {fto}")
        return fto[0]


class MoeGroupedMatmul(_MoeNode):
    """output [1, M_out, N]: each token row times its expert's weight [K, N]."""

    op, tag = "moe_grouped_matmul", "MOE_GROUPED_MATMUL"

    def __init__(self, name: str, token: Tensor, weight: Tensor, first_token_offset: Tensor,
                 token_index: Tensor | None, token_ks: Tensor | None, mode: Any, compute_data_type: Any,
                 top_k: int) -> None:
        super().__init__(name, compute_data_type)
        self.mode = as_mode(mode, self.label())
        self.top_k = as_int(top_k, self.label(), "top_k")
        if self.top_k < 0:
            raise GraphError(f"{self.label()}: top_k must be an int >= 0, got {top_k!r}")
        self.inputs = {"token": token, "weight": weight, "first_token_offset": first_token_offset}
        wants_index = self.mode != moe_grouped_matmul_mode.NONE
        wants_ks = self.mode == moe_grouped_matmul_mode.SCATTER
        for port, t, wanted in (("token_index", token_index, wants_index), ("token_ks", token_ks, wants_ks)):
            if t is not None and not wanted:
                raise GraphError(f"{self.at(port)}: only {'GATHER and SCATTER' if port == 'token_index' else 'SCATTER'}"
                                 f" mode reads it, and this node's mode is {self.mode.name}")
            if t is None and wanted:
                raise GraphError(f"{self.at(port)}: {self.mode.name} mode needs it, got None")
            if t is not None:
                self.inputs[port] = t
        if wants_ks and self.top_k < 1:
            raise GraphError(f"{self.label()}: SCATTER mode needs top_k >= 1 (experts per token), got {self.top_k}")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        token, weight = self.inputs["token"].get_dim(), self.inputs["weight"].get_dim()
        experts = self.experts()
        if token[0] != 1:
            raise GraphError(f"{self.at('token')}: expected dims [1, M, K] (all rows in one group dim), got {token}")
        if weight[0] != experts:
            raise GraphError(f"{self.at('weight')}: dims {weight} have {weight[0]} experts but first_token_offset "
                             f"has {experts} ([E, K, N] and [E, 1, 1])")
        if weight[1] != token[2]:
            raise GraphError(f"{self.at('weight')}: K={weight[1]} of weight {weight} does not match K={token[2]} "
                             f"of token {token}")
        rows = token[1]
        index = self.inputs.get("token_index")
        if index is not None:
            idx = index.get_dim()
            if idx[0] != 1 or idx[2] != 1:
                raise GraphError(f"{self.at('token_index')}: expected dims [1, rows, 1], got {idx}")
            if self.mode == moe_grouped_matmul_mode.GATHER:
                rows = idx[1]
        ks = self.inputs.get("token_ks")
        if ks is not None and ks.get_dim() != (index.get_dim() if index is not None else None):
            raise GraphError(f"{self.at('token_ks')}: dims {ks.get_dim()} must match token_index "
                             f"{index.get_dim() if index is not None else None}")
        dims = [1, rows, weight[2]]
        self.set_output("output", self.outputs["output"], ctx, dims, row_major(dims), like=self.inputs["token"])

    def attributes(self) -> dict[str, Any]:
        return {"mode": self.mode.name, "top_k": self.top_k}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        if self.mode == moe_grouped_matmul_mode.GATHER and lw.version <= GATHER_FAULTS_THROUGH:
            raise FeatureUnavailableError(f"{self.label()}: GATHER mode (its kernel faults with an illegal memory "
                                          "access on cuDNN 9.19 in cudnn-py's GPU tests)", None, lw.version)
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR, self.name)
        mode = C_ENUMS["cudnnMoeGroupedMatmulMode_t"][f"CUDNN_MOE_GROUPED_MATMUL_MODE_{self.mode.name}"]
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_MODE, mode, T.CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE)
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_MATH_PREC, self.compute_data_type)
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_DESC, lw.tensor(self.inputs["token"]))
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_WEIGHT_DESC, lw.tensor(self.inputs["weight"]))
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_FIRST_TOKEN_OFFSET_DESC,
               lw.tensor(self.inputs["first_token_offset"]))
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_OUTPUT_DESC, lw.tensor(self.outputs["output"]))
        if "token_index" in self.inputs:
            op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_INDEX_DESC, lw.tensor(self.inputs["token_index"]))
        if self.mode == moe_grouped_matmul_mode.SCATTER:
            op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_KS_DESC, lw.tensor(self.inputs["token_ks"]))
            op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOP_K, self.top_k, T.CUDNN_TYPE_INT32)
        return [op.finalize()]


class MoeGroupedMatmulBackward(_MoeNode):
    """dweight [E, K, N] = per expert, its token rows transposed times its doutput rows; unset
    strides are column major per expert ([K * N, 1, K]), as the official infers."""

    op, tag = "moe_grouped_matmul_bwd", "MOE_GROUPED_MATMUL_BWD"

    def __init__(self, name: str, doutput: Tensor, token: Tensor, first_token_offset: Tensor,
                 compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"doutput": doutput, "token": token, "first_token_offset": first_token_offset}

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        dout, token = self.inputs["doutput"].get_dim(), self.inputs["token"].get_dim()
        experts = self.experts()
        if token[0] != 1 or dout[0] != 1:
            raise GraphError(f"{self.label()}: token {token} and doutput {dout} must be [1, M, K] and [1, M, N]")
        if dout[1] != token[1]:
            raise GraphError(f"{self.at('doutput')}: M={dout[1]} rows but token has M={token[1]}")
        dims = [experts, token[2], dout[2]]
        self.set_output("dweight", self.outputs["dweight"], ctx, dims, packed(dims, column_major_order(3)),
                        like=self.inputs["token"])

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_BWD_MATH_PREC, self.compute_data_type)
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_BWD_TOKEN_DESC, lw.tensor(self.inputs["token"]))
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_BWD_DOUTPUT_DESC, lw.tensor(self.inputs["doutput"]))
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_BWD_FIRST_TOKEN_OFFSET_DESC,
               lw.tensor(self.inputs["first_token_offset"]))
        op.set(A.CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_BWD_DWEIGHT_DESC, lw.tensor(self.outputs["dweight"]))
        return [op.finalize()]
