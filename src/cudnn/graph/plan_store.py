"""The plan cache, serialization, autotuning and CUDA graphs of ``pygraph`` (a mixin).

Kept apart from the builder: these all work on a selected plan and the record that
describes it (`serialize.PlanRecord`), whichever way the plan was made.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._lib import loader
from .._lib.enums import behavior_note, data_type, heur_mode
from .._lib.errors import CudnnError
from .._lib.host import HostScalar
from ..backend.descriptor import Descriptor
from ..backend.handle import Handle, as_handle_ptr
from .errors import GraphError
from .execute import Binding
from .plans import Candidate, PlanSet
from .serialize import PlanRecord, TensorRecord, device_identity

if TYPE_CHECKING:
    from .graph import pygraph as _Graph
else:
    _Graph = object

DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)


class PlanStoreMixin(_Graph):
    """Methods of pygraph that persist, restore, tune and capture its selected plan."""

    # -- the plan cache -----------------------------------------------------------------------

    def _cache_keys(self, modes: Sequence[heur_mode]) -> tuple[str, str] | None:
        """(autotuned key, heuristic key) of this validated graph, or None if it cannot be cached."""
        from .cache import plan_cache

        if not plan_cache.enabled or self.kernel_cache is not None:
            return None
        self._handle_ptr()  # a missing GPU surfaces as cuDNN's error, with its hint
        self._assign_uids()
        uids = tuple(t.get_uid() for t in self._all_tensors())
        device = self._device()
        ident = (self.key(), uids, self.sm_count, device_identity(device), loader.report().version)
        return plan_cache.key("tuned", ident), plan_cache.key("heuristic", ident, tuple(int(m) for m in modes))

    def _device(self) -> int:
        h = self.handle if self.handle is not None else self._handle_obj
        if isinstance(h, Handle):
            return h.device
        from .._lib import cuda

        return cuda.current_device()

    def _adopt_cached_plan(self, modes: Sequence[heur_mode]) -> bool:
        from .cache import plan_cache

        keys = self._cache_keys(modes)
        if keys is None:
            return False
        for key in keys:
            hit = plan_cache.lookup_memory(key)
            if hit is not None:
                record, plan = hit
                self._restore(record, plan)
                plan_cache.hits += 1
                return True
        for key in keys:
            record = plan_cache.lookup_disk(key)
            if record is None:
                continue
            try:
                record.check_compatible(self._device())
                plan = self._plan_from_record(record)
            except (CudnnError, GraphError) as exc:
                logging.getLogger("cudnn.plan_cache").warning("plan cache: entry %s unusable (%s); rebuilding",
                                                               key, exc)
                plan_cache.forget(key)
                continue
            plan_cache.remember(key, record, plan)
            self._restore(record, plan)
            plan_cache.hits += 1
            plan_cache.disk_hits += 1
            return True
        plan_cache.misses += 1
        return False

    def _store_plan(self, modes: Sequence[heur_mode], autotuned: bool) -> None:
        from .cache import plan_cache

        keys = self._cache_keys(modes)
        plans = self._plans
        if keys is None or plans is None or plans.selected is None or plans.selected.plan is None:
            return
        record = self._record(plans.selected, autotuned)
        plan_cache.store(keys[0] if autotuned else keys[1], record, plans.selected.plan)

    def _plan_from_record(self, record: PlanRecord) -> Descriptor:
        from ..backend import plan as backend_plan

        return backend_plan.plan_from_json(self._handle_ptr(), record.plan_json, f"{self._label()}: {record.plan_name}")

    def _record(self, cand: Candidate, autotuned: bool) -> PlanRecord:
        from ..backend import plan as backend_plan

        assert cand.plan is not None
        name, cc = device_identity(self._device())
        tensors = [TensorRecord(b.uid, b.tensor.get_name(), b.tensor.get_dim(), b.tensor.get_stride(),
                                b.tensor.get_data_type().name, b.tensor.get_is_pass_by_value(),
                                b.tensor.get_value(), b.node, b.port) for b in self._bindings]
        return PlanRecord(cand.name, backend_plan.plan_json(cand.plan), int(cand.workspace or 0), tensors,
                          loader.report().version, name, cc, autotuned, f"{self.key():x}")

    def _restore(self, record: PlanRecord, plan: Descriptor) -> None:
        """Make ``plan`` this graph's selected plan, bound by the record's uids."""
        if self.nodes:
            self._assign_uids()
            self._bindings = self._make_bindings()
        else:
            self._bindings = [Binding(t.uid, t.tensor(), t.node, t.port,
                                      HostScalar(t.value, data_type[t.data_type]) if t.value is not None else None)
                              for t in record.tensors]
        plans = PlanSet(self._label())
        cand = Candidate(None, -1, {}, [], [], "cache", plan=plan, workspace=record.workspace,
                         restored_name=record.plan_name)
        plans.all.append(cand)
        plans.selected = cand
        self._plans = plans
        self._runners = {}
        self._active = None

    # -- serialization, autotuning, CUDA graphs -------------------------------------------------

    def serialize(self) -> bytes:
        """The selected plan and what binds it, as bytes for ``deserialize`` (any process)."""
        return self._record(self._require_plans().require_selected(), False).to_bytes()

    def deserialize(self, *args: Any) -> None:
        """``deserialize(handle, data)`` or ``deserialize(data)``: restore a serialized plan.

        Refused (SerializationError) when made by another cuDNN version or on another GPU."""
        if len(args) == 1:
            handle, data = None, args[0]
        elif len(args) == 2:
            handle, data = args
        else:
            raise TypeError("deserialize(handle, data) or deserialize(data)")
        if handle is not None:
            as_handle_ptr(handle)
            self.handle = handle
        record = PlanRecord.from_bytes(data)
        record.check_compatible(self._device())
        self._restore(record, self._plan_from_record(record))

    def autotune(self, variant_pack: Mapping[Any, Any], workspace: Any = None, handle: Any = None,
                 warmup: int = 3, repeats: int = 10, progress: bool | None = None) -> Any:
        """Time every candidate plan on these buffers, select the fastest, cache the choice;
        returns the table (fastest first)."""
        from .autotune import autotune

        plans = self._plans
        if plans is None or not any(c.config is not None for c in plans.all):
            # built from the plan cache (no candidates kept): ask the heuristics now
            if not self._validated:
                self.validate()
            self.build_operation_graph()
            self.create_execution_plans(DEFAULT_HEURISTICS)
        report = autotune(self, variant_pack, workspace, handle, warmup, repeats, progress)
        self._store_plan(DEFAULT_HEURISTICS, autotuned=True)
        return report

    def _cuda_graph_call(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any, cuda_graph: Any,
                         update: bool) -> None:
        from ..backend import plan as backend_plan

        cand = self._require_plans().require_selected()
        if cand.config is not None and int(behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API) not in {
                int(n) for n in cand.behavior_notes}:
            raise GraphError(f"{self._label()}: plan {cand.name} does not support the native CUDA graph API "
                             "(no SUPPORTS_CUDA_GRAPH_NATIVE_API note); select such a plan with "
                             "select_behavior_notes([cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API]) "
                             "before build_plans, or capture execute() with stream capture instead")
        runner = self._runner(cand)
        pack = runner._prepare(variant_pack, workspace).pack
        graph_ptr = _cuda_graph_pointer(cuda_graph)
        h = as_handle_ptr(handle) if handle is not None else self._handle_ptr()
        backend_plan.populate_cuda_graph(h, runner.plan, pack, graph_ptr, update, self._label())

    def populate_cuda_graph(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any,
                            cuda_graph: Any) -> None:
        """Add the selected plan's work to an empty CUDA graph (cudaGraph_t, int or object)."""
        self._cuda_graph_call(handle, variant_pack, workspace, cuda_graph, update=False)

    def update_cuda_graph(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any,
                          cuda_graph: Any) -> None:
        """Point a CUDA graph populated by this plan at new buffers."""
        self._cuda_graph_call(handle, variant_pack, workspace, cuda_graph, update=True)


def _cuda_graph_pointer(cuda_graph: Any) -> int:
    """cudaGraph_t from an int, a cuda-bindings graph (int() gives the handle), or a
    torch.cuda.CUDAGraph (raw_cuda_graph())."""
    if isinstance(cuda_graph, bool):
        raise TypeError("expected a cudaGraph_t, got a bool")
    raw = getattr(cuda_graph, "raw_cuda_graph", None)
    if callable(raw):
        return int(raw())
    try:
        return int(cuda_graph)
    except (TypeError, ValueError):
        raise TypeError(f"expected a cudaGraph_t (int, cuda.bindings graph or torch.cuda.CUDAGraph), "
                        f"got {type(cuda_graph).__name__}") from None
