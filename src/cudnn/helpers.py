"""``cudnn.graph``, ``cudnn.jit`` and ``cudnn.graph_cache``: the documented helpers for building
and caching graphs in larger codebases::

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A])
    @cudnn.graph_cache(key_fn=lambda x, w: (x.shape, x.stride(), w.shape))
    def conv(x, w):
        with cudnn.graph(handle) as (g, _):
            X, W = g.tensor_like(x), g.tensor_like(w)
            Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
        return g, [X, W, Y]          # jit builds g and returns (g, [uids])

``cudnn.graph`` is also the name of the builder subpackage (src/cudnn/graph/). Rather than
rebinding the attribute to a function, which would break ``import cudnn.graph.tensor as t`` and
``cudnn.graph.pygraph``, the subpackage's module object is given a class that makes it callable
(``make_callable``): one object that is both the package and the context manager.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ._lib.enums import data_type, heur_mode

if TYPE_CHECKING:
    from .graph import pygraph


@contextmanager
def graph(handle: Any, name: str = "cudnn_graph", io_data_type: Any = data_type.HALF,
          intermediate_data_type: Any = data_type.FLOAT,
          compute_data_type: Any = data_type.FLOAT, **graph_kwargs: Any) -> Iterator[tuple[pygraph, list[Any]]]:
    """A new pygraph on ``handle`` with these defaults, yielded as ``(g, [])``; nothing on exit.
    ``graph_kwargs`` go to ``cudnn.pygraph`` (``is_cuda_graph_replay_expected=True``, ``sm_count``...)."""
    # Imported here: `cudnn` makes the graph subpackage callable (make_callable) while that
    # subpackage is being bound, so this module must be importable without importing it.
    from .graph import pygraph

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


class _CallableGraphPackage(types.ModuleType):
    """The ``cudnn.graph`` subpackage, callable as the ``cudnn.graph(handle, ...)`` context manager."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return graph(*args, **kwargs)


def make_callable(package: types.ModuleType) -> None:
    """Let ``package`` (cudnn.graph) be called as ``graph`` while staying the same module object."""
    package.__class__ = _CallableGraphPackage
    package.__signature__ = inspect.signature(graph)  # type: ignore[attr-defined]
