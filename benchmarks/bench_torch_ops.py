"""cudnn.ops against the torch ops they replace: forward and forward+backward GPU time, torch
eager and (with --compile) torch.compile side by side, and the Python overhead per call.

    PYTHONPATH=src python benchmarks/bench_torch_ops.py [--compile] [--repeats N] [--overhead-only]
                                                        [--profile CASE] [--cases TEXT]

GPU time: CUDA events around 20 back-to-back calls, median of the repeats (includes the host
time when the host is slower than the GPU, as a training step does). Overhead: the wall time
of one call on a tiny input, synchronized every 200 calls, so the host side dominates; the
lowest of 5 rounds alternating between cudnn.ops and torch
(without grad, and for the "fwd+bwd" rows a forward and backward with grad; the "new x" rows
take another input each call, as training does, so cuDNN needs a new variant pack); --profile CASE
prints a cProfile of one such case.
Ratios are torch time / cudnn time (above 1: cudnn-py faster). Attention, without and with
dropout, is compared twice: with the backend torch picks, and held to torch's flash backend.
Never asserts on time.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from _timing import gpu_time, settle
from torch.nn.attention import SDPBackend, sdpa_kernel

from cudnn import ops

DEV = "cuda"
H, B16 = torch.float16, torch.bfloat16


OVERHEAD_ROUNDS = 5


def gpu_ms(fn: Callable[[], object], repeats: int, inner: int = 20) -> float:
    return gpu_time(fn, inner, repeats) * 1e3


def host_us(fn: Callable[[], object], calls: int = 2000) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(calls):
        fn()
        if i % 200 == 199:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def fwd_bwd(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> Callable[[], None]:
    leaves = [t.detach().requires_grad_() for t in inputs]
    dy = torch.randn_like(fn(*leaves))

    def step() -> None:
        fn(*leaves).backward(dy)
    return step


def cases() -> dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], list[torch.Tensor]]]:
    torch.manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(32, 256, 56, 56, device=DEV, dtype=H).contiguous(memory_format=cl)
    w = (torch.randn(256, 256, 3, 3, device=DEV, dtype=H) / 48).contiguous(memory_format=cl)
    b = torch.randn(256, device=DEV, dtype=H)
    t = torch.randn(16384, 4096, device=DEV, dtype=B16)
    lw, lb = torch.ones(4096, device=DEV, dtype=B16), torch.zeros(4096, device=DEV, dtype=B16)
    lw32, lb32 = 1 + 0.1 * torch.randn(4096, device=DEV), 0.1 * torch.randn(4096, device=DEV)
    q = torch.randn(4, 16, 2048, 128, device=DEV, dtype=B16)
    bx = torch.randn(32, 256, 56, 56, device=DEV, dtype=H).contiguous(memory_format=cl)
    bw, bb = torch.ones(256, device=DEV), torch.zeros(256, device=DEV)
    rm, rv = 0.1 * torch.randn(256, device=DEV), 0.5 + torch.rand(256, device=DEV)
    return {
        "conv3x3+bias+relu 32x256x56x56 fp16 NHWC": (
            lambda x_, w_, b_: ops.conv2d_bias_act(x_, w_, b_, 1, 1, 1, 1, "relu"),
            lambda x_, w_, b_: F.relu(F.conv2d(x_, w_, b_, 1, 1)), [x, w, b]),
        "layer_norm 16384x4096 bf16": (
            lambda t_, w_, b_: ops.layer_norm(t_, [4096], w_, b_), lambda t_, w_, b_: F.layer_norm(t_, (4096,), w_, b_),
            [t, lw, lb]),
        "rms_norm 16384x4096 bf16": (
            lambda t_, w_: ops.rms_norm(t_, [4096], w_, 1e-6), lambda t_, w_: F.rms_norm(t_, (4096,), w_, 1e-6),
            [t, lw]),
        # fp32 weights with a bf16 input (mixed-precision training's master weights): torch refuses
        # the mix, so its side casts them to bf16 in the call
        "layer_norm 16384x4096 bf16, fp32 weight+bias": (
            lambda t_, w_, b_: ops.layer_norm(t_, [4096], w_, b_),
            lambda t_, w_, b_: F.layer_norm(t_, (4096,), w_.to(t_.dtype), b_.to(t_.dtype)), [t, lw32, lb32]),
        "rms_norm 16384x4096 bf16, fp32 weight": (
            lambda t_, w_: ops.rms_norm(t_, [4096], w_, 1e-6),
            lambda t_, w_: F.rms_norm(t_, (4096,), w_.to(t_.dtype), 1e-6), [t, lw32]),
        "batch_norm train 32x256x56x56 fp16 NHWC": (
            lambda x_, w_, b_: ops.batch_norm(x_, None, None, w_, b_, True),
            lambda x_, w_, b_: F.batch_norm(x_, None, None, w_, b_, True), [bx, bw, bb]),
        "batch_norm eval 32x256x56x56 fp16 NHWC": (
            lambda x_, w_, b_: ops.batch_norm(x_, rm, rv, w_, b_, False),
            lambda x_, w_, b_: F.batch_norm(x_, rm, rv, w_, b_, False), [bx, bw, bb]),
        "sdpa causal b4 h16 s2048 d128 bf16": (sdpa, torch_sdpa, [q, q.clone(), q.clone()]),
        "sdpa causal b4 h16 s2048 d128 bf16 vs flash": (sdpa, flash_sdpa, [q, q.clone(), q.clone()]),
        "sdpa causal dropout 0.1 b4 h16 s2048 d128 bf16": (
            partial(sdpa, dropout_p=0.1), partial(torch_sdpa, dropout_p=0.1), [q, q.clone(), q.clone()]),
        "sdpa causal dropout 0.1 b4 h16 s2048 d128 bf16 vs flash": (
            partial(sdpa, dropout_p=0.1), partial(flash_sdpa, dropout_p=0.1), [q, q.clone(), q.clone()]),
    }


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    return ops.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)


def torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """torch's SDPA with the backend torch picks (on an H200 with torch 2.11: its cuDNN backend,
    the kernels cudnn-py runs)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)


def flash_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """torch's SDPA held to its flash-attention backend."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true", help="also time torch.compile of the torch op")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--overhead-only", action="store_true", help="skip the GPU-time table")
    ap.add_argument("--profile", metavar="CASE", help="also cProfile one overhead case, e.g. layer_norm")
    ap.add_argument("--cases", metavar="TEXT", default="",
                    help="only the GPU-time cases whose name contains TEXT (e.g. batch_norm)")
    args = ap.parse_args()
    print(f"{'op':44} {'pass':8} {'cudnn ms':>9} {'torch ms':>9} {'ratio':>6}" + (f" {'compiled':>9} {'ratio':>6}"
                                                                                   if args.compile else ""))
    for name, (ours, theirs, inputs) in ({} if args.overhead_only else cases()).items():
        if args.cases not in name:
            continue
        for kind in ("fwd", "fwd+bwd"):
            # a graph that tries another lowering (fp32 norm weights) runs until it has decided
            if kind == "fwd":
                with torch.no_grad():
                    trial = settle(lambda: ours(*inputs))
                    a = gpu_ms(lambda: ours(*inputs), args.repeats)
                    b = gpu_ms(lambda: theirs(*inputs), args.repeats)
            else:
                trial = settle(fwd_bwd(ours, inputs))
                a, b = gpu_ms(fwd_bwd(ours, inputs), args.repeats), gpu_ms(fwd_bwd(theirs, inputs), args.repeats)
            line = f"{name:44} {kind:8} {a:9.3f} {b:9.3f} {b / a:6.2f}"
            if trial[0] > 1:
                line += f"  (lowering trial {'decided' if trial[2] else 'undecided'} after {trial[0]} calls)"
            if args.compile:
                comp = torch.compile(theirs)
                if kind == "fwd":
                    with torch.no_grad():
                        c = gpu_ms(lambda: comp(*inputs), args.repeats)
                else:
                    c = gpu_ms(fwd_bwd(comp, inputs), args.repeats)
                line += f" {c:9.3f} {c / a:6.2f}"
            print(line, flush=True)
    print("\nPython overhead per call (tiny inputs, host-bound), microseconds, the lowest of "
          f"{OVERHEAD_ROUNDS} alternating rounds each:")
    for name, (ours, theirs) in overhead_pairs().items():
        with torch.set_grad_enabled(name.endswith("fwd+bwd")):
            calls = 500 if name.endswith("fwd+bwd") else 2000
            a = b = float("inf")
            for _ in range(OVERHEAD_ROUNDS):  # alternating: a slow spell of the host hits both
                a, b = min(a, host_us(ours, calls)), min(b, host_us(theirs, calls))
        print(f"  {name:26} cudnn.ops {a:7.1f} us   torch {b:7.1f} us   ratio torch/cudnn {b / a:5.2f}", flush=True)
    if args.profile:
        profile(overhead_pairs()[args.profile][0], args.profile)


def overhead_pairs() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Each op on a tiny input next to the torch op it replaces (the host side dominates)."""
    cl = torch.channels_last
    tiny_x = torch.randn(1, 8, 8, 8, device=DEV, dtype=H).contiguous(memory_format=cl)
    tiny_w, tiny_b = torch.randn(8, 8, 3, 3, device=DEV, dtype=H), torch.randn(8, device=DEV, dtype=H)
    tiny_wl = tiny_w.contiguous(memory_format=cl)
    tiny_t, tiny_lw = torch.randn(8, 64, device=DEV, dtype=H), torch.ones(64, device=DEV, dtype=H)
    tiny_q = torch.randn(1, 1, 16, 64, device=DEV, dtype=H)
    bn_w, bn_b = torch.ones(8, device=DEV), torch.zeros(8, device=DEV)
    bn_rm, bn_rv = torch.zeros(8, device=DEV), torch.ones(8, device=DEV)
    gx, gwl, gb = (t.detach().clone().requires_grad_() for t in (tiny_x, tiny_wl, tiny_b))
    gt, glw = (t.detach().clone().requires_grad_() for t in (tiny_t, tiny_lw))
    gq = tiny_q.detach().clone().requires_grad_()
    gbx, gbw, gbb = (t.detach().clone().requires_grad_() for t in (tiny_x, bn_w, bn_b))
    # new input addresses on every call, as in training (more of them than a plan keeps packs for)
    many = itertools.cycle([tiny_x.clone() for _ in range(80)])
    return {
        "conv2d_bias_act": (lambda: ops.conv2d_bias_act(tiny_x, tiny_w, tiny_b, 1, 1, 1, 1, "relu"),
                            lambda: F.relu(F.conv2d(tiny_x, tiny_w, tiny_b, 1, 1))),
        "conv2d_bias_act NHWC w": (lambda: ops.conv2d_bias_act(tiny_x, tiny_wl, tiny_b, 1, 1, 1, 1, "relu"),
                                   lambda: F.relu(F.conv2d(tiny_x, tiny_wl, tiny_b, 1, 1))),
        "layer_norm": (lambda: ops.layer_norm(tiny_t, [64], tiny_lw, None),
                       lambda: F.layer_norm(tiny_t, (64,), tiny_lw)),
        "rms_norm": (lambda: ops.rms_norm(tiny_t, [64], tiny_lw, 1e-6),
                     lambda: F.rms_norm(tiny_t, (64,), tiny_lw, 1e-6)),
        "batch_norm train": (lambda: ops.batch_norm(tiny_x, None, None, bn_w, bn_b, True),
                             lambda: F.batch_norm(tiny_x, None, None, bn_w, bn_b, True)),
        "batch_norm eval": (lambda: ops.batch_norm(tiny_x, bn_rm, bn_rv, bn_w, bn_b, False),
                            lambda: F.batch_norm(tiny_x, bn_rm, bn_rv, bn_w, bn_b, False)),
        "conv2d_bias_act new x": (lambda: ops.conv2d_bias_act(next(many), tiny_wl, tiny_b, 1, 1, 1, 1, "relu"),
                                  lambda: F.relu(F.conv2d(next(many), tiny_wl, tiny_b, 1, 1))),
        "batch_norm train new x": (lambda: ops.batch_norm(next(many), None, None, bn_w, bn_b, True),
                                   lambda: F.batch_norm(next(many), None, None, bn_w, bn_b, True)),
        "sdpa": (lambda: ops.scaled_dot_product_attention(tiny_q, tiny_q, tiny_q),
                 lambda: F.scaled_dot_product_attention(tiny_q, tiny_q, tiny_q)),
        "conv2d_bias_act fwd+bwd": (lambda: ops.conv2d_bias_act(gx, gwl, gb, 1, 1, 1, 1, "relu").sum().backward(),
                                    lambda: F.relu(F.conv2d(gx, gwl, gb, 1, 1)).sum().backward()),
        "layer_norm fwd+bwd": (lambda: ops.layer_norm(gt, [64], glw, None).sum().backward(),
                               lambda: F.layer_norm(gt, (64,), glw).sum().backward()),
        "rms_norm fwd+bwd": (lambda: ops.rms_norm(gt, [64], glw, 1e-6).sum().backward(),
                             lambda: F.rms_norm(gt, (64,), glw, 1e-6).sum().backward()),
        "batch_norm fwd+bwd": (lambda: ops.batch_norm(gbx, None, None, gbw, gbb, True).sum().backward(),
                               lambda: F.batch_norm(gbx, None, None, gbw, gbb, True).sum().backward()),
        "batch_norm eval fwd+bwd": (
            lambda: ops.batch_norm(gbx, bn_rm, bn_rv, gbw, gbb, False).sum().backward(),
            lambda: F.batch_norm(gbx, bn_rm, bn_rv, gbw, gbb, False).sum().backward()),
        "sdpa fwd+bwd": (lambda: ops.scaled_dot_product_attention(gq, gq, gq).sum().backward(),
                         lambda: F.scaled_dot_product_attention(gq, gq, gq).sum().backward()),
        "sdpa dropout fwd+bwd": (
            lambda: ops.scaled_dot_product_attention(gq, gq, gq, dropout_p=0.1).sum().backward(),
            lambda: F.scaled_dot_product_attention(gq, gq, gq, dropout_p=0.1).sum().backward()),
    }


def profile(fn: Callable[[], object], name: str, calls: int = 5000) -> None:
    """cProfile of ``calls`` calls of one overhead case: where the host time goes."""
    import cProfile
    import pstats

    with torch.set_grad_enabled(name.endswith("fwd+bwd")):  # a backward's Python runs on autograd's
        fn()                                                  # own thread, which cProfile does not see
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
    torch.cuda.synchronize()
    print(f"\ncProfile of {calls} calls of {name}:")
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
