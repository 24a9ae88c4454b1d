"""``cudnn.ops.layer_norm``, ``rms_norm`` and ``batch_norm``: torch ops over cuDNN's norm graphs.

Training forwards write the statistics cuDNN's backward graphs read (MEAN and INV_VARIANCE,
float32), so the backward is one cuDNN graph too. Layer and RMS norm view the input as
[rows, features] (features: the normalized trailing axes); batch norm runs NHWC (cuDNN's
batch-norm engines want it) and returns the input's layout. Eval-mode batch norm's backward
is elementwise (dX = dY * weight * inv_std) and runs in torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .. import norm_forward_phase
from . import _runtime as rt

if TYPE_CHECKING:
    from ..graph import pygraph
    from ..graph.tensor import Tensor

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

def _flat(p: torch.Tensor | None, fixed: torch.Tensor | None, d: int) -> torch.Tensor:
    """A parameter's [1, d] memory: ``fixed`` (a cached ones/zeros) for None, ``p`` itself when
    contiguous (its view starts where it does), else a contiguous copy."""
    if p is None:
        return fixed
    return p if p.is_contiguous() else p.reshape(1, d).contiguous()


def _ln_run(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
            bias: torch.Tensor | None, eps: float, rms: bool,
            training: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Y and, in training, MEAN (layer norm) and INV_VARIANCE as [rows, 1] float32. Arguments
    are checked when their key is first built; a hit only allocates and runs."""
    key = ("layer_norm", x.shape, x.stride(), x.dtype, normalized_shape, rt.sig(weight), rt.sig(bias), eps, rms,
           training)
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _ln_build(dev, key, x, normalized_shape, weight, bias, eps, rms, training)
    rows, d, ones, zeros = built.info
    x2 = x if x.is_contiguous() else x.reshape(rows, d).contiguous()
    w = _flat(weight, ones, d)
    y = x.new_empty(x.shape)
    ports = built.ports
    variant = {ports["x"]: x2.data_ptr(), ports["scale"]: w.data_ptr(), ports["y"]: y.data_ptr()}
    if "bias" in ports:
        b = _flat(bias, zeros, d)
        variant[ports["bias"]] = b.data_ptr()
    mean = inv = None
    if training:
        inv = x.new_empty((rows, 1), dtype=torch.float32)
        variant[ports["inv"]] = inv.data_ptr()
        if not rms:
            mean = x.new_empty((rows, 1), dtype=torch.float32)
            variant[ports["mean"]] = mean.data_ptr()
    rt.launch(built, dev, variant)
    return y, mean, inv


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
    built.info = (rows, d, w if weight is None else None, b if bias is None else None)
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


def _ln_bwd_run(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                mean: torch.Tensor | None, inv: torch.Tensor, rms: bool,
                has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dX, dWeight and dBias (empty when there is none) from cuDNN's norm backward graph."""
    op = "rms_norm" if rms else "layer_norm"
    has_bias = has_bias or not rms  # cuDNN's layer-norm backward always writes DBIAS
    rows, d = _rows(op, x, normalized_shape)
    x2, dy2 = x.reshape(rows, d).contiguous(), dy.reshape(rows, d).contiguous()
    w = _param(op, "weight", weight, x, d, 1.0)
    dx = torch.empty_like(x2)
    dw = torch.empty_like(w)
    db = torch.empty_like(w) if has_bias else x.new_empty(0)
    key = (op + "_backward", rt.signature(dy2, x2, w), has_bias)
    dev = rt.device_index(x)

    def make(g: pygraph) -> dict:
        DY, X, W = rt.tensor_of(g, "dy", dy2), rt.tensor_of(g, "x", x2), rt.tensor_of(g, "scale", w)
        V = rt.tensor_of(g, "inv", inv)
        ports = {"dy": DY, "x": X, "scale": W, "inv": V}
        if rms:
            DX, DW, DB = g.rmsnorm_backward(DY, X, W, V, has_bias)
        else:
            ports["mean"] = rt.tensor_of(g, "mean", mean)
            DX, DW, DB = g.layernorm_backward(DY, X, W, ports["mean"], V)
        ports["dx"], ports["dw"] = _out(DX, dx), _out(DW, dw)
        if has_bias:
            ports["db"] = _out(DB, db)
        return ports

    built = rt.CACHE.get(dev, key, make)
    pack = {"dy": dy2, "x": x2, "scale": w, "inv": inv, "dx": dx, "dw": dw}
    if not rms:
        pack["mean"] = mean
    if has_bias:
        pack["db"] = db
    rt.execute(built, dev, pack)
    return dx.reshape(x.shape), dw.reshape(-1), db.reshape(-1)


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
    ctx.ln = (list(normalized_shape), rms, bias is not None, weight is not None, training)
    ctx.save_for_backward(x, weight, mean, inv)


def _ln_backward(ctx, dy, _dmean, _dinv):  # type: ignore[no-untyped-def]
    x, weight, mean, inv = ctx.saved_tensors
    normalized_shape, rms, has_bias, has_weight, training = ctx.ln
    if not training:
        raise RuntimeError("cudnn.ops.layer_norm / rms_norm: this call ran with training=False (no statistics "
                           "saved); call with training=True to differentiate it")
    dx, dw, db = torch.ops.cudnn.layer_norm_backward(dy, x, normalized_shape, weight, mean, inv, rms, has_bias)
    return (dx, None, dw.reshape(weight.shape) if has_weight else None,
            db if has_bias else None, None, None, None)


_ln.register_autograd(_ln_backward, setup_context=_ln_setup)


def _wants_grad(*ts: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


class _LNEager(torch.autograd.Function):
    """The eager path of layer / RMS norm with a gradient wanted (see `_runtime`)."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps, rms, training):  # type: ignore[no-untyped-def]
        y, mean, inv = _ln_run(x, normalized_shape, weight, bias, eps, rms, training)
        ctx.ln = (normalized_shape, rms, bias is not None, training)
        ctx.save_for_backward(x, weight, mean, inv)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        x, weight, mean, inv = ctx.saved_tensors
        normalized_shape, rms, has_bias, training = ctx.ln
        if not training:
            raise RuntimeError("cudnn.ops.layer_norm / rms_norm: this call ran with training=False (no statistics "
                               "saved); call with training=True to differentiate it")
        dx, dw, db = _ln_bwd_run(dy, x, normalized_shape, weight, mean, inv, rms, has_bias)
        return (dx, None, None if weight is None else dw.reshape(weight.shape), db if has_bias else None,
                None, None, None)


def _norm(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
          bias: torch.Tensor | None, eps: float, rms: bool, training: bool | None) -> torch.Tensor:
    grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                        or (bias is not None and bias.requires_grad))
    train = grad if training is None else bool(training)
    if rt.eager(x, weight, bias):
        if grad:
            return _LNEager.apply(x, normalized_shape, weight, bias, eps, rms, train)
        return _ln_run(x, normalized_shape, weight, bias, eps, rms, train)[0]
    return torch.ops.cudnn.layer_norm(x, list(normalized_shape), weight, bias, eps, rms, train)[0]


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if type(normalized_shape) is tuple:
        return normalized_shape
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def layer_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, training: bool | None = None) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` through cuDNN. ``training`` (default: whether a
    gradient is wanted) makes the forward save MEAN / INV_VARIANCE for cuDNN's backward."""
    return _norm(x, _shape(normalized_shape), weight, bias, float(eps), False, training)


def rms_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
             eps: float | None = None, training: bool | None = None) -> torch.Tensor:
    """``torch.nn.functional.rms_norm`` through cuDNN (``eps`` None: the dtype's machine
    epsilon, as torch); training saves INV_VARIANCE for cuDNN's backward."""
    eps = torch.finfo(x.dtype).eps if eps is None else float(eps)
    return _norm(x, _shape(normalized_shape), weight, None, eps, True, training)


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


def _vec(p: torch.Tensor | None, c: int, fill: float, like: torch.Tensor) -> torch.Tensor:
    """A [1, C, 1, 1] float32 NHWC view of a per-channel parameter (``fill`` when None)."""
    v = torch.full((1, c, 1, 1), fill, dtype=torch.float32, device=like.device) if p is None \
        else p.reshape(1, c, 1, 1).float()
    return v.contiguous(memory_format=torch.channels_last)


def _bn_run(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool, momentum: float,
            eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Y, the batch MEAN / INV_VARIANCE (float32, [C]) and the updated running statistics."""
    c = _bn_check(x, {"weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var})
    xn = x.contiguous(memory_format=torch.channels_last)
    w, b = _vec(weight, c, 1.0, x), _vec(bias, c, 0.0, x)
    y = torch.empty_like(xn)
    dev = rt.device_index(x)
    empty = x.new_empty(0)
    if not training:
        if running_mean is None or running_var is None:
            raise rt.OpError("cudnn.ops.batch_norm: running_mean / running_var: needed when training=False")
        mean = _vec(running_mean, c, 0.0, x)
        inv = (_vec(running_var, c, 1.0, x) + eps).rsqrt()

        def make_inf(g: pygraph) -> dict:
            X, M, V = rt.tensor_of(g, "x", xn), rt.tensor_of(g, "mean", mean), rt.tensor_of(g, "inv", inv)
            W, B = rt.tensor_of(g, "scale", w), rt.tensor_of(g, "bias", b)
            Y = g.batchnorm_inference(X, M, V, W, B)
            return {"x": X, "mean": M, "inv": V, "scale": W, "bias": B, "y": _out(Y, y)}

        built = rt.CACHE.get(dev, ("batchnorm_inference", rt.signature(xn, w)), make_inf)
        rt.execute(built, dev, {"x": xn, "mean": mean, "inv": inv, "scale": w, "bias": b, "y": y})
        return (y if rt.channels_last(x) else y.contiguous()), mean.reshape(c).clone(), inv.reshape(c), \
            empty, x.new_empty(0)
    mean = torch.empty(1, c, 1, 1, device=x.device).contiguous(memory_format=torch.channels_last)
    inv = torch.empty_like(mean)

    def make(g: pygraph) -> dict:
        X, W, B = rt.tensor_of(g, "x", xn), rt.tensor_of(g, "scale", w), rt.tensor_of(g, "bias", b)
        Y, M, V, _, _ = g.batchnorm(X, W, B, None, None, eps, None)
        return {"x": X, "scale": W, "bias": B, "y": _out(Y, y), "mean": _out(M, mean), "inv": _out(V, inv)}

    built = rt.CACHE.get(dev, ("batchnorm", rt.signature(xn, w), float(eps)), make)
    rt.execute(built, dev, {"x": xn, "scale": w, "bias": b, "y": y, "mean": mean, "inv": inv})
    mean, inv = mean.reshape(c), inv.reshape(c)
    if running_mean is None or running_var is None:
        return (y if rt.channels_last(x) else y.contiguous()), mean, inv, empty, x.new_empty(0)
    # torch's update: the running variance takes the unbiased batch variance
    n = x.numel() // c
    var = (inv.reciprocal().square() - eps).clamp_min(0) * (n / max(n - 1, 1))
    nrm = running_mean.float() * (1 - momentum) + mean * momentum
    nrv = running_var.float() * (1 - momentum) + var * momentum
    return (y if rt.channels_last(x) else y.contiguous()), mean, inv, nrm, nrv


@torch.library.custom_op("cudnn::batch_norm", mutates_args=())
def _bn(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None, training: bool, momentum: float,
        eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bn_run(x, weight, bias, running_mean, running_var, training, momentum, eps)


@_bn.register_fake
def _(x, weight, bias, running_mean, running_var, training, momentum, eps):  # type: ignore[no-untyped-def]
    c = _bn_check(x, {"weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var})
    track = training and running_mean is not None and running_var is not None
    stats = x.new_empty(c, dtype=torch.float32)
    return (rt.like_layout(x, list(x.shape), rt.channels_last(x)), stats, x.new_empty(c, dtype=torch.float32),
            x.new_empty(c, dtype=torch.float32) if track else x.new_empty(0),
            x.new_empty(c, dtype=torch.float32) if track else x.new_empty(0))


def _bn_bwd_run(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dX (X's layout), dWeight and dBias (float32, [C]) from cuDNN's batch-norm backward graph."""
    c = x.shape[1]
    xn = x.contiguous(memory_format=torch.channels_last)
    dyn = dy.contiguous(memory_format=torch.channels_last)
    w = _vec(weight, c, 1.0, x)
    m, v = _vec(mean, c, 0.0, x), _vec(inv, c, 1.0, x)
    dx, dw, db = torch.empty_like(xn), torch.empty_like(w), torch.empty_like(w)

    def make(g: pygraph) -> dict:
        DY, X, W = rt.tensor_of(g, "dy", dyn), rt.tensor_of(g, "x", xn), rt.tensor_of(g, "scale", w)
        M, V = rt.tensor_of(g, "mean", m), rt.tensor_of(g, "inv", v)
        DX, DW, DB = g.batchnorm_backward(DY, X, W, M, V)
        return {"dy": DY, "x": X, "scale": W, "mean": M, "inv": V, "dx": _out(DX, dx), "dw": _out(DW, dw),
                "db": _out(DB, db)}

    dev = rt.device_index(x)
    built = rt.CACHE.get(dev, ("batchnorm_backward", rt.signature(dyn, xn, w)), make)
    rt.execute(built, dev, {"dy": dyn, "x": xn, "scale": w, "mean": m, "inv": v, "dx": dx, "dw": dw, "db": db})
    return (dx if rt.channels_last(x) else dx.contiguous()), dw.reshape(c), db.reshape(c)


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
    c = x.shape[1]
    if training:
        dx, dw, db = (_bn_bwd_run if rt.eager(dy, x) else torch.ops.cudnn.batch_norm_backward)(dy, x, weight, mean,
                                                                                              inv)
    else:  # elementwise: statistics are constants in eval mode
        scale = inv if weight is None else inv * weight.float()
        dx = (dy.float() * scale.reshape(1, c, 1, 1)).to(x.dtype)
        dyf = dy.float()
        db = dyf.sum(dim=(0, 2, 3))
        dw = (dyf * (x.float() - mean.reshape(1, c, 1, 1)) * inv.reshape(1, c, 1, 1)).sum(dim=(0, 2, 3))
    return (dx, dw.to(weight.dtype) if has_w else None, db.to(weight.dtype if has_w else x.dtype) if has_b else None,
            None, None, None, None, None)


_bn.register_autograd(_bn_backward, setup_context=_bn_setup)


class _BNEager(torch.autograd.Function):
    """The eager path of batch norm with a gradient wanted (see `_runtime`)."""

    @staticmethod
    def forward(ctx, *inputs):  # type: ignore[no-untyped-def]
        out = _bn_run(*inputs)
        _bn_setup(ctx, inputs, out)
        ctx.mark_non_differentiable(*out[1:])
        return out

    backward = staticmethod(_bn_backward)


def batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.batch_norm`` (4-D input) through cuDNN; in training the running
    statistics are updated in place as torch does (the unbiased batch variance), from the
    MEAN / INV_VARIANCE cuDNN's graph wrote."""
    args = (x, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps))
    if rt.eager(x, weight, bias, running_mean, running_var):
        grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                            or (bias is not None and bias.requires_grad))
        y, _m, _v, nrm, nrv = _BNEager.apply(*args) if grad else _bn_run(*args)
    else:
        y, _m, _v, nrm, nrv = torch.ops.cudnn.batch_norm(*args)
    if training and running_mean is not None and running_var is not None:
        with torch.no_grad():
            running_mean.copy_(nrm.reshape(running_mean.shape))
            running_var.copy_(nrv.reshape(running_var.shape))
    return y
