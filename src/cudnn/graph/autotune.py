"""Autotuning: time every buildable plan on the caller's buffers, keep the fastest.

Each plan runs ``warmup`` times, then ``repeats`` times between CUDA events on the handle's
stream; the median is its time. Plans that fail to build or run are reported, not fatal.
A progress line goes to stderr when tuning takes more than a second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lib.enums import build_plan_policy
from .._lib.errors import CudnnError
from ..backend.handle import get_stream

if TYPE_CHECKING:
    from .pipeline import Pipeline


@dataclass(frozen=True)
class TuneResult:
    """One plan's line in the autotuning table."""

    index: int
    name: str
    time_ms: float | None  # median; None when the plan could not run
    workspace: int
    error: str = ""

    def __str__(self) -> str:
        t = f"{self.time_ms * 1e3:10.2f} us" if self.time_ms is not None else f"{'failed':>13s}"
        return f"{self.index:3d}  {self.name:48s} {t}  ws {self.workspace:>10d}  {self.error}"


class TuneReport(list):  # type: ignore[type-arg]
    """The results, fastest first, with a readable table as str()."""

    def __str__(self) -> str:
        head = f"{'#':>3s}  {'plan':48s} {'median':>13s}  {'workspace':>13s}"
        return "\n".join([head] + [str(r) for r in self])

    @property
    def best(self) -> TuneResult:
        return self[0]


def autotune(p: Pipeline, variant_pack: Mapping[Any, Any], workspace: Any = None, handle: Any = None,
             warmup: int = 3, repeats: int = 10, progress: bool | None = None) -> TuneReport:
    """Time all candidate plans of a pipeline with real buffers; select the fastest.

    ``workspace`` may be None: a buffer as large as the largest plan needs is allocated.
    """
    import statistics

    from .._lib import cuda

    if warmup < 0 or repeats < 1:
        raise ValueError(f"autotune: warmup must be >= 0 and repeats >= 1, got {warmup}, {repeats}")
    p.build_plans(build_plan_policy.ALL)
    plans = p.plans()
    cands = plans.candidates
    need = max([p.workspace_size(c) for c in cands if c.plan is not None] + [0])
    own_ws = None
    if workspace is None and need:
        own_ws = cuda.DeviceBuffer(need)
        workspace = own_ws.ptr
    h = handle if handle is not None else p.handle()
    stream = get_stream(h)
    start, end = cuda.Event(), cuda.Event()
    results: list[TuneResult] = []
    began = time.perf_counter()
    show = progress
    for i, c in enumerate(cands):
        if show is None and time.perf_counter() - began > 1.0:
            show = True
        if show:
            print(f"\rautotuning {p.label}: plan {i + 1}/{len(cands)} {c.name[:40]:40s}", end="",
                  file=sys.stderr, flush=True)
        if c.plan is None:
            results.append(TuneResult(i, c.name, None, 0, c.error.status_name if c.error else "not built"))
            continue
        try:
            runner = p.runner(c)
            for _ in range(warmup):
                runner.run(variant_pack, workspace, h)
            times = []
            for _ in range(repeats):
                start.record(stream)
                runner.run(variant_pack, workspace, h)
                end.record(stream)
                end.synchronize()
                times.append(start.elapsed_ms(end))
            results.append(TuneResult(i, c.name, statistics.median(times), int(c.workspace or 0)))
        except CudnnError as exc:
            results.append(TuneResult(i, c.name, None, int(c.workspace or 0), exc.status_name))
    if show:
        print(file=sys.stderr)
    if own_ws is not None:
        cuda.synchronize()
        own_ws.close()
    report = TuneReport(sorted(results, key=lambda r: (r.time_ms is None, r.time_ms or 0.0)))
    if not report or report.best.time_ms is None:
        raise plans.not_supported(cands)
    p.select(cands[report.best.index])
    return report
