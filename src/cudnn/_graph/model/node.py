"""The node protocol and the shape/stride/dtype helpers nodes share.

A node is data plus small methods: ``infer`` fills what the user left unset and checks the
rest, ``lower`` emits finalized backend operation descriptors, ``attributes`` gives the
op-specific JSON. Errors name the node and port: ``conv_fprop 'conv2d': W ...``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..._lib.enums import data_type
from ..._lib.layout import row_major
from .graph_errors import GraphError
from .node_types import Context, node_type_of
from .tensor import NOT_SET, Tensor, as_data_type

if TYPE_CHECKING:
    from ...backend.descriptor import Descriptor
    from .expander import Expander
    from .lower import Lowering


# Accumulator type a node computes in when neither the node nor the graph names one.
_DEFAULT_COMPUTE = {
    data_type.DOUBLE: data_type.DOUBLE,
    data_type.INT8: data_type.INT32,
    data_type.UINT8: data_type.INT32,
    data_type.INT32: data_type.INT32,
    data_type.INT64: data_type.INT64,
    data_type.BOOLEAN: data_type.FLOAT,
}


class Node:
    """One operation of a graph. Subclasses set ``op`` (method name) and ``tag`` (JSON)."""

    op: str = ""  # set by the class; an instance may refine it (a pointwise node says "relu")
    tag: ClassVar[str] = ""
    # the op call's argument name of ports named otherwise (sdpa's Max is score_max), for messages
    port_args: ClassVar[dict[str, str]] = {}
    # False where a captured execute of this node's engine was seen writing other bits than the
    # execute itself: packs of a graph holding it are executed every time (cudnn.backend.replay)
    replayable: bool = True
    # outputs the node makes whether or not they are wanted (attention's Stats of a training
    # forward): left virtual and unused they are allowed, as in the official, and not produced
    optional_outputs: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, name: str, compute_data_type: Any = NOT_SET) -> None:
        self.name = name
        self.compute_data_type = as_data_type(compute_data_type, f"{self.label()}: compute_data_type")
        self.inputs: dict[str, Tensor] = {}
        self.outputs: dict[str, Tensor] = {}
        self.unused: frozenset[str] = frozenset()  # optional outputs no node reads (set at validate)

    def wanted(self, port: str) -> Tensor | None:
        """The tensor on output ``port`` unless it is absent, or an optional output no node reads
        that is not a graph output (now: set_output(True) after validate still counts)."""
        t = self.outputs.get(port)
        return None if t is None or (port in self.unused and t.get_is_virtual()) else t

    # -- naming -----------------------------------------------------------------------------

    def label(self) -> str:
        """"conv_fprop 'conv2d'": how messages name this node."""
        return f"{self.op} {self.name!r}"

    def at(self, port: str) -> str:
        """'conv_fprop 'conv2d': W' - the prefix of every message about a port."""
        return f"{self.label()}: {port}"

    def arg(self, port: str) -> str:
        """The name the op call gave the tensor on ``port`` (``port_args``; else the port's own)."""
        return self.port_args.get(port, port)

    # -- 1.32's node surface (cudnn.Node) ------------------------------------------------------

    @property
    def node_type(self) -> Any:
        """The official ``cudnn.NodeType`` of this op (POINTWISE for every pointwise op)."""
        return node_type_of(self)

    @property
    def params(self) -> dict[str, Any]:
        """The op's attributes (padding, epsilon, modes...), as the graph's JSON writes them."""
        return self.attributes()

    def infer_properties(self, context: Context) -> None:
        """1.32's name for `infer`: fill what is unset from ``context`` and the inputs."""
        self.infer(context)

    def validate(self) -> None:
        """1.32's check of the node alone: every port holds a tensor (ValueError naming the port)."""
        for kind, ports in (("input", self.inputs), ("output", self.outputs)):
            for port, t in ports.items():
                if not isinstance(t, Tensor):
                    raise ValueError(f"{self.at(port)}: {kind} is {t!r}, not a tensor")

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.node_type.name})"

    # -- the protocol -----------------------------------------------------------------------

    def infer(self, ctx: Context) -> None:
        """Fill unset attributes of inputs, outputs and the node; raise GraphError on misuse."""
        for port, t in self.inputs.items():
            resolve_input(self, port, t, ctx)
        self.resolve_compute_type(ctx)

    def expand(self, ex: Expander) -> list[Node] | None:
        """A composite node returns the nodes that replace it (joined by virtual tensors);
        a primitive node returns None and is lowered as it is."""
        return None

    def lower(self, lw: Lowering) -> list[Descriptor]:
        """The finalized backend operation descriptors of this (primitive) node."""
        raise NotImplementedError

    def attributes(self) -> dict[str, Any]:
        """Op-specific JSON keys (besides compute_data_type, inputs, outputs, name, tag)."""
        return {}

    def key_fields(self) -> tuple[Any, ...]:
        """What a graph's key (`structure_key`) takes of this node: its `to_json` but the name
        and the tensors (which the key takes from `Tensor.key_fields`)."""
        ct = self.compute_data_type
        return self.tag, None if ct == NOT_SET else ct.name, sorted(self.attributes().items())

    def to_json(self, keys: Mapping[int, str] | None = None) -> dict[str, Any]:
        """The node as JSON; ``keys`` (by ``id`` of a tensor) names tensors as the graph's JSON
        keys them, where two tensors share a name (their names otherwise)."""
        ct = self.compute_data_type

        def key(t: Tensor) -> str:
            return keys.get(id(t), t.get_name()) if keys else t.get_name()

        return {
            **self.attributes(),
            "compute_data_type": None if ct == NOT_SET else ct.name,
            "inputs": {port: key(t) for port, t in self.inputs.items()},
            "outputs": {port: key(t) for port, t in self.outputs.items()},
            "name": self.name,
            "tag": self.tag,
        }

    # -- helpers for subclasses -------------------------------------------------------------

    def resolve_compute_type(self, ctx: Context) -> data_type:
        """The node's compute type: as given, else the graph's, else by its first input's type."""
        if self.compute_data_type == NOT_SET:
            if ctx.compute_data_type != NOT_SET:
                self.compute_data_type = ctx.compute_data_type
            else:
                first = next((t.get_data_type() for t in self.inputs.values()), NOT_SET)
                self.compute_data_type = _DEFAULT_COMPUTE.get(first, data_type.FLOAT)
        return self.compute_data_type

    def output_type(self, t: Tensor, ctx: Context, like: Tensor | None = None) -> data_type:
        """Data type for an unset output: intermediates compute in the intermediate type,
        graph outputs are stored in the io type; else the type of ``like`` (the main input)."""
        if t.get_data_type() != NOT_SET:
            return t.get_data_type()
        if t.get_is_virtual():
            choice = ctx.intermediate_data_type
            if choice == NOT_SET:
                choice = self.compute_data_type if self.compute_data_type != NOT_SET else data_type.FLOAT
        else:
            choice = ctx.io_data_type
            if choice == NOT_SET and like is not None:
                choice = like.get_data_type()
        if choice == NOT_SET:
            raise GraphError(f"{self.at(port_of(self, t))} has no data type and none can be inferred: "
                             "call set_data_type() or give the graph io_data_type=")
        return choice

    def set_output(self, port: str, t: Tensor, ctx: Context, dims: Sequence[int] | None,
                   strides: Sequence[int] | None, like: Tensor | None = None) -> None:
        """Fill the output's unset dims/strides/dtype with the inferred ones; check set ones."""
        if dims is not None:
            if not t.get_dim():
                t.set_dim(dims)
            elif list(t.get_dim()) != list(dims):
                raise GraphError(f"{self.at(port)}: dims {t.get_dim()} do not match the inferred {list(dims)}")
        if not t.get_dim():
            raise GraphError(f"{self.at(port)}: dims cannot be inferred; call set_dim() on the output")
        if not t.get_stride():
            t.set_stride(strides if strides is not None and dims is not None else row_major(t.get_dim()))
        check_layout(self, port, t)
        t.set_data_type(self.output_type(t, ctx, like))


def port_of(node: Node, t: Tensor) -> str:
    for port, x in {**node.inputs, **node.outputs}.items():
        if x is t:
            return port
    return "?"


def resolve_input(node: Node, port: str, t: Tensor, ctx: Context) -> None:
    """An input needs dims and strides from the user; an unset data type takes the io type."""
    if not t.get_dim():
        if t.get_value() is not None:  # a Python number given where only a tensor makes sense
            raise number_error(node, port, t)
        raise GraphError(f"{node.at(port)} tensor {t.label()} has no dims; give dim= or set_dim()")
    if not t.get_stride():
        t.set_stride(row_major(t.get_dim()))
    check_layout(node, port, t)
    if t.get_data_type() == NOT_SET:
        if ctx.io_data_type == NOT_SET:
            raise GraphError(f"{node.at(port)} tensor {t.label()} has no data type: give data_type= "
                             "or the graph io_data_type=")
        t.set_data_type(ctx.io_data_type)


def number_error(node: Node, port: str, t: Tensor) -> GraphError:
    """The refusal of a Python number (a by-value scalar without dims) on a port that takes a tensor."""
    return GraphError(f"{node.at(port)} got the number {t.get_value()!r}, which has no dims: this input "
                      "takes a tensor (graph.tensor(...) or a framework tensor)")


def check_layout(node: Node, port: str, t: Tensor) -> None:
    dims, strides = t.get_dim(), t.get_stride()
    if len(strides) != len(dims):
        raise GraphError(f"{node.at(port)}: {len(dims)} dims {dims} but {len(strides)} strides {strides}")
    if dims and min(dims) <= 0:
        raise GraphError(f"{node.at(port)}: dims must be positive, got {dims}")
    if strides and min(strides) < 0:
        raise GraphError(f"{node.at(port)}: strides must be non-negative, got {strides}")


# -- layouts ---------------------------------------------------------------------------------

def stride_order(dims: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Dim indices from fastest to slowest varying (ties: the later dim is faster)."""
    return sorted(range(len(dims)), key=lambda i: (strides[i], -i))


def packed_in_order(dims: Sequence[int], order: Sequence[int]) -> list[int]:
    """Packed strides where ``order`` lists dims from fastest to slowest."""
    strides, acc = [0] * len(dims), 1
    for i in order:
        strides[i] = acc
        acc *= max(dims[i], 1)
    return strides


def broadcast(node: Node, shapes: dict[str, Sequence[int]]) -> list[int]:
    """Numpy broadcasting of same-rank shapes; raises naming the ports that disagree."""
    given = list(shapes.values())
    if given and all(s == given[0] for s in given):  # most nodes: every input of one shape
        return list(given[0])
    ranks = {len(s) for s in shapes.values()}
    if len(ranks) != 1:
        detail = ", ".join(f"{p} {list(s)}" for p, s in shapes.items())
        raise GraphError(f"{node.label()}: inputs must have the same rank; got {detail}")
    out: list[int] = []
    for i in range(ranks.pop()):
        sizes = {s[i] for s in shapes.values()} - {1}
        if len(sizes) > 1:
            detail = ", ".join(f"{p} {list(s)}" for p, s in shapes.items())
            raise GraphError(f"{node.label()}: dims do not broadcast at axis {i}: {detail}")
        out.append(sizes.pop() if sizes else 1)
    return out
