"""``cudnn.ops.scaled_dot_product_attention``: torch's SDPA semantics (BHSD) over cuDNN's
``sdpa`` / ``sdpa_backward`` graphs.

Covered: fp16 / bf16 Q, K, V of shape [B, H, S, D] (any strides with a unit head-dim stride;
[B, S, D] and [..., B, H, S, D] as views of that shape), ``is_causal`` (torch's top-left
causal mask), ``scale``, ``enable_gqa`` (H_q a multiple of H_kv), and ``attn_mask`` as an
additive float mask or a boolean keep-mask broadcastable to [B, H, S_q, S_kv] (a boolean mask
becomes a 0 / -inf bias; a float mask that requires grad gets its gradient, cuDNN's dBias
reduced to the mask's shape), and ``dropout_p`` (cuDNN's Philox dropout: each call draws its
seed and offset from torch's CUDA generator, so ``torch.manual_seed`` repeats a call's mask, a
CUDA graph replay draws a new one, and the backward reuses the forward's). Not covered, and
refused naming the argument: other dtypes, fewer than 3 dimensions.
O is laid out BSHD (as torch's flash kernels return it); Stats (log-sum-exp, float32) is kept
for the backward.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from . import _runtime as rt
from .sdpa_official import like_strides

if TYPE_CHECKING:
    from .._graph.pygraph import pygraph

_OP = "scaled_dot_product_attention"
_SEEDS = 1 << 62  # Philox seeds and offsets are drawn below this


def _dropout_p(p: object) -> float:
    """``dropout_p`` as a float in [0, 1), or an OpError naming it."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise rt.OpError(f"cudnn.ops.{_OP}: dropout_p: expected a float in [0, 1), got {p!r}")
    return float(p)


def _rng(q: torch.Tensor) -> torch.Tensor:
    """One call's Philox seed and offset (int64 [2] on the query's device), drawn from torch's
    CUDA generator: seeded by torch.manual_seed, and drawn anew on every CUDA graph replay."""
    return torch.randint(_SEEDS, (2,), dtype=torch.int64, device=q.device)


def _check_rng(rng: torch.Tensor | None, q: torch.Tensor) -> None:
    """With dropout, the registered ops' ``rng`` must be a seed and offset as `_rng` draws them
    (the eager path draws its own, so only the registered ops check)."""
    if not isinstance(rng, torch.Tensor) or rng.dtype != torch.int64 or tuple(rng.shape) != (2,) \
            or not rng.is_contiguous() or rng.device != q.device:
        got = f"{tuple(rng.shape)} {rng.dtype} on {rng.device}" if isinstance(rng, torch.Tensor) else repr(rng)
        raise rt.OpError(f"cudnn.ops.{_OP}: rng: with dropout_p > 0, expected the Philox seed and offset as a "
                         f"contiguous int64 tensor of shape (2,) on {q.device}, got {got}")


def _rng_ports(g: pygraph) -> dict:
    """The graph's seed and offset tensors: [1, 1, 1, 1] int64 each, the halves of `_rng`'s."""
    return {name: g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=rt.data_type.INT64)
            for name in ("seed", "offset")}


def _o_like(q: torch.Tensor, dv: int, like_q: bool = False) -> torch.Tensor:
    """O [B, H, S_q, D_v] over BSHD memory, or with ``like_q`` in Q's layout as torch's cuDNN
    attention lays it out (`sdpa_official.like_strides`)."""
    b, h, s, _ = q.shape
    if like_q:
        shape = (b, h, s, dv)
        return q.new_empty_strided(shape, like_strides(shape, q))
    return q.new_empty(b, s, h, dv).transpose(1, 2)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, enable_gqa: bool) -> None:
    rt.check_tensor(_OP, "query", q, rt.HALVES, rank=4)
    rt.check_cuda(_OP, "query", q)
    rt.check_tensor(_OP, "key", k, (q.dtype,), rank=4, device=q.device)
    rt.check_tensor(_OP, "value", v, (q.dtype,), rank=4, device=q.device)
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] \
            or v.shape[2] != k.shape[2] or v.shape[1] != k.shape[1]:
        raise rt.OpError(f"cudnn.ops.{_OP}: key/value: shapes {tuple(k.shape)} / {tuple(v.shape)} do not fit "
                         f"query {tuple(q.shape)} (expected [B, H_kv, S_kv, D] and [B, H_kv, S_kv, D_v])")
    if k.shape[1] != q.shape[1]:
        if not enable_gqa:
            raise rt.OpError(f"cudnn.ops.{_OP}: enable_gqa: query has {q.shape[1]} heads and key {k.shape[1]}; "
                             "pass enable_gqa=True for grouped-query attention")
        if q.shape[1] % k.shape[1]:
            raise rt.OpError(f"cudnn.ops.{_OP}: key: {k.shape[1]} heads do not divide the query's {q.shape[1]}")
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.stride(3) != 1:
            raise rt.OpError(f"cudnn.ops.{_OP}: {name}: the head dimension must have stride 1, got strides "
                             f"{t.stride()}")
    if mask is not None:
        rt.check_tensor(_OP, "attn_mask", mask, (torch.bool, q.dtype), device=q.device)
        if mask.dim() > 4:
            raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: expected at most 4 dimensions, got {tuple(mask.shape)}")


def _bias(mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """The mask as an additive [B|1, H|1, S_q, S_kv] bias in Q's dtype."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    try:
        if m.shape[0] not in (1, q.shape[0]) or m.shape[1] not in (1, q.shape[1]):
            raise RuntimeError
        return m.expand(m.shape[0], m.shape[1], q.shape[2], k.shape[2])
    except RuntimeError:
        raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: shape {tuple(mask.shape)} does not broadcast to "
                         f"[B, H, {q.shape[2]}, {k.shape[2]}]") from None


def _run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, is_causal: bool,
         scale: float, training: bool, enable_gqa: bool = True, dropout_p: float = 0.0,
         rng: torch.Tensor | None = None, o_like_q: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, rt.Built]:
    """O (BSHD memory, or Q's layout with ``o_like_q``), in training Stats [B, H, S_q, 1]
    float32, and the graph; with ``dropout_p``, ``rng`` holds the Philox seed and offset
    (`_rng`). Arguments are checked when their key is first built; a hit only allocates and
    runs."""
    key = _key(q, k, v, bias, is_causal, scale, training, enable_gqa, dropout_p, o_like_q)
    dev = q.get_device()
    built = rt.CACHE.lookup(dev, key)
    if built is None:
        built = _build(dev, key, q, k, v, bias, is_causal, scale, training, enable_gqa, dropout_p, o_like_q)
    o, stats = _launch(built, dev, q, k, v, bias, training, dropout_p, rng)
    return o, stats, built


def _key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, is_causal: bool,
         scale: float, training: bool, enable_gqa: bool, dropout_p: float, o_like_q: bool) -> tuple:
    """The forward graph's cache key: what the arguments say of it."""
    return ("sdpa", q.shape, q.stride(), q.dtype, rt.sig(k), rt.sig(v), rt.sig(bias), is_causal, scale, training,
            enable_gqa, dropout_p, o_like_q)


def _launch(built: rt.Built, dev: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            bias: torch.Tensor | None, training: bool, dropout_p: float,
            rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the forward graph ``built`` (made by `_build` for these arguments' key): O and, in
    ``training``, Stats."""
    size, strides = built.info
    o = q.new_empty_strided(size, strides)
    # roles bound in _build's order: q, k, v, [bias], [seed, offset], o, [stats]
    head = (q.data_ptr(), k.data_ptr(), v.data_ptr()) if bias is None \
        else (q.data_ptr(), k.data_ptr(), v.data_ptr(), bias.data_ptr())
    if dropout_p:
        head = (*head, rng.data_ptr(), rng.data_ptr() + 8)  # type: ignore[union-attr]
    if not training:
        rt.run(built, dev, (*head, o.data_ptr()))
        return o, None
    stats = q.new_empty((q.shape[0], q.shape[1], q.shape[2], 1), dtype=torch.float32)
    rt.run(built, dev, (*head, o.data_ptr(), stats.data_ptr()))
    return o, stats


def _build(dev: int, key: tuple, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
           is_causal: bool, scale: float, training: bool, enable_gqa: bool, dropout_p: float,
           o_like_q: bool = False) -> rt.Built:
    """Check the arguments, then build and cache the attention graph for ``key``."""
    _check(q, k, v, None, enable_gqa)
    if bias is not None:
        rt.check_tensor(_OP, "attn_mask", bias, (q.dtype,), rank=4, device=q.device)
    o = _o_like(q, v.shape[3], o_like_q)

    def make(g: pygraph) -> dict:
        Q, K, V = rt.tensor_of(g, "q", q), rt.tensor_of(g, "k", k), rt.tensor_of(g, "v", v)
        ports = {"q": Q, "k": K, "v": V}
        if bias is not None:
            ports["bias"] = rt.tensor_of(g, "bias", bias)
        if dropout_p:
            ports.update(_rng_ports(g))
        Out, S = g.sdpa(Q, K, V, generate_stats=training, attn_scale=scale, bias=ports.get("bias"),
                        use_causal_mask=is_causal,
                        dropout=(dropout_p, ports["seed"], ports["offset"]) if dropout_p else None)
        ports["o"] = Out.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
        if training:
            ports["stats"] = S.set_output(True).set_data_type(rt.data_type.FLOAT)
        return ports

    built = rt.CACHE.build(dev, key, make)
    built.bind(*(r for r in ("q", "k", "v", "bias", "seed", "offset", "o", "stats") if r in built.ports))
    built.info = (tuple(o.shape), o.stride())
    return built


@torch.library.custom_op("cudnn::sdpa", mutates_args=())
def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, is_causal: bool,
         scale: float, training: bool, dropout_p: float = 0.0,
         rng: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if dropout_p:
        _check_rng(rng, q)
    o, stats, _ = _run(q, k, v, bias, is_causal, scale, training, True, dropout_p, rng)
    return o, (q.new_empty(0, dtype=torch.float32) if stats is None else stats)


@_fwd.register_fake
def _(q, k, v, bias, is_causal, scale, training, dropout_p=0.0, rng=None):  # type: ignore[no-untyped-def]
    _check(q, k, v, None, True)
    stats = q.new_empty(q.shape[0], q.shape[1], q.shape[2], 1, dtype=torch.float32) if training \
        else q.new_empty(0, dtype=torch.float32)
    return _o_like(q, v.shape[3]), stats


Grads = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]  # dQ, dK, dV, dBias


def _run_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             stats: torch.Tensor, bias: torch.Tensor | None, is_causal: bool, scale: float, dropout_p: float = 0.0,
             rng: torch.Tensor | None = None, forward: rt.Built | None = None, bias_grad: bool = False) -> Grads:
    """dQ, dK, dV (the layouts of Q, K, V) from cuDNN's attention backward graph, and with
    ``bias_grad`` dBias (``bias``'s shape, packed; else None); with ``dropout_p``, the forward's
    mask again from its seed and offset (``rng``). ``forward``: the graph that made O and
    Stats, where the backward graph is kept once found, by the layouts and type of what it reads
    (the eager path; their shapes follow from the forward's key, and saved-tensor hooks may give
    the saved tensors back in other layouts)."""
    if do.stride() != o.stride():
        do = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device).copy_(do)  # in O's layout
    dev = q.get_device()
    memo = None if forward is None else (do.stride(), do.dtype, q.dtype, q.stride(), k.stride(), v.stride(),
                                         o.stride(), stats.stride(), None if bias is None else bias.stride(),
                                         bias_grad)
    built = None if forward is None else forward.derived.get(memo)
    if built is None:
        key = _bwd_key(do, q, k, v, o, stats, bias, is_causal, scale, dropout_p, bias_grad)
        built = rt.CACHE.lookup(dev, key)
        if built is None:
            built = _build_bwd(dev, key, do, q, k, v, o, stats, bias, is_causal, scale, dropout_p, bias_grad)
        if forward is not None:
            forward.derived[memo] = built
    return _launch_bwd(built, dev, do, q, k, v, o, stats, bias, dropout_p, rng, bias_grad)


def _bwd_key(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             stats: torch.Tensor, bias: torch.Tensor | None, is_causal: bool, scale: float, dropout_p: float,
             bias_grad: bool = False) -> tuple:
    """The backward graph's cache key (dQ, dK, dV take the layouts of Q, K, V: ``empty_like``)."""
    return ("sdpa_backward", q.shape, q.stride(), q.dtype, rt.sig(k), rt.sig(v), rt.sig(o), rt.sig(do),
            rt.sig(stats), rt.sig(bias), is_causal, scale, dropout_p, bias_grad)


def _launch_bwd(built: rt.Built, dev: int, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                o: torch.Tensor, stats: torch.Tensor, bias: torch.Tensor | None, dropout_p: float,
                rng: torch.Tensor | None, bias_grad: bool = False) -> Grads:
    """Run the backward graph ``built`` (`_build_bwd`'s, for these arguments' key): dQ, dK, dV
    and dBias (None without ``bias_grad``)."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # roles bound in _build_bwd's order: q, k, v, o, do, stats, dq, dk, dv, [bias], [seed, offset], [dbias]
    ptrs: tuple[int, ...] = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(), stats.data_ptr(),
                             dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    if bias is not None:
        ptrs = (*ptrs, bias.data_ptr())
    if dropout_p:
        ptrs = (*ptrs, rng.data_ptr(), rng.data_ptr() + 8)  # type: ignore[union-attr]
    db = None
    if bias_grad:
        db = q.new_empty(bias.shape)  # type: ignore[union-attr]
        ptrs = (*ptrs, db.data_ptr())
    rt.run(built, dev, ptrs)
    return dq, dk, dv, db


def _build_bwd(dev: int, key: tuple, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               o: torch.Tensor, stats: torch.Tensor, bias: torch.Tensor | None, is_causal: bool, scale: float,
               dropout_p: float, bias_grad: bool = False) -> rt.Built:
    """Build and cache the attention backward graph for ``key`` (its inputs come from the forward;
    dQ, dK, dV are laid out as ``empty_like`` lays out Q, K, V, dBias packed in ``bias``'s shape)."""
    dq, dk, dv = (torch.empty_like(t, device="meta") for t in (q, k, v))

    def make(g: pygraph) -> dict:
        ports = {n: rt.tensor_of(g, n, t) for n, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do),
                                                         ("stats", stats))}
        if bias is not None:
            ports["bias"] = rt.tensor_of(g, "bias", bias)
        if dropout_p:
            ports.update(_rng_ports(g))
        if bias_grad:
            assert bias is not None
            packed = list(torch.empty(bias.shape, device="meta").stride())
            ports["dbias"] = rt.tensor_of(g, "dbias", bias, stride=packed)
        DQ, DK, DV = g.sdpa_backward(ports["q"], ports["k"], ports["v"], ports["o"], ports["do"], ports["stats"],
                                     attn_scale=scale, bias=ports.get("bias"), dBias=ports.get("dbias"),
                                     use_causal_mask=is_causal,
                                     dropout=(dropout_p, ports["seed"], ports["offset"]) if dropout_p else None)
        for name, T, t in (("dq", DQ, dq), ("dk", DK, dk), ("dv", DV, dv)):
            ports[name] = T.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
        if bias_grad:
            ports["dbias"].set_output(True)
        return ports

    roles = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv") + (() if bias is None else ("bias",)) \
        + (("seed", "offset") if dropout_p else ()) + (("dbias",) if bias_grad else ())
    return rt.CACHE.build(dev, key, make).bind(*roles)


@torch.library.custom_op("cudnn::sdpa_backward", mutates_args=())
def _bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, stats: torch.Tensor,
         bias: torch.Tensor | None, is_causal: bool, scale: float, dropout_p: float = 0.0,
         rng: torch.Tensor | None = None,
         bias_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV and, with ``bias_grad``, dBias (``bias``'s shape; else an empty tensor)."""
    if dropout_p:
        _check_rng(rng, q)
    _check_bias_grad(bias, bias_grad)
    dq, dk, dv, db = _run_bwd(do, q, k, v, o, stats, bias, is_causal, scale, dropout_p, rng, bias_grad=bias_grad)
    return dq, dk, dv, (q.new_empty(0) if db is None else db)


@_bwd.register_fake
def _(do, q, k, v, o, stats, bias, is_causal, scale, dropout_p=0.0, rng=None,  # type: ignore[no-untyped-def]
      bias_grad=False):
    _check_bias_grad(bias, bias_grad)
    db = q.new_empty(bias.shape) if bias_grad else q.new_empty(0)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), db


def _check_bias_grad(bias: torch.Tensor | None, bias_grad: bool) -> None:
    if bias_grad and bias is None:
        raise rt.OpError(f"cudnn.ops.{_OP}: bias_grad: dBias was asked for a call without attn_mask")


def _setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    q, k, v, bias, is_causal, scale, training, dropout_p, rng = inputs
    o, stats = output
    ctx.attn = (is_causal, scale, training, dropout_p)
    ctx.save_for_backward(q, k, v, o, stats, bias, rng)


def _backward(ctx, do, _dstats):  # type: ignore[no-untyped-def]
    q, k, v, o, stats, bias, rng = ctx.saved_tensors
    is_causal, scale, training, dropout_p = ctx.attn
    if not training:
        raise RuntimeError(f"cudnn.ops.{_OP}: the forward ran without Stats (no input required grad then); "
                           "cannot differentiate it")
    bias_grad = bool(ctx.needs_input_grad[3])
    dq, dk, dv, db = torch.ops.cudnn.sdpa_backward(do, q, k, v, o, stats, bias, is_causal, scale, dropout_p, rng,
                                                   bias_grad)
    return dq, dk, dv, (db if bias_grad else None), None, None, None, None, None


_fwd.register_autograd(_backward, setup_context=_setup)


class _Eager(torch.autograd.Function):
    """The eager path with a gradient wanted (see `_runtime`)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, is_causal, scale, enable_gqa, dropout_p, rng):  # type: ignore[no-untyped-def]
        o, stats, built = _run(q, k, v, bias, is_causal, scale, True, enable_gqa, dropout_p, rng)
        ctx.attn = (is_causal, scale, dropout_p, built)
        ctx.save_for_backward(q, k, v, o, stats, bias, rng)
        return o

    @staticmethod
    def backward(ctx, do):  # type: ignore[no-untyped-def]
        q, k, v, o, stats, bias, rng = ctx.saved_tensors
        is_causal, scale, dropout_p, built = ctx.attn
        dq, dk, dv, db = _run_bwd(do, q, k, v, o, stats, bias, is_causal, scale, dropout_p, rng, built,
                                  bool(ctx.needs_input_grad[3]))
        return dq, dk, dv, db, None, None, None, None, None


# -- the kernels, for callers that keep their own autograd (cudnn.torch's provider) ------------

def mask_bias(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """An attention mask as the additive bias the graphs read, in Q's dtype: a float mask as it
    is (-inf included, as torch takes it), a boolean keep-mask as 0 / the dtype's lowest value
    (a row with every key masked, such as a left-padded query's, then averages the values
    instead of giving NaN). [B|1, H|1, S_q, S_kv], broadcast from fewer dimensions as torch
    allows, with a batch or head dimension that only repeats itself (stride 0) kept at size 1;
    copied only where cuDNN cannot read it as laid out (a repeated row or column, a strided
    last dimension, an unaligned start). A mask already in that form is used as it is."""
    rt.check_tensor(_OP, "attn_mask", mask, (torch.bool, *rt.FLOATS), device=q.device)
    if mask.dim() > 4:
        raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: expected at most 4 dimensions, got {tuple(mask.shape)}")
    m = mask if mask.dim() == 4 else mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    b, h, s_q, s_kv = m.shape
    if (b > 1 and m.stride(0) == 0) or (h > 1 and m.stride(1) == 0):  # a repeat: size 1
        m = m[:1 if m.stride(0) == 0 else b, :1 if m.stride(1) == 0 else h]
    if m.dtype == torch.bool:
        m = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill_(~m, torch.finfo(q.dtype).min)
    elif m.dtype != q.dtype:
        m = m.to(q.dtype)
    if (s_q, s_kv) != (q.shape[2], k.shape[2]) or m.shape[0] not in (1, q.shape[0]) \
            or m.shape[1] not in (1, q.shape[1]):
        try:
            m = _bias(m, q, k)
        except rt.OpError:
            raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: shape {tuple(mask.shape)} does not broadcast to "
                             f"[B, H, {q.shape[2]}, {k.shape[2]}]") from None
    if m.stride(2) == 0 or m.stride(3) != 1 or m.data_ptr() % 16:
        m = m.contiguous()
    return m


def draw_rng(q: torch.Tensor) -> torch.Tensor:
    """One call's Philox seed and offset for dropout (int64 [2] on Q's device), drawn from
    torch's CUDA generator: ``torch.manual_seed`` repeats it, a CUDA graph replay draws anew."""
    return _rng(q)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
            scale: float, training: bool, dropout_p: float = 0.0,
            rng: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """O in Q's layout (as torch's cuDNN attention returns it) and, in ``training``, Stats
    [B, H, S_q, 1] float32: the attention graph's kernel, no autograd. ``mask``: an attention
    mask as torch takes it, read as the bias `mask_bias` makes of it (a call like an earlier one
    whose mask needed no copy finds its graph by the mask as given, and does no more);
    ``rng`` as `draw_rng` draws it (with ``dropout_p``). Grouped-query K, V (fewer heads than
    Q) are taken as they are."""
    dev = q.get_device()
    built = rt.CACHE.lookup(dev, _key(q, k, v, mask, is_causal, scale, training, True, dropout_p, True))
    if built is not None and (mask is None or not mask.data_ptr() % 16):  # the graph reads ``mask`` as it is
        return _launch(built, dev, q, k, v, mask, training, dropout_p, rng)
    bias = None if mask is None else mask_bias(mask, q, k)
    o, stats, _ = _run(q, k, v, bias, is_causal, scale, training, True, dropout_p, rng, True)
    return o, stats


def backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             stats: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, scale: float, dropout_p: float = 0.0,
             rng: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of `forward` (the same ``mask``, ``dropout_p`` and ``rng``: the forward's
    dropout mask again), in the layouts of Q, K, V."""
    if do.stride() == o.stride():
        dev = q.get_device()
        built = rt.CACHE.lookup(dev, _bwd_key(do, q, k, v, o, stats, mask, is_causal, scale, dropout_p))
        if built is not None and (mask is None or not mask.data_ptr() % 16):
            return _launch_bwd(built, dev, do, q, k, v, o, stats, mask, dropout_p, rng)[:3]
    bias = None if mask is None else mask_bias(mask, q, k)
    return _run_bwd(do, q, k, v, o, stats, bias, is_causal, scale, dropout_p, rng)[:3]


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` through cuDNN's attention graphs
    (see the module's note for what is covered; the rest raises, naming the argument). Inputs
    of 3 dimensions ([B, S, D], one head) or more than 4 (batch dimensions before the heads)
    run as [B, H, S, D] views of themselves, as torch takes them. Under CUDA autocast float32
    inputs run in the autocast dtype."""
    if isinstance(query, torch.Tensor) and query.dim() != 4 and _other_rank(query, key, value):
        return _as_four_dims(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    query, key, value = rt.autocast(query, key, value)
    if attn_mask is not None and attn_mask.dtype == torch.float32 and query.dtype != torch.float32:
        attn_mask = attn_mask.to(query.dtype)
    p = _dropout_p(dropout_p)
    if is_causal and attn_mask is not None:
        raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: give either attn_mask or is_causal=True, not both "
                         "(as torch)")
    fast = rt.eager(query, key, value, attn_mask)
    if not fast or attn_mask is not None or p:  # else the eager path checks Q, K, V when it first builds their key
        _check(query, key, value, attn_mask, enable_gqa)  # (dropout: before its seed is drawn)
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    training = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad
                                            or (attn_mask is not None and attn_mask.requires_grad))
    bias = _bias(attn_mask, query, key)
    rng = _rng(query) if p else None
    if fast:
        if training:
            return _Eager.apply(query, key, value, bias, bool(is_causal), s, bool(enable_gqa), p, rng)
        return _run(query, key, value, bias, bool(is_causal), s, False, bool(enable_gqa), p, rng)[0]
    return torch.ops.cudnn.sdpa(query, key, value, bias, bool(is_causal), s, training, p, rng)[0]


def _other_rank(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Three tensors of one rank, 3 or above 4 (the 4-D case runs as it is; others are refused
    by the 4-D checks, naming the argument)."""
    return all(isinstance(t, torch.Tensor) and t.dim() == query.dim() for t in (key, value)) \
        and (query.dim() == 3 or query.dim() > 4)


def _as_four_dims(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                  dropout_p: float, is_causal: bool, scale: float | None, enable_gqa: bool) -> torch.Tensor:
    """Attention over [..., S, D] tensors of rank 3 or above 4 as [B, H, S, D] views: a 3-D call
    is one head, more than 4 dimensions fold those before the heads into one batch; the mask,
    broadcast against the batch dimensions the same way; O gets the batch dimensions back."""
    rank, lead = query.dim(), query.shape[:-3]
    if rank == 3:
        q, k, v = (t.unsqueeze(1) for t in (query, key, value))
    else:
        if key.shape[:-3] != lead or value.shape[:-3] != lead:
            raise rt.OpError(f"cudnn.ops.{_OP}: key/value: batch dimensions {tuple(key.shape[:-3])} / "
                             f"{tuple(value.shape[:-3])} differ from the query's {tuple(lead)}")
        q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (query, key, value))
    mask = attn_mask
    if mask is not None and mask.dim() > 2:
        given = tuple(mask.shape)
        if mask.dim() > rank:
            raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: expected at most {rank} dimensions (the query's), "
                             f"got shape {given}")
        mask = mask.reshape((1,) * (rank - mask.dim()) + given)
        if rank == 3:
            mask = mask.unsqueeze(1)
        else:
            try:
                mask = mask.expand(*lead, *mask.shape[-3:]).reshape(-1, *mask.shape[-3:])
            except RuntimeError:
                raise rt.OpError(f"cudnn.ops.{_OP}: attn_mask: shape {given} does not broadcast to "
                                 f"the query's batch dimensions {tuple(lead)}") from None
    o = scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa)
    return o.squeeze(1) if rank == 3 else o.reshape(*lead, *o.shape[1:])
