"""Paged K/V cache load: gathers a [b, h, s, d] view from a [num_blocks, h, block, d] container.

Row i of batch n comes from block ``page_table[n, 0, i // block, 0]`` of the container;
SEQUENCE ([b, 1, 1, 1] INT32) gives each batch's valid length. The output is virtual: the
attention composite feeds it to its matmuls (Kᵀ in [b, h, d, s] layout for the first).
"""

from __future__ import annotations

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type
from ...backend.descriptor import Descriptor
from ..model.graph_errors import GraphError
from ..model.lower import Lowering
from ..model.node import Context, Node
from ..model.tensor import Tensor


class PagedCacheLoad(Node):
    """Y (dims/strides preset by the caller) = pages of CONTAINER picked by PAGE_TABLE."""

    op, tag = "paged_cache_load", "PAGED_CACHE_LOAD"

    def __init__(self, name: str, container: Tensor, sequence: Tensor, page_table: Tensor) -> None:
        super().__init__(name)
        self.inputs = {"CONTAINER": container, "SEQUENCE": sequence, "PAGE_TABLE": page_table}

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        if self.inputs["PAGE_TABLE"].get_data_type() != data_type.INT32:
            raise GraphError(f"{self.at('PAGE_TABLE')}: must be INT32, got "
                             f"{self.inputs['PAGE_TABLE'].get_data_type().name}")
        y = self.outputs["Y"]
        if not y.get_dim() or not y.get_stride():
            raise GraphError(f"{self.at('Y')}: the output's dims and strides must be set")
        self.set_output("Y", y, ctx, y.get_dim(), y.get_stride(), like=self.inputs["CONTAINER"])

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, lw.tensor(self.inputs["CONTAINER"]))
        op.set(A.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, lw.tensor(self.inputs["SEQUENCE"]))
        op.set(A.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, lw.tensor(self.inputs["PAGE_TABLE"]))
        return [op.finalize()]
