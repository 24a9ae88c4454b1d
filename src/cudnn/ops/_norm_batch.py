"""``cudnn.ops.batch_norm`` and the torch ops ``cudnn::batch_norm`` and ``batch_norm_backward``:
NHWC graphs (cuDNN's batch-norm engines want it) returning the input's layout. Eval mode is one
pointwise graph reading the running statistics as they are; its backward is another for dX
(dY * inv_std * weight) and, where dWeight or dBias is wanted, the backward graph's sums at the
running statistics."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .._lib.status import CudnnNotSupportedError
from . import _runtime as rt
from ._norm_shared import as_output, check_input

if TYPE_CHECKING:
    from .._graph.pygraph import pygraph


# -- batch norm ----------------------------------------------------------------------------------

def _bn_check(x: torch.Tensor, params: dict[str, torch.Tensor | None]) -> int:
    op = "batch_norm"
    check_input(op, x)
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
        ports = {"x": X, "scale": W, "bias": B, "y": as_output(Y, y), "mean": as_output(M, stats),
                 "inv": as_output(V, stats)}
        if RM is not None and RV is not None and NRM is not None and NRV is not None:
            ports.update(rm=RM, rv=RV, nrm=as_output(NRM, stats), nrv=as_output(NRV, stats))
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
        return {"dy": DY, "x": X, "scale": W, "mean": M, "inv": V, "dx": as_output(DX, dx), "dw": as_output(DW, stats),
                "db": as_output(DB, stats)}

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
