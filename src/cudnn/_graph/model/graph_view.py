"""The graph as the stages below ``pygraph`` see it: `GraphView`, a typing Protocol.

Building, printing and keeping plans (`build`, `text`, `records`) are handed a graph and read
its nodes, context and build settings through this view; they never import the class users
call (`pygraph`), which sits above them and satisfies the view. Where a stage must make a graph
for user code (an SDPA ``score_mod`` is handed a child graph), `new_graph` makes one of the
class ``pygraph`` installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .node import Node
    from .node_types import Context, cuda_graph_retention
    from .shared_tensors import SharedTensors


class GraphView(Protocol):
    """What the stages below ``pygraph`` read of a graph (and set: rebuilding one from its JSON,
    ``name`` and ``sm_count``; joining a sub-graph to its parent, ``shared``). The op methods
    (``matmul``, ``reshape``, ...) are the public API, called by name where a graph is rebuilt."""

    name: str
    sm_count: int | None
    shared: SharedTensors

    @property
    def nodes(self) -> list[Node]: ...

    @property
    def context(self) -> Context: ...

    @property
    def handle(self) -> Any: ...

    @property
    def device_property(self) -> Any: ...

    @property
    def kernel_cache(self) -> Any: ...

    @property
    def cuda_graph_retention(self) -> cuda_graph_retention | None: ...

    @property
    def is_dynamic_shape_enabled(self) -> bool: ...

    @property
    def is_override_shape_enabled(self) -> bool: ...

    def label(self) -> str: ...

    def key(self) -> int: ...

    def validate(self) -> None: ...

    def to_json(self) -> dict[str, Any]: ...


# The class users call (``pygraph``), which installs itself when it is defined: a stage below it
# that must make a graph for user code to fill (an SDPA ``score_mod`` callback is handed a child
# graph) makes it with `new_graph`, without importing the class.
_graph_class: Callable[..., GraphView] | None = None


def install_graph_class(cls: Callable[..., GraphView]) -> None:
    """Make ``cls`` the class `new_graph` instantiates (``pygraph`` calls this once)."""
    global _graph_class
    _graph_class = cls


def new_graph(name: str, ctx: Context) -> GraphView:
    """A new, empty graph named ``name`` whose data types are ``ctx``'s, of the class users call."""
    if _graph_class is None:
        raise RuntimeError("no graph class is installed: import cudnn._graph.pygraph first")
    return _graph_class(name, ctx.io_data_type, ctx.intermediate_data_type, ctx.compute_data_type)
