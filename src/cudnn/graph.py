"""``cudnn.graph``, as the official package names it: the module of ``graph``, ``jit`` and
``graph_cache`` (defined in `cudnn._graph.helpers`, imported when one is first read).

``import cudnn`` imports this module at once, as the official package does, so the name
``cudnn.graph`` is the function ``graph`` whatever is imported later: an ``import cudnn.graph``
or ``from cudnn.graph import jit`` finds the module imported and leaves the name alone. The
module itself stays small; the graph layer is imported when a graph is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._exports import lazy_exports

__all__ = ["graph", "graph_cache", "jit"]

if TYPE_CHECKING:
    from ._graph.helpers import graph as graph
    from ._graph.helpers import graph_cache as graph_cache
    from ._graph.helpers import jit as jit
else:
    __getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "cudnn._graph.helpers"))
