"""``cudnn.ops.causal_conv1d``: the official torch op over ``cudnn.causal_conv1d_forward`` /
``causal_conv1d_backward`` (cuDNN's plain C API ``cudnnCausalConv1d*``, cuDNN >= 9.22).

x [batch, dim, seq_len] and weight [dim, kernel_size] (a depthwise, left-padded conv),
bias [dim] (zeros when None: cuDNN needs one), activation "identity" or "silu". The backward
accumulates dweight / dbias in float32 (what cuDNN requires), cast to the weight's dtype.
"""

from __future__ import annotations

import torch

from .._lib.enums import data_type
from ..causal_conv1d_capi import causal_conv1d_backward, causal_conv1d_forward
from . import _runtime as rt

NEEDS = 92200
ACTIVATIONS = {"identity": 0, "silu": 1}  # cudnnCausalConv1dActivation_t
KERNEL_SIZES = (2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256)
_OP = "causal_conv1d"


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> None:
    rt.check_tensor(_OP, "x", x, rank=3)
    rt.check_tensor(_OP, "weight", weight, (x.dtype,), rank=2, device=x.device)
    if bias is not None:
        rt.check_tensor(_OP, "bias", bias, (x.dtype,), rank=1, device=x.device)
        if bias.shape[0] != x.shape[1]:
            raise rt.OpError(f"cudnn.ops.{_OP}: bias: expected {x.shape[1]} elements (x's dim), "
                             f"got {tuple(bias.shape)}")
    if weight.shape[0] != x.shape[1]:
        raise rt.OpError(f"cudnn.ops.{_OP}: weight: expected [{x.shape[1]}, kernel_size] (x's dim first), "
                         f"got {tuple(weight.shape)}")
    if weight.shape[1] not in KERNEL_SIZES:
        raise rt.OpError(f"cudnn.ops.{_OP}: weight: kernel_size must be one of {KERNEL_SIZES}, got {weight.shape[1]}")
    rt.choice(_OP, "activation", activation, tuple(ACTIVATIONS))


def _functions() -> tuple[object, object]:
    """The two C-API functions, after the version gate."""
    rt.needs_version("cudnn.ops.causal_conv1d (cudnnCausalConv1dForward/Backward)", NEEDS)
    return causal_conv1d_forward, causal_conv1d_backward


def _stream(t: torch.Tensor) -> int:
    return int(torch.cuda.current_stream(t.device).cuda_stream)


@torch.library.custom_op("cudnn::causal_conv1d", mutates_args=())
def _fwd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    _check(x, weight, bias, activation)
    forward, _ = _functions()
    rt.check_cuda(_OP, "x", x)
    x, weight = x.contiguous(), weight.contiguous()
    b = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device) if bias is None else bias.contiguous()
    y = torch.empty_like(x)
    batch, dim, seq = x.shape
    forward(_stream(x), x.data_ptr(), weight.data_ptr(), b.data_ptr(), y.data_ptr(), batch, dim, seq,  # type: ignore[operator]
            weight.shape[1], int(rt.CUDNN_DTYPE[x.dtype]), ACTIVATIONS[activation])
    return y


@_fwd.register_fake
def _(x, weight, bias, activation):  # type: ignore[no-untyped-def]
    _check(x, weight, bias, activation)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("cudnn::causal_conv1d_backward", mutates_args=())
def _bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
         activation: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _, backward = _functions()
    x, weight, dy = x.contiguous(), weight.contiguous(), dy.contiguous()
    b = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device) if bias is None else bias.contiguous()
    dx = torch.empty_like(x)
    dw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device)  # accumulated by cuDNN
    db = torch.zeros(x.shape[1], dtype=torch.float32, device=x.device)
    batch, dim, seq = x.shape
    backward(_stream(x), x.data_ptr(), weight.data_ptr(), b.data_ptr(), dy.data_ptr(), dx.data_ptr(),  # type: ignore[operator]
             dw.data_ptr(), db.data_ptr(), batch, dim, seq, weight.shape[1], int(rt.CUDNN_DTYPE[x.dtype]),
             int(data_type.FLOAT), ACTIVATIONS[activation])
    return dx, dw.to(weight.dtype), db.to(weight.dtype)


@_bwd.register_fake
def _(dy, x, weight, bias, activation):  # type: ignore[no-untyped-def]
    return (torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight),
            x.new_empty(x.shape[1], dtype=weight.dtype))


def _setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, weight, bias, activation = inputs
    ctx.activation = activation
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, bias)


def _backward(ctx, dy):  # type: ignore[no-untyped-def]
    x, weight, bias = ctx.saved_tensors
    dx, dw, db = torch.ops.cudnn.causal_conv1d_backward(dy, x, weight, bias, ctx.activation)
    return dx, dw, (db if ctx.has_bias else None), None


_fwd.register_autograd(_backward, setup_context=_setup)


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  activation: str = "identity") -> torch.Tensor:
    """``activation(causal_depthwise_conv1d(x, weight) + bias)`` on [batch, dim, seq_len]
    through cuDNN's causal conv1d (needs cuDNN >= 9.22), differentiable."""
    _check(x, weight, bias, activation)
    return torch.ops.cudnn.causal_conv1d(x, weight, bias, activation)
