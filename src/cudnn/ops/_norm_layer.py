"""``cudnn.ops.layer_norm`` and ``rms_norm``: the input viewed as [rows, features] (features:
the normalized trailing axes), the torch ops ``cudnn::layer_norm`` and ``layer_norm_backward``,
their autograd and their eager path. A training forward writes the statistics cuDNN's backward
graph reads (MEAN and INV_VARIANCE, float32)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from . import _runtime as rt
from ._norm_shared import INFER, TRAIN, as_output, check_input

if TYPE_CHECKING:
    from .._graph.pygraph import pygraph


def _rows(op: str, x: torch.Tensor, normalized_shape: Sequence[int]) -> tuple[int, int]:
    shape = list(normalized_shape)
    k = len(shape)
    if k == 0 or k > x.dim() or list(x.shape[x.dim() - k:]) != shape:
        raise rt.OpError(f"cudnn.ops.{op}: normalized_shape: expected the trailing dims of the input "
                         f"{tuple(x.shape)}, got {tuple(shape)}")
    d = math.prod(shape)
    return x.numel() // d if d else 0, d


def _param(op: str, name: str, p: torch.Tensor | None, x: torch.Tensor, d: int, fill: float) -> torch.Tensor:
    """A [1, d] view of an affine parameter (ones or zeros when None)."""
    if p is None:
        return torch.full((1, d), fill, dtype=x.dtype, device=x.device)
    rt.check_tensor(op, name, p, device=x.device)
    if p.numel() != d:
        raise rt.OpError(f"cudnn.ops.{op}: {name}: expected {d} elements (the normalized shape), got shape "
                         f"{tuple(p.shape)}")
    return p.reshape(1, d).contiguous()


# -- layer norm and RMS norm ---------------------------------------------------------------------

def _ln_forward(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
                bias: torch.Tensor | None, eps: float, rms: bool, training: bool) -> tuple[rt.Built, int]:
    """The cached norm graph for these arguments, and the device. Arguments are checked when
    their key is first built."""
    key = ("layer_norm", x.shape, x.stride(), x.dtype, normalized_shape, rt.sig(weight), rt.sig(bias), eps, rms,
           training)
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _ln_build(dev, key, x, normalized_shape, weight, bias, eps, rms, training)
    return built, dev


def _ln_launch(built: rt.Built, dev: int, x: torch.Tensor, weight: torch.Tensor | None,
               bias: torch.Tensor | None, stats: tuple[int, ...]) -> torch.Tensor:
    """Run the norm graph: returns Y; a training graph also writes INV_VARIANCE and (layer
    norm) MEAN, [rows, 1] float32 each, at the addresses ``stats``."""
    _, d, ones, zeros, _ = built.info
    if x.is_contiguous():
        x2, y = x, torch.empty_like(x)  # contiguous like x
    else:
        x2, y = x.contiguous(), x.new_empty(x.shape)  # row-major x's shape: the [rows, d] the graph reads
    w = ones if weight is None else (weight if weight.is_contiguous() else weight.reshape(1, d).contiguous())
    # roles bound in _ln_build's order: x, scale, [bias], y, [inv], [mean]
    if zeros is not False:  # the graph has a bias
        b = zeros if bias is None else (bias if bias.is_contiguous() else bias.reshape(1, d).contiguous())
        rt.run(built, dev, (x2.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), *stats))
    else:
        rt.run(built, dev, (x2.data_ptr(), w.data_ptr(), y.data_ptr(), *stats))
    return y


def ln_run(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
            bias: torch.Tensor | None, eps: float, rms: bool,
            training: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Y and, in training, MEAN (layer norm) and INV_VARIANCE as [rows, 1] float32, each in
    memory of its own (a registered op's outputs alias nothing)."""
    built, dev = _ln_forward(x, normalized_shape, weight, bias, eps, rms, training)
    if not training:
        return _ln_launch(built, dev, x, weight, bias, ()), None, None
    rows = built.info[0]
    inv = x.new_empty((rows, 1), dtype=torch.float32)
    if rms:
        return _ln_launch(built, dev, x, weight, bias, (inv.data_ptr(),)), None, inv
    mean = x.new_empty((rows, 1), dtype=torch.float32)
    return _ln_launch(built, dev, x, weight, bias, (inv.data_ptr(), mean.data_ptr())), mean, inv


def _ln_stats(built: rt.Built, x: torch.Tensor, rms: bool) -> tuple[torch.Tensor, tuple[int, ...]]:
    """One float32 block for an eager training call's statistics (INV_VARIANCE, then layer
    norm's MEAN, each 256-byte aligned) and their addresses in the graph's order."""
    pad = built.info[4]
    block = x.new_empty(pad if rms else 2 * pad, dtype=torch.float32)
    p = block.data_ptr()
    return block, ((p,) if rms else (p, p + 4 * pad))


def _ln_build(dev: int, key: tuple, x: torch.Tensor, normalized_shape: tuple[int, ...],
              weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, rms: bool,
              training: bool) -> rt.Built:
    """Check the arguments, then build and cache the norm graph over [rows, features]."""
    op = "rms_norm" if rms else "layer_norm"
    check_input(op, x)
    rows, d = _rows(op, x, normalized_shape)
    x2 = x.reshape(rows, d).contiguous()
    w = _param(op, "weight", weight, x, d, 1.0)
    b = None if rms and bias is None else _param(op, "bias", bias, x, d, 0.0)
    y = torch.empty_like(x2)
    stats = torch.empty(rows, 1, dtype=torch.float32, device=x.device)

    def make(g: pygraph) -> dict:
        X, W = rt.tensor_of(g, "x", x2), rt.tensor_of(g, "scale", w)
        B = None if b is None else rt.tensor_of(g, "bias", b)
        phase = TRAIN if training else INFER
        if rms:
            Y, V = g.rmsnorm(phase, X, W, B, eps)
            M = None
        else:
            Y, M, V = g.layernorm(phase, X, W, B, eps)
        ports = {"x": X, "scale": W, "y": as_output(Y, y)}
        if B is not None:
            ports["bias"] = B
        if training:
            ports["inv"] = as_output(V, stats)
            if M is not None:
                ports["mean"] = as_output(M, stats)
        return ports

    built = rt.CACHE.build(dev, key, make)
    built.bind(*(r for r in ("x", "scale", "bias", "y", "inv", "mean") if r in built.ports))
    # cached ones / zeros stand for an absent weight / bias (False: the graph has no bias); the
    # last is the float32 elements each statistic takes in an eager call's block (`_ln_stats`)
    built.info = (rows, d, w if weight is None else None, False if b is None else (b if bias is None else None),
                  -(-rows // 64) * 64)
    return built


@torch.library.custom_op("cudnn::layer_norm", mutates_args=())
def _ln(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None, bias: torch.Tensor | None,
        eps: float, rms: bool, training: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, inv = ln_run(x, tuple(normalized_shape), weight, bias, eps, rms, training)
    return y, (x.new_empty(0) if mean is None else mean), (x.new_empty(0) if inv is None else inv)


@_ln.register_fake
def _(x, normalized_shape, weight, bias, eps, rms, training):  # type: ignore[no-untyped-def]
    op = "rms_norm" if rms else "layer_norm"
    check_input(op, x)
    rows, d = _rows(op, x, normalized_shape)
    _param(op, "weight", weight, x, d, 1.0)
    if bias is not None:
        _param(op, "bias", bias, x, d, 0.0)
    stats = x.new_empty(rows, 1, dtype=torch.float32) if training else x.new_empty(0)
    return x.new_empty(x.shape), (stats if training and not rms else x.new_empty(0)), \
        (x.new_empty(rows, 1, dtype=torch.float32) if training else x.new_empty(0))


def _ln_bwd_graph(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                  mean: torch.Tensor | None, inv: torch.Tensor, rms: bool, has_bias: bool) -> rt.Built:
    """The cached norm backward graph for these tensors (checked when first built); cuDNN's
    layer-norm backward always writes dBias."""
    has_bias = has_bias or not rms
    key = ("layer_norm_backward", x.shape, x.stride(), x.dtype, dy.shape, dy.stride(), dy.dtype,
           tuple(normalized_shape), rt.sig(weight), rt.sig(mean), rt.sig(inv), rms, has_bias)
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _ln_bwd_build(dev, key, dy, x, normalized_shape, weight, mean, inv, rms, has_bias)
    return built


def _ln_bwd_launch(built: rt.Built, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                   stats: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the backward graph on the statistics at ``stats`` (INV_VARIANCE, then MEAN where the
    graph reads it): dX, dWeight and dBias (empty when the graph has none), flat [features]."""
    _, d, ones, has_bias = built.info
    x2, dy2 = x.contiguous(), dy.contiguous()  # row-major: the [rows, d] the graph reads
    w = ones if weight is None else (weight if weight.is_contiguous() else weight.reshape(1, d).contiguous())
    dx = x.new_empty(x.shape)
    dw = w.new_empty(d)
    # roles bound in _ln_bwd_build's order: dy, x, scale, inv, [mean], dx, dw, [db]
    if has_bias:
        db = w.new_empty(d)
        rt.run(built, x.get_device(), (dy2.data_ptr(), x2.data_ptr(), w.data_ptr(), *stats, dx.data_ptr(),
                                       dw.data_ptr(), db.data_ptr()))
    else:
        db = x.new_empty(0)
        rt.run(built, x.get_device(), (dy2.data_ptr(), x2.data_ptr(), w.data_ptr(), *stats, dx.data_ptr(),
                                       dw.data_ptr()))
    return dx, dw, db


def ln_bwd_run(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                mean: torch.Tensor | None, inv: torch.Tensor, rms: bool,
                has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dX, dWeight and dBias (empty when there is none) from cuDNN's norm backward graph."""
    built = _ln_bwd_graph(dy, x, normalized_shape, weight, mean, inv, rms, has_bias)
    stats = (inv.data_ptr(),) if rms or mean is None else (inv.data_ptr(), mean.data_ptr())
    return _ln_bwd_launch(built, dy, x, weight, stats)


def _ln_bwd_build(dev: int, key: tuple, dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int],
                  weight: torch.Tensor | None, mean: torch.Tensor | None, inv: torch.Tensor, rms: bool,
                  has_bias: bool) -> rt.Built:
    """Check the arguments, then build and cache the norm backward graph over [rows, features]."""
    op = "rms_norm" if rms else "layer_norm"
    rows, d = _rows(op, x, normalized_shape)
    if dy.shape != x.shape:
        raise rt.OpError(f"cudnn.ops.{op}: grad_output: expected the input's shape {tuple(x.shape)}, got "
                         f"{tuple(dy.shape)}")
    x2, dy2 = x.reshape(rows, d).contiguous(), dy.reshape(rows, d).contiguous()
    w = _param(op, "weight", weight, x, d, 1.0)
    dx = torch.empty_like(x2)

    def make(g: pygraph) -> dict:
        DY, X, W = rt.tensor_of(g, "dy", dy2), rt.tensor_of(g, "x", x2), rt.tensor_of(g, "scale", w)
        V = rt.tensor_of(g, "inv", inv)
        ports = {"dy": DY, "x": X, "scale": W, "inv": V}
        if rms:
            DX, DW, DB = g.rmsnorm_backward(DY, X, W, V, has_bias)
        else:
            ports["mean"] = rt.tensor_of(g, "mean", mean)
            DX, DW, DB = g.layernorm_backward(DY, X, W, ports["mean"], V)
        ports["dx"], ports["dw"] = as_output(DX, dx), as_output(DW, w)
        if has_bias:
            ports["db"] = as_output(DB, w)
        return ports

    built = rt.CACHE.build(dev, key, make)
    built.bind(*(r for r in ("dy", "x", "scale", "inv", "mean", "dx", "dw", "db") if r in built.ports))
    built.info = (rows, d, w if weight is None else None, has_bias)
    return built


@torch.library.custom_op("cudnn::layer_norm_backward", mutates_args=())
def _ln_bwd(dy: torch.Tensor, x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None,
            mean: torch.Tensor, inv: torch.Tensor, rms: bool,
            has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return ln_bwd_run(dy, x, normalized_shape, weight, mean, inv, rms, has_bias)


@_ln_bwd.register_fake
def _(dy, x, normalized_shape, weight, mean, inv, rms, has_bias):  # type: ignore[no-untyped-def]
    d = math.prod(normalized_shape)
    has_bias = has_bias or not rms
    wd = x.dtype if weight is None else weight.dtype
    return x.new_empty(x.shape), x.new_empty(d, dtype=wd), x.new_empty(d if has_bias else 0, dtype=wd)


def _ln_setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, normalized_shape, weight, bias, _eps, rms, training = inputs
    _y, mean, inv = output
    ctx.ln = (list(normalized_shape), rms, None if bias is None else bias.shape, weight is not None, training)
    ctx.save_for_backward(x, weight, mean, inv)


def _ln_backward(ctx, dy, _dmean, _dinv):  # type: ignore[no-untyped-def]
    x, weight, mean, inv = ctx.saved_tensors
    normalized_shape, rms, bias_shape, has_weight, training = ctx.ln
    if not training:
        raise RuntimeError("cudnn.ops.layer_norm / rms_norm: this call ran with training=False (no statistics "
                           "saved); call with training=True to differentiate it")
    dx, dw, db = torch.ops.cudnn.layer_norm_backward(dy, x, normalized_shape, weight, mean, inv, rms,
                                                     bias_shape is not None)
    return (dx, None, dw.reshape(weight.shape) if has_weight else None,
            None if bias_shape is None else db.reshape(bias_shape), None, None, None)


_ln.register_autograd(_ln_backward, setup_context=_ln_setup)


class _LNEager(torch.autograd.Function):
    """The eager path of layer / RMS norm with a gradient wanted (see `_runtime`): the
    statistics share one block, and the backward graph is kept on the forward's."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps, rms, training):  # type: ignore[no-untyped-def]
        built, dev = _ln_forward(x, normalized_shape, weight, bias, eps, rms, training)
        block, stats = _ln_stats(built, x, rms) if training else (None, ())
        y = _ln_launch(built, dev, x, weight, bias, stats)
        ctx.ln = (built, normalized_shape, rms, None if bias is None else bias.shape, training)
        ctx.save_for_backward(x, weight, block)  # saved: freed after the backward, seen by saved-tensor hooks
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        x, weight, block = ctx.saved_tensors
        built, normalized_shape, rms, bias_shape, training = ctx.ln
        if not training:
            raise RuntimeError("cudnn.ops.layer_norm / rms_norm: this call ran with training=False (no statistics "
                               "saved); call with training=True to differentiate it")
        pad = built.info[4]
        # the graph reads row-major copies of X and dY, whatever their strides (saved-tensor
        # hooks may hand X back in another layout): only the types choose it
        memo = (dy.dtype, x.dtype, None if weight is None else weight.dtype)
        bwd = built.derived.get(memo)
        if bwd is None:
            rows = built.info[0]
            inv = block[:rows].view(rows, 1)
            mean = None if rms else block[pad:pad + rows].view(rows, 1)
            bwd = built.derived[memo] = _ln_bwd_graph(dy, x, normalized_shape, weight, mean, inv, rms,
                                                      bias_shape is not None)
        p = block.data_ptr()
        dx, dw, db = _ln_bwd_launch(bwd, dy, x, weight, (p,) if rms else (p, p + 4 * pad))
        # dWeight and dBias come out flat ([features]); a parameter of several dims gets its shape back
        if weight is not None and weight.dim() != 1:
            dw = dw.reshape(weight.shape)
        if bias_shape is not None and len(bias_shape) != 1:
            db = db.reshape(bias_shape)
        return (dx, None, dw if weight is not None else None, db if bias_shape is not None else None,
                None, None, None)


def _norm(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
          bias: torch.Tensor | None, eps: float, rms: bool, training: bool | None) -> torch.Tensor:
    grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                        or (bias is not None and bias.requires_grad))
    train = grad if training is None else bool(training)
    if rt.eager(x, weight, bias):
        if grad:
            return _LNEager.apply(x, normalized_shape, weight, bias, eps, rms, train)
        built, dev = _ln_forward(x, normalized_shape, weight, bias, eps, rms, train)
        if not train:
            return _ln_launch(built, dev, x, weight, bias, ())
        _block, stats = _ln_stats(built, x, rms)  # written, not kept; the name holds it past the launch
        return _ln_launch(built, dev, x, weight, bias, stats)
    return torch.ops.cudnn.layer_norm(x, list(normalized_shape), weight, bias, eps, rms, train)[0]


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if type(normalized_shape) is tuple:
        return normalized_shape
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def _is_shape(value: Any) -> bool:
    """A normalized shape (int, list, tuple, torch.Size) rather than a weight tensor."""
    return isinstance(value, (int, list, tuple)) and not isinstance(value, bool)


def layer_norm(input: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, training: bool | None = None) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` through cuDNN (the official signature; ``normalized_shape``
    may span several trailing dims). ``training`` (default: whether a gradient is wanted) makes
    the forward save MEAN / INV_VARIANCE for cuDNN's backward."""
    return _norm(input, _shape(normalized_shape), weight, bias, float(eps), False, training)


def rms_norm(input: torch.Tensor, weight: Any, bias: Any = None, eps: float | None = 1e-5, *,
             training: bool | None = None) -> torch.Tensor:
    """RMS norm of ``input`` over the trailing dims ``weight`` covers (the official signature:
    ``rms_norm(input, weight, bias=None, eps=1e-5)``); ``eps`` None: the dtype's machine epsilon,
    as torch. Compatibility: a shape as the second argument is the older
    ``rms_norm(x, normalized_shape, weight=None, eps=None)``, whose omitted ``eps`` is now 1e-5.
    Training saves INV_VARIANCE for cuDNN's backward."""
    if _is_shape(weight):  # rms_norm(x, normalized_shape, weight, eps)
        if bias is not None and not isinstance(bias, torch.Tensor):
            raise TypeError(f"cudnn.ops.rms_norm: weight: expected a torch.Tensor or None, got {type(bias).__name__}")
        normalized, weight, bias = _shape(weight), bias, None
    elif weight is None:
        normalized = (input.shape[-1],) if isinstance(input, torch.Tensor) and input.dim() else ()
    elif isinstance(weight, torch.Tensor):
        normalized = tuple(weight.shape) or (1,)
    else:
        raise TypeError(f"cudnn.ops.rms_norm: weight: expected a torch.Tensor (or a normalized shape), got "
                        f"{type(weight).__name__}")
    if bias is not None and not isinstance(bias, torch.Tensor):
        raise TypeError(f"cudnn.ops.rms_norm: bias: expected a torch.Tensor or None, got {type(bias).__name__}")
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"cudnn.ops.rms_norm: input: expected a torch.Tensor, got {type(input).__name__}")
    eps = torch.finfo(input.dtype).eps if eps is None else float(eps)
    return _norm(input, normalized, weight, bias, eps, True, training)
