"""Where a data-parallel training step of ResNet-50 goes, per rank: forward, backward (host
time to launch it and time to finish it), optimizer step, and cuDNN graphs built per step, with
the gradient all-reduce (even steps) and without it (odd steps, under ``no_sync``), for the
model of examples/torch_models.py with cudnn ops and with torch's own modules. Each rank trains
on 256 / world_size images (bf16 autocast, NHWC).

    PYTHONPATH=src torchrun --nproc-per-node 1 benchmarks/bench_ddp_breakdown.py
    PYTHONPATH=src torchrun --nproc-per-node 2 benchmarks/bench_ddp_breakdown.py

A rank whose forward takes as long at half the batch is bound by host time; a rank whose
backward is much longer with the all-reduce than without it is waiting for a slower rank.
Medians of the steps after the first four; prints, never asserts on time.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_models import ResNet50

from cudnn.ops import _runtime as rt

STEPS, GLOBAL_BATCH = 14, 256


def measure(model: DDP, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
            sync: bool) -> tuple[float, ...]:
    """One step: forward, backward host, backward, optimizer (ms) and graphs built."""
    built = rt.CACHE.builds
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with model.no_sync() if not sync else contextlib.nullcontext():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        launched = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    opt.step()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    return (t1 - t0) * 1e3, (launched - t1) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, rt.CACHE.builds - built


def main() -> None:
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    per = GLOBAL_BATCH // world
    for cudnn_ops in (True, False):
        torch.manual_seed(0)
        model = DDP(ResNet50(cudnn=cudnn_ops).to(dev).to(memory_format=torch.channels_last), device_ids=[dev.index])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(per, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (per,), device=dev)
        rows = [(step % 2 == 0, measure(model, opt, x, y, step % 2 == 0)) for step in range(STEPS)][4:]
        for sync in (True, False):
            kept = [r for s, r in rows if s == sync]
            fwd, host, bwd, step, builds = (statistics.median(r[i] for r in kept) for i in range(5))
            name, reduce = "cudnn ops" if cudnn_ops else "torch", "on " if sync else "off"
            print(f"rank {rank}/{world} {name:9} all-reduce {reduce}: "
                  f"forward {fwd:.1f} ms, backward launched in {host:.1f} ms and done in {bwd:.1f} ms, "
                  f"optimizer {step:.1f} ms, graphs built per step {builds:.0f}", flush=True)
        del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
