"""``cudnn.graph_types``, as the official package names it: the ``Tensor`` of a graph and the
``NodeType`` of its nodes (cudnn-py's live in cudnn.graph; this module only names them)."""

from ._graph.model.node_types import NodeType
from ._graph.model.tensor import Tensor

__all__ = ["NodeType", "Tensor"]
