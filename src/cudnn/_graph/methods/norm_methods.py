"""The normalization op methods of ``pygraph``: batch, layer, RMS, instance and adaptive
layer norm, forward and backward, with the documented signatures and return orders.

Forward methods return a list with the statistics the phase produces and ``None`` where it
produces none (``layernorm(INFERENCE, ...)`` -> ``[Y, None, None]``); backward methods return
``[DX, DSCALE, DBIAS]``. ``epsilon`` and ``momentum`` take a Python float (carried by the
graph as a by-value constant) or a scalar tensor. Keyword-only extras beyond the documented
API: ``zero_centered_gamma`` (SCALE is gamma - 1: the norm node adds 1 in a fused pointwise op,
as cuDNN's zero-centered-gamma samples do), ``batchnorm_inference(lowering=)``,
``instancenorm_backward(epsilon=)``, and ``bn_finalize``.

A layer or RMS norm whose tensors no other node uses is described to cuDNN as X [rows,
hidden, 1, 1] whatever rank the user gave (the layout of NVIDIA's samples): some fusions (a
pointwise op feeding SCALE) read X's first dim as the rows; see ``nodes.norm.canonical_views``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..families.norm_backward_nodes import BACKWARD, BNFinalize, NormBackward
from ..families.norm_nodes import FORWARD, OFFSET, BatchNormInference, NormForward, NormNode, forward_phase
from ..model.arguments import as_bool
from ..model.graph_errors import GraphError
from ..model.tensor import NOT_SET, Tensor
from .graph_ops import GraphOps
from .method_table import op

Maybe = Tensor | None


# -- plumbing -----------------------------------------------------------------------------

def _norm(self: GraphOps, node: NormNode, returns: Sequence[str]) -> list[Maybe]:
    node.added_to(self)
    self.add_node(node, node.output_ports())
    for port, t in node.inputs.items():  # constants made from numbers: 'node::PORT'
        if t.get_value() is not None and t.get_name().startswith(f"{node.label()}::"):
            t.set_name(f"{node.name}::{port}")
    return [node.outputs.get(port) for port in returns]


def _offset(self: GraphOps, zero_centered: bool, at: str) -> dict[str, Maybe]:
    """For a zero-centered gamma, the 1.0 the norm node adds to SCALE (port SCALE_OFFSET)."""
    zero_centered = as_bool(zero_centered, at, "zero_centered_gamma")
    return {OFFSET: self.input_tensor(1.0, at, "scale_offset")} if zero_centered else {}


def _maybe(self: GraphOps, value: Any, op: str, param: str) -> Maybe:
    return None if value is None else self.input_tensor(value, op, param)


def _peers(self: GraphOps, peer_stats: Sequence[Any] | None, op: str) -> dict[str, Maybe]:
    if peer_stats is None or isinstance(peer_stats, (Tensor, str, bytes)):
        if peer_stats is None:
            return {}
        raise TypeError(f"{op}: peer_stats must be a list of tensors, got {type(peer_stats).__name__}")
    return {f"PEER_STATS_{i}": self.input_tensor(t, op, f"peer_stats[{i}]") for i, t in enumerate(peer_stats)}


def _forward(self: GraphOps, op: str, phase: Any, input: Any, scale: Any, bias: Any, epsilon: Any,
             compute_data_type: Any, name: str, zero_centered: bool, returns: Sequence[str],
             bias_optional: bool = False, lowering: str = "auto") -> list[Maybe]:
    name = self.node_name(name)
    at = f"{op} {name!r}"
    phase = forward_phase(phase, at)
    inputs: dict[str, Maybe] = {
        "X": self.input_tensor(input, at, "input"), "SCALE": self.input_tensor(scale, at, "scale"),
        "BIAS": _maybe(self, bias, at, "bias") if bias_optional else self.input_tensor(bias, at, "bias"),
        "EPSILON": self.input_tensor(epsilon, at, "epsilon"), **_offset(self, zero_centered, at)}
    node = NormForward(name, FORWARD[op], phase, inputs, compute_data_type, lowering)
    return _norm(self, node, returns)


def _backward(self: GraphOps, op: str, grad: Any, input: Any, scale: Any, stats: dict[str, Any],
              compute_data_type: Any, name: str, zero_centered: bool = False,
              extra: dict[str, Maybe] | None = None, has_dbias: bool = True) -> list[Maybe]:
    name = self.node_name(name)
    at = f"{op} {name!r}"
    inputs: dict[str, Maybe] = {"DY": self.input_tensor(grad, at, "grad"), "X": self.input_tensor(input, at, "input"),
                                "SCALE": self.input_tensor(scale, at, "scale")}
    for port, (param, value) in stats.items():
        inputs[port] = _maybe(self, value, at, param)
    inputs.update(extra or {})
    inputs.update(_offset(self, zero_centered, at))
    node = NormBackward(name, BACKWARD[op], inputs, compute_data_type, has_dbias)
    return _norm(self, node, ["DX", "DSCALE", "DBIAS"])


def _running_stats(self: GraphOps, label: str, mean: Any, var: Any, momentum: Any, names: tuple[str, str]) -> None:
    """Running statistics come as a pair, and with a momentum; refuse half of it."""
    if (mean is None) != (var is None):
        missing, given = (names[0], names[1]) if mean is None else (names[1], names[0])
        raise GraphError(f"{label}: {missing} is None but {given} is given: updating the running "
                         f"statistics needs both {names[0]} and {names[1]}")
    if mean is not None and momentum is None:
        raise GraphError(f"{label}: momentum is None but {names[0]} and {names[1]} are given: the running "
                         "statistics update needs a momentum (e.g. 0.1)")
    if mean is None and momentum is not None:
        raise GraphError(f"{label}: momentum is given but {names[0]} and {names[1]} are None: give both "
                         "running-statistics tensors to update them, or momentum=None to skip the update")

# -- layer, RMS, instance and adaptive layer norm -------------------------------------------


@op
def layernorm(self: GraphOps, norm_forward_phase: Any, input: Any, scale: Any, bias: Any, epsilon: Any,
              compute_data_type: Any = NOT_SET, name: str = "", *,
              zero_centered_gamma: bool = False, lowering: str = "auto") -> list[Maybe]:
    """Layer norm over the axes where SCALE is not 1; returns [Y, MEAN, INV_VARIANCE]
    (TRAINING) or [Y, None, None] (INFERENCE). INV_VARIANCE = 1 / sqrt(var + epsilon).

    Speed (9.19, H200, bf16 16384x4096): SCALE/BIAS in X's dtype get cuDNN's fast engines;
    ``graph.autotune(...)`` picks the fastest. cuDNN has only a generic engine for fp32
    SCALE/BIAS with a 16-bit X; for that mix, ``lowering="affine_epilogue"`` builds a unit-scale
    norm with the fp32 affine step in fused pointwise ops (nodes.norm_affine): faster engines,
    longer builds. The default (``lowering="auto"``) builds the single norm operation; once the
    graph has run a few times, its lowering trial (``cudnn.set_lowering_trials``) builds the
    affine epilogue on a thread of its own, times both on the graph's executes and keeps the
    faster, as ``autotune`` would; ``lowering="norm"`` forces the single norm."""
    return _forward(self, "layernorm", norm_forward_phase, input, scale, bias, epsilon, compute_data_type,
                         name, zero_centered_gamma, ["Y", "MEAN", "INV_VARIANCE"], lowering=lowering)


@op
def rmsnorm(self: GraphOps, norm_forward_phase: Any, input: Any, scale: Any, bias: Any = None,
            epsilon: Any = None, compute_data_type: Any = NOT_SET, name: str = "", *,
            zero_centered_gamma: bool = False, lowering: str = "auto") -> list[Maybe]:
    """RMS norm (bias optional; epsilon required); returns [Y, INV_VARIANCE] (TRAINING) or
    [Y, None] (INFERENCE). INV_VARIANCE = 1 / sqrt(mean(x^2) + epsilon).

    Speed: as layernorm (fp32 SCALE/BIAS with a 16-bit X: the single norm at first, the fused
    affine step where the lowering trial or ``autotune`` finds it faster, or with
    ``lowering="affine_epilogue"``)."""
    return _forward(self, "rmsnorm", norm_forward_phase, input, scale, bias, epsilon, compute_data_type,
                         name, zero_centered_gamma, ["Y", "INV_VARIANCE"], bias_optional=True, lowering=lowering)


@op
def instancenorm(self: GraphOps, norm_forward_phase: Any, input: Any, scale: Any, bias: Any,
                 epsilon: Any, compute_data_type: Any = NOT_SET, name: str = "") -> list[Maybe]:
    """Instance norm of [N, C, spatial...] over the spatial axes, SCALE/BIAS [1, C, 1...];
    returns [Y, MEAN, INV_VARIANCE] (statistics [N, C, 1...]) or [Y, None, None]."""
    return _forward(self, "instancenorm", norm_forward_phase, input, scale, bias, epsilon, compute_data_type,
                         name, False, ["Y", "MEAN", "INV_VARIANCE"])


@op
def adalayernorm(self: GraphOps, norm_forward_phase: Any, input: Any, scale: Any, bias: Any = None,
                 epsilon: Any = None, compute_data_type: Any = NOT_SET, name: str = "", *,
                 zero_centered_gamma: bool = False) -> list[Maybe]:
    """Adaptive layer norm: SCALE/BIAS may differ per sample ([N, 1, D] for X [N, S, D]);
    returns [Y, MEAN, INV_VARIANCE] or [Y, None, None]. Needs cuDNN >= 9.9 to build."""
    return _forward(self, "adalayernorm", norm_forward_phase, input, scale, bias, epsilon, compute_data_type,
                         name, zero_centered_gamma, ["Y", "MEAN", "INV_VARIANCE"], bias_optional=True)


@op
def layernorm_backward(self: GraphOps, grad: Any, input: Any, scale: Any, mean: Any, inv_variance: Any,
                       compute_data_type: Any = NOT_SET, name: str = "", *,
                       zero_centered_gamma: bool = False) -> list[Maybe]:
    """Layer norm gradients from DY (grad) and the saved statistics; returns [DX, DSCALE, DBIAS]."""
    return _backward(self, "layernorm_backward", grad, input, scale,
                          {"MEAN": ("mean", mean), "INV_VARIANCE": ("inv_variance", inv_variance)},
                          compute_data_type, name, zero_centered_gamma)


@op
def rmsnorm_backward(self: GraphOps, grad: Any, input: Any, scale: Any, inv_variance: Any,
                     has_dbias: bool, compute_data_type: Any = NOT_SET, name: str = "", *,
                     zero_centered_gamma: bool = False) -> list[Maybe]:
    """RMS norm gradients; returns [DX, DSCALE, DBIAS], DBIAS None unless has_dbias."""
    has_dbias = as_bool(has_dbias, f"rmsnorm_backward {self.node_name(name)!r}", "has_dbias")
    out = _backward(self, "rmsnorm_backward", grad, input, scale, {"INV_VARIANCE": ("inv_variance", inv_variance)},
                         compute_data_type, name, zero_centered_gamma, has_dbias=has_dbias)
    node_name = self.nodes[-1].name
    for t, suffix in zip(out[1:], ("Dscale", "Dbias")):  # the documented tensor names
        if t is not None:
            t.set_name(f"{node_name}::{suffix}")
    return out


@op
def instancenorm_backward(self: GraphOps, grad: Any, input: Any, scale: Any, mean: Any = None,
                          inv_variance: Any = None, compute_data_type: Any = NOT_SET, name: str = "", *,
                          epsilon: Any = None) -> list[Maybe]:
    """Instance norm gradients; returns [DX, DSCALE, DBIAS]. Without the saved mean and
    inv_variance, give ``epsilon=`` so cuDNN can recompute them."""
    label = f"instancenorm_backward {self.node_name(name)!r}"
    if (mean is None) != (inv_variance is None):
        raise GraphError(f"{label}: give both mean and inv_variance (the TRAINING forward's statistics) "
                         "or neither")
    if mean is None and epsilon is None:
        raise GraphError(f"{label}: without mean and inv_variance cuDNN recomputes the statistics and needs "
                         "epsilon=; pass the forward's MEAN and INV_VARIANCE, or epsilon")
    eps = {"EPSILON": _maybe(self, epsilon, label, "epsilon")}
    return _backward(self, "instancenorm_backward", grad, input, scale,
                          {"MEAN": ("mean", mean), "INV_VARIANCE": ("inv_variance", inv_variance)},
                          compute_data_type, name, extra=eps)


@op
def adalayernorm_backward(self: GraphOps, grad: Any, input: Any, scale: Any, mean: Any,
                          inv_variance: Any, compute_data_type: Any = NOT_SET, name: str = "", *,
                          zero_centered_gamma: bool = False) -> list[Maybe]:
    """Adaptive layer norm gradients; returns [DX, DSCALE, DBIAS] (DSCALE/DBIAS per sample)."""
    return _backward(self, "adalayernorm_backward", grad, input, scale,
                          {"MEAN": ("mean", mean), "INV_VARIANCE": ("inv_variance", inv_variance)},
                          compute_data_type, name, zero_centered_gamma)

# -- batch norm ---------------------------------------------------------------------------


@op
def batchnorm(self: GraphOps, input: Any, scale: Any, bias: Any, in_running_mean: Any, in_running_var: Any,
              epsilon: Any, momentum: Any, peer_stats: Sequence[Any] | None = None,
              compute_data_type: Any = NOT_SET, name: str = "") -> list[Maybe]:
    """Training batch norm over N and the spatial axes; returns [Y, MEAN, INV_VARIANCE,
    NEXT_RUNNING_MEAN, NEXT_RUNNING_VAR]. The running statistics are optional (None, None
    with momentum None: the last two outputs are None); next = (1 - momentum) * prev +
    momentum * batch statistic."""
    op = "batchnorm"
    name = self.node_name(name)
    at = f"{op} {name!r}"
    _running_stats(self, at, in_running_mean, in_running_var, momentum, ("in_running_mean", "in_running_var"))
    inputs: dict[str, Maybe] = {
        "X": self.input_tensor(input, at, "input"), "SCALE": self.input_tensor(scale, at, "scale"),
        "BIAS": self.input_tensor(bias, at, "bias"),
        "PREV_RUNNING_MEAN": _maybe(self, in_running_mean, at, "in_running_mean"),
        "PREV_RUNNING_VAR": _maybe(self, in_running_var, at, "in_running_var"),
        "EPSILON": self.input_tensor(epsilon, at, "epsilon"), "MOMENTUM": _maybe(self, momentum, at, "momentum"),
        **_peers(self, peer_stats, at)}
    node = NormForward(name, FORWARD[op], forward_phase("TRAINING", op), inputs, compute_data_type)
    return _norm(self, node, ["Y", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"])


@op
def batchnorm_inference(self: GraphOps, input: Any, mean: Any, inv_variance: Any, scale: Any, bias: Any,
                        compute_data_type: Any = NOT_SET, name: str = "", *, lowering: str = "auto") -> Tensor:
    """Y = (X - mean) * inv_variance * scale + bias with per-channel [1, C, 1...] tensors."""
    name = self.node_name(name)
    at = f"batchnorm_inference {name!r}"
    inputs: dict[str, Maybe] = {
        "X": self.input_tensor(input, at, "input"), "MEAN": self.input_tensor(mean, at, "mean"),
        "INV_VARIANCE": self.input_tensor(inv_variance, at, "inv_variance"),
        "SCALE": self.input_tensor(scale, at, "scale"), "BIAS": self.input_tensor(bias, at, "bias")}
    node = BatchNormInference(name, inputs, compute_data_type, lowering)
    y = _norm(self, node, ["Y"])[0]
    assert y is not None
    return y


@op
def batchnorm_backward(self: GraphOps, grad: Any, input: Any, scale: Any, mean: Any, inv_variance: Any,
                       peer_stats: Sequence[Any] | None = None, compute_data_type: Any = NOT_SET,
                       name: str = "") -> list[Maybe]:
    """Batch norm gradients from the saved statistics; returns [DX, DSCALE, DBIAS]."""
    op = "batchnorm_backward"
    return _backward(self, op, grad, input, scale,
                          {"MEAN": ("mean", mean), "INV_VARIANCE": ("inv_variance", inv_variance)},
                          compute_data_type, name, extra=_peers(self, peer_stats, f"{op} {self.node_name(name)!r}"))


@op
def bn_finalize(self: GraphOps, sum: Any, sq_sum: Any, scale: Any, bias: Any, epsilon: Any,
                accum_count: Any, prev_running_mean: Any = None, prev_running_var: Any = None,
                momentum: Any = None, compute_data_type: Any = NOT_SET, name: str = "") -> list[Maybe]:
    """Batch-norm statistics from genstats' per-channel SUM and SQ_SUM over ``accum_count``
    elements (an int: N*H*W); returns [EQ_SCALE, EQ_BIAS, MEAN, INV_VARIANCE,
    NEXT_RUNNING_MEAN, NEXT_RUNNING_VAR] (the last two None without running statistics).
    cuDNN requires a momentum even without running statistics: None then gives it 0.0.
    Build it as a graph of its own, SUM and SQ_SUM its inputs, as NVIDIA's samples do.
    Not in the documented Python API (the C++ frontend's bn_finalize)."""
    name = self.node_name(name)
    at = f"bn_finalize {name!r}"
    _running_stats(self, at, prev_running_mean, prev_running_var, momentum, ("prev_running_mean", "prev_running_var"))
    if momentum is None:
        momentum = 0.0  # unused without running statistics, but the backend requires the factor
    if isinstance(accum_count, float):
        raise GraphError(f"{at}: accum_count must be an int (elements per channel), got {accum_count}")
    inputs: dict[str, Maybe] = {
        "SUM": self.input_tensor(sum, at, "sum"), "SQ_SUM": self.input_tensor(sq_sum, at, "sq_sum"),
        "SCALE": self.input_tensor(scale, at, "scale"), "BIAS": self.input_tensor(bias, at, "bias"),
        "EPSILON": self.input_tensor(epsilon, at, "epsilon"),
        "ACCUM_COUNT": self.input_tensor(accum_count, at, "accum_count"),
        "PREV_RUNNING_MEAN": _maybe(self, prev_running_mean, at, "prev_running_mean"),
        "PREV_RUNNING_VAR": _maybe(self, prev_running_var, at, "prev_running_var"),
        "MOMENTUM": self.input_tensor(momentum, at, "momentum")}
    node = BNFinalize(name, inputs, compute_data_type)
    return _norm(self, node, ["EQ_SCALE", "EQ_BIAS", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN",
                             "NEXT_RUNNING_VAR"])
