"""``cudnn::sdpa_fwd`` / ``cudnn::sdpa_bwd`` (the official 1.32 ops) on the GPU against a float32
reference written out here (scores, masks, sinks, softmax, autograd for the gradients).

Tolerances: O, the log-sum-exp and dQ/dK/dV atol 2e-2 / rtol 2e-2 (fp16 and bf16), atol scaled
by the reference's largest magnitude where that exceeds 1. Cases: causal (top-left),
bottom-right causal, sliding window, sinks, padded batches (seq_len_q/kv), packed THD with
cu_seqlens, GQA and BSHD views; torch.compile(fullgraph=True) and CUDA-graph capture against
eager.
"""

from __future__ import annotations

import math

import pytest
import torch

import cudnn
from cudnn.ops import sdpa_official as so

DEV = "cuda"
DTYPES = [torch.float16, torch.bfloat16]
IDS = ["fp16", "bf16"]
TOL = 2e-2


def close(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    mag = max(1.0, float(ref.abs().max()))
    assert not torch.isnan(got).any(), f"{name}: NaN"
    torch.testing.assert_close(got.float(), ref.float(), atol=TOL * mag, rtol=TOL, msg=lambda m: f"{name}: {m}")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool = False,
              bottom_right: bool = False, left: int = -1, right: int = -1, sinks: torch.Tensor | None = None,
              len_q: list[int] | None = None, len_kv: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """O and the log-sum-exp [B, H, S_q, 1] in float32 for [B, H, S, D] inputs (GQA expanded).
    Bands as cuDNN's: keep j <= i + off + right (causal: right 0) and j > i + off - left, with
    off = len_kv - len_q when bottom-right; sinks add exp(sink) to each row's denominator."""
    q, k, v = q.float(), k.float(), v.float()
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
    scores = q @ k.transpose(-1, -2) * scale
    lq = torch.tensor(len_q or [s_q] * b, device=q.device).view(b, 1, 1, 1)
    lkv = torch.tensor(len_kv or [s_kv] * b, device=q.device).view(b, 1, 1, 1)
    i = torch.arange(s_q, device=q.device).view(1, 1, s_q, 1)
    j = torch.arange(s_kv, device=q.device).view(1, 1, 1, s_kv)
    off = (lkv - lq) if bottom_right else torch.zeros_like(lq)
    keep = (i < lq) & (j < lkv)
    r = 0 if causal else right
    if r >= 0:
        keep = keep & (j <= i + off + r)
    if left >= 0:
        keep = keep & (j > i + off - left)
    scores = scores.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        sink = sinks.float().view(1, h, 1, 1).expand(b, h, s_q, 1)
        lse = torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1, keepdim=True)
    else:
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    p = torch.exp(scores - lse).nan_to_num(0.0)
    return p @ v, lse


def inputs(dtype: torch.dtype, b: int = 2, h: int = 4, h_kv: int = 2, s_q: int = 128, s_kv: int = 128,
           d: int = 64, layout: str = "bhsd") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)

    def make(heads: int, s: int) -> torch.Tensor:
        if layout == "bshd":
            return torch.randn(b, s, heads, d, device=DEV, dtype=dtype).transpose(1, 2)
        return torch.randn(b, heads, s, d, device=DEV, dtype=dtype)

    return make(h, s_q), make(h_kv, s_kv), make(h_kv, s_kv)


def check_fwd_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **opts: object) -> None:
    """Forward (O, lse) and backward (dQ, dK, dV through autograd) against the reference."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    ref_opts = {"causal": opts.get("is_causal", False), "bottom_right": opts.get("causal_bottom_right", False),
                "left": opts.get("window_left", -1), "right": opts.get("window_right", -1)}
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, lse = torch.ops.cudnn.sdpa_fwd(*leaves, scale, **opts)
    rq, rk, rv = (t.detach().float().requires_grad_() for t in (q, k, v))
    ro, rlse = reference(rq, rk, rv, scale, **ref_opts)  # type: ignore[arg-type]
    close("O", o, ro)
    close("lse", lse, rlse)
    assert o.stride() == so.like_strides(tuple(o.shape), q)
    do = torch.randn_like(o)
    o.backward(do)
    ro.backward(do.float())
    for name, got, want in (("dQ", leaves[0].grad, rq.grad), ("dK", leaves[1].grad, rk.grad),
                            ("dV", leaves[2].grad, rv.grad)):
        close(name, got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_causal_gqa(dtype: torch.dtype, layout: str) -> None:
    check_fwd_bwd(*inputs(dtype, layout=layout), is_causal=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_no_mask_other_value_dim(dtype: torch.dtype) -> None:
    q, k, _ = inputs(dtype, s_q=64, s_kv=96)
    v = torch.randn(2, 2, 96, 128, device=DEV, dtype=dtype)
    check_fwd_bwd(q, k, v)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_bottom_right_causal(dtype: torch.dtype) -> None:
    check_fwd_bwd(*inputs(dtype, s_q=64, s_kv=192), is_causal=True, causal_bottom_right=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_sliding_window(dtype: torch.dtype) -> None:
    check_fwd_bwd(*inputs(dtype, s_q=256, s_kv=256), is_causal=True, window_left=32)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_sinks(dtype: torch.dtype) -> None:
    q, k, v = inputs(dtype)
    sinks = torch.randn(4, device=DEV, dtype=torch.float32)
    scale = 1.0 / math.sqrt(64)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, lse = torch.ops.cudnn.sdpa_fwd(*leaves, scale, True, sinks=sinks)
    rq, rk, rv = (t.detach().float().requires_grad_() for t in (q, k, v))
    ro, rlse = reference(rq, rk, rv, scale, causal=True, sinks=sinks)
    close("O", o, ro)
    close("lse", lse, rlse)
    do = torch.randn_like(o)
    o.backward(do)
    ro.backward(do.float())
    close("dQ", leaves[0].grad, rq.grad)
    close("dK", leaves[1].grad, rk.grad)
    close("dV", leaves[2].grad, rv.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_padded_batch(dtype: torch.dtype) -> None:
    q, k, v = inputs(dtype, b=3, s_q=128, s_kv=160)
    len_q, len_kv = [128, 70, 5], [160, 100, 33]
    scale = 0.1
    o, lse = torch.ops.cudnn.sdpa_fwd(q, k, v, scale, True, True,
                                      seq_len_q=torch.tensor(len_q, device=DEV),
                                      seq_len_kv=torch.tensor(len_kv, device=DEV, dtype=torch.int32))
    ro, rlse = reference(q, k, v, scale, causal=True, bottom_right=True, len_q=len_q, len_kv=len_kv)
    for i, n in enumerate(len_q):  # rows past a sequence's length are not defined
        close(f"O[{i}]", o[i, :, :n], ro[i, :, :n])
        close(f"lse[{i}]", lse[i, :, :n], rlse[i, :, :n])


def packed(dtype: torch.dtype, lens_q: list[int], lens_kv: list[int], h: int = 4, h_kv: int = 2,
           d: int = 64) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    q = torch.randn(sum(lens_q), h, d, device=DEV, dtype=dtype)
    kv = torch.randn(sum(lens_kv), 2, h_kv, d, device=DEV, dtype=dtype)  # k, v views of one packed buffer
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], device=DEV, dtype=torch.int32)
    cu_kv = torch.tensor([0, *torch.tensor(lens_kv).cumsum(0).tolist()], device=DEV, dtype=torch.int32)
    return q, kv[:, 0], kv[:, 1], cu_q, cu_kv


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("causal", [False, True])
def test_thd(dtype: torch.dtype, causal: bool) -> None:
    lens_q, lens_kv = [100, 37, 128], [100, 64, 128] if causal else [80, 64, 200]
    q, k, v, cu_q, cu_kv = packed(dtype, lens_q, lens_kv)
    scale = 1.0 / 8
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, lse = torch.ops.cudnn.sdpa_fwd(*leaves, scale, causal, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                      max_seqlen_q=max(lens_q), max_seqlen_kv=max(lens_kv))
    assert o.shape == q.shape and lse.shape == (q.shape[0], 4, 1)
    do = torch.randn_like(o)
    o.backward(do)
    sq, skv = 0, 0
    for i, (nq, nkv) in enumerate(zip(lens_q, lens_kv)):
        bq = q[sq:sq + nq].transpose(0, 1).unsqueeze(0).float().requires_grad_()
        bk = k[skv:skv + nkv].transpose(0, 1).unsqueeze(0).float().requires_grad_()
        bv = v[skv:skv + nkv].transpose(0, 1).unsqueeze(0).float().requires_grad_()
        ro, rlse = reference(bq, bk, bv, scale, causal=causal)
        close(f"O[{i}]", o[sq:sq + nq], ro[0].transpose(0, 1))
        close(f"lse[{i}]", lse[sq:sq + nq], rlse[0].transpose(0, 1))
        ro.backward(do[sq:sq + nq].transpose(0, 1).unsqueeze(0).float())
        close(f"dQ[{i}]", leaves[0].grad[sq:sq + nq], bq.grad[0].transpose(0, 1))
        close(f"dK[{i}]", leaves[1].grad[skv:skv + nkv], bk.grad[0].transpose(0, 1))
        close(f"dV[{i}]", leaves[2].grad[skv:skv + nkv], bv.grad[0].transpose(0, 1))
        sq, skv = sq + nq, skv + nkv


def test_sdpa_entry_point() -> None:
    q, k, v = inputs(torch.bfloat16)
    o = cudnn.sdpa_torch(q, k, v, is_causal=True)
    o2, lse = cudnn.sdpa_torch(q, k, v, is_causal=True, return_lse=True, scale=1 / 8)
    ro, rlse = reference(q, k, v, 1 / 8, causal=True)
    close("O", o, ro)
    close("O (scale given)", o2, ro)
    close("lse", lse, rlse)


def test_compile_fullgraph_forward_and_backward() -> None:
    torch._dynamo.reset()
    q, k, v = inputs(torch.float16, layout="bshd")

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cudnn.sdpa_torch(q, k, v, is_causal=True, window_left=48) * 1.5

    eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    comp = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want = step(*eager)
    got = torch.compile(step, fullgraph=True)(*comp)
    close("O", got, want)
    want.sum().backward()
    got.sum().backward()
    for a, b in zip(comp, eager):
        close("grad", a.grad, b.grad)


def test_cuda_graph_capture_and_replay() -> None:
    q, k, v = inputs(torch.bfloat16)
    lens = [100, 28, 128]
    tq, tk, tv, cu_q, cu_kv = packed(torch.bfloat16, lens, lens)
    static = [t.clone() for t in (q, k, v, tq, tk, tv)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: builds the graphs outside the capture
        for _ in range(2):
            torch.ops.cudnn.sdpa_fwd(*static[:3], 0.125, True)
            torch.ops.cudnn.sdpa_fwd(*static[3:], 0.125, True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                     max_seqlen_q=128, max_seqlen_kv=128)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = torch.ops.cudnn.sdpa_fwd(*static[:3], 0.125, True)
        dq, dk, dv = torch.ops.cudnn.sdpa_bwd(o, *static[:3], o, lse, 0.125, True)
        to, _ = torch.ops.cudnn.sdpa_fwd(*static[3:], 0.125, True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                         max_seqlen_q=128, max_seqlen_kv=128)
    for trial in range(2):
        fresh = [torch.randn_like(t) for t in static]
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        want_o, want_lse = torch.ops.cudnn.sdpa_fwd(*fresh[:3], 0.125, True)
        close(f"O (replay {trial})", o, want_o)
        want = torch.ops.cudnn.sdpa_bwd(want_o, *fresh[:3], want_o, want_lse, 0.125, True)
        for got, w in zip((dq, dk, dv), want):
            close(f"grad (replay {trial})", got, w)
        want_to, _ = torch.ops.cudnn.sdpa_fwd(*fresh[3:], 0.125, True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                              max_seqlen_q=128, max_seqlen_kv=128)
        close(f"THD O (replay {trial})", to, want_to)


def test_graphs_are_cached_per_shape() -> None:
    from cudnn.ops import CACHE

    q, k, v = inputs(torch.float16, s_q=96, s_kv=96)
    torch.ops.cudnn.sdpa_fwd(q, k, v, 0.2, True)
    builds = CACHE.builds
    torch.ops.cudnn.sdpa_fwd(q + 1, k, v, 0.2, True)
    assert CACHE.builds == builds
    torch.ops.cudnn.sdpa_fwd(q, k, v, 0.3, True)  # another scale: another graph
    assert CACHE.builds == builds + 1
    assert cudnn.torch.served_plan_names()  # the plans serving these graphs, by name


def test_repeated_calls_agree_with_the_reference_and_build_once() -> None:
    """A dense call is found by its arguments' shapes, strides, dtypes and devices after its
    first build: the second and third calls build nothing and still match the reference,
    forward and backward (new outputs each call)."""
    from cudnn.ops import CACHE

    q, k, v = inputs(torch.bfloat16, s_q=80, s_kv=80, layout="bshd")
    scale = 1.0 / math.sqrt(q.shape[-1])
    ro, rlse = reference(q, k, v, scale, causal=True)
    o1, lse1 = so.forward(q, k, v, scale, True)
    do = torch.randn_like(o1)
    g1 = so.backward(do, q, k, v, o1, lse1, scale, True)
    builds = CACHE.builds
    for _ in range(2):
        o, lse = so.forward(q, k, v, scale, True)
        close("O", o, ro)
        close("lse", lse, rlse)
        assert o.data_ptr() != o1.data_ptr() and o.stride() == o1.stride()
        grads = so.backward(do, q, k, v, o, lse, scale, True)
        for name, got, want in zip(("dQ", "dK", "dV"), grads, g1):
            torch.testing.assert_close(got, want, atol=0, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
            assert got.stride() == want.stride()
    assert CACHE.builds == builds
    o, lse = so.forward(q, k, v, scale, True, return_lse=False)  # another output set: another graph
    assert lse.numel() == 0
    close("O without lse", o, ro)


def test_a_misaligned_view_of_a_cached_shape_is_copied_not_bound() -> None:
    """Tensors with the shapes and strides of a cached call but a start that is not 16-byte
    aligned (a view one element into a buffer) are copied before binding, and give the
    reference's result, forward and backward."""
    q, k, v = inputs(torch.float16, b=1, h=2, h_kv=2, s_q=64, s_kv=64)
    scale = 0.125
    so.forward(q, k, v, scale, False)  # caches the aligned call
    base = torch.randn(q.numel() + 1, device=DEV, dtype=q.dtype)
    q_off = base[1:].view(q.shape).copy_(q)
    assert q_off.data_ptr() % 16 and q_off.stride() == q.stride()
    o, lse = so.forward(q_off, k, v, scale, False)
    ro, rlse = reference(q, k, v, scale)
    close("O (misaligned q)", o, ro)
    close("lse (misaligned q)", lse, rlse)
    do = torch.randn_like(o)
    want = so.backward(do, q, k, v, o, lse, scale, False)
    got = so.backward(do, q_off, k, v, o, lse, scale, False)
    for name, a, b in zip(("dQ", "dK", "dV"), got, want):
        close(name, a, b)


def test_a_cached_shape_with_other_dtype_or_device_is_still_checked() -> None:
    """A call that differs from a cached one only in k's dtype is refused with the op's error,
    not run on the cached graph."""
    q, k, v = inputs(torch.float16, s_q=48, s_kv=48)
    so.forward(q, k, v, 0.125, False)
    with pytest.raises(cudnn.ops.OpError, match="k: expected dtype"):
        so.forward(q, k.bfloat16(), v, 0.125, False)
    with pytest.raises(cudnn.ops.OpError, match="q"):
        so.forward(q.cpu(), k, v, 0.125, False)
