"""Batched matrix multiply C = A @ B with broadcasting of the batch dims.

Batch dims broadcast numpy-style, and also by groups where one size divides the other (the
backend's grouped broadcast: attention's Q [b, 8, s, d] @ Kᵀ [b, 2, d, s] for GQA). Optional
M/N/K override tensors ([b, 1, 1, 1] INT32, e.g. per-batch sequence lengths) tell cuDNN the
valid extent of each problem; ``padding`` fills the rest of C when one is set.
"""

from __future__ import annotations

from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ...backend.descriptor import Descriptor
from ..model.arguments import as_float
from ..model.graph_errors import GraphError
from ..model.lower import Lowering
from ..model.node import Context, Node, number_error, row_major
from ..model.tensor import Tensor

OVERRIDES = {"M_OVERRIDE": A.CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
             "N_OVERRIDE": A.CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
             "K_OVERRIDE": A.CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC}


class Matmul(Node):
    """A [..., M, K] @ B [..., K, N] -> C [..., M, N]; batch dims broadcast."""

    op, tag = "matmul", "MATMUL"

    def __init__(self, name: str, a: Tensor, b: Tensor, compute_data_type: Any, padding: float | None,
                 overrides: dict[str, Tensor | None] | None = None) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"A": a, "B": b}
        for port, t in self.inputs.items():
            if t.get_value() is not None and not t.get_dim():
                raise number_error(self, port, t)
        for port, override in (overrides or {}).items():
            if port not in OVERRIDES:
                raise GraphError(f"{self.label()}: unknown override {port!r}; expected one of {sorted(OVERRIDES)}")
            if override is not None:
                self.inputs[port] = override
        self.padding_set = padding is not None
        self.padding = as_float(padding, self.label(), "padding") if padding is not None else 0.0

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        a, b = self.inputs["A"].get_dim(), self.inputs["B"].get_dim()
        if len(a) < 2 or len(a) != len(b):
            raise GraphError(f"{self.label()}: A {a} and B {b} must have the same rank >= 2")
        if a[-1] != b[-2]:
            raise GraphError(f"{self.label()}: A {a} has K={a[-1]} but B {b} has K={b[-2]}")
        batch = []
        for i, (x, y) in enumerate(zip(a[:-2], b[:-2])):
            if max(x, y) % min(x, y):
                raise GraphError(f"{self.label()}: batch dim {i} of A {a} and B {b} do not broadcast "
                                 "(sizes must be equal, 1, or one a multiple of the other)")
            batch.append(max(x, y))
        dims = [*batch, a[-2], b[-1]]
        self.set_output("C", self.outputs["C"], ctx, dims, row_major(dims), like=self.inputs["A"])

    def attributes(self) -> dict[str, Any]:
        return {"padding_value": self.padding}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        mm = lw.descriptor(D.CUDNN_BACKEND_MATMUL_DESCRIPTOR, self.name)
        mm.set(A.CUDNN_ATTR_MATMUL_COMP_TYPE, self.compute_data_type)
        if self.padding_set or self.padding != 0.0:
            mm.set(A.CUDNN_ATTR_MATMUL_PADDING_VALUE, self.padding)
        mm.finalize()
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_ADESC, lw.tensor(self.inputs["A"]))
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_BDESC, lw.tensor(self.inputs["B"]))
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_CDESC, lw.tensor(self.outputs["C"]))
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
        for port, attr in OVERRIDES.items():
            if port in self.inputs:
                lw.set(op, attr, lw.tensor(self.inputs[port]))
        return [op.finalize()]
