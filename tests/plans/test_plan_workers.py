"""Plans built in worker processes beside the threads (_graph/build/workers.py), what needs no GPU:
the setting (`cudnn.set_build_processes`, CUDNN_PY_BUILD_PROCESSES; unset, a build starts no
process) and when workers join a build, when a graph is built in this process only, a
worker's environment, the graph identity a worker must reproduce from the printed JSON, how the
threads' build keeps what helpers return (restored plans, plans handed back), real worker
processes that cannot serve on this machine, and a stand-in worker process that dies, is
killed, closes its output and stays, garbles its answer, runs past its time or fails a plan:
each time its plans are built here, the warning says how it ended, and nothing outlives the
build. The build itself against torch: tests/plans/test_plan_workers_gpu.py.

Plans here are the stand-ins of plan_stand_ins.py (the `fake_plans` fixture)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from support.plan_stand_ins import FAILING, NOT_SUPPORTED, FakePlan, candidates, outcome

import cudnn
from cudnn._graph import plan_worker
from cudnn._graph.build import workers
from cudnn._graph.build.pipeline import Pipeline
from cudnn._graph.plans import threads as parallel
from cudnn._graph.plans.candidates import Candidate, PlanSet
from cudnn._graph.plans.threads import RETRY, Elsewhere, PlanQueue, WorkerSetting, build_all
from cudnn._lib import cuda
from cudnn._lib.status import exception_class

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
NOW = WorkerSetting(4, 0.0, "CUDNN_PY_BUILD_PROCESSES=4")
AUTO = WorkerSetting(8, parallel.AUTO_AFTER_S, "CUDNN_PY_BUILD_PROCESSES=auto")  # on 8 cores


def conv_relu(**kw: object) -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT, **kw)
    x = g.tensor(name="X", dim=[20, 40, 30, 40], stride=[40 * 30 * 40, 1, 40 * 40, 40], data_type=HALF)
    w = g.tensor(name="W", dim=[54, 40, 3, 4], stride=[480, 1, 160, 40], data_type=HALF)
    conv = g.conv_fprop(image=x, weight=w, padding=[0, 1], stride=[2, 3], dilation=[1, 1])
    g.relu(name="relu", input=conv, lower_clip=0.5, upper_clip=0.55).set_output(True)
    g.validate()
    return g


@pytest.fixture(autouse=True)
def processes_as_the_environment_says() -> Iterator[None]:
    """Each test starts and ends with no `set_build_processes` value in force."""
    parallel.set_build_processes(None)
    yield
    parallel.set_build_processes(None)


@pytest.mark.parametrize("text, processes", [(None, None), ("", None), ("0", None), ("1", 1), ("2", 2), (" 16 ", 16),
                                              ("auto", "auto"), (" Auto ", "auto")])
def test_the_setting(monkeypatch: pytest.MonkeyPatch, text: str | None, processes: int | str | None) -> None:
    if text is None:
        monkeypatch.delenv(workers.ENV, raising=False)
    else:
        monkeypatch.setenv(workers.ENV, text)
    expected = None if processes is None else (
        WorkerSetting(parallel.available_cores(), parallel.AUTO_AFTER_S, f"{workers.ENV}=auto") if processes == "auto"
        else WorkerSetting(int(processes), 0.0, f"{workers.ENV}={processes}"))  # N: with the build
    assert parallel.build_processes() == expected


def test_the_call_overrides_the_environment_until_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cudnn.set_build_processes is parallel.set_build_processes
    monkeypatch.setenv(workers.ENV, "0")
    cudnn.set_build_processes(3)
    assert parallel.build_processes() == WorkerSetting(3, 0.0, "set_build_processes(3)")
    cudnn.set_build_processes("auto")
    assert parallel.build_processes() == WorkerSetting(parallel.available_cores(), parallel.AUTO_AFTER_S,
                                                       "set_build_processes('auto')")
    monkeypatch.setenv(workers.ENV, "4")
    cudnn.set_build_processes(0)
    assert parallel.build_processes() is None
    cudnn.set_build_processes(None)  # the environment's again
    assert parallel.build_processes() == WorkerSetting(4, 0.0, f"{workers.ENV}=4")


@pytest.mark.parametrize("text, got", [("four", "'four'"), ("-2", "-2"), ("2.5", "'2.5'")])
def test_a_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, text: str, got: str) -> None:
    monkeypatch.setenv(workers.ENV, text)
    with pytest.raises(ValueError) as err:
        parallel.build_processes()
    assert str(err.value) == f"{workers.ENV}: expected an int >= 0 (0: no worker processes) or 'auto', got {got}"


@pytest.mark.parametrize("value, error, says", [
    (-1, ValueError, "got -1"),
    ("4", ValueError, "got '4'"),  # text is the environment's, not the call's
    ("AUTO", ValueError, "got 'AUTO'"),
    (2.5, TypeError, "got float (2.5)"),
    (True, TypeError, "got bool (True)"),
    ([2], TypeError, "got list ([2])"),
])
def test_a_bad_call_names_the_setting(monkeypatch: pytest.MonkeyPatch, value: object, error: type[Exception],
                                      says: str) -> None:
    monkeypatch.setenv(workers.ENV, "2")
    with pytest.raises(error) as err:
        cudnn.set_build_processes(value)
    assert str(err.value) == f"set_build_processes: expected an int >= 0 (0: no worker processes) or 'auto', {says}"
    assert parallel.build_processes() == WorkerSetting(2, 0.0, f"{workers.ENV}=2")  # unchanged


def cands(*engines: int) -> list[Candidate]:
    return [Candidate(None, engine_index=e, knobs={}) for e in engines]


def test_graphs_workers_cannot_reproduce_are_built_here(monkeypatch: pytest.MonkeyPatch) -> None:
    g, dynamic = conv_relu(), conv_relu(is_dynamic_shape_enabled=True)  # a pipeline refers to its graph weakly
    p = Pipeline(g)
    assert workers.why_not(p, cands(1)) == "fewer than two plans to build"
    assert workers.why_not(p, cands(1, 2)) == "a candidate without an engine config"
    assert "dynamic shapes" in str(workers.why_not(Pipeline(dynamic), cands(1, 2)))
    assert "lowering" in str(workers.why_not(Pipeline(g, lowering="other"), cands(1, 2)))
    monkeypatch.setattr(sys, "executable", "")
    assert "no Python executable" in str(workers.why_not(p, cands(1, 2)))


def test_a_workers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(workers.ENV, "8")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = workers.worker_env()
    assert (env[workers.ENV], env["CUDNN_PY_BUILD_THREADS"], env["CUDNN_PY_PLAN_CACHE"]) == ("0", "1", "0")
    root = str(Path(cudnn.__file__).resolve().parents[1])
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[-1] == "/elsewhere"
    assert paths[0] == root or root in {str(Path(p).resolve()) for p in __import__("site").getsitepackages()}


def test_the_printed_graph_rebuilds_to_the_same_identity() -> None:
    g = conv_relu()
    again = cudnn.pygraph()
    again.deserialize(str(g))
    again.validate()
    assert workers.identity(Pipeline(g)) == workers.identity(Pipeline(again))
    other = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    x = other.tensor(name="X", dim=[20, 40, 30, 40], stride=[40 * 30 * 40, 1, 40 * 40, 40], data_type=HALF)
    w = other.tensor(name="W", dim=[54, 40, 3, 4], stride=[480, 1, 160, 40], data_type=HALF)
    conv = other.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[2, 3], dilation=[1, 1])  # other padding
    other.relu(name="relu", input=conv, lower_clip=0.5, upper_clip=0.55).set_output(True)
    other.validate()
    assert workers.identity(Pipeline(other)) != workers.identity(Pipeline(g))


def queue_after(seconds: float, kept: int, left: int) -> PlanQueue:
    """A build that has run ``seconds``, kept ``kept`` plans and has ``left`` not taken."""
    q = PlanQueue(range(kept + left), [None] * (kept + left))
    for _ in range(kept):
        q.keep(q.take() or 0, None)
    q.started -= seconds
    return q


def test_when_workers_join_a_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "set_device", lambda device: None)
    monkeypatch.setattr(cuda, "free_memory", lambda: 10 * workers.WORKER_GPU_BYTES)
    assert workers.workers_for(NOW, queue_after(0.0, 0, 30), 0) == (4, f"{workers.ENV}=4")  # asked for: at once
    assert workers.workers_for(NOW, queue_after(0.0, 0, 3), 0)[0] == 3  # no more than the plans left
    n, why = workers.workers_for(AUTO, queue_after(2.0, 20, 30), 0)  # 3 s more here: not worth starting
    assert n == 0 and "30 plans left, about 3.0 s more" in why
    n, why = workers.workers_for(AUTO, queue_after(2.0, 4, 30), 0)  # 15 s more: half the free memory's room
    assert n == 5 and "room on the GPU for 5" in why
    assert workers.workers_for(AUTO, queue_after(2.0, 0, 100), 0)[0] == 5  # none kept yet: the slowest case
    monkeypatch.setattr(cuda, "free_memory", lambda: 100 * workers.WORKER_GPU_BYTES)
    assert workers.workers_for(AUTO, queue_after(2.0, 0, 100), 0)[0] == 8  # the cores
    assert workers.workers_for(AUTO, queue_after(2.0, 0, 1), 0)[0] == 0
    monkeypatch.setattr(cuda, "free_memory", lambda: 3 * workers.WORKER_GPU_BYTES)
    assert workers.workers_for(AUTO, queue_after(2.0, 0, 100), 0)[0] == 0  # room for one: none


@pytest.mark.skipif(cuda.device_count() > 0, reason="a machine without a GPU")
def test_without_a_gpu_auto_starts_no_worker() -> None:
    n, why = workers.workers_for(AUTO, queue_after(2.0, 0, 100), 0)
    assert n == 0 and "free memory is unknown" in why


class StandIn:
    """An `Offload` on a thread of this process: returns engine ``e``'s plan as built elsewhere
    (restored as a finalized FakePlan), hands back the engines in ``back``, and gives one whose
    restore fails for the engines in ``unrestorable``."""

    def __init__(self, todo: list[Candidate], back: set[int], unrestorable: set[int]) -> None:
        self.todo, self.back, self.unrestorable = todo, back, unrestorable
        self.restored: list[FakePlan] = []
        self.took: list[int] = []

    def restore(self, engine: int) -> FakePlan:
        if engine in self.unrestorable:
            raise exception_class(NOT_SUPPORTED)(NOT_SUPPORTED, "restoring", "refused here")
        plan = FakePlan(engine, f"restored {engine}")
        plan.finalized = True
        self.restored.append(plan)
        return plan

    def run(self, queue: PlanQueue, ended: threading.Event) -> None:
        while (i := queue.take()) is not None:
            engine = self.todo[i].engine_index
            self.took.append(engine)
            queue.keep(i, RETRY if engine in self.back else Elsewhere(partial(self.restore, engine)))  # type: ignore[arg-type]
            time.sleep(0.001)


@pytest.mark.parametrize("threads", [1, 3])
def test_plans_from_helpers_are_kept_the_rest_built_here(fake_plans: list[FakePlan], threads: int) -> None:
    serial = candidates()
    build_all(serial, 0x1, "g", threads=1)
    fake_plans.clear()
    stand_ins: list[StandIn] = []

    def offload(todo: Sequence[Candidate]) -> StandIn:
        stand_ins.append(StandIn(list(todo), back={3, 4, 8}, unrestorable={6, 7}))  # 3, 8 (and 7 here) fail
        return stand_ins[0]

    cands = candidates()
    build_all(cands, 0x1, "g", threads=threads, offload=offload)
    helper = stand_ins[0]
    assert helper.took  # it took some while this process built others
    assert outcome(cands) == outcome(serial)  # same plans, workspaces and errors, in order
    for c in cands:
        e = c.engine_index
        if e in FAILING:
            assert c.plan is None and f"g: eng{e}_k1={e % 3}: finalizing EXECUTION_PLAN" in str(c.error)
        elif e in helper.took and e not in {4, 6}:
            assert any(c.plan is r for r in helper.restored)  # type: ignore[comparison-overlap]  # the restored plan, its unfinalized twin closed
            assert next(p for p in fake_plans if p.engine == e and p.label == "g").closed
        else:
            assert c.plan is not None and c.plan.label == "g" and c.plan.finalized  # built here


def test_a_helper_needs_more_than_one_plan(fake_plans: list[FakePlan]) -> None:
    asked: list[int] = []
    build_all(candidates(1), 0x1, "g", threads=2, offload=lambda todo: asked.append(len(todo)))
    assert asked == []


def children() -> list[str]:
    """The processes started by any thread of this one that are still there (a process is listed
    under the thread that started it, such as the pool's, while that thread lives)."""
    return [pid for task in Path(f"/proc/{os.getpid()}/task").iterdir()
            for pid in (task / "children").read_text().split()]


@contextmanager
def plan_0_held_until(logged: Callable[[logging.LogRecord], bool], monkeypatch: pytest.MonkeyPatch,
                      times: int = 1) -> Iterator[None]:
    """In the block, finalizing the plan of engine 0 in this process waits until ``times``
    records of the ``cudnn.build`` logger satisfy ``logged`` (the workers take the other plans
    meanwhile)."""
    seen = threading.Semaphore(0)

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if logged(record):
                seen.release()

    finalize = FakePlan.finalize

    def held(plan: FakePlan) -> FakePlan:
        if plan.engine == 0:
            assert all(seen.acquire(timeout=120) for _ in range(times))
        return finalize(plan)

    monkeypatch.setattr(FakePlan, "finalize", held)
    watch = Watch()
    logging.getLogger("cudnn.build").addHandler(watch)
    try:
        yield
    finally:
        logging.getLogger("cudnn.build").removeHandler(watch)
        monkeypatch.setattr(FakePlan, "finalize", finalize)


@pytest.fixture
def on_device_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device a pipeline builds on, which asks CUDA (absent here): device 0."""
    monkeypatch.setattr(Pipeline, "device", lambda self: 0)


@pytest.mark.skipif(cuda.device_count() > 0, reason="workers fail for want of a GPU only without one")
def test_real_workers_that_cannot_serve_leave_their_plans_here(fake_plans: list[FakePlan], on_device_0: None,
                                                               caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real worker processes on a machine without a GPU: each answers why it cannot rebuild
    the graph; every plan is built here as one after another would; no process or thread is left."""
    g = conv_relu()
    p = Pipeline(g)
    serial = candidates()
    build_all(serial, 0x1, "g", threads=1)
    before = threading.active_count()
    cands = candidates()
    # the build lasts until both workers said why they cannot serve
    with plan_0_held_until(lambda r: r.levelno == logging.WARNING, monkeypatch, times=2), \
            caplog.at_level(logging.DEBUG, logger="cudnn.build"):
        build_all(cands, 0x1, "g", threads=1, offload=lambda todo: workers.pool(p, todo, WorkerSetting(2, 0.0, "test")))
    assert outcome(cands) == outcome(serial)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and all("a plan-build worker failed (" in m and "it built no plans" in m for m in warned), warned
    assert any("CUDA" in m or "GPU" in m for m in warned), warned  # the worker says why
    assert "0 of 12 plans built in 2 worker processes" in caplog.text
    assert threading.active_count() == before and children() == []


def test_auto_starts_nothing_for_a_short_build(fake_plans: list[FakePlan], on_device_0: None,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    g = conv_relu()
    p = Pipeline(g)
    cands = candidates()
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="cudnn.build"):
        build_all(cands, 0x1, "g", threads=2, offload=lambda todo: workers.pool(p, todo, AUTO))
    assert time.monotonic() - started < parallel.AUTO_AFTER_S  # the build ended first: not waited for
    assert "worker process" not in caplog.text and children() == []


@pytest.mark.parametrize("request_line, says", [("", None), ("{\"graph\": \"{\\\"nodes\\\": 1}\", \"device\": 0}\n",
                                                               "failed")])
def test_a_worker_answers_why_it_cannot_serve(request_line: str, says: str | None) -> None:
    answers = io.StringIO()
    plan_worker.serve(io.StringIO(request_line), answers)
    got = [json.loads(line) for line in answers.getvalue().splitlines()]
    if says is None:
        assert got == []  # no request: nothing to answer
    else:
        assert len(got) == 1 and set(got[0]) == {"failed"} and got[0]["failed"]


FAKE_WORKER = '''#!{python}
"""A stand-in worker process speaking the pool's protocol: it answers engine e's plan with
"PLAN e", none for the engines whose plans fail, and for engine 2 does what FAKE_MODE says."""
import json, os, sys, time
request = json.loads(sys.stdin.readline())
print(json.dumps({{"identity": request["identity"]}}), flush=True)
for line in sys.stdin:
    engine, knobs = json.loads(line)["item"]
    mode = os.environ["FAKE_MODE"] if engine == 2 else "builds"
    if mode == "dies":
        os._exit(3)
    if mode == "is killed":
        os.kill(os.getpid(), 9)
    if mode == "closes its output":
        os.close(1)
        time.sleep(60)
    if mode == "garbles":
        print("{{not json", flush=True)
        continue
    if mode == "hangs":
        time.sleep(60)
    failing = engine in {failing} or mode == "fails there"
    print(json.dumps({{"plan": None if failing else f"PLAN {{engine}}"}}), flush=True)
'''


def stand_in_workers(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes started from here on are `FAKE_WORKER`s in ``mode``; the plans they
    return are restored as finalized FakePlans labelled "restored PLAN e"."""
    script = tmp_path / "fake-worker"
    script.write_text(FAKE_WORKER.format(python=sys.executable, failing=sorted(FAILING)))
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    monkeypatch.setenv("FAKE_MODE", mode)
    monkeypatch.setattr(Pipeline, "build_handle_ptr", lambda self: 0x1)

    def restore(handle: int, text: str, label: str, retention: object = None) -> FakePlan:
        plan = FakePlan(int(text.split()[1]), f"restored {text}")
        plan.finalized = True
        return plan

    monkeypatch.setattr(workers.backend_plan, "plan_from_json", restore)


@pytest.mark.parametrize("mode, says", [
    ("builds", None),
    ("fails there", None),  # no plan: built here, as cuDNN's error would be raised here
    ("dies", "lost a plan-build worker (EOFError: its output ended; exit status 3)"),
    ("is killed", "lost a plan-build worker (EOFError: its output ended; killed by SIGKILL)"),
    ("closes its output", "lost a plan-build worker (EOFError: its output ended; "
                          "it was still running 0.2 s after its output ended)"),
    ("garbles", "lost a plan-build worker (JSONDecodeError: Expecting property name"),
    ("hangs", "lost a plan-build worker (EOFError: its output ended; it ran past its time)"),
])
def test_a_worker_process_that_fails_leaves_its_plan_here(fake_plans: list[FakePlan], on_device_0: None,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture, mode: str,
                                                          says: str | None) -> None:
    """A real process in the worker's place (`FAKE_WORKER`) takes plans 1, 2, ... while this
    process is held on plan 0; engine 2's plan meets ``mode``. Plans it returned are restored
    (stand-ins), the rest built here: the serial outcome, and no process or thread left."""
    stand_in_workers(mode, tmp_path, monkeypatch)
    monkeypatch.setattr(workers, "PER_PLAN_S", 1.0 if mode == "hangs" else workers.PER_PLAN_S)
    if mode == "closes its output":  # and stays: given this long to exit before it is said to be running
        monkeypatch.setattr(workers, "EXIT_S", 0.2)
    serial = candidates()
    build_all(serial, 0x1, "g", threads=1)
    g = conv_relu()
    p = Pipeline(g)
    cands = candidates()
    before = threading.active_count()
    # this process takes plan 0 and holds it until the worker is done
    with plan_0_held_until(lambda r: "plans built in 1 worker process" in r.getMessage(), monkeypatch), \
            caplog.at_level(logging.INFO, logger="cudnn.build"):
        build_all(cands, 0x1, "g", threads=1, offload=lambda todo: workers.Pool(p, todo, WorkerSetting(1, 0.0, "test")))
    assert outcome(cands) == outcome(serial)
    restored = [c.engine_index for c in cands if c.plan is not None and c.plan.label.startswith("restored")]
    if mode == "builds":  # the worker went on to the end of the queue
        assert restored == [e for e in range(1, 12) if e not in FAILING]
        assert f"{p.label}: 1 worker process joins the build (test)" in caplog.text  # one: singular
        assert f"{p.label}: {len(restored)} of 12 plans built in 1 worker process\n" in caplog.text
    elif mode == "fails there":  # and plan 2 was built here
        assert restored == [e for e in range(1, 12) if e not in FAILING | {2}]
    else:
        assert restored == [1]  # it was lost on plan 2: plan 2 and the rest were built here
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if says is None:
        assert warned == []
    else:
        assert len(warned) == 1 and says in warned[0] and warned[0].endswith("its plans are built here"), warned
    assert threading.active_count() == before and children() == []


@pytest.mark.parametrize("env, call, starts", [
    (None, None, False),  # unset: never a worker process
    ("0", None, False),
    ("auto", 0, False),  # the call wins
    ("auto", None, True),
    (None, "auto", True),
    (None, 2, True),
])
def test_a_build_starts_worker_processes_only_when_asked(fake_plans: list[FakePlan], on_device_0: None,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture, env: str | None,
                                                         call: int | str | None, starts: bool) -> None:
    """``build_plans(ALL)`` of a pipeline whose plan 0 takes a second (or, where workers are
    asked for, until one is seen): with room for workers on the GPU, four cores and "auto"
    deciding after 0.05 s, "auto" and N start stand-in workers; unset or 0, no process is
    started at any time of the build, and nothing is said of workers. The same plans either way."""
    stand_in_workers("builds", tmp_path, monkeypatch)
    monkeypatch.setattr(parallel, "AUTO_AFTER_S", 0.05)
    monkeypatch.setattr(parallel, "available_cores", lambda: 4)
    monkeypatch.setattr(workers, "AUTO_LEFT_S", 0.0)
    monkeypatch.setattr(cuda, "set_device", lambda device: None)
    monkeypatch.setattr(cuda, "free_memory", lambda: 100 * workers.WORKER_GPU_BYTES)
    monkeypatch.setenv(parallel.ENV, "1")  # one thread: plan 0 holds the build here
    if env is None:
        monkeypatch.delenv(workers.ENV, raising=False)
    else:
        monkeypatch.setenv(workers.ENV, env)
    if call is not None:
        cudnn.set_build_processes(call)
    serial = candidates()
    build_all(serial, 0x1, "g", threads=1)
    plans = PlanSet("g")
    for c in reversed(candidates()):
        plans.put_first(c)
    monkeypatch.setattr(Pipeline, "plans", lambda self: plans)
    g = conv_relu()  # a pipeline refers to its graph weakly
    p = Pipeline(g)
    seen: set[str] = set()
    finalize = FakePlan.finalize

    def held(plan: FakePlan) -> FakePlan:
        if plan.engine == 0:
            deadline = time.monotonic() + (60.0 if starts else 1.0)
            while time.monotonic() < deadline and not (starts and seen):
                seen.update(children())
                time.sleep(0.01)
        return finalize(plan)

    monkeypatch.setattr(FakePlan, "finalize", held)
    before = threading.active_count()
    with caplog.at_level(logging.DEBUG, logger="cudnn.build"):
        p.build_plans(cudnn.build_plan_policy.ALL)
    assert outcome(plans.candidates) == outcome(serial)
    if starts:
        assert seen, caplog.text
        asked = f"set_build_processes({call!r})" if call is not None else f"{workers.ENV}={env}"
        assert re.search(rf"{re.escape(p.label)}: [2-4] worker processes join the build \({re.escape(asked)}",
                         caplog.text), caplog.text
    else:
        assert seen == set() and "worker process" not in caplog.text, caplog.text
    assert threading.active_count() == before and children() == []
