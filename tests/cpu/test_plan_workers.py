"""Plans built in worker processes (``CUDNN_PY_BUILD_PROCESSES``), what needs no GPU: the
setting, when a graph is built in this process only, how candidates are dealt to workers, a
worker's environment, the graph identity a worker must reproduce from the printed JSON, and how
a worker's reply is read (a failed worker, another graph, a real worker process that cannot
serve). The build itself against torch: tests/gpu/test_plan_workers_gpu.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn
from cudnn.graph import plan_workers as workers
from cudnn.graph.pipeline import Pipeline
from cudnn.graph.plans import Candidate

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def conv_relu(**kw: object) -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT, **kw)
    x = g.tensor(name="X", dim=[20, 40, 30, 40], stride=[40 * 30 * 40, 1, 40 * 40, 40], data_type=HALF)
    w = g.tensor(name="W", dim=[54, 40, 3, 4], stride=[480, 1, 160, 40], data_type=HALF)
    conv = g.conv_fprop(image=x, weight=w, padding=[0, 1], stride=[2, 3], dilation=[1, 1])
    g.relu(name="relu", input=conv, lower_clip=0.5, upper_clip=0.55).set_output(True)
    g.validate()
    return g


@pytest.mark.parametrize("text, n", [("", 0), ("0", 0), ("1", 0), ("2", 2), (" 16 ", 16)])
def test_the_setting(monkeypatch: pytest.MonkeyPatch, text: str, n: int) -> None:
    monkeypatch.setenv(workers.ENV, text)
    assert workers.build_processes() == n


@pytest.mark.parametrize("text, says", [("four", "'four'"), ("-2", "got -2")])
def test_a_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, text: str, says: str) -> None:
    monkeypatch.setenv(workers.ENV, text)
    with pytest.raises(ValueError, match=workers.ENV) as err:
        workers.build_processes()
    assert says in str(err.value)


def cands(*engines: int) -> list[Candidate]:
    return [Candidate(None, engine_index=e, knobs={}) for e in engines]


def test_graphs_workers_cannot_reproduce_are_built_here(monkeypatch: pytest.MonkeyPatch) -> None:
    g, dynamic = conv_relu(), conv_relu(is_dynamic_shape_enabled=True)  # a pipeline refers to its graph weakly
    p = Pipeline(g)
    assert workers.why_not(p, cands(1, 2), 1) == f"{workers.ENV} is not set to 2 or more"
    assert workers.why_not(p, cands(1), 4) == "fewer than two plans to build"
    assert workers.why_not(p, cands(1, 2), 4) == "a candidate without an engine config"
    assert "dynamic shapes" in str(workers.why_not(Pipeline(dynamic), cands(1, 2), 4))
    assert "lowering" in str(workers.why_not(Pipeline(g, lowering="other"), cands(1, 2), 4))
    monkeypatch.setattr(sys, "executable", "")
    assert "no Python executable" in str(workers.why_not(p, cands(1, 2), 4))


def test_each_engines_plans_are_spread_over_the_workers() -> None:
    todo = cands(0, 0, 0, 0, 1, 1, 2)
    parts = workers.shares(todo, 3)
    assert sorted(i for part in parts for i in part) == list(range(7))  # each candidate once
    assert [[todo[i].engine_index for i in part] for part in parts] == [[0, 0, 0], [1, 1], [2, 0]]


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


def reply(tmp_path: Path, body: object, log: str = "") -> tuple[Path, Path]:
    answer, out = tmp_path / "reply", tmp_path / "log"
    answer.write_text(body if isinstance(body, str) else json.dumps(body))
    out.write_text(log)
    return answer, out


def test_a_reply_gives_its_plans_by_candidate_index(tmp_path: Path) -> None:
    answer, log = reply(tmp_path, {"identity": "G", "plans": {"3": "{plan 3}", "0": "{plan 0}"}})
    assert workers._read_reply("graph", 0, answer, log, "G") == {3: "{plan 3}", 0: "{plan 0}"}


@pytest.mark.parametrize("body, code, says", [
    ({"identity": "other", "plans": {"0": "{}"}}, 0, "as another backend graph"),
    ({"failed": "CudnnError: no GPU"}, 0, "CudnnError: no GPU"),
    ("{not json", 0, "plan-build worker failed"),
    ({"identity": "G", "plans": {"0": "{}"}}, 1, "exit status 1"),
])
def test_a_failed_worker_gives_no_plans_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                       body: object, code: int, says: str) -> None:
    answer, log = reply(tmp_path, body, "line 1\nTraceback: the last words")
    with caplog.at_level(logging.WARNING, logger="cudnn.build"):
        assert workers._read_reply("graph 'g'", code, answer, log, "G") == {}
    assert says in caplog.text and "graph 'g'" in caplog.text and "built here" in caplog.text


def test_a_worker_that_cannot_serve_replies_why(tmp_path: Path) -> None:
    """The real worker entry point, in its own process, given a graph JSON it cannot rebuild."""
    ask, answer = tmp_path / "request", tmp_path / "reply"
    ask.write_text(json.dumps({"graph": "{\"nodes\": 1}", "device": 0, "identity": "G", "items": [[0, 1, []]]}))
    done = subprocess.run([sys.executable, "-m", "cudnn.graph.plan_workers", str(ask), str(answer)],
                          env=workers.worker_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(answer.read_text())
    assert set(got) == {"failed"} and got["failed"]
    assert not (tmp_path / "reply.tmp").exists()
