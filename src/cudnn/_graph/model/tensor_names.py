"""The tensors a graph may hold, and their names.

A node's inputs are tensors declared for the graph (``tensor()``, ``tensor_like()``, numbers the
ops turn into constants) or outputs of the graph's own nodes: the output of a node of another
graph is refused when the op is called. A tensor left unnamed (and a constant made from a
number) gets a generated name, ``node::PORT``, which gives way (``node::PORT.1``) to a name the
user chose; two tensors the user gave one name are allowed, as in the official (the printed JSON
keys the second ``name#2``). A tensor has one writer, and one the graph reads as an input is not
also written by it: the fresh outputs ``add_node`` makes keep this by construction,
``check_writers`` holds every output to it, those the caller passes in (attention's score_max,
dBias, ...) included.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence

from .graph_errors import GraphError
from .node import Node
from .tensor import Tensor

# Tensor -> the name generated for it; the name counts as generated while the tensor keeps it.
_GENERATED: weakref.WeakKeyDictionary[Tensor, str] = weakref.WeakKeyDictionary()


def adopt(nodes: Sequence[Node], node: Node) -> None:
    """Check ``node``'s inputs before the graph of ``nodes`` adds it, and name those unnamed."""
    for port, t in node.inputs.items():
        producer = t.producer  # None also where the producing graph is gone: its label is kept
        if t.producer_label and (producer is None or not any(n is producer for n in nodes)):
            raise GraphError(f"{node.at(port)} tensor {t.label()} is an output of {t.producer_label} of "
                             "another graph; a graph's inputs are its own tensors: declare one with "
                             "graph.tensor_like(t) (same attributes) and give it that output's buffer")
    taken = {t.get_name() for _, _, t in _ports([*nodes, node])}
    for port, t in node.inputs.items():
        if not t.get_name():
            _generate(t, f"{node.name}::{port}", taken)


def check_names(nodes: Sequence[Node]) -> None:
    """Make generated names unique and unlike every name the user gave. Two tensors the user
    gave one name are allowed, as in the official (tensors are bound by object or uid, never by
    name); only the graph's JSON, which keys tensors by name, shows one of them."""
    taken: set[str] = set()
    generated: list[tuple[Tensor, str]] = []
    for where, port, t in _ports(nodes):
        name = t.get_name()
        if not name or _is_generated(t):
            generated.append((t, f"{where.name}::{port}"))
        else:
            taken.add(name)
    seen: set[int] = set()
    for t, wanted in generated:
        if id(t) in seen:
            continue
        seen.add(id(t))
        current = t.get_name()
        if current and current not in taken:
            taken.add(current)
        else:
            _generate(t, wanted, taken)


def check_writers(nodes: Sequence[Node]) -> None:
    """Refuse a tensor on two output ports, an output that is also an input of its node, one
    written by two nodes, and one read by an earlier node as a graph input and then written."""
    writers: dict[int, tuple[Node, str]] = {}
    readers: dict[int, tuple[Node, str]] = {}
    for node in nodes:
        ports: dict[int, str] = {}
        for port, t in node.outputs.items():
            at = f"{node.at(node.arg(port))} tensor {t.label()}"
            first = ports.setdefault(id(t), port)
            if first != port:
                raise GraphError(f"{node.at(node.arg(first))} and {node.arg(port)} are one tensor {t.label()}; "
                                 "each output needs a tensor of its own")
            read = next((p for p, x in node.inputs.items() if x is t), None)
            if read is not None:
                raise GraphError(f"{at} is also its input {node.arg(read)}; an output cannot be one of its "
                                 "node's inputs: give it a tensor of its own")
            if id(t) in writers:
                other, where = writers[id(t)]
                raise GraphError(f"{at} is already written by {other.at(other.arg(where))}; a tensor has one "
                                 "writer: give each output a tensor of its own")
            if id(t) in readers:
                other, where = readers[id(t)]
                raise GraphError(f"{at} is read earlier by {other.at(other.arg(where))} as a graph input; the "
                                 "graph cannot also write it: give the output a tensor of its own")
        for port, t in node.inputs.items():
            readers.setdefault(id(t), (node, port))
        writers.update((id(t), (node, port)) for port, t in node.outputs.items())


def _ports(nodes: Sequence[Node]) -> Iterator[tuple[Node, str, Tensor]]:
    """(node, port, tensor) for every port, ragged offsets as ``PORT::ragged_offset``."""
    for node in nodes:
        for port, t in {**node.inputs, **node.outputs}.items():
            yield node, port, t
            ragged = t.get_ragged_offset()
            if ragged is not None:
                yield node, f"{port}::ragged_offset", ragged


def _is_generated(t: Tensor) -> bool:
    return _GENERATED.get(t) == t.get_name() != ""


def _generate(t: Tensor, wanted: str, taken: set[str]) -> None:
    name, i = wanted, 0
    while name in taken:
        i += 1
        name = f"{wanted}.{i}"
    t.set_name(name)
    _GENERATED[t] = name
    taken.add(name)
