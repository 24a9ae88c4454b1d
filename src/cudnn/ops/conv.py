"""``cudnn.ops.conv2d_bias_act``: conv2d + bias + activation as one fused cuDNN graph, with a
backward made of cuDNN graphs.

Forward: one graph, conv_fprop -> add bias -> act (none / relu / gelu / silu). With gelu or
silu and gradients wanted, the graph also writes the pre-activation Z (the backward needs it).
Backward: dZ = act_backward(dY, Y or Z) as a cuDNN pointwise graph (relu reads Y: Y > 0
exactly where Z > 0), dX by a conv_dgrad graph, dW by a conv_wgrad graph; dBias is dZ summed
over N, H, W by torch (accumulated in float32), the one step not made by cuDNN.
Graphs run NHWC (cuDNN's fused engines want it): NCHW inputs are copied to NHWC and the
output copied back, so the result has the input's layout either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from . import _runtime as rt

if TYPE_CHECKING:
    from .._graph.model.tensor import Tensor
    from .._graph.pygraph import pygraph

ACTS = ("none", "relu", "gelu", "silu")
_NHWC = torch.channels_last


def _pair(op: str, name: str, v: int | Sequence[int]) -> tuple[int, int]:
    if type(v) is int:
        return (v, v)
    if type(v) is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is int:
        return v  # what nn.Conv2d stores: no further work
    vals = (v, v) if isinstance(v, int) else tuple(v)
    if len(vals) != 2 or not all(isinstance(i, int) for i in vals):
        raise rt.OpError(f"cudnn.ops.{op}: {name}: expected an int or two ints, got {v!r}")
    return vals


def conv_padding(op: str, padding: str | int | Sequence[int], weight: torch.Tensor, stride: tuple[int, int],
                 dilation: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Torch's convolution padding as the symmetric padding a cuDNN graph takes plus what must
    be padded before it: ``(pad_h, pad_w)`` and ``F.pad``'s (left, right, top, bottom) extra.
    "same" (stride 1 only, as torch) pads (kernel - 1) * dilation per side in all, the odd one
    on the right / bottom, as torch does; "valid" pads nothing; ints are symmetric already."""
    if not isinstance(padding, str):
        return _pair(op, "padding", padding), (0, 0, 0, 0)
    if padding == "valid":
        return (0, 0), (0, 0, 0, 0)
    if padding != "same":
        raise rt.OpError(f"cudnn.ops.{op}: padding: expected 'same', 'valid', an int or two ints, got {padding!r}")
    if stride != (1, 1):
        raise rt.OpError(f"cudnn.ops.{op}: padding: 'same' needs stride 1 (as torch), got stride {stride}")
    rt.check_tensor(op, "weight", weight, rank=4)
    th, tw = (weight.shape[2] - 1) * dilation[0], (weight.shape[3] - 1) * dilation[1]
    return (th // 2, tw // 2), (0, tw % 2, 0, th % 2)


def out_shape(x: torch.Tensor, w: torch.Tensor, stride: list[int], padding: list[int],
              dilation: list[int]) -> list[int]:
    """The convolution's output shape [N, K, H', W'] (as torch.nn.functional.conv2d computes it)."""
    n, _, h, wd = x.shape
    k, _, r, s = w.shape
    ho = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    return [n, k, ho, wo]


def _check(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, groups: int, act: str) -> None:
    op = "conv2d_bias_act"
    rt.check_tensor(op, "input", x, rank=4)
    rt.check_cuda(op, "input", x)
    rt.check_tensor(op, "weight", w, rank=4, device=x.device)
    rt.check_same_dtype(op, {"weight": w, "bias": b}, x.dtype)
    if b is not None:
        rt.check_tensor(op, "bias", b, rank=1, device=x.device)
        if b.shape[0] != w.shape[0]:
            raise rt.OpError(f"cudnn.ops.{op}: bias: expected {w.shape[0]} elements (the weight's out "
                             f"channels), got shape {tuple(b.shape)}")
    if groups < 1 or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise rt.OpError(f"cudnn.ops.{op}: weight: expected [K, C/groups, R, S] with C = {x.shape[1]} and "
                         f"groups = {groups}, got shape {tuple(w.shape)}")
    rt.choice(op, "act", act, ACTS)


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=_NHWC)


def _act_fwd(g: pygraph, z: Tensor, act: str) -> Tensor:
    fns: dict[str, Callable[[Tensor], Tensor]] = {"relu": g.relu, "gelu": g.gelu, "silu": g.swish}
    return fns[act](z)


def _run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple[int, ...],
         padding: tuple[int, ...], dilation: tuple[int, ...], groups: int, act: str,
         keep_z: bool) -> tuple[torch.Tensor, torch.Tensor | None, rt.Built]:
    """The forward: Y (the input's layout), with ``keep_z`` the pre-activation Z (NHWC), and the
    graph. The arguments are checked when their key is first built; a hit only allocates and runs."""
    key = ("conv2d_bias_act", x.shape, x.stride(), x.dtype, rt.sig(w), rt.sig(b), stride, padding, dilation,
           groups, act, keep_z)
    dev = x.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _build(dev, key, x, w, b, stride, padding, dilation, groups, act, keep_z)
    x_nhwc, w_nhwc, size, strides, back_to_nchw = built.info
    xn = x if x_nhwc else x.contiguous(memory_format=_NHWC)
    wn = w if w_nhwc else w.contiguous(memory_format=_NHWC)
    y = x.new_empty_strided(size, strides)
    z = None
    if keep_z:  # roles bound in _build's order: x, w, [b], [z], y
        z = x.new_empty_strided(size, strides)
        if b is None:
            rt.run(built, dev, (xn.data_ptr(), wn.data_ptr(), z.data_ptr(), y.data_ptr()))
        else:
            rt.run(built, dev, (xn.data_ptr(), wn.data_ptr(), b.data_ptr(), z.data_ptr(), y.data_ptr()))
    elif b is None:
        rt.run(built, dev, (xn.data_ptr(), wn.data_ptr(), y.data_ptr()))
    else:  # the bias's [1, K, 1, 1] view starts where it does
        rt.run(built, dev, (xn.data_ptr(), wn.data_ptr(), b.data_ptr(), y.data_ptr()))
    return (y.contiguous() if back_to_nchw else y), z, built


def _build(dev: int, key: tuple, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
           stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...], groups: int, act: str,
           keep_z: bool) -> rt.Built:
    """Check the arguments, then build and cache the fused graph (NHWC) for ``key``."""
    op = "conv2d_bias_act"
    _check(x, w, b, groups, act)
    for name, v in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        _pair(op, name, v)
    xn, wn = _nhwc(x), _nhwc(w)
    bn = None if b is None else b.reshape(1, -1, 1, 1)
    y = torch.empty(out_shape(x, w, list(stride), list(padding), list(dilation)), dtype=x.dtype, device=x.device,
                    memory_format=_NHWC)
    cdt = rt.CUDNN_DTYPE[x.dtype]

    def make(g: pygraph) -> dict:
        X, W = rt.tensor_of(g, "x", xn), rt.tensor_of(g, "w", wn)
        out = g.conv_fprop(X, W, padding=list(padding), stride=list(stride), dilation=list(dilation))
        ports = {"x": X, "w": W}
        if bn is not None:
            ports["b"] = rt.tensor_of(g, "b", bn)
            out = g.add(out, ports["b"])
        if act != "none":
            if keep_z:
                ports["z"] = out.set_output(True).set_data_type(cdt).set_stride(list(y.stride()))
            out = _act_fwd(g, out, act)
        ports["y"] = out.set_output(True).set_data_type(cdt).set_stride(list(y.stride()))
        return ports

    built = rt.CACHE.build(dev, key, make)
    built.bind(*(r for r in ("x", "w", "b", "z", "y") if r in built.ports))
    built.info = (x.is_contiguous(memory_format=_NHWC), w.is_contiguous(memory_format=_NHWC), tuple(y.shape),
                  y.stride(), not rt.channels_last(x))
    return built


@torch.library.custom_op("cudnn::conv2d_bias_act", mutates_args=())
def _fwd(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: list[int], padding: list[int],
         dilation: list[int], groups: int, act: str, save_preact: bool) -> tuple[torch.Tensor, torch.Tensor]:
    keep_z = save_preact and act in ("gelu", "silu")
    y, z, _ = _run(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups, act, keep_z)
    return y, (x.new_empty(0) if z is None else z)


@_fwd.register_fake
def _(x, w, b, stride, padding, dilation, groups, act, save_preact):  # type: ignore[no-untyped-def]
    _check(x, w, b, groups, act)
    shape = out_shape(x, w, stride, padding, dilation)
    y = rt.like_layout(x, shape, rt.channels_last(x))
    keep_z = save_preact and act in ("gelu", "silu")
    return y, (rt.like_layout(x, shape, True) if keep_z else x.new_empty(0))


def _run_bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, saved: torch.Tensor | None,
             stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], act: str, has_bias: bool,
             need_dx: bool = True, need_dw: bool = True,
             forward: rt.Built | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """dX, dW (the layouts of X and W) and dBias, each None when not wanted. Each graph is
    looked up by the raw shapes and strides it runs on (a miss builds it), or, given the
    ``forward`` graph (the eager path), found where they were kept on it by the types and the
    gradients wanted: the graphs read NHWC copies of dY, X, W and the saved tensor, whatever
    layout those come in, and their shapes follow from the forward's key."""
    dev = x.get_device()
    memo = None if forward is None else (dy.dtype, x.dtype, w.dtype, need_dx, need_dw)
    kept = None if forward is None else forward.derived.get(memo)
    g_act, g_dgrad, g_wgrad = (None, None, None) if kept is None else kept
    conv = (tuple(stride), tuple(padding), tuple(dilation))
    dyn, xn, wn = _nhwc(dy), _nhwc(x), _nhwc(w)
    if act != "none":  # dZ = act'(.) * dY in one pointwise graph
        assert saved is not None  # Y (relu) or Z (gelu, silu): what the forward saved
        sn = _nhwc(saved)
        dz = torch.empty_like(dyn)
        if g_act is None:
            key: tuple = ("act_backward", act, rt.sig(dyn), rt.sig(sn))
            g_act = rt.CACHE.lookup(dev, key) or _build_dz(dev, key, dyn, sn, dz, act)
        rt.run(g_act, dev, (dyn.data_ptr(), sn.data_ptr(), dz.data_ptr()))
    else:
        dz = dyn
    dx = dw = None
    if need_dx:
        dx = torch.empty_like(xn)
        if g_dgrad is None:
            key = ("conv_dgrad", rt.sig(dz), rt.sig(wn), dx.shape, dx.stride(), x.dtype, conv)
            g_dgrad = rt.CACHE.lookup(dev, key) or _build_grad(dev, key, "dgrad", dz, wn, dx, x.dtype, conv)
        rt.run(g_dgrad, dev, (dz.data_ptr(), wn.data_ptr(), dx.data_ptr()))
        dx = dx if rt.channels_last(x) else dx.contiguous()
    if need_dw:
        dw = torch.empty_like(wn)
        if g_wgrad is None:
            key = ("conv_wgrad", rt.sig(xn), rt.sig(dz), dw.shape, dw.stride(), w.dtype, conv)
            g_wgrad = rt.CACHE.lookup(dev, key) or _build_grad(dev, key, "wgrad", xn, dz, dw, w.dtype, conv)
        rt.run(g_wgrad, dev, (xn.data_ptr(), dz.data_ptr(), dw.data_ptr()))
        dw = dw if rt.channels_last(w) else dw.contiguous()
    if forward is not None and kept is None:
        forward.derived[memo] = (g_act, g_dgrad, g_wgrad)
    db = dz.sum(dim=(0, 2, 3)) if has_bias else None  # torch sums half types in float32, rounds once
    return dx, dw, db


def _build_dz(dev: int, key: tuple, dyn: torch.Tensor, sn: torch.Tensor, dz: torch.Tensor, act: str) -> rt.Built:
    def make(g: pygraph) -> dict:
        DY, S = rt.tensor_of(g, "dy", dyn), rt.tensor_of(g, "saved", sn)
        fns: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
            "relu": g.relu_backward, "gelu": g.gelu_backward, "silu": g.swish_backward}
        fn = fns[act]
        DZ = fn(DY, S).set_output(True).set_data_type(rt.CUDNN_DTYPE[dz.dtype]).set_stride(list(dz.stride()))
        return {"dy": DY, "saved": S, "dz": DZ}

    return rt.CACHE.build(dev, key, make).bind("dy", "saved", "dz")


_GRAD_ROLES = {"dgrad": ("dz", "w", "dx"), "wgrad": ("x", "dz", "dw")}


def _build_grad(dev: int, key: tuple, which: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                dtype: torch.dtype, conv: tuple[tuple[int, ...], ...]) -> rt.Built:
    """The data gradient (``which="dgrad"``: dz, w -> dx) or the weight gradient (``"wgrad"``:
    x, dz -> dw) for exactly these tensors' dims and strides."""
    stride, padding, dilation = (list(v) for v in conv)
    roles = _GRAD_ROLES[which]

    def make(g: pygraph) -> dict:
        A, B = rt.tensor_of(g, roles[0], a), rt.tensor_of(g, roles[1], b)
        op = g.conv_dgrad if which == "dgrad" else g.conv_wgrad
        OUT = op(A, B, padding=padding, stride=stride, dilation=dilation)
        OUT.set_output(True).set_dim(list(out.shape)).set_stride(list(out.stride())).set_data_type(rt.CUDNN_DTYPE[dtype])
        return dict(zip(roles, (A, B, OUT)))

    return rt.CACHE.build(dev, key, make).bind(*roles)


@torch.library.custom_op("cudnn::conv2d_bias_act_backward", mutates_args=())
def _bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, saved: torch.Tensor, stride: list[int],
         padding: list[int], dilation: list[int], groups: int, act: str,
         has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = _run_bwd(dy, x, w, saved, stride, padding, dilation, act, has_bias)
    return dx, dw, (w.new_empty(0) if db is None else db)


@_bwd.register_fake
def _(dy, x, w, saved, stride, padding, dilation, groups, act, has_bias):  # type: ignore[no-untyped-def]
    return (rt.like_layout(x, list(x.shape), rt.channels_last(x)),
            rt.like_layout(w, list(w.shape), rt.channels_last(w)),
            w.new_empty(w.shape[0]) if has_bias else w.new_empty(0))


def _setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, w, b, stride, padding, dilation, groups, act, _save = inputs
    y, z = output
    ctx.conv = (stride, padding, dilation, groups, act, b is not None)
    ctx.save_for_backward(x, w, y if act == "relu" else z)


def _backward(ctx, dy, _dz):  # type: ignore[no-untyped-def]
    x, w, saved = ctx.saved_tensors
    stride, padding, dilation, groups, act, has_bias = ctx.conv
    if act in ("gelu", "silu") and saved.numel() == 0:
        raise RuntimeError("cudnn.ops.conv2d_bias_act: the forward ran without saving the pre-activation "
                           "(no input required grad then); cannot differentiate it")
    dx, dw, db = torch.ops.cudnn.conv2d_bias_act_backward(dy, x, w, saved, stride, padding, dilation, groups,
                                                          act, has_bias)
    return dx, dw, (db if has_bias else None), None, None, None, None, None, None


_fwd.register_autograd(_backward, setup_context=_setup)


class _Eager(torch.autograd.Function):
    """The eager path with a gradient wanted: the same kernels as the registered op and its
    backward, without the dispatcher (see `_runtime`)."""

    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups, act):  # type: ignore[no-untyped-def]
        y, z, built = _run(x, w, b, stride, padding, dilation, groups, act, act in ("gelu", "silu"))
        ctx.conv = (stride, padding, dilation, act, b is not None, built)
        ctx.save_for_backward(x, w, y if act == "relu" else z)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        x, w, saved = ctx.saved_tensors
        stride, padding, dilation, act, has_bias, built = ctx.conv
        need = ctx.needs_input_grad
        dx, dw, db = _run_bwd(dy, x, w, saved, stride, padding, dilation, act, has_bias and need[2], need[0],
                              need[1], built)
        return dx, dw, db, None, None, None, None, None


def conv2d_bias_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    stride: int | Sequence[int] = 1, padding: str | int | Sequence[int] = 0,
                    dilation: int | Sequence[int] = 1, groups: int = 1, act: str = "none") -> torch.Tensor:
    """``act(conv2d(x, weight, stride, padding, dilation, groups) + bias)`` in one cuDNN graph,
    differentiable (see the module's note for what the backward runs). ``act`` is one of
    "none", "relu", "gelu" (erf form) or "silu"; ``padding`` as torch's conv2d takes it (ints,
    "valid", or "same" at stride 1, whose odd total pads the right / bottom by one more,
    through ``F.pad`` before the graph). Under CUDA autocast float32 inputs run in the
    autocast dtype, as torch's conv2d does."""
    op = "conv2d_bias_act"
    x, weight, bias = rt.autocast(x, weight, bias)
    if act not in ACTS:
        rt.choice(op, "act", act, ACTS)
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise rt.OpError(f"cudnn.ops.{op}: groups: expected an int, got {groups!r}")
    s, d = _pair(op, "stride", stride), _pair(op, "dilation", dilation)
    if isinstance(padding, str):
        p, extra = conv_padding(op, padding, weight, s, d)
        if any(extra):
            x = F.pad(x, extra)
    else:
        p = _pair(op, "padding", padding)
    save = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))
    if rt.eager(x, weight, bias):
        if save:
            return _Eager.apply(x, weight, bias, s, p, d, groups, act)
        return _run(x, weight, bias, s, p, d, groups, act, False)[0]
    y, _ = torch.ops.cudnn.conv2d_bias_act(x, weight, bias, list(s), list(p), list(d), groups, act, save)
    return y
