"""describe_plans() and autotuning's progress line, on CPU: the report's table and HTML from
plan-set data (no engine configs can be made without a GPU), and the progress modes."""

from __future__ import annotations

import sys
import types
import typing
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import pytest

import cudnn
from cudnn._graph.build import plan_report
from cudnn._graph.build.autotune import TuneReport, TuneResult
from cudnn._graph.plans.candidates import Candidate, PlanSet


@dataclass
class Plans:
    """What describe() reads of a pipeline: its label and plan set."""

    label: str
    planset: PlanSet

    def plans(self) -> PlanSet:
        return self.planset


def plan_set() -> PlanSet:
    ps = PlanSet("graph 'g'")
    note = cudnn.behavior_note.RUNTIME_COMPILATION
    a = Candidate(None, 12, {int(cudnn.knob_type.SPLIT_K): 2, int(cudnn.knob_type.TILE_SIZE): 5}, [],
                  [note], "A", plan=None, workspace=3 << 20)
    b = Candidate(None, 3, {}, [cudnn.numerical_note.TENSOR_CORE], [], "A", workspace=0)
    c = Candidate(None, 7, {}, [], [], "FALLBACK")
    c.error = cudnn.cudnnGraphNotSupportedError(3000, "graph 'g': eng7", "no")
    ps.all.extend([a, b, c])
    a.plan = b.plan = object()  # type: ignore[assignment]  # built (the report only asks whether)
    ps.selected = b
    return ps


def test_the_table_lists_every_candidate_in_plan_index_order() -> None:
    ps = plan_set()
    report = plan_report.describe(Plans("graph 'g'", ps))  # type: ignore[arg-type]
    assert [r.index for r in report] == [0, 1, 2]
    assert [r.name for r in report] == [c.name for c in ps.candidates]
    first = report[0]
    assert first.knobs == {"SPLIT_K": 2, "TILE_SIZE": 5} and first.behavior_notes == ["RUNTIME_COMPILATION"]
    assert (first.status, report[1].status, report[2].status) == ("built", "selected", "failed: "
                                                                  + ps.all[2].error.status_name)  # type: ignore[union-attr]
    text = str(report)
    assert "graph 'g': 3 candidate plans" in text and "SPLIT_K=2, TILE_SIZE=5" in text and "3.0 MiB" in text
    assert "TENSOR_CORE" in text and "no times: autotune(variant_pack) measures every plan" in text
    assert report[2].workspace is None and " ? " in text.splitlines()[4]


def test_filtered_candidates_are_counted_not_listed() -> None:
    ps = plan_set()
    ps.filters.engines_deselect.add("eng7")
    report = plan_report.describe(Plans("g", ps))  # type: ignore[arg-type]
    assert len(report) == 2 and report.filtered_out == 1
    assert "1 more filtered out" in str(report)


def test_times_come_from_the_autotune_table_and_other_lowerings_are_listed() -> None:
    ps = plan_set()
    names = [c.name for c in ps.candidates]
    table = TuneReport([TuneResult(1, names[1], 0.0105, 0), TuneResult(0, names[0], 0.0203, 3 << 20),
                        TuneResult(2, names[2], None, 0, "NOT_SUPPORTED")])
    report = plan_report.describe(Plans("g", ps), table)  # type: ignore[arg-type]
    assert [r.time_ms for r in report] == [0.0203, 0.0105, None]
    assert "10.50 us" in str(report) and "no times" not in str(report)
    pipeline = Plans("g", ps)
    plan_report.remember(pipeline, table)  # type: ignore[arg-type]  # what pygraph.autotune does
    assert [r.time_ms for r in plan_report.describe(pipeline)] == [0.0203, 0.0105, None]  # type: ignore[arg-type]

    class Lowered(Plans):
        def lowering_name(self) -> str:
            return "unified"

    mixed = TuneReport([TuneResult(0, names[0], 0.02, 0, "", "unified"),
                        TuneResult(0, "eng99", 0.015, 64, "", "composite")])
    rows = list(plan_report.describe(Lowered("g", ps), mixed))  # type: ignore[arg-type]
    assert rows[0].time_ms == 0.02 and rows[0].lowering == "unified"
    assert rows[-1].index is None and rows[-1].name == "eng99" and rows[-1].lowering == "composite"
    assert "[composite] eng99" in str(plan_report.describe(Lowered("g", ps), mixed))  # type: ignore[arg-type]


def test_html_is_a_table_with_one_row_per_plan() -> None:
    report = plan_report.describe(Plans("g <&>", plan_set()))  # type: ignore[arg-type]
    root = ET.fromstring(report._repr_html_())
    rows = root.findall(".//tbody/tr")
    assert len(rows) == 3 and [th.text for th in root.findall(".//thead/tr/th")] == plan_report.HEADERS
    assert rows[1].get("style") == "font-weight:bold"  # the selected plan
    assert "g <&>" in "".join(root.itertext())


def test_describe_plans_before_plans_exist_says_what_to_call() -> None:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT)
    g.relu(g.tensor(name="x", dim=[2, 3])).set_output(True)
    with pytest.raises(cudnn.GraphStateError, match=r"create_execution_plans\(\) \(or build\(\)\) first"):
        g.describe_plans()


# -- progress ---------------------------------------------------------------------------------

def test_progress_is_silent_for_short_work_and_a_stderr_line_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    quiet = plan_report.Progress("autotuning g", None, delay=60.0, use_tqdm=False)
    for i in range(3):
        quiet.step(i, 3, f"eng{i}")
    quiet.close()
    assert capsys.readouterr().err == ""
    off = plan_report.Progress("autotuning g", False, delay=0.0)
    off.step(0, 3, "eng0")
    off.close()
    assert capsys.readouterr().err == ""
    late = plan_report.Progress("autotuning g", None, delay=0.0, use_tqdm=False)  # long work: shows itself
    for i in range(3):
        late.step(i, 3, f"eng{i}")
    late.close()
    err = capsys.readouterr().err
    assert "autotuning g: plan 3/3 eng2" in err and err.endswith("\n")


def test_progress_uses_tqdm_when_installed(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    made: list[Any] = []

    class Bar:
        def __init__(self, total: int, desc: str, **kw: Any) -> None:
            self.total, self.desc, self.n, self.postfix, self.closed = total, desc, 0, [], False
            made.append(self)

        def reset(self, total: int) -> None:
            self.total = total

        def set_postfix_str(self, s: str, refresh: bool = True) -> None:
            self.postfix.append((self.n, s))

        def close(self) -> None:
            self.closed = True

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=Bar))
    bar = plan_report.Progress("autotuning g", True)
    bar.step(0, 2, "eng0")
    bar.step(1, 2, "eng1")
    bar.step(0, 5, "eng4")  # another lowering's plans: a new total
    bar.close()
    assert len(made) == 1 and made[0].desc == "autotuning g" and made[0].total == 5 and made[0].closed
    assert made[0].postfix == [(0, "eng0"), (1, "eng1"), (0, "eng4")]
    assert capsys.readouterr().err == ""  # tqdm draws; no plain line besides


class _Counted(Candidate):
    """A candidate whose build is recorded (finalizing a plan needs a GPU)."""

    built: typing.ClassVar[list[int]] = []

    def build(self, handle: int, label: str, kernel_cache: Any = None) -> Any:
        _Counted.built.append(self.engine_index)
        self.plan = object()  # type: ignore[assignment]
        return self.plan


def test_building_all_plans_stops_at_the_limit_autotuning_passes() -> None:
    """autotune(max_plans=K) builds the heuristics' first K candidates only (a runtime-compiled
    engine's plan takes a compilation each); no limit builds them all."""
    for limit, expected in ((2, [0, 1]), (None, [0, 1, 2, 3])):
        ps = PlanSet("g")
        ps.all.extend(_Counted(None, i, {}, [], [], "A") for i in range(4))
        _Counted.built = []
        ps.build(0, cudnn.build_plan_policy.ALL, limit)
        assert _Counted.built == expected
        assert ps.selected is ps.all[0]
    from cudnn._graph.build.autotune import autotune

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_plans must be None or an int >= 1"):
            autotune(None, {}, max_plans=bad)  # type: ignore[arg-type]
