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
from .._lib.enums import build_plan_policy, heur_mode, tensor_reordering
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
from .jsonfmt import dumps
from .lower import Lowering
from .node import Context, Node
from .norm_ops import NormOpsMixin
from .ops import OpsMixin
from .plan_api import PlanApiMixin
from .plan_store import PlanStoreMixin
from .plans import Candidate, PlanSet
from .tensor import NOT_SET, Tensor, as_data_type

_VERSION_INT = int("".join(f"{int(p):02d}" for p in __version__.split(".")[:3]))
DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)


class pygraph(OpsMixin, NormOpsMixin, PlanApiMixin, PlanStoreMixin):  # noqa: N801 (documented name)
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
        self._op_graph = self._lower()
        self._bindings = self._make_bindings()
        self._plans = None
        self._runners = {}
        self._active = None

    def _lower(self) -> Descriptor:
        """The finalized backend operation graph of the (validated) nodes."""
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
        return eng.operation_graph(self._handle_ptr(), ops, self.name or "graph", dynamic_shape=dynamic)

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
            if not (self._validated and self._plans is not None and self.nodes):
                raise GraphStateError(f"{self._label()}: call build_operation_graph() (or build()) first")
            self._op_graph = self._lower()  # a plan came from the plan cache: lower only when asked
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
        self._current_runner().run(variant_pack, workspace, handle)

    def _current_runner(self) -> Runner:
        """The Runner of the selected plan (what execute() uses)."""
        active = self._active
        if active is None or active.candidate is not self._plans.selected:  # type: ignore[union-attr]
            active = self._activate()
        return active

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


