"""The official package's norm ops ``cudnn::rmsnorm``, ``rmsnorm_bwd``, ``layernorm`` and
``layernorm_bwd``, with its schemas (registered when this module is imported): thin layers over
the layer and RMS norm graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from . import _runtime as rt
from ._norm_layer import ln_bwd_run, ln_run

if TYPE_CHECKING:
    pass


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
    y, _mean, inv = ln_run(x, (hidden, 1, 1), scale, bias, float(eps), True, True)
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
    dx, dw, db = ln_bwd_run(dy, x, (hidden, 1, 1), scale, None, inv_var.view(rows, 1), True, bool(has_dbias))
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
    y, mean, inv = ln_run(x, (hidden, 1, 1), scale, bias, float(eps), False, True)
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
    dx, dw, db = ln_bwd_run(dy, x, (hidden, 1, 1), scale, mean.view(rows, 1), inv_var.view(rows, 1), False, True)
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
