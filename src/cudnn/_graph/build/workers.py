"""Execution plans finalized in worker processes, beside the threads of ``build_plans(ALL)``.

Threads finalizing plans in one process wait on one another inside NVRTC (plans/threads.py);
processes do not. A `Pool` is an `Offload` of the threads' build: it starts worker processes
(``python -m cudnn._graph.plan_worker``) that take plans from the same queue as the threads,
one at a time, until none is left. Each worker

- rebuilds the graph from its printed JSON on the same GPU,
- checks that it lowers to the same backend graph (same structure, shapes, types and uids, the
  identity by which the plan cache shares plans), else takes nothing,
- then, for each plan it takes, finalizes it from its engine and knob choices and answers with
  cuDNN's JSON of the plan (or nothing, if it failed there).

This process restores each such plan with its own handle: the JSON of a plan holds its compiled
kernels, so restoring it compiles nothing. A plan a worker took but did not return (it failed
there, the worker died or ran past its time) is finalized here afterwards, so the plans, their
names and order, the errors (raised here, by cuDNN) and the selection are those of a build in
this process. No worker outlives the build.

Workers are started only when asked for, by ``cudnn.set_build_processes`` or
``CUDNN_PY_BUILD_PROCESSES`` (`threads.build_processes`): N starts N with the build; "auto" up
to one per core, joining a build that is still far from done after a couple of seconds, as many
as the plans left and half the GPU's free memory allow; unset or 0, none. Each worker starts an
interpreter and a CUDA context (about three seconds and a few hundred MB of GPU memory), which
only a long build repays: a knob sweep of runtime-compiled engines, whose compiles wait on one
another on NVRTC's lock in one process.

A graph is built in this process alone when workers could not reproduce it: a kernel cache,
DEVICEPROP (ahead-of-time) builds, dynamic or overridden shapes, a non-default lowering, a graph
without a JSON form, or no Python executable to start them with.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...backend import plan as backend_plan
from ..plans.threads import ENV as THREADS_ENV
from ..plans.threads import PROCESSES_ENV as ENV
from ..plans.threads import RETRY, Elsewhere, PlanQueue, WorkerSetting

if TYPE_CHECKING:
    from ...backend.descriptor import Descriptor
    from ..model.graph_view import GraphView
    from ..plans.candidates import Candidate

START_S = 120.0  # a worker's allowance to start (interpreter, cudnn-py, CUDA context) and rebuild the graph
PER_PLAN_S = 60.0  # and to finalize each plan it takes (a runtime-compiled kernel takes about a second)
AUTO_LEFT_S = 5.0  # "auto": workers join a build whose plans left would take this long more as it goes
WORKER_GPU_BYTES = 1 << 30  # "auto": a worker per this much of half the GPU's free memory, at most
POLL_S = 0.05  # how often the pool looks at its workers' deadlines and at the build's end
EXIT_S = 5.0  # how long a worker whose output ended is given to exit before it is said to be running

WORKER_MODULE = "cudnn._graph.plan_worker"  # what a worker process runs (python -m)


class Building(Protocol):
    """What the pool reads of the pipeline whose plans it builds (`pipeline.Pipeline`)."""

    label: str
    lowering: Any

    @property
    def graph(self) -> GraphView: ...

    def device(self) -> int: ...

    def build_handle_ptr(self) -> int: ...

    def identity(self) -> tuple[int, int, tuple[int, ...]]: ...


def why_not(p: Building, todo: Sequence[Candidate]) -> str | None:
    """Why the candidates ``todo`` of ``p`` are not built in worker processes; None if they can be."""
    g = p.graph
    reasons = (
        (g.kernel_cache is not None, "the graph has a kernel cache"),
        (g.device_property is not None, "the graph is built for described device properties"),
        (bool(g.is_dynamic_shape_enabled), "the graph has dynamic shapes"),
        (bool(g.is_override_shape_enabled), "the graph overrides shapes"),
        (p.lowering is not None, "a lowering other than the graph's default"),
        (not sys.executable or bool(getattr(sys, "frozen", False)), "no Python executable to start workers with"),
        (len(todo) < 2, "fewer than two plans to build"),
        (any(c.config is None for c in todo), "a candidate without an engine config"),
    )
    return next((why for cond, why in reasons if cond), None)


def identity(p: Building) -> str:
    """A digest of the backend graph ``p`` lowers to (`lowered_identity`) and its SM count."""
    return hashlib.sha256(repr((*p.identity(), p.graph.sm_count)).encode()).hexdigest()


def worker_env() -> dict[str, str]:
    """A worker's environment: this one, building one plan at a time, no workers of its own, no
    plan cache, and this cudnn-py first on its path unless it is an installed package."""
    env = dict(os.environ)
    env[THREADS_ENV] = "1"
    env[ENV] = "0"
    env["CUDNN_PY_PLAN_CACHE"] = "0"
    root = str(Path(__file__).resolve().parents[3])  # the directory that holds the cudnn package
    installed = {str(Path(s).resolve()) for s in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(x for x in (root, env.get("PYTHONPATH", "")) if x)
    return env


def pool(p: Building, todo: Sequence[Candidate], setting: WorkerSetting) -> Pool | None:
    """The worker processes that may take ``todo``'s plans (indices into ``todo``), or None (logged) if
    the graph is built here alone."""
    reason = why_not(p, todo)
    if reason is not None:
        _log().debug("%s: plans built in this process: %s", p.label, reason)
        return None
    return Pool(p, todo, setting)


def workers_for(setting: WorkerSetting, queue: PlanQueue, device: int) -> tuple[int, str]:
    """How many workers to start for ``queue`` now (0: none) and why."""
    left = queue.left()
    if not setting.auto:
        return min(setting.processes, left), setting.source
    more_s = queue.elapsed() * left / max(queue.kept, 1)  # at the rate so far (none kept yet: at least)
    if left < 2 or more_s < AUTO_LEFT_S:
        return 0, f"{setting.source}: {left} plans left, about {more_s:.1f} s more here"
    from ..._lib import cuda

    try:
        cuda.set_device(device)
        room = cuda.free_memory() // (2 * WORKER_GPU_BYTES)
    except Exception as exc:  # noqa: BLE001 - no room to be had: build here
        return 0, f"{setting.source}: the GPU's free memory is unknown ({exc})"
    n = min(setting.processes, left, room)
    return (n if n >= 2 else 0), (f"{setting.source}: {left} plans left, about {more_s:.1f} s more here; "
                                  f"{setting.processes} cores, room on the GPU for {room}")


class Worker:
    """One worker process and the plan it is building (the pool's thread alone kills it)."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc, self.log = proc, log
        self.lock = threading.Lock()
        self.busy: int | None = None  # the plan it is finalizing
        self.deadline = time.monotonic() + START_S
        self.why_stopped: str | None = None  # why the pool killed it ("": it was not needed)
        self.output_ended = False  # its stdout closed: it is exiting (or has exited)
        self.built = 0

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        """The worker's next message; None once it has ended."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.output_ended = True
            return None
        return json.loads(line)

    def stop(self, why: str, idle_only: bool = False) -> None:
        """Kill the process (``idle_only``: unless it is building a plan)."""
        with self.lock:
            if self.proc.poll() is None and not (idle_only and self.busy is not None):
                if self.why_stopped is None:
                    self.why_stopped = why
                self.proc.kill()

    def why_ended(self) -> str:
        """Why it ended, with the last lines it wrote. A worker whose output ended is exiting: its
        exit status is waited for, `EXIT_S` at most (the pipe closes before the process is gone)."""
        code = self.proc.poll()
        if code is None and self.output_ended and not self.why_stopped:
            try:
                code = self.proc.wait(EXIT_S)
            except subprocess.TimeoutExpired:
                pass
        if self.why_stopped:
            why = self.why_stopped
        elif code is not None:
            why = exit_status(code)
        elif self.output_ended:
            why = f"it was still running {EXIT_S:g} s after its output ended"
        else:
            why = "it was running"
        lines = self.log.read_text(errors="replace").strip().splitlines()[-3:] if self.log.exists() else []
        return why + (f": {' | '.join(lines)}" if lines else "")


def exit_status(code: int) -> str:
    """A process's end as `Popen.returncode` gives it: "exit status 3", "killed by SIGKILL"."""
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


class Pool:
    """Worker processes that take plans of one build from its queue (an `Offload`)."""

    def __init__(self, p: Building, todo: Sequence[Candidate], setting: WorkerSetting) -> None:
        self.pipeline, self.todo, self.setting = p, list(todo), setting
        self.label, self.device = p.label, p.device()

    def run(self, queue: PlanQueue, ended: threading.Event) -> None:
        if self.setting.auto and ended.wait(self.setting.after_s):
            return
        n, why = workers_for(self.setting, queue, self.device)
        if n == 0:
            _log().debug("%s: no worker processes: %s", self.label, why)
            return
        try:
            request = {"graph": str(self.pipeline.graph), "device": self.device, "identity": identity(self.pipeline)}
        except Exception as exc:  # noqa: BLE001 - a node without a JSON form (e.g. a score_mod callable)
            _log().debug("%s: no worker processes: the graph has no JSON form (%s: %s)", self.label,
                         type(exc).__name__, exc)
            return
        _log().info("%s: %s join%s the build (%s)", self.label, processes(n), "s" if n == 1 else "", why)
        with tempfile.TemporaryDirectory(prefix="cudnn-py-plans-") as tmp:
            workers: list[Worker] = []
            drivers: list[threading.Thread] = []
            try:
                env = worker_env()
                for w in range(n):
                    worker = self._start(Path(tmp), w, env)
                    if worker is None:
                        break
                    workers.append(worker)
                    drivers.append(threading.Thread(target=self._drive, args=(worker, request, queue),
                                                    name=f"cudnn-plan-worker-{w}", daemon=True))
                    drivers[-1].start()
                while any(d.is_alive() for d in drivers):
                    now = time.monotonic()
                    for worker in workers:
                        if queue.stopped:
                            worker.stop("the build was stopped")
                        elif now > worker.deadline:
                            worker.stop("it ran past its time")
                        elif ended.is_set():
                            worker.stop("", idle_only=True)  # nothing left to take (one still starting)
                    time.sleep(POLL_S)
            finally:
                for worker in workers:
                    worker.stop("")  # every driver has ended: its worker has nothing to do
                    worker.proc.wait()
                for d in drivers:
                    d.join()
                for worker in workers:
                    for pipe in (worker.proc.stdin, worker.proc.stdout):
                        if pipe is not None:
                            pipe.close()
            _log().info("%s: %d of %d plans built in %s", self.label, sum(w.built for w in workers), len(self.todo),
                        processes(len(workers)))

    def _start(self, tmp: Path, w: int, env: dict[str, str]) -> Worker | None:
        log = tmp / f"{w}.log"
        try:
            with open(log, "wb") as err:
                proc = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], env=env, cwd=tmp, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=err, text=True, encoding="utf-8")
        except OSError as exc:  # no more processes, no executable: the rest is built here
            _log().warning("%s: could not start a plan-build worker (%s); its plans are built here", self.label, exc)
            return None
        return Worker(proc, log)

    def _drive(self, worker: Worker, request: dict[str, Any], queue: PlanQueue) -> None:
        """Feed ``worker`` plans from ``queue`` one at a time until none is left or it ends; each
        plan it took is kept as `Elsewhere` (to restore) or `RETRY` (to build here)."""
        try:
            worker.send(request)
            hello = worker.receive()
            if hello is None or hello.get("identity") != request["identity"]:
                if worker.why_stopped != "":
                    why = ("failed (" + (hello["failed"] if hello and "failed" in hello else worker.why_ended()) + ")"
                           if hello is None or "failed" in hello
                           else "rebuilt the graph from its JSON as another backend graph")
                    _log().warning("%s: a plan-build worker %s; it built no plans", self.label, why)
                return
            while True:
                with worker.lock:
                    index = None if worker.proc.poll() is not None else queue.take()
                    if index is None:
                        return
                    worker.busy = index
                    worker.deadline = time.monotonic() + PER_PLAN_S
                c = self.todo[index]
                worker.send({"item": [c.engine_index, sorted(c.knobs.items())]})
                answer = worker.receive()
                if answer is None:
                    raise EOFError("its output ended")
                text = answer.get("plan")
                queue.keep(index, Elsewhere(partial(self._restore, c, text)) if text else RETRY)
                worker.built += bool(text)
                worker.busy = None
        except Exception as exc:  # noqa: BLE001 - it ended, a broken pipe, a garbled answer: what it held is built here
            why = worker.why_ended()  # while it still holds its plan, so that the pool does not stop it as idle
            if worker.busy is not None:
                queue.keep(worker.busy, RETRY)
                worker.busy = None
            if worker.why_stopped != "":
                _log().warning("%s: lost a plan-build worker (%s: %s; %s); its plans are built here", self.label,
                               type(exc).__name__, exc, why)
        finally:
            if worker.proc.stdin is not None:
                try:
                    worker.proc.stdin.close()  # the worker's end of input: it exits
                except OSError:
                    pass

    def _restore(self, c: Candidate, text: str) -> Descriptor:
        """On the caller's thread: the plan a worker built, restored with this process's handle."""
        return backend_plan.plan_from_json(self.pipeline.build_handle_ptr(), text, f"{self.label}: {c.name}",
                                           retention=c.retention)


def processes(n: int) -> str:
    """ "1 worker process", "2 worker processes"."""
    return f"{n} worker process" + ("" if n == 1 else "es")


def _log() -> Any:
    from ...log import get_logger

    return get_logger("build")
