"""Expansion: composite nodes replaced by primitive ones before lowering.

Runs after inference and before uids are assigned. A composite node (attention, a norm with
fused pointwise work) returns the nodes that replace it; their intermediates are virtual
tensors, and scratch tensors the user does not pass live in the graph-reserved prefix of the
workspace. Lowering only ever sees primitive nodes; the printed graph shows the user's.

The state of one expansion and the helpers composites make tensors with are `expander`'s;
here: `expand` (the primitive nodes of a list of nodes), `inferred` (a part made and inferred)
and `attrs_of`.
"""

from __future__ import annotations

from typing import Any

from .expander import Expander
from .node import Context, Node
from .tensor import Tensor


def expand(nodes: list[Node], ctx: Context, version: int, prefer: Any = None) -> tuple[list[Node], Expander]:
    """The primitive nodes that compute ``nodes`` (composites expanded, recursively, with the
    lowering ``prefer`` where a composite offers it), and the expansion's state (scratch
    tensors, lowerings chosen and alternatives)."""
    ex = Expander(ctx, version, prefer)
    out: list[Node] = []
    for node in nodes:
        _visit(node, ex, out)
    return out, ex


def _visit(node: Node, ex: Expander, out: list[Node]) -> None:
    """Append to ``out`` the primitive nodes of ``node``, its parts expanded depth first (a
    function of the module, not a closure: a recursive closure is a reference cycle, which
    would keep the expansion alive until the garbage collector next runs)."""
    parts = node.expand(ex)
    if parts is None:
        out.append(node)
        return
    for part in parts:
        _visit(part, ex, out)


def inferred(node: Node, ctx: Context, outputs: dict[str, Tensor]) -> Node:
    """``node`` with ``outputs`` attached and its ``infer`` run: how composites make parts."""
    node.outputs.update(outputs)
    node.infer(ctx)
    return node


def attrs_of(**kw: Any) -> dict[str, Any]:
    """Keyword arguments without the None ones (optional pointwise attributes)."""
    return {k: v for k, v in kw.items() if v is not None}
