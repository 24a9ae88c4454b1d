"""``cudnn.pygraph``: declare tensors and ops, then validate -> lower -> plan -> execute.

Declaring, validating and printing are pure Python (no GPU, no libcudnn needed). Building
lowers the nodes to backend descriptors on a handle, asks heuristics for engine configs,
and finalizes plans; executing runs the selected plan through a prepared `Runner`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._lib import loader
from .._lib.enums import behavior_note, build_plan_policy, heur_mode, knob_type, numerical_note, tensor_reordering
from .._lib.errors import (
    CudnnError,
    CudnnNotSupportedError,
    FeatureUnavailableError,
    cudnnGraphNotSupportedError,
    version_string,
)
from .._lib.host import HostScalar
from .._version import __version__
from ..backend import engine as eng
from ..backend.descriptor import Descriptor
from ..backend.handle import Handle, as_handle_ptr, default_handle
from .errors import GraphError, GraphStateError
from .execute import Binding, Runner
from .serialize import PlanRecord, TensorRecord, device_identity
from .jsonfmt import dumps
from .lower import Lowering
from .node import Context, Node
from .norm_ops import NormOpsMixin
from .ops import OpsMixin
from .plans import Candidate, PlanSet, candidate_from_config, notes_of
from .tensor import NOT_SET, Tensor, as_data_type
from .._lib.enums import data_type

_VERSION_INT = int("".join(f"{int(p):02d}" for p in __version__.split(".")[:3]))
DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)


class pygraph(OpsMixin, NormOpsMixin):  # noqa: N801 (documented name)
    """A cuDNN operation graph under construction, and once built, runnable."""

    def __init__(self, name: str = "", io_data_type: Any = NOT_SET, intermediate_data_type: Any = NOT_SET,
                 compute_data_type: Any = NOT_SET, handle: Handle | int | None = None,
                 sm_count: int | None = None, sm_version: int | None = None, kernel_cache: Any = None,
                 device_property: Any = None) -> None:
        self.name = str(name)
        self.context = Context(as_data_type(io_data_type, "io_data_type"),
                               as_data_type(intermediate_data_type, "intermediate_data_type"),
                               as_data_type(compute_data_type, "compute_data_type"))
        if handle is not None:
            as_handle_ptr(handle)  # type check now; a closed Handle is refused at build
        self.handle = handle
        self.sm_count = None if sm_count is None else int(sm_count)
        self.sm_version = sm_version
        self.kernel_cache = kernel_cache
        self.device_property = device_property
        self.nodes: list[Node] = []
        self._names: set[str] = set()
        self._reset()

    def _reset(self) -> None:
        """Forget everything derived from the nodes (after a change)."""
        self._validated = False
        self._op_graph: Descriptor | None = None
        self._plans: PlanSet | None = None
        self._runners: dict[int, Runner] = {}
        self._active: Runner | None = None
        self._bindings: list[Binding] = []
        self._handle_obj: Handle | None = None

    # -- tensors ----------------------------------------------------------------------------

    def tensor(self, dim: Sequence[int] | None = None, stride: Sequence[int] | None = None,
               data_type: Any = NOT_SET, is_virtual: bool = False, is_pass_by_value: bool = False,
               ragged_offset: Tensor | None = None, reordering_type: Any = tensor_reordering.NONE,
               name: str = "", uid: int = -1) -> Tensor:
        """Declare a tensor: dims and strides (elements; packed row-major when omitted)."""
        if dim is None:
            raise GraphError(f"pygraph.tensor({name!r}): dim= is required")
        t = Tensor(name, dim, stride, data_type, is_virtual, is_pass_by_value, reordering_type, uid)
        if not t.get_stride():
            from .node import row_major

            t.set_stride(row_major(t.get_dim()))
        if ragged_offset is not None:
            t.set_ragged_offset(ragged_offset)
        return t

    def tensor_like(self, input: Any, name: str = "") -> Tensor:  # noqa: A002
        """A tensor with the attributes of a cudnn.tensor, of any framework tensor (DLPack,
        __cuda_array_interface__), or of a shape-only description (``.shape`` + ``.dtype``)."""
        if isinstance(input, Tensor):
            return input.copy_attributes(name)
        from ..interop import tensors as interop

        if interop.is_tensor_like(input):
            info = interop.describe(input)
            return Tensor(name, info.shape, info.strides, info.dtype, False,
                          info.device_type in ("cpu", "cuda_host"))
        shape = getattr(input, "shape", None)
        dtype = getattr(input, "dtype", None)
        if shape is not None and dtype is not None:
            stride = getattr(input, "stride", None)
            stride = stride() if callable(stride) else getattr(input, "strides", None)
            t = Tensor(name, list(shape), None, interop.data_type_of(dtype))
            from .node import row_major

            return t.set_stride(list(stride) if stride is not None and len(stride) == len(shape)
                                else row_major(t.get_dim()))
        raise GraphError(f"tensor_like: expected a cudnn.tensor, a DLPack / __cuda_array_interface__ tensor, or "
                         f"an object with .shape and .dtype; got {type(input).__name__}")

    def _input(self, value: Any, op: str, param: str) -> Tensor:
        if isinstance(value, Tensor):
            return value
        if value is None:
            raise GraphError(f"{op}: {param} is required, got None")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            t = Tensor(f"{op}::{param}", None, None, NOT_SET, False, True)
            t._value = value
            return t
        try:
            return self.tensor_like(value)
        except GraphError:
            raise GraphError(f"{op}: {param} must be a cudnn.tensor, a framework tensor or a Python number; "
                             f"got {type(value).__name__}") from None

    def _name(self, name: str) -> str:
        name = str(name) if name else str(len(self.nodes))
        if name in self._names:
            raise GraphError(f"a node named {name!r} is already in this graph; node names must be unique")
        return name

    def _add(self, node: Node, ports: Sequence[str]) -> list[Tensor]:
        for port in ports:
            t = Tensor(f"{node.name}::{port}", is_virtual=True)
            t._producer = node
            node.outputs[port] = t
        for port, t in node.inputs.items():
            if t.get_value() is not None and not t.get_name().startswith(node.name):
                t.set_name(f"{node.name}::{port}")
        self.nodes.append(node)
        self._names.add(node.name)
        self._reset()
        return list(node.outputs.values())

    # -- validate -----------------------------------------------------------------------------

    def validate(self) -> None:
        """Infer unset dims, strides and data types; check the graph's rules. No GPU needed."""
        if not self.nodes:
            raise GraphError("the graph has no nodes")
        for node in self.nodes:
            node.infer(self.context)
        self._check_rules()
        self._validated = True

    def _check_rules(self) -> None:
        consumed: set[int] = set()
        for node in self.nodes:
            for port, t in node.inputs.items():
                consumed.add(id(t))
                if t.get_is_virtual() and t._producer is None:
                    raise GraphError(f"{node.at(port)} tensor {t.label()} is virtual but no node produces it; "
                                     "graph inputs must be non-virtual")
        for node in self.nodes:
            for port, t in node.outputs.items():
                if t.get_is_virtual() and id(t) not in consumed:
                    raise GraphError(f"{node.at(port)} tensor {t.label()} is never used and not marked as an "
                                     "output: call set_output(True) on it (or consume it)")
        by_uid: dict[int, tuple[Tensor, str]] = {}
        for node in self.nodes:
            for port, t in {**node.inputs, **node.outputs}.items():
                if not t._uid_assigned:
                    continue
                other = by_uid.setdefault(t.get_uid(), (t, node.at(port)))
                if other[0] is not t:
                    same_node_in_out = len(self.nodes) == 1 and port in node.outputs
                    if not same_node_in_out:
                        raise GraphError(f"{node.at(port)} tensor {t.label()} has uid {t.get_uid()}, already "
                                         f"used by {other[1]} tensor {other[0].label()}; uids must be unique "
                                         "(in-place use of a uid is only allowed in single-node graphs)")

    # -- build ------------------------------------------------------------------------------

    def _handle_ptr(self) -> int:
        if self.handle is not None:
            return as_handle_ptr(self.handle)
        if self._handle_obj is None or self._handle_obj.closed:
            self._handle_obj = default_handle()
        return self._handle_obj.ptr

    def build_operation_graph(self) -> None:
        """Validate, give every tensor a uid, and lower the nodes to a backend operation graph."""
        if not self._validated:
            self.validate()
        self._assign_uids()
        lowering = Lowering(self._handle_ptr(), loader.report().version)
        ops: list[Descriptor] = []
        for node in self.nodes:
            try:
                ops += node.lower(lowering)
            except CudnnNotSupportedError as exc:
                if isinstance(exc, (cudnnGraphNotSupportedError, FeatureUnavailableError)):
                    raise
                raise cudnnGraphNotSupportedError(exc.status, f"{self._label()}: {node.label()}: {exc.context}",
                                                  exc.message or f"cuDNN {version_string(lowering.version)} "
                                                  "does not support this operation") from exc
        dynamic = self.kernel_cache is not None
        self._op_graph = eng.operation_graph(self._handle_ptr(), ops, self.name or "graph", dynamic_shape=dynamic)
        self._bindings = self._make_bindings()
        self._plans = None
        self._runners = {}
        self._active = None

    def _assign_uids(self) -> None:
        used = {t.get_uid() for t in self._all_tensors() if t._uid_assigned}
        next_uid = 1
        for t in self._all_tensors():
            if t._uid_assigned:
                continue
            while next_uid in used:
                next_uid += 1
            t._uid, t._uid_assigned = next_uid, True
            used.add(next_uid)

    def _all_tensors(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for node in self.nodes:
            for t in list(node.inputs.values()) + list(node.outputs.values()):
                seen.setdefault(id(t), t)
                ragged = t.get_ragged_offset()
                if ragged is not None:
                    seen.setdefault(id(ragged), ragged)
        return list(seen.values())

    def _make_bindings(self) -> list[Binding]:
        out: dict[int, Binding] = {}
        for node in self.nodes:
            for port, t in {**node.inputs, **node.outputs}.items():
                if t.get_is_virtual() or t.get_uid() in out:
                    continue
                const = HostScalar(t.get_value(), t.get_data_type()) if t.get_value() is not None else None
                out[t.get_uid()] = Binding(t.get_uid(), t, node.label(), port, const)
        return list(out.values())

    def _require_op_graph(self) -> Descriptor:
        if self._op_graph is None:
            raise GraphStateError(f"{self._label()}: call build_operation_graph() (or build()) first")
        return self._op_graph

    def _require_plans(self) -> PlanSet:
        if self._plans is None:
            raise GraphStateError(f"{self._label()}: call create_execution_plans() (or build()) first")
        return self._plans

    def create_execution_plans(self, heur_modes: Iterable[heur_mode] | heur_mode = DEFAULT_HEURISTICS) -> None:
        """Ask the heuristics (in order) for ranked engine configs."""
        op_graph = self._require_op_graph()
        modes = [heur_modes] if isinstance(heur_modes, (heur_mode, int)) else list(heur_modes)
        if not modes:
            raise GraphError("create_execution_plans: give at least one cudnn.heur_mode")
        plans = self._plans if self._plans is not None else self._new_planset()
        for mode in modes:
            if not isinstance(mode, heur_mode):
                raise GraphError(f"create_execution_plans: expected cudnn.heur_mode values, got {mode!r}")
            try:
                configs = eng.heuristic_configs(op_graph, int(mode), self.sm_count, self._label())
            except CudnnError:
                if mode == heur_mode.FALLBACK or len(modes) > 1:
                    continue  # a mode that cannot handle this graph is not fatal when others may
                raise
            plans.add(configs, mode.name)
        self._plans = plans

    def check_support(self) -> None:
        """Raise cudnnGraphNotSupportedError unless some candidate plan can be built."""
        plans = self._require_plans()
        plans.first_supported(self._handle_ptr())

    def build_plans(self, policy: build_plan_policy = build_plan_policy.HEURISTICS_CHOICE) -> None:
        """Build the first supported plan (HEURISTICS_CHOICE) or every candidate (ALL)."""
        self._require_plans().build(self._handle_ptr(), build_plan_policy(policy))

    def build(self, heur_modes: Iterable[heur_mode] | heur_mode = DEFAULT_HEURISTICS) -> None:
        """validate, build_operation_graph, create_execution_plans, check_support, build_plans.

        The plan cache (``cudnn.plan_cache``) is consulted after validation: a graph built
        before, in this process or another, reuses its chosen plan and skips the rest."""
        self.validate()
        modes = [heur_modes] if isinstance(heur_modes, (heur_mode, int)) else list(heur_modes)
        if self._adopt_cached_plan(modes):
            return
        self.build_operation_graph()
        self.create_execution_plans(modes)
        self.check_support()
        self.build_plans()
        self._store_plan(modes, autotuned=False)

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
                import logging

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

    # -- execute ----------------------------------------------------------------------------

    def _runner(self, cand: Candidate) -> Runner:
        runner = self._runners.get(id(cand))
        if runner is None:
            plan = cand.build(self._handle_ptr(), self._label())
            h = self.handle if self.handle is not None else self._handle_obj
            device = h.device if isinstance(h, Handle) else None
            runner = Runner(self._label(), plan, int(cand.workspace or 0), self._bindings, h, device)
            runner.candidate = cand  # type: ignore[attr-defined]
            self._runners[id(cand)] = runner
        return runner

    def execute(self, variant_pack: Mapping[Any, Any], workspace: Any = None, handle: Any = None) -> None:
        """Run the selected plan: ``variant_pack`` maps tensors (or uids) to buffers."""
        active = self._active
        if active is None or active.candidate is not self._plans.selected:  # type: ignore[union-attr]
            active = self._activate()
        active.run(variant_pack, workspace, handle)

    def _activate(self) -> Runner:
        plans = self._plans
        if plans is None or plans.selected is None:
            raise GraphStateError(f"{self._label()}: execute() before build(); build the graph first")
        self._active: Runner | None = self._runner(plans.selected)
        return self._active

    def execute_plan_at_index(self, variant_pack: Mapping[Any, Any], workspace: Any, index: int,
                              handle: Any = None) -> None:
        self._runner(self._require_plans().at(index)).run(variant_pack, workspace, handle)

    # -- introspection ----------------------------------------------------------------------

    def _label(self) -> str:
        return f"graph {self.name!r}" if self.name else "graph"

    def query_tensor_attributes_of_uid(self, uid: int) -> Tensor:
        for t in self._all_tensors() + [b.tensor for b in self._bindings]:
            if t._uid_assigned and t.get_uid() == uid:
                return t
        raise GraphError(f"no tensor of this graph has uid {uid}")

    def to_json(self) -> dict[str, Any]:
        ctx = self.context
        tensors: dict[str, Any] = {}
        for node in self.nodes:
            for t in list(node.inputs.values()) + list(node.outputs.values()):
                tensors[t.get_name()] = t.to_dict()
        try:
            backend = version_string(loader.report().version)
        except Exception:
            backend = None
        return {
            "context": {
                "compute_data_type": None if ctx.compute_data_type == NOT_SET else ctx.compute_data_type.name,
                "intermediate_data_type": None if ctx.intermediate_data_type == NOT_SET
                else ctx.intermediate_data_type.name,
                "io_data_type": None if ctx.io_data_type == NOT_SET else ctx.io_data_type.name,
                "name": self.name,
                "sm_count": -1 if self.sm_count is None else self.sm_count,
            },
            "cudnn_backend_version": backend,
            "cudnn_frontend_version": _VERSION_INT,
            "json_version": "1.0",
            "nodes": [node.to_json() for node in self.nodes],
            "tensors": tensors,
        }

    def __str__(self) -> str:
        return dumps(self.to_json())

    __repr__ = __str__

    def key(self) -> int:
        """A stable 63-bit hash of what the graph computes (ops, attributes, shapes, types);
        names do not enter it, so equal graphs built by different code share plans."""
        order: dict[int, int] = {}
        parts = [repr((self.context.io_data_type, self.context.intermediate_data_type,
                       self.context.compute_data_type, self.sm_count))]
        for node in self.nodes:
            body = {k: v for k, v in node.to_json().items() if k not in ("name", "inputs", "outputs")}
            ports = []
            for port, t in {**node.inputs, **node.outputs}.items():
                idx = order.setdefault(id(t), len(order))
                d = t.to_dict()
                for volatile in ("name", "uid", "uid_assigned"):
                    d.pop(volatile)
                ports.append((port, idx, sorted(d.items())))
            parts.append(repr((sorted(body.items()), ports)))
        digest = hashlib.blake2b("\n".join(parts).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1


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
