"""The official package's attention torch ops, ``cudnn::sdpa_fwd`` and ``cudnn::sdpa_bwd``, over
cuDNN's ``sdpa`` / ``sdpa_backward`` graphs; importing this module registers them.

What they add to ``F.scaled_dot_product_attention``: sink logits (one per query head, added to
the softmax denominator), diagonal bands (``window_left`` / ``window_right``), bottom-right
causal alignment, padded batches (``seq_len_q`` / ``seq_len_kv``) and packed variable-length
input (THD, with ``cu_seqlens_q`` / ``cu_seqlens_kv``).

Layouts, as the official's: dense Q, K, V are shaped [B, H, S, D] with any strides whose head
dim has stride 1 (a BSHD buffer is a transposed view); O takes Q's layout (torch's
``empty_like`` when its shape is Q's), the log-sum-exp is [B, H_q, S_q, 1] float32. THD Q, K, V
are packed [T, H, D] (a token stride other than H*D, as in a view of a packed KV buffer, is
kept); O is packed [T_q, H_q, D_v] and the log-sum-exp [T_q, H_q, 1] float32. ``sdpa_bwd`` on
THD reads the log-sum-exp padded, [B, H_q, max_seqlen_q] or [B, H_q, max_seqlen_q, 1]
(`thd_lse_to_padded`). Without ``return_lse`` the second output is an empty float32 tensor.

Graphs are cached per device by shape, strides, dtype and options (`_runtime.CACHE`); work
runs on torch's current stream with workspace from torch's caching allocator, and the
per-call metadata (lengths and ragged offsets from ``cu_seqlens``) is made by torch on the
device, so the ops run under CUDA-graph capture and ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from .._graph.model.sdpa_enums import diagonal_alignment
from .._lib.enums import data_type
from . import _runtime as rt

if TYPE_CHECKING:
    from .._graph.model.tensor import Tensor
    from .._graph.pygraph import pygraph

__all__ = ["BWD_SCHEMA", "FWD_SCHEMA", "backward", "dense_forward", "forward", "plan_names", "sdpa",
           "thd_lse_to_padded"]

FWD_SCHEMA = (
    "sdpa_fwd(Tensor q, Tensor k, Tensor v, float attn_scale, bool is_causal=False, "
    "bool causal_bottom_right=False, int window_left=-1, int window_right=-1, Tensor? sinks=None, "
    "Tensor? seq_len_q=None, Tensor? seq_len_kv=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, "
    "int max_seqlen_q=0, int max_seqlen_kv=0, bool return_lse=True) -> (Tensor, Tensor)")
BWD_SCHEMA = (
    "sdpa_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, float attn_scale, "
    "bool is_causal=False, bool causal_bottom_right=False, int window_left=-1, int window_right=-1, "
    "Tensor? sinks=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, int max_seqlen_q=0, "
    "int max_seqlen_kv=0, bool is_deterministic=False) -> (Tensor, Tensor, Tensor)")

_INT_TYPES = (torch.int32, torch.int64)
_PLANS: OrderedDict[tuple, str] = OrderedDict()  # graph key -> the plan that serves it (served_plan_names)


def _err(op: str, msg: str) -> rt.OpError:
    return rt.OpError(f"cudnn.ops.{op}: {msg}")


# -- argument checks (shared by the kernels and the fake kernels) --------------------------------

class CallShape(NamedTuple):
    """What a call's tensors say about the attention: batch, heads, (max) lengths, head dims, and
    whether they are packed (THD). The graph's own problem sizes are `_graph.families.sdpa_common.Dims`."""

    b: int
    h_q: int
    h_k: int
    h_v: int
    s_q: int
    s_kv: int
    d_qk: int
    d_v: int
    thd: bool


def _bands(op: str, is_causal: bool, bottom_right: bool, window_left: int, window_right: int) -> None:
    """The official's rules for the causal flag and the diagonal band."""
    if bottom_right and not (is_causal or window_left >= 0 or window_right >= 0):
        raise _err(op, "causal_bottom_right: it only re-anchors a diagonal band; set is_causal, window_left or "
                       "window_right too")
    if is_causal and window_right > 0:
        raise _err(op, f"window_right: is_causal masks every future column but window_right={window_right} admits "
                       "some; give one or the other")
    if window_left == 0:
        raise _err(op, "window_left: expected -1 (no left bound) or a positive number of visible tokens, got 0")


def _qkv(op: str, q: Any, k: Any, v: Any, thd: bool, max_q: int, max_kv: int) -> CallShape:
    rank = 3 if thd else 4
    layout = "packed [T, H, D] (cu_seqlens given)" if thd else "[B, H, S, D]"
    rt.check_tensor(op, "q", q, rt.HALVES)
    rt.check_cuda(op, "q", q)
    rt.check_tensor(op, "k", k, (q.dtype,), device=q.device)
    rt.check_tensor(op, "v", v, (q.dtype,), device=q.device)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != rank:
            raise _err(op, f"{name}: expected {layout}, got shape {tuple(t.shape)}")
    if thd:
        (_, h_q, d_qk), (t_kv, h_v, d_v), h_k = q.shape, v.shape, k.shape[1]
        if tuple(k.shape) != (t_kv, h_k, d_qk):
            raise _err(op, f"k: expected [T_kv={t_kv}, H_k, D_qk={d_qk}] (v's tokens, q's head dim), got "
                           f"{tuple(k.shape)}")
        b, s_q, s_kv = -1, max_q, max_kv
    else:
        (b, h_q, s_q, d_qk), (_, h_v, s_kv, d_v), h_k = q.shape, v.shape, k.shape[1]
        if tuple(k.shape) != (b, h_k, s_kv, d_qk) or v.shape[0] != b:
            raise _err(op, f"k/v: expected k [B={b}, H_k, S_kv, D_qk={d_qk}] and v [B={b}, H_v, S_kv, D_v], got "
                           f"k {tuple(k.shape)} and v {tuple(v.shape)}")
    if h_q % h_k or h_q % h_v:
        raise _err(op, f"k/v: their head counts must divide q's {h_q} (grouped-query attention), got H_k={h_k}, "
                       f"H_v={h_v}")
    for name, d in (("D_qk", d_qk), ("D_v", d_v)):
        if d % 8 or d <= 0:
            raise rt.OpNotSupportedError(f"cudnn.ops.{op}: head dim {name}={d} is not supported: cuDNN's attention "
                                         "needs a positive multiple of 8")
    return CallShape(b, h_q, h_k, h_v, s_q, s_kv, d_qk, d_v, thd)


def _varlen(op: str, q: torch.Tensor, cu_q: Any, cu_kv: Any, max_q: int, max_kv: int) -> int:
    """Check THD's cu_seqlens and maximum lengths; the batch size."""
    if cu_kv is None:
        raise _err(op, "cu_seqlens_kv: the packed (THD) path needs cu_seqlens_kv with cu_seqlens_q")
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_kv)):
        rt.check_tensor(op, name, t, _INT_TYPES, rank=1, device=q.device)
    if cu_q.shape[0] != cu_kv.shape[0] or cu_q.shape[0] < 2:
        raise _err(op, f"cu_seqlens_q/cu_seqlens_kv: expected two [B + 1] prefix sums of one batch (B >= 1), got "
                       f"{tuple(cu_q.shape)} and {tuple(cu_kv.shape)}")
    for name, n in (("max_seqlen_q", max_q), ("max_seqlen_kv", max_kv)):
        if n <= 0:
            raise _err(op, f"{name}: the packed (THD) path needs the longest sequence's length, got {n}")
    return int(cu_q.shape[0]) - 1


def check_forward(q: Any, k: Any, v: Any, is_causal: bool = False, causal_bottom_right: bool = False,
                  window_left: int = -1, window_right: int = -1, sinks: Any = None, seq_len_q: Any = None,
                  seq_len_kv: Any = None, cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None, max_seqlen_q: int = 0,
                  max_seqlen_kv: int = 0) -> CallShape:
    """Refuse what ``cudnn::sdpa_fwd`` cannot run (before any GPU work), naming the argument."""
    op = "sdpa_fwd"
    _bands(op, is_causal, causal_bottom_right, window_left, window_right)
    thd = cu_seqlens_q is not None
    if not thd and cu_seqlens_kv is not None:
        raise _err(op, "cu_seqlens_kv: given without cu_seqlens_q; the packed (THD) path needs both")
    dims = _qkv(op, q, k, v, thd, max_seqlen_q, max_seqlen_kv)
    if thd:
        if seq_len_q is not None or seq_len_kv is not None:
            raise _err(op, "seq_len_q/seq_len_kv: the packed (THD) path takes its lengths from cu_seqlens; do not "
                           "give them")
        dims = dims._replace(b=_varlen(op, q, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv))
    elif (seq_len_q is None) != (seq_len_kv is None):
        raise _err(op, "seq_len_q/seq_len_kv: a padded batch needs both")
    for name, t in (("seq_len_q", seq_len_q), ("seq_len_kv", seq_len_kv)):
        if t is not None:
            rt.check_tensor(op, name, t, _INT_TYPES, device=q.device)
            if t.numel() != dims.b:
                raise _err(op, f"{name}: expected {dims.b} lengths (one per batch), got shape {tuple(t.shape)}")
    if sinks is not None:
        rt.check_tensor(op, "sinks", sinks, rt.FLOATS, device=q.device)
        if sinks.numel() != dims.h_q:
            raise _err(op, f"sinks: expected {dims.h_q} logits (one per query head), got shape {tuple(sinks.shape)}")
    return dims


def check_backward(grad_out: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, is_causal: bool = False,
                   causal_bottom_right: bool = False, window_left: int = -1, window_right: int = -1,
                   sinks: Any = None, cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None, max_seqlen_q: int = 0,
                   max_seqlen_kv: int = 0) -> CallShape:
    """Refuse what ``cudnn::sdpa_bwd`` cannot run (before any GPU work), naming the argument."""
    op = "sdpa_bwd"
    _bands(op, is_causal, causal_bottom_right, window_left, window_right)
    thd = cu_seqlens_q is not None
    dims = _qkv(op, q, k, v, thd, max_seqlen_q, max_seqlen_kv)
    if thd:
        dims = dims._replace(b=_varlen(op, q, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv))
    o_shape = (q.shape[0], dims.h_q, dims.d_v) if thd else (dims.b, dims.h_q, dims.s_q, dims.d_v)
    for name, t in (("o", o), ("grad_out", grad_out)):
        rt.check_tensor(op, name, t, (q.dtype,), device=q.device)
        if tuple(t.shape) != o_shape:
            raise _err(op, f"{name}: expected shape {o_shape} (q's tokens and heads, v's head dim), got "
                           f"{tuple(t.shape)}")
    rt.check_tensor(op, "lse", lse, (torch.float32,), device=q.device)
    want = (dims.b, dims.h_q, dims.s_q)
    if tuple(lse.shape) not in (want, (*want, 1)):
        what = " (padded: thd_lse_to_padded)" if thd else ""
        raise _err(op, f"lse: expected the forward's log-sum-exp {(*want, 1)} or {want}{what}, got "
                       f"{tuple(lse.shape)}")
    if sinks is not None:
        rt.check_tensor(op, "sinks", sinks, rt.FLOATS, device=q.device)
        if sinks.numel() != dims.h_q:
            raise _err(op, f"sinks: expected {dims.h_q} logits (one per query head), got shape {tuple(sinks.shape)}")
    return dims


# -- layouts -------------------------------------------------------------------------------------

def like_strides(shape: tuple[int, ...], like: torch.Tensor) -> tuple[int, ...]:
    """Strides of a new ``shape`` tensor in ``like``'s layout, as torch's cuDNN attention lays out
    O and the gradients (``empty_like`` for ``like``'s own shape, else ``like``'s dim order);
    packed row-major where that would leave the head dim strided."""
    order = sorted(range(len(shape)), key=lambda i: like.stride()[i], reverse=True)
    out, acc = [0] * len(shape), 1
    for i in reversed(order):
        out[i] = acc
        acc *= shape[i]
    strides = tuple(out)
    if tuple(like.shape) == tuple(shape):  # empty_like: the same strides where ``like`` is dense
        given = tuple(like.stride())
        dense = all(a == g or n == 1 for a, g, n in zip(strides, given, shape))
        strides = given if dense else tuple(torch.empty_like(like, device="meta").stride())
    if strides[-1] != 1 and shape[-1] > 1:
        return tuple(torch.empty(shape, device="meta").stride())
    return strides


def _dense_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a unit head-dim stride and a 16-byte aligned start, copied if it has neither."""
    if (t.stride(-1) != 1 and t.shape[-1] > 1) or t.data_ptr() % 16:
        return t.clone(memory_format=torch.contiguous_format)
    return t


def _column(t: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """A compact, aligned copy (or ``t`` itself when it is one) of ``dtype`` reshaped to ``shape``."""
    t = t.to(dtype).contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t.reshape(shape)


def _thd_strides(t: torch.Tensor, s_max: int) -> list[int]:
    """[B, H, S, D] strides of a packed [T, H, D] tensor (its own token and head strides; the
    batch stride is nominal, the ragged offsets place each batch)."""
    s_t, s_h, s_d = t.stride()
    return [s_max * s_t, s_h, s_t, s_d]


def _varlen_meta(cu_q: torch.Tensor, cu_kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                     torch.Tensor]:
    """int32 [B, 1, 1, 1] lengths of q and kv, int64 prefix sums of q and kv, made on the device
    (once when one tensor gives both)."""
    len_q = cu_q.diff().to(torch.int32).reshape(-1, 1, 1, 1)
    q64 = cu_q.to(torch.int64)
    if cu_kv is cu_q:
        return len_q, len_q, q64, q64
    return len_q, cu_kv.diff().to(torch.int32).reshape(-1, 1, 1, 1), q64, cu_kv.to(torch.int64)


def _ragged(offsets: dict[str, tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Ragged offsets (prefix sums times a token stride) by port, each distinct product made once."""
    made: dict[tuple[int, int], torch.Tensor] = {}
    out = {}
    for name, (cu, stride) in offsets.items():
        key = (id(cu), stride)
        if key not in made:
            made[key] = cu * stride
        out[name] = made[key]
    return out


def thd_lse_to_padded(lse: torch.Tensor, cu_seqlens_q: torch.Tensor, max_seqlen_q: int) -> torch.Tensor:
    """Packed log-sum-exp [T, H] or [T, H, 1] -> padded [B, H, max_seqlen_q, 1] float32 (rows past
    a sequence's length are zero), on the device: no host read of ``cu_seqlens_q``."""
    tokens, heads = lse.shape[0], lse.shape[1]
    batch = cu_seqlens_q.shape[0] - 1
    cu = cu_seqlens_q.to(torch.int64)
    token = torch.arange(tokens, device=lse.device)
    seq = torch.searchsorted(cu[1:].contiguous(), token, right=True)  # tokens past cu[-1]: batch B (dropped)
    pos = (token - cu[seq]).clamp(max=max_seqlen_q - 1)
    padded = torch.zeros(batch + 1, heads, max_seqlen_q, 1, dtype=torch.float32, device=lse.device)
    padded[seq, :, pos, 0] = lse.reshape(tokens, heads).to(torch.float32)
    return padded[:batch]


# -- graphs --------------------------------------------------------------------------------------

def _band(is_causal: bool, bottom_right: bool, window_left: int, window_right: int) -> dict[str, Any]:
    right = window_right if window_right >= 0 else (0 if is_causal else None)
    return {"diagonal_alignment": diagonal_alignment.BOTTOM_RIGHT if bottom_right else diagonal_alignment.TOP_LEFT,
            "diagonal_band_left_bound": window_left if window_left >= 0 else None,
            "diagonal_band_right_bound": right}


def _index(g: pygraph, name: str, n: int, dtype: data_type) -> Tensor:
    return g.tensor(name=name, dim=[n, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dtype)


def _graph(dev: int, key: tuple, make: Callable[[pygraph], dict[str, Tensor]]) -> rt.Built:
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = rt.CACHE.build(dev, key, make)
        built.bind(*built.ports)
        _PLANS[(dev, key)] = next((r.name for r in built.graph.describe_plans() if r.status == "selected"), "?")
        while len(_PLANS) > rt.CACHE_SIZE:
            _PLANS.popitem(last=False)
    return built


def _fwd_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_scale: float, is_causal: bool,
             causal_bottom_right: bool, window_left: int, window_right: int, return_lse: bool) -> tuple:
    """What a dense forward's key records of its arguments (everything the checks and the graph
    read of them), flat: one tuple to build and hash per call."""
    return ("sdpa_fwd", q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
            q.device, k.device, v.device, float(attn_scale), is_causal, causal_bottom_right, window_left,
            window_right, return_lse)


def _bwd_key(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, attn_scale: float, is_causal: bool, causal_bottom_right: bool, window_left: int,
             window_right: int, is_deterministic: bool) -> tuple:
    """`_fwd_key` for a dense backward."""
    return ("sdpa_bwd", grad_out.shape, grad_out.stride(), q.shape, q.stride(), k.shape, k.stride(), v.shape,
            v.stride(), o.shape, o.stride(), lse.shape, lse.stride(), grad_out.dtype, q.dtype, k.dtype, v.dtype,
            o.dtype, lse.dtype, grad_out.device, q.device, k.device, v.device, o.device, lse.device,
            float(attn_scale), is_causal, causal_bottom_right, window_left, window_right, is_deterministic)


def _fwd_cached(call: tuple, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """A dense forward whose graph is cached under ``call`` (it was checked and bound to buffers
    laid out as these when it was built): outputs made as then (no log-sum-exp where the graph
    makes none), run; None where it is not."""
    pq, pk, pv = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if (pq | pk | pv) % 16:  # a copy is bound instead: not this key
        return None
    dev = q.get_device()
    built = rt.CACHE.lookup(dev, call)
    if built is None or built.info is None:  # not cached, or its builder has not recorded the layouts yet
        return None
    o_shape, o_stride, stats_shape = built.info
    o = q.new_empty_strided(o_shape, o_stride)
    if stats_shape is None:
        rt.run(built, dev, (pq, pk, pv, o.data_ptr()))
        return o, None
    stats = q.new_empty(stats_shape, dtype=torch.float32)
    rt.run(built, dev, (pq, pk, pv, o.data_ptr(), stats.data_ptr()))
    return o, stats


def _bwd_cached(call: tuple, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                grad_out: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """`_fwd_cached` for the backward: q, k, v, o, grad_out and lse are bound in that order
    before the gradients."""
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), grad_out.data_ptr(), lse.data_ptr())
    if (ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[4] | ptrs[5]) % 16:
        return None
    dev = q.get_device()
    built = rt.CACHE.lookup(dev, call)
    if built is None or built.info is None:
        return None
    (dq_shape, dq_stride), (dk_shape, dk_stride), (dv_shape, dv_stride) = built.info
    dq = q.new_empty_strided(dq_shape, dq_stride)
    dk = q.new_empty_strided(dk_shape, dk_stride)
    dv = q.new_empty_strided(dv_shape, dv_stride)
    rt.run(built, dev, (*ptrs, dq.data_ptr(), dk.data_ptr(), dv.data_ptr()))
    return dq, dk, dv


def dense_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_scale: float, is_causal: bool = False,
                  return_lse: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``cudnn::sdpa_fwd``'s kernel for a dense call without a band, sinks or lengths: O and the
    log-sum-exp, None where ``return_lse`` is False (the op returns an empty tensor there)."""
    done = _fwd_cached(_fwd_key(q, k, v, attn_scale, is_causal, False, -1, -1, return_lse), q, k, v)
    if done is not None:
        return done
    o, lse = forward(q, k, v, attn_scale, is_causal, return_lse=return_lse)
    return o, lse if return_lse else None


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_scale: float, is_causal: bool = False,
            causal_bottom_right: bool = False, window_left: int = -1, window_right: int = -1,
            sinks: torch.Tensor | None = None, seq_len_q: torch.Tensor | None = None,
            seq_len_kv: torch.Tensor | None = None, cu_seqlens_q: torch.Tensor | None = None,
            cu_seqlens_kv: torch.Tensor | None = None, max_seqlen_q: int = 0, max_seqlen_kv: int = 0,
            return_lse: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The CUDA kernel of ``cudnn::sdpa_fwd`` (callable directly, below torch's dispatcher)."""
    plain = sinks is None and seq_len_q is None and seq_len_kv is None and cu_seqlens_q is None \
        and cu_seqlens_kv is None
    call = None
    if plain:  # the key of a dense call is what its arguments say (checks passed when it was built)
        call = _fwd_key(q, k, v, attn_scale, is_causal, causal_bottom_right, window_left, window_right, return_lse)
        done = _fwd_cached(call, q, k, v)
        if done is not None:
            o, stats = done
            return o, (q.new_empty(0, dtype=torch.float32) if stats is None else stats)
    dims = check_forward(q, k, v, is_causal, causal_bottom_right, window_left, window_right, sinks, seq_len_q,
                         seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    b, h_q, h_k, h_v, s_q, s_kv, d_qk, d_v, thd = dims
    padded = seq_len_q is not None
    o, stats = _fwd_outputs(q, dims, return_lse)
    given = (q, k, v)
    q, k, v = _dense_last(q), _dense_last(k), _dense_last(v)
    io = rt.CUDNN_DTYPE[q.dtype]
    key: tuple = ("sdpa_fwd", q.dtype, b, h_q, h_k, h_v, s_q, s_kv, d_qk, d_v, q.stride(), k.stride(), v.stride(),
                  o.stride(), float(attn_scale), is_causal, causal_bottom_right, window_left, window_right,
                  sinks is not None, padded, thd, return_lse)
    if call is not None and all(a is b for a, b in zip(given, (q, k, v))):  # bound as given: found by `call`
        key = call
    if thd:
        strides = [_thd_strides(q, s_q), _thd_strides(k, s_kv), _thd_strides(v, s_kv), _thd_strides(o, s_q)]
    else:
        strides = [list(q.stride()), list(k.stride()), list(v.stride()), list(o.stride())]

    def make(g: pygraph) -> dict[str, Tensor]:
        ports = {"q": g.tensor(name="q", dim=[b, h_q, s_q, d_qk], stride=strides[0], data_type=io),
                 "k": g.tensor(name="k", dim=[b, h_k, s_kv, d_qk], stride=strides[1], data_type=io),
                 "v": g.tensor(name="v", dim=[b, h_v, s_kv, d_v], stride=strides[2], data_type=io)}
        if sinks is not None:
            ports["sinks"] = g.tensor(name="sinks", dim=[1, h_q, 1, 1], stride=[h_q, 1, 1, 1],
                                      data_type=data_type.FLOAT)
        if padded or thd:
            ports["seq_len_q"] = _index(g, "seq_len_q", b, data_type.INT32)
            ports["seq_len_kv"] = _index(g, "seq_len_kv", b, data_type.INT32)
        if thd:
            for name in ("ragged_q", "ragged_k", "ragged_v", "ragged_o") + (("ragged_stats",) if return_lse else ()):
                ports[name] = _index(g, name, b + 1, data_type.INT64)
            for name in ("q", "k", "v"):
                ports[name].set_ragged_offset(ports[f"ragged_{name}"])
        out, S = g.sdpa(ports["q"], ports["k"], ports["v"], generate_stats=return_lse, attn_scale=float(attn_scale),
                      use_padding_mask=padded or thd, seq_len_q=ports.get("seq_len_q"),
                      seq_len_kv=ports.get("seq_len_kv"), sink_token=ports.get("sinks"), name="sdpa_fwd",
                      **_band(is_causal, causal_bottom_right, window_left, window_right))
        ports["o"] = out.set_output(True).set_dim([b, h_q, s_q, d_v]).set_stride(strides[3]).set_data_type(io)
        if thd:
            out.set_ragged_offset(ports["ragged_o"])
        if return_lse:
            st = [h_q * s_q, 1, h_q, 1] if thd else [h_q * s_q, s_q, 1, 1]
            ports["stats"] = S.set_output(True).set_dim([b, h_q, s_q, 1]).set_stride(st) \
                .set_data_type(data_type.FLOAT)
            if thd:
                S.set_ragged_offset(ports["ragged_stats"])
        return ports

    dev = rt.device_index(q)
    built = _graph(dev, key, make)
    if key is call:
        built.info = (o.shape, o.stride(), stats.shape if return_lse else None)
    buffers: dict[str, torch.Tensor] = {"q": q, "k": k, "v": v, "o": o}
    if return_lse:
        buffers["stats"] = stats
    if sinks is not None:
        buffers["sinks"] = _column(sinks, torch.float32, (1, h_q, 1, 1))
    if thd:
        assert cu_seqlens_q is not None and cu_seqlens_kv is not None
        len_q, len_kv, cu_q, cu_kv = _varlen_meta(cu_seqlens_q, cu_seqlens_kv)
        ragged = {"ragged_q": (cu_q, q.stride(0)), "ragged_k": (cu_kv, k.stride(0)), "ragged_v": (cu_kv, v.stride(0)),
                  "ragged_o": (cu_q, o.stride(0))}
        if return_lse:
            ragged["ragged_stats"] = (cu_q, h_q)
        buffers.update(seq_len_q=len_q, seq_len_kv=len_kv, **_ragged(ragged))
    elif padded:
        assert seq_len_q is not None and seq_len_kv is not None
        buffers["seq_len_q"] = _column(seq_len_q, torch.int32, (b, 1, 1, 1))
        buffers["seq_len_kv"] = _column(seq_len_kv, torch.int32, (b, 1, 1, 1))
    rt.run(built, dev, tuple(buffers[r].data_ptr() for r in built.ports))
    return o, stats


def _fwd_outputs(q: torch.Tensor, dims: CallShape, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """O and the log-sum-exp as the kernel returns them (uninitialized; the fake kernel's too)."""
    if dims.thd:
        o = q.new_empty((q.shape[0], dims.h_q, dims.d_v))
        stats = q.new_empty((q.shape[0], dims.h_q, 1), dtype=torch.float32)
    else:
        shape = (dims.b, dims.h_q, dims.s_q, dims.d_v)
        o = q.new_empty_strided(shape, like_strides(shape, q))
        stats = q.new_empty((dims.b, dims.h_q, dims.s_q, 1), dtype=torch.float32)
    return o, stats if return_lse else q.new_empty(0, dtype=torch.float32)


def _bwd_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 thd: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if thd:
        return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)
    dq, dk, dv = (q.new_empty_strided(t.shape, like_strides(tuple(t.shape), t)) for t in (q, k, v))
    return dq, dk, dv


def backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, attn_scale: float, is_causal: bool = False, causal_bottom_right: bool = False,
             window_left: int = -1, window_right: int = -1, sinks: torch.Tensor | None = None,
             cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_kv: torch.Tensor | None = None,
             max_seqlen_q: int = 0, max_seqlen_kv: int = 0,
             is_deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CUDA kernel of ``cudnn::sdpa_bwd`` (callable directly, below torch's dispatcher)."""
    call = None
    if sinks is None and cu_seqlens_q is None and cu_seqlens_kv is None:
        call = _bwd_key(grad_out, q, k, v, o, lse, attn_scale, is_causal, causal_bottom_right, window_left,
                        window_right, is_deterministic)
        done = _bwd_cached(call, q, k, v, o, grad_out, lse)
        if done is not None:
            return done
    dims = check_backward(grad_out, q, k, v, o, lse, is_causal, causal_bottom_right, window_left, window_right, sinks,
                          cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    b, h_q, h_k, h_v, s_q, s_kv, d_qk, d_v, thd = dims
    dq, dk, dv = _bwd_outputs(q, k, v, thd)
    given = (q, k, v, o, grad_out, lse)
    q, k, v, o = _dense_last(q), _dense_last(k), _dense_last(v), _dense_last(o)
    if grad_out.stride() != o.stride() or grad_out.data_ptr() % 16:
        grad_out = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device).copy_(grad_out)
    if not lse.is_contiguous() or lse.data_ptr() % 16:
        lse = lse.clone(memory_format=torch.contiguous_format)
    io = rt.CUDNN_DTYPE[q.dtype]
    totals = (-(-q.shape[0] // 64) * 64, -(-k.shape[0] // 64) * 64) if thd else (0, 0)
    key: tuple = ("sdpa_bwd", q.dtype, b, h_q, h_k, h_v, s_q, s_kv, d_qk, d_v, q.stride(), k.stride(), v.stride(),
                  o.stride(), dq.stride(), dk.stride(), dv.stride(), totals, float(attn_scale), is_causal,
                  causal_bottom_right, window_left, window_right, sinks is not None, is_deterministic, thd)
    if call is not None and all(a is b for a, b in zip(given, (q, k, v, o, grad_out, lse))):  # bound as given
        key = call
    named = {"q": (q, s_q, [b, h_q, s_q, d_qk]), "k": (k, s_kv, [b, h_k, s_kv, d_qk]),
             "v": (v, s_kv, [b, h_v, s_kv, d_v]), "o": (o, s_q, [b, h_q, s_q, d_v]),
             "do": (grad_out, s_q, [b, h_q, s_q, d_v]), "dq": (dq, s_q, [b, h_q, s_q, d_qk]),
             "dk": (dk, s_kv, [b, h_k, s_kv, d_qk]), "dv": (dv, s_kv, [b, h_v, s_kv, d_v])}
    strides = {n: (_thd_strides(t, s) if thd else list(t.stride())) for n, (t, s, _) in named.items()}

    def make(g: pygraph) -> dict[str, Tensor]:
        ports = {n: g.tensor(name=n, dim=named[n][2], stride=strides[n], data_type=io)
                 for n in ("q", "k", "v", "o", "do")}
        ports["stats"] = g.tensor(name="stats", dim=[b, h_q, s_q, 1], stride=[h_q * s_q, s_q, 1, 1],
                                  data_type=data_type.FLOAT)
        if sinks is not None:
            ports["sinks"] = g.tensor(name="sinks", dim=[1, h_q, 1, 1], stride=[h_q, 1, 1, 1],
                                      data_type=data_type.FLOAT)
        extra: dict[str, Any] = {}
        if thd:
            ports["seq_len_q"] = _index(g, "seq_len_q", b, data_type.INT32)
            ports["seq_len_kv"] = _index(g, "seq_len_kv", b, data_type.INT32)
            for n in ("q", "k", "v", "o", "do", "dq", "dk", "dv"):
                ports[f"ragged_{n}"] = _index(g, f"ragged_{n}", b + 1, data_type.INT64)
            for n in ("q", "k", "v", "o", "do"):
                ports[n].set_ragged_offset(ports[f"ragged_{n}"])
            extra = {"use_padding_mask": True, "seq_len_q": ports["seq_len_q"], "seq_len_kv": ports["seq_len_kv"],
                     "max_total_seq_len_q": totals[0], "max_total_seq_len_kv": totals[1]}
        DQ, DK, DV = g.sdpa_backward(ports["q"], ports["k"], ports["v"], ports["o"], ports["do"], ports["stats"],
                                     attn_scale=float(attn_scale), sink_token=ports.get("sinks"),
                                     use_deterministic_algorithm=is_deterministic, name="sdpa_bwd",
                                     **_band(is_causal, causal_bottom_right, window_left, window_right), **extra)
        for n, T in (("dq", DQ), ("dk", DK), ("dv", DV)):
            ports[n] = T.set_output(True).set_dim(named[n][2]).set_stride(strides[n]).set_data_type(io)
            if thd:
                T.set_ragged_offset(ports[f"ragged_{n}"])
        return ports

    dev = rt.device_index(q)
    built = _graph(dev, key, make)
    if key is call:
        built.info = tuple((t.shape, t.stride()) for t in (dq, dk, dv))
    buffers = {"q": q, "k": k, "v": v, "o": o, "do": grad_out, "stats": lse, "dq": dq, "dk": dk, "dv": dv}
    if sinks is not None:
        buffers["sinks"] = _column(sinks, torch.float32, (1, h_q, 1, 1))
    if thd:
        assert cu_seqlens_q is not None and cu_seqlens_kv is not None
        len_q, len_kv, cu_q, cu_kv = _varlen_meta(cu_seqlens_q, cu_seqlens_kv)
        buffers.update(seq_len_q=len_q, seq_len_kv=len_kv)
        buffers.update(_ragged({f"ragged_{n}": (cu_q if n in ("q", "o", "do", "dq") else cu_kv, t.stride(0))
                                for n, (t, _, _) in named.items()}))
    rt.run(built, dev, tuple(buffers[r].data_ptr() for r in built.ports))
    return dq, dk, dv


def plan_names() -> list[str]:
    """The plan serving each graph these ops built (most recent last)."""
    return list(_PLANS.values())


# -- the registered ops --------------------------------------------------------------------------

_lib = torch.library.Library("cudnn", "FRAGMENT")
_lib.define(FWD_SCHEMA)
_lib.define(BWD_SCHEMA)
_lib.impl("sdpa_fwd", forward, "CUDA")
_lib.impl("sdpa_bwd", backward, "CUDA")


@torch.library.register_fake("cudnn::sdpa_fwd")
def _fwd_fake(q, k, v, attn_scale, is_causal=False, causal_bottom_right=False,  # type: ignore[no-untyped-def]
              window_left=-1, window_right=-1, sinks=None, seq_len_q=None, seq_len_kv=None, cu_seqlens_q=None,
              cu_seqlens_kv=None, max_seqlen_q=0, max_seqlen_kv=0, return_lse=True):
    dims = check_forward(q, k, v, is_causal, causal_bottom_right, window_left, window_right, sinks, seq_len_q,
                         seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    return _fwd_outputs(q, dims, return_lse)


@torch.library.register_fake("cudnn::sdpa_bwd")
def _bwd_fake(grad_out, q, k, v, o, lse, attn_scale, is_causal=False,  # type: ignore[no-untyped-def]
              causal_bottom_right=False, window_left=-1, window_right=-1, sinks=None, cu_seqlens_q=None,
              cu_seqlens_kv=None, max_seqlen_q=0, max_seqlen_kv=0, is_deterministic=False):
    check_backward(grad_out, q, k, v, o, lse, is_causal, causal_bottom_right, window_left, window_right, sinks,
                   cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    return _bwd_outputs(q, k, v, cu_seqlens_q is not None)


def _setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    (q, k, v, attn_scale, is_causal, bottom_right, window_left, window_right, sinks, seq_len_q, _,
     cu_q, cu_kv, max_q, max_kv, return_lse) = inputs
    o, stats = output
    ctx.attn = (attn_scale, is_causal, bottom_right, window_left, window_right, max_q, max_kv, return_lse,
                seq_len_q is not None, sinks is not None and sinks.requires_grad)
    ctx.save_for_backward(q, k, v, o, stats, sinks, cu_q, cu_kv)
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(stats)


def _backward(ctx, grad_o, _grad_lse):  # type: ignore[no-untyped-def]
    q, k, v, o, stats, sinks, cu_q, cu_kv = ctx.saved_tensors
    scale, is_causal, bottom_right, window_left, window_right, max_q, max_kv, return_lse, padded, dsinks = ctx.attn
    if grad_o is None:
        return (None,) * 16
    if not return_lse:
        raise RuntimeError("cudnn::sdpa_fwd: the backward reads the forward's log-sum-exp; call it with "
                           "return_lse=True to differentiate it")
    if padded:
        raise NotImplementedError("cudnn::sdpa_fwd: no backward for a padded dense batch (seq_len_q/seq_len_kv); "
                                  "use the packed (THD) path with cu_seqlens for training")
    if dsinks:
        raise NotImplementedError("cudnn::sdpa_fwd: sinks requires grad, but cudnn::sdpa_bwd does not return "
                                  "dsinks; detach the sinks")
    lse = stats if cu_q is None else thd_lse_to_padded(stats, cu_q, max_q)
    dq, dk, dv = torch.ops.cudnn.sdpa_bwd(grad_o, q, k, v, o, lse, scale, is_causal, bottom_right, window_left,
                                          window_right, sinks, cu_q, cu_kv, max_q, max_kv,
                                          torch.are_deterministic_algorithms_enabled())
    return (dq, dk, dv) + (None,) * 13


torch.library.register_autograd("cudnn::sdpa_fwd", _backward, setup_context=_setup)


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, scale: float | None = None,
         is_causal: bool = False, causal_bottom_right: bool = False, window_left: int = -1, window_right: int = -1,
         sinks: torch.Tensor | None = None, seq_len_q: torch.Tensor | None = None,
         seq_len_kv: torch.Tensor | None = None, cu_seqlens_q: torch.Tensor | None = None,
         cu_seqlens_kv: torch.Tensor | None = None, max_seqlen_q: int = 0, max_seqlen_kv: int = 0,
         return_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention through ``cudnn::sdpa_fwd`` (``scale`` defaults to 1/sqrt(D_qk)); returns O, or
    (O, log-sum-exp) with ``return_lse``. Differentiable: where a gradient is wanted the
    log-sum-exp is computed for the backward whether or not it is returned."""
    attn_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (query, key, value))
    o, lse = torch.ops.cudnn.sdpa_fwd(query, key, value, attn_scale, is_causal, causal_bottom_right, window_left,
                                      window_right, sinks, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv,
                                      max_seqlen_q, max_seqlen_kv, bool(return_lse) or grad)
    return (o, lse) if return_lse else o
