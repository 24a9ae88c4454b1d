"""Ops the official 1.32 API declares that need more than cuDNN 9.19 on a Hopper GPU.

``Rope``: the RoPE operations of the backend API (forward cuDNN >= 9.24, backward >= 9.25),
lowered like any primitive; an older cuDNN refuses them at build through the version gate of
`Lowering.descriptor`.

``LinearAttention``: the linear-attention families (gdn, gdn2, gdp, kda, mamba2: forward,
backward, summary and summary backward). The official serves them with Python engines for
Blackwell GPUs (CuTe DSL or cuTile kernels), not through cuDNN; here they are validated and
shape-inferred from one table (`LA_SPECS`) and refused at build.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type
from ...backend.descriptor import Descriptor
from ..model.arguments import as_bool, as_float, as_int, optional
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.lower import Lowering
from ..model.node import Context, Node
from ..model.tensor import Tensor

# -- RoPE ----------------------------------------------------------------------------------------


class Rope(Node):
    """Rotary position embedding of X [B, H, S, D] by the angles FREQS [S, 1, 1, D] (cuDNN
    computes their sine and cosine); ``rope_dim`` (default D) is how many trailing slots of D
    rotate, the others pass through scaled by ``output_scale``. ``backward``: DX from DY."""

    tag = "ROPE"

    def __init__(self, name: str, x: Tensor, freqs: Tensor, output_scale: Any, rope_dim: Any,
                 compute_data_type: Any, backward: bool = False) -> None:
        self.op = "rope_backward" if backward else "rope"
        super().__init__(name, compute_data_type)
        self.backward = backward
        self.in_port, self.out_port = ("DY", "DX") if backward else ("X", "Y")
        self.inputs = {self.in_port: x, "FREQS": freqs}
        self.output_scale = 1.0 if output_scale is None else as_float(output_scale, self.label(), "output_scale")
        self.rope_dim = optional(as_int, rope_dim, self.label(), "rope_dim")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x, freqs = self.inputs[self.in_port], self.inputs["FREQS"]
        dims, fdims = x.get_dim(), freqs.get_dim()
        if len(dims) != 4:
            raise GraphError(f"{self.at(self.in_port)}: expected [B, H, S, D], got dims {dims}")
        if list(fdims) != [dims[2], 1, 1, dims[3]]:
            raise GraphError(f"{self.at('FREQS')}: expected [S, 1, 1, D] = {[dims[2], 1, 1, dims[3]]}, got {fdims}")
        rope_dim = dims[3] if self.rope_dim is None else self.rope_dim
        if not 0 < rope_dim <= dims[3] or rope_dim % 2:
            raise GraphError(f"{self.label()}: rope_dim must be even and in (0, D={dims[3]}], got {rope_dim}")
        self.set_output(self.out_port, self.outputs[self.out_port], ctx, dims, x.get_stride(), like=x)

    def attributes(self) -> dict[str, Any]:
        return {"output_scale": self.output_scale, "rope_dim": self.rope_dim, "backward": self.backward}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        x, y = self.inputs[self.in_port], self.outputs[self.out_port]
        rope_dim = x.get_dim()[3] if self.rope_dim is None else self.rope_dim
        if self.backward:
            op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_ROPE_BWD_DESCRIPTOR, self.name)
            ports = (A.CUDNN_ATTR_OPERATION_ROPE_BWD_DYDESC, A.CUDNN_ATTR_OPERATION_ROPE_BWD_DXDESC,
                     A.CUDNN_ATTR_OPERATION_ROPE_BWD_FREQSDESC, A.CUDNN_ATTR_OPERATION_ROPE_BWD_OUTPUT_SCALE,
                     A.CUDNN_ATTR_OPERATION_ROPE_BWD_ROPE_DIM)
        else:
            op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_ROPE_FWD_DESCRIPTOR, self.name)
            ports = (A.CUDNN_ATTR_OPERATION_ROPE_FWD_XDESC, A.CUDNN_ATTR_OPERATION_ROPE_FWD_YDESC,
                     A.CUDNN_ATTR_OPERATION_ROPE_FWD_FREQSDESC, A.CUDNN_ATTR_OPERATION_ROPE_FWD_OUTPUT_SCALE,
                     A.CUDNN_ATTR_OPERATION_ROPE_FWD_ROPE_DIM)
        op.set(ports[0], lw.tensor(x))
        op.set(ports[1], lw.tensor(y))
        op.set(ports[2], lw.tensor(self.inputs["FREQS"]))
        op.set(ports[3], self.output_scale, T.CUDNN_TYPE_FLOAT)
        op.set(ports[4], rope_dim, T.CUDNN_TYPE_INT64)
        return [op.finalize()]


# -- linear attention ------------------------------------------------------------------------------

Dims = list[int]
Rule = Callable[["LinearAttention"], "Dims | None"]


def _rows(t: Tensor) -> int:
    """Tokens of a THD tensor ([T, H, D], or GDP's token-major [T, n, H, D])."""
    d = t.get_dim()
    return d[0] * d[1] if len(d) == 4 else d[0]


def _seqs(n: LinearAttention) -> int:
    return n.inputs["cu_seqlens"].get_dim()[0] - 1


def _heads_out(n: LinearAttention) -> int:
    return max(n.inputs["q"].get_dim()[-2], n.inputs["v"].get_dim()[-2])


def _o(n: LinearAttention) -> Dims:
    return [_rows(n.inputs["v"]), _heads_out(n), n.inputs["v"].get_dim()[-1]]


def _gdp_o(n: LinearAttention) -> Dims:
    return [n.inputs["q"].get_dim()[0], _heads_out(n), n.inputs["v"].get_dim()[-1]]


def _final_state(n: LinearAttention) -> Dims:
    rows = _seqs(n)
    if "state_indices" in n.inputs and "initial_state" in n.inputs:
        rows = n.inputs["initial_state"].get_dim()[0]  # written back into the caller's pool
    return [rows, _heads_out(n), n.inputs["v"].get_dim()[-1], n.inputs["q"].get_dim()[-1]]


def _checkpoints(n: LinearAttention) -> Dims:
    every = n.attrs["checkpoint_every_n_tokens"] or 1
    return [max(_rows(n.inputs["v"]) // every + _seqs(n), 1), _heads_out(n), n.inputs["v"].get_dim()[-1],
            n.inputs["q"].get_dim()[-1]]


def _summary_state(n: LinearAttention) -> Dims:
    return [_seqs(n), n.inputs["g"].get_dim()[1], n.inputs["v"].get_dim()[-1], n.inputs["k"].get_dim()[-1]]


def _summary_bwd_state(n: LinearAttention) -> Dims:
    return [_seqs(n), n.inputs["g"].get_dim()[1], n.inputs["dO"].get_dim()[-1], n.inputs["k"].get_dim()[-1]]


def _transition(n: LinearAttention) -> Dims:
    k = n.inputs["k"].get_dim()[-1]
    return [_seqs(n), n.inputs["g"].get_dim()[1], k, k]


def _mamba2_transition(n: LinearAttention) -> Dims:
    return [_seqs(n), n.inputs["g"].get_dim()[1]]


def _like(port: str) -> Rule:
    return lambda n: list(n.inputs[port].get_dim())


@dataclass(frozen=True)
class LASpec:
    """One linear-attention op: tensor inputs (the first ``required`` must be given), attributes
    with defaults, outputs with their shape rule and when they exist."""

    op: str
    inputs: tuple[str, ...]
    required: int
    attrs: tuple[tuple[str, Any], ...]
    outputs: tuple[tuple[str, Rule], ...]
    exists: dict[str, Callable[[LinearAttention], bool]] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.op.split("_")[0]

    @property
    def backward(self) -> bool:
        return self.op.endswith("_bwd")

    @property
    def summary(self) -> bool:
        return "_summary" in self.op


def _flag(attr: str) -> Callable[[LinearAttention], bool]:
    return lambda n: bool(n.attrs.get(attr))


def _given(port: str) -> Callable[[LinearAttention], bool]:
    return lambda n: port in n.inputs


_GATE = (("use_beta_sigmoid", False), ("allow_neg_eigval", False))
_TAIL = (("batch_invariant", False),)


def _la_specs() -> dict[str, LASpec]:
    specs: list[LASpec] = []
    for family in ("gdn", "gdp", "kda", "gdn2"):
        w = ("w",) if family == "gdn2" else ()
        extra: tuple[tuple[str, Any], ...] = (("num_householder", 1),) if family == "gdp" else ()
        gate: tuple[tuple[str, Any], ...] = (("safe_gate", False), ("gate_domain", "log"))
        if family in ("kda", "gdn2"):
            gate += (("gate_lower_bound", None),)
        if family == "gdn2":
            gate = (("beta_guard", False), *gate)
        o_rule = _gdp_o if family == "gdp" else _o
        grads = tuple((f"d{p[0].upper()}{p[1:]}" if p in ("q", "k", "v", "g") else
                       {"beta": "dBeta", "w": "dW"}[p], _like(p)) for p in ("q", "k", "v", "g", "beta", *w))
        specs.append(LASpec(
            family,
            ("q", "k", "v", "g", "beta", *w, "cu_seqlens", "initial_state", "a_log", "dt_bias", "state_indices"),
            6 + len(w), (*extra, ("scale", None), ("output_final_state", False), ("use_qk_l2norm", False),
                         ("checkpoint_every_n_tokens", 0), *_GATE, *gate, *_TAIL, ("overwrite_initial_state", False)),
            (("O", o_rule), ("final_state", _final_state), ("state_checkpoints", _checkpoints)),
            {"final_state": _flag("output_final_state"), "state_checkpoints": _flag("checkpoint_every_n_tokens")}))
        specs.append(LASpec(
            f"{family}_bwd", ("q", "k", "v", "g", "beta", *w, "cu_seqlens", "dO", "state_checkpoints", "initial_state",
                              "d_final_state", "a_log", "dt_bias"),
            7 + len(w), (*extra, ("scale", None), ("use_qk_l2norm", False), ("checkpoint_every_n_tokens", 0), *_GATE,
                         *gate, *_TAIL, ("overwrite_initial_state", False)),
            (*grads, ("d_initial_state", _like("initial_state")), ("d_a_log", _like("a_log")),
             ("d_dt_bias", _like("dt_bias"))),
            {"d_initial_state": _given("initial_state"), "d_a_log": _given("a_log"), "d_dt_bias": _given("dt_bias")}))
        specs.append(LASpec(
            f"{family}_summary", ("k", "v", "g", "beta", *w, "cu_seqlens", "initial_state", "a_log", "dt_bias"),
            5 + len(w), (*extra, ("output_transition", False), ("use_qk_l2norm", False), *_GATE, *gate, *_TAIL),
            (("final_state", _summary_state), ("transition", _transition)), {"transition": _flag("output_transition")}))
        specs.append(LASpec(
            f"{family}_summary_bwd", ("q", "k", "g", "beta", "cu_seqlens", "dO", "d_final_state", "a_log", "dt_bias"),
            6, (*extra, ("output_transition", False), ("scale", None), ("use_qk_l2norm", False), *_GATE, *gate, *_TAIL),
            (("d_initial_state", _summary_bwd_state), ("transition", _transition)),
            {"transition": _flag("output_transition")}))
    dt = (("dt_softplus", True), ("dt_min", 0.0), ("dt_max", None))
    specs.append(LASpec(
        "mamba2", ("q", "k", "v", "g", "a", "cu_seqlens", "initial_state", "dt_bias", "d", "z", "state_indices"), 6,
        (("output_final_state", False), ("checkpoint_every_n_tokens", 0), *dt, ("output_pre_gate", False), *_TAIL,
         ("overwrite_initial_state", False)),
        (("O", _o), ("final_state", _final_state), ("state_checkpoints", _checkpoints), ("O_pre", _o)),
        {"final_state": _flag("output_final_state"), "state_checkpoints": _flag("checkpoint_every_n_tokens"),
         "O_pre": lambda n: bool(n.attrs["output_pre_gate"]) and "z" in n.inputs}))
    specs.append(LASpec(
        "mamba2_bwd", ("q", "k", "v", "g", "a", "cu_seqlens", "dO", "state_checkpoints", "initial_state",
                       "d_final_state", "dt_bias", "d", "z", "O_pre"), 7,
        (("checkpoint_every_n_tokens", 0), *dt, *_TAIL, ("overwrite_initial_state", False)),
        (("dQ", _like("q")), ("dK", _like("k")), ("dV", _like("v")), ("dG", _like("g")), ("dA", _like("a")),
         ("d_initial_state", _like("initial_state")), ("d_dt_bias", _like("dt_bias")), ("dD", _like("d")),
         ("dZ", _like("z"))),
        {"d_initial_state": _given("initial_state"), "d_dt_bias": _given("dt_bias"), "dD": _given("d"),
         "dZ": _given("z")}))
    specs.append(LASpec(
        "mamba2_summary", ("k", "v", "g", "a", "cu_seqlens", "initial_state", "dt_bias"), 5,
        (("output_transition", False), *dt, *_TAIL),
        (("final_state", _summary_state), ("transition", _mamba2_transition)),
        {"transition": _flag("output_transition")}))
    specs.append(LASpec(
        "mamba2_summary_bwd", ("q", "k", "g", "a", "cu_seqlens", "dO", "d_final_state", "dt_bias"), 6,
        (("output_transition", False), *dt, *_TAIL),
        (("d_initial_state", _summary_bwd_state), ("transition", _mamba2_transition)),
        {"transition": _flag("output_transition")}))
    return {s.op: s for s in specs}


LA_SPECS: dict[str, LASpec] = _la_specs()
_BOOL_ATTRS = {"output_final_state", "use_qk_l2norm", "use_beta_sigmoid", "allow_neg_eigval", "safe_gate",
               "batch_invariant", "overwrite_initial_state", "output_transition", "beta_guard", "dt_softplus",
               "output_pre_gate"}
_FLOAT_ATTRS = {"scale", "gate_lower_bound", "dt_min", "dt_max"}
_INT_ATTRS = {"checkpoint_every_n_tokens", "num_householder"}
_STATE_PORTS = {"final_state", "state_checkpoints", "transition", "d_initial_state"}
_TOKEN_INPUTS = {"q", "k", "v", "dO", "w"}
_GRAD_OF = {"dQ": "q", "dK": "k", "dV": "v", "dG": "g", "dBeta": "beta", "dW": "w", "dA": "a", "d_a_log": "a_log",
            "d_dt_bias": "dt_bias", "dD": "d", "dZ": "z"}

NEEDS = ("the official frontend's Python engines for Blackwell GPUs (CuTe DSL or cuTile kernels); cuDNN's "
         "backend API, which cudnn-py drives, has no such operation")


class LinearAttention(Node):
    """One linear-attention op of `LA_SPECS`: validated and shape-inferred, refused at build."""

    tag = "LINEAR_ATTENTION"

    def __init__(self, name: str, spec: LASpec, inputs: dict[str, Tensor], attrs: dict[str, Any],
                 compute_data_type: Any) -> None:
        self.op = spec.op
        super().__init__(name, compute_data_type)
        self.spec = spec
        self.inputs = inputs
        self.attrs = {a: self._attr(a, attrs[a]) for a, _ in spec.attrs}
        self._check_attrs()

    def _attr(self, attr: str, value: Any) -> Any:
        if value is None:
            return None
        if attr in _BOOL_ATTRS:
            return as_bool(value, self.label(), attr)
        if attr in _FLOAT_ATTRS:
            return as_float(value, self.label(), attr)
        if attr in _INT_ATTRS:
            return as_int(value, self.label(), attr)
        if attr == "gate_domain" and not isinstance(value, str):
            raise TypeError(f"{self.label()}: gate_domain must be 'log' or 'linear', got {value!r}")
        return value

    def _refuse_unless(self, ok: bool, why: str) -> None:
        if not ok:
            raise GraphError(f"{self.label()}: {why}")

    def _check_attrs(self) -> None:
        a, ins, spec = self.attrs, self.inputs, self.spec
        mamba2 = spec.family == "mamba2"
        safe_gate = mamba2 or bool(a.get("safe_gate"))
        every = a.get("checkpoint_every_n_tokens") or 0
        self._refuse_unless(a.get("gate_domain", "log") in ("log", "linear"),
                            f"gate_domain must be 'log' or 'linear', got {a.get('gate_domain')!r}")
        self._refuse_unless(not (a.get("gate_domain") == "linear" and safe_gate),
                            "gate_domain='linear' cannot be combined with safe_gate=True")
        self._refuse_unless(mamba2 or safe_gate or not ({"a_log", "dt_bias"} & ins.keys()),
                            "a_log and dt_bias are used only with safe_gate=True")
        self._refuse_unless(a.get("gate_lower_bound") is None or safe_gate, "gate_lower_bound needs safe_gate=True")
        self._refuse_unless(every >= 0, f"checkpoint_every_n_tokens must be >= 0, got {every}")
        self._refuse_unless(not a.get("allow_neg_eigval") or bool(a.get("use_beta_sigmoid")),
                            "allow_neg_eigval needs use_beta_sigmoid=True")
        self._refuse_unless(a.get("num_householder", 1) >= 1,
                            f"num_householder must be >= 1, got {a.get('num_householder')}")
        self._refuse_unless("state_indices" not in ins or "initial_state" in ins,
                            "state_indices selects rows of the initial_state pool: give initial_state")
        if spec.backward:
            self._refuse_unless(not every or "state_checkpoints" in ins,
                                f"checkpoint_every_n_tokens={every} needs the forward's state_checkpoints input")
            self._refuse_unless(not a.get("overwrite_initial_state") or "d_final_state" in ins,
                                "overwrite_initial_state needs the d_final_state input")
            self._refuse_unless(not ("z" in ins and mamba2) or "O_pre" in ins,
                                "the z-gate backward needs the forward's pre-gate output O_pre")
        elif not spec.summary:
            self._refuse_unless(not a.get("overwrite_initial_state") or (
                "initial_state" in ins and bool(a.get("output_final_state"))),
                "overwrite_initial_state needs initial_state and output_final_state=True")
            self._refuse_unless(not (mamba2 and a.get("output_pre_gate")) or "z" in ins,
                                "output_pre_gate needs the z gate input")
        if mamba2 and a.get("dt_max") is not None:
            self._refuse_unless((a.get("dt_min") or 0.0) <= a["dt_max"],
                                f"dt_min {a.get('dt_min')} must not exceed dt_max {a['dt_max']}")

    def output_ports(self) -> list[str]:
        """The outputs this call produces (the others come back None)."""
        return [port for port, _ in self.spec.outputs if self.spec.exists.get(port, lambda n: True)(self)]

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        for port, t in self.inputs.items():
            dims = t.get_dim()
            if port in _TOKEN_INPUTS and len(dims) not in ((3, 4) if self.spec.family == "gdp" else (3,)):
                raise GraphError(f"{self.at(port)}: expected [T, H, D] (THD, tokens of every sequence packed), "
                                 f"got dims {dims}")
        cu = self.inputs["cu_seqlens"]
        if len(cu.get_dim()) != 1 or cu.get_dim()[0] < 2 or cu.get_data_type() not in (data_type.INT32,
                                                                                       data_type.INT64):
            raise GraphError(f"{self.at('cu_seqlens')}: expected an INT32/INT64 [N + 1] vector of sequence starts, "
                             f"got {cu.get_data_type().name} dims {cu.get_dim()}")
        mamba2_d = self.inputs.get("d")
        if mamba2_d is not None and len(mamba2_d.get_dim()) not in (1, 2):
            raise GraphError(f"{self.at('d')}: expected [HO] or [HO, V], got dims {mamba2_d.get_dim()}")
        like = next(self.inputs[p] for p in ("v", "q", "k") if p in self.inputs)
        rules = dict(self.spec.outputs)
        for port, t in self.outputs.items():
            if port in _STATE_PORTS and t.get_data_type() == data_type.NOT_SET:
                state = self.inputs.get("initial_state")
                t.set_data_type(state.get_data_type() if state is not None else data_type.FLOAT)
            source = self.inputs.get(_GRAD_OF.get(port, ""), like)
            self.set_output(port, t, ctx, rules[port](self), None, like=source)

    def attributes(self) -> dict[str, Any]:
        return {"op": self.op, **self.attrs}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        raise GraphNotSupportedError(
            f"{self.label()}: {self.op} needs {NEEDS}. Loaded: cuDNN {lw.version // 10000}.{lw.version // 100 % 100}."
            f"{lw.version % 100}; build it with the official package on a Blackwell GPU")
