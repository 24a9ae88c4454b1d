"""GPU time of a callable for the benchmarks: CUDA events around back-to-back calls after a
warm-up; the median over repeats. Never used for assertions."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def gpu_time(fn: Callable[[], Any], calls: int, repeats: int, warmup: int = 3, spin: int = 0) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` batches of ``calls`` calls; ``spin``:
    GPU cycles of a spin queued ahead of each batch (see `kernel_time`)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if spin:
            torch.cuda._sleep(spin)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def kernel_time(fn: Callable[[], Any], calls: int, repeats: int, host_secs: float, warmup: int = 3) -> float:
    """Median seconds of GPU work per call of ``fn``, without the host's share: each batch is
    queued behind a GPU spin longer than the host takes to issue it (``host_secs`` per call,
    measured before), so the events time the kernels back to back even where issuing a call
    takes longer than running it."""
    spin = int(min(max(3 * host_secs * calls * 2e9, 2e6), 4e9))  # cycles, at ~2 GHz, three times the issue time
    return gpu_time(fn, calls, repeats, warmup, spin)


def host_time(fn: Callable[[], Any], calls: int = 200, repeats: int = 5) -> float:
    """Seconds of host time per call of ``fn``: back-to-back calls, not synchronized; the median
    of ``repeats`` batches of ``calls`` (each begun with the GPU idle, so a batch whose calls
    queue faster than the GPU runs them is not slowed by a full launch queue left over)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return statistics.median(times)


def settle(fn: Callable[[], Any], limit_s: float = 60.0) -> tuple[int, float, bool]:
    """Call ``fn`` (synchronized) until the lowering trials it started have decided
    (`cudnn.lowering_trials_pending` back to its count before the first call), at most
    ``limit_s`` seconds: (calls, seconds, settled). A graph whose norm offers a faster lowering
    switches to it only after a few executes (docs/guide/plans-and-caches.md); timing it before
    that would time the trial."""
    import cudnn

    before = cudnn.lowering_trials_pending()
    t0 = time.perf_counter()
    calls = 0
    fn()
    torch.cuda.synchronize()
    calls += 1
    while cudnn.lowering_trials_pending() > before and time.perf_counter() - t0 < limit_s:
        fn()
        torch.cuda.synchronize()
        calls += 1
    return calls, time.perf_counter() - t0, cudnn.lowering_trials_pending() <= before
