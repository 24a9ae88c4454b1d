"""What an op method needs of the graph it adds a node to: the op-builder protocol that
``pygraph`` implements (``input_tensor``, ``node_name``, ``add_node``, ``nodes``). The op
methods are written against it, so they never import the class built on them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..model.node import Node
from ..model.tensor import Tensor


class GraphOps(Protocol):
    """The graph as an op method sees it."""

    @property
    def nodes(self) -> list[Node]:
        """The graph's nodes in the order they were added."""
        ...

    def input_tensor(self, value: Any, op: str, param: str) -> Tensor:
        """An op's input: a cudnn.tensor, a framework tensor, or a Python number (by value)."""
        ...

    def node_name(self, wanted: str) -> str:
        """A unique node name: the one wanted, or a generated one when empty."""
        ...

    def add_node(self, node: Node, ports: Sequence[str]) -> list[Tensor]:
        """Add ``node`` with fresh virtual outputs named ``node::PORT``; returns them in order."""
        ...
