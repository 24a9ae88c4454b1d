"""Execution plans finalized on several threads.

Finalizing a plan (``cudnnBackendFinalize`` of an EXECUTION_PLAN) is where runtime-compiled
engines compile their kernels: C work, during which ctypes releases the GIL. `build_all` sets
each plan's attributes on the calling thread (setting them counts holders of shared descriptors,
the kernel cache and device properties), finalizes them on a pool of threads scoped to the
call, then keeps each plan or its error in the candidates' order on the calling thread: the
plans, their order, the errors and the selection are those of building one after another.

Threads take the plans one engine at a time in turn (`start_order`), so that each engine's plans
start early and no slow engine's plans are left for the end.

How far this scales is set by NVRTC, not by cuDNN's handle: runtime-compiled engines compile
their kernels with ``nvrtcCompileProgram``, and concurrent compiles wait on one another on a lock
inside NVRTC that is shared by the whole process. A thread per core therefore keeps far fewer
cores busy than it starts; separate handles per thread, or plans built for a DEVICEPROP without
a handle, wait on the same lock. Worker processes do not (build/workers.py), and join a
build only when asked for (`set_build_processes`, ``CUDNN_PY_BUILD_PROCESSES``): they take plans
from the same queue as the threads, as `Offload` helpers of the build; ``build_all`` keeps what
they built, restored here, and finalizes here whatever they handed back.

The threads share the graph's handle. cuDNN's general rule is one handle per thread at a time;
cudnn-frontend (v1.1 release notes, "Autotuning") documents finalizing the plans of one graph
in parallel, one thread per plan, with the graph's handle. ``CUDNN_PY_BUILD_THREADS=1`` restores
the serial build.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..._lib.status import CudnnError

if TYPE_CHECKING:
    from ...backend.descriptor import Descriptor

ENV = "CUDNN_PY_BUILD_THREADS"


class Buildable(Protocol):
    """What the threads read and call of a candidate plan (`candidates.Candidate`)."""

    @property
    def config(self) -> Descriptor | None: ...

    @property
    def plan(self) -> Descriptor | None: ...

    @property
    def name(self) -> str: ...

    @property
    def engine_index(self) -> int: ...

    @property
    def unbuilt(self) -> bool: ...

    def build(self, handle: int, label: str, kernel_cache: Descriptor | None = None) -> Descriptor: ...

    def start_build(self, handle: int, label: str, kernel_cache: Descriptor | None = None) -> Descriptor | None: ...

    def finish_build(self, plan: Descriptor, error: CudnnError | None) -> None: ...


C = TypeVar("C", bound=Buildable)  # the candidates of one build, handed to its offload as they are
PROCESSES_ENV = "CUDNN_PY_BUILD_PROCESSES"  # worker processes beside the threads (build/workers.py)
AUTO = "auto"  # the worker processes' automatic sizing, when asked for
AUTO_AFTER_S = 2.0  # "auto": worker processes are considered once a build has run this long
_PROCESSES_EXPECTED = "an int >= 0 (0: no worker processes) or 'auto'"
_asked_processes: list[int | str | None] = [None]  # set_build_processes's; None: $CUDNN_PY_BUILD_PROCESSES's


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def build_threads(threads: int | None = None) -> int:
    """How many threads finalize plans: ``threads`` if given, else ``$CUDNN_PY_BUILD_THREADS``,
    else the cores this process may use. 1 is the serial build."""
    if threads is None:
        text = os.environ.get(ENV, "").strip()
        if not text:
            return available_cores()
        try:
            threads = int(text)
        except ValueError:
            raise ValueError(f"{ENV} must be a positive int (1: build plans one after another), "
                             f"got {text!r}") from None
        source = ENV
    else:
        source = "threads"
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise TypeError(f"{source} must be an int or None, got {type(threads).__name__}")
    if threads < 1:
        raise ValueError(f"{source} must be a positive int (1: build plans one after another), got {threads}")
    return threads


@dataclass(frozen=True)
class WorkerSetting:
    """How many worker processes may join a build, after how long (0: from the start), and who
    asked for them (``CUDNN_PY_BUILD_PROCESSES=4``, ``set_build_processes('auto')``)."""

    processes: int
    after_s: float
    source: str

    @property
    def auto(self) -> bool:
        return self.after_s > 0


def set_build_processes(processes: int | str | None) -> None:
    """Worker processes that take plans of ``build_plans(ALL)`` (and so of ``autotune``) beside
    its threads, in this process from now on: 0 (the default) none; N >= 1 starts N with each
    build of two plans or more; "auto" up to one per core, started only for a build still far
    from done after a couple of seconds, as many as the plans left and half the GPU's free
    memory allow. None: back to ``$CUDNN_PY_BUILD_PROCESSES``, which takes the same values
    (unset: 0).

    They pay off in long builds of many runtime-compiled plans (a knob sweep), where NVRTC's
    process-wide lock keeps threads waiting on one another; each costs an interpreter, about
    three seconds to start and a CUDA context of a few hundred MB of GPU memory. Inside a job of
    several ranks per node, each rank would start its own."""
    _asked_processes[0] = None if processes is None else _worker_processes(processes, "set_build_processes")


def _worker_processes(value: object, source: str) -> int | str:
    """``value`` checked as a count of worker processes (an int >= 0) or "auto"; errors name ``source``."""
    if isinstance(value, str):
        if value == AUTO:
            return value
        raise ValueError(f"{source}: expected {_PROCESSES_EXPECTED}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{source}: expected {_PROCESSES_EXPECTED}, got {type(value).__name__} ({value!r})")
    if value < 0:
        raise ValueError(f"{source}: expected {_PROCESSES_EXPECTED}, got {value}")
    return value


def _processes_from_env() -> int | str:
    """``$CUDNN_PY_BUILD_PROCESSES`` as `set_build_processes` takes it (unset or empty: 0)."""
    text = os.environ.get(PROCESSES_ENV, "").strip()
    if text.lower() == AUTO:
        return AUTO
    try:
        n = int(text or "0")
    except ValueError:
        raise ValueError(f"{PROCESSES_ENV}: expected {_PROCESSES_EXPECTED}, got {text!r}") from None
    return _worker_processes(n, PROCESSES_ENV)


def build_processes() -> WorkerSetting | None:
    """Worker processes that may take plans of ``build_plans(ALL)`` beside the threads, as
    `set_build_processes` set them, else as ``$CUDNN_PY_BUILD_PROCESSES`` says: None (no worker
    process) unless asked for; N, started with the build; "auto", up to one per core, considered
    once the build has run `AUTO_AFTER_S`."""
    asked = _asked_processes[0]
    if asked is None:
        asked = _processes_from_env()
        source = f"{PROCESSES_ENV}={asked}"
    else:
        source = f"set_build_processes({asked!r})"
    if isinstance(asked, str):  # "auto"
        return WorkerSetting(available_cores(), AUTO_AFTER_S, source)
    return WorkerSetting(asked, 0.0, source) if asked else None


class PlanQueue:
    """The plans of one build, in the order builders take them: the caller's thread, the other
    threads and any `Offload` take from it; `keep` records each outcome."""

    def __init__(self, order: Sequence[int], outcomes: list[object]) -> None:
        self._order = list(order)
        self._next = 0
        self._lock = threading.Lock()
        self._outcomes = outcomes
        self.stopped = False
        self.kept = 0
        self.started = time.monotonic()

    def take(self) -> int | None:
        """The next plan's index, or None when none is left or the build was stopped."""
        with self._lock:
            if self.stopped or self._next == len(self._order):
                return None
            self._next += 1
            return self._order[self._next - 1]

    def left(self) -> int:
        """Plans no builder has taken yet."""
        with self._lock:
            return 0 if self.stopped else len(self._order) - self._next

    def keep(self, index: int, outcome: object) -> None:
        """Record how plan ``index`` went: None (finalized), its exception, `Elsewhere` or `RETRY`."""
        with self._lock:
            self._outcomes[index] = outcome
            self.kept += 1

    def stop(self) -> None:
        with self._lock:
            self.stopped = True

    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class Elsewhere:
    """A plan another process finalized; ``restore()`` makes it here (raising CudnnError if it
    cannot, in which case it is finalized here)."""

    restore: Callable[[], Descriptor]


RETRY = object()  # a plan an `Offload` took but did not build: finalized here afterwards


class Offload(Protocol):
    """Builders outside this process's threads that take plans from the build's queue."""

    def run(self, queue: PlanQueue, ended: threading.Event) -> None:
        """Take plans from ``queue`` and keep an `Elsewhere` or `RETRY` for each one taken; ``ended``
        is set once the caller's thread found the queue empty (or the build was stopped). Runs on
        a thread of its own; every process it started has ended when it returns."""


def build_all(cands: Sequence[C], handle: int, label: str, kernel_cache: Descriptor | None = None,
              threads: int | None = None,
              offload: Callable[[Sequence[C]], Offload | None] | None = None) -> None:
    """Build every candidate of ``cands`` not built or failed yet; a failure is remembered on
    its candidate (as `Candidate.build` does) and affects no other. On one thread, with one
    candidate to build or one without an engine config, or with a kernel cache (each finalize
    may add kernels to it; cuDNN does not say it may be written from several threads), this is
    `Candidate.build` in order. ``offload(todo)`` may give builders in other processes that take
    plans beside the threads; the plans they build are restored here, the rest built here."""
    n = build_threads(threads)
    if kernel_cache is not None:  # one cache that every finalize writes into: not shared between threads
        n = 1
    todo = [c for c in cands if c.unbuilt]
    serial = len(todo) <= 1 or any(c.config is None for c in todo)  # no config: `build` says why
    helper = None if serial or offload is None else offload(todo)
    if serial or (n == 1 and helper is None):
        for c in cands:
            try:
                c.build(handle, label, kernel_cache)
            except CudnnError:
                pass
        return
    plans: list[Descriptor | None] = []
    try:
        plans.extend(c.start_build(handle, label, kernel_cache) for c in todo)  # on the caller's thread
        outcomes = _finalize_all(plans, min(n, len(todo)), start_order(todo), helper)
        again = _keep_restored(todo, plans, outcomes, label)
        if again:  # what the helpers handed back: finalized here
            redo = _finalize_all([plans[i] if i in again else None for i in range(len(plans))], min(n, len(again)))
            outcomes = [redo[i] if i in again else outcomes[i] for i in range(len(plans))]
    except BaseException:
        for c, plan in zip(todo, plans):
            if plan is not None and c.plan is not plan:
                plan.close()
        raise
    surprise: BaseException | None = None
    for c, plan, outcome in zip(todo, plans, outcomes):
        if plan is None or c.plan is not None:  # setting its attributes failed (the candidate has the error); restored
            continue
        if outcome is None or isinstance(outcome, CudnnError):
            c.finish_build(plan, outcome)
            continue
        # not a cuDNN status (MemoryError, ...) or not finalized: dropped, raised once the rest are kept
        plan.close()
        if surprise is None:
            surprise = outcome if isinstance(outcome, BaseException) else RuntimeError(
                f"{label}: {c.name}: its plan was not finalized (a build thread ended early)")
    if surprise is not None:
        raise surprise


def _keep_restored(todo: Sequence[Buildable], plans: Sequence[Descriptor | None], outcomes: list[object],
                   label: str) -> set[int]:
    """Keep each plan another process built (restored here; its unfinalized twin closed); the
    indices of the plans to finalize here instead: handed back, or not restored."""
    again: set[int] = set()
    for i, (c, plan, outcome) in enumerate(zip(todo, plans, outcomes)):
        if outcome is RETRY:
            again.add(i)
        elif isinstance(outcome, Elsewhere) and plan is not None:
            try:
                restored = outcome.restore()
            except CudnnError as exc:
                from ...log import get_logger

                get_logger("build").info("%s: %s: the plan another process built was not restored here (%s); "
                                         "building it here", label, c.name, exc)
                again.add(i)
                continue
            plan.close()
            c.finish_build(restored, None)
    return again


def start_order(cands: Sequence[Buildable]) -> list[int]:
    """The order in which threads take the plans of ``cands`` (indices): the first plan of each
    engine, in the order the engines first appear, then the second of each, and so on; each
    engine's plans in the candidates' order."""
    by_engine: dict[int, list[int]] = {}
    for i, c in enumerate(cands):
        by_engine.setdefault(c.engine_index, []).append(i)
    return [i for turn in zip_longest(*by_engine.values()) for i in turn if i is not None]


_UNFINISHED = object()  # a plan no thread has finalized (yet)


def _finalize_all(plans: Sequence[Descriptor | None], threads: int, start: Sequence[int] | None = None,
                  offload: Offload | None = None) -> list[object]:
    """Finalize each plan (None: skipped), the caller's thread and ``threads - 1`` others taking
    the next one in ``start`` order (default: as given) as they come free, ``offload`` (on a
    thread of its own) taking some too; per plan, in the order given, None when it finalized,
    else what its finalize raised, an `Elsewhere`/`RETRY` of the offload's, or `_UNFINISHED` if
    none took it. Every thread started here has ended when this returns or raises."""
    outcomes: list[object] = [_UNFINISHED] * len(plans)
    order = range(len(plans)) if start is None else start
    queue = PlanQueue([i for i in order if plans[i] is not None], outcomes)

    def work() -> None:
        while (i := queue.take()) is not None:
            plan = plans[i]
            assert plan is not None
            try:
                plan.finalize()
            except Exception as exc:  # noqa: BLE001 - kept for the caller's thread, in order
                queue.keep(i, exc)
            else:
                queue.keep(i, None)

    ended = threading.Event()
    helpers: list[threading.Thread] = []
    try:
        for k in range(threads - 1):
            t = threading.Thread(target=work, name=f"cudnn-plan-build-{k}", daemon=True)
            t.start()
            helpers.append(t)
        if offload is not None:
            t = threading.Thread(target=offload.run, args=(queue, ended), name="cudnn-plan-workers", daemon=True)
            t.start()
            helpers.append(t)
        work()
    except BaseException:
        queue.stop()  # on an interrupt: no builder takes another plan
        raise
    finally:
        ended.set()
        for t in helpers:
            t.join()
    return outcomes
