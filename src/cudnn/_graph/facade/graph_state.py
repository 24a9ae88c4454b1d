"""The state of a ``pygraph`` that the parts of its class read: the attributes ``pygraph.__init__``
sets, declared once for the classes ``pygraph`` is made of (`PlanQueries`, `GraphText`), and
how messages name a graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..model import keywords

if TYPE_CHECKING:
    from ..build.pipeline import Pipeline
    from ..model.node import Context, Node
    from ..model.node_types import cuda_graph_retention


class GraphState:
    """What ``pygraph.__init__`` sets and its parts read (``pygraph`` owns and writes it)."""

    name: str
    sm_count: int | None
    cuda_graph_retention: cuda_graph_retention | None
    _nodes: list[Node]
    _context: Context
    _pipeline: Pipeline
    _pinned: Any

    def label(self) -> str:
        """'graph 'name'' (or 'graph'): how messages name this graph."""
        return f"graph {self.name!r}" if self.name else "graph"

    if TYPE_CHECKING:  # defined by pygraph, called by its parts
        def _op_graph(self) -> Any: ...

        def _check_overrides(self, op: str, override_uids: Sequence[int] | None,
                             override_shapes: Sequence[Sequence[int]] | None,
                             override_strides: Sequence[Sequence[int]] | None) -> None: ...


# as every public method of pygraph: an unknown keyword is refused by name
keywords.name_unknown_keywords(GraphState, "pygraph")
