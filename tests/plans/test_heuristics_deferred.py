"""Heuristic modes after the first that ranks a graph are queried only when their configs are
needed (a fused graph's heuristics take tens of milliseconds per mode, and a build takes the
first mode's best config), with the candidates, their order and the errors of querying every
mode at once. cuDNN is stood in: the modes queried and the configs read are recorded. The same
builds on a GPU: tests/plans/test_plans_gpu.py."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.plans import candidates as plans_module
from cudnn._graph.plans.candidates import Candidate
from cudnn._lib.status import exception_class

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
A, B, FALLBACK = cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK


class Built(Candidate):
    """A candidate whose plan builds without cuDNN, unless its engine is in ``FAILS``."""

    FAILS: ClassVar[set[int]] = set()

    def build(self, handle: int, label: str, kernel_cache: Any = None) -> Any:
        if self.engine_index in self.FAILS:
            raise cudnn.cudnnGraphNotSupportedError(3000, label, f"{self.name} does not build")
        self.plan, self.workspace = "PLAN", 0
        return self.plan


class Config:
    """A stand-in ENGINECFG: the engine it names."""

    def __init__(self, engine: int) -> None:
        self.engine = engine

    def close(self) -> None:
        pass


class Heur:
    """A stand-in ENGINEHEUR of one mode, ranking ``engines``."""

    def __init__(self, mode: int, engines: list[int]) -> None:
        self.mode, self.engines, self.closed = mode, engines, False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Heuristics per mode: ``ranks[mode]`` is the list of engines it ranks, or a status it fails with."""
    state: dict[str, Any] = {"ranks": {int(A): [1, 2], int(B): [3], int(FALLBACK): [2, 9]}, "queried": [],
                             "heurs": []}

    def heuristics(op_graph: Any, mode: int, *args: Any) -> Heur:
        state["queried"].append(cudnn.heur_mode(mode).name)
        got = state["ranks"][mode]
        if isinstance(got, int):
            raise exception_class(got)(got, f"heuristics mode {cudnn.heur_mode(mode).name}", "cuDNN's reason")
        heur = Heur(mode, got)
        state["heurs"].append(heur)
        return heur

    def ranked_configs(heur: Heur, count: int | None = None) -> list[Config]:
        return [Config(e) for e in heur.engines[:count]]

    monkeypatch.setattr(pipeline_module.eng, "heuristics", heuristics)
    monkeypatch.setattr(plans_module.eng, "ranked_configs", ranked_configs)
    monkeypatch.setattr(plans_module, "candidate_from_config",
                        lambda cfg, source: Built(None, cfg.engine, {}, [], [], source))
    monkeypatch.setattr(pipeline_module.Pipeline, "op_graph", lambda self: "OPGRAPH")
    monkeypatch.setattr(cudnn.pygraph, "_op_graph", lambda self: "OPGRAPH")
    Built.FAILS = set()
    return state


def planned(*modes: cudnn.heur_mode) -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT, handle=1)
    g.relu(g.tensor([2, 3, 4], name="x"), name="r").set_output(True)
    g.validate()
    g.create_execution_plans(list(modes))
    return g


def test_a_later_mode_is_queried_only_when_its_configs_are_needed(backend: dict[str, Any]) -> None:
    g = planned(A, FALLBACK)
    assert backend["queried"] == ["A"]
    g.build_plans()  # the first candidate of mode A builds: FALLBACK is never asked
    assert backend["queried"] == ["A"] and g.get_plan_name_at_index(0) == "eng1"
    assert g.get_execution_plan_count() == 3  # eng1, eng2 of A; eng9 of FALLBACK (eng2 offered once)
    assert backend["queried"] == ["A", "FALLBACK"]
    assert [g.get_plan_name_at_index(i) for i in range(3)] == ["eng1", "eng2", "eng9"]


def test_candidates_and_order_are_those_of_querying_every_mode(backend: dict[str, Any]) -> None:
    g = planned(A, B, FALLBACK)
    assert backend["queried"] == ["A"]
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert names == ["eng1", "eng2", "eng3", "eng9"]
    assert backend["queried"] == ["A", "B", "FALLBACK"]
    assert all(h.closed for h in backend["heurs"])  # every ENGINEHEUR closed once read to the end


def test_a_build_reads_the_next_mode_when_the_first_ones_candidates_fail(backend: dict[str, Any]) -> None:
    Built.FAILS = {1, 2}
    g = planned(A, FALLBACK)
    g.build_plans()
    assert backend["queried"] == ["A", "FALLBACK"]
    assert [r.name for r in g.describe_plans() if r.status == "selected"] == ["eng9"]


def test_a_mode_that_fails_is_skipped_and_the_next_is_queried_at_once(backend: dict[str, Any]) -> None:
    backend["ranks"][int(A)] = 3000
    g = planned(A, FALLBACK)
    assert backend["queried"] == ["A", "FALLBACK"]  # nothing ranked yet: the next mode is asked now
    assert g.get_execution_plan_count() == 2


def test_a_deferred_mode_that_fails_adds_nothing(backend: dict[str, Any]) -> None:
    backend["ranks"][int(FALLBACK)] = 4000
    g = planned(A, FALLBACK)
    assert g.get_execution_plan_count() == 2 and backend["queried"] == ["A", "FALLBACK"]


def test_a_single_mode_that_fails_still_raises_at_create(backend: dict[str, Any]) -> None:
    backend["ranks"][int(A)] = 3000
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="heuristics mode A"):
        planned(A)


def test_a_mode_never_queried_is_never_closed_or_leaked(backend: dict[str, Any]) -> None:
    g = planned(A, FALLBACK)
    g.build_plans()
    del g
    assert [h.mode for h in backend["heurs"]] == [int(A)]  # FALLBACK's ENGINEHEUR was never made
