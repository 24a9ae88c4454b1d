"""Attention (pygraph.sdpa / sdpa_backward) on the GPU against a float32 PyTorch reference.

Every option runs at least once in fp16 and bf16. Inputs are quantized to the test dtype first;
the reference is an explicit softmax(Q Kᵀ * scale + bias + masks) V in float32 on those values
(backward: autograd through it), so tolerances cover cuDNN's arithmetic and output rounding:
  O               fp16 atol 2e-2 rtol 2e-2 | bf16 atol 6e-2 rtol 5e-2
  dQ, dK, dV      rtol twice O's, atol twice O's times max(1, largest reference gradient magnitude)
  Stats (log-sum-exp, FLOAT)   atol 2e-3 rtol 2e-3
  dSink_token     atol/rtol as the gradients
Outputs are filled with NaN first, so an element cuDNN did not write fails. With a padding mask
only valid rows (row < seq_len) are compared. Philox dropout is checked through rng_dump: the
reference applies the mask cuDNN drew where scores are kept (cuDNN leaves rng_dump unwritten in
padded rows and columns and in tiles a causal or band mask skips). Ragged (THD) cases pack each batch's tokens one after another in
BSHD order and give Q/K/V/O (and dO, dQ/dK/dV) ragged offsets. A configuration the backend
refuses raises (GraphError or cudnnGraphNotSupportedError); the tests here must all build (the
sweep counts refusals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch

import cudnn

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
    sink: bool = False  # a sink token (forward) and dSink (backward)
    block_mask: bool = False  # a random 128x128-tile block mask (unified lowering only)
    implementation: Any = cudnn.attention_implementation.AUTO
    inference: bool = False  # is_inference=True: no Stats output
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
    sink: torch.Tensor | None = None  # [1, h_q, 1, 1] float32
    block_bits: torch.Tensor | None = None  # [b, h_q, tiles_q, tiles_kv] bool: tile enabled
    block_mask: torch.Tensor | None = None  # the bits packed 8 per byte (UINT8, LSB first)


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
        if c.causal_br:  # every row keeps a key when seq_q <= seq_kv (lengths stay within the tensors)
            x.seq_q = torch.minimum(x.seq_q, x.seq_kv)
        x.seq_q[0], x.seq_kv[0] = c.sq, c.skv  # one full-length batch (with s_q > s_kv: rows without keys)
    if c.dropout == "mask":
        x.mask = (torch.rand(c.b, c.hq, c.sq, c.skv, generator=gen, device=DEV) > c.p).to(c.dtype)
    if c.scale_tensor:
        x.scale_t = torch.full((1, 1, 1, 1), c.scale, dtype=torch.float32, device=DEV)
    if c.sink:
        x.sink = torch.randn(1, c.hq, 1, 1, generator=gen, device=DEV)
    if c.block_mask:
        tq, tkv = -(-c.sq // 128), -(-c.skv // 128)
        bits = torch.rand(c.b, c.hq, tq, tkv, generator=gen, device=DEV) < 0.6
        bits[..., 0] = True  # every row keeps its first tile
        x.block_bits = bits
        padded = torch.zeros(c.b, c.hq, tq, -(-tkv // 8) * 8, dtype=torch.uint8, device=DEV)
        padded[..., :tkv] = bits.to(torch.uint8)
        weights = (2 ** torch.arange(8, device=DEV)).to(torch.uint8)
        x.block_mask = (padded.view(c.b, c.hq, tq, -1, 8) * weights).sum(-1).to(torch.uint8).contiguous()
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
    if x.block_bits is not None:
        tiles = x.block_bits.repeat_interleave(128, dim=2).repeat_interleave(128, dim=3)
        keep = keep & tiles[:, :, :c.sq, :c.skv]
    return keep


def reference(c: Case, x: Inputs, drop: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, Stats) in float32 of the inputs as given."""
    q, k, v = (t.float() for t in (x.q, x.k, x.v))
    return reference_f(c, x, q, k, v, drop)


def reference_f(c: Case, x: Inputs, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                drop: torch.Tensor | None, sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, Stats) in float32 from q, k, v (leaves when autograd goes through them). A sink token
    is one more logit per row with no value: it takes part in the normalization only."""
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
    if sink is None and x.sink is not None:
        sink = x.sink
    if sink is not None:
        stats = torch.logsumexp(torch.cat([s, sink.expand(*s.shape[:3], 1)], dim=-1), dim=-1, keepdim=True)
    else:
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


# -- paged and ragged buffers -------------------------------------------------------------------------

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


def ragged_offsets(seq: torch.Tensor, h: int, d: int) -> torch.Tensor:
    """[b + 1, 1, 1, 1] INT32: the element offset where each batch's tokens start (and the end)."""
    counts = seq.view(-1).to(torch.int64) * h * d
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32).view(-1, 1, 1, 1)


def pack(t: torch.Tensor, seq: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """[b, h, s, d] -> a [b, h, s, d] view (BSHD strides) of a buffer holding batch i's first
    seq[i] tokens right after batch i - 1's; the rest of the buffer is ``fill``."""
    b, h, s, d = t.shape
    buf = torch.full((b, s, h, d), fill, dtype=t.dtype, device=DEV)
    flat, start = buf.view(-1), 0
    for i, n in enumerate(seq.view(-1).tolist()):
        flat[start:start + n * h * d] = t[i, :, :n].transpose(0, 1).reshape(-1)
        start += n * h * d
    return buf.transpose(1, 2)


def unpack(buf: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
    """The inverse of ``pack``: [b, h, s, d] with rows past each batch's length zero."""
    b, h, s, d = buf.shape
    flat, start = buf.transpose(1, 2).reshape(-1), 0
    out = torch.zeros(b, h, s, d, dtype=buf.dtype, device=DEV)
    for i, n in enumerate(seq.view(-1).tolist()):
        out[i, :, :n] = flat[start:start + n * h * d].view(n, h, d).transpose(0, 1)
        start += n * h * d
    return out


def ragged(g: cudnn.pygraph, buf: torch.Tensor, seq: torch.Tensor, name: str,
           pack_: dict[Any, torch.Tensor]) -> cudnn.tensor:
    """A graph tensor for the packed ``buf`` with its ragged offset (both bound in ``pack_``)."""
    offsets = ragged_offsets(seq, buf.shape[1], buf.shape[3])
    off_t = cudnn_tensor(g, offsets, f"{name}_ragged_offset")
    t = cudnn_tensor(g, buf, name).set_ragged_offset(off_t)
    pack_.update({t: buf, off_t: offsets})
    return t


def drawn_mask(c: Case, x: Inputs, dump: torch.Tensor) -> torch.Tensor:
    """The keep-mask cuDNN drew (rng_dump) where scores are kept, 0 elsewhere: cuDNN leaves
    rng_dump unwritten (NaN here) in padded rows and columns and in tiles a causal or band mask
    skips, and no output reads those elements."""
    keep = keep_mask(c, x).expand_as(dump)
    drawn = dump[keep]
    assert not torch.isnan(drawn).any(), "rng_dump: an element of a kept score was not written"
    assert set(torch.unique(drawn).tolist()) <= {0.0, 1.0}, "rng_dump holds values other than 0 and 1"
    if drawn.numel():
        kept, n = float(drawn.mean()), drawn.numel()
        slack = 4 * math.sqrt(c.p * (1 - c.p) / n) + 0.01
        assert abs(kept - (1.0 - c.p)) < slack, f"rng_dump keeps {kept:.3f} of {n}, expected about {1 - c.p}"
    return torch.where(keep, dump, torch.zeros((), device=DEV))


# -- forward -------------------------------------------------------------------------------------------

def forward(c: Case, x: Inputs, stats: bool = True) -> dict[str, Any]:
    """Build and run sdpa for ``c``; returns the output tensors (and the graph). With a ragged
    layout, "O" is unpacked to [b, h, s, d] and "O_packed" is the buffer cuDNN wrote."""
    g = new_graph()
    pack_: dict[Any, torch.Tensor] = {}
    if c.ragged:
        q, k, v = (ragged(g, pack(t, seq), seq, n, pack_)
                   for t, seq, n in ((x.q, x.seq_q, "q"), (x.k, x.seq_kv, "k"), (x.v, x.seq_kv, "v")))
    else:
        q, k, v = cudnn_tensor(g, x.q, "q"), cudnn_tensor(g, x.k, "k"), cudnn_tensor(g, x.v, "v")
        pack_.update({q: x.q, k: x.k, v: x.v})
    kw: dict[str, Any] = {}
    if "alignment" in c.extra:
        kw["diagonal_alignment"] = c.extra["alignment"]
    if c.scale_tensor:
        st = cudnn_tensor(g, x.scale_t, "scale")
        pack_[st] = x.scale_t
        kw["attn_scale"] = st
    else:
        kw["attn_scale"] = c.scale
    for arg, t in (("bias", x.bias), ("sink_token", x.sink), ("block_mask", x.block_mask)):
        if t is not None:
            gt = cudnn_tensor(g, t, arg)
            pack_[gt] = t
            kw[arg] = gt
    if c.padding or c.paged or c.ragged:
        sq, skv = cudnn_tensor(g, x.seq_q, "seq_q"), cudnn_tensor(g, x.seq_kv, "seq_kv")
        pack_.update({sq: x.seq_q, skv: x.seq_kv})
        kw.update(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
    if c.paged:
        gen = torch.Generator(device=DEV).manual_seed(c.seed + 1)
        kc, kt = paged_container(x.k, c.paged, gen)
        vc, vt = paged_container(x.v, c.paged, gen)
        del pack_[k], pack_[v]
        k, v = cudnn_tensor(g, kc, "k_cache"), cudnn_tensor(g, vc, "v_cache")
        ktab, vtab = cudnn_tensor(g, kt, "k_table"), cudnn_tensor(g, vt, "v_table")
        pack_.update({k: kc, v: vc, ktab: kt, vtab: vt})
        kw.update(paged_attention_k_table=ktab, paged_attention_v_table=vtab,
                  paged_attention_max_seq_len_kv=c.skv)
    outs: dict[str, Any] = {}
    if c.dropout == "philox":
        seed = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64, device=DEV)
        off = torch.full((1, 1, 1, 1), 7, dtype=torch.int64, device=DEV)
        st, ot = cudnn_tensor(g, seed, "seed"), cudnn_tensor(g, off, "offset")
        dump = torch.full((c.b, c.hq, c.sq, c.skv), math.nan, dtype=torch.float32, device=DEV)
        dt_ = cudnn_tensor(g, dump, "rng_dump")
        pack_.update({st: seed, ot: off, dt_: dump})
        kw.update(dropout=(c.p, st, ot), rng_dump=dt_)
        outs["rng_dump"] = dump
    elif c.dropout == "mask":
        mt = cudnn_tensor(g, x.mask, "mask")
        scale = torch.full((1, 1, 1, 1), 1.0 / (1.0 - c.p), dtype=torch.float32, device=DEV)
        sc = cudnn_tensor(g, scale, "dropout_scale")
        pack_.update({mt: x.mask, sc: scale})
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
    if c.layout == "bshd" or c.ragged:
        o_t = torch.full((c.b, c.sq, c.hq, c.dv), math.nan, dtype=c.dtype, device=DEV).transpose(1, 2)
    else:
        o_t = torch.full((c.b, c.hq, c.sq, c.dv), math.nan, dtype=c.dtype, device=DEV)
    if c.max_sum:
        mx = torch.full((c.b, c.hq, c.sq, 1), math.nan, device=DEV)
        se = torch.full((c.b, c.hq, c.sq, 1), math.nan, device=DEV)
        mxt, set_ = cudnn_tensor(g, mx, "max"), cudnn_tensor(g, se, "sum_exp")
        pack_.update({mxt: mx, set_: se})
        kw.update(score_max=mxt, score_sum_exp=set_)
        outs.update(max=mx, sum_exp=se)
        stats = False
    o, s = g.sdpa(q, k, v, generate_stats=stats, implementation=c.implementation, name="attn", **kw)
    o.set_output(True).set_dim(list(o_t.shape)).set_stride(list(o_t.stride()))
    if c.ragged:
        offsets = ragged_offsets(x.seq_q, c.hq, c.dv)
        off_t = cudnn_tensor(g, offsets, "o_ragged_offset")
        o.set_ragged_offset(off_t)
        pack_[off_t] = offsets
    pack_[o] = o_t
    outs["O_packed"] = o_t
    if stats:
        s_t = torch.full((c.b, c.hq, c.sq, 1), math.nan, device=DEV)
        s.set_output(True).set_data_type(dt.FLOAT)
        pack_[s] = s_t
        outs["Stats"] = s_t
    build(g)
    run(g, pack_)
    outs["O"] = unpack(o_t, x.seq_q) if c.ragged else o_t
    outs["graph"] = g
    if c.dropout == "philox":
        outs["drop"] = drawn_mask(c, x, outs["rng_dump"])
    return outs


def check_forward(c: Case) -> dict[str, Any]:
    x = inputs(c)
    got = forward(c, x, stats=not c.inference)
    drop = got.get("drop") if c.dropout == "philox" else x.mask
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
    return got


FORWARD_CASES = {
    "plain": Case(),
    "odd_lengths": Case(sq=77, skv=131),
    "causal": Case(causal=True),
    "causal_bottom_right": Case(sq=64, skv=192, causal_br=True),
    "causal_bottom_right_padding_sq_gt_skv": Case(b=3, sq=128, skv=64, causal_br=True, padding=True),
    "sliding_window": Case(causal=True, window=32),
    "band_bounds": Case(right=8, window=16, extra={"alignment": cudnn.diagonal_alignment.TOP_LEFT}),
    "bias": Case(bias=True),
    "alibi": Case(alibi=True, causal=True),
    "padding": Case(padding=True, sq=96, skv=160),
    "padding_causal": Case(padding=True, causal=True),
    "dropout_philox": Case(dropout="philox"),
    "dropout_philox_padding": Case(dropout="philox", padding=True, sq=96, skv=160),
    "dropout_mask": Case(dropout="mask"),
    "scale_tensor": Case(scale_tensor=True),
    "gqa": Case(hq=8, hk=2, hv=2),
    "mqa": Case(hq=8, hk=1, hv=1),
    "bshd_layout": Case(layout="bshd", causal=True),
    "head_dims_qk_ne_v": Case(dqk=128, dv=64),
    "head_dim_256": Case(dqk=256, dv=256, sq=64, skv=64),
    "decode": Case(sq=1, skv=512),
    "paged": Case(paged=32, sq=64, skv=256),
    "ragged": Case(ragged=True, b=3, sq=96, skv=160),
    "ragged_gqa_causal": Case(ragged=True, b=3, hq=8, hk=2, hv=2, causal=True, dqk=128, dv=64),
    "sink_token": Case(sink=True, causal=True),
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


INFERENCE_CASES = {name: replace(FORWARD_CASES[name], inference=True) for name in (
    "plain", "composite_forced", "causal", "causal_bottom_right", "sliding_window", "bias", "padding_causal",
    "gqa", "bshd_layout", "head_dims_qk_ne_v", "decode", "paged", "ragged_gqa_causal", "score_mod_softcap")}
# longer sequences take other engines, which need the Stats the composite lowering writes to scratch
INFERENCE_CASES |= {"causal_s256": Case(causal=True, sq=256, skv=256, inference=True),
                    "padding_causal_s384": Case(padding=True, causal=True, sq=384, skv=384, inference=True),
                    "composite_s1024_d128": Case(sq=1024, skv=1024, dqk=128, dv=128, inference=True,
                                                 implementation=cudnn.attention_implementation.COMPOSITE)}


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("name", list(INFERENCE_CASES))
def test_sdpa_inference(name: str, dtype: torch.dtype) -> None:
    """is_inference=True (no Stats output) for the common masks and layouts, both lowerings."""
    check_forward(replace(INFERENCE_CASES[name], dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_block_mask_runs_or_is_refused_clearly(dtype: torch.dtype) -> None:
    """A block mask takes the unified SDPA_FWD lowering (cuDNN >= 9.14): correct where an engine
    accepts it; where none does, building raises cudnnGraphNotSupportedError (never a result)."""
    c = Case(block_mask=True, sq=256, skv=384, dtype=dtype)
    try:
        check_forward(c)
    except cudnn.cudnnGraphNotSupportedError as exc:
        assert "no engine configs" in str(exc), exc
        pytest.skip(f"cuDNN {cudnn.backend_version_string()} on {torch.cuda.get_device_name()} has no engine for "
                    f"a block mask (refused as it should be: {str(exc).splitlines()[0]})")


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("left", [0, -16])
def test_band_with_a_left_bound_at_or_above_the_diagonal(left: int, dtype: torch.dtype) -> None:
    """diagonal_band_left_bound <= 0 with a right bound: keep row - left < col <= row + 64 (a band
    above the diagonal), against the float32 reference with that explicit mask. cudnn-py takes it
    from cuDNN 9.10 on, as the official; where the backend refuses it the test skips, saying so."""
    c = Case(sq=128, skv=256, window=left, right=64, dtype=dtype,
             extra={"alignment": cudnn.diagonal_alignment.TOP_LEFT})
    if cudnn.backend_version() < 91000:
        with pytest.raises(cudnn.GraphError, match=r"needs cuDNN >= 9\.10\.0"):
            check_forward(c)
        return
    try:
        check_forward(c)
    except cudnn.cudnnGraphNotSupportedError as exc:
        if isinstance(exc, cudnn.GraphError):  # cudnn-py's own refusal: a failure, not the backend's answer
            raise
        pytest.skip(f"cuDNN {cudnn.backend_version_string()} on {torch.cuda.get_device_name()} refuses a left "
                    f"bound of {left}: {str(exc).splitlines()[0]}")


# -- backward ------------------------------------------------------------------------------------------

def check_backward(c: Case) -> None:
    x = inputs(c)
    fwd = forward(c, x)
    fwd["O"] = valid_rows(c, x, fwd["O"], x.seq_q)  # rows past seq_len_q are the caller's business
    fwd["Stats"] = valid_rows(c, x, fwd["Stats"], x.seq_q)
    drop = fwd.get("drop") if c.dropout == "philox" else x.mask
    qf, kf, vf = (t.float().requires_grad_(True) for t in (x.q, x.k, x.v))
    sink = x.sink.clone().requires_grad_(True) if x.sink is not None else None
    o_ref, _ = reference_f(c, x, qf, kf, vf, drop, sink)
    gen = torch.Generator(device=DEV).manual_seed(c.seed + 2)
    d_o = torch.randn(o_ref.shape, generator=gen, device=DEV).to(c.dtype)
    if x.seq_q is not None:
        d_o = valid_rows(c, x, d_o, x.seq_q)
    o_ref.backward(d_o.float())
    g = new_graph()
    pack_: dict[Any, torch.Tensor] = {}
    if c.ragged:
        ts = []
        for t, seq, n in ((x.q, x.seq_q, "q"), (x.k, x.seq_kv, "k"), (x.v, x.seq_kv, "v"), (d_o, x.seq_q, "dO")):
            ts.append(ragged(g, pack(t, seq), seq, n, pack_))
        ts.insert(3, ragged(g, fwd["O_packed"], x.seq_q, "o", pack_))
        st = cudnn_tensor(g, fwd["Stats"], "stats")
        pack_[st] = fwd["Stats"]
        ts.append(st)
    else:
        names = ("q", "k", "v", "o", "dO", "stats")
        bufs = (x.q, x.k, x.v, fwd["O"], d_o, fwd["Stats"])
        ts = [cudnn_tensor(g, t, n) for n, t in zip(names, bufs)]
        pack_.update(zip(ts, bufs))
    kw: dict[str, Any] = {"attn_scale": c.scale}
    for arg, t in (("bias", x.bias), ("sink_token", x.sink)):
        if t is not None:
            gt = cudnn_tensor(g, t, arg)
            pack_[gt] = t
            kw[arg] = gt
    if c.padding or c.ragged:
        sq, skv = cudnn_tensor(g, x.seq_q, "seq_q"), cudnn_tensor(g, x.seq_kv, "seq_kv")
        pack_.update({sq: x.seq_q, skv: x.seq_kv})
        kw.update(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
    if c.dropout == "philox":
        seed = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64, device=DEV)
        off = torch.full((1, 1, 1, 1), 7, dtype=torch.int64, device=DEV)
        st, ot = cudnn_tensor(g, seed, "seed"), cudnn_tensor(g, off, "offset")
        pack_.update({st: seed, ot: off})
        kw["dropout"] = (c.p, st, ot)
    elif c.dropout == "mask":
        mt = cudnn_tensor(g, x.mask, "mask")
        sc = torch.full((1, 1, 1, 1), 1.0 / (1.0 - c.p), dtype=torch.float32, device=DEV)
        si = torch.full((1, 1, 1, 1), 1.0 - c.p, dtype=torch.float32, device=DEV)
        sct, sit = cudnn_tensor(g, sc, "scale"), cudnn_tensor(g, si, "scale_inv")
        pack_.update({mt: x.mask, sct: sc, sit: si})
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
        pack_[dbt] = dbias
        kw["dBias"] = dbt
    dsink = None
    if x.sink is not None:
        dsink = torch.full((1, c.hq, 1, 1), math.nan, device=DEV)
        dst = cudnn_tensor(g, dsink, "dsink")
        pack_[dst] = dsink
        kw["dSink_token"] = dst
    if c.extra.get("deterministic"):
        kw["use_deterministic_algorithm"] = True
    dq, dk, dv = g.sdpa_backward(*ts, name="attn_bwd", **kw)
    grads = {}
    for name, t, like, seq in (("dQ", dq, x.q, x.seq_q), ("dK", dk, x.k, x.seq_kv), ("dV", dv, x.v, x.seq_kv)):
        if c.ragged:
            b, h, s, d = like.shape
            buf = torch.full((b, s, h, d), math.nan, dtype=like.dtype, device=DEV).transpose(1, 2)
            offsets = ragged_offsets(seq, h, d)
            off_t = cudnn_tensor(g, offsets, f"{name}_ragged_offset")
            t.set_ragged_offset(off_t)
            pack_[off_t] = offsets
        else:
            buf = torch.full_like(like, math.nan)
        t.set_output(True).set_dim(list(buf.shape)).set_stride(list(buf.stride()))
        pack_[t] = buf
        grads[name] = (buf, seq)
    build(g)
    run(g, pack_)
    got = {name: unpack(buf, seq) if c.ragged else buf for name, (buf, seq) in grads.items()}
    atol, rtol = TOL[c.dtype]
    rtol *= 2  # gradients sum s_q or s_kv products: the absolute part scales with the gradient's size
    atol = 2 * atol * max(1.0, float(qf.grad.abs().max()), float(kf.grad.abs().max()), float(vf.grad.abs().max()))
    rows_q = rows_with_keys(c, x)
    if x.seq_q is not None:
        rows_q = rows_q & (torch.arange(c.sq, device=DEV).view(1, 1, -1, 1) < x.seq_q.view(-1, 1, 1, 1))
    assert_close("dQ", got["dQ"], qf.grad, atol, rtol, rows_q)
    rows_kv = None
    if x.seq_kv is not None:
        rows_kv = torch.arange(c.skv, device=DEV).view(1, 1, -1, 1) < x.seq_kv.view(-1, 1, 1, 1)
    assert_close("dK", got["dK"], kf.grad, atol, rtol, rows_kv)
    assert_close("dV", got["dV"], vf.grad, atol, rtol, rows_kv)
    if dsink is not None:
        assert_close("dSink_token", dsink, sink.grad, atol, rtol)
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
    "causal_bottom_right_padding_sq_gt_skv": Case(b=3, sq=128, skv=64, causal_br=True, padding=True),
    "sliding_window": Case(causal=True, window=32),
    "bias_dbias": Case(bias=True, extra={"dbias": True}),
    "alibi": Case(alibi=True, causal=True),
    "padding": Case(padding=True, sq=96, skv=160),
    "dropout_philox": Case(dropout="philox"),
    "dropout_philox_padding": Case(dropout="philox", padding=True, sq=96, skv=160),
    "dropout_mask": Case(dropout="mask"),
    "dropout_mask_causal_padding": Case(dropout="mask", causal=True, padding=True, sq=200, skv=300),
    "gqa": Case(hq=8, hk=2, hv=2),
    "mqa": Case(hq=8, hk=1, hv=1),
    "bshd_layout": Case(layout="bshd", causal=True),
    "head_dims_qk_ne_v": Case(dqk=128, dv=64),
    "ragged": Case(ragged=True, b=3, sq=96, skv=160),
    "ragged_gqa_causal": Case(ragged=True, b=3, hq=8, hk=2, hv=2, causal=True),
    "sink_dsink": Case(sink=True, causal=True),
    "deterministic": Case(causal=True, extra={"deterministic": True}),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("name", list(BACKWARD_CASES))
def test_sdpa_backward(name: str, dtype: torch.dtype) -> None:
    check_backward(replace(BACKWARD_CASES[name], dtype=dtype))


def test_unified_is_chosen_by_auto_without_masks() -> None:
    """AUTO lowers plain attention (compute FLOAT) to the single SDPA_FWD operation."""
    from cudnn._graph.model.expand import expand

    g = check_forward(Case())["graph"]
    nodes, _ = expand(g.nodes, g.context, cudnn.backend_version())
    assert [n.op for n in nodes] == ["sdpa_fwd"]


def test_unified_refuses_a_causal_mask_on_this_cudnn() -> None:
    if cudnn.backend_version() >= 92100:
        pytest.skip("cuDNN >= 9.21 expresses causal masks in SDPA_FWD (not built by cudnn-py: still refused)")
    with pytest.raises(cudnn.GraphError, match="UNIFIED|unified"):
        forward(Case(causal=True, implementation=cudnn.attention_implementation.UNIFIED), inputs(Case(causal=True)))
