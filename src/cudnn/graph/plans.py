"""Engine-config candidates of a graph and the execution plans built from them.

Heuristics give ranked engine configs; user filters (notes, engine names, workspace)
narrow them; plans are finalized lazily (finalizing compiles kernels) and remembered with
their error when they fail, so `check_support` and `build_plans` never do the work twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .._lib.enums import build_plan_policy
from .._lib.errors import CudnnError, cudnnGraphNotSupportedError
from ..backend import engine as eng
from ..backend import plan as backend_plan
from ..backend.descriptor import Descriptor
from .errors import GraphStateError


class Candidate:
    """One engine config and, once built, its execution plan.

    What the config says of itself (engine index, knob choices, notes) is read from the backend
    when first asked for: heuristics offer dozens of configs, most are never looked at, and
    reading a config's knob choices takes a descriptor per knob type."""

    __slots__ = ("config", "_engine_index", "_knobs", "_numerical_notes", "_behavior_notes", "source", "plan",
                 "error", "workspace", "restored_name", "device_property", "refused")

    def __init__(self, config: Descriptor | None, engine_index: int | None = None,
                 knobs: dict[int, int] | None = None, numerical_notes: list[Any] | None = None,
                 behavior_notes: list[Any] | None = None, source: str = "", plan: Descriptor | None = None,
                 error: CudnnError | None = None, workspace: int | None = None, restored_name: str = "",
                 device_property: Descriptor | None = None, refused: str = "") -> None:
        self.config = config  # None for a plan restored from serialized data
        self._engine_index = engine_index
        self._knobs = knobs
        self._numerical_notes = numerical_notes
        self._behavior_notes = behavior_notes
        self.source = source  # the heuristic mode that proposed it, or "manual"
        self.plan = plan
        self.error = error
        self.workspace = workspace
        self.restored_name = restored_name
        self.device_property = device_property  # DEVICEPROP the plan is built for (None: the handle's GPU)
        self.refused = refused  # why a guard keeps this engine off this graph (graph/guards.py); never built

    def _read_engine(self) -> None:
        """The notes of the config's engine (none for a restored plan)."""
        if self.config is None:
            self._numerical_notes = self._numerical_notes or []
            self._behavior_notes = self._behavior_notes or []
            return
        engine = eng.config_engine(self.config)
        try:
            if self._numerical_notes is None:
                self._numerical_notes = eng.numerical_notes(engine)
            if self._behavior_notes is None:
                self._behavior_notes = eng.behavior_notes(engine)
        finally:
            engine.close()

    @property
    def engine_index(self) -> int:
        if self._engine_index is None:
            self._engine_index = -1 if self.config is None else eng.config_engine_index(self.config)
        return self._engine_index

    @property
    def numerical_notes(self) -> list[Any]:
        if self._numerical_notes is None:
            self._read_engine()
        return self._numerical_notes  # type: ignore[return-value]

    @property
    def behavior_notes(self) -> list[Any]:
        if self._behavior_notes is None:
            self._read_engine()
        return self._behavior_notes  # type: ignore[return-value]

    @property
    def knobs(self) -> dict[int, int]:
        """Knob type -> value this config chose."""
        if self._knobs is None:
            self._knobs = {} if self.config is None else eng.knob_choices(self.config)
        return self._knobs

    @property
    def name(self) -> str:
        """'eng12_k2=3_k5=0': engine global index and knob choices (knob type=value)."""
        if self.restored_name:
            return self.restored_name
        return f"eng{self.engine_index}" + "".join(f"_k{k}={v}" for k, v in sorted(self.knobs.items()))

    def __repr__(self) -> str:
        return f"<Candidate {self.name} from {self.source or '?'}{' built' if self.plan is not None else ''}>"

    def build(self, handle: int, label: str, kernel_cache: Descriptor | None = None) -> Descriptor:
        """Finalize the plan once; a failure is remembered and re-raised."""
        if self.plan is None and self.error is None:
            if self.config is None:
                raise GraphStateError(f"{label}: {self.name} has no engine config to build from")
            try:
                self.plan = backend_plan.execution_plan(handle, self.config, f"{label}: {self.name}", kernel_cache,
                                                        self.device_property)
                self.workspace = backend_plan.workspace_size(self.plan)
            except CudnnError as exc:
                self.error = exc
        if self.error is not None:
            raise self.error
        assert self.plan is not None
        return self.plan


def candidate_from_config(config: Descriptor, source: str) -> Candidate:
    """A candidate of ``config`` (its engine, knobs and notes are read when first needed)."""
    return Candidate(config, source=source)


@dataclass
class Filters:
    """What the user asked to keep or drop; applied to heuristics' candidates in order."""

    numeric_select: set[int] = field(default_factory=set)
    numeric_deselect: set[int] = field(default_factory=set)
    behavior_select: set[int] = field(default_factory=set)
    behavior_deselect: set[int] = field(default_factory=set)
    engines_deselect: set[str] = field(default_factory=set)
    max_workspace: int | None = None

    def keeps(self, c: Candidate) -> bool:
        """Whether ``c`` passes every filter set (a candidate's notes and name are read only
        for the filters that look at them)."""
        if self.numeric_select or self.numeric_deselect:
            num = {int(n) for n in c.numerical_notes}
            if not self.numeric_select <= num or num & self.numeric_deselect:
                return False
        if self.behavior_select or self.behavior_deselect:
            beh = {int(n) for n in c.behavior_notes}
            if not self.behavior_select <= beh or beh & self.behavior_deselect:
                return False
        if self.engines_deselect and (f"eng{c.engine_index}" in self.engines_deselect
                                      or c.name in self.engines_deselect):
            return False
        if self.max_workspace is not None:
            size = c.workspace
            if size is None and c.config is not None:
                size = _config_workspace(c.config)
            if size is not None and size > self.max_workspace:
                return False
        return True


def _config_workspace(config: Descriptor) -> int | None:
    from .._lib.enums import cudnnBackendAttributeName_t as A
    from .._lib.enums import cudnnBackendAttributeType_t as T

    try:
        return int(config.get(A.CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, T.CUDNN_TYPE_INT64))
    except CudnnError:
        return None


class PlanSet:
    """The candidates of one operation graph, in heuristic order, after filtering."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.all: list[Candidate] = []
        self.filters = Filters()
        self.selected: Candidate | None = None
        self.kernel_cache: Descriptor | None = None
        self.device_property: Descriptor | None = None  # given to every candidate's plan
        self.guard: Callable[[Candidate], str | None] | None = None  # known-wrong engines (graph/guards.py)

    @property
    def candidates(self) -> list[Candidate]:
        return [c for c in self.all if not c.refused and self.filters.keeps(c)]

    def add(self, configs: Iterable[Descriptor], source: str) -> None:
        """Append the configs one heuristic mode ranked, less those an earlier mode already gave
        (same engine and knob choices; knobs are compared only between configs of one engine)."""
        earlier: dict[int, list[Candidate]] = {}
        for old in self.all:
            earlier.setdefault(old.engine_index, []).append(old)
        for cfg in configs:
            c = candidate_from_config(cfg, source)
            if earlier and any(old.knobs == c.knobs for old in earlier.get(c.engine_index, ())):
                cfg.close()
                continue
            c.device_property = self.device_property
            c.refused = (self.guard(c) or "") if self.guard is not None else ""
            self.all.append(c)

    def at(self, index: int) -> Candidate:
        cands = self.candidates
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"{self.label}: plan index must be an int, got {index!r}")
        if not 0 <= index < len(cands):
            raise IndexError(f"{self.label}: plan index {index} is out of range: there are {len(cands)} "
                             "candidate plans (get_execution_plan_count())")
        return cands[index]

    def first_supported(self, handle: int) -> Candidate:
        """The first candidate whose plan finalizes; raises cudnnGraphNotSupportedError if none."""
        cands = self.candidates
        for c in cands:
            try:
                c.build(handle, self.label, self.kernel_cache)
                return c
            except CudnnError:
                continue
        raise self.not_supported(cands)

    def build(self, handle: int, policy: build_plan_policy) -> None:
        if policy == build_plan_policy.ALL:
            for c in self.candidates:
                try:
                    c.build(handle, self.label, self.kernel_cache)
                except CudnnError:
                    pass
            built = [c for c in self.candidates if c.plan is not None]
            if not built:
                raise self.not_supported(self.candidates)
            self.selected = self.selected if self.selected in built else built[0]
        else:
            self.selected = self.first_supported(handle)

    def not_supported(self, tried: list[Candidate]) -> cudnnGraphNotSupportedError:
        refused = [c for c in self.all if c.refused]
        if not self.all:
            detail = "heuristics returned no engine configs"
        elif not tried and refused and len(refused) == len(self.all):
            names = ", ".join(c.name for c in refused[:8])
            detail = (f"every engine config offered ({names}) is known to compute this graph wrongly: "
                      f"{refused[0].refused}")
        elif not tried:
            detail = f"all {len(self.all)} engine configs were filtered out (notes/engines/workspace filters)"
        else:
            reasons = "; ".join(f"{c.name}: {c.error.status_name if c.error else 'not built'}"
                                for c in tried[:8])
            more = f" (+{len(tried) - 8} more)" if len(tried) > 8 else ""
            detail = f"no engine config could be built: {reasons}{more}"
        return cudnnGraphNotSupportedError(3000, self.label, detail)

    def require_selected(self) -> Candidate:
        if self.selected is None or self.selected.plan is None:
            raise GraphStateError(f"{self.label}: no plan is built yet; call build() or build_plans()")
        return self.selected

    def close(self) -> None:
        for c in self.all:
            if c.plan is not None:
                c.plan.close()
            if c.config is not None:
                c.config.close()
        self.all.clear()
        self.selected = None


def notes_of(values: Iterable[Any], kind: type[IntEnum]) -> set[int]:
    out: set[int] = set()
    for v in values:
        if not isinstance(v, (kind, int)) or isinstance(v, bool):
            raise TypeError(f"expected cudnn.{kind.__name__} values, got {v!r}")
        out.add(int(v))
    return out
