"""``cudnn.pygraph``: declare tensors and ops, then validate -> expand -> lower -> plan -> execute.

Declaring, validating and printing are pure Python (no GPU, no libcudnn needed). The op
methods are the functions registered in `method_table` by the op modules. Everything built from
the nodes (lowered graph, plans, the selected plan, runners) lives in the graph's
`Pipeline`; the build, plan and execute methods here are its documented front. What a first
graph does not need (the op families other than `ops`, autotuning, plan reports and records,
introspection, pictures, serialization) is imported by the method that uses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._lib import loader
from .._lib.enums import (
    build_plan_policy,
    heur_mode,
    tensor_reordering,
)
from .._lib.status import FeatureUnavailableError, cudnnGraphNotSupportedError
from ..backend.deviceprop import as_device_properties
from ..backend.handle import Handle, as_handle_ptr, prefetch_default_handle
from .build.pipeline import (
    DEFAULT_HEURISTICS,
    OVERRIDE_SHAPE_SINCE,
    Pipeline,
    all_tensors,
    as_heur_modes,
)
from .facade.graph_text import GraphText
from .facade.plan_queries import PlanQueries, plan_index
from .methods import (
    core_methods,  # noqa: F401 - registers the core op methods in method_table (bound below)
    method_table,
)
from .model import keywords, tensor_names
from .model.arguments import (
    as_bool,
    as_enum,
    as_enum_list,
    as_int,
    as_int_list,
    check_handle_type,
    check_variant_pack,
    optional,
)
from .model.graph_errors import GraphError, GraphNotImplementedError, GraphStateError
from .model.graph_view import install_graph_class
from .model.json_layout import compact
from .model.node import Context, Node, row_major
from .model.node_types import as_retention
from .model.shared_tensors import SharedTensors
from .model.tensor import NOT_SET, Tensor, as_data_type, constant, filling
from .records import plan_reuse

if TYPE_CHECKING:
    from .build.autotune import TuneReport

_graph_log = logging.getLogger("cudnn.graph")


if TYPE_CHECKING:
    # The op methods (conv_fprop, matmul, sdpa, ...) are bound by method_table.bind below, at import (the
    # rarer families on first use); a type checker sees them declared with the same signatures.
    from .methods.declared_core import CoreOpMethods
    from .methods.declared_families import FamilyOpMethods

    class _OpMethods(CoreOpMethods, FamilyOpMethods):
        ...
else:
    _OpMethods = object


class pygraph(PlanQueries, GraphText, _OpMethods):  # the documented name
    """A cuDNN operation graph under construction, and once built, runnable."""

    def __init__(self, name: str = "test_graph", io_data_type: Any = NOT_SET, intermediate_data_type: Any = NOT_SET,
                 compute_data_type: Any = NOT_SET, handle: Handle | int | None = None,
                 sm_count: int | None = None, sm_version: int | None = None, kernel_cache: Any = None,
                 device_property: Any = None, is_dynamic_shape_enabled: bool = False,
                 is_override_shape_enabled: bool = False, cuda_graph_retention: Any = None, *,
                 is_cuda_graph_replay_expected: bool = False) -> None:
        if not isinstance(name, str):
            raise TypeError(f"pygraph: name: expected a str, got {name!r}")
        is_dynamic_shape_enabled = as_bool(is_dynamic_shape_enabled, "pygraph", "is_dynamic_shape_enabled")
        is_override_shape_enabled = as_bool(is_override_shape_enabled, "pygraph", "is_override_shape_enabled")
        sm_count = optional(as_int, sm_count, "pygraph", "sm_count")
        sm_version = optional(as_int, sm_version, "pygraph", "sm_version")
        self.name = name
        # 1.32: how CUDA graphs recorded from this graph keep its plans alive (get_cuda_graph_retention),
        # and the caller's statement that execute is captured into a CUDA graph and replayed (which
        # changes no numerics and no support; cudnn-py ranks plans the same either way)
        self.cuda_graph_retention = as_retention(cuda_graph_retention)
        self.is_cuda_graph_replay_expected = as_bool(is_cuda_graph_replay_expected, "pygraph",
                                                     "is_cuda_graph_replay_expected")
        # Unset intermediate / compute types stay unset: nodes then infer them (FLOAT for
        # floating inputs), which accepts every graph that 1.32's "copy io_data_type" accepts.
        self._context = Context(as_data_type(io_data_type, "io_data_type"),
                               as_data_type(intermediate_data_type, "intermediate_data_type"),
                               as_data_type(compute_data_type, "compute_data_type"))
        if handle is not None:
            as_handle_ptr(handle)  # type check now; a closed Handle is refused at build
        elif device_property is None:
            prefetch_default_handle(last_try=True)  # the build takes this thread's default handle: make it now
        self.handle = handle
        self.sm_count = sm_count
        self.kernel_cache = kernel_cache
        # heuristics, engines and plans are made for these properties, with no handle unless one
        # is given (an ahead-of-time build); sm_version defaults to theirs
        self.device_property = as_device_properties(device_property, "pygraph: device_property")
        if sm_version is None and self.device_property is not None:
            sm_version = self.device_property.sm_version
        self.sm_version = sm_version
        # the operation graph's IS_DYNAMIC_SHAPE_ENABLED (also set with a kernel cache) and
        # IS_OVERRIDE_SHAPE_ENABLED (cuDNN >= 9.21, checked when the graph is lowered)
        self.is_dynamic_shape_enabled = is_dynamic_shape_enabled
        self.is_override_shape_enabled = is_override_shape_enabled
        self._nodes: list[Node] = []
        self.shared = SharedTensors()  # what it fills in of tensors other graphs use too is its own
        self._names: set[str] = set()
        self._generated: set[str] = set()  # names node_name made for unnamed ops
        self._validated = False
        self._pipeline = Pipeline(self)
        self._pinned: Any = None  # the candidate select_plan() pinned (build_plans builds it or raises)

    @property
    def nodes(self) -> list[Node]:
        """The graph's nodes in the order they were added: the graph's own list (nodes that
        look at the others hold it), which only op calls change."""
        return self._nodes

    @property
    def context(self) -> Context:
        """The graph's default data types (``cudnn.GraphContext``: io, intermediate, compute)."""
        return self._context

    def _changed(self) -> None:
        """The nodes changed: what was validated and built from them is gone."""
        self._validated = False
        self._pipeline = Pipeline(self)

    # -- tensors ----------------------------------------------------------------------------

    def tensor(self, dim: Sequence[int], stride: Sequence[int] | None = None,
               data_type: Any = NOT_SET, is_virtual: bool = False, is_pass_by_value: bool = False,
               ragged_offset: Tensor | None = None, reordering_type: Any = tensor_reordering.NONE,
               name: str = "", uid: int = -1, ragged_offset_multiplier: int = 1,
               alignment_value: int = 1) -> Tensor:
        """Declare a tensor: dims and strides (elements; packed row-major when omitted).

        ``alignment_value`` (1.32): a promise that every value the tensor holds is a multiple of
        it (1, the default: none); a promise about the contents, not the buffer's address
        (`Tensor.set_alignment`), that no cuDNN operation reads."""
        if dim is None:
            raise GraphError(f"pygraph.tensor({name!r}): dim= is required")
        if not isinstance(name, str):
            raise TypeError(f"pygraph.tensor: name: expected a str, got {name!r}")
        at = f"pygraph.tensor({name!r})"
        is_virtual = as_bool(is_virtual, at, "is_virtual")
        is_pass_by_value = as_bool(is_pass_by_value, at, "is_pass_by_value")
        if reordering_type is None:  # 1.32's default
            reordering_type = tensor_reordering.NONE
        elif not isinstance(reordering_type, tensor_reordering):
            raise TypeError(f"pygraph.tensor({name!r}): reordering_type: expected a cudnn.tensor_reordering, "
                            f"got {reordering_type!r}")
        given_uid = optional(as_int, uid, at, "uid")  # None: 1.32's default
        dim, stride = as_int_list(dim, at, "dim"), optional(as_int_list, stride, at, "stride")
        t = Tensor(name, dim, stride, as_data_type(data_type, f"{at}: data_type"), is_virtual, is_pass_by_value,
                   reordering_type, -1 if given_uid is None else given_uid)
        if not t.get_stride():
            t.set_stride(row_major(t.get_dim()))
        if ragged_offset is not None:
            t.set_ragged_offset(ragged_offset)
        if as_int(ragged_offset_multiplier, at, "ragged_offset_multiplier") != 1:
            t.set_ragged_offset_multiplier(ragged_offset_multiplier)
        if as_int(alignment_value, at, "alignment_value") != 1:
            t.set_alignment_value(alignment_value)
        return t

    def tensor_like(self, input: Any = None, name: str = "", is_virtual: bool = False, *,
                    template: Any = None) -> Tensor:
        """A tensor with the attributes of a cudnn.tensor, of any framework tensor (DLPack,
        __cuda_array_interface__), or of a shape-only description (``.shape`` + ``.dtype``).
        ``template=`` is 1.32's name for ``input``."""
        if template is not None:
            if input is not None:
                raise TypeError("tensor_like: give the template tensor once, as input or template=, not both")
            input = template  # noqa: A001
        elif input is None:
            raise TypeError("tensor_like: missing the template tensor (input, or template=)")
        if not isinstance(name, str):
            raise TypeError(f"tensor_like: name: expected a str, got {name!r}")
        t = self._tensor_like(input, name)
        if t is None:
            raise TypeError(f"tensor_like: expected a cudnn.tensor, a DLPack / __cuda_array_interface__ tensor, "
                            f"or an object with .shape and .dtype; got {type(input).__name__}")
        if as_bool(is_virtual, "tensor_like", "is_virtual"):
            t.set_is_virtual(True)
        return t

    def _tensor_like(self, input: Any, name: str) -> Tensor | None:
        """A tensor like ``input``; None when ``input`` is nothing tensor_like takes."""
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
            return t.set_stride(list(stride) if stride is not None and len(stride) == len(shape)
                                else row_major(t.get_dim()))
        return None

    # -- the op-builder protocol: what op methods (method_table) call -------------------------------

    def input_tensor(self, value: Any, op: str, param: str) -> Tensor:
        """An op's input: a cudnn.tensor, a framework tensor, or a Python number (by value)."""
        if isinstance(value, Tensor):
            return value
        if value is None:
            raise GraphError(f"{op}: {param} is required, got None")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return constant("", value)  # unnamed: the graph names it 'node::PORT' when the node is added
        t = self._tensor_like(value, "")
        if t is None:
            raise TypeError(f"{op}: {param} must be a cudnn.tensor, a framework tensor or a Python number; "
                            f"got {type(value).__name__}")
        return t

    def node_name(self, wanted: str) -> str:
        """A node name: the one wanted (unique) or, when empty, the node's index, or the first
        number after it that no node has (a name the user gave is never taken again)."""
        if wanted:
            name = str(wanted)
            if name in self._names:
                how = " (the name an unnamed op was given)" if name in self._generated else ""
                raise GraphError(f"a node named {name!r}{how} is already in this graph; node names must be unique")
            return name
        index = len(self._nodes)
        while str(index) in self._names:
            index += 1
        self._generated.add(str(index))
        return str(index)

    def add_node(self, node: Node, ports: Sequence[str]) -> list[Tensor]:
        """Add ``node`` with fresh virtual outputs named ``node::PORT``; returns them in order.
        Another graph's outputs are refused; unnamed inputs and constants get names (this
        graph's: a tensor another graph uses too is this graph's copy of it, see `shared`)."""
        self.shared.take(node)
        with filling(list(node.inputs.values())):
            tensor_names.adopt(self._nodes, node)
        for port in ports:
            t = Tensor(f"{node.name}::{port}", is_virtual=True)
            t.producer = node
            self.shared.claim(t)
            node.outputs[port] = t
        self._nodes.append(node)
        self._names.add(node.name)
        self._changed()
        return list(node.outputs.values())

    # -- validate -----------------------------------------------------------------------------

    def validate(self) -> None:
        """Infer unset dims, strides and data types; check the graph's rules. No GPU needed."""
        if not self._nodes:
            raise GraphError("the graph has no nodes")
        self.shared.prepare(self._nodes)  # what an earlier validate or another graph filled in is gone
        with filling(all_tensors(self._nodes)):
            tensor_names.check_writers(self._nodes)  # before inference, which would write the shared tensor twice
            for node in self._nodes:
                node.infer(self._context)
            self._check_rules()
        self._validated = True
        if _graph_log.isEnabledFor(logging.DEBUG):  # one line of JSON (also CUDNN_FRONTEND_LOG_INFO's)
            _graph_log.debug("%s", compact(self.to_json()), extra={"graph_json": True})

    def _check_rules(self) -> None:
        tensor_names.check_names(self._nodes)
        consumed: set[int] = set()
        for node in self._nodes:
            for port, t in node.inputs.items():
                consumed.add(id(t))
                if t.get_is_virtual() and t.producer is None:
                    raise GraphError(f"{node.at(port)} tensor {t.label()} is virtual but no node produces it; "
                                     "graph inputs must be non-virtual")
        for node in self._nodes:
            node.unused = frozenset(port for port, t in node.outputs.items()
                                    if port in node.optional_outputs and id(t) not in consumed)
            for port, t in node.outputs.items():
                if not t.get_is_virtual() or id(t) in consumed or port in node.unused:
                    continue
                raise GraphError(f"{node.at(port)} tensor {t.label()} is never used and not marked as an "
                                 "output: call set_output(True) on it (or consume it)")
        by_uid: dict[int, tuple[Tensor, str]] = {}
        for node in self._nodes:
            for port, t in {**node.inputs, **node.outputs}.items():
                if not t.has_uid() or t.is_filled("uid"):  # an assigned uid is assigned afresh at build
                    continue
                other = by_uid.setdefault(t.get_uid(), (t, node.at(port)))
                if other[0] is not t:
                    same_node_in_out = len(self._nodes) == 1 and port in node.outputs
                    if not same_node_in_out:
                        raise GraphError(f"{node.at(port)} tensor {t.label()} has uid {t.get_uid()}, already "
                                         f"used by {other[1]} tensor {other[0].label()}; uids must be unique "
                                         "(in-place use of a uid is only allowed in single-node graphs)")

    def _require_validated(self) -> None:
        if not self._validated:
            self.validate()

    # -- build ------------------------------------------------------------------------------

    def build_operation_graph(self) -> None:
        """Validate, give every tensor a uid, and lower the nodes to a backend operation graph."""
        self._require_validated()
        if self._pipeline.has_op_graph() or self._pipeline.has_plans():
            self._pipeline = Pipeline(self)
        self._pipeline.op_graph()

    def _op_graph(self) -> Any:
        """The operation graph; after a plan-cache hit it is lowered only when asked for."""
        if not self._pipeline.has_op_graph() and not self._pipeline.has_plans():
            raise GraphStateError(f"{self.label()}: call build_operation_graph() (or build()) first")
        return self._pipeline.op_graph()

    def create_execution_plans(self, heuristics: Iterable[heur_mode] | None = None, *,
                               heur_modes: Iterable[heur_mode] | None = None) -> None:
        """Ask the heuristics (in order) for ranked engine configs: ``heuristics`` (1.32's name;
        ``heur_modes=`` is the earlier one), (A, FALLBACK) when neither is given."""
        modes = _heuristics_arg("create_execution_plans", heuristics, heur_modes)
        self._op_graph()
        self._pipeline.create_plans(as_heur_modes(modes))

    def check_support(self) -> None:
        """Raise cudnnGraphNotSupportedError unless some candidate plan can be built."""
        self._pipeline.plans().first_supported(self._pipeline.build_handle_ptr())

    def build_plans(self, policy: build_plan_policy = build_plan_policy.HEURISTICS_CHOICE, *,
                    ctx: Any = None) -> None:
        """Build the first supported plan (HEURISTICS_CHOICE) or every candidate (ALL). A plan
        pinned by ``select_plan`` is built and stays selected (its failure raises: no other plan
        is run in its place). ``ctx`` (1.32) is accepted for the official's Python engines; the
        handle a plan is built with is the graph's."""
        policy = as_enum(policy, build_plan_policy, "build_plans", "policy")
        pinned = self._pinned_candidate()
        if pinned is None:
            self._pipeline.build_plans(policy)
            if policy == build_plan_policy.HEURISTICS_CHOICE:
                self._pipeline.start_trial(_remember_trial_winner)
            return
        if policy == build_plan_policy.ALL:
            try:
                self._pipeline.build_plans(policy)
            except cudnnGraphNotSupportedError:
                pass  # the pinned plan's own failure is the one to report
        self._pipeline.build_candidate(pinned)
        self._pipeline.select(pinned)

    def _pinned_candidate(self) -> Any:
        """The candidate select_plan pinned, while it is one of this pipeline's candidates."""
        pinned = self._pinned
        if pinned is None or not self._pipeline.has_plans():
            return None
        return pinned if any(c is pinned for c in self._pipeline.plans().candidates) else None

    def build(self, heuristics: Iterable[heur_mode] | None = None, ctx: Any = None, *,
              heur_modes: Iterable[heur_mode] | None = None) -> None:
        """validate, build_operation_graph, create_execution_plans(``heuristics``: 1.32's name,
        ``heur_modes=`` the earlier one; (A, FALLBACK) when neither is given), check_support,
        build_plans. As in 1.32, ``build()`` with no arguments builds a plan too.

        The plan cache (``cudnn.plan_cache``) is consulted after validation: a graph built before,
        in this process or another, reuses its chosen plan and skips the rest. A plan pinned by
        ``select_plan`` keeps the plans already made: it is built, and no heuristics are asked
        again. ``ctx``: as in `build_plans`."""
        modes = _heuristics_arg("build", heuristics, heur_modes)  # before anything needs a GPU
        started = time.perf_counter()
        self._build(modes)
        if _graph_log.isEnabledFor(logging.INFO):
            _graph_log.info("%s", self._built_message(time.perf_counter() - started))

    def _build(self, modes: Iterable[heur_mode] | None) -> None:
        if self._pinned_candidate() is not None:  # 1.32 never re-plans under a pin
            self.build_plans()
            return
        self.validate()
        modes = as_heur_modes(modes)
        self._pipeline = Pipeline(self)
        cached = plan_reuse.adopt_cached(self._pipeline, modes)
        if cached is not None:
            self._pipeline = cached
            if cached.plans().selected.source != plan_reuse.TUNED_SOURCE:  # type: ignore[union-attr]
                cached.start_trial(_remember_trial_winner)  # a heuristic record: no choice made yet
            return
        self.build_operation_graph()
        self.create_execution_plans(modes)
        self.check_support()
        self.build_plans()
        plan_reuse.store(self._pipeline, modes, autotuned=False)

    def _built_message(self, seconds: float) -> str:
        """What a build did, in a sentence: the graph, its nodes, the plan chosen and from where."""
        nodes = len(self._nodes)
        said = (f"{self.label()} built in {seconds * 1e3:.1f} ms: {nodes} node{'s' * (nodes != 1)} "
                f"({', '.join(node.op for node in self._nodes)})")
        chosen = self._pipeline.plans().selected if self._pipeline.has_plans() else None
        if chosen is None:
            return said
        source = f"heur_mode.{chosen.source}" if chosen.source in heur_mode.__members__ else chosen.source
        return f"{said}, plan {chosen.name} from {source or 'a manual choice'}"

    # -- execute ----------------------------------------------------------------------------

    def execute(self, tensor_to_device_buffer: Any = None, workspace: Any = None, handle: Any = None,
                override_uids: Sequence[int] | None = None, override_shapes: Sequence[Sequence[int]] | None = None,
                override_strides: Sequence[Sequence[int]] | None = None, *, tensor_dict: Any = None,
                tensor_uids: Sequence[int] | None = None) -> None:
        """Run the selected plan: ``tensor_to_device_buffer`` (1.32: ``tensor_dict``) maps tensors
        (or uids) to buffers; with ``tensor_uids`` it is a sequence of buffers in that uid order.
        ``override_*`` may only restate the declared shapes (see ``_check_overrides``)."""
        if (tensor_dict is not None or tensor_uids is not None or override_uids is not None
                or override_shapes is not None or override_strides is not None):
            tensor_to_device_buffer = self._call_pack("execute", tensor_to_device_buffer, tensor_dict, tensor_uids)
            self._check_overrides("execute", override_uids, override_shapes, override_strides)
        try:
            runner = self._pipeline.current_runner()
        except GraphStateError:
            _check_run_arguments("execute", tensor_to_device_buffer, handle)  # a mistake first, built or not
            raise GraphStateError(self._no_plan_message("execute")) from None
        try:  # costs nothing unless raised (Python >= 3.11)
            runner.run(tensor_to_device_buffer, workspace, handle)
        except AttributeError:  # a variant pack that is no dict
            _check_run_arguments("execute", tensor_to_device_buffer, handle)
            raise

    def execute_plan_at_index(self, tensor_to_device_buffer: Any = None, workspace: Any = None, index: int = 0,
                              handle: Any = None, override_uids: Sequence[int] | None = None,
                              override_shapes: Sequence[Sequence[int]] | None = None,
                              override_strides: Sequence[Sequence[int]] | None = None, *, tensor_dict: Any = None,
                              tensor_uids: Sequence[int] | None = None) -> None:
        """Run candidate plan ``index`` (built on first use); arguments as for ``execute``."""
        index = plan_index("execute_plan_at_index", index)
        tensor_to_device_buffer = self._call_pack("execute_plan_at_index", tensor_to_device_buffer, tensor_dict,
                                                  tensor_uids)
        self._check_overrides("execute_plan_at_index", override_uids, override_shapes, override_strides)
        p = self._pipeline
        if not p.has_plans():
            _check_run_arguments("execute_plan_at_index", tensor_to_device_buffer, handle)
            raise GraphStateError(self._no_plan_message("execute_plan_at_index"))
        runner = p.runner(p.plans().at(index))
        try:
            runner.run(tensor_to_device_buffer, workspace, handle)
        except AttributeError:
            _check_run_arguments("execute_plan_at_index", tensor_to_device_buffer, handle)
            raise

    def _call_pack(self, op: str, pack: Any, tensor_dict: Any, tensor_uids: Sequence[int] | None) -> Any:
        """The variant pack of an execute call: the first argument under either of its names,
        zipped with ``tensor_uids`` when those are given."""
        if tensor_dict is not None:
            if pack is not None:
                raise TypeError(f"{op}: give the buffers once, as the first argument or tensor_dict=, not both")
            pack = tensor_dict
        if pack is None:
            raise TypeError(f"{op}: missing the buffers (tensor_to_device_buffer, or tensor_dict=)")
        if tensor_uids is None:
            return pack
        if isinstance(pack, Mapping) or not isinstance(pack, (list, tuple)):
            raise TypeError(f"{op}: with tensor_uids=, the buffers must be a list or tuple in that order; "
                            f"got {type(pack).__name__}")
        uids = list(tensor_uids)
        if len(uids) != len(pack):
            raise ValueError(f"{op}: {len(uids)} tensor_uids for {len(pack)} buffers; they pair up in order")
        for uid in uids:
            if isinstance(uid, bool) or not isinstance(uid, int):
                raise TypeError(f"{op}: tensor_uids: expected ints, got {uid!r}")
        if len(set(uids)) != len(uids):
            raise ValueError(f"{op}: tensor_uids {uids} name a uid twice")
        return dict(zip(uids, pack))

    def _check_overrides(self, op: str, override_uids: Sequence[int] | None,
                        override_shapes: Sequence[Sequence[int]] | None,
                        override_strides: Sequence[Sequence[int]] | None) -> None:
        """Execute-time shape overrides. cudnn-py does not pass overrides to cuDNN yet, so it
        accepts only overrides that restate a tensor's declared dims and strides (what v1.23's
        execute, which drops them, computes correctly) and refuses any other: ignoring those
        would compute on the wrong shapes."""
        given = [x is not None for x in (override_uids, override_shapes, override_strides)]
        if not any(given):
            return
        if not all(given):
            raise TypeError(f"{op}: override_uids, override_shapes and override_strides go together")
        uids, shapes, strides = list(override_uids), list(override_shapes), list(override_strides)  # type: ignore[arg-type]
        if not len(uids) == len(shapes) == len(strides):
            raise ValueError(f"{op}: {len(uids)} override_uids, {len(shapes)} override_shapes and "
                             f"{len(strides)} override_strides; they pair up in order")
        for uid, shape, stride in zip(uids, shapes, strides):
            t = self.query_tensor_attributes_of_uid(uid)
            if list(shape) != t.get_dim() or list(stride) != t.get_stride():
                version = loader.report().version
                if version < OVERRIDE_SHAPE_SINCE:
                    raise FeatureUnavailableError(
                        f"{op}: override of tensor {t.label()} (uid {uid}) to dims {list(shape)}: execute-time shape "
                        "overrides (is_override_shape_enabled)", OVERRIDE_SHAPE_SINCE, version)
                raise GraphNotImplementedError(f"{op}: override of tensor {t.label()} (uid {uid}) to dims "
                                               f"{list(shape)} strides {list(stride)}, declared "
                                               f"{t.get_dim()} / {t.get_stride()}: cudnn-py does not pass "
                                               "execute-time shape overrides to cuDNN yet; build a graph "
                                               "with these shapes instead")

    def _no_plan_message(self, op: str) -> str:
        return (f"{self.label()}: {op}() before build: no plan is built yet. Call build() (or "
                "build_operation_graph(), create_execution_plans([...]), check_support() and build_plans()) first")

    def runner(self, sized: bool = False) -> Any:
        """The Runner of the selected plan: what ``execute`` calls (for wrappers that keep it).
        ``sized``: the caller passes a workspace of the Runner's own ``workspace_size``, not
        ``get_workspace_size()``'s, so a lowering trial may route it to the other lowering."""
        return self._pipeline.current_runner(sized)

    def lowering_trial_pending(self) -> bool:
        """Whether a lowering trial (`cudnn.set_lowering_trials`) may still change which Runner
        `runner` returns: callers that keep a Runner ask for it again until this is False."""
        return self._pipeline.trial_pending()

    # -- autotuning, serialization, CUDA graphs ------------------------------------------------

    def autotune(self, variant_pack: Mapping[Any, Any], workspace: Any = None, handle: Any = None,
                 warmup: int = 3, repeats: int = 10, progress: bool | None = None,
                 max_plans: int | None = None) -> TuneReport:
        """Time every candidate plan on these buffers, select the fastest, cache the choice;
        returns the table (fastest first), which ``describe_plans()`` also shows.

        ``progress``: None (the default) shows progress only once tuning has run for a second,
        True always, False never; it is tqdm's bar when tqdm is installed, else a line on stderr.
        ``max_plans``: build and time only the heuristics' first ``max_plans`` candidates of
        each lowering (a runtime-compiled engine's plan takes a compilation to build)."""
        from .build import plan_report
        from .build.autotune import autotune, check_arguments

        check_arguments(variant_pack, warmup, repeats, max_plans)  # before anything needs a GPU
        check_handle_type(handle, "autotune")
        if not self._pipeline.has_plans() or not any(c.config is not None for c in self._pipeline.plans().all):
            # built from the plan cache (no candidates kept): ask the heuristics now
            self.build_operation_graph()
            self.create_execution_plans(DEFAULT_HEURISTICS)
        p = self._pipeline  # read after the heuristics: build_operation_graph may start a new pipeline
        p.end_trial()  # autotuning times every lowering itself
        winner, report = autotune(p, variant_pack, workspace, handle, warmup, repeats, progress,
                                  alternatives=p.alternatives(), max_plans=max_plans)
        self._pipeline = winner
        plan_report.remember(winner, report)
        plan_reuse.store(winner, DEFAULT_HEURISTICS, autotuned=True)
        return report

    def serialize(self, *, as_bytes: bool = False, include_kernels: bool = True) -> list[int] | bytes:
        """The selected plan and what binds it, for ``deserialize`` in any process: a list of
        byte values as the official API returns, or ``bytes`` with ``as_bytes=True``.

        The record holds cuDNN's own JSON of the plan; ``include_kernels=False`` marks it as one
        that ``deserialize(..., enforce_precompiled=True)`` refuses (cuDNN re-creates kernels of
        runtime-compiled engines when the plan is restored, whatever the flag)."""
        from .records import serialize_args

        return serialize_args.serialize(self._pipeline, as_bytes, include_kernels)

    def deserialize(self, handle_: Any = None, pyobj: Any = None, enforce_precompiled: bool = False) -> None:
        """``deserialize(handle, data)`` or ``deserialize(data)``: restore a plan from
        ``serialize()`` (bytes or a list of ints), or a graph from its printed JSON (a ``str``,
        ``str(graph)``: nodes and tensors come back, to build as any graph).

        A plan is refused (SerializationError) when made by another cuDNN version or on another
        GPU, and with ``enforce_precompiled=True`` when its engine compiles kernels at run time
        or it was serialized with ``include_kernels=False``."""
        from .records import serialize_args

        if pyobj is None or (isinstance(pyobj, bool) and not isinstance(handle_, (bool, int))):
            if pyobj is not None:  # deserialize(data, True): the one-argument form with the flag
                enforce_precompiled = pyobj
            handle_, pyobj = None, handle_
        if pyobj is None:
            raise TypeError("deserialize: missing the data (deserialize(data) or deserialize(handle, data))")
        enforce_precompiled = as_bool(enforce_precompiled, "deserialize", "enforce_precompiled")
        if isinstance(pyobj, str) and serialize_args.is_graph_json(pyobj):
            if handle_ is not None:
                as_handle_ptr(handle_)
                self.handle = handle_
            method_table.load_all()  # the JSON may hold a node of any op family (rebuilt by its module)
            serialize_args.graph_from_json(self, pyobj)
            return
        if handle_ is not None:
            as_handle_ptr(handle_)
            self.handle = handle_
        if self._nodes:
            self._require_validated()
        self._pipeline = serialize_args.deserialize(Pipeline(self), pyobj, enforce_precompiled)

    def populate_cuda_graph(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any,
                            cuda_graph: Any) -> None:
        """Add the selected plan's work to an empty CUDA graph (cudaGraph_t, int or object)."""
        plan_reuse.cuda_graph_call(self._pipeline, handle, variant_pack, workspace, cuda_graph, update=False)

    def update_cuda_graph(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any,
                          cuda_graph: Any) -> None:
        """Point a CUDA graph populated by this plan at new buffers."""
        plan_reuse.cuda_graph_call(self._pipeline, handle, variant_pack, workspace, cuda_graph, update=True)


def _remember_trial_winner(winner: Pipeline) -> None:
    """A lowering trial's choice, kept by the plan cache as an autotuned one."""
    plan_reuse.store(winner, DEFAULT_HEURISTICS, autotuned=True)


def _heuristics_arg(op: str, heuristics: Any, heur_modes: Any) -> list[heur_mode]:
    """The heuristic modes given as ``heuristics`` (1.32) or ``heur_modes=`` (earlier), not both;
    (A, FALLBACK) when neither. A list of cudnn.heur_mode, checked before anything needs a GPU."""
    if heur_modes is not None:
        if heuristics is not None:
            raise TypeError(f"{op}: give the heuristic modes once, as heuristics= (the 1.32 name) or heur_modes=, "
                            "not both")
        heuristics = heur_modes
    if heuristics is None:
        return list(DEFAULT_HEURISTICS)
    modes = as_enum_list(heuristics, heur_mode, op, "heuristics")
    if not modes:
        raise GraphError(f"{op}: give at least one cudnn.heur_mode")
    return modes


def _check_run_arguments(op: str, variant_pack: Any, handle: Any) -> None:
    """An execute's variant pack and handle type, checked where a call failed or found no plan
    (the hot path checks nothing); a list of buffers goes with tensor_uids= (`_call_pack`)."""
    check_variant_pack(variant_pack, op, "tensor_to_device_buffer", "; a list of buffers goes with tensor_uids=[...]")
    check_handle_type(handle, op)


# execute, the hot path, keeps Python's own error for a keyword it does not take (see `keywords`)
keywords.name_unknown_keywords(pygraph, "pygraph", skip=("execute",))
install_graph_class(pygraph)  # the class of the child graphs lower stages make (an SDPA score_mod's)
method_table.bind(pygraph)  # the op methods of ops.py now; the other families' when first read (method_table.FAMILIES)
