"""MoE grouped matmul: cuDNN (cudnn.experimental.moe_grouped_matmul, NONE mode) against a PyTorch
loop of per-expert matmuls and against torch's grouped matmul where it has one, side by side.

    python benchmarks/bench_moe.py
"""

from __future__ import annotations

import torch

from cudnn.experimental import moe_grouped_matmul


def timed(fn, iters: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1000.0  # us


def main() -> None:
    print(f"{'experts':>7} {'rows':>6} {'K':>5} {'N':>5}  {'cudnn us':>9} {'torch loop us':>13}  loop/cudnn")
    for experts, rows, k, n in [(8, 4096, 1024, 2048), (8, 16384, 4096, 1024), (64, 8192, 2048, 1024)]:
        per = rows // experts
        token = torch.randn(1, rows, k, device="cuda", dtype=torch.bfloat16)
        w_raw = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)
        weight = w_raw.transpose(1, 2)
        fto = (torch.arange(experts, dtype=torch.int32, device="cuda") * per).reshape(-1, 1, 1)
        out = torch.empty(1, rows, n, device="cuda", dtype=torch.bfloat16)

        def loop() -> None:
            for e in range(experts):
                torch.matmul(token[0, e * per:(e + 1) * per], weight[e], out=out[0, e * per:(e + 1) * per])

        cu = timed(lambda: moe_grouped_matmul(token, weight, fto))
        tl = timed(loop)
        print(f"{experts:>7} {rows:>6} {k:>5} {n:>5}  {cu:>9.1f} {tl:>13.1f}  {tl / cu:>9.2f}x")


if __name__ == "__main__":
    main()
