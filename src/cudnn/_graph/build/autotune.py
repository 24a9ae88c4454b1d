"""Autotuning: time every buildable plan on the caller's buffers, keep the fastest.

Each plan runs ``warmup`` times (at least `execute.REPLAY_AFTER` while executes are replayed,
so that a pack's capture never falls inside the timed runs), then ``repeats`` times between
CUDA events on the handle's stream; the median is its time. Plans that fail to build or run
are reported, not fatal; so are plans that need more workspace than the caller passed. When
a composite offers several lowerings (attention: the unified SDPA_FWD operation or the
composite graph), each lowering's plans are timed and the fastest of all wins. Plans are
finalized on several threads (_graph/plans/threads.py, ``CUDNN_PY_BUILD_THREADS``), then timed one
after another on the handle's stream. Tuning that
takes more than a second shows its progress (tqdm's bar when tqdm is installed, else a line
on stderr).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._lib.enums import build_plan_policy
from ..._lib.status import CudnnError
from ...backend.handle import get_stream
from ...backend.replay import execute_replay
from ..model.arguments import check_variant_pack
from ..model.graph_errors import GraphError
from ..run.bindings import workspace_capacity
from ..run.runner import REPLAY_AFTER
from .pipeline import DEFAULT_HEURISTICS
from .plan_report import Progress

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
    lowering: str = ""  # the composite lowering the plan belongs to, where a graph has several

    def __str__(self) -> str:
        t = f"{self.time_ms * 1e3:10.2f} us" if self.time_ms is not None else f"{'failed':>13s}"
        name = f"[{self.lowering}] {self.name}" if self.lowering else self.name
        return f"{self.index:3d}  {name:48s} {t}  ws {self.workspace:>10d}  {self.error}"


class TuneReport(list[TuneResult]):
    """The results, fastest first, with a readable table as str()."""

    def __str__(self) -> str:
        head = f"{'#':>3s}  {'plan':48s} {'median':>13s}  {'workspace':>13s}"
        return "\n".join([head] + [str(r) for r in self])

    @property
    def best(self) -> TuneResult:
        return self[0]


def check_arguments(variant_pack: Any, warmup: Any, repeats: Any, max_plans: Any) -> None:
    """What `autotune` is given, checked before anything needs a GPU: a dict of buffers, counts."""
    check_variant_pack(variant_pack, "autotune", "variant_pack")
    for name, value in (("warmup", warmup), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"autotune: {name}: expected an int, got {value!r}")
    if warmup < 0 or repeats < 1:
        raise ValueError(f"autotune: warmup must be >= 0 and repeats >= 1, got {warmup}, {repeats}")
    if max_plans is not None and (isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1):
        raise ValueError(f"autotune: max_plans must be None or an int >= 1, got {max_plans!r}")


def autotune(p: Pipeline, variant_pack: Mapping[Any, Any], workspace: Any = None, handle: Any = None,
             warmup: int = 3, repeats: int = 10, progress: bool | None = None,
             alternatives: Sequence[Pipeline] = (), max_plans: int | None = None) -> tuple[Pipeline, TuneReport]:
    """Time all candidate plans of ``p`` (and of each alternative lowering of the same graph;
    with ``max_plans``, the first that many of each) with real buffers; select the fastest and
    return the pipeline that holds it, and the table.

    ``workspace`` may be None: a buffer as large as the largest plan needs is allocated. Given
    a workspace, plans that need more than it holds are reported and skipped, so the caller's
    buffer stays valid for whatever is selected."""
    check_arguments(variant_pack, warmup, repeats, max_plans)
    capacity = workspace_capacity(workspace) if workspace is not None else None
    h = handle if handle is not None else p.handle()
    timer = _Timer(p.label, get_stream(h), progress)
    found: list[tuple[Pipeline, TuneResult]] = []
    for q in (p, *alternatives):
        tag = q.lowering_name() if alternatives else ""
        try:
            if q is not p:
                q.create_plans(DEFAULT_HEURISTICS)
            q.build_plans(build_plan_policy.ALL, max_plans)
        except (CudnnError, GraphError) as exc:
            if q is p:
                raise
            found.append((q, TuneResult(-1, "(no plan)", None, 0, _short(exc), tag)))
            continue
        found += [(q, r) for r in _time_plans(q, variant_pack, workspace, capacity, h, warmup, repeats, timer, tag,
                                              max_plans)]
    timer.done()
    found.sort(key=lambda pr: (pr[1].time_ms is None, pr[1].time_ms or 0.0))
    report = TuneReport(r for _, r in found)
    if not found or found[0][1].time_ms is None:
        raise p.plans().not_supported(p.plans().candidates)
    winner, best = found[0]
    winner.select(winner.plans().candidates[best.index])
    return winner, report


class _Timer:
    """CUDA events on the handle's stream, and the progress line."""

    def __init__(self, label: str, stream: int, progress: bool | None) -> None:
        from ..._lib import cuda

        self.label, self.stream = label, stream
        self.start, self.end = cuda.Event(), cuda.Event()
        self.progress = Progress(f"autotuning {label}", progress)  # tqdm or a stderr line, after 1 s

    def tick(self, i: int, n: int, name: str) -> None:
        self.progress.step(i, n, name)

    def median_ms(self, run: Any, repeats: int) -> float:
        times = []
        for _ in range(repeats):
            self.start.record(self.stream)
            run()
            self.end.record(self.stream)
            self.end.synchronize()
            times.append(self.start.elapsed_ms(self.end))
        return statistics.median(times)

    def done(self) -> None:
        self.progress.close()


def _time_plans(p: Pipeline, variant_pack: Mapping[Any, Any], workspace: Any, capacity: int | None, h: Any,
                warmup: int, repeats: int, timer: _Timer, tag: str, max_plans: int | None) -> list[TuneResult]:
    """One row per candidate plan of ``p`` (the first ``max_plans``): its median time, or why
    it did not run."""
    from ..._lib import cuda

    cands = p.plans().candidates[:max_plans]
    own_ws = None
    if workspace is None:
        need = max([p.workspace_size(c) for c in cands if c.plan is not None] + [0])
        if need:
            own_ws = cuda.DeviceBuffer(need)
            workspace = own_ws.ptr
    results: list[TuneResult] = []
    try:
        for i, c in enumerate(cands):
            timer.tick(i, len(cands), c.name)
            ws = int(c.workspace or 0)
            if c.plan is None:
                results.append(TuneResult(i, c.name, None, 0, c.error.status_name if c.error else "not built", tag))
                continue
            if capacity is not None and p.workspace_size(c) > capacity:
                results.append(TuneResult(i, c.name, None, ws, f"needs {p.workspace_size(c)} bytes of workspace, "
                                          f"given {capacity}", tag))
                continue
            try:
                runner = p.runner(c)
                for _ in range(max(warmup, REPLAY_AFTER) if execute_replay() else warmup):
                    runner.run(variant_pack, workspace, h)
                t = timer.median_ms(functools.partial(runner.run, variant_pack, workspace, h), repeats)
                results.append(TuneResult(i, c.name, t, ws, "", tag))
            except CudnnError as exc:
                results.append(TuneResult(i, c.name, None, ws, exc.status_name, tag))
    finally:
        if own_ws is not None:
            cuda.synchronize()
            own_ws.close()
    return results


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 100 else text[:97] + "..."
