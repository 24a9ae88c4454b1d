"""build_plans(ALL) joined by worker processes (_graph/build/workers.py) on the GPU: a knob sweep of
a conv+relu graph (the official suite's test_conv_relu_execution_plan_creation, cut to a few
configs per engine) gives the same plans as a build in this process alone, each computing what
PyTorch computes, whether N workers start with the build (CUDNN_PY_BUILD_PROCESSES=N) or join
a build that proved long (CUDNN_PY_BUILD_PROCESSES=auto); some plans come from the workers; a
candidate that fails here fails alone; no worker process and no descriptor outlives the build.
Unset, a build starts none (tests/plans/test_plan_workers.py).

So that the workers (which take a few seconds to start) get plans to build, the plans finalized
in this process are made slower by `SLOW_HERE_S` each (`slow_here`); restoring the workers'
plans is not slowed."""

from __future__ import annotations

import gc
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_parallel_build_gpu import refuse_plan, run_every_plan

import cudnn
from cudnn._graph.build import workers as plan_workers
from cudnn._graph.plans import threads as parallel
from cudnn.backend import Descriptor
from cudnn.backend.descriptor import live_count

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
PER_ENGINE = 3  # KERNEL_CFG values per engine: enough plans for two workers, a short test
SLOW_HERE_S = 0.4  # added to each plan finalized in this process during a sweep with workers


def slow_here(monkeypatch: pytest.MonkeyPatch, seconds: float = SLOW_HERE_S) -> None:
    """Plans finalized by the threads' build in this process take ``seconds`` longer (the
    workers' and the restored plans do not)."""
    building = [False]
    finalize_all, finalize = parallel._finalize_all, Descriptor.finalize

    def flagged(*args: Any, **kwargs: Any) -> Any:
        building[0] = True
        try:
            return finalize_all(*args, **kwargs)
        finally:
            building[0] = False

    def slower(self: Descriptor) -> Descriptor:
        if building[0] and self.type.name == "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR":
            time.sleep(seconds)
        return finalize(self)

    monkeypatch.setattr(parallel, "_finalize_all", flagged)
    monkeypatch.setattr(Descriptor, "finalize", slower)


def sweep(processes: str | None, monkeypatch: pytest.MonkeyPatch, threads: str = "1") -> tuple[dict[str, Any], Any]:
    """The knob sweep built on ``threads`` threads with CUDNN_PY_BUILD_PROCESSES=``processes``
    (None: unset); per plan name its status and output. Returns the graph too."""
    monkeypatch.setenv(parallel.ENV, threads)
    if processes is None:
        monkeypatch.delenv(plan_workers.ENV, raising=False)
    else:
        monkeypatch.setenv(plan_workers.ENV, processes)
    torch.manual_seed(0)
    x = torch.randn(20, 40, 30, 40, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(54, 40, 3, 4, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    ref = F.conv2d(x.float(), w.float(), padding=(0, 1), stride=(2, 3)).clamp(0.5, 0.55)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="X", dim=x.size(), stride=x.stride(), data_type=x.dtype)
    W = g.tensor(name="W", dim=w.size(), stride=w.stride(), data_type=w.dtype)
    conv = g.conv_fprop(image=X, weight=W, padding=[0, 1], stride=[2, 3], dilation=[1, 1])
    Y = g.relu(name="relu", input=conv, lower_clip=0.5, upper_clip=0.55).set_output(True)
    g.validate()
    g.build_operation_graph()
    for engine in range(g.get_engine_count()):
        try:
            knobs = g.get_knobs_for_engine(engine)
        except cudnn.cudnnGraphNotSupportedError:
            continue
        for knob in knobs:
            if knob.type == cudnn.knob_type.KERNEL_CFG:
                values = range(knob.min_value, knob.max_value + 1, knob.stride)
                for value in list(values)[:PER_ENGINE]:
                    try:
                        g.create_execution_plan(engine, {cudnn.knob_type.KERNEL_CFG: value})
                    except cudnn.cudnnGraphNotSupportedError:
                        continue
    g.build_plans(cudnn.build_plan_policy.ALL)
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    return run_every_plan(g, {X: x, W: w, Y: y}, y, ref, 2e-3), g


def children() -> set[str]:
    """The processes this thread started that are still there (reaped ones are not). Other tests
    of the session may leave some (torch.compile's worker pool), so tests compare with what was
    there before them."""
    return set(Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split())


@pytest.fixture(autouse=True)
def no_plan_cache() -> Any:
    cudnn.plan_cache.enabled = False
    yield
    cudnn.plan_cache.enabled = True


def from_workers(log: str, workers: int) -> int:
    """How many plans the log says ``workers`` worker processes built."""
    found = re.findall(rf"(\d+) of (\d+) plans built in {workers} worker processes", log)
    assert len(found) == 1, log[-2000:]
    return int(found[0][0])


def same_plans(here: dict[str, Any], there: dict[str, Any]) -> None:
    assert list(there) == list(here)  # same names, same order
    assert len([n for n, (status, _) in here.items() if status == "built"]) >= 4
    for name, (status, out) in here.items():
        assert there[name][0] == status, name
        if out is not None:
            torch.testing.assert_close(there[name][1], out, atol=1e-3, rtol=1e-3)


def test_the_same_plans_as_built_here_and_some_come_from_the_workers(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    before = children()
    here, _ = sweep("0", monkeypatch)
    slow_here(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="cudnn.build"):
        there, _ = sweep("2", monkeypatch)
    assert children() <= before  # every worker has ended and been reaped
    same_plans(here, there)
    assert "2 worker processes join the build (CUDNN_PY_BUILD_PROCESSES=2)" in caplog.text
    assert from_workers(caplog.text, 2) >= 1


def test_auto_workers_join_a_long_build(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """CUDNN_PY_BUILD_PROCESSES=auto: the build runs on its threads, and after a couple of
    seconds, with most of it left, workers join it (as many as the cores, the plans left and
    the GPU's memory allow); same plans as this process alone builds."""
    before = children()
    here, _ = sweep("0", monkeypatch)
    slow_here(monkeypatch, 1.0)  # a second a plan here: still most of the build left after two seconds
    with caplog.at_level(logging.DEBUG, logger="cudnn.build"):
        there, _ = sweep("auto", monkeypatch, threads="2")
    assert children() <= before
    same_plans(here, there)
    joined = re.findall(r"(\d+) worker processes join the build \(CUDNN_PY_BUILD_PROCESSES=auto: (\d+) plans left",
                        caplog.text)
    assert len(joined) == 1, caplog.text[-2000:]
    workers = int(joined[0][0])
    assert 2 <= workers <= parallel.available_cores()
    assert from_workers(caplog.text, workers) >= 1


def test_a_candidate_that_fails_here_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan the workers build but this process refuses (NOT_SUPPORTED at its finalize, restored
    or built) fails with the error a build here gives, naming it; the others are kept."""
    here, _ = sweep("0", monkeypatch)
    victim = next(name for name, (status, _) in here.items() if status == "built")
    refuse_plan(victim, monkeypatch)
    got, g = sweep("2", monkeypatch)
    assert got[victim][0].startswith("failed") and got[victim][1] is None
    built_here = {n for n, (s, _) in here.items() if s == "built"}
    assert {n for n, (s, _) in got.items() if s == "built"} == built_here - {victim}
    index = next(i for i in range(g.get_execution_plan_count()) if g.get_plan_name_at_index(i) == victim)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=f"{victim}: finalizing EXECUTION_PLAN"):
        g.build_plan_at_index(index)


def test_descriptors_return_to_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    before = children()
    sweep("0", monkeypatch)
    gc.collect()
    cudnn.release_pending()
    descriptors = live_count()
    for _ in range(2):
        sweep("3", monkeypatch)
        gc.collect()
        cudnn.release_pending()
        assert live_count() == descriptors, f"{live_count() - descriptors} descriptors left"
    assert children() <= before
