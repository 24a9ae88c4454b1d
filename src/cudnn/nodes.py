"""``cudnn.nodes``, as the official package names it: ``Node``, the base of a graph's nodes
(cudnn-py's lives in cudnn._graph.model.node; this module only names it)."""

from ._graph.model.node import Node

__all__ = ["Node"]
