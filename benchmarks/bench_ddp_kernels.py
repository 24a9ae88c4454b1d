"""Where a data-parallel step loses against a perfect 1/N: GPU time per kernel of the training
step of examples/torch_ddp_train.py, on one GPU and on N, side by side.

    PYTHONPATH=src:examples torchrun --nproc-per-node 1 benchmarks/bench_ddp_kernels.py --out k1.json
    PYTHONPATH=src:examples torchrun --nproc-per-node 2 benchmarks/bench_ddp_kernels.py --out k2.json
    python benchmarks/bench_ddp_kernels.py --compare k1.json k2.json
        [--model resnet|gpt] [--torch-modules] [--batch N] [--steps 3]

Each run trains the example's model on the same global batch (each rank on its share, DDP as the
example wraps it), warms up, then records the kernels of ``--steps`` back-to-back steps on rank 0
with torch.profiler. A run prints, per step: the span from the first kernel to the last, the
time some non-NCCL kernel runs ("compute"), the NCCL kernels' time and the part of it no
other kernel overlaps ("exposed"), and the time no kernel runs ("idle"); ``--out`` keeps those
and the GPU time of every kernel name. ``--compare`` prints, per kernel name, its time on N GPUs
minus 1/N of its time on one: what keeps the step from halving (a kernel that does not shrink
with its batch, NCCL waiting for the slower rank). Prints; never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Microseconds covered by at least one of the (start, end) intervals."""
    total, start, end = 0.0, None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start  # type: ignore[operator]
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start  # type: ignore[operator]
    return total


def timeline(events: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Per-step totals (ms) of a chrome trace's GPU events, and microseconds per kernel name."""
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        raise SystemExit("the profiler recorded no GPU kernels")
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in gpu]
    nccl = [(s, e) for (s, e), ev in zip(spans, gpu) if "nccl" in ev["name"].lower()]
    compute = [(s, e) for (s, e), ev in zip(spans, gpu) if "nccl" not in ev["name"].lower()]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    busy, busy_compute = union_us(spans), union_us(compute)
    kernels: dict[str, float] = defaultdict(float)
    for ev in gpu:
        kernels[re.sub(r"\s+", " ", ev["name"])[:160]] += ev["dur"] / steps
    per_step = 1e3 * steps
    return {"span_ms": (last - first) / per_step, "compute_ms": busy_compute / per_step,
            "nccl_ms": union_us(nccl) / per_step, "nccl_exposed_ms": (busy - busy_compute) / per_step,
            "idle_ms": (last - first - busy) / per_step, "kernels_per_step": len(gpu) / steps,
            "kernels_us": dict(kernels)}


def record(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch_ddp_train as example
    from torch.profiler import ProfilerActivity, profile

    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = args.batch or (1024 if args.model == "resnet" else 32)
    model = example.build(args.model, 4, False, device, cudnn=not args.torch_modules)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = list(example.batches(args.model, 6 + args.steps, batch, rank, world, device, 224))
    for x, y in data[:6]:  # graphs built, allocator and DDP buckets settled
        example.train_step(model, opt, x, y)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, y in data[6:]:
            example.train_step(model, opt, x, y)
        torch.cuda.synchronize()
    if rank == 0:
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(trace))
            events = json.loads(trace.read_text())["traceEvents"]
        result = {"model": args.model, "modules": "torch" if args.torch_modules else "cudnn", "world": world,
                  "global_batch": batch, **timeline(events, args.steps)}
        print(f"{args.model} ({result['modules']} modules), world {world}, global batch {batch}, per step: "
              f"span {result['span_ms']:.2f} ms, compute {result['compute_ms']:.2f} ms, NCCL "
              f"{result['nccl_ms']:.2f} ms ({result['nccl_exposed_ms']:.2f} exposed), idle {result['idle_ms']:.2f} ms, "
              f"{result['kernels_per_step']:.0f} kernels", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()


def compare(one_path: str, many_path: str, rows: int) -> None:
    one, many = json.loads(Path(one_path).read_text()), json.loads(Path(many_path).read_text())
    n = many["world"] / one["world"]
    print(f"{one['model']} ({one['modules']} modules), global batch {one['global_batch']}: world {one['world']} "
          f"-> {many['world']}")
    for key in ("span_ms", "compute_ms", "nccl_ms", "nccl_exposed_ms", "idle_ms"):
        print(f"  {key:16} {one[key]:8.2f} -> {many[key]:8.2f}   (1/{n:g} of the first: {one[key] / n:8.2f})")
    print(f"  scaling of the span: {one['span_ms'] / many['span_ms']:.2f}x")
    names = set(one["kernels_us"]) | set(many["kernels_us"])
    excess = sorted(((many["kernels_us"].get(k, 0.0) - one["kernels_us"].get(k, 0.0) / n, k) for k in names),
                    reverse=True)
    print(f"\n  kernel time on {many['world']} GPUs beyond 1/{n:g} of one GPU's, ms per step "
          f"(total {sum(e for e, _ in excess) / 1e3:.2f}):")
    for extra, name in excess[:rows]:
        print(f"  {extra / 1e3:7.3f}   {one['kernels_us'].get(name, 0.0) / 1e3:8.3f} -> "
              f"{many['kernels_us'].get(name, 0.0) / 1e3:8.3f}   {name[:100]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("resnet", "gpt"), default="resnet")
    ap.add_argument("--torch-modules", action="store_true", help="the example's torch twins, not cudnn's")
    ap.add_argument("--batch", type=int, default=0, help="global batch (default: the example's)")
    ap.add_argument("--steps", type=int, default=3, help="steps recorded")
    ap.add_argument("--out", help="write the run's totals and per-kernel times here (rank 0)")
    ap.add_argument("--compare", nargs=2, metavar=("ONE_GPU_JSON", "N_GPU_JSON"))
    ap.add_argument("--rows", type=int, default=15, help="kernels listed by --compare")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare, rows=args.rows)
    else:
        record(args)


if __name__ == "__main__":
    main()
