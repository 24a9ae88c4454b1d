"""The plan methods of ``pygraph``: how many engines and candidate plans a built graph has,
selecting, filtering and building one of them, and what 1.32 reports about them (names,
engines and knobs, notes, workspace sizes). ``pygraph`` is made of this class."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..._lib.enums import behavior_note, knob_type, numerical_note
from ...backend import engine as eng
from ...backend.handle import as_handle_ptr
from ..model import keywords
from ..model.graph_errors import GraphError, GraphStateError
from ..model.node_types import cuda_graph_retention, effective_retention
from ..plans.candidates import candidate_from_config, notes_of
from .graph_state import GraphState

if TYPE_CHECKING:
    from ..plans.plan_configs import PlanEntry

G = TypeVar("G", bound="PlanQueries")


class PlanQueries(GraphState):
    """The plan queries and filters of ``pygraph``."""

    # -- plans: queries and filters ----------------------------------------------------------

    def get_engine_count(self) -> int:
        """How many engines cuDNN has for this operation graph (engine ids 0..count-1)."""
        return eng.engine_count(self._op_graph())

    def get_execution_plan_count(self) -> int:
        """How many candidate plans the heuristics offered and the filters kept (0 before create_execution_plans)."""
        return len(self._pipeline.plans().candidates) if self._pipeline.has_plans() else 0

    def build_plan_at_index(self: G, index: int) -> G:
        """Finalize candidate plan ``index`` (compiling its kernels if its engine does so) and, as
        in 1.32, select it: get_workspace_size() and execute() then use it. Errors are raised."""
        index = plan_index("build_plan_at_index", index)
        cand = self._plans_for("build_plan_at_index").at(index)
        self._pipeline.build_candidate(cand)
        self._pipeline.select(cand)
        return self

    def _plans_for(self, op: str) -> Any:
        """The plan set, or GraphStateError saying which call makes it."""
        if not self._pipeline.has_plans():
            raise GraphStateError(f"{self.label()}: {op}() needs the candidate plans: call "
                                  "create_execution_plans([...]) (after build_operation_graph()) or build() first")
        return self._pipeline.plans()

    # -- plans: 1.32's introspection -------------------------------------------------------------

    def select_plan(self: G, index: int) -> G:
        """Pin candidate plan ``index`` (of ``plans``): execute runs it (built on first use), and
        build_plans() / build() build it rather than the first that builds, raising if it fails."""
        index = plan_index("select_plan", index)
        cand = self._plans_for("select_plan").at(index)
        self._pipeline.select(cand)
        self._pinned = cand
        return self

    @property
    def plans(self) -> list[PlanEntry]:
        """The candidate plans, in the order the plan-index methods number them: each a
        ``PlanEntry`` (engine_id, knobs, cpp_index, mode); [] before create_execution_plans."""
        if not self._pipeline.has_plans():
            return []
        from ..plans import plan_configs as plan_entries

        return plan_entries.entries(self._pipeline.plans().candidates)

    @property
    def selected_engine(self) -> None:
        """1.32: the official's Python engine serving the selected plan, None where the cuDNN
        backend serves it. Every plan of cudnn-py is a cuDNN backend plan: always None."""
        return None

    def backend_plan_entries(self) -> list[PlanEntry]:
        """The cuDNN backend's ranked plans (``plans``: in cudnn-py every plan is the backend's);
        [] when the heuristics offered none for this graph."""
        from ..plans import plan_configs as plan_entries

        return plan_entries.entries(self._plans_for("backend_plan_entries").candidates)

    def get_engine_and_knobs_at_index(self, index: int) -> tuple[int, dict[knob_type, int]]:
        """Candidate plan ``index``'s (engine global index, {cudnn.knob_type: value}): what
        ``create_execution_plan(engine_id, knobs)`` rebuilds."""
        from ..plans import plan_configs as plan_entries

        index = plan_index("get_engine_and_knobs_at_index", index)
        entry = plan_entries.entry(self._plans_for("get_engine_and_knobs_at_index").at(index), index)
        if entry.engine_id < 0:
            raise GraphStateError(f"{self.label()}: plan {index} was restored from the plan cache or serialized "
                                  "data and has no engine config to report; call create_execution_plans([...])")
        return entry.engine_id, dict(entry.knobs)

    def get_cuda_graph_retention(self) -> cuda_graph_retention:
        """The CUDA graph retention mode in effect: ``cuda_graph_retention=`` as given, else the
        CUDNN_CUDA_GRAPH_RETENTION environment variable ("per_graph" or "none"), else PER_GRAPH."""
        return effective_retention(self.cuda_graph_retention)

    def get_plan_name_at_index(self, index: int) -> str:
        """Candidate plan ``index``'s name: engine index and knob choices, e.g. ``'eng12_k2=3'``."""
        index = plan_index("get_plan_name_at_index", index)
        return self._pipeline.plans().at(index).name

    def get_workspace_size_plan_at_index(self, index: int, handle: Any = None,
                                         override_uids: Sequence[int] | None = None,
                                         override_shapes: Sequence[Sequence[int]] | None = None,
                                         override_strides: Sequence[Sequence[int]] | None = None) -> int:
        """Bytes of workspace candidate plan ``index`` needs (built on first use)."""
        index = plan_index("get_workspace_size_plan_at_index", index)
        self._check_handle("get_workspace_size_plan_at_index", handle)
        self._check_overrides("get_workspace_size_plan_at_index", override_uids, override_shapes, override_strides)
        cand = self._pipeline.plans().at(index)
        self._pipeline.build_candidate(cand)
        return self._pipeline.workspace_size(cand)

    def get_workspace_size(self, handle: Any = None, override_uids: Sequence[int] | None = None,
                           override_shapes: Sequence[Sequence[int]] | None = None,
                           override_strides: Sequence[Sequence[int]] | None = None) -> int:
        """Bytes of workspace the selected plan needs (with scratch composite nodes use)."""
        if handle is not None or override_uids is not None or override_shapes is not None \
                or override_strides is not None:
            self._check_handle("get_workspace_size", handle)
            self._check_overrides("get_workspace_size", override_uids, override_shapes, override_strides)
        return self._pipeline.workspace_size()

    @staticmethod
    def _check_handle(op: str, handle: Any) -> None:
        """A handle given where the size does not depend on it: checked, not used."""
        if handle is not None:
            try:
                as_handle_ptr(handle)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{op}: handle: {exc}") from None

    def get_behavior_notes(self) -> list[behavior_note]:
        """Behavior notes of the selected plan's engine (of the first candidate before one is selected)."""
        plans = self._pipeline.plans()
        cand = plans.selected or plans.at(0)
        return [behavior_note(int(n)) for n in cand.behavior_notes]

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list[behavior_note]:
        """Behavior notes of candidate plan ``index``'s engine."""
        index = plan_index("get_behavior_notes_for_plan_at_index", index)
        return [behavior_note(int(n)) for n in self._pipeline.plans().at(index).behavior_notes]

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list[numerical_note]:
        """Numerical notes of candidate plan ``index``'s engine."""
        index = plan_index("get_numerical_notes_for_plan_at_index", index)
        return [numerical_note(int(n)) for n in self._pipeline.plans().at(index).numerical_notes]

    def select_numeric_notes(self: G, notes: Iterable[numerical_note]) -> G:
        """Keep only candidates whose engines have every one of ``notes``."""
        wanted = notes_of(notes, numerical_note, "select_numeric_notes")
        self._plans_for("select_numeric_notes").filters.numeric_select |= wanted
        return self

    def deselect_numeric_notes(self: G, notes: Iterable[numerical_note]) -> G:
        """Drop candidates whose engines have any of ``notes``."""
        wanted = notes_of(notes, numerical_note, "deselect_numeric_notes")
        self._plans_for("deselect_numeric_notes").filters.numeric_deselect |= wanted
        return self

    def select_behavior_notes(self: G, notes: Iterable[behavior_note]) -> G:
        """Keep only candidates whose engines have every one of ``notes``."""
        wanted = notes_of(notes, behavior_note, "select_behavior_notes")
        self._plans_for("select_behavior_notes").filters.behavior_select |= wanted
        return self

    def deselect_behavior_notes(self: G, notes: Iterable[behavior_note]) -> G:
        """Drop candidates whose engines have any of ``notes``."""
        wanted = notes_of(notes, behavior_note, "deselect_behavior_notes")
        self._plans_for("deselect_behavior_notes").filters.behavior_deselect |= wanted
        return self

    def deselect_engines(self: G, engine_names: Iterable[str]) -> G:
        """Drop candidates by name: ``'eng12'`` (every knob choice) or a full plan name."""
        names = [engine_names] if isinstance(engine_names, str) else list(engine_names)
        self._plans_for("deselect_engines").filters.engines_deselect |= {str(n) for n in names}
        return self

    def deselect_workspace_greater_than(self: G, workspace_limit: int) -> G:
        """Drop candidates that need more than ``workspace_limit`` bytes of workspace."""
        if int(workspace_limit) < 0:
            raise GraphError(f"deselect_workspace_greater_than: expected a size >= 0, got {workspace_limit}")
        self._plans_for("deselect_workspace_greater_than").filters.max_workspace = int(workspace_limit)
        return self

    def get_knobs_for_engine(self, engine_id: int) -> list[eng.KnobInfo]:
        """The tunable knobs of engine ``engine_id`` (``cudnn.knob``: type, bounds, stride)."""
        check_engine_id(engine_id, "get_knobs_for_engine")

        def read() -> list[eng.KnobInfo]:
            e = self._engine(engine_id)
            try:
                return eng.knob_infos(e)
            finally:
                e.close()

        return self._pipeline.engine_knobs(engine_id, read)

    def create_execution_plan(self: G, engine_id: int, knobs: Mapping[knob_type | int, int] | None = None) -> G:
        """Append a hand-picked engine config (engine global index and knob values, as
        ``get_engine_and_knobs_at_index`` reports them) after the ranked candidates, as 1.32 does:
        it is neither built nor selected; ``get_execution_plan_count() - 1`` is its index for
        ``build_plan_at_index`` and ``execute_plan_at_index``, and ``build_plans`` reaches it in
        turn (every one with ``ALL``, in parallel)."""
        check_engine_id(engine_id, "create_execution_plan")
        if knobs is not None and not isinstance(knobs, Mapping):
            raise TypeError(f"create_execution_plan: knobs: expected a dict of cudnn.knob_type -> int, got {knobs!r}")
        knobs = dict(knobs or {})
        e = self._engine(engine_id)
        try:
            infos = {int(k.type): k for k in self._pipeline.engine_knobs(engine_id, lambda: eng.knob_infos(e))}
            for knob, value in knobs.items():
                info = infos.get(int(knob))
                name = getattr(knob, "name", knob)
                if info is None:
                    raise GraphError(f"create_execution_plan: engine {engine_id} has no knob {name}; "
                                     f"it has {[getattr(k.type, 'name', k.type) for k in infos.values()]}")
                if not info.allows(int(value)):
                    raise GraphError(f"create_execution_plan: knob {name}={value} is outside {info.minimum}.."
                                     f"{info.maximum} step {info.stride} for engine {engine_id}")
            cfg = eng.engine_config(e, {int(k): int(v) for k, v in knobs.items()}, self.label())
        except BaseException:
            e.close()
            raise
        self._pipeline.add_manual(candidate_from_config(cfg, "manual"))
        return self

    def _engine(self, engine_id: int) -> Any:
        check_engine_id(engine_id)
        count = self.get_engine_count()
        if not 0 <= engine_id < count:
            raise GraphError(f"engine id {engine_id!r} is out of range: this graph has {count} engines "
                             "(get_engine_count())")
        return eng.engine(self._op_graph(), engine_id, self.sm_count, self.label(),
                          self._pipeline.device_property())


def check_engine_id(engine_id: Any, op: str = "") -> None:
    """An engine id argument (an int, not a bool), checked before anything needs a GPU."""
    if isinstance(engine_id, bool) or not isinstance(engine_id, int):
        raise TypeError(f"{op + ': ' if op else ''}engine_id: expected an int (0 .. get_engine_count() - 1), "
                        f"got {engine_id!r}")


def plan_index(op: str, index: Any) -> int:
    """A plan index argument (an int), checked before anything needs the plans or a GPU."""
    if isinstance(index, bool) or not hasattr(type(index), "__index__"):
        raise TypeError(f"{op}: index: expected an int, got {index!r}")
    return operator.index(index)


# as every public method of pygraph: an unknown keyword is refused by name
keywords.name_unknown_keywords(PlanQueries, "pygraph")
