"""``cudnn.graph``, ``cudnn.jit`` and ``cudnn.graph_cache``: the documented helpers for building
and caching graphs in larger codebases::

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A])
    @cudnn.graph_cache(key_fn=lambda x, w: (x.shape, x.stride(), w.shape))
    def conv(x, w):
        with cudnn.graph(handle) as (g, _):
            X, W = g.tensor_like(x), g.tensor_like(w)
            Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
        return g, [X, W, Y]          # jit builds g and returns (g, [uids])

``cudnn.graph`` (the public module, cudnn/graph.py) serves these three names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._lib.enums import data_type, heur_mode

if TYPE_CHECKING:
    from .pygraph import pygraph


@contextmanager
def graph(handle: Any, name: str = "cudnn_graph", io_data_type: Any = data_type.HALF,
          intermediate_data_type: Any = data_type.FLOAT,
          compute_data_type: Any = data_type.FLOAT, **graph_kwargs: Any) -> Iterator[tuple[pygraph, list[Any]]]:
    """A new pygraph on ``handle`` with these defaults, yielded as ``(g, [])``; nothing on exit.
    ``graph_kwargs`` go to ``cudnn.pygraph`` (``is_cuda_graph_replay_expected=True``, ``sm_count``...)."""
    from .pygraph import pygraph  # the graph layer, imported when a graph is made

    yield pygraph(handle=handle, name=name, io_data_type=io_data_type,
                  intermediate_data_type=intermediate_data_type, compute_data_type=compute_data_type,
                  **graph_kwargs), []


def jit(heur_modes: Any = heur_mode.A, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a function returning ``(g, tensors)``: build ``g`` with ``heur_modes`` unless it has
    plans already, and return ``(g, [uids of tensors])``. Extra keyword arguments are ignored."""
    modes = list(heur_modes) if isinstance(heur_modes, (list, tuple)) else [heur_modes]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> tuple[Any, list[int]]:
            g, tensors = fn(*args, **kw)
            if g.get_execution_plan_count() <= 0:
                g.build(modes)
            return g, [t.get_uid() for t in tensors]

        return wrapper

    return decorate


def graph_cache(key_fn: Callable[..., Hashable],
                maxsize: int = 256) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Cache a graph-making function's results by ``key_fn(*args, **kwargs)``; past ``maxsize``
    entries the oldest inserted one is dropped (first in, first out)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        cache: dict[Hashable, Any] = {}

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = key_fn(*args, **kwargs)
            if key in cache:
                return cache[key]
            result = fn(*args, **kwargs)
            if len(cache) >= maxsize:
                cache.pop(next(iter(cache)))
            cache[key] = result
            return result

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper

    return decorate
