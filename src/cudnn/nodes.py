"""``cudnn.nodes``, as the official package names it: ``Node``, the base of a graph's nodes
(cudnn-py's lives in cudnn.graph.node; this module only names it)."""

from .graph.node import Node

__all__ = ["Node"]
