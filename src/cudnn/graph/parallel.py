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
a handle, wait on the same lock. Worker processes do not: ``CUDNN_PY_BUILD_PROCESSES``
(graph/plan_workers.py) hands the candidates to them first.

The threads share the graph's handle. cuDNN's general rule is one handle per thread at a time;
cudnn-frontend (v1.1 release notes, "Autotuning") documents finalizing the plans of one graph
in parallel, one thread per plan, with the graph's handle. ``CUDNN_PY_BUILD_THREADS=1``
restores the serial build.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from itertools import zip_longest
from typing import TYPE_CHECKING

from .._lib.errors import CudnnError

if TYPE_CHECKING:
    from ..backend.descriptor import Descriptor
    from .plans import Candidate

ENV = "CUDNN_PY_BUILD_THREADS"
PROCESSES_ENV = "CUDNN_PY_BUILD_PROCESSES"  # worker processes first (graph/plan_workers.py)


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


def build_processes() -> int:
    """Worker processes ``build_plans(ALL)`` hands the candidates to first:
    ``$CUDNN_PY_BUILD_PROCESSES``; 0 (unset, 0 or 1) builds in this process only."""
    text = os.environ.get(PROCESSES_ENV, "").strip()
    if not text:
        return 0
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{PROCESSES_ENV} must be an int (0 or 1: no worker processes), got {text!r}") from None
    if n < 0:
        raise ValueError(f"{PROCESSES_ENV} must be an int >= 0 (0 or 1: no worker processes), got {n}")
    return n if n >= 2 else 0


def build_all(cands: Sequence[Candidate], handle: int, label: str, kernel_cache: Descriptor | None = None,
              threads: int | None = None) -> None:
    """Build every candidate of ``cands`` not built or failed yet; a failure is remembered on
    its candidate (as `Candidate.build` does) and affects no other. On one thread, with one
    candidate to build or one without an engine config, or with a kernel cache (each finalize
    may add kernels to it; cuDNN does not say it may be written from several threads), this is
    `Candidate.build` in order."""
    n = build_threads(threads)
    if kernel_cache is not None:  # one cache that every finalize writes into: not shared between threads
        n = 1
    todo = [c for c in cands if c.unbuilt]
    if n == 1 or len(todo) <= 1 or any(c.config is None for c in todo):  # no config: `build` says why
        for c in cands:
            try:
                c.build(handle, label, kernel_cache)
            except CudnnError:
                pass
        return
    plans: list[Descriptor | None] = []
    try:
        plans.extend(c.start_build(handle, label, kernel_cache) for c in todo)  # on the caller's thread
        outcomes = _finalize_all(plans, min(n, len(todo)), start_order(todo))
    except BaseException:
        for plan in plans:
            if plan is not None:
                plan.close()
        raise
    surprise: BaseException | None = None
    for c, plan, outcome in zip(todo, plans, outcomes):
        if plan is None:  # setting its attributes failed: the candidate holds the error
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


def start_order(cands: Sequence[Candidate]) -> list[int]:
    """The order in which threads take the plans of ``cands`` (indices): the first plan of each
    engine, in the order the engines first appear, then the second of each, and so on; each
    engine's plans in the candidates' order."""
    by_engine: dict[int, list[int]] = {}
    for i, c in enumerate(cands):
        by_engine.setdefault(c.engine_index, []).append(i)
    return [i for turn in zip_longest(*by_engine.values()) for i in turn if i is not None]


_UNFINISHED = object()  # a plan no thread has finalized (yet)


def _finalize_all(plans: Sequence[Descriptor | None], threads: int, start: Sequence[int] | None = None) -> list[object]:
    """Finalize each plan (None: skipped), the caller's thread and ``threads - 1`` others taking
    the next one in ``start`` order (default: as given) as they come free; per plan, in the
    order given, None when it finalized, else what its finalize raised (`_UNFINISHED` if none
    ran it). Every thread started here has ended when this returns or raises."""
    outcomes: list[object] = [_UNFINISHED] * len(plans)
    order = iter(range(len(plans)) if start is None else start)
    lock = threading.Lock()
    stop = [False]

    def work() -> None:
        while True:
            with lock:
                i = None if stop[0] else next(order, None)
            if i is None:
                return
            plan = plans[i]
            if plan is None:
                continue
            try:
                plan.finalize()
            except Exception as exc:  # noqa: BLE001 - kept for the caller's thread, in order
                outcomes[i] = exc
            else:
                outcomes[i] = None

    helpers: list[threading.Thread] = []
    try:
        for k in range(threads - 1):
            t = threading.Thread(target=work, name=f"cudnn-plan-build-{k}", daemon=True)
            t.start()
            helpers.append(t)
        work()
    finally:
        stop[0] = True  # on an interrupt: the others take no more plans
        for t in helpers:
            t.join()
    return outcomes
