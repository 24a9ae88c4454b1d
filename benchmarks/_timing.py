"""GPU time of a callable for the benchmarks: CUDA events around back-to-back calls after a
warm-up; the median over repeats. Never used for assertions."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch


def gpu_time(fn: Callable[[], Any], calls: int, repeats: int, warmup: int = 3) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` batches of ``calls`` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)
