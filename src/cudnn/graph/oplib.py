"""The op methods of ``pygraph``: plain functions of the graph, registered by name.

Each op module (``ops``, ``norm_ops``, ``sdpa_ops``) defines its methods as functions whose
first parameter is the graph and registers them with ``@op``; ``pygraph`` binds every
registered function as a method. ``cudnn.Graph`` offers exactly these names in its block.
An op builds its node through the graph's op-builder protocol: ``input_tensor`` (a tensor from
a cudnn.tensor, a framework tensor or a number), ``node_name`` and ``add_node``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

OPS: dict[str, Callable[..., Any]] = {}


def op(fn: F) -> F:
    """Register ``fn`` as the ``pygraph`` method of the same name."""
    return register(fn.__name__, fn)


def register(name: str, fn: F) -> F:
    """Register ``fn`` as the ``pygraph`` method ``name`` (aliases, generated methods)."""
    if name in OPS and OPS[name] is not fn:
        raise RuntimeError(f"pygraph op {name!r} is registered twice")
    OPS[name] = fn
    return fn
