"""1.32's records of candidate plans (``pygraph.plans``, ``backend_plan_entries``): what a
candidate is, as the official's ``PlanConfig`` says it: engine id, knobs, index, heuristic mode.

Read from the candidates (_graph/plans/candidates.py) when asked; nothing here is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._lib.enums import heur_mode, knob_type


@dataclass(frozen=True)
class PlanEntry:
    """One candidate plan: ``engine_id`` (the engine's global index, -1 for a plan restored
    from the plan cache or serialized data), ``knobs`` ({cudnn.knob_type: value}), ``cpp_index``
    (its index among the candidates: get_plan_name_at_index(cpp_index) names it) and ``mode``
    (the cudnn.heur_mode that proposed it; None for one added by hand or restored)."""

    engine_id: int
    knobs: dict[Any, int] = field(default_factory=dict)
    cpp_index: int | None = None
    mode: heur_mode | None = None
    name: str = ""  # the plan's name, as get_plan_name_at_index gives it


def _knob(k: int) -> Any:
    """A knob type as cudnn.knob_type (an int for a type this cudnn-py does not know)."""
    try:
        return knob_type(k)
    except ValueError:
        return k


def entry(cand: Any, index: int) -> PlanEntry:
    """The record of candidate ``cand`` at ``index``."""
    mode = heur_mode.__members__.get(cand.source) if isinstance(cand.source, str) else None
    return PlanEntry(int(cand.engine_index), {_knob(k): int(v) for k, v in sorted(cand.knobs.items())},
                     index, mode, cand.name)


def entries(cands: Sequence[Any]) -> list[PlanEntry]:
    """The records of ``cands``, numbered in order."""
    return [entry(c, i) for i, c in enumerate(cands)]
