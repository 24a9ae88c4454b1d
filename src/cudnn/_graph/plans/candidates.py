"""Engine-config candidates of a graph and the execution plans built from them.

Heuristics give ranked engine configs; user filters (notes, engine names, workspace)
narrow them; plans are finalized lazily (finalizing compiles kernels) and remembered with
their error when they fail, so `check_support` and `build_plans` never do the work twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ..._lib.enums import build_plan_policy
from ..._lib.record import Record
from ..._lib.status import (
    CudaUnavailableError,
    CudnnError,
    DescriptorClosedError,
    cudnnGraphNotSupportedError,
)
from ...backend import engine as eng
from ...backend import plan as backend_plan
from ...backend.descriptor import Descriptor
from ..model.graph_errors import GraphStateError

if TYPE_CHECKING:
    from .threads import Offload


class Candidate:
    """One engine config and, once built, its execution plan.

    What the config says of itself (engine index, knob choices, notes) is read from the backend
    when first asked for: heuristics offer dozens of configs, most are never looked at, and
    reading a config's knob choices takes a descriptor per knob type."""

    __slots__ = ("config", "_engine_index", "_knobs", "_numerical_notes", "_behavior_notes", "source", "plan",
                 "error", "workspace", "restored_name", "device_property", "refused", "retention")

    def __init__(self, config: Descriptor | None, engine_index: int | None = None,
                 knobs: dict[int, int] | None = None, numerical_notes: list[Any] | None = None,
                 behavior_notes: list[Any] | None = None, source: str = "", plan: Descriptor | None = None,
                 error: CudnnError | None = None, workspace: int | None = None, restored_name: str = "",
                 device_property: Descriptor | None = None, refused: str = "", retention: int | None = None) -> None:
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
        self.refused = refused  # why a guard keeps this engine off this graph (known_faults.py); never built
        self.retention = retention  # CUDA_GRAPH_RETENTION set on the plan (None: left to cuDNN)

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
            plan = self.start_build(handle, label, kernel_cache)
            if plan is not None:
                try:
                    plan.finalize()
                except CudnnError as exc:
                    self.finish_build(plan, exc)
                except BaseException:
                    plan.close()
                    raise
                else:
                    self.finish_build(plan, None)
        if self.error is not None:
            raise self.error
        assert self.plan is not None
        return self.plan

    @property
    def unbuilt(self) -> bool:
        """Neither built nor failed yet."""
        return self.plan is None and self.error is None

    def start_build(self, handle: int, label: str, kernel_cache: Descriptor | None = None) -> Descriptor | None:
        """The first half of `build`: the plan descriptor with its attributes set, not finalized
        (finalizing, the slow half, may run on another thread: _graph/plans/threads.py); None, with
        the error remembered, when setting them fails.

        The plan is labelled ``label`` alone, and an error of it names the candidate
        (`_named`): a name reads the config's engine back from cuDNN, which is slow for an
        attention graph's engine, and a plan that builds needs none."""
        if self.config is None:
            raise GraphStateError(f"{label}: {self.name} has no engine config to build from")
        try:
            return backend_plan.plan_descriptor(handle, self.config, label, kernel_cache,
                                                self.device_property, self.retention)
        except CudnnError as exc:
            self.error = self._named(exc, label)
            return None

    def finish_build(self, plan: Descriptor, error: CudnnError | None) -> None:
        """The second half of `build`, given how finalizing ``plan`` went: keep the plan and its
        workspace size, or the error (the plan descriptor is closed)."""
        if error is not None:
            plan.close()
            self.error = self._named(error, plan.label)
            return
        self.plan = plan
        try:
            self.workspace = backend_plan.workspace_size(plan)
        except CudnnError as exc:
            self.error = self._named(exc, plan.label)

    def _named(self, error: CudnnError, label: str) -> CudnnError:
        """``error``, raised by this candidate's plan labelled ``label``, said of the candidate:
        "g: eng12_k2=0: finalizing EXECUTION_PLAN descriptor" (a missing GPU is not the engine's)."""
        prefix = f"{label}: " if label else ""
        if isinstance(error, CudaUnavailableError) or not error.context.startswith(prefix):
            return error
        try:
            name = self.name
        except (CudnnError, DescriptorClosedError):
            return error  # the config cannot say which engine it is: the error as raised
        if not label.endswith(name):  # a plan restored from another process's is labelled with it
            error.recontext(f"{prefix}{name}: {error.context[len(prefix):]}")
        return error


def candidate_from_config(config: Descriptor, source: str) -> Candidate:
    """A candidate of ``config`` (its engine, knobs and notes are read when first needed)."""
    return Candidate(config, source=source)


class Filters(Record):
    """What the user asked to keep or drop; applied to heuristics' candidates in order."""

    __slots__ = ("numeric_select", "numeric_deselect", "behavior_select", "behavior_deselect", "engines_deselect",
                 "max_workspace")

    def __init__(self, numeric_select: set[int] | None = None, numeric_deselect: set[int] | None = None,
                 behavior_select: set[int] | None = None, behavior_deselect: set[int] | None = None,
                 engines_deselect: set[str] | None = None, max_workspace: int | None = None) -> None:
        self.numeric_select: set[int] = set() if numeric_select is None else numeric_select
        self.numeric_deselect: set[int] = set() if numeric_deselect is None else numeric_deselect
        self.behavior_select: set[int] = set() if behavior_select is None else behavior_select
        self.behavior_deselect: set[int] = set() if behavior_deselect is None else behavior_deselect
        self.engines_deselect: set[str] = set() if engines_deselect is None else engines_deselect
        self.max_workspace = max_workspace

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
    from ..._lib.attributes import A
    from ..._lib.enums import cudnnBackendAttributeType_t as T

    try:
        return int(config.get(A.CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, T.CUDNN_TYPE_INT64))
    except CudnnError:
        return None


class _Ranking:
    """One heuristic mode whose configs are not all read yet: its finalized ENGINEHEUR, or the
    query that makes it when it is first needed (`PlanSet.defer_ranking`)."""

    __slots__ = ("added", "heur", "query", "source", "taken", "tolerant")

    def __init__(self, heur: Descriptor | None, source: str, tolerant: bool,
                 query: Callable[[], Descriptor] | None = None) -> None:
        self.heur = heur
        self.query = query
        self.source = source
        self.taken = 0  # configs already read from it (the best first)
        self.added: list[Candidate] = []  # the candidates its configs became (less those offered before)
        self.tolerant = tolerant  # a failure to read it means "no configs" (other modes may have some)


class PlanSet:
    """The candidates of one operation graph, in heuristic order, after filtering.

    A heuristic mode's configs are read when they are first needed: cuDNN makes each config as
    it is read, and a build usually needs only the best one, so `first_supported` reads one and
    reads the rest only if it does not build. Anything that looks at the whole list (`all`,
    `candidates`, a count, an index, autotuning) reads them all."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._all: list[Candidate] = []
        self._rankings: list[_Ranking] = []  # modes not read to the end, in the order asked
        self.filters = Filters()
        self.selected: Candidate | None = None
        self.kernel_cache: Descriptor | None = None
        self.device_property: Descriptor | None = None  # given to every candidate's plan
        self.retention: int | None = None  # the CUDA_GRAPH_RETENTION every candidate's plan is built with
        self.guard: Callable[[Candidate], str | None] | None = None  # known-wrong engines (known_faults.py)

    @property
    def all(self) -> list[Candidate]:
        """Every candidate the heuristics offered (and any added by hand), in order."""
        while self._read_more():
            pass
        return self._all

    @property
    def candidates(self) -> list[Candidate]:
        return [c for c in self.all if self._usable(c)]

    def _usable(self, c: Candidate) -> bool:
        return not c.refused and self.filters.keeps(c)

    def add_ranking(self, heur: Descriptor, source: str, tolerant: bool) -> None:
        """Take the configs a finalized ENGINEHEUR ranks (read when needed; this set closes it).
        ``tolerant``: a mode that cannot rank this graph adds nothing instead of raising."""
        self._rankings.append(_Ranking(heur, source, tolerant))

    def defer_ranking(self, query: Callable[[], Descriptor], source: str) -> None:
        """A heuristic mode queried only when its configs are first needed: ``query`` makes its
        finalized ENGINEHEUR. For a mode ranked after others (the heuristics of a fused graph
        take tens of milliseconds, and a build usually takes the first mode's best config); a
        mode that cannot rank the graph then adds nothing."""
        self._rankings.append(_Ranking(None, source, True, query))

    def put_first(self, cand: Candidate) -> None:
        """A candidate ahead of all others (a plan restored from a cache or serialized data)."""
        self._all.insert(0, cand)

    def append(self, cand: Candidate) -> int:
        """A hand-picked config after every candidate the heuristics rank; its index."""
        while self._read_more():
            pass
        self._all.append(cand)
        return len(self._all) - 1

    def _read_more(self) -> bool:
        """Read the next configs of the first unfinished mode: its best one first, then the
        rest. False when every mode is read."""
        if not self._rankings:
            return False
        ranking = self._rankings[0]
        if ranking.heur is None:
            assert ranking.query is not None
            query, ranking.query = ranking.query, None
            try:
                ranking.heur = query()
            except CudnnError:  # tolerant: this mode ranks nothing
                self._rankings.pop(0)
                return True
        try:
            configs = eng.ranked_configs(ranking.heur, 1 if ranking.taken == 0 else None)
        except CudnnError:
            if not ranking.tolerant:
                raise
            configs = []
        for cfg in configs[:ranking.taken]:  # read again with the rest; the first copies are kept
            cfg.close()
        fresh = configs[ranking.taken:]
        finished = ranking.taken > 0 or not fresh
        ranking.taken += len(fresh)
        if finished:
            self._rankings.pop(0)
            ranking.heur.close()
        self.add(fresh, ranking.source, ranking.added)
        return True

    def add(self, configs: Iterable[Descriptor], source: str, own: list[Candidate] | None = None) -> None:
        """Append the configs one heuristic mode ranked, less those that were already offered
        (same engine and knob choices; knobs are compared only between configs of one engine).
        ``own``: the candidates this ranking added before, which its configs are not compared
        with (one ranking holds no config twice); the new ones are appended to it."""
        mine = {id(c) for c in own} if own else set()
        earlier: dict[int, list[Candidate]] = {}
        for old in self._all:
            if id(old) not in mine:
                earlier.setdefault(old.engine_index, []).append(old)
        for cfg in configs:
            c = candidate_from_config(cfg, source)
            if earlier and any(old.knobs == c.knobs for old in earlier.get(c.engine_index, ())):
                cfg.close()
                continue
            c.device_property, c.retention = self.device_property, self.retention
            c.refused = (self.guard(c) or "") if self.guard is not None else ""
            self._all.append(c)
            if own is not None:
                own.append(c)

    def at(self, index: int) -> Candidate:
        cands = self.candidates
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"{self.label}: plan index must be an int, got {index!r}")
        if not 0 <= index < len(cands):
            raise IndexError(f"{self.label}: plan index {index} is out of range: there are {len(cands)} "
                             "candidate plans (get_execution_plan_count())")
        return cands[index]

    def first_supported(self, handle: int) -> Candidate:
        """The first candidate whose plan finalizes; raises cudnnGraphNotSupportedError if none.
        Configs are read only as far as needed."""
        i = 0
        while i < len(self._all) or self._read_more():
            if i >= len(self._all):
                continue
            c = self._all[i]
            i += 1
            if not self._usable(c):
                continue
            try:
                c.build(handle, self.label, self.kernel_cache)
                return c
            except CudnnError:
                continue
        raise self.not_supported(self.candidates)

    def build(self, handle: int, policy: build_plan_policy, limit: int | None = None,
              threads: int | None = None, offload: Callable[[Sequence[Candidate]], Offload | None] | None = None
              ) -> None:
        """Select the first candidate that builds or (ALL) build every candidate, the first
        ``limit`` of them if given, and keep the selection if it is among those built. ALL
        finalizes on ``threads`` threads (None: `parallel.build_threads`), with the helpers
        ``offload`` gives (`parallel.build_all`); the result is the same as one after another."""
        if policy == build_plan_policy.ALL:
            from .threads import build_all

            build_all(self.candidates[:limit], handle, self.label, self.kernel_cache, threads, offload)
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
        for ranking in self._rankings:
            if ranking.heur is not None:
                ranking.heur.close()
        self._rankings.clear()
        for c in self._all:
            if c.plan is not None:
                c.plan.close()
            if c.config is not None:
                c.config.close()
        self._all.clear()
        self.selected = None


def notes_of(values: Iterable[Any], kind: type[IntEnum], op: str = "") -> set[int]:
    """The ints of ``values``, notes of ``kind`` (members or their ints), for the filter ``op``."""
    if isinstance(values, (str, bytes, kind)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{op + ': ' if op else ''}expected a list of cudnn.{kind.__name__}, got {values!r}")
    out: set[int] = set()
    for v in values:
        if not isinstance(v, (kind, int)) or isinstance(v, bool):
            raise TypeError(f"{op + ': ' if op else ''}expected cudnn.{kind.__name__} values, got {v!r}")
        out.add(int(v))
    return out
