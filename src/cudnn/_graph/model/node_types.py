"""The 1.32 names for what a graph is made of: ``NodeType``, ``GraphContext``, ``cuda_graph_retention``.

``NodeType`` lists the official package's node types (``cudnn.graph_types.NodeType``), with its
values; `node_type_of` says which one a cudnn-py node is. ``cuda_graph_retention`` is the
official enum of how CUDA graphs recorded from a graph keep its plans alive (PER_GRAPH, NONE),
with the official's rule for the mode in effect (`effective_retention`).
"""

from __future__ import annotations

import os
from typing import Any

from ..._lib.api_enum import ApiEnum
from ..._lib.enums import data_type
from ..._lib.lazy_enums import LazyEnums
from ..._lib.record import Record
from .tensor import NOT_SET

__all__ = ["GraphContext", "NodeType", "cuda_graph_retention", "effective_retention", "node_type_of"]  # noqa: F822 - NodeType: see __getattr__

_NODE_TYPES = (
    "COMPOSITE", "CONV_FPROP", "CONV_DGRAD", "CONV_WGRAD", "GENSTATS", "RESHAPE", "SLICE", "CONCATENATE",
    "TRANSPOSE", "ROPE", "ROPE_BWD", "MOE_GROUPED_MATMUL_BWD", "MATMUL", "MATMUL_FP8", "POINTWISE",
    "REDUCTION", "RMSNORM", "RMSNORM_BWD", "LAYERNORM", "LAYERNORM_BWD", "ADALAYERNORM", "ADALAYERNORM_BWD",
    "INSTANCENORM", "INSTANCENORM_BWD", "BATCHNORM", "BATCHNORM_INFERENCE", "BATCHNORM_BWD", "SDPA",
    "SDPA_BWD", "SDPA_FP8", "SDPA_FP8_BWD", "SDPA_MXFP8", "SDPA_MXFP8_BWD", "GDN", "GDN_BWD", "KDA",
    "KDA_BWD", "GDN2", "GDN2_BWD", "MOE_GROUPED_MATMUL", "BLOCK_SCALE_QUANTIZE", "BLOCK_SCALE_DEQUANTIZE",
    "GDP", "GDP_BWD", "GDN_SUMMARY", "KDA_SUMMARY", "GDN2_SUMMARY", "GDP_SUMMARY", "GDN_SUMMARY_BWD",
    "KDA_SUMMARY_BWD", "GDN2_SUMMARY_BWD", "GDP_SUMMARY_BWD", "MAMBA2", "MAMBA2_BWD", "MAMBA2_SUMMARY",
    "MAMBA2_SUMMARY_BWD",
)

# The official's NodeType, in its order and with its values (enum.auto(): 1, 2, ...); an IntEnum
# here, printed as the official's ('NodeType.MATMUL'), like every public enum of cudnn-py. It is
# built the first time it is read (PEP 562 __getattr__), as the generated enums are.
_enums = LazyEnums(__name__, {"NodeType": {name: i for i, name in enumerate(_NODE_TYPES, 1)}},
                   {"NodeType": "The type of a graph node (``Node.node_type``); the official package's NodeType."},
                   printed_by_name=("NodeType",))
__getattr__ = _enums.build
__dir__ = _enums.dir


class Context(Record):
    """Graph-wide defaults: what unset data types of tensors and nodes resolve to (the official
    ``GraphContext``; nodes are inferred in one, `node.Node.infer`)."""

    __slots__ = ("io_data_type", "intermediate_data_type", "compute_data_type")

    def __init__(self, io_data_type: data_type = NOT_SET, intermediate_data_type: data_type = NOT_SET,
                 compute_data_type: data_type = NOT_SET) -> None:
        self.io_data_type = io_data_type
        self.intermediate_data_type = intermediate_data_type
        self.compute_data_type = compute_data_type


GraphContext = Context


class cuda_graph_retention(ApiEnum):  # the official name
    """How CUDA graphs recorded from a graph's plans keep them alive: PER_GRAPH (each CUDA graph
    holds a reference) or NONE (the application keeps the graph's plans alive)."""

    PER_GRAPH = 0
    NONE = 1


def as_retention(value: Any, what: str = "pygraph: cuda_graph_retention") -> cuda_graph_retention | None:
    """None (unset), or a cuda_graph_retention (also from its name, any case)."""
    if value is None or isinstance(value, cuda_graph_retention):
        return value
    if isinstance(value, str) and value.upper() in cuda_graph_retention.__members__:
        return cuda_graph_retention[value.upper()]
    raise TypeError(f"{what}: expected a cudnn.cuda_graph_retention (PER_GRAPH or NONE) or None, got {value!r}")


def effective_retention(explicit: cuda_graph_retention | None) -> cuda_graph_retention:
    """The mode in effect, by the official's rule: the one given, else the environment variable
    CUDNN_CUDA_GRAPH_RETENTION ("per_graph" or "none"; other values are ignored), else PER_GRAPH."""
    if explicit is not None:
        return explicit
    value = os.environ.get("CUDNN_CUDA_GRAPH_RETENTION", "").strip().lower()
    return cuda_graph_retention.NONE if value == "none" else cuda_graph_retention.PER_GRAPH


# cudnn-py's node op names whose official NodeType is not their upper-cased name
_OP_TYPES = {"sdpa_fwd": "SDPA", "rope_backward": "ROPE_BWD"}


def node_type_of(node: Any) -> Any:
    """The NodeType of a cudnn-py node: POINTWISE for every pointwise op, else its op name
    upper-cased with ``_backward`` as ``_BWD`` (``batchnorm_backward`` -> BATCHNORM_BWD);
    COMPOSITE for an op the official has no type for."""
    node_types = globals().get("NodeType")
    if node_types is None:
        node_types = _enums.build("NodeType")
    if getattr(node, "tag", "") == "POINTWISE":
        return node_types.POINTWISE
    op = str(getattr(node, "op", ""))
    name = _OP_TYPES.get(op, op.upper().replace("_BACKWARD", "_BWD"))
    return node_types.__members__.get(name, node_types.COMPOSITE)
