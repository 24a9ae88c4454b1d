"""Normalization forward nodes: layer, RMS, instance, adaptive layer and batch norm.

Every forward norm lowers to one NORM_FORWARD operation (a mode and a phase) whose tensor
attributes come from a port table, preceded by a pointwise ADD for a zero-centered gamma;
batchnorm_inference is (x - mean) * inv_variance * scale + bias in pointwise operations
unless the graph also has a batchnorm_backward (the backend has no standalone batch norm
inference engine; see BatchNormInference). Shared with the backward nodes: the rules tying
SCALE/BIAS and statistics shapes to X, scalar inputs (epsilon, momentum), the zero-centered
gamma, and the canonical [rows, hidden, 1, 1] view of layer and RMS norms (canonical_views).
A layer or RMS norm of a 16-bit X with fp32 SCALE/BIAS may be lowered instead as a unit-scale
norm followed by the affine step in pointwise ops (the affine epilogue, at the end).
"""

from __future__ import annotations

import copy
import math
import weakref
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type, norm_forward_phase, norm_mode
from ...backend.descriptor import Descriptor
from ..model.expand import inferred
from ..model.expander import Expander
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.lower import Lowering
from ..model.node import Context, Node, resolve_input, row_major
from ..model.tensor import NOT_SET, Tensor, nhwc, order_of, packed
from .pointwise_nodes import TABLE, Pointwise

FLOAT = data_type.FLOAT


@dataclass(frozen=True)
class Kind:
    """One normalization op: its method, JSON tag, backend mode and shape rules.

    ``layout`` says which axes SCALE covers and which the statistics keep:
    "feature" (layer, RMS): SCALE spans the normalized axes, statistics keep the others;
    "sample" (adaptive layer norm): as "feature", but SCALE/BIAS may also vary per sample;
    "instance": SCALE is [1, C, 1...], statistics [N, C, 1...];
    "batch": SCALE and statistics are [1, C, 1...].
    """

    op: str
    tag: str
    mode: norm_mode
    layout: str
    stats: tuple[str, ...]
    since: int = 0
    since_reason: str = ""


_ADA_SINCE = (90900, ("the official frontend requires cuDNN 9.9.0 for adaptive layer norm engines "
                      "(the enum exists from 9.7.0)"))

FORWARD: dict[str, Kind] = {k.op: k for k in (
    Kind("layernorm", "LAYER_NORM", norm_mode.LAYER_NORM, "feature", ("MEAN", "INV_VARIANCE")),
    Kind("rmsnorm", "RMS_NORM", norm_mode.RMS_NORM, "feature", ("INV_VARIANCE",)),
    Kind("instancenorm", "INSTANCE_NORM", norm_mode.INSTANCE_NORM, "instance", ("MEAN", "INV_VARIANCE")),
    Kind("adalayernorm", "ADA_LAYER_NORM", norm_mode.ADA_LAYER_NORM, "sample", ("MEAN", "INV_VARIANCE"),
         *_ADA_SINCE),
    Kind("batchnorm", "BATCHNORM", norm_mode.BATCH_NORM, "batch", ("MEAN", "INV_VARIANCE")),
    Kind("batchnorm_inference", "BATCHNORM_INFERENCE", norm_mode.BATCH_NORM, "batch", ()),
)}

_FWD_ATTR = {
    "X": A.CUDNN_ATTR_OPERATION_NORM_FWD_XDESC,
    "SCALE": A.CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
    "BIAS": A.CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
    "EPSILON": A.CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
    "MOMENTUM": A.CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
    "PREV_RUNNING_MEAN": A.CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
    "PREV_RUNNING_VAR": A.CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
    "Y": A.CUDNN_ATTR_OPERATION_NORM_FWD_YDESC,
    "MEAN": A.CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
    "INV_VARIANCE": A.CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
    "NEXT_RUNNING_MEAN": A.CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
    "NEXT_RUNNING_VAR": A.CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
}

OFFSET = "SCALE_OFFSET"  # the constant 1.0 a zero-centered gamma adds to SCALE
SCALARS = ("EPSILON", "MOMENTUM", OFFSET)
PEER = "PEER_STATS_"


def forward_phase(value: Any, op: str) -> norm_forward_phase:
    """A TRAINING or INFERENCE cudnn.norm_forward_phase from the member or its name."""
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if isinstance(name, str) and name in ("TRAINING", "INFERENCE"):
        return norm_forward_phase[name]
    raise GraphError(f"{op}: norm_forward_phase must be cudnn.norm_forward_phase.TRAINING or INFERENCE, "
                     f"got {value!r}")


class NormNode(Node):
    """What forward and backward norms share: shape rules, scalar inputs, graph lookups."""

    kind: Kind
    _graph: weakref.ref[Any] | None = None  # the graph that added the node (see `added_to`)
    primitive = False  # set on the copy expand() hands to lowering

    def __init__(self, name: str, kind: Kind, inputs: dict[str, Tensor | None], compute_data_type: Any) -> None:
        self.kind = kind
        self.op, self.tag = kind.op, kind.tag  # type: ignore[misc]  # per-instance labels, as Pointwise
        super().__init__(name, compute_data_type)  # after the labels: its messages name the node
        self.inputs = {port: t for port, t in inputs.items() if t is not None}

    def added_to(self, graph: Any) -> None:
        """Note the graph adding this node: lowering asks whether its other nodes share this
        node's tensors. Held weakly: the graph holds this node, and a strong reference back would
        make the graph a reference cycle, freed only by the garbage collector."""
        self._graph = weakref.ref(graph)

    def __deepcopy__(self, memo: dict[int, Any]) -> NormNode:
        """A deep copy that notes the copy of this node's graph (a graph copied whole: the
        graph it is part of), not this one's, which a weak reference would otherwise keep."""
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        for name, value in vars(self).items():
            if name != "_graph":
                setattr(twin, name, copy.deepcopy(value, memo))
        graph = None if self._graph is None else self._graph()
        if graph is not None:
            twin.added_to(copy.deepcopy(graph, memo))
        return twin

    @property
    def graph_nodes(self) -> list[Node] | None:
        """The nodes of the graph that added this node; None where that is not known."""
        graph = None if self._graph is None else self._graph()
        return None if graph is None else graph.nodes

    @property
    def zero_centered_gamma(self) -> bool:
        """SCALE holds gamma - 1; the norm scales by SCALE + SCALE_OFFSET (1.0)."""
        return OFFSET in self.inputs

    def norm_json(self) -> dict[str, Any]:
        """JSON keys every norm may add: the zero-centered gamma changes lowering, so the
        graph key (and the plan cache) must see it."""
        return {"zero_centered_gamma": True} if self.zero_centered_gamma else {}

    def output_ports(self) -> list[str]:
        """The ports this node produces, in order (given to pygraph.add_node)."""
        raise NotImplementedError

    @property
    def peer_stats(self) -> list[Tensor]:
        return [t for port, t in self.inputs.items() if port.startswith(PEER)]

    # -- inference helpers ------------------------------------------------------------------

    def prepare_inputs(self, ctx: Context, main: str = "X") -> list[int]:
        """Resolve the main input (X), fill what may be left open (SCALE/BIAS dims, scalars),
        resolve the rest; returns the main input's dims."""
        x = self.inputs[main]
        resolve_input(self, main, x, ctx)
        dims = x.get_dim()
        if len(dims) < 2:
            raise GraphError(f"{self.at(main)} tensor {x.label()} needs at least 2 dims ([N, C, ...] or "
                             f"[rows, hidden]), got {dims}")
        for port in ("SCALE", "BIAS"):
            t = self.inputs.get(port)
            if t is not None and not t.get_dim():
                pdims = self.default_param_dims(dims)
                t.set_dim(pdims).set_stride(self.param_strides(pdims, x))
        for port in SCALARS:
            t = self.inputs.get(port)
            if t is not None:
                if not t.get_dim():
                    t.set_dim([1] * len(dims)).set_stride([1] * len(dims))
                if t.get_data_type() == NOT_SET:
                    t.set_data_type(FLOAT)
        Node.infer(self, ctx)
        for port in SCALARS:
            t = self.inputs.get(port)
            if t is not None and t.element_count() != 1:
                raise GraphError(f"{self.at(port)} tensor {t.label()} must be a scalar (every dim 1), got dims "
                                 f"{t.get_dim()}; pass a Python float or a [1, ..., 1] pass-by-value tensor")
        return dims

    def default_param_dims(self, x: list[int]) -> list[int]:
        if self.kind.layout in ("instance", "batch"):
            return [1, x[1]] + [1] * (len(x) - 2)
        return [1, *x[1:]]

    def param_strides(self, dims: list[int], like: Tensor) -> list[int]:
        """SCALE/BIAS left open: X's stride order (the official's layer norm), channels last per channel."""
        if self.kind.layout in ("instance", "batch"):
            return nhwc(dims)
        return packed(dims, order_of(like.get_stride(), len(dims)))

    def stats_dims(self, x: list[int], scale: Tensor, port: str = "SCALE") -> list[int]:
        """Check SCALE against X and return the statistics' dims it implies."""
        s = scale.get_dim()
        what = f"{self.at(port)} tensor {scale.label()}"
        if len(s) != len(x):
            raise GraphError(f"{what} has {len(s)} dims {s} but X has {len(x)} {x}; give it X's rank with 1 on "
                             f"the axes that are not normalized, e.g. {self.default_param_dims(x)}")
        if self.kind.layout in ("instance", "batch"):
            want = [1, x[1]] + [1] * (len(x) - 2)
            if s != want:
                raise GraphError(f"{what} has dims {s}; {self.op} takes one value per channel of X {x}: "
                                 f"expected {want}")
            return [x[0], x[1]] + [1] * (len(x) - 2) if self.kind.layout == "instance" else want
        bad = [i for i, (a, b) in enumerate(zip(s, x)) if a not in (1, b)]
        if bad:
            i = bad[0]
            raise GraphError(f"{what} has dims {s} that do not match the normalized axes of X {x}: at axis "
                             f"{i} it has {s[i]}, expected 1 or {x[i]}")
        if self.kind.layout == "feature" and s[0] != 1:
            raise GraphError(f"{what} has dims {s}: axis 0 of X {x} is the batch and is never normalized, so "
                             f"it must be 1 (a per-sample scale is adalayernorm)")
        stats = [b if a == 1 else 1 for a, b in zip(s, x)]
        if self.kind.layout == "sample":
            stats[0] = x[0]
        if math.prod(x) == math.prod(stats) and math.prod(x[1:]) > 1:
            raise GraphError(f"{what} has dims {s}, which select no axis of X {x} to normalize over; give it "
                             f"X's size on the normalized axes, e.g. {self.default_param_dims(x)}")
        return stats

    def stats_strides(self, dims: list[int]) -> list[int]:
        """The statistics' layout the official infers: X's stride order for layer, RMS and adaptive
        layer norm, channels last for instance and batch norm."""
        if self.kind.layout in ("instance", "batch"):
            return nhwc(dims)
        return packed(dims, order_of(self.inputs["X"].get_stride(), len(dims)))

    def check_dims(self, port: str, want: list[int], why: str) -> None:
        t = self.inputs.get(port)
        if t is not None and t.get_dim() != want:
            raise GraphError(f"{self.at(port)} tensor {t.label()} has dims {t.get_dim()}; expected {want} ({why})")

    def like_x(self, port: str, t: Tensor, ctx: Context, strides: list[int] | None = None) -> None:
        """An output with X's dims and, unless ``strides`` are given, X's strides (forward Y, as
        the official infers it: a view's layout included)."""
        x = self.inputs["X"]
        self.set_output(port, t, ctx, x.get_dim(), x.get_stride() if strides is None else strides, like=x)

    @staticmethod
    def official_type(t: Tensor, ctx: Context, fallback: data_type) -> None:
        """An unset type of a statistic or gradient output as the official infers it, the graph's
        (io for a graph output, intermediate for a virtual one: `Node.output_type`); ``fallback``
        for a graph output of a graph without an io type (the official would leave it unset and
        fail), FLOAT for statistics, the parameter's type for gradients."""
        if t.get_data_type() == NOT_SET and not t.get_is_virtual() and ctx.io_data_type == NOT_SET:
            t.set_data_type(fallback)

    def stats_output(self, port: str, dims: list[int], ctx: Context, dtype: data_type = FLOAT) -> None:
        """A statistics output: the statistics' dims and layout, the official's type (see `official_type`)."""
        t = self.outputs[port]
        self.official_type(t, ctx, dtype)
        self.set_output(port, t, ctx, dims, self.stats_strides(dims))

    # -- lowering helpers ---------------------------------------------------------------------

    def shared(self, t: Tensor) -> bool:
        """Whether another node of the graph uses ``t`` (unknown graph: assume it does)."""
        nodes = self.graph_nodes
        if nodes is None:
            return True
        return any(n is not self and any(v is t for v in (*n.inputs.values(), *n.outputs.values())) for n in nodes)

    def port_tensors(self) -> dict[str, Tensor]:
        """Each port's tensor as the backend sees it: all in the canonical view or all as
        given, one stand-in per tensor (a tensor on two ports gets one descriptor)."""
        views = canonical_views(self)
        made: dict[int, Tensor] = {}
        out: dict[str, Tensor] = {}
        for port, t in {**self.inputs, **self.outputs}.items():
            if id(t) not in made:
                view = views.get(port)
                made[id(t)] = t if view is None else t.view(*view)
            out[port] = made[id(t)]
        return out

    def expand(self, ex: Expander) -> list[Node] | None:
        """The canonical view of the ports and, for a zero-centered gamma, SCALE + 1 in a
        pointwise ADD into a virtual float tensor that the norm reads as its SCALE (NVIDIA's
        zero-centered-gamma pattern); None when the node goes to the backend as it is."""
        if self.primitive:
            return None
        tensors = self.port_tensors()
        if not self.zero_centered_gamma and all(t is tensors[p] for p, t in {**self.inputs, **self.outputs}.items()):
            return None
        parts: list[Node] = []
        if self.zero_centered_gamma:
            scale = tensors["SCALE"]
            plus = ex.virtual(f"{self.name}::SCALE_PLUS_ONE", scale.get_dim(), FLOAT, scale.get_stride())
            add = Pointwise(f"{self.name}.scale_plus_one", TABLE["add"], [scale, tensors[OFFSET]], {}, FLOAT)
            parts.append(inferred(add, ex.ctx, {"OUT_0": plus}))
            tensors["SCALE"] = plus
        twin = copy.copy(self)
        twin.primitive = True
        twin.inputs = {port: tensors[port] for port in self.inputs if port != OFFSET}
        twin.outputs = {port: tensors[port] for port in self.outputs}
        return [*parts, twin]

    def emit(self, lw: Lowering, desc_type: D, ports: dict[str, int], attrs: dict[int, Any], peers_attr: int
             ) -> list[Descriptor]:
        """The operation descriptor: ``attrs`` (mode, phase), each port's tensor through the
        ``ports`` table, the peer statistics as one list (ports as expand left them)."""
        if self.kind.since:
            lw.require(f"{self.label()}: {self.kind.mode.name} ({self.kind.since_reason})", self.kind.since)
        op = lw.descriptor(desc_type, self.name)
        for attr, value in attrs.items():
            op.set(attr, value)
        tensors = {**self.inputs, **self.outputs}
        for port, t in tensors.items():
            if port != OFFSET and not port.startswith(PEER):
                op.set(ports[port], lw.tensor(t))
        peers = [lw.tensor(t) for port, t in tensors.items() if port.startswith(PEER)]
        if peers:
            op.set(peers_attr, peers)
        return [op.finalize()]

    def peer_json(self) -> dict[str, Any]:
        return {"peer_stats": [t.get_name() for t in self.peer_stats]}


class NormForward(NormNode):
    """Layer, RMS, instance, adaptive layer and batch norm forward: one NORM_FORWARD op."""

    def __init__(self, name: str, kind: Kind, phase: norm_forward_phase, inputs: dict[str, Tensor | None],
                 compute_data_type: Any, lowering: str = "auto") -> None:
        super().__init__(name, kind, inputs, compute_data_type)
        self.phase = phase
        if lowering != "auto" and lowering not in LOWERINGS:
            raise GraphError(f"{self.label()}: lowering must be 'auto', "
                             f"{', '.join(repr(k) for k in LOWERINGS)}, got {lowering!r}")
        self.lowering = lowering  # "auto": `choose` decides (layer and RMS norm)

    def output_ports(self) -> list[str]:
        ports = ["Y"]
        if self.phase == norm_forward_phase.TRAINING:
            ports += list(self.kind.stats)
        if "PREV_RUNNING_MEAN" in self.inputs:
            ports += ["NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"]
        return ports

    def infer(self, ctx: Context) -> None:
        x = self.prepare_inputs(ctx)
        stats = self.stats_dims(x, self.inputs["SCALE"])
        self.check_dims("BIAS", self.inputs["SCALE"].get_dim(), "the dims of SCALE")
        for port in ("PREV_RUNNING_MEAN", "PREV_RUNNING_VAR", "MEAN", "INV_VARIANCE"):
            self.check_dims(port, stats, f"one value per statistic of X {x}")
        self.like_x("Y", self.outputs["Y"], ctx)
        for port in self.outputs:
            if port in ("MEAN", "INV_VARIANCE"):
                self.stats_output(port, stats, ctx)
            elif port.startswith("NEXT_"):
                prev = self.inputs[port.replace("NEXT_", "PREV_")]
                self.stats_output(port, stats, ctx, prev.get_data_type())
        if self.lowering == NormLowering.AFFINE_EPILOGUE.value:
            why = affine_refusal(self)
            if why:
                raise GraphNotSupportedError(f"{self.at('lowering')}: 'affine_epilogue' cannot be used: {why}")

    def attributes(self) -> dict[str, Any]:
        if self.kind.mode == norm_mode.BATCH_NORM:
            return self.peer_json() if self.kind.op == "batchnorm" else {}
        forced = {} if self.lowering == "auto" else {"lowering": self.lowering}  # the graph key must see it
        return {"forward_phase": self.phase.name, **self.norm_json(), **forced}

    def expand(self, ex: Expander) -> list[Node] | None:
        """Layer and RMS norm of a 16-bit X with fp32 SCALE/BIAS: the affine epilogue where
        it applies (see the affine epilogue below); every other norm as NormNode.expand."""
        if not self.primitive and self.kind.layout == "feature" and choose(self, ex) == NormLowering.AFFINE_EPILOGUE:
            return affine_epilogue(self, ex)
        return super().expand(ex)

    def lower(self, lw: Lowering) -> list[Descriptor]:
        return self.emit(lw, D.CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, _FWD_ATTR,
                         {A.CUDNN_ATTR_OPERATION_NORM_FWD_MODE: self.kind.mode,
                          A.CUDNN_ATTR_OPERATION_NORM_FWD_PHASE: self.phase},
                         A.CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS)


class BatchNormInference(NormForward):
    """Y = (X - MEAN) * INV_VARIANCE * SCALE + BIAS with given per-channel statistics.

    cuDNN has no standalone engine for NORM_FORWARD in batch-norm inference mode (the header:
    "Batch norm only supports forward training"); it accepts that op only inside its
    BN-inference / DReLU / DBN fusion. So ``lowering="auto"`` emits the norm op when the graph
    also holds a batchnorm_backward and four pointwise ops (SUB, MUL, MUL, ADD in the compute
    type) otherwise; "norm" and "pointwise" force one. NVIDIA's sample of that fusion
    ("BN_inference DRelu DBN Graph") stores the ReLU-backward output, the DBN's DY, as HALF.
    """

    def __init__(self, name: str, inputs: dict[str, Tensor | None], compute_data_type: Any,
                 lowering: str = "auto") -> None:
        super().__init__(name, FORWARD["batchnorm_inference"], norm_forward_phase.INFERENCE, inputs,
                         compute_data_type)
        if lowering not in ("auto", "norm", "pointwise"):
            raise GraphError(f"{self.label()}: lowering must be 'auto', 'norm' or 'pointwise', got {lowering!r}")
        self.lowering = lowering

    def attributes(self) -> dict[str, Any]:
        """A forced lowering changes what the backend gets, so the graph key must see it."""
        return {} if self.lowering == "auto" else {"lowering": self.lowering}

    def uses_norm_op(self) -> bool:
        if self.lowering != "auto":
            return self.lowering == "norm"
        return any(getattr(n, "tag", "") == "DBN" for n in self.graph_nodes or [])

    def expand(self, ex: Expander) -> list[Node] | None:
        if self.primitive or self.uses_norm_op():
            return super().expand(ex)
        x = self.inputs["X"]
        dims = x.get_dim()
        strides = packed(dims, order_of(x.get_stride()))
        compute = self.compute_data_type
        parts: list[Node] = []
        prev = x
        steps = (("sub", "MEAN"), ("mul", "INV_VARIANCE"), ("mul", "SCALE"), ("add", "BIAS"))
        for i, (method, port) in enumerate(steps):
            step = Pointwise(f"{self.name}.{i}.{method}", TABLE[method], [prev, self.inputs[port]], {}, compute)
            last = i == len(steps) - 1
            out = self.outputs["Y"] if last else ex.virtual(f"{self.name}::{method}_{port.lower()}", dims, compute,
                                                             strides)
            parts.append(inferred(step, ex.ctx, {"OUT_0": out}))
            prev = out
        return parts


# -- the canonical view and internal tensors ---------------------------------------------------

def _row_major(dims: list[int], strides: list[int]) -> bool:
    """Packed with the last dim fastest (size-1 dims may have any stride)."""
    want = row_major(dims)
    return all(s == w for d, s, w in zip(dims, strides, want) if d != 1)


def canonical_views(node: NormNode) -> dict[str, tuple[list[int], list[int]]]:
    """Port -> (dims, strides) of the [rows, hidden, 1, 1] view, or {} when it does not apply.

    The view is X [rows, hidden, 1, 1], SCALE/BIAS [1, hidden, 1, 1], statistics
    [rows, 1, 1, 1]: the layout of NVIDIA's norm samples, same memory and uids. It is needed
    where cuDNN takes X's first dim as the rows: a norm whose SCALE comes from a pointwise op
    (zero-centered gamma) in TRAINING, given X [4, 128, 768], fails with "rows: 4, cols: 98304
    deduced ... unexpected tensor size: 512 for inverse standard deviation tensor" (9.19); a
    2-D X, which the backend gets as [1, rows, hidden], would give rows 1. A standalone layer
    norm got the same engines at the same speed in 2-D, 3-D and 4-D (bench_norm.py, 9.19).

    It applies to a layer or RMS norm whose normalized axes are X's trailing ones, every
    tensor packed row-major and used by no other node (another node would describe it
    differently); all of the node's ports take it, or none."""
    if node.kind.layout != "feature":
        return {}
    x, scale = node.inputs["X"], node.inputs["SCALE"]
    xd, sd = x.get_dim(), scale.get_dim()
    k = next((i for i, s in enumerate(sd) if s != 1), None)
    if k is None or any(sd[i] != xd[i] for i in range(k, len(xd))):
        return {}
    rows, hidden = math.prod(xd[:k]), math.prod(xd[k:])
    if xd == [rows, hidden, 1, 1]:
        return {}
    shapes = {"x": (xd, ([rows, hidden, 1, 1], [hidden, 1, hidden, hidden])),
              "param": (sd, ([1, hidden, 1, 1], [hidden, 1, hidden, hidden])),
              "stats": ([b if a == 1 else 1 for a, b in zip(sd, xd)], ([rows, 1, 1, 1], [1, 1, 1, 1]))}
    role = {"X": "x", "Y": "x", "DX": "x", "DY": "x", "SCALE": "param", "BIAS": "param", "DSCALE": "param",
            "DBIAS": "param", "MEAN": "stats", "INV_VARIANCE": "stats"}
    views: dict[str, tuple[list[int], list[int]]] = {}
    for port, t in {**node.inputs, **node.outputs}.items():
        if node.shared(t):
            return {}
        if port in SCALARS:
            views[port] = ([1, 1, 1, 1], [1, 1, 1, 1])
            continue
        if port not in role:
            return {}
        dims, view = shapes[role[port]]
        if t.get_dim() != dims or not _row_major(t.get_dim(), t.get_stride()):
            return {}
        views[port] = view
    return views


# -- the affine epilogue ------------------------------------------------------------------------
# Layer and RMS norm of a 16-bit X with fp32 SCALE/BIAS, lowered as a unit-scale norm followed
# by the affine step in fused pointwise ops.
#
# cuDNN 9.19 has only a generic engine (eng1) for NORM_FORWARD with a bf16/fp16 X and fp32
# SCALE/BIAS, much slower than its engines for SCALE/BIAS in X's dtype. The same engines
# accept the norm with a unit SCALE (and zero BIAS) in X's dtype followed by Y = Yhat * SCALE +
# BIAS in fused pointwise ops: the affine step stays in fp32 (no rounding of the user's
# parameters), and MEAN / INV_VARIANCE do not depend on SCALE or BIAS. cuDNN refuses a unit
# SCALE computed in the graph (a pointwise op feeding SCALE: NOT_SUPPORTED_GRAPH_PATTERN), so
# the unit SCALE and zero BIAS are constant scratch: device memory of the plan's Runner, written
# once (they used to be carved from the workspace and written before each execute: two memsets
# per execute, and workspace the default lowering does not need). Figures of this and of the
# lowerings not taken (a separate cast of SCALE/BIAS, a two-graph split, other views):
# benchmarks/bench_norm.py.
#
# The default (``lowering="auto"``) builds the single norm, as the official frontend does:
# the faster engines compile their kernel at build time, several times the build of the single
# norm. The affine epilogue is the graph's alternative lowering and its trial (`build.trial`):
# built off the caller's thread once the graph has run a few times, timed against the single norm
# on its executes, and kept when faster (the plan cache then remembers that choice); autotuning
# times both too, and ``lowering="affine_epilogue"`` forces it.

VERIFIED_SINCE = 91900  # the alternative applies from the cuDNN it was measured and tested on
_ONE = {data_type.BFLOAT16: b"\x80\x3f", data_type.HALF: b"\x00\x3c"}  # 1.0, little-endian


class NormLowering(Enum):
    """How a layer or RMS norm forward reaches the backend."""

    NORM = "norm"  # one NORM_FORWARD operation with the user's SCALE and BIAS
    AFFINE_EPILOGUE = "affine_epilogue"  # unit-scale NORM_FORWARD, then * SCALE (+ BIAS) fused


LOWERINGS = {m.value: m for m in NormLowering}


def affine_refusal(node: NormForward) -> str:
    """Why the affine-epilogue lowering does not apply to ``node`` ("" when it does)."""
    ins, y = node.inputs, node.outputs["Y"]
    x, scale, bias = ins["X"], ins["SCALE"], ins.get("BIAS")
    xdt = x.get_data_type()
    if node.kind.op not in ("layernorm", "rmsnorm"):
        return f"only layer and RMS norm have it, not {node.kind.op}"
    if node.zero_centered_gamma:
        return "a zero-centered gamma already feeds SCALE from a pointwise op"
    if xdt not in _ONE:
        return f"X is {xdt.name}; the lowering is for a HALF or BFLOAT16 X"
    for port, t in (("SCALE", scale), ("BIAS", bias)):
        if t is not None and (t.get_data_type() != FLOAT or t.get_is_virtual()):
            return f"{port} must be a FLOAT tensor in memory, got {t.get_data_type().name}" + (
                " (virtual)" if t.get_is_virtual() else "")
    if y.get_data_type() != xdt:
        return f"Y is {y.get_data_type().name}; the lowering writes Y in X's type ({xdt.name})"
    tensors = node.port_tensors()
    dims = tensors["X"].get_dim()
    if len(dims) != 4 or dims[2:] != [1, 1] or tensors["SCALE"].get_dim() != [1, dims[1], 1, 1]:
        return (f"X {x.get_dim()} has no [rows, hidden, 1, 1] view here (normalized axes not trailing, a "
                "tensor not packed row-major, or one another node also uses)")
    return ""


def choose(node: NormForward, ex: Expander) -> NormLowering:
    """The lowering ``node`` builds: the one forced, else the single norm, with the affine
    epilogue as the alternative autotuning also times where it applies on a verified cuDNN."""
    forced = LOWERINGS[node.lowering] if node.lowering != "auto" else None
    if forced is not None or ex.version < VERIFIED_SINCE or affine_refusal(node):
        return forced or NormLowering.NORM
    return ex.choose(NormLowering.NORM, (NormLowering.NORM, NormLowering.AFFINE_EPILOGUE), trial=True)


def affine_epilogue(node: NormForward, ex: Expander) -> list[Node]:
    """Unit-scale norm into a virtual float Yhat, then Yhat * SCALE (+ BIAS) into Y, every
    tensor in the [rows, hidden, 1, 1] view; the unit SCALE and zero BIAS are constant scratch."""
    tensors = node.port_tensors()
    x, scale, bias, y = tensors["X"], tensors["SCALE"], tensors.get("BIAS"), tensors["Y"]
    xdt, pdims, pstrides = x.get_data_type(), scale.get_dim(), scale.get_stride()
    unit = ex.add_scratch(Tensor(f"{node.name}::UNIT_SCALE", pdims, pstrides, xdt), fill=_ONE[xdt] * pdims[1],
                          constant=True)
    twin = copy.copy(node)
    twin.primitive = True
    twin.inputs = {port: tensors[port] for port in node.inputs if port != "BIAS"}
    twin.inputs["SCALE"] = unit
    if node.kind.op == "layernorm":  # a layer norm node takes a BIAS (the measured form): zero
        twin.inputs["BIAS"] = ex.add_scratch(Tensor(f"{node.name}::ZERO_BIAS", pdims, pstrides, xdt), zero=True,
                                             constant=True)
    yhat = ex.virtual(f"{node.name}::NORMALIZED", x.get_dim(), FLOAT, x.get_stride())
    twin.outputs = {port: tensors[port] for port in node.outputs}
    twin.outputs["Y"] = yhat
    parts: list[Node] = [twin]
    scaled = y if bias is None else ex.virtual(f"{node.name}::SCALED", x.get_dim(), FLOAT, x.get_stride())
    mul = Pointwise(f"{node.name}.affine_scale", TABLE["mul"], [yhat, scale], {}, FLOAT)
    parts.append(inferred(mul, ex.ctx, {"OUT_0": scaled}))
    if bias is not None:
        add = Pointwise(f"{node.name}.affine_bias", TABLE["add"], [scaled, bias], {}, FLOAT)
        parts.append(inferred(add, ex.ctx, {"OUT_0": y}))
    return parts
