"""Lowering trials: the other lowering a graph offers, built off the caller's thread and timed
on the caller's own executes; the faster one runs from then on, and the plan cache keeps it.

A composite may offer a lowering that runs faster than its default but takes longer to build. A
layer or RMS norm of a 16-bit X with float32 SCALE/BIAS is the case: the default is the single
norm operation, which builds as fast as the official frontend's build of the same graph (cuDNN
gives it a generic engine); the affine epilogue (`families.norm_nodes`) reaches cuDNN's faster
norm engines, which compile their kernel when the plan is finalized. A build keeps the default,
so a cold build costs what the official's does. A graph executed `TRIAL_AFTER` times then:

1. expands the other lowering and asks the heuristics for it, on the caller's thread;
2. finalizes its plan on the process's trial thread, with a cuDNN handle of that thread's own,
   while executes go on running the default plan;
3. once that plan is built, alternates the two plans over the next executes, each timed between
   CUDA events on the caller's stream (none while the stream is being captured), until each has
   `SAMPLES` timings;
4. keeps the other lowering where its median is below `MARGIN` times the default's, else the
   default, and hands the winner to the plan cache as an autotuned choice: a later build of the
   graph, in this process or another, starts with it. Where every caller's workspace fits the
   other plan, the graph's pipeline takes the other lowering over (`Pipeline.take_over`): plan
   queries, ``get_workspace_size()``, serialization and executes all see that plan alone, and
   executes no longer pass through the trial.

An execute is routed to the other lowering's plan only where its workspace fits. Callers that
size the workspace for the Runner they are given (``cudnn.ops``) always can; the others pass the
``get_workspace_size()`` of the default plan, which fits the other plan unless that one needs
more (the affine epilogue's unit scale and zero bias are constant scratch, outside the
workspace). Where it does not fit, they run the default plan in this process and get the winner
from the plan cache in the next.

A trial never raises into an execute: a lowering that cannot be built, or a trial with no
timing after `GIVE_UP_AFTER` routed executes, leaves the default in place (logged at INFO by
``cudnn.graph``). ``set_lowering_trials(False)`` or ``CUDNN_PY_LOWERING_TRIALS=0`` turns trials
off; the plans then differ only under ``autotune`` or ``lowering=``. The trial thread is started
by the first trial of a process, and joined at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import statistics
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..._lib import cuda
from ..._lib.enums import build_plan_policy, heur_mode
from ..._lib.status import CudnnError
from ...backend.handle import Handle, as_handle_ptr, get_stream
from ..model.graph_errors import GraphError

if TYPE_CHECKING:
    from ..plans.candidates import PlanSet
    from ..run.runner import Runner

ENV = "CUDNN_PY_LOWERING_TRIALS"
TRIAL_AFTER = 16  # executes of the default plan before the other lowering is built
SAMPLES = 5  # timed executes of each plan
MARGIN = 0.97  # the other lowering is kept where its median is below this times the default's
GIVE_UP_AFTER = 256  # routed executes after the other plan is built, with timings still missing

_log = logging.getLogger("cudnn.graph")
_asked: list[bool | None] = [None]  # set_lowering_trials's; None: $CUDNN_PY_LOWERING_TRIALS's
_open: weakref.WeakSet[Trial] = weakref.WeakSet()  # trials of live graphs that have not decided


def set_lowering_trials(enabled: bool | None) -> None:
    """Whether a graph whose composite offers a faster lowering that builds slower (a layer or
    RMS norm of a 16-bit X with float32 SCALE/BIAS) tries it once it has been executed a few
    times: built on a thread of its own, timed against the default plan on the graph's own
    executes, kept where faster, and remembered by the plan cache. On by default; None: back to
    ``$CUDNN_PY_LOWERING_TRIALS`` ("0" turns trials off). Graphs built from then on follow it."""
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_lowering_trials: expected True, False or None, got {enabled!r}")
    _asked[0] = enabled


def lowering_trials_pending() -> int:
    """How many graphs alive in this process have a lowering trial still to decide (each
    progresses with its graph's executes): a benchmark runs a graph until this count drops
    before it times the graph."""
    return len(_open)


def trials_enabled() -> bool:
    """Whether builds start lowering trials (`set_lowering_trials`, else the environment)."""
    asked = _asked[0]
    if asked is not None:
        return asked
    text = os.environ.get(ENV, "").strip().lower()
    if text in ("", "1", "on", "true", "yes"):
        return True
    if text in ("0", "off", "false", "no"):
        return False
    raise ValueError(f"{ENV} must be 1 or 0 (trials on or off), got {os.environ[ENV]!r}")


class TrialPipeline(Protocol):
    """What a trial uses of the pipelines it compares (`pipeline.Pipeline`)."""

    label: str

    def device(self) -> int: ...

    def create_plans(self, modes: Any) -> None: ...

    def plans(self) -> PlanSet: ...

    def select(self, cand: Any) -> None: ...

    def runner(self, cand: Any) -> Runner: ...

    def lowering_name(self) -> str: ...

    def end_trial(self) -> None: ...

    def take_over(self, other: Any) -> None: ...


class Sample:
    """One timed execute: CUDA events around it on the stream it ran on. A Runner given this as
    its ``probe`` calls `started` and `ended` around its next launch."""

    __slots__ = ("start", "end", "stream", "recorded")

    def __init__(self) -> None:
        self.start = cuda.Event()
        self.end = cuda.Event()
        self.stream: int | None = None  # set when the start was recorded
        self.recorded = False  # both marks recorded

    def started(self, handle: Any, stream: int | None) -> None:
        try:
            s = stream if stream is not None else get_stream(as_handle_ptr(handle))
            if cuda.stream_capturing(s):
                return  # events in a capture would be nodes of the user's graph, not timings
            self.start.record(s)
        except (CudnnError, cuda.CudaError, TypeError):
            return  # untimed; the execute itself reports a bad handle
        self.stream = s

    def ended(self) -> None:
        if self.stream is not None:
            try:
                self.end.record(self.stream)
            except cuda.CudaError:
                self.stream = None  # untimed, taken again
                return
            self.recorded = True

    def ms(self) -> float | None:
        """The execute's GPU time, once it has run; None before (or if it was never timed)."""
        try:
            if not self.recorded or not self.end.query():
                return None
            return self.start.elapsed_ms(self.end)
        except cuda.CudaError:
            return None  # the execute's own error surfaces at the caller's next sync


class Trial:
    """The trial of pipeline ``q`` (the other lowering) against ``p`` (the default, built),
    which owns the trial: the trial refers to it weakly, so that a graph no longer used is
    released at once, not at a collection of reference cycles."""

    def __init__(self, p: TrialPipeline, q: TrialPipeline, remember: Callable[[Any], None],
                 heuristics: Sequence[heur_mode] = (heur_mode.A, heur_mode.FALLBACK)) -> None:
        self.p: TrialPipeline = weakref.proxy(p)
        self.q = q
        self.heuristics = heuristics  # the modes q's plans are ranked by (the default build's)
        self.remember = remember  # the plan cache's store of the winner
        self.decided = False  # True once the other lowering won: executes that fit run it
        self.ended = False  # True once the default was kept: every execute runs it
        self._lock = threading.Lock()
        self._calls = 0
        self._job: _Job | None = None
        self._a: Runner | None = None
        self._b: Runner | None = None
        self._b_fits = False  # the other plan fits in the default's workspace (get_workspace_size())
        self._samples: tuple[list[Sample], list[Sample]] = ([], [])  # the default's, the other's
        self._turn = 0
        self._routed = 0
        _open.add(self)

    # -- routing ----------------------------------------------------------------------------

    def route(self, a: Runner, sized: bool) -> Runner:
        """The Runner this execute runs: ``a`` (the default plan's) or the other plan's."""
        if self.decided:
            return self._kept(a, sized)
        if self.ended:
            return a
        with self._lock:
            try:
                return self._step(a, sized)
            except Exception as exc:  # noqa: BLE001 - a trial never fails an execute: the default stays
                self._give_up(f"{type(exc).__name__}: {exc}")
                return a

    def _kept(self, a: Runner, sized: bool) -> Runner:
        """After the decision: the other plan's Runner where it was kept and this caller can run it."""
        b = self._b
        return b if self.decided and b is not None and (sized or self._b_fits) else a

    def _step(self, a: Runner, sized: bool) -> Runner:
        if self.decided or self.ended:  # another thread decided meanwhile
            return self._kept(a, sized)
        self._calls += 1
        if self._job is None:
            if self._calls >= TRIAL_AFTER:
                self._start(a)
            return a
        if self._b is None:
            if self._job.done.is_set():
                self._built(a)
            if self._b is None:
                return a
        if self._decide():
            return self._kept(a, sized)
        self._routed += 1
        if self._routed > GIVE_UP_AFTER:
            b = self._b
            self._give_up(f"no timing after {GIVE_UP_AFTER} executes" if self._b_fits else
                          f"its plan needs {b.workspace_size} bytes of workspace, more than the {a.workspace_size} "
                          f"get_workspace_size() reported, and the executes were given that")
            return a
        if not (sized or self._b_fits):
            return a  # this caller's workspace is what get_workspace_size() reported
        runners = (self._a, self._b)
        for _ in range(2):  # alternate; a plan with its timings complete is skipped
            runner, done = runners[self._turn], self._samples[self._turn]
            self._turn ^= 1
            assert runner is not None
            if len(done) < SAMPLES or any(s.stream is None for s in done):
                done[:] = [s for s in done if s.stream is not None]  # untimed (captured) ones again
                sample = Sample()
                done.append(sample)
                runner.probe = sample
                return runner
        return a

    # -- the steps --------------------------------------------------------------------------

    def _start(self, a: Runner) -> None:
        """Expand the other lowering and rank its plans here; finalize the first on the trial thread."""
        q = self.q
        try:
            q.create_plans(self.heuristics)
            plans = q.plans()
        except (CudnnError, GraphError) as exc:
            self._give_up(f"its plans could not be listed: {exc}")
            return
        self._a = a
        self._job = _Job(self.p.device(), plans)
        _worker.submit(self._job)

    def _built(self, a: Runner) -> None:
        """Take the trial thread's outcome: the other lowering's Runner, or the end of the trial."""
        job = self._job
        assert job is not None
        if job.error is not None or job.selected is None:
            self._give_up(f"no plan of it built: {job.error}")
            return
        q = self.q
        q.select(job.selected)
        try:
            self._b = q.runner(job.selected)
        except (CudnnError, GraphError) as exc:
            self._give_up(f"its plan could not run: {exc}")
            return
        self._b_fits = self._b.workspace_size <= a.workspace_size

    def _decide(self) -> bool:
        """Decide once both plans have all their timings; True when decided."""
        times: list[list[float]] = []
        for done in self._samples:
            ms = [t for s in done if (t := s.ms()) is not None]
            if len(ms) < SAMPLES:
                return False
            times.append(ms)
        default, other = statistics.median(times[0]), statistics.median(times[1])
        self._samples = ([], [])  # the events are released at the next release point
        won = other < MARGIN * default
        _log.info("%s: lowering trial: %s %.1f us against the default %.1f us (medians of %d): %s kept",
                  self.p.label, self.q.lowering_name(), other * 1e3, default * 1e3, SAMPLES,
                  self.q.lowering_name() if won else "the default")
        _open.discard(self)
        if won and self._b_fits:  # every caller can run it: the default's pipeline becomes the other's
            self.p.take_over(self.q)
            self.decided = True
        elif won:  # callers that size the workspace per Runner run it from now on
            self.decided = True
        else:
            self._b = None
            self.ended = True
            self.p.end_trial()
        try:
            self.remember(self.q if won else self.p)
        except Exception as exc:  # noqa: BLE001 - the choice stands in this process all the same
            _log.info("%s: lowering trial: the plan cache did not keep the choice: %s", self.p.label, exc)
        return True

    def _give_up(self, why: str) -> None:
        _log.info("%s: lowering trial of %s ended, the default kept: %s", self.p.label,
                  self.q.lowering_name(), why)
        self._b = None
        self._samples = ([], [])
        self.ended = True
        _open.discard(self)
        self.p.end_trial()


# -- the trial thread -------------------------------------------------------------------------

class _Job:
    """One plan set to finalize on the trial thread: the first of its candidates that builds."""

    __slots__ = ("device", "plans", "done", "selected", "error")

    def __init__(self, device: int, plans: PlanSet) -> None:
        self.device = device
        self.plans: PlanSet | None = plans
        self.done = threading.Event()
        self.selected: Any = None
        self.error: BaseException | None = None

    def run(self, handles: dict[int, Handle]) -> None:
        plans = self.plans
        assert plans is not None
        try:
            # relaxed: a capture another thread has under way in the global mode is not broken by
            # the handle's creation or the plan's compile
            with cuda.relaxed_capture_mode():
                cuda.set_device(self.device)
                h = handles.get(self.device)
                if h is None or h.closed:
                    h = handles[self.device] = Handle(self.device, drain=False)
                plans.build(h.ptr, build_plan_policy.HEURISTICS_CHOICE)
            self.selected = plans.selected
        except BaseException as exc:  # noqa: BLE001 - reported to the trial, which keeps the default
            self.error = exc
        finally:
            self.plans = None
            self.done.set()


class _Worker:
    """The process's trial thread: finalizes one job at a time, with a handle of its own per
    device; started by the first job, joined at exit (a finalize in progress is let finish)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def submit(self, job: _Job) -> None:
        with self._lock:
            if self._thread is None or self._pid != os.getpid():  # first job, or a forked child
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._serve, name="cudnn-py lowering trials", daemon=True)
                self._pid = os.getpid()
                self._thread.start()
                atexit.register(self.stop)
            self._jobs.put(job)

    def _serve(self) -> None:
        handles: dict[int, Handle] = {}
        try:
            while (job := self._jobs.get()) is not None:
                job.run(handles)
        finally:
            with cuda.relaxed_capture_mode():
                for h in handles.values():
                    h.close()

    def stop(self) -> None:
        """End the thread after the job it is on; jobs not started are dropped (done, unbuilt)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None or self._pid != os.getpid():
            return
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.error = RuntimeError("the process is exiting")
                job.done.set()
        self._jobs.put(None)
        thread.join()


_worker = _Worker()
