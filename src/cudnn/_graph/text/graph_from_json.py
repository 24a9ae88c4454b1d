"""A graph rebuilt from the JSON it prints (``pygraph.deserialize(str(graph))``).

The JSON names each node's tensors by name and lists every tensor's attributes under that
name, so tensors are matched by name, as in the official frontend: give distinct graph inputs
distinct names before printing. Each node is rebuilt through its public op method (so it is
checked like any call), then its tensors take the printed attributes (dims, strides, types,
uids, names). The graph is left unvalidated, as one just declared. A node whose tag has no
rebuilder here raises naming it; op modules may add one with ``register``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._lib.enums import (
    convolution_mode,
    data_type,
    norm_forward_phase,
    reduction_mode,
    reshape_mode,
    tensor_reordering,
)
from ..families.pointwise_nodes import TABLE as POINTWISE
from ..model.graph_errors import SerializationError, SerializationNotSupportedError
from ..model.tensor import NOT_SET, Tensor, constant

if TYPE_CHECKING:
    from ..model.graph_view import GraphView

Rebuilder = Callable[["Build", dict[str, Any]], None]
REBUILDERS: dict[str, Rebuilder] = {}


def register(tag: str) -> Callable[[Rebuilder], Rebuilder]:
    """Register the rebuilder of nodes whose JSON ``tag`` is ``tag``."""
    def add(fn: Rebuilder) -> Rebuilder:
        REBUILDERS[tag] = fn
        return fn
    return add


def rebuild(graph: GraphView, doc: Any) -> None:
    """Fill the empty ``graph`` with the nodes and tensors of ``doc`` (a parsed graph JSON)."""
    if graph.nodes:
        raise SerializationError(f"deserialize: {graph.label()} already has {len(graph.nodes)} nodes; a graph's "
                                 "JSON is restored into an empty pygraph")
    if not isinstance(doc, dict):
        raise SerializationError(f"deserialize: a graph's JSON is an object, got {type(doc).__name__}")
    nodes, tensors = doc.get("nodes"), doc.get("tensors", {})
    if not isinstance(nodes, list):
        raise SerializationError("deserialize: the graph JSON's 'nodes' must be a list")
    if not isinstance(tensors, dict):
        raise SerializationError("deserialize: the graph JSON's 'tensors' must be an object (name -> attributes)")
    context = doc.get("context") or {}
    if not isinstance(context, dict):
        raise SerializationError("deserialize: the graph JSON's 'context' must be an object")
    b = Build(graph, tensors)
    b.context(context)
    for index, node in enumerate(nodes):
        b.node(index, node)


class Build:
    """One rebuild: the graph, the printed tensors, and the tensors made so far (by name)."""

    def __init__(self, graph: GraphView, tensors: dict[str, Any]) -> None:
        # Any: the rebuilders call the graph's op methods (the public API, above this stage)
        # with arguments read from the JSON, checked by the methods themselves
        self.graph: Any = graph
        self.printed = tensors
        self.made: dict[str, Tensor] = {}
        self.where = "deserialize"

    # -- context and tensors ------------------------------------------------------------------

    def context(self, ctx: dict[str, Any]) -> None:
        g = self.graph
        if isinstance(ctx.get("name"), str) and ctx["name"]:
            g.name = ctx["name"]
        for key in ("io_data_type", "intermediate_data_type", "compute_data_type"):
            if ctx.get(key) is not None:
                setattr(g.context, key, self.dtype(ctx[key], f"context: {key}"))
        sm_count = ctx.get("sm_count")
        if isinstance(sm_count, int) and sm_count > 0:
            g.sm_count = sm_count

    def dtype(self, value: Any, what: str) -> data_type:
        if value is None:
            return NOT_SET
        if not isinstance(value, str) or value not in data_type.__members__:
            raise SerializationError(f"{self.where}: {what}: unknown data type {value!r}")
        return data_type[value]

    def attrs_of(self, name: str, what: str) -> dict[str, Any]:
        attrs = self.printed.get(name)
        if attrs is None:
            raise SerializationError(f"{self.where}: {what} names tensor {name!r}, which is not in the JSON's "
                                     "'tensors'")
        if not isinstance(attrs, dict):
            raise SerializationError(f"{self.where}: tensor {name!r}: attributes must be an object")
        return attrs

    def tensor(self, name: Any, what: str) -> Tensor:
        """The graph input (or earlier output) ``name``, made from its printed attributes once."""
        if not isinstance(name, str):
            raise SerializationError(f"{self.where}: {what}: tensor names must be strings, got {name!r}")
        if name in self.made:
            return self.made[name]
        attrs = self.attrs_of(name, what)
        value = attrs.get("pass_by_value")
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SerializationError(f"{self.where}: tensor {name!r}: pass_by_value must be a number, "
                                         f"got {value!r}")
            t = constant(name, value, bool(attrs.get("is_compile_time_constant", False)))
        else:
            t = Tensor(name)
        self.apply(t, name, attrs)
        self.made[name] = t
        return t

    def apply(self, t: Tensor, name: str, attrs: dict[str, Any]) -> None:
        """Give ``t`` the printed attributes of tensor ``name``."""
        label = f"tensor {name!r}"
        try:
            t.set_name(name)
            t.set_dim(attrs.get("dim") or []).set_stride(attrs.get("stride") or [])
            t.set_data_type(self.dtype(attrs.get("data_type"), f"{label}: data_type"))
            t.set_is_virtual(self.flag(attrs, "is_virtual", label))
            t.set_is_pass_by_value(self.flag(attrs, "is_pass_by_value", label))
            reordering = attrs.get("reordering_type") or "NONE"
            if reordering not in tensor_reordering.__members__:
                raise SerializationError(f"{self.where}: {label}: unknown reordering_type {reordering!r}")
            t.set_reordering_type(tensor_reordering[reordering])
            if attrs.get("uid_assigned"):
                uid = attrs.get("uid")
                if uid is None:
                    raise SerializationError(f"{self.where}: {label}: uid_assigned is true but uid is missing")
                t.set_uid(uid)
            if attrs.get("vector_count", 1) != 1:
                t.set_vector_count_and_dimension(attrs["vector_count"], attrs.get("vector_dimension", -1))
            if attrs.get("ragged_offset_multiplier", 1) != 1:
                t.set_ragged_offset_multiplier(attrs["ragged_offset_multiplier"])
            ragged = attrs.get("ragged_offset")
            if ragged is not None:
                t.set_ragged_offset(self.tensor(ragged, f"{label}: ragged_offset"))
        except (TypeError, ValueError, NotImplementedError) as exc:
            if isinstance(exc, SerializationError):
                raise
            raise SerializationError(f"{self.where}: {label}: {exc}") from None

    def flag(self, attrs: dict[str, Any], key: str, label: str) -> bool:
        value = attrs.get(key, False)
        if not isinstance(value, bool):
            raise SerializationError(f"{self.where}: {label}: {key} must be true or false, got {value!r}")
        return value

    # -- nodes ----------------------------------------------------------------------------------

    def node(self, index: int, node: Any) -> None:
        if not isinstance(node, dict):
            raise SerializationError(f"deserialize: node {index}: expected an object, got {type(node).__name__}")
        name, tag = node.get("name"), node.get("tag")
        self.where = f"deserialize: node {index} ({name!r}, tag {tag!r})"
        if not isinstance(name, str) or not isinstance(tag, str):
            raise SerializationError(f"{self.where}: 'name' and 'tag' must be strings")
        for key in ("inputs", "outputs"):
            if not isinstance(node.get(key), dict):
                raise SerializationError(f"{self.where}: '{key}' must be an object (port -> tensor name)")
        rebuilder = REBUILDERS.get(tag)
        if rebuilder is None:
            raise SerializationNotSupportedError(f"{self.where}: cudnn-py cannot rebuild {tag} nodes from "
                                                 f"JSON; it rebuilds {', '.join(sorted(REBUILDERS))}")
        count = len(self.graph.nodes)
        try:
            rebuilder(self, node)
        except (TypeError, ValueError, KeyError) as exc:  # GraphError and SerializationError are ValueErrors
            if isinstance(exc, SerializationError) and str(exc).startswith("deserialize:"):
                raise  # made by the tensor helpers, which name the node already
            if isinstance(exc, SerializationNotSupportedError):  # sound JSON this rebuilder cannot use
                raise SerializationNotSupportedError(f"{self.where}: {exc}") from None
            raise SerializationError(f"{self.where}: {exc}") from None
        if len(self.graph.nodes) != count + 1:
            raise SerializationError(f"{self.where}: the rebuilder added {len(self.graph.nodes) - count} nodes")
        made = self.graph.nodes[-1]
        if node.get("compute_data_type") is not None:  # ops without the parameter (reshape) print one too
            made.compute_data_type = self.dtype(node["compute_data_type"], "compute_data_type")
        for port, name in node["inputs"].items():  # constants the op made itself (a zero-centered gamma's 1.0)
            t = made.inputs.get(port)
            if t is not None and t is not self.made.get(name):
                self.apply(t, name, self.attrs_of(name, f"input {port}"))
                self.made[name] = t
        self.bind_outputs(node, made.outputs)

    def bind_outputs(self, node: dict[str, Any], made: dict[str, Tensor]) -> None:
        """The printed outputs onto the node's new tensors: names, dims, types, uids."""
        printed = node["outputs"]
        missing = sorted(set(printed) - set(made))
        if missing:
            raise SerializationError(f"{self.where}: outputs {missing} are not produced by the rebuilt node "
                                     f"(it has {sorted(made)})")
        for port, name in printed.items():
            if not isinstance(name, str):
                raise SerializationError(f"{self.where}: output {port}: tensor names must be strings, got {name!r}")
            if name in self.made:
                raise SerializationError(f"{self.where}: output {port}: tensor {name!r} is already defined "
                                         "(by an earlier node or as an input); tensor names must be unique")
            t = made[port]
            self.apply(t, name, self.attrs_of(name, f"output {port}"))
            self.made[name] = t

    def inputs(self, node: dict[str, Any]) -> dict[str, Tensor]:
        """Port -> tensor of the node's printed inputs."""
        return {port: self.tensor(name, f"input {port}") for port, name in node["inputs"].items()}


# -- common arguments ---------------------------------------------------------------------------

def _common(b: Build, node: dict[str, Any]) -> dict[str, Any]:
    return {"compute_data_type": b.dtype(node.get("compute_data_type"), "compute_data_type"),
            "name": node["name"]}


def _required(ins: dict[str, Tensor], port: str) -> Tensor:
    t = ins.get(port)
    if t is None:
        raise SerializationError(f"input {port} is missing")
    return t


def _ints(node: dict[str, Any], key: str) -> list[int]:
    value = node.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SerializationError(f"'{key}' must be a list of ints, got {value!r}")
    return value


def _float_bits(value: Any, key: str) -> float | None:
    """A float attribute as printed: its float32 bit pattern in hex, or null."""
    if value is None:
        return None
    import struct

    try:
        return float(struct.unpack(">f", bytes.fromhex(value))[0])
    except (TypeError, ValueError, struct.error):
        raise SerializationError(f"'{key}' must be a float32 bit pattern in hex (as '3DCCCCCD'), got {value!r}") \
            from None


# -- convolution, matmul, pointwise ----------------------------------------------------------------

def _conv(method: str, first: str, second: str) -> Rebuilder:
    def rebuilder(b: Build, node: dict[str, Any]) -> None:
        ins = b.inputs(node)
        mode = node.get("math_mode", "CROSS_CORRELATION")
        if mode not in convolution_mode.__members__:
            raise SerializationError(f"unknown math_mode {mode!r}")
        getattr(b.graph, method)(_required(ins, first), _required(ins, second), stride=_ints(node, "stride"),
                                 dilation=_ints(node, "dilation"), convolution_mode=convolution_mode[mode],
                                 pre_padding=_ints(node, "pre_padding"), post_padding=_ints(node, "post_padding"),
                                 **_common(b, node))
    return rebuilder


register("CONV_FPROP")(_conv("conv_fprop", "X", "W"))
register("CONV_DGRAD")(_conv("conv_dgrad", "DY", "W"))
register("CONV_WGRAD")(_conv("conv_wgrad", "X", "DY"))


@register("MATMUL")
def _matmul(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    extra = sorted(set(ins) - {"A", "B"})
    if extra:
        raise SerializationError(f"matmul inputs {extra} (M/N/K overrides) are made by attention expansions, "
                                 "not by pygraph.matmul")
    padding = node.get("padding_value", 0.0)
    if isinstance(padding, bool) or not isinstance(padding, (int, float)):
        raise SerializationError(f"'padding_value' must be a number, got {padding!r}")
    b.graph.matmul(_required(ins, "A"), _required(ins, "B"), padding=float(padding), **_common(b, node))


# JSON key of each pointwise attribute parameter
_PW_KEYS = {"negative_slope": "relu_lower_clip_slope", "lower_clip": "relu_lower_clip",
            "upper_clip": "relu_upper_clip", "swish_beta": "swish_beta", "elu_alpha": "elu_alpha",
            "softplus_beta": "softplus_beta", "axis": "axis"}


@register("POINTWISE")
def _pointwise(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    mode = node.get("mode")
    ports = [f"IN_{i}" for i in range(len(ins))]
    if sorted(ins) != sorted(ports):
        raise SerializationError(f"pointwise inputs must be IN_0..IN_{len(ins) - 1}, got {sorted(ins)}")
    spec = next((s for s in POINTWISE.values() if s.mode.name == mode and len(s.tensors) == len(ins)), None)
    if spec is None:
        raise SerializationError(f"no pointwise method has mode {mode!r} with {len(ins)} inputs")
    kwargs: dict[str, Any] = {}
    for param, _ in spec.attrs + spec.keyword_attrs:
        raw = node.get(_PW_KEYS[param])
        kwargs[param] = raw if param == "axis" else _float_bits(raw, _PW_KEYS[param])
    getattr(b.graph, spec.method)(*(ins[p] for p in ports), **kwargs, **_common(b, node))


# -- reduction and the structural ops --------------------------------------------------------------

@register("REDUCTION")
def _reduction(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    mode = node.get("mode")
    if mode not in reduction_mode.__members__:
        raise SerializationError(f"unknown reduction mode {mode!r}")
    b.graph.reduction(_required(ins, "X"), reduction_mode[str(mode)], group_offset=ins.get("GROUP_OFFSET"),
                      is_deterministic=bool(node.get("is_deterministic", False)), **_common(b, node))


@register("RESHAPE")
def _reshape(b: Build, node: dict[str, Any]) -> None:
    mode = node.get("reshape_mode", "VIEW_ONLY")
    if mode not in reshape_mode.__members__:
        raise SerializationError(f"unknown reshape_mode {mode!r}")
    b.graph.reshape(_required(b.inputs(node), "X"), name=node["name"], reshape_mode=reshape_mode[mode])


@register("GENSTATS")
def _genstats(b: Build, node: dict[str, Any]) -> None:
    b.graph.genstats(_required(b.inputs(node), "X"), **_common(b, node))


@register("TRANSPOSE")
def _transpose(b: Build, node: dict[str, Any]) -> None:
    b.graph.transpose(_required(b.inputs(node), "X"), _ints(node, "permutation"), **_common(b, node))


@register("SLICE")
def _slice(b: Build, node: dict[str, Any]) -> None:
    ranges, steps = node.get("slices"), _ints(node, "strides")
    if not isinstance(ranges, list) or len(ranges) != len(steps) or not all(
            isinstance(r, list) and len(r) == 2 and all(v is None or isinstance(v, int) for v in r) for r in ranges):
        raise SerializationError(f"'slices' must be [start, limit] pairs, one per 'strides' entry; got {ranges!r}")
    slices = [slice(a, c, s) for (a, c), s in zip(ranges, steps)]
    b.graph.slice(_required(b.inputs(node), "X"), slices, **_common(b, node))


@register("CONCATENATE")
def _concatenate(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    ports = [f"IN_{i}" for i in range(len(ins))]
    if sorted(ins) != sorted(ports):
        raise SerializationError(f"concatenate inputs must be IN_0..IN_{len(ins) - 1}, got {sorted(ins)}")
    common = _common(b, node)
    b.graph.concatenate([ins[p] for p in ports], node.get("axis"), node.get("in_place_index"), common["name"],
                        compute_data_type=common["compute_data_type"])


# -- normalizations ----------------------------------------------------------------------------

def _phase(node: dict[str, Any]) -> norm_forward_phase:
    phase = node.get("forward_phase")
    if phase not in ("TRAINING", "INFERENCE"):
        raise SerializationError(f"'forward_phase' must be TRAINING or INFERENCE, got {phase!r}")
    return norm_forward_phase[phase]


def _peers(ins: dict[str, Tensor]) -> list[Tensor] | None:
    peers = sorted((p for p in ins if p.startswith("PEER_STATS_")), key=lambda p: int(p.rsplit("_", 1)[1]))
    return [ins[p] for p in peers] or None


def _zero_centered(node: dict[str, Any]) -> dict[str, Any]:
    return {"zero_centered_gamma": True} if node.get("zero_centered_gamma") else {}


def _norm_forward(method: str, optional_bias: bool = False) -> Rebuilder:
    def rebuilder(b: Build, node: dict[str, Any]) -> None:
        ins = b.inputs(node)
        extra = {} if method == "instancenorm" else _zero_centered(node)
        if "lowering" in node:  # layer / RMS norm: a forced lowering
            extra["lowering"] = node["lowering"]
        bias = ins.get("BIAS") if optional_bias else _required(ins, "BIAS")
        getattr(b.graph, method)(_phase(node), _required(ins, "X"), _required(ins, "SCALE"), bias,
                                 _required(ins, "EPSILON"), **_common(b, node), **extra)
    return rebuilder


register("LAYER_NORM")(_norm_forward("layernorm"))
register("RMS_NORM")(_norm_forward("rmsnorm", optional_bias=True))
register("INSTANCE_NORM")(_norm_forward("instancenorm"))
register("ADA_LAYER_NORM")(_norm_forward("adalayernorm", optional_bias=True))


@register("BATCHNORM")
def _batchnorm(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    b.graph.batchnorm(_required(ins, "X"), _required(ins, "SCALE"), _required(ins, "BIAS"),
                      ins.get("PREV_RUNNING_MEAN"), ins.get("PREV_RUNNING_VAR"), _required(ins, "EPSILON"),
                      ins.get("MOMENTUM"), _peers(ins), **_common(b, node))


@register("BATCHNORM_INFERENCE")
def _batchnorm_inference(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    b.graph.batchnorm_inference(_required(ins, "X"), _required(ins, "MEAN"), _required(ins, "INV_VARIANCE"),
                                _required(ins, "SCALE"), _required(ins, "BIAS"), **_common(b, node),
                                lowering=node.get("lowering", "auto"))


def _norm_backward(method: str) -> Rebuilder:
    def rebuilder(b: Build, node: dict[str, Any]) -> None:
        ins = b.inputs(node)
        head = (_required(ins, "DY"), _required(ins, "X"), _required(ins, "SCALE"))
        common = _common(b, node)
        g = b.graph
        if method == "rmsnorm_backward":
            g.rmsnorm_backward(*head, _required(ins, "INV_VARIANCE"), "DBIAS" in node["outputs"], **common,
                               **_zero_centered(node))
        elif method == "instancenorm_backward":
            g.instancenorm_backward(*head, ins.get("MEAN"), ins.get("INV_VARIANCE"), **common,
                                    epsilon=ins.get("EPSILON"))
        elif method == "batchnorm_backward":
            g.batchnorm_backward(*head, _required(ins, "MEAN"), _required(ins, "INV_VARIANCE"), _peers(ins), **common)
        else:
            getattr(g, method)(*head, _required(ins, "MEAN"), _required(ins, "INV_VARIANCE"), **common,
                               **_zero_centered(node))
    return rebuilder


register("LAYER_NORM_BPROP")(_norm_backward("layernorm_backward"))
register("RMS_NORM_BPROP")(_norm_backward("rmsnorm_backward"))
register("INSTANCE_NORM_BPROP")(_norm_backward("instancenorm_backward"))
register("ADA_LAYER_NORM_BPROP")(_norm_backward("adalayernorm_backward"))
register("DBN")(_norm_backward("batchnorm_backward"))


@register("BN_FINALIZE")
def _bn_finalize(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    b.graph.bn_finalize(*(_required(ins, p) for p in ("SUM", "SQ_SUM", "SCALE", "BIAS", "EPSILON", "ACCUM_COUNT")),
                        ins.get("PREV_RUNNING_MEAN"), ins.get("PREV_RUNNING_VAR"), _required(ins, "MOMENTUM"),
                        **_common(b, node))
