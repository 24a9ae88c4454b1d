"""Low precision on the GPU against float32 PyTorch references computed from the dequantized inputs.

FP8 attention (sdpa_fp8 / sdpa_fp8_backward, E4M3 everywhere): inputs are real tensors quantized
with per-tensor scales (descale = amax / 448); the reference runs softmax attention (and autograd)
in float32 on the dequantized values. cuDNN quantizes P (forward) and dS (backward) to FP8 on the
way into the second matmuls and stores FP8 outputs, so results are compared as a relative RMS error
||got - want|| / ||want||, stated per check:
  O                      0.08   (P and O each rounded to E4M3: 2^-4 relative at most); 0.12 with
                                E5M2 inputs (P is quantized in Q's type)
  dQ, dK, dV             0.15   (dO, P and dS rounded as well); 0.25 with dO (and so dS) in E5M2
  Amax_S vs max P        rtol 0.02 (taken before any FP8 rounding)
  Amax_O, Amax_dQ/dK/dV/dP vs the reference's |x|.max()   rtol 0.1
A result with a missing or doubled scale is off by a factor of 2 or more, far outside these.
FP8 matmul (matmul + descale/scale multiplies + AMAX) is compared with torch._scaled_mm: bf16 output
rtol 2e-2 atol 1e-1 (both accumulate in float32; bf16 output rounding), FP8 output within one E4M3
step. Block-scale quantize is compared with a float reference of MX block scaling; graphs the
backend has no engine for on this GPU are reported as skips naming the backend's refusal.
Philox dropout is refused before any plan is built (_graph/plans/known_faults.py): run against bf16 attention's
rng_dump as the mask reference, the FP8 forward engine faulted (illegal memory access) and the
backward engine's gradients were wrong (relative error near 1) on cuDNN 9.19.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
import torch

import cudnn
from cudnn import GraphError

dt = cudnn.data_type
DEV = "cuda"
E4M3 = torch.float8_e4m3fn
FP8_MAX = 448.0
CUDNN = {torch.float16: dt.HALF, torch.bfloat16: dt.BFLOAT16, torch.float32: dt.FLOAT, E4M3: dt.FP8_E4M3,
         torch.float8_e5m2: dt.FP8_E5M2, torch.int32: dt.INT32, torch.int64: dt.INT64}
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


@functools.cache
def sm() -> int:
    """The GPU's compute capability as one number (90 for 9.0), asked at the first test, not at import."""
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def tensor(g: cudnn.pygraph, t: torch.Tensor, name: str) -> cudnn.tensor:
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=CUDNN[t.dtype])


def scalar(value: float) -> torch.Tensor:
    return torch.full((1, 1, 1, 1), float(value), dtype=torch.float32, device=DEV)


E5M2 = torch.float8_e5m2
MAX = {E4M3: FP8_MAX, E5M2: 57344.0}


def quantize(x: torch.Tensor, dtype: torch.dtype = E4M3) -> tuple[torch.Tensor, float]:
    """(x / descale in ``dtype``, descale) with descale = amax / the type's largest value."""
    descale = x.abs().max().item() / MAX[dtype]
    return (x / descale).to(dtype), descale


def build_and_run(g: cudnn.pygraph, pack: dict[Any, torch.Tensor]) -> None:
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(HEUR)
    g.check_support()
    g.build_plans()
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=DEV)
    g.execute(pack, ws)
    torch.cuda.synchronize()


def rel_rms(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def close(a: float, b: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * abs(b)


def graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=dt.FP8_E4M3, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)


# -- FP8 attention --------------------------------------------------------------------------------

CASES = {  # b, h_q, h_kv, s, d, causal[, options]
    "d64": (2, 4, 4, 256, 64, False),
    "d64_causal": (2, 4, 4, 256, 64, True),
    "d128": (2, 4, 4, 256, 128, False),
    "d128_causal_gqa": (2, 8, 2, 256, 128, True),
    "d128_e5m2": (2, 4, 4, 256, 128, True, {"dtype": E5M2}),
    "d128_padding": (2, 4, 4, 256, 128, False, {"padding": ([256, 100], [256, 180])}),
}


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                  lens: tuple[list[int], list[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O, P, Stats) in float32; K/V repeated over head groups; ``lens``: per-batch valid rows and
    columns (padding mask: rows past seq_len_q are all masked, their O is not compared)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
    if lens is not None:
        col = torch.arange(s.shape[-1], device=DEV).view(1, 1, 1, -1)
        s = s.masked_fill(col >= torch.tensor(lens[1], device=DEV).view(-1, 1, 1, 1), -math.inf)
    stats = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - stats)
    return p @ v, p, stats


def valid_rows(t: torch.Tensor, lens: tuple[list[int], list[int]] | None) -> torch.Tensor:
    return t if lens is None else torch.cat([t[i, :, :n].flatten() for i, n in enumerate(lens[0])])


def fp8_inputs(b: int, hq: int, hk: int, s: int, d: int, dtype: torch.dtype = E4M3) -> dict[str, Any]:
    gen = torch.Generator(device=DEV).manual_seed(0)
    real = {n: torch.randn(b, h, s, d, generator=gen, device=DEV) for n, h in (("q", hq), ("k", hk), ("v", hk))}
    out: dict[str, Any] = {}
    for n, x in real.items():
        out[n], out["d" + n] = quantize(x, dtype)
        out[n + "_f"] = out[n].float() * out["d" + n]  # what cuDNN sees, in float32
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_fp8_forward(case: str) -> None:
    b, hq, hk, s, d, causal, *rest = CASES[case]
    opts: dict[str, Any] = rest[0] if rest else {}
    dtype, lens = opts.get("dtype", E4M3), opts.get("padding")
    x = fp8_inputs(b, hq, hk, s, d, dtype)
    scale = 1.0 / math.sqrt(d)
    o_ref, p_ref, stats_ref = attention_ref(x["q_f"], x["k_f"], x["v_f"], causal, scale, lens)
    scale_o = 0.8 * FP8_MAX / o_ref.abs().max().item()
    g = graph()
    q, k, v = tensor(g, x["q"], "q"), tensor(g, x["k"], "k"), tensor(g, x["v"], "v")
    sc = {n: tensor(g, scalar(1.0), n) for n in ("dq", "dk", "dv", "ds", "ss", "so")}
    extra: dict[str, Any] = {}
    pack: dict[Any, torch.Tensor] = {}
    if lens is not None:
        seq = [torch.tensor(n, dtype=torch.int32, device=DEV).view(-1, 1, 1, 1) for n in lens]
        extra = {"use_padding_mask": True, "seq_len_q": tensor(g, seq[0], "seq_q"),
                 "seq_len_kv": tensor(g, seq[1], "seq_kv")}
        pack = {extra["seq_len_q"]: seq[0], extra["seq_len_kv"]: seq[1]}
    scale_s = FP8_MAX
    o, stats, amax_s, amax_o = g.sdpa_fp8(q, k, v, sc["dq"], sc["dk"], sc["dv"], sc["ds"], sc["ss"], sc["so"],
                                          generate_stats=True, attn_scale=scale, use_causal_mask=causal, **extra)
    for t in (o, stats, amax_s, amax_o):
        t.set_output(True)
    o.set_data_type(dt.FP8_E4M3)
    o_t = torch.full((b, hq, s, d), float("nan"), device=DEV).to(E4M3)
    stats_t = torch.full((b, hq, s, 1), float("nan"), device=DEV)
    amax_s_t, amax_o_t = scalar(float("nan")), scalar(float("nan"))
    pack.update({q: x["q"], k: x["k"], v: x["v"], sc["dq"]: scalar(x["dq"]), sc["dk"]: scalar(x["dk"]),
                 sc["dv"]: scalar(x["dv"]), sc["ds"]: scalar(1.0 / scale_s), sc["ss"]: scalar(scale_s),
                 sc["so"]: scalar(scale_o), o: o_t, stats: stats_t, amax_s: amax_s_t, amax_o: amax_o_t})
    build_and_run(g, pack)
    got = valid_rows(o_t.float() / scale_o, lens)
    want = valid_rows(o_ref, lens)
    assert not got.isnan().any(), "O has unwritten (NaN) elements"
    err = rel_rms(got, want)
    tol = 0.08 if dtype == E4M3 else 0.12  # P is quantized in Q's type: E5M2 keeps 2 mantissa bits
    assert err < tol, f"O relative RMS error {err:.4f}"
    assert rel_rms(valid_rows(stats_t, lens), valid_rows(stats_ref, lens)) < 1e-3
    if lens is None:  # padded rows (all keys masked) take part in cuDNN's amax in its own way
        assert close(amax_s_t.item(), p_ref.max().item(), 0.02), (amax_s_t.item(), p_ref.max().item())
        assert close(amax_o_t.item(), o_ref.abs().max().item(), 0.1), (amax_o_t.item(), o_ref.abs().max().item())


@pytest.mark.parametrize("layout", ["paged", "ragged"])
def test_sdpa_fp8_forward_paged_and_ragged(layout: str) -> None:
    """Padding mask with sequence lengths, K/V read from paged caches (blocks of 64 in a random
    order) or Q/K/V/O packed token after token (ragged offsets): O of the valid rows against the
    float32 reference (relative RMS 0.08); a layout the FP8 engines refuse is a skip naming it."""
    from test_sdpa_gpu import pack, paged_container, ragged_offsets, unpack

    b, h, s, d = 2, 4, 256, 128
    lens = ([256, 100], [256, 180])
    x = fp8_inputs(b, h, h, s, d)
    scale = 1.0 / math.sqrt(d)
    o_ref, _, _ = attention_ref(x["q_f"], x["k_f"], x["v_f"], False, scale, lens)
    scale_o = 0.8 * FP8_MAX / o_ref.abs().max().item()
    g = graph()
    seq = [torch.tensor(n, dtype=torch.int32, device=DEV).view(-1, 1, 1, 1) for n in lens]
    sq, skv = tensor(g, seq[0], "seq_q"), tensor(g, seq[1], "seq_kv")
    pack_: dict[Any, torch.Tensor] = {sq: seq[0], skv: seq[1]}
    extra: dict[str, Any] = {}
    o_buf = torch.full((b, h, s, d), float("nan"), device=DEV).to(E4M3)
    if layout == "paged":
        q = tensor(g, x["q"], "q")
        gen = torch.Generator(device=DEV).manual_seed(5)
        (kc, kt), (vc, vt) = paged_container(x["k"], 64, gen), paged_container(x["v"], 64, gen)
        k, v = tensor(g, kc, "k_cache"), tensor(g, vc, "v_cache")
        ktab, vtab = tensor(g, kt, "k_table"), tensor(g, vt, "v_table")
        extra = {"paged_attention_k_table": ktab, "paged_attention_v_table": vtab,
                 "paged_attention_max_seq_len_kv": s}
        pack_.update({q: x["q"], k: kc, v: vc, ktab: kt, vtab: vt})
    else:
        bufs = {}
        for n, lengths in (("q", seq[0]), ("k", seq[1]), ("v", seq[1])):
            bufs[n] = pack(x[n].float(), lengths).to(E4M3)  # BSHD view of a packed buffer
        offs = {n: ragged_offsets(seq[0] if n in "qo" else seq[1], h, d) for n in "qkvo"}
        q, k, v = (tensor(g, bufs[n], n) for n in "qkv")
        for n, t in zip("qkv", (q, k, v)):
            off = tensor(g, offs[n], n + "_offset")
            t.set_ragged_offset(off)
            pack_.update({t: bufs[n], off: offs[n]})
        o_buf = pack(o_ref.new_full(o_ref.shape, float("nan")), seq[0], float("nan")).to(E4M3)
    sc = {n: tensor(g, scalar(1.0), n) for n in ("dq", "dk", "dv", "ds", "ss", "so")}
    o, _, amax_s, amax_o = g.sdpa_fp8(q, k, v, *sc.values(), is_inference=True, attn_scale=scale,
                                      use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv, **extra)
    o.set_output(True).set_data_type(dt.FP8_E4M3).set_dim(list(o_buf.shape)).set_stride(list(o_buf.stride()))
    if layout == "ragged":
        o_off = tensor(g, offs["o"], "o_offset")
        o.set_ragged_offset(o_off)
        pack_[o_off] = offs["o"]
    amax_s.set_output(True)
    amax_o.set_output(True)
    vals = {"dq": x["dq"], "dk": x["dk"], "dv": x["dv"], "ds": 1.0 / FP8_MAX, "ss": FP8_MAX, "so": scale_o}
    pack_.update({sc[n]: scalar(val) for n, val in vals.items()})
    pack_.update({o: o_buf, amax_s: scalar(float("nan")), amax_o: scalar(float("nan"))})
    try:
        build_and_run(g, pack_)
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"FP8 attention with a {layout} layout has no engine on SM {sm()} with this cuDNN: {exc}")
    got = o_buf.float() / scale_o
    if layout == "ragged":
        got = unpack(got, seq[0])
    got_rows, want = valid_rows(got, lens), valid_rows(o_ref, lens)
    assert not got_rows.isnan().any(), "O has unwritten (NaN) elements in valid rows"
    err = rel_rms(got_rows, want)
    assert err < 0.08, f"O relative RMS error {err:.4f}"


def test_sdpa_fp8_philox_dropout_is_refused_before_it_runs() -> None:
    """The guard names the reason; nothing reaches the engine that faulted (the process goes on)."""
    x = fp8_inputs(2, 4, 4, 256, 128)
    g = graph()
    q, k, v = tensor(g, x["q"], "q"), tensor(g, x["k"], "k"), tensor(g, x["v"], "v")
    sc = [tensor(g, scalar(1.0), n) for n in ("dq", "dk", "dv", "ds", "ss", "so")]
    seed, offset = (tensor(g, torch.full((1, 1, 1, 1), 7, dtype=torch.int64, device=DEV), n) for n in ("seed", "off"))
    o, stats, amax_s, amax_o = g.sdpa_fp8(q, k, v, *sc, generate_stats=True, dropout=(0.2, seed, offset))
    for t in (o, stats, amax_s, amax_o):
        t.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="FP8 attention with Philox dropout"):
        g.build(HEUR)
    assert torch.ones(1, device=DEV).item() == 1.0  # the CUDA context is intact


BWD_CASES = {"d128": (2, 4, 4, 256, 128, False), "d128_causal": (2, 4, 4, 256, 128, True),
             "d128_gqa": (2, 8, 2, 256, 128, False), "d64": (2, 4, 4, 256, 64, True),
             "d128_dO_e5m2": (2, 4, 4, 256, 128, True, E5M2)}


@pytest.mark.parametrize("case", list(BWD_CASES))
def test_sdpa_fp8_backward(case: str) -> None:
    b, hq, hk, s, d, causal, *rest = BWD_CASES[case]
    grad_type = rest[0] if rest else E4M3
    x = fp8_inputs(b, hq, hk, s, d)
    scale = 1.0 / math.sqrt(d)
    leaves = [x[n + "_f"].clone().requires_grad_(True) for n in ("q", "k", "v")]
    o_ref, p_ref, stats_ref = attention_ref(*leaves, causal, scale)
    gen = torch.Generator(device=DEV).manual_seed(1)
    do8, ddo = quantize(torch.randn(o_ref.shape, generator=gen, device=DEV), grad_type)
    o8, dout = quantize(o_ref.detach())
    do_f = do8.float() * ddo
    o_ref.backward(do_f)
    dq_ref, dk_ref, dv_ref = (t.grad for t in leaves)
    rep = hq // hk
    vf = x["v_f"].repeat_interleave(rep, 1)
    d_row = (do_f * (o8.float() * dout)).sum(-1, keepdim=True)
    ds_ref = p_ref.detach() * (do_f @ vf.transpose(-1, -2) - d_row) * scale
    amax = {"dQ": dq_ref.abs().max().item(), "dK": dk_ref.abs().max().item(), "dV": dv_ref.abs().max().item(),
            "dP": ds_ref.abs().max().item()}
    scales = {n: 0.8 * FP8_MAX / a for n, a in amax.items()}
    g = graph()
    q, k, v = tensor(g, x["q"], "q"), tensor(g, x["k"], "k"), tensor(g, x["v"], "v")
    o, d_o = tensor(g, o8, "o"), tensor(g, do8, "dO")
    stats = tensor(g, stats_ref.detach().contiguous(), "stats")
    values = {"descale_q": x["dq"], "descale_k": x["dk"], "descale_v": x["dv"], "descale_o": dout,
              "descale_dO": ddo, "descale_s": 1.0 / FP8_MAX, "descale_dP": 1.0 / scales["dP"], "scale_s": FP8_MAX,
              "scale_dQ": scales["dQ"], "scale_dK": scales["dK"], "scale_dV": scales["dV"], "scale_dP": scales["dP"]}
    sc = {n: tensor(g, scalar(1.0), n) for n in values}
    if sm() < 100 and d != 128:
        with pytest.raises(GraphError, match="needs d_qk = d_v = 128"):
            outs = g.sdpa_fp8_backward(q, k, v, o, d_o, stats, **sc, attn_scale=scale, use_causal_mask=causal)
            for t in outs:
                t.set_output(True)
            g.validate()
            g.build_operation_graph()
        return
    outs = g.sdpa_fp8_backward(q, k, v, o, d_o, stats, **sc, attn_scale=scale, use_causal_mask=causal)
    for t in outs:
        t.set_output(True)
    grads = [torch.full(x[n].shape, float("nan"), device=DEV).to(E4M3) for n in ("q", "k", "v")]
    amaxes = [scalar(float("nan")) for _ in range(4)]
    pack = {q: x["q"], k: x["k"], v: x["v"], o: o8, d_o: do8, stats: stats_ref.detach().contiguous(),
            **{sc[n]: scalar(val) for n, val in values.items()}, **dict(zip(outs, grads + amaxes))}
    build_and_run(g, pack)
    for name, got8, want in zip(("dQ", "dK", "dV"), grads, (dq_ref, dk_ref, dv_ref)):
        got = got8.float() / scales[name]
        assert not got.isnan().any(), f"{name} has unwritten (NaN) elements"
        err = rel_rms(got, want)
        tol = 0.15 if grad_type == E4M3 else 0.25  # dO and dS in E5M2: 2 mantissa bits
        assert err < tol, f"{name} relative RMS error {err:.4f}"
    for name, t in zip(("dQ", "dK", "dV", "dP"), amaxes):
        assert close(t.item(), amax[name], 0.1), (name, t.item(), amax[name])


def test_sdpa_fp8_missing_scale_is_refused_before_the_backend() -> None:
    x = fp8_inputs(1, 2, 2, 128, 64)
    g = graph()
    q, k, v = tensor(g, x["q"], "q"), tensor(g, x["k"], "k"), tensor(g, x["v"], "v")
    sc = [tensor(g, scalar(1.0), f"s{i}") for i in range(6)]
    sc[4] = None  # scale_s
    g.sdpa_fp8(q, k, v, *sc, is_inference=True)
    with pytest.raises(GraphError, match="scale_s: is required"):
        g.validate()


# -- MXFP8 on a GPU that is not Blackwell ------------------------------------------------------------

def test_sdpa_mxfp8_build_names_the_architecture() -> None:
    if 100 <= sm() < 110:
        pytest.skip("this GPU is a Blackwell: MXFP8 attention may build here")
    g = graph()
    b, h, s, d = 1, 2, 128, 64
    q, k, v = (g.tensor(name=n, dim=[b, h, s, d], data_type=dt.FP8_E4M3) for n in ("q", "k", "v"))
    sf = {n: g.tensor(name=n, dim=dims, data_type=dt.FP8_E8M0,
                      reordering_type=cudnn.tensor_reordering.F8_128x4)
          for n, dims in (("sf_q", [b, h, 128, 4]), ("sf_k", [b, h, 128, 4]), ("sf_v", [b, h, 4, 64]))}
    o, _, amax = g.sdpa_mxfp8(q, k, v, sf["sf_q"], sf["sf_k"], sf["sf_v"], generate_stats=False)
    o.set_output(True)
    amax.set_output(True)
    g.validate()
    with pytest.raises(GraphError, match=rf"needs a Blackwell GPU \(SM 100 or newer\); this is SM {sm()}"):
        g.build_operation_graph()


# -- block scaling ------------------------------------------------------------------------------------

def mx_reference(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Float reference of MX block scaling along the last dim: the E8M0 exponent byte of the scale
    2^(floor(log2 amax) - 8) (E4M3's largest power of two is 2^8) and the dequantized values."""
    blocks = x.view(*x.shape[:-1], -1, block)
    amax = blocks.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -127)
    exp = torch.floor(torch.log2(amax)) - 8
    deq = (blocks / torch.exp2(exp)).clamp(-FP8_MAX, FP8_MAX).to(E4M3).float() * torch.exp2(exp)
    return (exp + 127).squeeze(-1), deq.view_as(x)


def unswizzle(raw: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[rows, cols] from the F8_128x4 layout: 128 x 4 tiles of 512 bytes, tiles row-block major;
    inside a tile element (r, c) sits at (r % 32) * 16 + (r // 32) * 4 + c."""
    r = torch.arange(rows, device=raw.device).view(-1, 1)
    c = torch.arange(cols, device=raw.device).view(1, -1)
    tile = (r // 128) * (cols // 4) + c // 4
    offset = tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    return raw.flatten()[offset]


def swizzle(scale: torch.Tensor) -> torch.Tensor:
    """The inverse of unswizzle: [rows, cols] bytes into the F8_128x4 layout (same shape)."""
    rows, cols = scale.shape
    r = torch.arange(rows, device=scale.device).view(-1, 1)
    c = torch.arange(cols, device=scale.device).view(1, -1)
    offset = ((r // 128) * (cols // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    out = torch.empty(rows * cols, dtype=scale.dtype, device=scale.device)
    out[offset.flatten()] = scale.flatten()
    return out.view(rows, cols)


def e8m0(raw: torch.Tensor) -> torch.Tensor:
    return raw.view(torch.float8_e8m0fnu) if hasattr(torch, "float8_e8m0fnu") else raw


def test_block_scale_quantize_round_trip() -> None:
    """X (float32, magnitudes from 1e-2 to 1e2 across columns) -> E4M3 Y + E8M0 scales per 32:
    Y * scale is within 5% RMS of X, and the scale exponents are the MX reference's (+-1)."""
    gen = torch.Generator(device=DEV).manual_seed(2)
    rows, cols = 128, 256
    x = torch.randn(1, rows, cols, generator=gen, device=DEV) * torch.logspace(-2, 2, cols, device=DEV)
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    xt = tensor(g, x, "x")
    y, scale = g.block_scale_quantize(xt, 32)
    y.set_data_type(dt.FP8_E4M3).set_output(True)
    scale.set_output(True)
    g.validate()
    assert scale.get_reordering_type() == cudnn.tensor_reordering.F8_128x4
    y_t = torch.full((1, rows, cols), float("nan"), device=DEV).to(E4M3)
    s_raw = torch.full((1, rows, cols // 32), 255, dtype=torch.uint8, device=DEV)
    try:
        build_and_run(g, {xt: x, y: y_t, scale: e8m0(s_raw)})
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"BLOCK_SCALE_QUANTIZE has no engine on SM {sm()} with this cuDNN: {exc}")
    got_exp = unswizzle(s_raw[0], rows, cols // 32).float()
    want_exp, want = mx_reference(x, 32)
    assert (got_exp - want_exp[0]).abs().max().item() <= 1, "scale exponents differ from the MX reference"
    deq = (y_t.float().view(1, rows, -1, 32) * torch.exp2(got_exp - 127).view(1, rows, -1, 1)).view_as(x)
    assert rel_rms(deq, x) < 0.05 and rel_rms(deq, want) < 0.05


def test_block_scale_dequantize_matmul() -> None:
    """dequantize(A) @ dequantize(B) with MX scales (blocks of 32 along K) against float32 on the
    dequantized values; the backend's block-scaled GEMMs need Blackwell, a refusal is a skip."""
    gen = torch.Generator(device=DEV).manual_seed(4)
    m, n, k = 128, 128, 256
    a_real, b_real = torch.randn(m, k, generator=gen, device=DEV), torch.randn(n, k, generator=gen, device=DEV)
    a_exp, _ = mx_reference(a_real, 32)
    b_exp, _ = mx_reference(b_real, 32)
    a8 = (a_real.view(m, -1, 32) / torch.exp2(a_exp - 127).unsqueeze(-1)).view(m, k).to(E4M3)
    b8 = (b_real.view(n, -1, 32) / torch.exp2(b_exp - 127).unsqueeze(-1)).view(n, k).to(E4M3)
    want = (a8.float().view(m, -1, 32) * torch.exp2(a_exp - 127).unsqueeze(-1)).view(m, k) @ \
        (b8.float().view(n, -1, 32) * torch.exp2(b_exp - 127).unsqueeze(-1)).view(n, k).t()
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    a_in, b_in = a8.unsqueeze(0), b8.unsqueeze(0).transpose(1, 2)  # B [1, k, n] column-major
    sa_in = e8m0(swizzle(a_exp.to(torch.uint8))).unsqueeze(0)  # [1, m, k/32]
    sb_in = e8m0(swizzle(b_exp.to(torch.uint8))).unsqueeze(0).transpose(1, 2)  # [1, k/32, n]
    at, bt = tensor(g, a_in, "a"), tensor(g, b_in, "b")
    sa = g.tensor(name="sa", dim=[1, m, k // 32], stride=[m * k // 32, k // 32, 1], data_type=dt.FP8_E8M0,
                  reordering_type=cudnn.tensor_reordering.F8_128x4)
    sb = g.tensor(name="sb", dim=[1, k // 32, n], stride=[n * k // 32, 1, k // 32], data_type=dt.FP8_E8M0,
                  reordering_type=cudnn.tensor_reordering.F8_128x4)
    c = g.matmul(g.block_scale_dequantize(at, sa, [1, 32]), g.block_scale_dequantize(bt, sb, [32, 1]),
                 compute_data_type=dt.FLOAT)
    c.set_output(True).set_data_type(dt.FLOAT)
    c_t = torch.full((1, m, n), float("nan"), device=DEV)
    try:
        build_and_run(g, {at: a_in, bt: b_in, sa: sa_in, sb: sb_in, c: c_t})
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"block-scaled matmul has no engine on SM {sm()} with this cuDNN: {exc}")
    assert rel_rms(c_t[0], want) < 1e-3


# -- FP8 matmul ---------------------------------------------------------------------------------------

def fp8_matmul_graph(a8: torch.Tensor, b8: torch.Tensor, out_dtype: torch.dtype
                     ) -> tuple[cudnn.pygraph, dict[str, Any]]:
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    a, b = tensor(g, a8, "a"), tensor(g, b8, "b")
    da, db, sc = (g.tensor(name=n, dim=[1, 1, 1], data_type=dt.FLOAT) for n in ("descale_a", "descale_b", "scale_c"))
    acc = g.matmul(a, b, compute_data_type=dt.FLOAT)
    acc = g.mul(g.mul(acc, da), db)
    c = g.mul(acc, sc)
    amax = g.reduction(acc, cudnn.reduction_mode.AMAX)
    c.set_output(True).set_data_type(CUDNN[out_dtype])
    amax.set_output(True).set_data_type(dt.FLOAT).set_dim([1, 1, 1])
    return g, {"a": a, "b": b, "da": da, "db": db, "sc": sc, "c": c, "amax": amax}


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, E4M3], ids=["bf16_out", "fp8_out"])
def test_fp8_matmul_against_scaled_mm(out_dtype: torch.dtype) -> None:
    m, n, k = 256, 512, 1024
    gen = torch.Generator(device=DEV).manual_seed(3)
    a8, da = quantize(torch.randn(m, k, generator=gen, device=DEV))
    bt8, db = quantize(torch.randn(n, k, generator=gen, device=DEV))
    b8 = bt8.t()  # [k, n] column-major: the layout FP8 GEMMs take
    sa, sb = torch.tensor(da, device=DEV), torch.tensor(db, device=DEV)
    want = torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    scale_c = 1.0 if out_dtype != E4M3 else 0.8 * FP8_MAX / want.abs().max().item()
    g, t = fp8_matmul_graph(a8.unsqueeze(0), b8.unsqueeze(0), out_dtype)
    c_t = torch.full((1, m, n), float("nan"), device=DEV).to(out_dtype)
    amax_t = torch.full((1, 1, 1), float("nan"), device=DEV)
    one = torch.ones(1, 1, 1, device=DEV)
    build_and_run(g, {t["a"]: a8.unsqueeze(0), t["b"]: b8.unsqueeze(0), t["da"]: one * da, t["db"]: one * db,
                      t["sc"]: one * scale_c, t["c"]: c_t, t["amax"]: amax_t})
    got = c_t[0].float() / scale_c
    assert not got.isnan().any()
    if out_dtype == torch.bfloat16:
        ref = torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16).float()
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=1e-1)
    else:  # within one E4M3 step (2^-3 relative) of the float result, or of a subnormal step
        assert ((got - want).abs() <= want.abs() / 8 + 2.0 ** -8 / scale_c).all()
    assert close(amax_t.item(), want.abs().max().item(), 1e-3), (amax_t.item(), want.abs().max().item())
