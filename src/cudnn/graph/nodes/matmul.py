"""Batched matrix multiply C = A @ B with broadcasting of the batch dims."""

from __future__ import annotations

from typing import Any

from ..._lib.enums import cudnnBackendAttributeName_t as A
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ...backend.descriptor import Descriptor
from ..errors import GraphError
from ..lower import Lowering
from ..node import Context, Node, broadcast, row_major
from ..tensor import Tensor


class Matmul(Node):
    """A [..., M, K] @ B [..., K, N] -> C [..., M, N]; batch dims broadcast."""

    op, tag = "matmul", "MATMUL"

    def __init__(self, name: str, a: Tensor, b: Tensor, compute_data_type: Any, padding: float) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"A": a, "B": b}
        try:
            self.padding = float(padding)
        except (TypeError, ValueError):
            raise GraphError(f"{self.label()}: padding must be a float, got {padding!r}") from None

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        a, b = self.inputs["A"].get_dim(), self.inputs["B"].get_dim()
        if len(a) < 2 or len(a) != len(b):
            raise GraphError(f"{self.label()}: A {a} and B {b} must have the same rank >= 2")
        if a[-1] != b[-2]:
            raise GraphError(f"{self.label()}: A {a} has K={a[-1]} but B {b} has K={b[-2]}")
        batch = broadcast(self, {"A": a[:-2], "B": b[:-2]}) if len(a) > 2 else []
        dims = batch + [a[-2], b[-1]]
        self.set_output("C", self.outputs["C"], ctx, dims, row_major(dims), like=self.inputs["A"])

    def attributes(self) -> dict[str, Any]:
        return {"padding_value": self.padding}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        mm = lw.descriptor(D.CUDNN_BACKEND_MATMUL_DESCRIPTOR, self.name)
        mm.set(A.CUDNN_ATTR_MATMUL_COMP_TYPE, self.compute_data_type)
        if self.padding != 0.0:
            mm.set(A.CUDNN_ATTR_MATMUL_PADDING_VALUE, self.padding)
        mm.finalize()
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_ADESC, lw.tensor(self.inputs["A"]))
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_BDESC, lw.tensor(self.inputs["B"]))
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_CDESC, lw.tensor(self.outputs["C"]))
        op.set(A.CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
        return [op.finalize()]
