"""Plan selection API of ``pygraph`` (a mixin): counts, names, notes, knobs, engines.

The documented calls of the step-by-step pipeline after ``create_execution_plans``;
each is a small query or filter over the graph's `PlanSet`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .._lib.enums import behavior_note, knob_type, numerical_note
from ..backend import engine as eng
from .errors import GraphError
from .plans import PlanSet, candidate_from_config, notes_of

if TYPE_CHECKING:
    from .graph import pygraph as _Graph
else:
    _Graph = object


class PlanApiMixin(_Graph):
    """Methods of pygraph over its candidate plans."""

    # -- plans ------------------------------------------------------------------------------

    def get_engine_count(self) -> int:
        return eng.engine_count(self._require_op_graph())

    def get_execution_plan_count(self) -> int:
        return len(self._plans.candidates) if self._plans is not None else 0

    def build_plan_at_index(self, index: int) -> None:
        self._require_plans().at(index).build(self._handle_ptr(), self._label())

    def get_plan_name_at_index(self, index: int) -> str:
        return self._require_plans().at(index).name

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        cand = self._require_plans().at(index)
        cand.build(self._handle_ptr(), self._label())
        return int(cand.workspace or 0)

    def get_workspace_size(self) -> int:
        """Bytes of workspace the selected plan needs."""
        return int(self._require_plans().require_selected().workspace or 0)

    def get_behavior_notes(self) -> list[behavior_note]:
        plans = self._require_plans()
        cand = plans.selected or plans.at(0)
        return [behavior_note(int(n)) for n in cand.behavior_notes]

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list[behavior_note]:
        return [behavior_note(int(n)) for n in self._require_plans().at(index).behavior_notes]

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list[numerical_note]:
        return [numerical_note(int(n)) for n in self._require_plans().at(index).numerical_notes]

    def select_numeric_notes(self, notes: Iterable[numerical_note]) -> None:
        self._require_plans().filters.numeric_select |= notes_of(notes, numerical_note)

    def deselect_numeric_notes(self, notes: Iterable[numerical_note]) -> None:
        self._require_plans().filters.numeric_deselect |= notes_of(notes, numerical_note)

    def select_behavior_notes(self, notes: Iterable[behavior_note]) -> None:
        self._require_plans().filters.behavior_select |= notes_of(notes, behavior_note)

    def deselect_behavior_notes(self, notes: Iterable[behavior_note]) -> None:
        self._require_plans().filters.behavior_deselect |= notes_of(notes, behavior_note)

    def deselect_engines(self, names: Iterable[str]) -> None:
        names = [names] if isinstance(names, str) else list(names)
        self._require_plans().filters.engines_deselect |= {str(n) for n in names}

    def deselect_workspace_greater_than(self, workspace: int) -> None:
        if int(workspace) < 0:
            raise GraphError(f"deselect_workspace_greater_than: expected a size >= 0, got {workspace}")
        self._require_plans().filters.max_workspace = int(workspace)

    def get_knobs_for_engine(self, engine_id: int) -> list[eng.KnobInfo]:
        op_graph = self._require_op_graph()
        self._check_engine_id(engine_id)
        e = eng.engine(op_graph, engine_id, self.sm_count, self._label())
        try:
            return eng.knob_infos(e)
        finally:
            e.close()

    def create_execution_plan(self, engine_id: int, knobs: Mapping[knob_type | int, int] | None = None) -> None:
        """Add a hand-picked engine config (engine global index and knob values) as a candidate."""
        op_graph = self._require_op_graph()
        self._check_engine_id(engine_id)
        knobs = dict(knobs or {})
        e = eng.engine(op_graph, engine_id, self.sm_count, self._label())
        infos = {int(k.type): k for k in eng.knob_infos(e)}
        for knob, value in knobs.items():
            info = infos.get(int(knob))
            name = getattr(knob, "name", knob)
            if info is None:
                raise GraphError(f"create_execution_plan: engine {engine_id} has no knob {name}; "
                                 f"it has {[getattr(k.type, 'name', k.type) for k in infos.values()]}")
            if not info.minimum <= int(value) <= info.maximum or (int(value) - info.minimum) % max(info.stride, 1):
                raise GraphError(f"create_execution_plan: knob {name}={value} is outside {info.minimum}.."
                                 f"{info.maximum} step {info.stride} for engine {engine_id}")
        cfg = eng.engine_config(e, {int(k): int(v) for k, v in knobs.items()}, self._label())
        plans = self._plans if self._plans is not None else self._new_planset()
        cand = candidate_from_config(cfg, "manual")
        plans.all.insert(0, cand)
        self._plans = plans
        cand.build(self._handle_ptr(), self._label(), plans.kernel_cache)
        plans.selected = cand

    def _new_planset(self) -> PlanSet:
        plans = PlanSet(self._label())
        if self.kernel_cache is not None:
            plans.kernel_cache = self.kernel_cache.descriptor_for(self._require_op_graph())
        return plans

    def _check_engine_id(self, engine_id: int) -> None:
        count = self.get_engine_count()
        if isinstance(engine_id, bool) or not isinstance(engine_id, int) or not 0 <= engine_id < count:
            raise GraphError(f"engine id {engine_id!r} is out of range: this graph has {count} engines "
                             "(get_engine_count())")

