"""Low precision: FP8 attention and FP8 matmul against their bf16 counterparts and PyTorch.

    PYTHONPATH=src python benchmarks/bench_fp8.py            # attention and matmul
    PYTHONPATH=src python benchmarks/bench_fp8.py --quick    # fewer repeats

Attention: b4 h16 s4096 d128 causal, forward and backward: cudnn-py's sdpa_fp8 (E4M3, per-tensor
scales) against cudnn-py's bf16 sdpa and torch's bf16 SDPA (cuDNN and flash backends).
Matmul: 8192^3: cudnn-py's FP8 matmul graph (matmul + descale/scale [+ AMAX]; bf16 and E4M3 output;
the heuristics' first plan, and the fastest of all plans after autotune) against cudnn-py's bf16
matmul, torch bf16 matmul and torch._scaled_mm.
Timing: CUDA events around back-to-back calls after warm-up; median of the repeats; TFLOP/s and
the ratio to the first row of each block. Never asserts on time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from _timing import gpu_time
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudnn

dt = cudnn.data_type
E4M3 = torch.float8_e4m3fn
CUDNN = {torch.bfloat16: dt.BFLOAT16, torch.float32: dt.FLOAT, E4M3: dt.FP8_E4M3}
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def tensor(g: cudnn.pygraph, t: torch.Tensor, name: str) -> cudnn.tensor:
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=CUDNN[t.dtype])


def runner(g: cudnn.pygraph, pack: dict[Any, torch.Tensor], tune: bool = False) -> Callable[[], None]:
    """Build with the heuristics' plans (``tune``: time them all and keep the fastest)."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(HEUR)
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL if tune else cudnn.build_plan_policy.HEURISTICS_CHOICE)
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    if tune:
        g.autotune(pack, ws, progress=False)
        ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    return lambda: g.execute(pack, ws)


def one() -> torch.Tensor:
    return torch.ones(1, 1, 1, 1, device="cuda")


def fp8_attention(b: int, h: int, s: int, d: int, backward: bool) -> Callable[[], None]:
    q, k, v, o, d_o = (torch.randn(b, h, s, d, device="cuda").to(E4M3) for _ in range(5))
    stats = torch.randn(b, h, s, 1, device="cuda")
    g = cudnn.pygraph(io_data_type=dt.FP8_E4M3, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    tq, tk, tv = tensor(g, q, "q"), tensor(g, k, "k"), tensor(g, v, "v")
    if not backward:
        names = ["descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"]
        sc = {n: tensor(g, one(), n) for n in names}
        out = g.sdpa_fp8(tq, tk, tv, *sc.values(), generate_stats=True, attn_scale=d ** -0.5, use_causal_mask=True)
        bufs = [torch.empty_like(q), torch.empty_like(stats), torch.empty(1, 1, 1, 1, device="cuda"),
                torch.empty(1, 1, 1, 1, device="cuda")]
        pack = {tq: q, tk: k, tv: v}
    else:
        names = ["descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP",
                 "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP"]
        sc = {n: tensor(g, one(), n) for n in names}
        to, tdo, ts = tensor(g, o, "o"), tensor(g, d_o, "dO"), tensor(g, stats, "stats")
        out = g.sdpa_fp8_backward(tq, tk, tv, to, tdo, ts, **sc, attn_scale=d ** -0.5, use_causal_mask=True)
        bufs = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)] + [
            torch.empty(1, 1, 1, 1, device="cuda") for _ in range(4)]
        pack = {tq: q, tk: k, tv: v, to: o, tdo: d_o, ts: stats}
    for t in out:
        t.set_output(True)
    pack.update({t: one() for t in sc.values()})
    pack.update(dict(zip(out, bufs)))
    return runner(g, pack)


def bf16_attention(b: int, h: int, s: int, d: int, backward: bool) -> Callable[[], None]:
    q, k, v, o, d_o = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(5))
    stats = torch.randn(b, h, s, 1, device="cuda")
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    tq, tk, tv = tensor(g, q, "q"), tensor(g, k, "k"), tensor(g, v, "v")
    if not backward:
        out = list(g.sdpa(tq, tk, tv, generate_stats=True, attn_scale=d ** -0.5, use_causal_mask=True))
        pack = {tq: q, tk: k, tv: v, out[0]: torch.empty_like(q), out[1]: torch.empty_like(stats)}
    else:
        to, tdo, ts = tensor(g, o, "o"), tensor(g, d_o, "dO"), tensor(g, stats, "stats")
        out = g.sdpa_backward(tq, tk, tv, to, tdo, ts, attn_scale=d ** -0.5, use_causal_mask=True)
        pack = {tq: q, tk: k, tv: v, to: o, tdo: d_o, ts: stats,
                **dict(zip(out, (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))))}
    for t in out:
        t.set_output(True)
    return runner(g, pack)


def torch_attention(b: int, h: int, s: int, d: int, backward: bool, backend: SDPBackend) -> Callable[[], None]:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward) for _ in range(3))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    d_o = torch.randn_like(o)

    def fwd() -> None:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def bwd() -> None:
        torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True)

    return bwd if backward else fwd


def fp8_matmul(n: int, out: torch.dtype, amax_out: bool = True, tune: bool = False) -> Callable[[], None]:
    a = torch.randn(1, n, n, device="cuda").to(E4M3)
    b = torch.randn(1, n, n, device="cuda").to(E4M3).transpose(1, 2)  # column-major B
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    ta, tb = tensor(g, a, "a"), tensor(g, b, "b")
    da, db, sc = (g.tensor(name=x, dim=[1, 1, 1], data_type=dt.FLOAT) for x in ("da", "db", "sc"))
    acc = g.mul(g.mul(g.matmul(ta, tb, compute_data_type=dt.FLOAT), da), db)
    c = g.mul(acc, sc)
    c.set_output(True).set_data_type(CUDNN[out])
    s = torch.ones(1, 1, 1, device="cuda")
    pack = {ta: a, tb: b, da: s, db: s, sc: s, c: torch.empty(1, n, n, device="cuda", dtype=out)}
    if amax_out:
        amax = g.reduction(acc, cudnn.reduction_mode.AMAX)
        amax.set_output(True).set_data_type(dt.FLOAT).set_dim([1, 1, 1])
        pack[amax] = torch.empty(1, 1, 1, device="cuda")
    return runner(g, pack, tune)


def bf16_matmul(n: int) -> Callable[[], None]:
    a, b = (torch.randn(1, n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    ta, tb = tensor(g, a, "a"), tensor(g, b, "b")
    c = g.matmul(ta, tb, compute_data_type=dt.FLOAT)
    c.set_output(True).set_data_type(dt.BFLOAT16)
    return runner(g, {ta: a, tb: b, c: torch.empty(1, n, n, device="cuda", dtype=torch.bfloat16)})


def scaled_mm(n: int) -> Callable[[], None]:
    a = torch.randn(n, n, device="cuda").to(E4M3)
    b = torch.randn(n, n, device="cuda").to(E4M3).t()
    s = torch.tensor(1.0, device="cuda")
    return lambda: torch._scaled_mm(a, b, scale_a=s, scale_b=s, out_dtype=torch.bfloat16)


def torch_matmul(n: int) -> Callable[[], None]:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return lambda: a @ b


def block(title: str, flops: float, rows: list[tuple[str, Callable[[], Callable[[], None]]]], calls: int,
          repeats: int) -> None:
    print(f"\n{title}")
    base = None
    for label, make in rows:
        try:
            sec = gpu_time(make(), calls, repeats)
        except Exception as exc:  # noqa: BLE001 - a row the GPU cannot run is reported, not fatal
            print(f"  {label:<40} refused: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        base = base or sec
        print(f"  {label:<40} {sec * 1e3:9.3f} ms  {flops / sec / 1e12:8.1f} TFLOP/s  x{base / sec:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    calls, repeats = (3, 3) if args.quick else (10, 7)
    print(f"{torch.cuda.get_device_name()}  cuDNN {cudnn.backend_version_string()}  torch {torch.__version__}")
    b, h, s, d = 4, 16, 4096, 128
    fwd_flops = 4.0 * b * h * s * s * d * 0.5
    for backward in (False, True):
        flops = fwd_flops * (2.5 if backward else 1.0)
        block(f"attention {'backward' if backward else 'forward'} b{b} h{h} s{s} d{d} causal (ratio: to the FP8 row)",
              flops, [
                  ("cudnn-py sdpa_fp8 (E4M3)", lambda bw=backward: fp8_attention(b, h, s, d, bw)),
                  ("cudnn-py sdpa bf16", lambda bw=backward: bf16_attention(b, h, s, d, bw)),
                  ("torch SDPA bf16 (cuDNN backend)",
                   lambda bw=backward: torch_attention(b, h, s, d, bw, SDPBackend.CUDNN_ATTENTION)),
                  ("torch SDPA bf16 (flash backend)",
                   lambda bw=backward: torch_attention(b, h, s, d, bw, SDPBackend.FLASH_ATTENTION)),
              ], calls, repeats)
    n = 8192
    block(f"matmul {n}^3 (ratio: to the first row)", 2.0 * n ** 3, [
        ("cudnn-py FP8 matmul, bf16 out + amax", lambda: fp8_matmul(n, torch.bfloat16)),
        ("cudnn-py FP8 matmul, bf16 out + amax, tuned", lambda: fp8_matmul(n, torch.bfloat16, tune=True)),
        ("cudnn-py FP8 matmul, bf16 out", lambda: fp8_matmul(n, torch.bfloat16, amax_out=False)),
        ("cudnn-py FP8 matmul, E4M3 out + amax", lambda: fp8_matmul(n, E4M3)),
        ("torch._scaled_mm E4M3 -> bf16", lambda: scaled_mm(n)),
        ("cudnn-py matmul bf16", lambda: bf16_matmul(n)),
        ("torch matmul bf16", lambda: torch_matmul(n)),
    ], calls, repeats)


if __name__ == "__main__":
    main()
