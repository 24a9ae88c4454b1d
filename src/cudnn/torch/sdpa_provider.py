"""PyTorch's own cuDNN attention served by cudnn-py: CUDA kernels for
``aten::_scaled_dot_product_cudnn_attention`` and its backward, for the worker ops
``aten::_cudnn_attention_forward`` / ``_backward`` where a nested (jagged) tensor's attention
calls them with packed sequences (torch >= 2.9), and, where the installed torch defines them,
``torch_attn::_varlen_attn``, ``_varlen_attn_out`` and ``_varlen_attn_backward``: they run
`cudnn.ops.attention` (masks, dropout) and ``cudnn::sdpa_fwd`` / ``cudnn::sdpa_bwd``.

torch's autograd wrappers of the aten ops are untouched: they save our outputs and call the
(also overridden) backward, so ``F.scaled_dot_product_attention`` under
``sdpa_kernel([SDPBackend.CUDNN_ATTENTION])`` runs here unchanged, attention masks and dropout
included. What these kernels do not serve (a debug mask, a mask or dropout on the nested path,
paged KV, arguments cuDNN refuses) runs torch's own kernel (the worker ops; for varlen the flash
kernels torch's op body runs), counted in `calls` and logged once per reason on the
``cudnn.torch`` logger.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import torch
import torch.nn.attention

from .._graph.model.graph_errors import GraphError
from .._lib.status import CudnnBadParamError, cudnnGraphNotSupportedError
from ..log import get_logger
from ..ops import attention
from ..ops import sdpa_official as ops

__all__ = ["SdpaOverrides", "calls", "install", "install_sdpa_overrides", "remove_sdpa_overrides",
           "served_plan_names"]

# aten calls served through cudnn-py (fwd, bwd) and handed back to torch's kernels: cuDNN's
# C++ path (fwd_cpp, bwd_cpp) or, for varlen, the flash kernels (fwd_fa2, bwd_fa2)
calls: dict[str, int] = {"fwd": 0, "bwd": 0, "fwd_cpp": 0, "bwd_cpp": 0, "fwd_fa2": 0, "bwd_fa2": 0}

_log = get_logger("torch")
_logged: set[str] = set()
# what cudnn-py says of a call before any GPU work (its checks, a graph cuDNN refuses or has no
# engine for): the call is torch's kernel's, which accepts it or raises torch's own error
_REFUSED = (GraphError, CudnnBadParamError, cudnnGraphNotSupportedError)
AtenOutputs = tuple[Any, ...]


def _fallback(counter: str, reason: str) -> None:
    calls[counter] += 1
    if reason not in _logged:
        _logged.add(reason)
        _log.info("cudnn.torch: %s runs torch's own kernel: %s", counter.split("_")[0], reason)


def _dense_reason(debug: bool = False, cum_seq: Any = None) -> str:
    if debug:
        return "return_debug_mask is not served by the provider"
    if cum_seq is not None:
        return "cum_seq_q/cum_seq_k on the dense op go to the worker op (the nested-tensor path)"
    return ""


def _scale(query: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale


# The Philox seed and offset a call without dropout returns are never read (torch's own kernels
# leave them unset). Outside a CUDA-graph capture they are on the CPU, as torch's are, and one
# pair serves every call; under a capture they are made on the device, as torch makes them there.
_UNREAD_RNG = (torch.empty((), dtype=torch.int64), torch.empty((), dtype=torch.int64))
_capturing = torch.cuda.is_current_stream_capturing


def _unread_rng(query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not (query.is_cuda and _capturing()):
        return _UNREAD_RNG
    return (torch.empty((), dtype=torch.int64, device=query.device),
            torch.empty((), dtype=torch.int64, device=query.device))


def _fwd(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_bias: torch.Tensor | None,
         compute_log_sumexp: bool, dropout_p: float = 0.0, is_causal: bool = False, return_debug_mask: bool = False,
         *, scale: float | None = None) -> AtenOutputs:
    """``aten::_scaled_dot_product_cudnn_attention`` on cudnn-py's attention graphs: without a
    mask or dropout on ``cudnn::sdpa_fwd``; with an ``attn_bias`` (torch hands a boolean mask
    over as a float one) or dropout on `cudnn.ops.attention.forward`, whose Philox seed and
    offset are returned for the backward."""
    reason = _dense_reason(return_debug_mask)
    if not reason:
        try:
            if attn_bias is None and not dropout_p:
                o, lse = ops.dense_forward(query, key, value, _scale(query, scale), is_causal, compute_log_sumexp)
                seed, offset = _unread_rng(query)
            else:
                rng = attention.draw_rng(query) if dropout_p else None
                o, lse = attention.forward(query, key, value, attn_bias, is_causal, _scale(query, scale),
                                           compute_log_sumexp, dropout_p, rng)
                if rng is None:
                    seed, offset = _unread_rng(query)
                else:  # the backward finds the one [2] tensor again from its halves (`_rng_of`)
                    seed, offset = rng[0], rng[1]
        except _REFUSED as exc:
            reason = f"cudnn-py refused the call ({exc})"
        else:
            calls["fwd"] += 1
            return (o, lse, None, None, query.shape[2], key.shape[2], seed, offset, None)
    _fallback("fwd_cpp", reason)
    return torch.ops.aten._cudnn_attention_forward(query, key, value, attn_bias, None, None, query.shape[2],
                                                   key.shape[2], compute_log_sumexp, dropout_p, is_causal,
                                                   return_debug_mask, scale=scale)


def _rng_of(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The forward's Philox seed and offset as the one int64 [2] tensor the graphs read (the
    two halves `_fwd` returned, or torch's own kernel's two scalars)."""
    if offset.dim() == 0 and seed.dim() == 0 and offset.data_ptr() == seed.data_ptr() + 8 \
            and offset.untyped_storage().data_ptr() == seed.untyped_storage().data_ptr():
        return seed.as_strided((2,), (1,))
    return torch.stack((seed.reshape(()), offset.reshape(()))).to(torch.int64)


def _bwd(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, out: torch.Tensor,
         logsumexp: torch.Tensor, philox_seed: torch.Tensor, philox_offset: torch.Tensor,
         attn_bias: torch.Tensor | None, cum_seq_q: torch.Tensor | None, cum_seq_k: torch.Tensor | None, max_q: int,
         max_k: int, dropout_p: float, is_causal: bool, *,
         scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten::_scaled_dot_product_cudnn_attention_backward`` on ``cudnn::sdpa_bwd`` (no mask,
    no dropout) or `cudnn.ops.attention.backward` (the forward's dropout mask from its seed
    and offset)."""
    reason = _dense_reason(cum_seq=cum_seq_q)
    if not reason:
        lse = logsumexp if logsumexp.dim() == 4 else logsumexp.unsqueeze(-1)
        try:
            if attn_bias is None and not dropout_p:
                grads = ops.backward(grad_out, query, key, value, out, lse, _scale(query, scale), is_causal,
                                     is_deterministic=torch.are_deterministic_algorithms_enabled())
            else:
                rng = _rng_of(philox_seed, philox_offset) if dropout_p else None
                grads = attention.backward(grad_out, query, key, value, out, lse, attn_bias, is_causal,
                                           _scale(query, scale), dropout_p, rng)
        except _REFUSED as exc:
            reason = f"cudnn-py refused the call ({exc})"
        else:
            calls["bwd"] += 1
            return grads
    _fallback("bwd_cpp", reason)
    return torch.ops.aten._cudnn_attention_backward(grad_out, query, key, value, out, logsumexp, philox_seed,
                                                    philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
                                                    dropout_p, is_causal, scale=scale)


# -- the nested path: torch's worker ops, where they carry packed sequences ---------------------
# A nested (jagged) tensor's attention calls aten::_cudnn_attention_forward itself, on packed
# [T, H, D] values with cum_seq_q / cum_seq_k, and its backward aten::_cudnn_attention_backward.
# Those calls run on cudnn-py's packed (THD) graphs; every other call of the worker ops (the dense
# fallbacks above among them) runs torch's own kernel, taken from the dispatcher before the
# override (``torch.library.get_kernel``): without it (torch < 2.9) the worker ops are left alone.

_torch_worker: dict[str, Any] = {}  # torch's own CUDA kernels of the worker ops, while overridden


def _worker_kernels() -> dict[str, Any]:
    """torch's own CUDA kernels of the worker ops, by name; empty where this torch cannot hand
    them out or has none (a CPU build)."""
    get_kernel = getattr(torch.library, "get_kernel", None)
    if get_kernel is None:
        return {}
    if not all(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{n}", "CUDA") for n in WORKER_OPS):
        return {}
    return {n: get_kernel(f"aten::{n}", "CUDA") for n in WORKER_OPS}


def _nested_reason(attn_bias: Any, cum_seq_k: Any, dropout_p: float, debug: bool = False,
                   extra: dict[str, Any] | None = None) -> str:
    if attn_bias is not None:
        return "an attn_mask on the nested-tensor path is not served by the provider"
    if dropout_p:
        return "dropout on the nested-tensor path is not served by the provider"
    if debug:
        return "return_debug_mask is not served by the provider"
    if cum_seq_k is None:
        return "cum_seq_q without cum_seq_k is not served by the provider"
    if extra and any(v is not None for v in extra.values()):
        return f"{', '.join(k for k, v in extra.items() if v is not None)} (paged KV) is not served by the provider"
    return ""


def _worker_fwd(keyset: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_bias: torch.Tensor | None, cum_seq_q: torch.Tensor | None, cum_seq_k: torch.Tensor | None,
                max_q: int, max_k: int, compute_log_sumexp: bool, dropout_p: float = 0.0, is_causal: bool = False,
                return_debug_mask: bool = False, *, scale: float | None = None, **extra: Any) -> AtenOutputs:
    """``aten::_cudnn_attention_forward``: a packed call (``cum_seq_q``) on ``cudnn::sdpa_fwd``'s
    THD graphs (the log-sum-exp packed [T_q, H, 1]); anything else is torch's kernel's."""
    args = (query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, compute_log_sumexp, dropout_p,
            is_causal, return_debug_mask)
    if cum_seq_q is None:  # dense: torch's kernel (the provider's own fallback, or another caller)
        return _torch_worker["_cudnn_attention_forward"].call_boxed(keyset, *args, scale=scale, **extra)
    reason = _nested_reason(attn_bias, cum_seq_k, dropout_p, return_debug_mask, extra)
    if not reason:
        try:
            o, lse = ops.forward(query, key, value, _scale(query, scale), is_causal, cu_seqlens_q=cum_seq_q,
                                 cu_seqlens_kv=cum_seq_k, max_seqlen_q=max_q, max_seqlen_kv=max_k,
                                 return_lse=compute_log_sumexp)
        except _REFUSED as exc:
            reason = f"cudnn-py refused the call ({exc})"
        else:
            calls["fwd"] += 1
            seed, offset = _unread_rng(query)
            return (o, lse, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, None)
    _fallback("fwd_cpp", reason)
    return _torch_worker["_cudnn_attention_forward"].call_boxed(keyset, *args, scale=scale, **extra)


def _worker_bwd(keyset: Any, grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                out: torch.Tensor, logsumexp: torch.Tensor, philox_seed: torch.Tensor, philox_offset: torch.Tensor,
                attn_bias: torch.Tensor | None, cum_seq_q: torch.Tensor | None, cum_seq_k: torch.Tensor | None,
                max_q: int, max_k: int, dropout_p: float, is_causal: bool, *,
                scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten::_cudnn_attention_backward``: the backward of a packed call `_worker_fwd` served
    (its log-sum-exp [T_q, H, 1]) on ``cudnn::sdpa_bwd``; anything else is torch's kernel's."""
    args = (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
            max_q, max_k, dropout_p, is_causal)
    if cum_seq_q is None:
        return _torch_worker["_cudnn_attention_backward"].call_boxed(keyset, *args, scale=scale)
    reason = _nested_reason(attn_bias, cum_seq_k, dropout_p)
    if not reason and (logsumexp.dtype != torch.float32
                       or tuple(logsumexp.shape) != (query.shape[0], query.shape[1], 1)):
        reason = f"a log-sum-exp of shape {tuple(logsumexp.shape)} is not the provider's forward's"
    if not reason:
        try:
            padded = ops.thd_lse_to_padded(logsumexp, cum_seq_q, max_q)
            grads = ops.backward(grad_out, query, key, value, out, padded, _scale(query, scale), is_causal,
                                 cu_seqlens_q=cum_seq_q, cu_seqlens_kv=cum_seq_k, max_seqlen_q=max_q,
                                 max_seqlen_kv=max_k, is_deterministic=torch.are_deterministic_algorithms_enabled())
        except _REFUSED as exc:
            reason = f"cudnn-py refused the call ({exc})"
        else:
            calls["bwd"] += 1
            return grads
    _fallback("bwd_cpp", reason)
    return _torch_worker["_cudnn_attention_backward"].call_boxed(keyset, *args, scale=scale)


# -- varlen (torch.nn.attention.varlen): flash-attention window conventions -------------------

def _window(is_causal: bool, window_size: Any) -> tuple[bool, int, int]:
    """(is_causal, window_left, window_right) of ``cudnn::sdpa_fwd`` from flash's window (left,
    right): flash's left w sees w tokens back plus the token itself (cuDNN's left bound w + 1);
    a right of 0 is causal."""
    left, right = (-1, -1) if window_size is None else (int(window_size[0]), int(window_size[1]))
    if right == 0:
        is_causal, right = True, -1
    return is_causal, (left + 1 if left >= 0 else -1), right


def _varlen_reason(cu_seq_k: Any, seqused_k: Any = None, block_table: Any = None, num_splits: Any = None) -> str:
    if cu_seq_k is None:
        return "varlen without cu_seq_k is not served by the provider"
    if seqused_k is not None or block_table is not None:
        return "varlen seqused_k/block_table (paged KV) is not served by the provider"
    if num_splits not in (None, 1):
        return "varlen num_splits is not served by the provider"
    return ""


def _flash_window(window_size: Any) -> dict[str, int]:
    left, right = (-1, -1) if window_size is None else (int(window_size[0]), int(window_size[1]))
    return {"window_size_left": left, "window_size_right": right}


def _flash_extras(seqused_k: Any, block_table: Any, num_splits: Any) -> dict[str, Any]:
    extras = {"seqused_k": seqused_k, "block_table": block_table, "num_splits": num_splits}
    return {k: v for k, v in extras.items() if v is not None}


def _varlen_fwd(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seq_q: torch.Tensor,
                cu_seq_k: torch.Tensor | None, max_q: int, max_k: int, is_causal: bool = False,
                scale: float | None = None, window_size: Any = None, enable_gqa: bool = False, seqused_k: Any = None,
                block_table: Any = None, num_splits: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch_attn::_varlen_attn`` on ``cudnn::sdpa_fwd`` (packed THD); the log-sum-exp is
    flash's [H, T]."""
    reason = _varlen_reason(cu_seq_k, seqused_k, block_table, num_splits)
    rng_state = torch.empty((2,), dtype=torch.uint64, device=query.device)  # no dropout: never read
    if not reason:
        causal, left, right = _window(is_causal, window_size)
        attn_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
        try:
            o, stats = ops.forward(query, key, value, attn_scale, causal, False, left, right, None, None, None,
                                   cu_seq_q, cu_seq_k, max_q, max_k, True)
        except _REFUSED as exc:
            reason = f"cudnn-py refused the call ({exc})"
        else:
            calls["fwd"] += 1
            return o, stats.squeeze(-1).t().contiguous(), rng_state
    _fallback("fwd_fa2", reason)
    out, lse = torch.ops.aten._flash_attention_forward(
        query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, 0.0, is_causal, False, scale=scale,
        **_flash_window(window_size), **_flash_extras(seqused_k, block_table, num_splits))[:2]
    return out, lse, rng_state


def _varlen_fwd_out(out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    cu_seq_q: torch.Tensor, cu_seq_k: torch.Tensor | None, max_q: int, max_k: int,
                    is_causal: bool = False, scale: float | None = None, window_size: Any = None,
                    enable_gqa: bool = False, seqused_k: Any = None, block_table: Any = None,
                    num_splits: Any = None) -> torch.Tensor:
    """``torch_attn::_varlen_attn_out``: `_varlen_fwd` written into ``out``; returns the log-sum-exp."""
    o, lse, _ = _varlen_fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, scale, window_size,
                            enable_gqa, seqused_k, block_table, num_splits)
    out.copy_(o)
    return lse


def _varlen_bwd(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                out: torch.Tensor, lse: torch.Tensor, cu_seq_q: torch.Tensor, cu_seq_k: torch.Tensor, max_q: int,
                max_k: int, is_causal: bool, rng_state: torch.Tensor, scale: float | None = None,
                window_size: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch_attn::_varlen_attn_backward`` on ``cudnn::sdpa_bwd``."""
    reason = _varlen_reason(cu_seq_k)
    if not reason:
        causal, left, right = _window(is_causal, window_size)
        attn_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
        try:
            padded = ops.thd_lse_to_padded(lse.t(), cu_seq_q, max_q)
            grads = ops.backward(grad_out, query, key, value, out, padded, attn_scale, causal, False, left, right,
                                 None, cu_seq_q, cu_seq_k, max_q, max_k, torch.are_deterministic_algorithms_enabled())
        except _REFUSED as exc:
            reason = f"cudnn-py refused the call ({exc})"
        else:
            calls["bwd"] += 1
            return grads
    _fallback("bwd_fa2", reason)
    unused = torch.empty(0, device=query.device)
    return torch.ops.aten._flash_attention_backward(
        grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, 0.0, is_causal, rng_state, unused,
        scale=scale, **_flash_window(window_size))


# -- installing ----------------------------------------------------------------------------------

DENSE_OPS = {"_scaled_dot_product_cudnn_attention": _fwd, "_scaled_dot_product_cudnn_attention_backward": _bwd}
WORKER_OPS = {"_cudnn_attention_forward": _worker_fwd, "_cudnn_attention_backward": _worker_bwd}
VARLEN_OPS = {"_varlen_attn": _varlen_fwd, "_varlen_attn_out": _varlen_fwd_out,
              "_varlen_attn_backward": _varlen_bwd}


def _varlen_defined() -> list[str]:
    """The varlen ops the installed torch defines (importing torch.nn.attention.varlen defines them)."""
    try:
        import torch.nn.attention.varlen
    except ImportError:
        return []
    namespace = getattr(torch.ops, "torch_attn", None)
    return [name for name in VARLEN_OPS if namespace is not None and hasattr(namespace, name)]


class SdpaOverrides:
    """One installation of the overrides. It stays installed until ``remove()`` (or the end of
    its ``with`` block), whether or not the handle is kept: a line that only calls
    `install_sdpa_overrides` serves the process from then on. Installations nest: the first
    registers the kernels with torch, and they stay until every installation is removed.
    Removing twice does nothing."""

    _live: ClassVar[list[SdpaOverrides]] = []  # installed and not removed, oldest first
    _libs: ClassVar[list[torch.library.Library]] = []  # the registration the live installations share
    _ops: ClassVar[tuple[str, ...]] = ()  # the operators it overrides

    def __init__(self, ops: tuple[str, ...]) -> None:
        self.ops = ops  # the overridden operators, "namespace::name"

    @classmethod
    def _begin(cls) -> SdpaOverrides:
        """A new installation, registering the kernels with torch if none is live."""
        if not cls._live:
            libs, ops = _register()
            cls._libs[:] = libs
            cls._ops = ops
        overrides = cls(cls._ops)
        cls._live.append(overrides)
        return overrides

    @property
    def installed(self) -> bool:
        return any(live is self for live in SdpaOverrides._live)

    def remove(self) -> None:
        """End this installation; torch has its own kernels back once none is left."""
        live = SdpaOverrides._live
        if not self.installed:
            return
        live[:] = [other for other in live if other is not self]
        if not live:
            for lib in SdpaOverrides._libs:
                lib._destroy()
            SdpaOverrides._libs.clear()
            _torch_worker.clear()

    @classmethod
    def remove_all(cls) -> int:
        """Remove every installation still in place; how many there were."""
        live = list(cls._live)
        for overrides in reversed(live):
            overrides.remove()
        return len(live)

    def __enter__(self) -> SdpaOverrides:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"SdpaOverrides({', '.join(self.ops)}{'' if self.installed else '; removed'})"


def remove_sdpa_overrides() -> int:
    """Remove every installation of the overrides still in place (kept handles or not): torch's
    own kernels again. Returns how many were removed."""
    return SdpaOverrides.remove_all()


def _register() -> tuple[list[torch.library.Library], tuple[str, ...]]:
    """Register the kernels with torch's dispatcher (quietly: torch warns once per process that a
    kernel of its own is overridden, which is the point here); the libraries and the ops."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel", category=UserWarning)
        dense = torch.library.Library("aten", "IMPL")
        for name, fn in DENSE_OPS.items():
            dense.impl(name, fn, "CUDA")
        libs, names = [dense], [f"aten::{n}" for n in DENSE_OPS]
        _torch_worker.update(_worker_kernels())  # taken before they are overridden
        if _torch_worker:
            for name, fn in WORKER_OPS.items():
                dense.impl(name, fn, "CUDA", with_keyset=True)
            names += [f"aten::{n}" for n in WORKER_OPS]
        varlen = _varlen_defined()
        if varlen:
            lib = torch.library.Library("torch_attn", "IMPL")
            for name in varlen:
                lib.impl(name, VARLEN_OPS[name], "CUDA")
            libs.append(lib)
            names += [f"torch_attn::{n}" for n in varlen]
    return libs, tuple(names)


def install_sdpa_overrides() -> SdpaOverrides:
    """Serve PyTorch's cuDNN attention ops (and the varlen ops, where torch has them) from
    cudnn-py, from now until the returned handle's ``remove()`` (or `remove_sdpa_overrides`):
    dropping the handle keeps them."""
    missing = [n for n in ("_cudnn_attention_forward", "_cudnn_attention_backward")
               if not hasattr(torch.ops.aten, n)]
    if missing:
        raise RuntimeError(f"cudnn.torch: this torch ({torch.__version__}) has no aten::{missing[0]}, the kernel the "
                           "provider hands unserved calls to; the provider needs torch >= 2.7")
    return SdpaOverrides._begin()


_installed: SdpaOverrides | None = None


def install() -> SdpaOverrides:
    """Install the overrides once per process (a second call returns the same installation)."""
    global _installed
    if _installed is None or not _installed.installed:
        _installed = install_sdpa_overrides()
    return _installed


def served_plan_names() -> list[str]:
    """The execution plan serving each attention graph built so far (most recent last)."""
    return ops.plan_names()


def _register_with_torch() -> None:
    """Offer the overrides to torch's flash-attention registry as ``"CUDNN"`` (torch >= 2.13),
    so ``torch.nn.attention.activate_flash_attention_impl("CUDNN")`` installs them."""
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp_python"):
        return  # torch's own switch calls install_sdpa_overrides()
    register = getattr(torch.nn.attention, "register_flash_attention_impl", None)
    if register is not None:
        register("CUDNN", register_fn=install_sdpa_overrides)


_register_with_torch()
