"""Plans finalized on several threads (_graph/plans/threads.py) come out as one after another would
give them: same plans, same order, same errors, same selection; a failure stays with its
candidate; no thread outlives the call and nothing is left open when it raises.

Plans here are the stand-ins of plan_stand_ins.py (the `fake_plans` fixture); the last tests
finalize real descriptors, which fail on a machine without a GPU."""

from __future__ import annotations

import threading

import pytest
from support.plan_stand_ins import FAILING, FakePlan, candidates, outcome, plan_of

import cudnn
from cudnn._graph.plans import threads as parallel
from cudnn._graph.plans.candidates import Candidate, PlanSet
from cudnn._graph.plans.threads import ENV, build_all, build_threads


def test_threads_follow_cores_and_can_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert build_threads() == parallel.available_cores() >= 1
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert build_threads() == 3
    monkeypatch.setenv(ENV, "2")
    assert build_threads() == 2
    assert build_threads(5) == 5  # the keyword wins over the environment
    monkeypatch.setenv(ENV, "many")
    with pytest.raises(ValueError, match=r"CUDNN_PY_BUILD_THREADS must be a positive int .* got 'many'"):
        build_threads()
    monkeypatch.setenv(ENV, "0")
    with pytest.raises(ValueError, match=r"CUDNN_PY_BUILD_THREADS must be a positive int .* got 0"):
        build_threads()
    with pytest.raises(TypeError, match="threads must be an int or None, got float"):
        build_threads(2.0)  # type: ignore[arg-type]


def test_parallel_build_gives_the_serial_result(fake_plans: list[FakePlan]) -> None:
    serial, par = candidates(), candidates()
    build_all(serial, 0x1, "g", threads=1)
    serial_threads = {p.thread for p in fake_plans}
    fake_plans.clear()
    build_all(par, 0x1, "g", threads=4)
    assert serial_threads == {threading.get_ident()}  # 1: today's path, on the caller's thread
    assert len({p.thread for p in fake_plans}) > 1  # several threads did finalize
    assert outcome(par) == outcome(serial)
    assert [plan_of(c).engine for c in par if c.plan is not None] == [i for i in range(12) if i not in FAILING]
    for c in par:
        if c.engine_index in FAILING:  # fails alone, with the message a serial build gives
            assert c.plan is None and isinstance(c.error, cudnn.cudnnGraphNotSupportedError)
            assert f"g: eng{c.engine_index}_k1={c.engine_index % 3}: finalizing EXECUTION_PLAN" in str(c.error)
        else:
            assert c.plan is not None and c.plan.finalized and not c.plan.closed and c.error is None
    assert all(p.closed for p in fake_plans if p.engine in FAILING)  # a failed plan's descriptor goes at once
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="engine 3 refuses"):
        par[3].build(0x1, "g")  # the error is remembered, as on one thread


def test_threads_take_one_plan_of_each_engine_in_turn(fake_plans: list[FakePlan],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A knob sweep's plans of one engine are spread out among the other engines' plans; the
    outcome stays in the candidates' order, as one after another."""
    engines = [5, 5, 5, 2, 2, 9]

    def sweep() -> list[Candidate]:
        return [Candidate(e, e, {1: k}, [], [], "A") for k, e in enumerate(engines)]  # type: ignore[arg-type]

    assert parallel.start_order(sweep()) == [0, 3, 5, 1, 4, 2]
    assert parallel.start_order(candidates(4)) == [0, 1, 2, 3]  # one plan per engine: as given
    started: list[FakePlan] = []
    finalize = FakePlan.finalize

    def recording(self: FakePlan) -> FakePlan:
        started.append(self)
        return finalize(self)

    def names(cands: list[Candidate]) -> list[str]:  # of the plans started, in the order they started
        of_plan = {id(c.plan): c.name for c in cands}  # every engine of the sweep builds
        return [of_plan[id(p)] for p in started]

    monkeypatch.setattr(FakePlan, "finalize", recording)
    serial, par = sweep(), sweep()
    build_all(serial, 0x1, "g", threads=1)
    assert names(serial) == [c.name for c in serial]  # one thread: the candidates' order
    started.clear()
    build_all(par, 0x1, "g", threads=2)
    assert set(names(par)[:2]) == {"eng5_k1=0", "eng2_k1=3"}  # the first plan of each of two engines
    assert sorted(names(par)) == sorted(c.name for c in par)
    assert outcome(par) == outcome(serial)
    assert [plan_of(c).engine for c in par] == engines


def test_plan_set_all_selects_as_serial(fake_plans: list[FakePlan], monkeypatch: pytest.MonkeyPatch) -> None:
    results = []
    for threads in ("1", "3"):
        monkeypatch.setenv(ENV, threads)
        plans = PlanSet("g")
        for c in reversed(candidates()):
            plans.put_first(c)
        plans.build(0x1, cudnn.build_plan_policy.ALL, limit=10)
        results.append((outcome(plans.candidates), plans.selected.name if plans.selected else None))
    assert results[0] == results[1]
    assert results[0][1] == "eng0_k1=0"
    assert [r[1] for r in results[0][0]][10:] == [None, None]  # beyond the limit: not built


def test_every_candidate_failing_names_them_as_on_one_thread(fake_plans: list[FakePlan],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    messages = []
    for threads in (1, 4):
        plans = PlanSet("g")
        for e in sorted(FAILING, reverse=True):
            plans.put_first(Candidate(e, e, {}, [], [], "A"))  # type: ignore[arg-type]
        with pytest.raises(cudnn.cudnnGraphNotSupportedError) as info:
            plans.build(0x1, cudnn.build_plan_policy.ALL, threads=threads)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "no engine config could be built: eng3: NOT_SUPPORTED" in messages[0].replace("CUDNN_STATUS_", "")


def test_no_thread_is_left_running(fake_plans: list[FakePlan]) -> None:
    before = threading.active_count()
    build_all(candidates(), 0x1, "g", threads=6)
    assert threading.active_count() == before
    assert not [t for t in threading.enumerate() if t.name.startswith("cudnn-plan-build")]


def test_an_unexpected_error_closes_its_plan_keeps_the_others_and_joins(fake_plans: list[FakePlan],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    finalize = FakePlan.finalize

    def broken(self: FakePlan) -> FakePlan:
        if self.engine == 5:
            raise MemoryError("engine 5 ran out")
        return finalize(self)

    monkeypatch.setattr(FakePlan, "finalize", broken)
    before = threading.active_count()
    cands = candidates()
    with pytest.raises(MemoryError, match="engine 5 ran out"):
        build_all(cands, 0x1, "g", threads=4)
    assert threading.active_count() == before
    assert cands[5].plan is None and cands[5].error is None  # not remembered as a cuDNN failure
    assert next(p for p in fake_plans if p.engine == 5).closed
    kept = [c for c in cands if c.plan is not None]
    assert [c.engine_index for c in kept] == [i for i in range(12) if i not in FAILING | {5}]
    assert all(plan_of(c).finalized and not plan_of(c).closed for c in kept)  # usable
    monkeypatch.setattr(FakePlan, "finalize", finalize)
    build_all(cands, 0x1, "g", threads=4)  # built again later: only engine 5 is finalized anew
    assert cands[5].plan is not None and len(fake_plans) == 13


def test_an_unexpected_error_on_one_thread_closes_the_plan(fake_plans: list[FakePlan],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakePlan, "finalize", lambda self: (_ for _ in ()).throw(MemoryError("out")))
    cands = candidates(1)
    with pytest.raises(MemoryError):
        build_all(cands, 0x1, "g", threads=1)
    assert fake_plans[0].closed and cands[0].plan is None and cands[0].error is None


def test_an_interrupt_on_the_callers_thread_joins_and_closes_everything(fake_plans: list[FakePlan],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    finalize = FakePlan.finalize

    def interrupted(self: FakePlan) -> FakePlan:
        if threading.current_thread() is threading.main_thread() and self.engine == 1:
            raise KeyboardInterrupt
        return finalize(self)

    monkeypatch.setattr(FakePlan, "finalize", interrupted)
    before = threading.active_count()
    cands = candidates()
    with pytest.raises(KeyboardInterrupt):
        build_all(cands, 0x1, "g", threads=2)  # the caller takes engine 0 then 1
    assert threading.active_count() == before
    assert all(p.closed for p in fake_plans)
    assert all(c.plan is None and c.error is None for c in cands)


def test_a_hand_picked_config_is_appended_unbuilt_and_build_plans_reaches_it(fake_plans: list[FakePlan]) -> None:
    """1.32's create_execution_plan: the config goes after the ranked ones, neither built nor
    selected; HEURISTICS_CHOICE still picks the first that builds, ALL builds it too."""
    plans = PlanSet("g")
    ranked = candidates(3)
    for c in reversed(ranked):
        plans.put_first(c)
    manual = Candidate(5, 5, {1: 1}, [], [], "manual")  # type: ignore[arg-type]
    assert plans.append(manual) == 3
    assert plans.candidates[-1] is manual and manual.unbuilt and plans.selected is None and not fake_plans
    plans.build(0x1, cudnn.build_plan_policy.HEURISTICS_CHOICE)
    assert plans.selected is ranked[0] and manual.unbuilt
    plans.build(0x1, cudnn.build_plan_policy.ALL)
    assert manual.plan is not None and plans.selected is ranked[0]
