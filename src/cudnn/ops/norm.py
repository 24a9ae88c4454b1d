"""``cudnn.ops.layer_norm``, ``rms_norm`` and ``batch_norm``: torch ops over cuDNN's norm graphs;
``cudnn.ops.norm`` is also the official package's ``cudnn.ops.norm`` (``rms_norm`` and ``layer_norm``
with its signatures, the torch ops ``cudnn::rmsnorm``, ``rmsnorm_bwd``, ``layernorm`` and
``layernorm_bwd`` with its schemas, registered when this module is imported).

Training forwards write the statistics cuDNN's backward graphs read (MEAN and INV_VARIANCE,
float32), so the backward is one cuDNN graph too. Layer and RMS norm view the input as
[rows, features] (features: the normalized trailing axes); batch norm runs NHWC (cuDNN's
batch-norm engines want it) and returns the input's layout. Eval-mode batch norm is one
pointwise graph reading the running statistics as they are; its backward is another for dX
(dY * inv_std * weight) and, where dWeight or dBias is wanted, the backward graph's sums at
the running statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from .. import norm_forward_phase
from .._lib.status import CudnnNotSupportedError
from . import _runtime as rt

if TYPE_CHECKING:
    from .._graph.model.tensor import Tensor
    from .._graph.pygraph import pygraph

TRAIN, INFER = norm_forward_phase.TRAINING, norm_forward_phase.INFERENCE


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


def _check_x(op: str, x: torch.Tensor) -> None:
    rt.check_tensor(op, "input", x)
    rt.check_cuda(op, "input", x)


def _out(t: Tensor, like: torch.Tensor) -> Tensor:
    return t.set_output(True).set_data_type(rt.CUDNN_DTYPE[like.dtype]).set_dim(list(like.shape)) \
        .set_stride(list(like.stride()))


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


def _ln_run(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
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
    _check_x(op, x)
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
        ports = {"x": X, "scale": W, "y": _out(Y, y)}
        if B is not None:
            ports["bias"] = B
        if training:
            ports["inv"] = _out(V, stats)
            if M is not None:
                ports["mean"] = _out(M, stats)
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
    y, mean, inv = _ln_run(x, tuple(normalized_shape), weight, bias, eps, rms, training)
    return y, (x.new_empty(0) if mean is None else mean), (x.new_empty(0) if inv is None else inv)


@_ln.register_fake
def _(x, normalized_shape, weight, bias, eps, rms, training):  # type: ignore[no-untyped-def]
    op = "rms_norm" if rms else "layer_norm"
    _check_x(op, x)
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


def _ln_bwd_run(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
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
        ports["dx"], ports["dw"] = _out(DX, dx), _out(DW, w)
        if has_bias:
            ports["db"] = _out(DB, w)
        return ports

    built = rt.CACHE.build(dev, key, make)
    built.bind(*(r for r in ("dy", "x", "scale", "inv", "mean", "dx", "dw", "db") if r in built.ports))
    built.info = (rows, d, w if weight is None else None, has_bias)
    return built


@torch.library.custom_op("cudnn::layer_norm_backward", mutates_args=())
def _ln_bwd(dy: torch.Tensor, x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None,
            mean: torch.Tensor, inv: torch.Tensor, rms: bool,
            has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _ln_bwd_run(dy, x, normalized_shape, weight, mean, inv, rms, has_bias)


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


# -- the official package's norm ops: cudnn::rmsnorm, rmsnorm_bwd, layernorm, layernorm_bwd --------
#
# Rows of the input as [rows, hidden, 1, 1], parameters [1, hidden, 1, 1], statistics
# [rows, 1, 1, 1] float32, always a training forward; each is a thin layer over the graphs above.

def _canonical(op: str, name: str, t: Any, shape: tuple[int, ...]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise rt.OpError(f"{op}: {name}: expected shape {shape}, got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise rt.OpError(f"{op}: {name}: expected a contiguous tensor, got strides {t.stride()}")


def _dtype(op: str, name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dtype != dtype:
        raise TypeError(f"{op}: {name}: expected dtype {str(dtype).removeprefix('torch.')}, got "
                        f"{str(t.dtype).removeprefix('torch.')}")


def _check_official(op: str, x: Any, params: dict[str, Any], param_dtype: torch.dtype | None) -> tuple[int, int]:
    """Check x [rows, hidden, 1, 1] and the [1, hidden, 1, 1] parameters (dtype ``param_dtype``,
    None: x's), all on x's device; returns (rows, hidden)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in rt.FLOATS:
        raise TypeError(f"{op}: x: expected dtype float16, bfloat16 or float32, got "
                        f"{str(x.dtype).removeprefix('torch.')}")
    if x.dim() != 4 or tuple(x.shape[2:]) != (1, 1):
        raise rt.OpError(f"{op}: x: expected shape (rows, hidden_size, 1, 1), got {tuple(x.shape)}")
    rows, hidden = int(x.shape[0]), int(x.shape[1])
    _canonical(op, "x", x, (rows, hidden, 1, 1))
    rt.check_cuda(op.removeprefix("cudnn::"), "x", x)
    for name, p in params.items():
        _canonical(op, name, p, (1, hidden, 1, 1))
        _dtype(op, name, p, x.dtype if param_dtype is None else param_dtype)
        if p.device != x.device:
            raise rt.OpError(f"{op}: {name}: expected a tensor on {x.device} (where x is), got one on {p.device}")
    return rows, hidden


def _check_stats(op: str, x: torch.Tensor, rows: int, stats: dict[str, Any]) -> None:
    for name, t in stats.items():
        _canonical(op, name, t, (rows, 1, 1, 1))
        _dtype(op, name, t, torch.float32)
        if t.device != x.device:
            raise rt.OpError(f"{op}: {name}: expected a tensor on {x.device} (where x is), got one on {t.device}")


def _check_dy(op: str, dy: Any, x: torch.Tensor) -> None:
    _canonical(op, "dy", dy, tuple(x.shape))
    _dtype(op, "dy", dy, x.dtype)
    if dy.device != x.device:
        raise rt.OpError(f"{op}: dy: expected a tensor on {x.device} (where x is), got one on {dy.device}")


def _stat(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], 1, 1, 1), dtype=torch.float32)


@torch.library.custom_op("cudnn::rmsnorm", mutates_args=(),
                         schema="(Tensor x, Tensor scale, float eps, Tensor? bias=None) -> (Tensor, Tensor)")
def _rmsnorm(x: torch.Tensor, scale: torch.Tensor, eps: float,
             bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    rows, hidden = _check_official("cudnn::rmsnorm", x, {"scale": scale, **({} if bias is None else {"bias": bias})},
                                   None)
    y, _mean, inv = _ln_run(x, (hidden, 1, 1), scale, bias, float(eps), True, True)
    assert inv is not None
    return y, inv.view(rows, 1, 1, 1)


@_rmsnorm.register_fake
def _(x, scale, eps, bias=None):  # type: ignore[no-untyped-def]
    _check_official("cudnn::rmsnorm", x, {"scale": scale, **({} if bias is None else {"bias": bias})}, None)
    return torch.empty_like(x), _stat(x)


@torch.library.custom_op("cudnn::rmsnorm_bwd", mutates_args=(),
                         schema="(Tensor dy, Tensor x, Tensor scale, Tensor inv_var, bool has_dbias=False) "
                                "-> (Tensor, Tensor, Tensor)")
def _rmsnorm_bwd(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, inv_var: torch.Tensor,
                 has_dbias: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    op = "cudnn::rmsnorm_bwd"
    rows, hidden = _check_official(op, x, {"scale": scale}, None)
    _check_dy(op, dy, x)
    _check_stats(op, x, rows, {"inv_var": inv_var})
    dx, dw, db = _ln_bwd_run(dy, x, (hidden, 1, 1), scale, None, inv_var.view(rows, 1), True, bool(has_dbias))
    return dx, dw.view(scale.shape), (db.view(scale.shape) if has_dbias else scale.new_empty(0))


@_rmsnorm_bwd.register_fake
def _(dy, x, scale, inv_var, has_dbias=False):  # type: ignore[no-untyped-def]
    op = "cudnn::rmsnorm_bwd"
    rows, _ = _check_official(op, x, {"scale": scale}, None)
    _check_dy(op, dy, x)
    _check_stats(op, x, rows, {"inv_var": inv_var})
    return torch.empty_like(x), torch.empty_like(scale), (torch.empty_like(scale) if has_dbias else scale.new_empty(0))


def _rmsnorm_setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, scale, _eps, bias = inputs
    ctx.save_for_backward(x, scale, output[1])
    ctx.has_bias = bias is not None
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[1])


def _rmsnorm_backward(ctx, dy, _dinv):  # type: ignore[no-untyped-def]
    if dy is None:
        return None, None, None, None
    x, scale, inv = ctx.saved_tensors
    dx, dscale, dbias = torch.ops.cudnn.rmsnorm_bwd(dy.contiguous(), x, scale, inv, ctx.has_bias)
    return dx, dscale, None, (dbias if ctx.has_bias else None)


_rmsnorm.register_autograd(_rmsnorm_backward, setup_context=_rmsnorm_setup)


@torch.library.custom_op("cudnn::layernorm", mutates_args=(),
                         schema="(Tensor x, Tensor scale, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)")
def _layernorm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor,
               eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, hidden = _check_official("cudnn::layernorm", x, {"scale": scale, "bias": bias}, torch.float32)
    y, mean, inv = _ln_run(x, (hidden, 1, 1), scale, bias, float(eps), False, True)
    assert mean is not None and inv is not None
    return y, mean.view(rows, 1, 1, 1), inv.view(rows, 1, 1, 1)


@_layernorm.register_fake
def _(x, scale, bias, eps):  # type: ignore[no-untyped-def]
    _check_official("cudnn::layernorm", x, {"scale": scale, "bias": bias}, torch.float32)
    return torch.empty_like(x), _stat(x), _stat(x)


@torch.library.custom_op("cudnn::layernorm_bwd", mutates_args=(),
                         schema="(Tensor dy, Tensor x, Tensor scale, Tensor mean, Tensor inv_var) "
                                "-> (Tensor, Tensor, Tensor)")
def _layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, mean: torch.Tensor,
                   inv_var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    op = "cudnn::layernorm_bwd"
    rows, hidden = _check_official(op, x, {"scale": scale}, torch.float32)
    _check_dy(op, dy, x)
    _check_stats(op, x, rows, {"mean": mean, "inv_var": inv_var})
    dx, dw, db = _ln_bwd_run(dy, x, (hidden, 1, 1), scale, mean.view(rows, 1), inv_var.view(rows, 1), False, True)
    return dx, dw.view(scale.shape), db.view(scale.shape)


@_layernorm_bwd.register_fake
def _(dy, x, scale, mean, inv_var):  # type: ignore[no-untyped-def]
    op = "cudnn::layernorm_bwd"
    rows, _ = _check_official(op, x, {"scale": scale}, torch.float32)
    _check_dy(op, dy, x)
    _check_stats(op, x, rows, {"mean": mean, "inv_var": inv_var})
    return torch.empty_like(x), torch.empty_like(scale), torch.empty_like(scale)


def _layernorm_setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, scale, _bias, _eps = inputs
    _y, mean, inv = output
    ctx.save_for_backward(x, scale, mean, inv)
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(mean, inv)


def _layernorm_backward(ctx, dy, _dmean, _dinv):  # type: ignore[no-untyped-def]
    if dy is None:
        return None, None, None, None
    x, scale, mean, inv = ctx.saved_tensors
    dx, dscale, dbias = torch.ops.cudnn.layernorm_bwd(dy.contiguous(), x, scale, mean, inv)
    return dx, dscale, dbias, None


_layernorm.register_autograd(_layernorm_backward, setup_context=_layernorm_setup)


# -- batch norm ----------------------------------------------------------------------------------

def _bn_check(x: torch.Tensor, params: dict[str, torch.Tensor | None]) -> int:
    op = "batch_norm"
    _check_x(op, x)
    rt.check_tensor(op, "input", x, rank=4)
    c = x.shape[1]
    for name, p in params.items():
        if p is not None:
            rt.check_tensor(op, name, p, device=x.device)
            if p.numel() != c:
                raise rt.OpError(f"cudnn.ops.{op}: {name}: expected {c} elements (the input's channels), "
                                 f"got shape {tuple(p.shape)}")
    return c


def _bn_graph(dev: int, key: tuple, make: Callable[[pygraph], dict], what: str, x: torch.Tensor) -> rt.Built:
    """`rt.CACHE.build`, where cuDNN has no engine an OpError naming the op, the input's dtype,
    channels and shape (cuDNN 9.19 on an H200 has none for 3 channels, for example)."""
    try:
        return rt.CACHE.build(dev, key, make)
    except CudnnNotSupportedError as exc:
        raise rt.OpNotSupportedError(f"cudnn.ops.batch_norm: input: cuDNN has no engine for {what} of a "
                                     f"{str(x.dtype).removeprefix('torch.')} input with {x.shape[1]} channels "
                                     f"(shape {tuple(x.shape)}): {exc}") from exc


def _vec(p: torch.Tensor | None, c: int, fill: float, like: torch.Tensor) -> torch.Tensor:
    """A [1, C, 1, 1] float32 NHWC view of a per-channel parameter (``fill`` when None)."""
    v = torch.full((1, c, 1, 1), fill, dtype=torch.float32, device=like.device) if p is None \
        else p.reshape(1, c, 1, 1).float()
    return v.contiguous(memory_format=torch.channels_last)


def _bn_train(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float, eps: float,
              stats: tuple[int, ...]) -> tuple[torch.Tensor, rt.Built]:
    """Run the training graph; returns Y (the input's layout) and the graph. ``stats``: where
    the graph writes the batch MEAN and INV_VARIANCE and, with running statistics, their next
    values (float32 [C] each): the running statistics go into the graph and come out of it,
    torch's update with the unbiased batch variance. The arguments are checked when their key
    is first built; a hit only allocates and runs."""
    track = running_mean is not None and running_var is not None
    key = ("batchnorm", x.shape, x.stride(), x.dtype, rt.sig(weight), rt.sig(bias), rt.sig(running_mean),
           rt.sig(running_var), eps, momentum if track else None)
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _bn_train_build(dev, key, x, weight, bias, running_mean, running_var, momentum, eps)
    nchw, ones, zeros = built.info
    xn = x.contiguous(memory_format=torch.channels_last) if nchw else x
    w = ones if weight is None else _f32(weight)
    b = zeros if bias is None else _f32(bias)
    y = torch.empty_like(xn)
    if track:
        assert running_mean is not None and running_var is not None
        rm, rv = _f32(running_mean), _f32(running_var)  # float32 copies must live until the launch
        rt.run(built, dev, (xn.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), stats[0], stats[1],
                            rm.data_ptr(), rv.data_ptr(), stats[2], stats[3]))
    else:
        rt.run(built, dev, (xn.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), stats[0], stats[1]))
    return (y.contiguous() if nchw else y), built


def _bn_train_fresh(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None,
                                         torch.Tensor | None]:
    """Y, MEAN, INV_VARIANCE and the next running statistics (None without running
    statistics), each in memory of its own: a registered op's outputs alias nothing."""
    c = x.shape[1]
    track = running_mean is not None and running_var is not None
    out = [x.new_empty(c, dtype=torch.float32) for _ in range(4 if track else 2)]
    y, _ = _bn_train(x, weight, bias, running_mean, running_var, momentum, eps, tuple(t.data_ptr() for t in out))
    return (y, out[0], out[1], out[2], out[3]) if track else (y, out[0], out[1], None, None)


def _bn_train_eager(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor, rt.Built]:
    """Y, the block holding MEAN and INV_VARIANCE (rows 0 and 1, [C] each, for the backward)
    and the graph; the running statistics are updated in place. Float32 running statistics
    are also the graph's next-statistics outputs, updated in place as the classic API's
    cudnnBatchNormalizationForwardTraining does with the same kernels (a GPU test checks this
    bit for bit against separate outputs); others are written to the block and copied."""
    c = x.shape[1]
    pad = -(-c // 64) * 64  # each statistic 256-byte aligned in the block
    track = running_mean is not None and running_var is not None
    direct = track and _is_f32(running_mean) and _is_f32(running_var)
    block = x.new_empty((2 if direct or not track else 4, pad), dtype=torch.float32)
    p = block.data_ptr()
    if not track:
        stats: tuple[int, ...] = (p, p + 4 * pad)
    elif direct:
        stats = (p, p + 4 * pad, running_mean.data_ptr(), running_var.data_ptr())  # type: ignore[union-attr]
    else:
        stats = (p, p + 4 * pad, p + 8 * pad, p + 12 * pad)
    y, built = _bn_train(x, weight, bias, running_mean, running_var, momentum, eps, stats)
    if track and not direct:
        with torch.no_grad():
            running_mean.copy_(block[2, :c].reshape(running_mean.shape))  # type: ignore[union-attr]
            running_var.copy_(block[3, :c].reshape(running_var.shape))  # type: ignore[union-attr]
    return y, block, built


def _is_f32(p: torch.Tensor) -> bool:
    """Whether a per-channel parameter's memory is already C contiguous float32 values."""
    return p.dtype is torch.float32 and p.is_contiguous()


def _typed(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype`` (itself when it is already: ``Tensor.to`` costs a dispatch even then)."""
    return t if t.dtype is dtype else t.to(dtype)


def _f32(p: torch.Tensor) -> torch.Tensor:
    """A per-channel parameter's memory as C contiguous float32 values (itself when it is that)."""
    return p if _is_f32(p) else p.float().contiguous()


def _bn_train_build(dev: int, key: tuple, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float,
                    eps: float) -> rt.Built:
    """Check the arguments, then build and cache the training graph (NHWC) for ``key``."""
    c = _bn_check(x, {"weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var})
    track = running_mean is not None and running_var is not None
    xn = x.contiguous(memory_format=torch.channels_last)
    w, b = _vec(weight, c, 1.0, x), _vec(bias, c, 0.0, x)
    y = torch.empty_like(xn)
    stats = torch.empty(1, c, 1, 1, device=x.device).contiguous(memory_format=torch.channels_last)

    def make(g: pygraph) -> dict:
        X, W, B = rt.tensor_of(g, "x", xn), rt.tensor_of(g, "scale", w), rt.tensor_of(g, "bias", b)
        RM, RV = (rt.tensor_of(g, "running_mean", stats), rt.tensor_of(g, "running_var", stats)) if track \
            else (None, None)
        Y, M, V, NRM, NRV = g.batchnorm(X, W, B, RM, RV, eps, momentum if track else None)
        ports = {"x": X, "scale": W, "bias": B, "y": _out(Y, y), "mean": _out(M, stats), "inv": _out(V, stats)}
        if RM is not None and RV is not None and NRM is not None and NRV is not None:
            ports.update(rm=RM, rv=RV, nrm=_out(NRM, stats), nrv=_out(NRV, stats))
        return ports

    built = _bn_graph(dev, key, make, "training-mode batch norm", x)
    built.bind("x", "scale", "bias", "y", "mean", "inv", *(("rm", "rv", "nrm", "nrv") if track else ()))
    # NCHW inputs run through an NHWC copy; ones / zeros stand for an absent weight / bias
    built.info = (not x.is_contiguous(memory_format=torch.channels_last), w.reshape(c) if weight is None else None,
                  b.reshape(c) if bias is None else None)
    return built


def _bn_run(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool, momentum: float,
            eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Y, the batch MEAN / INV_VARIANCE (float32, [C]) and the updated running statistics
    (None without running statistics or outside training), each a tensor of its own."""
    if training:
        return _bn_train_fresh(x, weight, bias, running_mean, running_var, momentum, eps)
    y = _bn_eval(x, weight, bias, running_mean, running_var, eps)
    return (y, *_eval_stats(running_mean, running_var, eps), None, None)


def _eval_stats(running_mean: torch.Tensor, running_var: torch.Tensor, eps: float) -> tuple[torch.Tensor,
                                                                                              torch.Tensor]:
    """The float32 [C] MEAN and INV_VARIANCE an eval-mode forward normalized with, in memory of
    their own (the registered op's outputs, which its backward reads)."""
    c = running_mean.numel()
    mean = running_mean.reshape(c).to(torch.float32, copy=True)
    return mean, (running_var.reshape(c).float() + eps).rsqrt()


def _rows_by_channel(t: torch.Tensor) -> torch.Tensor:
    """A 4-D tensor's values as NHWC memory viewed [1, C, N*H*W, 1] (copied first when ``t`` is
    not channels-last contiguous): the same per-channel pointwise problem, at a shape cuDNN's
    pointwise engines take where they refuse some real ones ([N, C, 1, 1] on cuDNN 9.19).
    Not for batch norm's training graphs: their engines run slower at this shape."""
    if not t.is_contiguous(memory_format=torch.channels_last):
        t = t.contiguous(memory_format=torch.channels_last)
    c = t.shape[1]
    m = t.numel() // c
    return t.as_strided((1, c, m, 1), (m * c, 1, c, c))


def _bn_eval(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
             running_mean: torch.Tensor | None, running_var: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Eval-mode Y from the running statistics: one pointwise graph (`_bn_eval_build`) over
    X's NHWC memory (a channels-last X as it is; others through a copy, and Y then comes back
    contiguous). The arguments are checked when their key is first built."""
    key = ("batchnorm_eval", x.shape, x.stride(), x.dtype, rt.sig(weight), rt.sig(bias), rt.sig(running_mean),
           rt.sig(running_var), eps)
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _bn_eval_build(dev, key, x, weight, bias, running_mean, running_var, eps)
    direct, dense = built.info
    xn = x if direct else x.contiguous(memory_format=torch.channels_last)
    assert running_mean is not None and running_var is not None  # checked by the build
    if not dense:
        running_mean, running_var = running_mean.contiguous(), running_var.contiguous()
        weight = None if weight is None else weight.contiguous()
        bias = None if bias is None else bias.contiguous()
    y = torch.empty_like(xn)
    # roles bound in _bn_eval_build's order: x, mean, var, [scale], [bias], y
    pointers = [xn.data_ptr(), running_mean.data_ptr(), running_var.data_ptr()]
    if weight is not None:
        pointers.append(weight.data_ptr())
    if bias is not None:
        pointers.append(bias.data_ptr())
    pointers.append(y.data_ptr())
    rt.run(built, dev, tuple(pointers))
    return y if direct else y.contiguous()


def _bn_eval_build(dev: int, key: tuple, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   running_mean: torch.Tensor | None, running_var: torch.Tensor | None, eps: float) -> rt.Built:
    """Check the arguments, then build and cache Y = (X - mean) * rsqrt(var + eps) * scale + bias
    as one pointwise graph over X's NHWC memory viewed [1, C, N*H*W, 1] (`_rows_by_channel`),
    reading the per-channel tensors as they are (any float dtypes; computed in float32).
    ``info``: whether X is read in place (channels-last contiguous) and whether the
    per-channel tensors are (contiguous)."""
    c = _bn_check(x, {"weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var})
    if running_mean is None or running_var is None:
        raise rt.OpError("cudnn.ops.batch_norm: running_mean / running_var: needed when training=False")
    params = {"mean": running_mean, "var": running_var, "scale": weight, "bias": bias}
    xv = _rows_by_channel(x)
    f32 = rt.data_type.FLOAT

    def make(g: pygraph) -> dict:
        X = rt.tensor_of(g, "x", xv)
        ports = {"x": X}
        for name, p in params.items():
            if p is not None:
                ports[name] = g.tensor(name=name, dim=[1, c, 1, 1], stride=[c, 1, c, c],
                                       data_type=rt.CUDNN_DTYPE[p.dtype])
        # var at X's shape: cuDNN computes a pointwise op whose inputs are all per-channel at
        # that smaller shape, wrongly (graph.guards), so var is broadcast inside an op of X's
        # shape first: select(var, var, X == X) is var everywhere, whatever X holds (NaN too)
        every = g.cmp_eq(X, X, compute_data_type=f32).set_data_type(rt.data_type.BOOLEAN)
        var = g.binary_select(ports["var"], ports["var"], every, compute_data_type=f32)
        inv = g.rsqrt(g.add(var, eps, compute_data_type=f32), compute_data_type=f32)
        Y = g.mul(g.sub(X, ports["mean"], compute_data_type=f32), inv, compute_data_type=f32)
        if "scale" in ports:
            Y = g.mul(Y, ports["scale"], compute_data_type=f32)
        if "bias" in ports:
            Y = g.add(Y, ports["bias"], compute_data_type=f32)
        ports["y"] = Y.set_output(True).set_data_type(rt.CUDNN_DTYPE[x.dtype]).set_dim(list(xv.shape)) \
            .set_stride(list(xv.stride()))
        return ports

    built = _bn_graph(dev, key, make, "eval-mode batch norm", x)
    built.bind(*(r for r in ("x", "mean", "var", "scale", "bias", "y") if r in built.ports))
    built.info = (x.is_contiguous(memory_format=torch.channels_last),
                  all(p is None or p.is_contiguous() for p in params.values()))
    return built


@torch.library.custom_op("cudnn::batch_norm", mutates_args=())
def _bn(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None, training: bool, momentum: float,
        eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, inv, nrm, nrv = _bn_run(x, weight, bias, running_mean, running_var, training, momentum, eps)
    return y, mean, inv, (x.new_empty(0) if nrm is None else nrm), (x.new_empty(0) if nrv is None else nrv)


@_bn.register_fake
def _(x, weight, bias, running_mean, running_var, training, momentum, eps):  # type: ignore[no-untyped-def]
    c = _bn_check(x, {"weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var})
    track = training and running_mean is not None and running_var is not None
    stats = x.new_empty(c, dtype=torch.float32)
    return (rt.like_layout(x, list(x.shape), rt.channels_last(x)), stats, x.new_empty(c, dtype=torch.float32),
            x.new_empty(c, dtype=torch.float32) if track else x.new_empty(0),
            x.new_empty(c, dtype=torch.float32) if track else x.new_empty(0))


def _bn_eval_dx(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, inv: torch.Tensor) -> torch.Tensor:
    """Eval-mode dX = dY * inv_std * weight (X's dtype, dY's NHWC memory: dY itself when it is
    channels-last contiguous, else a copy) by one pointwise graph over [1, C, N*H*W, 1]."""
    key = ("batchnorm_eval_backward", dy.shape, dy.stride(), dy.dtype, x.dtype, rt.sig(weight), rt.sig(inv))
    dev = dy.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _bn_eval_dx_build(dev, key, dy, x, weight, inv)
    direct, w_dense = built.info
    dyn = dy if direct else dy.contiguous(memory_format=torch.channels_last)
    dx = torch.empty_like(dyn, dtype=x.dtype)
    if weight is None:
        rt.run(built, dev, (dyn.data_ptr(), inv.data_ptr(), dx.data_ptr()))
    else:
        w = weight if w_dense else weight.contiguous()
        rt.run(built, dev, (dyn.data_ptr(), inv.data_ptr(), w.data_ptr(), dx.data_ptr()))
    return dx


def _bn_eval_dx_build(dev: int, key: tuple, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                      inv: torch.Tensor) -> rt.Built:
    """Build and cache `_bn_eval_dx`'s graph (``info``: whether dY and the weight are read in place)."""
    c = x.shape[1]
    rt.check_tensor("batch_norm", "grad_output", dy, rank=4, device=x.device)
    if dy.shape != x.shape:
        raise rt.OpError(f"cudnn.ops.batch_norm: grad_output: expected the input's shape {tuple(x.shape)}, got "
                         f"{tuple(dy.shape)}")
    dyv = _rows_by_channel(dy)
    f32 = rt.data_type.FLOAT

    def make(g: pygraph) -> dict:
        DY = rt.tensor_of(g, "dy", dyv)
        ports = {"dy": DY, "inv": g.tensor(name="inv", dim=[1, c, 1, 1], stride=[c, 1, c, c],
                                           data_type=rt.CUDNN_DTYPE[inv.dtype])}
        DX = g.mul(DY, ports["inv"], compute_data_type=f32)
        if weight is not None:
            ports["scale"] = g.tensor(name="scale", dim=[1, c, 1, 1], stride=[c, 1, c, c],
                                      data_type=rt.CUDNN_DTYPE[weight.dtype])
            DX = g.mul(DX, ports["scale"], compute_data_type=f32)
        ports["dx"] = DX.set_output(True).set_data_type(rt.CUDNN_DTYPE[x.dtype]).set_dim(list(dyv.shape)) \
            .set_stride(list(dyv.stride()))
        return ports

    built = _bn_graph(dev, key, make, "the eval-mode batch-norm backward", x)
    built.bind(*(r for r in ("dy", "inv", "scale", "dx") if r in built.ports))
    built.info = (dy.is_contiguous(memory_format=torch.channels_last), weight is None or weight.is_contiguous())
    return built


def _bn_bwd_graph(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                  inv: torch.Tensor) -> rt.Built:
    """The cached batch-norm backward graph for these tensors (checked when first built)."""
    key = ("batchnorm_backward", dy.shape, dy.stride(), dy.dtype, rt.sig(x), rt.sig(weight), rt.sig(mean),
           rt.sig(inv))
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    return _bn_bwd_build(dev, key, dy, x, weight, mean, inv) if built is None else built


def _bn_bwd_launch(built: rt.Built, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                   mean: int, inv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the backward graph on the float32 [C] statistics at addresses ``mean`` and ``inv``:
    dX (X's layout), dWeight and dBias (float32, [C])."""
    x_copy, dy_copy, nchw, ones = built.info
    xn = x.contiguous(memory_format=torch.channels_last) if x_copy else x
    dyn = dy.contiguous(memory_format=torch.channels_last) if dy_copy else dy
    c = x.shape[1]
    w = ones if weight is None else _f32(weight)
    dx = torch.empty_like(xn)
    dw = x.new_empty(c, dtype=torch.float32)
    db = x.new_empty(c, dtype=torch.float32)
    rt.run(built, x.get_device(), (dyn.data_ptr(), xn.data_ptr(), w.data_ptr(), mean, inv, dx.data_ptr(),
                                   dw.data_ptr(), db.data_ptr()))
    return (dx.contiguous() if nchw else dx), dw, db


def _bn_bwd_run(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dX (X's layout), dWeight and dBias (float32, [C]) from cuDNN's batch-norm backward graph."""
    built = _bn_bwd_graph(dy, x, weight, mean, inv)
    m, v = _f32(mean), _f32(inv)  # alive until the launch is enqueued
    return _bn_bwd_launch(built, dy, x, weight, m.data_ptr(), v.data_ptr())


def _bn_bwd_build(dev: int, key: tuple, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                  mean: torch.Tensor, inv: torch.Tensor) -> rt.Built:
    """Check the arguments, then build and cache the backward graph (NHWC) for ``key``."""
    c = _bn_check(x, {"weight": weight, "mean": mean, "inv_variance": inv})
    rt.check_tensor("batch_norm", "grad_output", dy, rank=4, device=x.device)
    if dy.shape != x.shape:
        raise rt.OpError(f"cudnn.ops.batch_norm: grad_output: expected the input's shape {tuple(x.shape)}, got "
                         f"{tuple(dy.shape)}")
    cl = torch.channels_last
    xn, dyn = x.contiguous(memory_format=cl), dy.contiguous(memory_format=cl)
    w = _vec(weight, c, 1.0, x)
    stats = torch.empty(1, c, 1, 1, device=x.device).contiguous(memory_format=cl)
    dx = torch.empty_like(xn)

    def make(g: pygraph) -> dict:
        DY, X, W = rt.tensor_of(g, "dy", dyn), rt.tensor_of(g, "x", xn), rt.tensor_of(g, "scale", w)
        M, V = rt.tensor_of(g, "mean", stats), rt.tensor_of(g, "inv", stats)
        DX, DW, DB = g.batchnorm_backward(DY, X, W, M, V)
        return {"dy": DY, "x": X, "scale": W, "mean": M, "inv": V, "dx": _out(DX, dx), "dw": _out(DW, stats),
                "db": _out(DB, stats)}

    built = _bn_graph(dev, key, make, "the batch-norm backward", x).bind("dy", "x", "scale", "mean", "inv", "dx", "dw",
                                                                         "db")
    built.info = (not x.is_contiguous(memory_format=cl), not dy.is_contiguous(memory_format=cl),
                  not rt.channels_last(x), w.reshape(c) if weight is None else None)
    return built


@torch.library.custom_op("cudnn::batch_norm_backward", mutates_args=())
def _bn_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
            inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bn_bwd_run(dy, x, weight, mean, inv)


@_bn_bwd.register_fake
def _(dy, x, weight, mean, inv):  # type: ignore[no-untyped-def]
    c = x.shape[1]
    return (rt.like_layout(x, list(x.shape), rt.channels_last(x)), x.new_empty(c, dtype=torch.float32),
            x.new_empty(c, dtype=torch.float32))


def _bn_setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, weight, bias, _rm, _rv, training, _mom, _eps = inputs
    _y, mean, inv, _nrm, _nrv = output
    ctx.bn = (training, weight is not None, bias is not None)
    ctx.save_for_backward(x, weight, mean, inv)


def _bn_backward(ctx, dy, *_):  # type: ignore[no-untyped-def]
    x, weight, mean, inv = ctx.saved_tensors
    training, has_w, has_b = ctx.bn
    if not training:
        return _bn_eval_backward(ctx, dy, x, weight, mean, inv)
    dx, dw, db = (_bn_bwd_run if rt.eager(dy, x) else torch.ops.cudnn.batch_norm_backward)(dy, x, weight, mean, inv)
    return (dx, _typed(dw, weight.dtype) if has_w else None,
            _typed(db, weight.dtype if has_w else x.dtype) if has_b else None, None, None, None, None, None)


def _bn_eval_backward(ctx: Any, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                      inv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """The gradients of an eval-mode call that ``ctx.needs_input_grad`` asks for: dX = dY *
    inv_std * weight, and dWeight / dBias, the sums cuDNN's backward graph computes at these
    (constant) statistics; ``mean`` and ``inv``: [C] each, ``inv`` float32."""
    _, has_w, has_b = ctx.bn
    want_x, want_w, want_b = ctx.needs_input_grad[:3]
    eager = rt.eager(dy, x)
    dx = dw = db = None
    if want_x:
        if eager:
            dx = _bn_eval_dx(dy, x, weight, inv)
        else:
            scale = inv if weight is None else inv * weight.float()
            dx = (dy * scale.reshape(1, x.shape[1], 1, 1)).to(x.dtype)
    if (want_w and has_w) or (want_b and has_b):
        _dx, dw, db = (_bn_bwd_run if eager else torch.ops.cudnn.batch_norm_backward)(dy, x, weight, mean, inv)
    return (dx, _typed(dw, weight.dtype) if weight is not None and dw is not None else None,
            _typed(db, x.dtype if weight is None else weight.dtype) if has_b and db is not None else None,
            None, None, None, None, None)


_bn.register_autograd(_bn_backward, setup_context=_bn_setup)


class _BNEager(torch.autograd.Function):
    """The eager path of batch norm with a gradient wanted (see `_runtime`); in training it
    updates the running statistics in place itself, and the backward reads the statistics'
    block and finds its graph on the forward's. Returns Y alone."""

    @staticmethod
    def forward(ctx, *inputs):  # type: ignore[no-untyped-def]
        x, weight, bias, running_mean, running_var, training, momentum, eps = inputs
        if not training:  # the running statistics are saved as torch's eval batch norm saves them
            y = _bn_eval(x, weight, bias, running_mean, running_var, eps)
            ctx.train, ctx.eps = None, eps
            ctx.bn = (False, weight is not None, bias is not None)
            ctx.save_for_backward(x, weight, running_mean, running_var)
            return y
        y, block, built = _bn_train_eager(x, weight, bias, running_mean, running_var, momentum, eps)
        ctx.train = built
        ctx.bn = (True, weight is not None, bias is not None)
        ctx.save_for_backward(x, weight, block)  # saved: freed after the backward, seen by saved-tensor hooks
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        if ctx.train is None:
            x, weight, running_mean, running_var = ctx.saved_tensors
            return _bn_eval_backward(ctx, dy, x, weight, running_mean, (running_var.float() + ctx.eps).rsqrt())
        x, weight, block = ctx.saved_tensors
        built = ctx.train
        _, has_w, has_b = ctx.bn
        c = x.shape[1]
        if rt.eager(dy, x):
            key = (dy.stride(), dy.dtype, x.stride(), x.dtype)  # saved-tensor hooks may change X's layout
            bwd = built.derived.get(key)
            if bwd is None:
                bwd = built.derived[key] = _bn_bwd_graph(dy, x, weight, block[0, :c], block[1, :c])
            p = block.data_ptr()
            dx, dw, db = _bn_bwd_launch(bwd, dy, x, weight, p, p + block.stride(0) * 4)
        else:
            dx, dw, db = torch.ops.cudnn.batch_norm_backward(dy, x, weight, block[0, :c], block[1, :c])
        return (dx, _typed(dw, weight.dtype) if has_w else None,
                _typed(db, weight.dtype if has_w else x.dtype) if has_b else None, None, None, None, None, None)


def _update_running(running_mean: torch.Tensor | None, running_var: torch.Tensor | None, nrm: torch.Tensor | None,
                    nrv: torch.Tensor | None) -> None:
    if running_mean is not None and running_var is not None and nrm is not None and nrv is not None \
            and nrm.numel():
        with torch.no_grad():
            running_mean.copy_(nrm.reshape(running_mean.shape))
            running_var.copy_(nrv.reshape(running_var.shape))


def batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.batch_norm`` (4-D input) through cuDNN; in training the running
    statistics are updated in place as torch does (the unbiased batch variance) by the same
    cuDNN graph (float32 buffers directly, others through a float32 copy)."""
    args = (x, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps))
    if rt.eager(x, weight, bias, running_mean, running_var):
        if torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                        or (bias is not None and bias.requires_grad)):
            return _BNEager.apply(*args)
        if training:
            return _bn_train_eager(x, weight, bias, running_mean, running_var, args[6], args[7])[0]
        return _bn_eval(x, weight, bias, running_mean, running_var, args[7])
    y, _m, _v, nrm, nrv = torch.ops.cudnn.batch_norm(*args)
    if training:
        _update_running(running_mean, running_var, nrm, nrv)
    return y
