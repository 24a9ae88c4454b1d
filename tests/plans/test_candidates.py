"""Engine-config candidates read what their config says of itself only when asked: heuristics
offer dozens of configs per graph and a build looks at one or two of them."""

from __future__ import annotations

import pytest
from support.plan_stand_ins import FakePlan

import cudnn
from cudnn._graph.plans import candidates as plans_module
from cudnn._graph.plans.candidates import Candidate, Filters


class _Unreadable:
    """Stands for an engine config that must not be read: any backend read of it fails."""


def test_filters_read_a_candidate_only_for_what_they_check() -> None:
    c = Candidate(_Unreadable(), source="A")  # type: ignore[arg-type]
    assert Filters().keeps(c)  # no filter set: nothing read
    for name, value in (("numeric_deselect", {int(cudnn.numerical_note.TENSOR_CORE)}),
                        ("behavior_select", {int(cudnn.behavior_note.RUNTIME_COMPILATION)}),
                        ("engines_deselect", {"eng3"})):
        f = Filters()
        setattr(f, name, value)
        with pytest.raises(AttributeError):  # this filter needs the config's notes or engine
            f.keeps(c)


def test_values_given_are_not_read_again() -> None:
    c = Candidate(_Unreadable(), 12, {3: 1, 2: 0}, [cudnn.numerical_note.TENSOR_CORE], [], "A")  # type: ignore[arg-type]
    assert c.name == "eng12_k2=0_k3=1"
    f = Filters(numeric_select={int(cudnn.numerical_note.TENSOR_CORE)}, engines_deselect={"eng12_k2=0_k3=2"})
    assert f.keeps(c)
    f.engines_deselect.add("eng12_k2=0_k3=1")
    assert not f.keeps(c)
    restored = Candidate(None, source="cache", restored_name="eng7_k1=2")
    assert (restored.name, restored.engine_index, restored.knobs, restored.behavior_notes) == ("eng7_k1=2", -1, {}, [])


def test_a_plan_that_builds_reads_nothing_of_its_config_and_a_failure_names_it(
        fake_plans: list[FakePlan], monkeypatch: pytest.MonkeyPatch) -> None:
    """Naming a candidate reads its engine and knobs back from cuDNN (slow for an attention
    graph's engine); a plan that builds needs no name, and the error of one that does not names
    the engine and knobs (engine 3 of the stand-ins fails)."""
    read: list[object] = []
    monkeypatch.setattr(plans_module.eng, "config_engine_index", lambda cfg: read.append(cfg) or int(cfg))
    monkeypatch.setattr(plans_module.eng, "knob_choices", lambda cfg: read.append(cfg) or {1: 0})
    built = Candidate(2, source="A")  # type: ignore[arg-type]  # config: the stand-in plan's engine
    assert built.build(0x1, "g") is built.plan and built.workspace == 512
    assert read == [] and fake_plans[0].label == "g"
    failed = Candidate(3, source="A")  # type: ignore[arg-type]
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"^g: eng3_k1=0: finalizing EXECUTION_PLAN descriptor: .*engine 3 refuses"):
        failed.build(0x1, "g")
    assert read == [3, 3] and fake_plans[1].closed
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"^g: eng3_k1=0: finalizing"):
        failed.build(0x1, "g")  # remembered as said the first time


def test_an_error_of_a_plan_labelled_with_its_candidate_names_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan restored from another process's is labelled with its candidate's name: an error of
    it (reading its workspace size, here) is not named twice; an error of a plan labelled with
    the graph alone, or with nothing, is named."""
    def workspace_size(plan: FakePlan) -> int:
        where = f"{plan.label}: " if plan.label else ""  # as a descriptor says it (Descriptor._context)
        raise cudnn.cudnnGraphNotSupportedError(3000, f"{where}getting EXECUTION_PLAN descriptor")

    monkeypatch.setattr(plans_module.backend_plan, "workspace_size", workspace_size)
    for label, said in (("g: eng4_k1=2", "g: eng4_k1=2"), ("g", "g: eng4_k1=2"), ("", "eng4_k1=2")):
        c = Candidate(_Unreadable(), 4, {1: 2}, source="A")  # type: ignore[arg-type]
        c.finish_build(FakePlan(4, label), None)  # type: ignore[arg-type]
        assert str(c.error).startswith(f"{said}: getting EXECUTION_PLAN descriptor: CUDNN_STATUS_NOT_SUPPORTED")
