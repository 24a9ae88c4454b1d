"""The unified lowering of attention forward: one OPERATION_SDPA_FWD descriptor (cuDNN >= 9.13.1).

Q, K and V go to the backend in their natural [b, h, s, d] layout (no transposed K). What the
operation can express grows with the cuDNN version (reference section 5.2): Q/K/V/scale/Stats
from 9.13.1, a block mask from 9.14, padding and paged K/V from 9.15; bias, ALiBi, bands,
score_mod, sink and Max/Sum_exp need its SUBGRAPH / SOFTMAX attributes (9.21), which cudnn-py
does not build yet, so those calls take the composite lowering.
"""

from __future__ import annotations

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type
from ..._lib.status import version_string
from ...backend.descriptor import Descriptor
from ..model.expander import Expander
from ..model.lower import Lowering
from ..model.node import Context, Node
from ..model.sdpa_enums import diagonal_alignment
from .sdpa_common import SdpaBase, loaded_version

_BASE = 91301
_PORT_SINCE = {"Q": _BASE, "K": _BASE, "V": _BASE, "Attn_scale": _BASE, "Block_mask": 91400,
               "Page_table_K": 91500, "Page_table_V": 91500, "SEQ_LEN_Q": 91500, "SEQ_LEN_KV": 91500}
_ATTRS = {"Q": A.CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, "K": A.CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
          "V": A.CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, "O": A.CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
          "Stats": A.CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, "Attn_scale": A.CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC,
          "Block_mask": A.CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC,
          "Page_table_K": A.CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC,
          "Page_table_V": A.CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC,
          "SEQ_LEN_Q": A.CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
          "SEQ_LEN_KV": A.CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC}


def unified_refusal(node: SdpaBase, ctx: Context, version: int | None) -> str | None:
    """Why the SDPA_FWD operation cannot express ``node`` on ``version`` (None: the loaded
    cuDNN, or no version gate where none is loadable), or None when it can."""
    v = version if version is not None else loaded_version()
    o = node.opts
    if v is not None and v < _BASE:
        return f"it needs cuDNN >= 9.13.1, the loaded cuDNN is {version_string(v)}"
    if node.compute_data_type not in (data_type.NOT_SET, data_type.FLOAT):
        return f"the node's compute_data_type must be FLOAT or unset, got {node.compute_data_type.name}"
    if ctx.compute_data_type != data_type.FLOAT:
        return "the graph's compute_data_type must be FLOAT (pygraph(compute_data_type=cudnn.data_type.FLOAT))"
    for port in node.inputs:
        since = _PORT_SINCE.get(port)
        if since is None:
            return f"{port} is not supported by this lowering (cudnn-py builds no SDPA_FWD subgraph yet)"
        if v is not None and v < since:
            return f"{port} needs cuDNN >= {version_string(since)}, the loaded cuDNN is {version_string(v)}"
    for port in node.outputs:
        if port not in ("O", "Stats"):
            return f"output {port} is not supported by this lowering"
    features = {"use_alibi_mask": o.alibi, "a diagonal band / causal mask": o.left_bound is not None
                or o.right_bound is not None, "score_mod": o.score_mod is not None,
                "dropout": o.dropout_p is not None, "stats_use_log2": o.stats_use_log2,
                "BOTTOM_RIGHT alignment": o.alignment != diagonal_alignment.TOP_LEFT
                and (o.left_bound is not None or o.right_bound is not None)}
    for what, on in features.items():
        if on:
            return f"{what} needs the SDPA_FWD subgraph/softmax attributes (cuDNN >= 9.21), not built by cudnn-py"
    if o.padding and v is not None and v < 91500:
        return f"the padding mask needs cuDNN >= 9.15, the loaded cuDNN is {version_string(v)}"
    if o.unfuse_fma and v is not None and v < 92200:
        return f"unfuse_fma needs cuDNN >= 9.22, the loaded cuDNN is {version_string(v)}"
    return None


class UnifiedSDPA(Node):
    """One SDPA_FWD operation: the ports of the user's node, a float scale made a constant."""

    op, tag = "sdpa_fwd", "SDPA_FWD"

    def __init__(self, name: str, unfuse_fma: bool) -> None:
        super().__init__(name)
        self.unfuse_fma = unfuse_fma

    @classmethod
    def from_node(cls, node: SdpaBase, ex: Expander) -> UnifiedSDPA:
        op = cls(f"{node.name}.sdpa_fwd", node.opts.unfuse_fma)
        op.inputs = dict(node.inputs)
        if node.opts.attn_scale_value is not None:
            op.inputs["Attn_scale"] = ex.constant(node.opts.attn_scale_value, data_type.FLOAT,
                                                  f"{node.name}::attn_scale_value")
        op.outputs = {port: t for port, t in node.outputs.items() if node.wanted(port) is not None}
        return op

    def parts(self) -> list[Node]:
        return [self]

    def infer(self, ctx: Context) -> None:
        """Built from an inferred node: nothing left to infer."""

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, self.name)
        for port, t in {**self.inputs, **self.outputs}.items():
            lw.set(op, _ATTRS[port], lw.tensor(t))
        if self.unfuse_fma:
            lw.set(op, A.CUDNN_ATTR_OPERATION_SDPA_FWD_UNFUSE_FMA, True)
        return [op.finalize()]
