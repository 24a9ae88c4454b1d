"""1.32's graph inspection (``pygraph.tensors``, ``find_tensor``, ``get_inputs``, ``get_outputs``,
``inspect``): the graph's tensors read from its nodes when asked, nothing kept.

A name is a label that two tensors may share (as in the official, where uids are identities):
``tensors`` leaves such names out and ``find_tensor`` refuses them, saying which uids share them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..build.pipeline import all_tensors
from ..model.node import Node
from ..model.tensor import NOT_SET, Tensor


def by_name(nodes: Sequence[Node]) -> tuple[dict[str, Tensor], dict[str, list[Tensor]]]:
    """(name -> tensor for names one tensor has, name -> tensors for names several share)."""
    found: dict[str, list[Tensor]] = {}
    for t in all_tensors(nodes):
        found.setdefault(t.get_name(), []).append(t)
    unique = {name: ts[0] for name, ts in found.items() if len(ts) == 1}
    return unique, {name: ts for name, ts in found.items() if len(ts) > 1}


def find_tensor(nodes: Sequence[Node], key: Any) -> Tensor | None:
    """The tensor named ``key`` (a str) or with uid ``key`` (an int); None if none has it."""
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"find_tensor: expected a tensor name (str) or uid (int), got {key!r}")
    if isinstance(key, int):
        return next((t for t in all_tensors(nodes) if t.has_uid() and t.get_uid() == key), None)
    unique, shared = by_name(nodes)
    if key in shared:
        uids = [t.get_uid() if t.has_uid() else None for t in shared[key]]
        raise ValueError(f"find_tensor: {len(shared[key])} tensors are named {key!r} (uids {uids}; None: not "
                         "assigned yet): look one up by uid, or give them distinct names")
    return unique.get(key)


def inputs(nodes: Sequence[Node]) -> list[Tensor]:
    """Tensors bound at execute that no node produces: non-virtual, not a Python number the
    graph carries (those are constants, bound by the graph itself)."""
    produced = {id(t) for n in nodes for t in n.outputs.values()}
    return [t for t in all_tensors(nodes)
            if not t.get_is_virtual() and id(t) not in produced and t.get_value() is None]


def outputs(nodes: Sequence[Node]) -> list[Tensor]:
    """Non-virtual tensors a node produces."""
    return [t for n in nodes for t in n.outputs.values() if not t.get_is_virtual()]


def inspect(graph: Any) -> dict[str, Any]:
    """The graph's structure as 1.32's ``inspect()`` gives it: context, nodes (name, type, ports,
    params) and tensors by name (dims, strides, dtype, virtual, uid)."""
    ctx = graph.context
    nodes = graph.nodes
    unique, _ = by_name(nodes)
    return {
        "context": {"io_data_type": _type_text(ctx.io_data_type),
                    "compute_data_type": _type_text(ctx.compute_data_type)},
        "nodes": [{"name": n.name, "type": n.node_type.name,
                   "inputs": {port: t.get_name() for port, t in n.inputs.items()},
                   "outputs": {port: t.get_name() for port, t in n.outputs.items()},
                   "params": n.params} for n in nodes],
        "tensors": {name: {"dim": t.get_dim(), "stride": t.get_stride(), "dtype": _type_text(t.get_data_type()),
                           "is_virtual": t.get_is_virtual(), "uid": t.get_uid()} for name, t in unique.items()},
    }


def _type_text(dt: Any) -> str:
    """'data_type.HALF', or 'None' for a type not set (as the official prints an unset one)."""
    return "None" if dt is None or dt == NOT_SET else str(dt)
