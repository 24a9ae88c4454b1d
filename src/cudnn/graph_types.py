"""``cudnn.graph_types``, as the official package names it: the ``Tensor`` of a graph and the
``NodeType`` of its nodes (cudnn-py's live in cudnn.graph; this module only names them)."""

from .graph.graph_types import NodeType
from .graph.tensor import Tensor

__all__ = ["NodeType", "Tensor"]
