"""Execution plans finalized in worker processes: ``CUDNN_PY_BUILD_PROCESSES=N`` (N >= 2).

Threads finalizing plans in one process wait on one another inside NVRTC (graph/parallel.py);
processes do not. With N set, ``build_plans(ALL)`` first hands the candidates to N worker
processes (``python -m cudnn.graph.plan_workers``). Each worker

- rebuilds the graph from its printed JSON on the same GPU,
- checks that it lowers to the same backend graph (same structure, shapes, types and uids, the
  identity by which the plan cache shares plans), else builds nothing,
- finalizes its share of the candidates one after another, each from its engine and knob
  choices, and writes cuDNN's JSON of each plan it built.

This process then restores each plan from that JSON with its own handle: the JSON of a plan
holds its compiled kernels, so restoring it compiles nothing, with or without the CUDA driver's
JIT cache the workers filled. What the workers did not return (a candidate that failed there,
every candidate of a worker that failed, ran past its time or rebuilt another graph) is built
here afterwards as before, so the plans, their names and order, the errors (raised here, by
cuDNN, as one after another) and the selection are those of a build in this process. No worker
outlives the call.

A graph is built in this process alone when the workers could not reproduce it or would not
help: a kernel cache, DEVICEPROP (ahead-of-time) builds, dynamic or overridden shapes, a
non-default lowering, fewer than two candidates to build, a graph without a JSON form. Each
worker starts an interpreter and a CUDA context (seconds, and memory on the GPU), so this
pays off for large sweeps of runtime-compiled plans (autotuning a knob space), not for
a handful of plans.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lib.errors import CudnnError
from ..backend import engine as eng
from ..backend import plan as backend_plan
from .parallel import ENV as THREADS_ENV
from .parallel import PROCESSES_ENV as ENV
from .parallel import build_processes as build_processes  # the setting, read where the threads' is
from .parallel import start_order
from .pipeline import Pipeline, lowered_identity
from .plans import Candidate

if TYPE_CHECKING:
    from .graph import pygraph

START_S = 120.0  # a worker's allowance to start (interpreter, cudnn-py, CUDA context) and rebuild the graph
PER_PLAN_S = 60.0  # and for each plan of its share (a runtime-compiled kernel takes about a second)


def why_not(p: Pipeline, todo: Sequence[Candidate], processes: int) -> str | None:
    """Why the candidates ``todo`` of ``p`` are not built in worker processes; None if they can be."""
    g = p.graph
    reasons = (
        (processes < 2, f"{ENV} is not set to 2 or more"),
        (g.kernel_cache is not None, "the graph has a kernel cache"),
        (g.device_property is not None, "the graph is built for described device properties"),
        (bool(g.is_dynamic_shape_enabled), "the graph has dynamic shapes"),
        (bool(g.is_override_shape_enabled), "the graph overrides shapes"),
        (p.lowering is not None, "a lowering other than the graph's default"),
        (not sys.executable, "no Python executable to start workers with"),
        (len(todo) < 2, "fewer than two plans to build"),
        (any(c.config is None for c in todo), "a candidate without an engine config"),
    )
    return next((why for cond, why in reasons if cond), None)


def identity(p: Pipeline) -> str:
    """A digest of the backend graph ``p`` lowers to (`lowered_identity`) and its SM count."""
    return hashlib.sha256(repr((*lowered_identity(p), p.graph.sm_count)).encode()).hexdigest()


def shares(todo: Sequence[Candidate], workers: int) -> list[list[int]]:
    """Indices into ``todo`` per worker: dealt in turn in `start_order` (each engine's plans spread
    over the workers, so no worker gets one slow engine's plans only)."""
    out: list[list[int]] = [[] for _ in range(workers)]
    for k, i in enumerate(start_order(todo)):
        out[k % workers].append(i)
    return out


def worker_env() -> dict[str, str]:
    """A worker's environment: this one, building one plan at a time, no workers of its own, no
    plan cache, and this cudnn-py first on its path unless it is an installed package."""
    env = dict(os.environ)
    env[THREADS_ENV] = "1"
    env[ENV] = "0"
    env["CUDNN_PY_PLAN_CACHE"] = "0"
    root = str(Path(__file__).resolve().parents[2])  # the directory that holds the cudnn package
    installed = {str(Path(s).resolve()) for s in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(x for x in (root, env.get("PYTHONPATH", "")) if x)
    return env


def build(p: Pipeline, cands: Sequence[Candidate], processes: int) -> str | None:
    """Finalize the unbuilt candidates of ``cands`` in worker processes and keep each plan a
    worker returned (restored here); the rest stay unbuilt for the caller to build. Returns why
    nothing was handed to workers, or None."""
    todo = [c for c in cands if c.unbuilt]
    reason = why_not(p, todo, processes)
    if reason is None:
        try:
            text = str(p.graph)
        except Exception as exc:  # noqa: BLE001 - a node without a JSON form (e.g. a score_mod callable)
            reason = f"the graph has no JSON form ({type(exc).__name__}: {exc})"
    if reason is not None:
        _log().debug("%s: plans built in this process: %s", p.label, reason)
        return reason
    request = {"graph": text, "device": p.device(), "identity": identity(p)}
    parts = shares(todo, min(processes, len(todo)))
    replies = _run_workers(p.label, request, [[(i, todo[i]) for i in part] for part in parts])
    handle = p.build_handle_ptr()
    restored = 0
    for reply in replies:
        for index, plan_text in reply.items():
            c = todo[index]
            try:
                plan = backend_plan.plan_from_json(handle, plan_text, f"{p.label}: {c.name}", retention=c.retention)
            except CudnnError as exc:
                _log().info("%s: %s: the plan a worker built was not restored here (%s); building it here",
                            p.label, c.name, exc)
                continue
            c.finish_build(plan, None)
            restored += 1
    _log().debug("%s: %d of %d plans built in %d worker processes", p.label, restored, len(todo), len(parts))
    return None


def _run_workers(label: str, request: dict[str, Any], parts: list[list[tuple[int, Candidate]]]) -> list[dict[int, str]]:
    """Start a worker per part, wait for all (each within its allowance), and return per worker
    the plans it built: index into the caller's candidates -> cuDNN's plan JSON."""
    replies: list[dict[int, str]] = []
    with tempfile.TemporaryDirectory(prefix="cudnn-py-plans-") as tmp:
        procs: list[tuple[subprocess.Popen[bytes], Path, Path, float]] = []
        env = worker_env()
        try:
            for w, part in enumerate(parts):
                items = [[i, c.engine_index, sorted(c.knobs.items())] for i, c in part]
                ask, answer, log = (Path(tmp) / f"{w}.{x}" for x in ("request", "reply", "log"))
                ask.write_text(json.dumps({**request, "items": items}))
                try:
                    with open(log, "wb") as out:
                        proc = subprocess.Popen([sys.executable, "-m", __name__, str(ask), str(answer)], env=env,
                                                cwd=tmp, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
                except OSError as exc:  # no more processes, no executable: the rest is built here
                    _log().warning("%s: could not start a plan-build worker (%s); its plans are built here", label, exc)
                    break
                procs.append((proc, answer, log, time.monotonic() + START_S + PER_PLAN_S * len(items)))
            for proc, answer, log, deadline in procs:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    _log().warning("%s: a plan-build worker ran past its time and was stopped; its plans are built "
                                   "here", label)
                    continue
                replies.append(_read_reply(label, proc.returncode, answer, log, request["identity"]))
        finally:
            for proc, *_ in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return replies


def _read_reply(label: str, returncode: int, answer: Path, log: Path, wanted: str) -> dict[int, str]:
    """The plans of one worker's reply; {} (logged with the end of its output) when it failed
    or rebuilt another graph."""
    try:
        reply = json.loads(answer.read_text())
        if returncode:
            raise ValueError(f"exit status {returncode}")
    except (OSError, ValueError) as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        _log().warning("%s: a plan-build worker failed (%s%s); its plans are built here", label, exc,
                       f": {' | '.join(tail)}" if tail else "")
        return {}
    if "failed" in reply:
        _log().warning("%s: a plan-build worker failed (%s); its plans are built here", label, reply["failed"])
        return {}
    if reply.get("identity") != wanted:
        _log().warning("%s: a plan-build worker rebuilt the graph from its JSON as another backend graph; "
                       "its plans are built here", label)
        return {}
    return {int(i): text for i, text in reply.get("plans", {}).items()}


def _log() -> Any:
    from ..log import get_logger

    return get_logger("build")


# -- the worker --------------------------------------------------------------------------------

def serve(request: dict[str, Any]) -> dict[str, Any]:
    """In a worker: rebuild the graph of ``request``, and if it lowers to the same backend graph,
    finalize each requested engine config; the JSON of each plan built, by candidate index."""
    from .._lib import cuda
    from .graph import pygraph

    cuda.set_device(int(request["device"]))
    g: pygraph = pygraph()
    g.deserialize(request["graph"])
    g.validate()
    p = Pipeline(g)
    reply: dict[str, Any] = {"identity": identity(p), "plans": {}}
    if reply["identity"] != request["identity"]:
        return reply
    handle, op_graph = p.build_handle_ptr(), p.op_graph()
    for index, engine_index, knobs in request["items"]:
        c: Candidate | None = None
        try:
            e = eng.engine(op_graph, int(engine_index), g.sm_count, p.label)
            try:
                c = Candidate(eng.engine_config(e, {int(k): int(v) for k, v in knobs}, p.label), source="worker")
            except BaseException:
                e.close()
                raise
            reply["plans"][str(index)] = backend_plan.plan_json(c.build(handle, p.label))
        except CudnnError:
            pass  # the caller builds it itself and raises or keeps cuDNN's error there
        finally:
            if c is not None:
                if c.plan is not None:
                    c.plan.close()
                assert c.config is not None
                c.config.close()
    return reply


def main(argv: Sequence[str]) -> int:
    """``python -m cudnn.graph.plan_workers REQUEST REPLY``: serve the request file into the reply file."""
    ask, answer = argv
    try:
        reply = serve(json.loads(Path(ask).read_text()))
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which builds the plans itself
        reply = {"failed": f"{type(exc).__name__}: {exc}"}
    tmp = Path(answer + ".tmp")
    tmp.write_text(json.dumps(reply))
    tmp.replace(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
