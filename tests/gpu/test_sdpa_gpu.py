"""Attention (pygraph.sdpa / sdpa_backward) on the GPU against a float32 PyTorch reference.

Every option runs at least once in fp16 and bf16. Inputs are quantized to the test dtype first;
the reference is an explicit softmax(Q Kᵀ * scale + bias + masks) V in float32 on those values
(backward: autograd through it), so tolerances cover cuDNN's arithmetic and output rounding:
  O               fp16 atol 2e-2 rtol 2e-2 | bf16 atol 6e-2 rtol 5e-2
  dQ, dK, dV      rtol twice O's, atol twice O's times max(1, largest reference gradient magnitude)
  Stats (log-sum-exp, FLOAT)   atol 2e-3 rtol 2e-3
Outputs are filled with NaN first, so an element cuDNN did not write fails. With a padding mask
only valid rows (row < seq_len) are compared. Philox dropout is checked through rng_dump: the
reference applies the mask cuDNN drew. A configuration the backend refuses raises (GraphError or
cudnnGraphNotSupportedError); the tests here must all build (the sweep counts refusals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch

import cudnn
from cudnn.graph import sdpa_ops  # noqa: F401 - registers pygraph.sdpa / sdpa_backward
from cudnn.graph.graph import pygraph
from cudnn.graph.oplib import OPS

for _name, _fn in OPS.items():  # until graph.py imports sdpa_ops itself
    if not hasattr(pygraph, _name):
        setattr(pygraph, _name, _fn)

dt = cudnn.data_type
CUDNN = {torch.float16: dt.HALF, torch.bfloat16: dt.BFLOAT16, torch.float32: dt.FLOAT, torch.int32: dt.INT32,
         torch.int64: dt.INT64, torch.uint8: dt.UINT8}
TOL = {torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 5e-2)}
STATS_TOL = (2e-3, 2e-3)
DTYPES = [torch.float16, torch.bfloat16]
IDS = ["fp16", "bf16"]
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
DEV = "cuda"


@dataclass
class Case:
    """One attention configuration."""

    b: int = 2
    hq: int = 4
    hk: int = 4
    hv: int = 4
    sq: int = 128
    skv: int = 128
    dqk: int = 64
    dv: int = 64
    dtype: torch.dtype = torch.float16
    causal: bool = False
    causal_br: bool = False
    window: int | None = None
    right: int | None = None  # explicit right bound (no causal flag)
    bias: bool = False
    alibi: bool = False
    padding: bool = False
    dropout: str = "none"  # none | philox | mask
    p: float = 0.2
    scale_tensor: bool = False
    layout: str = "bhsd"  # bhsd | bshd
    paged: int = 0  # block size (0: not paged)
    ragged: bool = False
    score_mod: bool = False  # soft-capping through a score_mod callable
    max_sum: bool = False  # score_max / score_sum_exp instead of Stats
    implementation: Any = cudnn.attention_implementation.AUTO
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.dqk)


def cudnn_tensor(g: cudnn.pygraph, t: torch.Tensor, name: str) -> cudnn.tensor:
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=CUDNN[t.dtype])


def make_qkv(c: Case, dims: tuple[int, int, int, int], gen: torch.Generator) -> torch.Tensor:
    b, h, s, d = dims
    x = (torch.randn(b, s, h, d, generator=gen, device=DEV) if c.layout == "bshd"
         else torch.randn(b, h, s, d, generator=gen, device=DEV))
    x = x.to(c.dtype)
    return x.transpose(1, 2) if c.layout == "bshd" else x


def new_graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)


def build(g: cudnn.pygraph) -> None:
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(HEUR)
    g.check_support()
    g.build_plans()


def run(g: cudnn.pygraph, pack: dict[Any, torch.Tensor]) -> None:
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=DEV)
    g.execute(pack, ws)
    torch.cuda.synchronize()


# -- inputs ----------------------------------------------------------------------------------------

@dataclass
class Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor | None = None
    seq_q: torch.Tensor | None = None
    seq_kv: torch.Tensor | None = None
    mask: torch.Tensor | None = None  # user dropout mask (or the rng_dump cuDNN drew)
    scale_t: torch.Tensor | None = None


def inputs(c: Case) -> Inputs:
    gen = torch.Generator(device=DEV).manual_seed(c.seed)
    q = make_qkv(c, (c.b, c.hq, c.sq, c.dqk), gen)
    k = make_qkv(c, (c.b, c.hk, c.skv, c.dqk), gen)
    v = make_qkv(c, (c.b, c.hv, c.skv, c.dv), gen)
    x = Inputs(q, k, v)
    if c.bias:
        x.bias = torch.randn(1, c.hq, c.sq, c.skv, generator=gen, device=DEV).to(c.dtype)
    if c.padding or c.paged or c.ragged:
        x.seq_q = torch.randint(1, c.sq + 1, (c.b, 1, 1, 1), generator=gen, device=DEV, dtype=torch.int32)
        x.seq_kv = torch.randint(1, c.skv + 1, (c.b, 1, 1, 1), generator=gen, device=DEV, dtype=torch.int32)
        if c.causal_br:  # bottom-right needs s_q <= s_kv per batch for a non-empty first row
            x.seq_kv = torch.maximum(x.seq_kv, x.seq_q)
        x.seq_q[0], x.seq_kv[0] = c.sq, c.skv  # one full-length batch
    if c.dropout == "mask":
        x.mask = (torch.rand(c.b, c.hq, c.sq, c.skv, generator=gen, device=DEV) > c.p).to(c.dtype)
    if c.scale_tensor:
        x.scale_t = torch.full((1, 1, 1, 1), c.scale, dtype=torch.float32, device=DEV)
    return x


# -- reference ---------------------------------------------------------------------------------------

def alibi_slopes(h: int) -> torch.Tensor:
    n = 2 ** math.floor(math.log2(h))
    base = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    extra = [2.0 ** (-8.0 * (i + 1) / (2 * n)) for i in range(2 * n)][0::2][: h - n]
    return torch.tensor(base + extra, device=DEV)


def keep_mask(c: Case, x: Inputs) -> torch.Tensor:
    """[b, 1, sq, skv] True where a score is kept."""
    row = torch.arange(c.sq, device=DEV).view(1, 1, -1, 1)
    col = torch.arange(c.skv, device=DEV).view(1, 1, 1, -1)
    keep = torch.ones(c.b, 1, c.sq, c.skv, dtype=torch.bool, device=DEV)
    sq = x.seq_q.view(-1, 1, 1, 1).long() if x.seq_q is not None else torch.full((c.b, 1, 1, 1), c.sq, device=DEV)
    skv = x.seq_kv.view(-1, 1, 1, 1).long() if x.seq_kv is not None else torch.full((c.b, 1, 1, 1), c.skv, device=DEV)
    if c.padding or c.paged or c.ragged:
        keep &= (row < sq) & (col < skv)
    bottom = c.causal_br or c.extra.get("alignment") == cudnn.diagonal_alignment.BOTTOM_RIGHT
    shift = (skv - sq) if bottom else 0
    right = 0 if (c.causal or c.causal_br) else c.right
    if right is not None:
        keep &= col <= row + shift + right
    if c.window is not None:
        keep &= col + c.window > row + shift
    return keep


def reference(c: Case, x: Inputs, drop: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, Stats) in float32 with autograd through q, k, v (already leaf float copies)."""
    q, k, v = (t.float() for t in (x.q, x.k, x.v))
    return reference_f(c, x, q, k, v, drop)


def reference_f(c: Case, x: Inputs, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                drop: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    k = k.repeat_interleave(c.hq // c.hk, dim=1)
    v = v.repeat_interleave(c.hq // c.hv, dim=1)
    s = q @ k.transpose(-1, -2) * c.scale
    if c.score_mod:
        s = torch.tanh(s / 30.0) * 30.0
    if x.bias is not None:
        s = s + x.bias.float()
    if c.alibi:
        row = torch.arange(c.sq, device=DEV).view(-1, 1)
        col = torch.arange(c.skv, device=DEV).view(1, -1)
        s = s + (col - row).float() * alibi_slopes(c.hq).view(1, -1, 1, 1)
    s = s.masked_fill(~keep_mask(c, x), -math.inf)
    stats = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - stats)
    p = torch.nan_to_num(p, nan=0.0)
    if drop is not None:
        p = p * drop.float() / (1.0 - c.p)
    return p @ v, stats


def valid_rows(c: Case, x: Inputs, t: torch.Tensor, seq: torch.Tensor | None) -> torch.Tensor:
    """t [b, h, s, d] with rows beyond each batch's length zeroed (they are not compared)."""
    if seq is None or not (c.padding or c.paged or c.ragged):
        return t
    rows = torch.arange(t.shape[2], device=DEV).view(1, 1, -1, 1)
    return torch.where(rows < seq.view(-1, 1, 1, 1), t, torch.zeros((), dtype=t.dtype, device=DEV))


def rows_with_keys(c: Case, x: Inputs) -> torch.Tensor:
    """[b, 1, sq, 1] rows that keep at least one key (fully masked rows have no defined output)."""
    return keep_mask(c, x).any(dim=-1, keepdim=True)


def assert_close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float,
                 rows: torch.Tensor | None = None) -> None:
    got, want = got.float(), want.float()
    if rows is not None:
        got = torch.where(rows, got, torch.zeros((), device=DEV))
        want = torch.where(rows, want, torch.zeros((), device=DEV))
    assert not torch.isnan(got).any(), f"{name}: NaN in cuDNN's output (an element was not written?)"
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    bad = err > bound
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {bad.numel()} elements off; max abs err "
                           f"{float(err.max()):.4g}, at {tuple(bad.nonzero()[0].tolist())}")


# -- forward -------------------------------------------------------------------------------------------

def paged_container(t: torch.Tensor, block: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """[b, h, s, d] -> container [b * nblk, h, block, d] in a random block order, page table."""
    b, h, s, d = t.shape
    nblk = -(-s // block)
    padded = torch.zeros(b, h, nblk * block, d, dtype=t.dtype, device=DEV)
    padded[:, :, :s] = t
    blocks = padded.view(b, h, nblk, block, d).permute(0, 2, 1, 3, 4).reshape(b * nblk, h, block, d)
    perm = torch.randperm(b * nblk, generator=gen, device=DEV)
    container = torch.empty_like(blocks)
    container[perm] = blocks
    table = perm.view(b, 1, nblk, 1).to(torch.int32).contiguous()
    return container.contiguous(), table


def forward(c: Case, x: Inputs, stats: bool = True) -> dict[str, Any]:
    """Build and run sdpa for ``c``; returns the output tensors (and the graph)."""
    g = new_graph()
    q, k, v = cudnn_tensor(g, x.q, "q"), cudnn_tensor(g, x.k, "k"), cudnn_tensor(g, x.v, "v")
    pack: dict[Any, torch.Tensor] = {q: x.q, k: x.k, v: x.v}
    kw: dict[str, Any] = {}
    if "alignment" in c.extra:
        kw["diagonal_alignment"] = c.extra["alignment"]
    if c.scale_tensor:
        st = cudnn_tensor(g, x.scale_t, "scale")
        pack[st] = x.scale_t
        kw["attn_scale"] = st
    else:
        kw["attn_scale"] = c.scale
    if x.bias is not None:
        bt = cudnn_tensor(g, x.bias, "bias")
        pack[bt] = x.bias
        kw["bias"] = bt
    if c.padding or c.paged or c.ragged:
        sq, skv = cudnn_tensor(g, x.seq_q, "seq_q"), cudnn_tensor(g, x.seq_kv, "seq_kv")
        pack.update({sq: x.seq_q, skv: x.seq_kv})
        kw.update(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
    if c.paged:
        gen = torch.Generator(device=DEV).manual_seed(c.seed + 1)
        kc, kt = paged_container(x.k, c.paged, gen)
        vc, vt = paged_container(x.v, c.paged, gen)
        del pack[k], pack[v]
        k, v = cudnn_tensor(g, kc, "k_cache"), cudnn_tensor(g, vc, "v_cache")
        ktab, vtab = cudnn_tensor(g, kt, "k_table"), cudnn_tensor(g, vt, "v_table")
        pack.update({k: kc, v: vc, ktab: kt, vtab: vt})
        kw.update(paged_attention_k_table=ktab, paged_attention_v_table=vtab,
                  paged_attention_max_seq_len_kv=c.skv)
    outs: dict[str, Any] = {}
    if c.dropout == "philox":
        seed = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64, device=DEV)
        off = torch.full((1, 1, 1, 1), 7, dtype=torch.int64, device=DEV)
        st, ot = cudnn_tensor(g, seed, "seed"), cudnn_tensor(g, off, "offset")
        dump = torch.full((c.b, c.hq, c.sq, c.skv), math.nan, dtype=torch.float32, device=DEV)
        dt_ = cudnn_tensor(g, dump, "rng_dump")
        pack.update({st: seed, ot: off, dt_: dump})
        kw.update(dropout=(c.p, st, ot), rng_dump=dt_)
        outs["rng_dump"] = dump
    elif c.dropout == "mask":
        mt = cudnn_tensor(g, x.mask, "mask")
        scale = torch.full((1, 1, 1, 1), 1.0 / (1.0 - c.p), dtype=torch.float32, device=DEV)
        sc = cudnn_tensor(g, scale, "dropout_scale")
        pack.update({mt: x.mask, sc: scale})
        kw["dropout"] = (mt, sc)
    if c.alibi:
        kw["use_alibi_mask"] = True
    if c.causal:
        kw["use_causal_mask"] = True
    if c.causal_br:
        kw["use_causal_mask_bottom_right"] = True
    if c.window is not None:
        kw["sliding_window_length"] = c.window
    if c.right is not None:
        kw["diagonal_band_right_bound"] = c.right
    if c.score_mod:
        def softcap(sub: cudnn.pygraph, score: cudnn.tensor) -> cudnn.tensor:
            return sub.mul(sub.tanh(sub.div(score, 30.0)), 30.0)
        kw["score_mod"] = softcap
    o_t = torch.full((c.b, c.hq, c.sq, c.dv), math.nan, dtype=c.dtype, device=DEV)
    if c.layout == "bshd":
        o_t = torch.full((c.b, c.sq, c.hq, c.dv), math.nan, dtype=c.dtype, device=DEV).transpose(1, 2)
    if c.max_sum:
        mx = torch.full((c.b, c.hq, c.sq, 1), math.nan, device=DEV)
        se = torch.full((c.b, c.hq, c.sq, 1), math.nan, device=DEV)
        mxt, set_ = cudnn_tensor(g, mx, "max"), cudnn_tensor(g, se, "sum_exp")
        pack.update({mxt: mx, set_: se})
        kw.update(score_max=mxt, score_sum_exp=set_)
        outs.update(max=mx, sum_exp=se)
        stats = False
    o, s = g.sdpa(q, k, v, generate_stats=stats, implementation=c.implementation, name="attn", **kw)
    o.set_output(True).set_dim(list(o_t.shape)).set_stride(list(o_t.stride()))
    pack[o] = o_t
    outs["O"] = o_t
    if stats:
        s_t = torch.full((c.b, c.hq, c.sq, 1), math.nan, device=DEV)
        s.set_output(True).set_data_type(dt.FLOAT)
        pack[s] = s_t
        outs["Stats"] = s_t
    build(g)
    run(g, pack)
    outs["graph"] = g
    return outs


def check_forward(c: Case) -> dict[str, Any]:
    x = inputs(c)
    got = forward(c, x)
    drop = got.get("rng_dump") if c.dropout == "philox" else x.mask
    o_ref, stats_ref = reference(c, x, drop)
    atol, rtol = TOL[c.dtype]
    rows = rows_with_keys(c, x)
    if x.seq_q is not None:
        rows = rows & (torch.arange(c.sq, device=DEV).view(1, 1, -1, 1) < x.seq_q.view(-1, 1, 1, 1))
    assert_close("O", got["O"], o_ref, atol, rtol, rows)
    if "Stats" in got:
        assert_close("Stats", got["Stats"], stats_ref, *STATS_TOL, rows)
    if "max" in got:
        assert_close("Stats from max + log(sum_exp)", got["max"] + torch.log(got["sum_exp"]), stats_ref,
                     *STATS_TOL, rows)
    if c.dropout == "philox":
        dump = got["rng_dump"]
        assert set(torch.unique(dump).tolist()) <= {0.0, 1.0}
        kept = float(dump.mean())
        assert abs(kept - (1.0 - c.p)) < 0.05, f"rng_dump keeps {kept:.3f}, expected about {1 - c.p}"
    return got


FORWARD_CASES = {
    "plain": Case(),
    "odd_lengths": Case(sq=77, skv=131),
    "causal": Case(causal=True),
    "causal_bottom_right": Case(sq=64, skv=192, causal_br=True),
    "sliding_window": Case(causal=True, window=32),
    "band_bounds": Case(right=8, window=16, extra={"alignment": cudnn.diagonal_alignment.TOP_LEFT}),
    "bias": Case(bias=True),
    "alibi": Case(alibi=True, causal=True),
    "padding": Case(padding=True, sq=96, skv=160),
    "padding_causal": Case(padding=True, causal=True),
    "dropout_philox": Case(dropout="philox"),
    "dropout_mask": Case(dropout="mask"),
    "scale_tensor": Case(scale_tensor=True),
    "gqa": Case(hq=8, hk=2, hv=2),
    "mqa": Case(hq=8, hk=1, hv=1),
    "bshd_layout": Case(layout="bshd", causal=True),
    "head_dims_qk_ne_v": Case(dqk=128, dv=64),
    "head_dim_256": Case(dqk=256, dv=256, sq=64, skv=64),
    "decode": Case(sq=1, skv=512),
    "paged": Case(paged=32, sq=64, skv=256),
    "score_mod_softcap": Case(score_mod=True),
    "score_max_sum_exp": Case(max_sum=True),
    "unified_forced": Case(implementation=cudnn.attention_implementation.UNIFIED),
    "unified_padding": Case(padding=True, implementation=cudnn.attention_implementation.UNIFIED),
    "composite_forced": Case(implementation=cudnn.attention_implementation.COMPOSITE),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("name", list(FORWARD_CASES))
def test_sdpa_forward(name: str, dtype: torch.dtype) -> None:
    check_forward(replace(FORWARD_CASES[name], dtype=dtype))


# -- backward ------------------------------------------------------------------------------------------

def check_backward(c: Case) -> None:
    x = inputs(c)
    fwd = forward(c, x)
    fwd["O"] = valid_rows(c, x, fwd["O"], x.seq_q)  # rows past seq_len_q are the caller's business
    fwd["Stats"] = valid_rows(c, x, fwd["Stats"], x.seq_q)
    drop = fwd.get("rng_dump") if c.dropout == "philox" else x.mask
    qf, kf, vf = (t.float().requires_grad_(True) for t in (x.q, x.k, x.v))
    o_ref, stats_ref = reference_f(c, x, qf, kf, vf, drop)
    gen = torch.Generator(device=DEV).manual_seed(c.seed + 2)
    d_o = torch.randn(o_ref.shape, generator=gen, device=DEV).to(c.dtype)
    if x.seq_q is not None:
        d_o = valid_rows(c, x, d_o, x.seq_q)
    o_ref.backward(d_o.float())
    g = new_graph()
    names = ("q", "k", "v", "o", "dO", "stats")
    bufs = (x.q, x.k, x.v, fwd["O"], d_o, fwd["Stats"])
    ts = [cudnn_tensor(g, t, n) for n, t in zip(names, bufs)]
    pack: dict[Any, torch.Tensor] = dict(zip(ts, bufs))
    kw: dict[str, Any] = {"attn_scale": c.scale}
    if x.bias is not None:
        bt = cudnn_tensor(g, x.bias, "bias")
        pack[bt] = x.bias
        kw["bias"] = bt
    if c.padding:
        sq, skv = cudnn_tensor(g, x.seq_q, "seq_q"), cudnn_tensor(g, x.seq_kv, "seq_kv")
        pack.update({sq: x.seq_q, skv: x.seq_kv})
        kw.update(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
    if c.dropout == "philox":
        seed = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64, device=DEV)
        off = torch.full((1, 1, 1, 1), 7, dtype=torch.int64, device=DEV)
        st, ot = cudnn_tensor(g, seed, "seed"), cudnn_tensor(g, off, "offset")
        pack.update({st: seed, ot: off})
        kw["dropout"] = (c.p, st, ot)
    elif c.dropout == "mask":
        mt = cudnn_tensor(g, x.mask, "mask")
        sc = torch.full((1, 1, 1, 1), 1.0 / (1.0 - c.p), dtype=torch.float32, device=DEV)
        si = torch.full((1, 1, 1, 1), 1.0 - c.p, dtype=torch.float32, device=DEV)
        sct, sit = cudnn_tensor(g, sc, "scale"), cudnn_tensor(g, si, "scale_inv")
        pack.update({mt: x.mask, sct: sc, sit: si})
        kw["dropout"] = (mt, sct, sit)
    for flag, key in ((c.alibi, "use_alibi_mask"), (c.causal, "use_causal_mask"),
                      (c.causal_br, "use_causal_mask_bottom_right")):
        if flag:
            kw[key] = True
    if c.window is not None:
        kw["sliding_window_length"] = c.window
    dbias = None
    if c.extra.get("dbias"):
        dbias = torch.full(tuple(x.bias.shape), math.nan, dtype=c.dtype, device=DEV)
        dbt = cudnn_tensor(g, dbias, "dbias")
        pack[dbt] = dbias
        kw["dBias"] = dbt
    if c.extra.get("deterministic"):
        kw["use_deterministic_algorithm"] = True
    dq, dk, dv = g.sdpa_backward(*ts, name="attn_bwd", **kw)
    grads = {}
    for name, t, like in (("dQ", dq, x.q), ("dK", dk, x.k), ("dV", dv, x.v)):
        buf = torch.full_like(like, math.nan)
        t.set_output(True).set_dim(list(buf.shape)).set_stride(list(buf.stride()))
        pack[t] = buf
        grads[name] = buf
    build(g)
    run(g, pack)
    atol, rtol = TOL[c.dtype]
    rtol *= 2  # gradients sum s_q or s_kv products: the absolute part scales with the gradient's size
    atol = 2 * atol * max(1.0, float(qf.grad.abs().max()), float(kf.grad.abs().max()), float(vf.grad.abs().max()))
    rows_q = rows_with_keys(c, x)
    if x.seq_q is not None:
        rows_q = rows_q & (torch.arange(c.sq, device=DEV).view(1, 1, -1, 1) < x.seq_q.view(-1, 1, 1, 1))
    assert_close("dQ", grads["dQ"], qf.grad, atol, rtol, rows_q)
    rows_kv = None
    if x.seq_kv is not None:
        rows_kv = torch.arange(c.skv, device=DEV).view(1, 1, -1, 1) < x.seq_kv.view(-1, 1, 1, 1)
    assert_close("dK", grads["dK"], kf.grad, atol, rtol, rows_kv)
    assert_close("dV", grads["dV"], vf.grad, atol, rtol, rows_kv)
    if dbias is not None:
        bias = x.bias.float().requires_grad_(True)
        x2 = replace(x, bias=bias)
        o2, _ = reference_f(c, x2, x.q.float(), x.k.float(), x.v.float(), drop)
        o2.backward(d_o.float())
        assert_close("dBias", dbias, bias.grad, atol * 4, rtol * 2)


BACKWARD_CASES = {
    "plain": Case(),
    "odd_lengths": Case(sq=77, skv=131),
    "causal": Case(causal=True),
    "causal_bottom_right": Case(sq=64, skv=192, causal_br=True),
    "sliding_window": Case(causal=True, window=32),
    "bias_dbias": Case(bias=True, extra={"dbias": True}),
    "alibi": Case(alibi=True, causal=True),
    "padding": Case(padding=True, sq=96, skv=160),
    "dropout_philox": Case(dropout="philox"),
    "dropout_mask": Case(dropout="mask"),
    "gqa": Case(hq=8, hk=2, hv=2),
    "mqa": Case(hq=8, hk=1, hv=1),
    "bshd_layout": Case(layout="bshd", causal=True),
    "head_dims_qk_ne_v": Case(dqk=128, dv=64),
    "deterministic": Case(causal=True, extra={"deterministic": True}),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("name", list(BACKWARD_CASES))
def test_sdpa_backward(name: str, dtype: torch.dtype) -> None:
    if name == "dropout_mask" and dtype == torch.float16:
        pytest.xfail("known: 12 of 65536 dQ elements off by up to 0.13 with a user dropout mask in fp16 "
                     "(cuDNN 9.19, H200; Philox dropout and bf16 pass) - not yet explained")
    check_backward(replace(BACKWARD_CASES[name], dtype=dtype))


def test_unified_is_chosen_by_auto_without_masks() -> None:
    """AUTO lowers plain attention (compute FLOAT) to the single SDPA_FWD operation."""
    from cudnn.graph.expand import expand

    g = check_forward(Case())["graph"]
    nodes, _ = expand(g.nodes, g.context, cudnn.backend_version())
    assert [n.op for n in nodes] == ["sdpa_fwd"]


def test_unified_refuses_a_causal_mask_on_this_cudnn() -> None:
    if cudnn.backend_version() >= 92100:
        pytest.skip("cuDNN >= 9.21 expresses causal masks in SDPA_FWD (not built by cudnn-py: still refused)")
    with pytest.raises(cudnn.GraphError, match="UNIFIED|unified"):
        forward(Case(causal=True, implementation=cudnn.attention_implementation.UNIFIED), inputs(Case(causal=True)))
