"""Lowering trials (`cudnn._graph.build.trial`): how a trial routes executes between the default
plan and the other lowering's, when it starts, how it decides, and when it gives up.

The pipelines, Runners and CUDA-event timings here are stand-ins that record what the trial asks
of them: the routing and the decision are the trial's own logic. The GPU test that builds both
lowerings and checks every output through the switch is in test_norm_gpu.py.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest

import cudnn
from cudnn._graph.build import trial as trial_mod
from cudnn._graph.build.trial import (
    GIVE_UP_AFTER,
    SAMPLES,
    TRIAL_AFTER,
    Trial,
    set_lowering_trials,
    trials_enabled,
)


class Runner:
    """A Runner's part a trial sees: its workspace and the probe its next launch consumes."""

    def __init__(self, stream: int, workspace: int) -> None:
        self.stream, self.workspace_size, self.probe = stream, workspace, None
        self.launches = 0

    def run(self) -> None:
        """What Runner._launch does with a probe: marks around the launch, the probe then cleared."""
        probe, self.probe = self.probe, None
        if probe is not None:
            probe.started(None, self.stream)
        self.launches += 1
        if probe is not None:
            probe.ended()


class Sample:
    """A timing that reads its time from ``times`` by the stream it ran on (a=1, b=2)."""

    times: ClassVar[dict[int, float]] = {}
    done = True  # whether the GPU has reached the end event

    def __init__(self) -> None:
        self.stream: int | None = None

    def started(self, handle: Any, stream: int | None) -> None:
        self.stream = stream

    def ended(self) -> None:
        pass

    def ms(self) -> float | None:
        return self.times[self.stream] if self.done and self.stream is not None else None


class Plans:
    selected: Any = None


class Pipe:
    """The pipelines a trial compares: what it calls, recorded."""

    def __init__(self, name: str, runner: Runner | None = None, plans_error: Exception | None = None) -> None:
        self.label, self.name, self._runner = f"graph ({name})", name, runner
        self.calls: list[str] = []
        self.plans_error = plans_error
        self._plans = Plans()

    def device(self) -> int:
        return 0

    def create_plans(self, modes: Any) -> None:
        self.calls.append("create_plans")
        if self.plans_error is not None:
            raise self.plans_error

    def plans(self) -> Any:
        return self._plans

    def select(self, cand: Any) -> None:
        self.calls.append(f"select {cand}")

    def runner(self, cand: Any) -> Runner:
        assert self._runner is not None
        return self._runner

    def lowering_name(self) -> str:
        return self.name

    def end_trial(self) -> None:
        self.calls.append("end_trial")

    def take_over(self, other: Pipe) -> None:
        self.calls.append(f"take_over {other.name}")


class Worker:
    """The trial thread's submit: jobs kept, finished by the test."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def submit(self, job: Any) -> None:
        self.jobs.append(job)

    def finish(self, selected: Any = "cand", error: BaseException | None = None) -> None:
        for job in self.jobs:
            job.selected, job.error = selected, error
            job.done.set()


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> Any:
    worker = Worker()
    monkeypatch.setattr(trial_mod, "_worker", worker)
    monkeypatch.setattr(trial_mod, "Sample", Sample)
    monkeypatch.setattr(Sample, "times", {1: 1.0, 2: 0.5})
    monkeypatch.setattr(Sample, "done", True)
    a, b = Runner(1, 256), Runner(2, 256)
    p, q = Pipe("NORM"), Pipe("AFFINE_EPILOGUE", b)
    remembered: list[Any] = []
    return Trial(p, q, remembered.append), a, b, p, q, worker, remembered


def execute(t: Trial, a: Runner, sized: bool = True) -> Runner:
    runner = t.route(a, sized)
    runner.run()
    return runner


def test_the_default_runs_until_the_other_plan_is_built(setup: Any) -> None:
    t, a, b, p, q, worker, remembered = setup
    for _ in range(TRIAL_AFTER - 1):
        assert execute(t, a) is a
    assert not worker.jobs and not q.calls  # nothing started before TRIAL_AFTER executes
    assert execute(t, a) is a
    assert q.calls == ["create_plans"] and len(worker.jobs) == 1  # ranked here, finalized on the thread
    for _ in range(5):
        assert execute(t, a) is a  # still building
    assert a.launches == TRIAL_AFTER + 5 and b.launches == 0 and not remembered


def run_trial(t: Trial, a: Runner, worker: Worker, sized: bool = True, limit: int = 100) -> list[Runner]:
    """Executes until the trial decides; the Runners they ran, in order, after the build."""
    for _ in range(TRIAL_AFTER):
        execute(t, a, sized)
    worker.finish()
    ran = []
    for _ in range(limit):
        if t.decided or t.ended:
            break
        ran.append(execute(t, a, sized))
    return ran


def test_a_faster_other_lowering_is_kept_and_remembered(setup: Any) -> None:
    t, a, b, p, q, worker, remembered = setup
    pending = cudnn.lowering_trials_pending()
    assert pending >= 1
    ran = run_trial(t, a, worker)
    assert cudnn.lowering_trials_pending() == pending - 1
    timed = ran[:2 * SAMPLES]
    assert timed[:4] == [a, b, a, b]  # alternated, each execute timed
    assert timed.count(a) == SAMPLES and timed.count(b) == SAMPLES
    assert ran[2 * SAMPLES:] == [b]  # the execute that found the timings done runs the winner
    assert t.decided and q.calls == ["create_plans", "select cand"]
    assert p.calls == ["take_over AFFINE_EPILOGUE"]  # every caller fits it: the graph's pipeline becomes q's
    assert remembered == [q]  # the plan cache keeps the other lowering's plan
    assert execute(t, a) is b and execute(t, a, sized=False) is b  # it needs no more workspace


def test_a_slower_other_lowering_ends_the_trial(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t, a, b, p, q, worker, remembered = setup
    monkeypatch.setattr(Sample, "times", {1: 1.0, 2: 0.98})  # within MARGIN: the default stays
    pending = cudnn.lowering_trials_pending()
    run_trial(t, a, worker)
    assert not t.decided and p.calls == ["end_trial"] and remembered == [p]
    assert cudnn.lowering_trials_pending() == pending - 1


def test_timings_not_yet_done_on_the_gpu_are_waited_for(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t, a, b, p, q, worker, remembered = setup
    monkeypatch.setattr(Sample, "done", False)
    ran = run_trial(t, a, worker, limit=30)
    assert ran.count(b) == SAMPLES and ran[2 * SAMPLES:] == [a] * (30 - 2 * SAMPLES)  # no extra timings
    assert not t.decided and not remembered
    monkeypatch.setattr(Sample, "done", True)
    assert execute(t, a) is b and t.decided and remembered == [q]


def test_a_larger_workspace_is_only_given_to_callers_that_size_it(setup: Any) -> None:
    t, a, b, p, q, worker, remembered = setup
    b.workspace_size = a.workspace_size + 1
    ran = run_trial(t, a, worker, sized=False, limit=40)
    assert b not in ran and not t.decided  # a caller passing the default's workspace never runs b
    ran = [execute(t, a, sized=True) for _ in range(2 * SAMPLES + 1)]
    assert ran.count(b) == SAMPLES + 1 and t.decided
    assert not p.calls  # not taken over: the trial routes each execute by what its caller can run
    assert execute(t, a, sized=True) is b and execute(t, a, sized=False) is a


@pytest.mark.parametrize("failure", ["plans", "build"])
def test_a_lowering_that_does_not_build_leaves_the_default(setup: Any, failure: str) -> None:
    t, a, b, p, q, worker, remembered = setup
    if failure == "plans":
        q.plans_error = cudnn.GraphError("no engine")
    for _ in range(TRIAL_AFTER + 1):
        assert execute(t, a) is a
    if failure == "build":
        worker.finish(selected=None, error=cudnn.cudnnGraphNotSupportedError(3000, "finalize", "", ""))
        assert execute(t, a) is a
    assert p.calls == ["end_trial"] and not remembered and b.launches == 0


def test_an_error_inside_the_trial_never_reaches_the_execute(setup: Any, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    t, a, b, p, q, worker, remembered = setup

    def broken(cand: Any) -> Runner:
        raise RuntimeError("a Runner could not be made")

    monkeypatch.setattr(q, "runner", broken)
    for _ in range(TRIAL_AFTER):
        execute(t, a)
    worker.finish()
    with caplog.at_level("INFO", logger="cudnn.graph"):
        assert execute(t, a) is a and execute(t, a) is a
    assert t.ended and p.calls == ["end_trial"] and not remembered and b.launches == 0
    assert "RuntimeError: a Runner could not be made" in caplog.text


def test_a_trial_without_timings_gives_up(setup: Any) -> None:
    t, a, b, p, q, worker, remembered = setup
    for _ in range(TRIAL_AFTER):
        execute(t, a)
    worker.finish()
    for _ in range(GIVE_UP_AFTER + 1):
        t.route(a, True)  # handed a probe each time, never launched (say, a capture that never runs)
    assert p.calls == ["end_trial"] and not remembered


def test_a_trial_keeps_no_reference_to_the_pipeline_that_owns_it() -> None:
    """The pipeline owns its trial; the trial refers back weakly, so dropping the pipeline
    releases both at once (no reference cycle left for the garbage collector)."""
    import gc
    import weakref

    p = Pipe("NORM")
    p.trial = Trial(p, Pipe("AFFINE_EPILOGUE"), print)  # type: ignore[attr-defined]
    gone = weakref.ref(p)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del p
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_setting_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cudnn.set_lowering_trials is set_lowering_trials
    try:
        monkeypatch.delenv(trial_mod.ENV, raising=False)
        set_lowering_trials(None)
        assert trials_enabled()
        monkeypatch.setenv(trial_mod.ENV, "0")
        assert not trials_enabled()
        set_lowering_trials(True)
        assert trials_enabled()
        set_lowering_trials(False)
        monkeypatch.delenv(trial_mod.ENV)
        assert not trials_enabled()
        set_lowering_trials(None)
        monkeypatch.setenv(trial_mod.ENV, "Off")
        assert not trials_enabled()
        monkeypatch.setenv(trial_mod.ENV, "maybe")
        with pytest.raises(ValueError, match="CUDNN_PY_LOWERING_TRIALS must be 1 or 0 .*, got 'maybe'"):
            trials_enabled()
        with pytest.raises(TypeError, match="set_lowering_trials: expected True, False or None, got 1"):
            set_lowering_trials(1)  # type: ignore[arg-type]
    finally:
        set_lowering_trials(None)


def test_the_trial_thread_runs_jobs_in_turn_and_is_joined() -> None:
    class Job(trial_mod._Job):
        def run(self, handles: dict[int, Any]) -> None:
            ran.append(threading.current_thread().name)
            self.done.set()

    ran: list[str] = []
    worker = trial_mod._Worker()
    jobs = [Job(0, None) for _ in range(3)]  # type: ignore[arg-type]
    for job in jobs:
        worker.submit(job)
    assert all(job.done.wait(10) for job in jobs)
    assert ran == ["cudnn-py lowering trials"] * 3
    worker.stop()
    late = Job(0, None)  # type: ignore[arg-type]
    worker.submit(late)  # a new thread after a stop
    assert late.done.wait(10)
    worker.stop()


# -- the pipeline's side: which graphs start a trial, and what get_workspace_size() reports -----

def norm_graph(lowering: str = "auto", io: Any = cudnn.data_type.BFLOAT16,
               hidden: int = 768) -> cudnn.pygraph:
    """A layer norm of a 16-bit X with float32 SCALE/BIAS (the mix whose default offers a trial)."""
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="x", dim=[512, hidden, 1, 1], stride=[hidden, 1, hidden, hidden])
    S, B = (g.tensor(name=n, dim=[1, hidden, 1, 1], stride=[hidden, 1, hidden, hidden],
                     data_type=cudnn.data_type.FLOAT) for n in ("scale", "bias"))
    for t in g.layernorm(cudnn.norm_forward_phase.TRAINING, X, S, B, 1e-5, name="ln", lowering=lowering):
        t.set_output(True)
    g.validate()
    return g


def built(g: cudnn.pygraph, workspace: int = 128) -> Any:
    """The graph's pipeline with a plan adopted as if built (no GPU here: a stand-in descriptor)."""
    from cudnn._graph.build.pipeline import Pipeline

    p = Pipeline(g)
    p.adopt(object(), workspace, "eng1")  # type: ignore[arg-type]
    return p


def test_a_default_norm_build_starts_a_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_mod, "_asked", [True])
    g = norm_graph()  # the pipeline refers to its graph weakly
    p = built(g)
    assert not p.trial_pending()
    p.start_trial(print)
    assert p.trial_pending() and p.workspace_size() == 128  # the workspace is the default plan's
    p.select(p.plans().selected)  # a plan chosen by hand ends the trial
    assert not p.trial_pending()


@pytest.mark.parametrize("why", ["forced lowering", "float X", "trials off", "kernel cache"])
def test_graphs_that_start_no_trial(monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    monkeypatch.setattr(trial_mod, "_asked", [why != "trials off"])
    g = norm_graph(lowering="norm" if why == "forced lowering" else "auto",
                   io=cudnn.data_type.FLOAT if why == "float X" else cudnn.data_type.BFLOAT16)
    if why == "kernel cache":
        g.kernel_cache = object()  # a graph built with a kernel cache keeps its dynamic-shape plans
    p = built(g)
    p.start_trial(print)
    assert not p.trial_pending() and p.workspace_size() == 128


def test_a_pipeline_takes_the_kept_lowering_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the other lowering won and fits every caller, the default's pipeline becomes the
    other's: its plans, lowering and workspace are what the graph reports from then on."""
    from cudnn._graph.build.pipeline import Pipeline
    from cudnn._graph.families.norm_nodes import NormLowering

    monkeypatch.setattr(trial_mod, "_asked", [True])
    g = norm_graph()
    p = built(g)
    p.start_trial(print)
    q = Pipeline(g, NormLowering.AFFINE_EPILOGUE)
    q.adopt(object(), 64, "eng5")  # type: ignore[arg-type]
    assert p.lowering_name() == "NORM" and p.trial_pending()
    p.take_over(q)
    assert p.lowering_name() == "AFFINE_EPILOGUE" and not p.trial_pending()
    # the unit scale and zero bias are constant scratch, outside the workspace: the plan's alone
    assert p.plans() is q.plans() and p.workspace_size() == q.workspace_size() == 64
    assert p.lowered().trial is None  # the kept lowering offers no trial of its own
