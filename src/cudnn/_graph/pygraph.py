"""``cudnn.pygraph``: declare tensors and ops, then validate -> expand -> lower -> plan -> execute.

Declaring, validating and printing are pure Python (no GPU, no libcudnn needed). The op
methods are the functions registered in `oplib` by the op modules. Everything built from
the nodes (lowered graph, plans, the selected plan, runners) lives in the graph's
`Pipeline`; the build, plan and execute methods here are its documented front. What a first
graph does not need (the op families other than `ops`, autotuning, plan reports and records,
introspection, pictures, serialization) is imported by the method that uses it.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._lib import loader
from .._lib.enums import (
    behavior_note,
    build_plan_policy,
    heur_mode,
    knob_type,
    numerical_note,
    tensor_reordering,
)
from .._lib.errors import FeatureUnavailableError, cudnnGraphNotSupportedError, version_string
from .._version import __version__
from ..backend import engine as eng
from ..backend.deviceprop import as_device_properties
from ..backend.handle import Handle, as_handle_ptr, prefetch_default_handle
from .build.pipeline import (
    DEFAULT_HEURISTICS,
    OVERRIDE_SHAPE_SINCE,
    Pipeline,
    all_tensors,
    as_heur_modes,
    structure_key,
)
from .methods import core_methods as ops
from .methods import method_table as oplib
from .model import keywords
from .model import tensor_names as hygiene
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
from .model.json_layout import compact, dumps
from .model.node import Context, Node, row_major
from .model.node_types import as_retention, cuda_graph_retention, effective_retention
from .model.shared_tensors import SharedTensors
from .model.tensor import NOT_SET, Tensor, as_data_type, constant, filling
from .plans.candidates import candidate_from_config, notes_of
from .records import plan_reuse as plan_store  # noqa: F401 - ops registers its methods in oplib

if TYPE_CHECKING:
    from .build.autotune import TuneReport
    from .build.plan_report import PlanReport
    from .plans.plan_configs import PlanEntry

_graph_log = logging.getLogger("cudnn.graph")

_VERSION_INT = int("".join(f"{int(p):02d}" for p in __version__.split(".")[:3]))


if TYPE_CHECKING:
    # The op methods (conv_fprop, matmul, sdpa, ...) are bound by oplib.bind below, at import (the
    # rarer families on first use); a type checker sees them declared with the same signatures.
    from .methods.declared_core import CoreOpMethods
    from .methods.declared_families import FamilyOpMethods

    class _OpMethods(CoreOpMethods, FamilyOpMethods):
        ...
else:
    _OpMethods = object


class pygraph(_OpMethods):  # the documented name
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

    # -- the op-builder protocol: what op methods (oplib) call -------------------------------

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
            hygiene.adopt(self._nodes, node)
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
            hygiene.check_writers(self._nodes)  # before inference, which would write the shared tensor twice
            for node in self._nodes:
                node.infer(self._context)
            self._check_rules()
        self._validated = True
        if _graph_log.isEnabledFor(logging.DEBUG):  # one line of JSON (also CUDNN_FRONTEND_LOG_INFO's)
            _graph_log.debug("%s", compact(self.to_json()), extra={"graph_json": True})

    def _check_rules(self) -> None:
        hygiene.check_names(self._nodes)
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
        cached = plan_store.adopt_cached(self._pipeline, modes)
        if cached is not None:
            self._pipeline = cached
            return
        self.build_operation_graph()
        self.create_execution_plans(modes)
        self.check_support()
        self.build_plans()
        plan_store.store(self._pipeline, modes, autotuned=False)

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
        index = _plan_index("execute_plan_at_index", index)
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

    def runner(self) -> Any:
        """The Runner of the selected plan: what ``execute`` calls (for wrappers that keep it)."""
        return self._pipeline.current_runner()

    # -- plans: queries and filters ----------------------------------------------------------

    def get_engine_count(self) -> int:
        """How many engines cuDNN has for this operation graph (engine ids 0..count-1)."""
        return eng.engine_count(self._op_graph())

    def get_execution_plan_count(self) -> int:
        """How many candidate plans the heuristics offered and the filters kept (0 before create_execution_plans)."""
        return len(self._pipeline.plans().candidates) if self._pipeline.has_plans() else 0

    def build_plan_at_index(self, index: int) -> pygraph:
        """Finalize candidate plan ``index`` (compiling its kernels if its engine does so) and, as
        in 1.32, select it: get_workspace_size() and execute() then use it. Errors are raised."""
        index = _plan_index("build_plan_at_index", index)
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

    def select_plan(self, index: int) -> pygraph:
        """Pin candidate plan ``index`` (of ``plans``): execute runs it (built on first use), and
        build_plans() / build() build it rather than the first that builds, raising if it fails."""
        index = _plan_index("select_plan", index)
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
        from .plans import plan_configs as plan_entries

        return plan_entries.entries(self._pipeline.plans().candidates)

    @property
    def selected_engine(self) -> None:
        """1.32: the official's Python engine serving the selected plan, None where the cuDNN
        backend serves it. Every plan of cudnn-py is a cuDNN backend plan: always None."""
        return None

    def backend_plan_entries(self) -> list[PlanEntry]:
        """The cuDNN backend's ranked plans (``plans``: in cudnn-py every plan is the backend's);
        [] when the heuristics offered none for this graph."""
        from .plans import plan_configs as plan_entries

        return plan_entries.entries(self._plans_for("backend_plan_entries").candidates)

    def get_engine_and_knobs_at_index(self, index: int) -> tuple[int, dict[knob_type, int]]:
        """Candidate plan ``index``'s (engine global index, {cudnn.knob_type: value}): what
        ``create_execution_plan(engine_id, knobs)`` rebuilds."""
        from .plans import plan_configs as plan_entries

        index = _plan_index("get_engine_and_knobs_at_index", index)
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
        index = _plan_index("get_plan_name_at_index", index)
        return self._pipeline.plans().at(index).name

    def get_workspace_size_plan_at_index(self, index: int, handle: Any = None,
                                         override_uids: Sequence[int] | None = None,
                                         override_shapes: Sequence[Sequence[int]] | None = None,
                                         override_strides: Sequence[Sequence[int]] | None = None) -> int:
        """Bytes of workspace candidate plan ``index`` needs (built on first use)."""
        index = _plan_index("get_workspace_size_plan_at_index", index)
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
        index = _plan_index("get_behavior_notes_for_plan_at_index", index)
        return [behavior_note(int(n)) for n in self._pipeline.plans().at(index).behavior_notes]

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list[numerical_note]:
        """Numerical notes of candidate plan ``index``'s engine."""
        index = _plan_index("get_numerical_notes_for_plan_at_index", index)
        return [numerical_note(int(n)) for n in self._pipeline.plans().at(index).numerical_notes]

    def select_numeric_notes(self, notes: Iterable[numerical_note]) -> pygraph:
        """Keep only candidates whose engines have every one of ``notes``."""
        wanted = notes_of(notes, numerical_note, "select_numeric_notes")
        self._plans_for("select_numeric_notes").filters.numeric_select |= wanted
        return self

    def deselect_numeric_notes(self, notes: Iterable[numerical_note]) -> pygraph:
        """Drop candidates whose engines have any of ``notes``."""
        wanted = notes_of(notes, numerical_note, "deselect_numeric_notes")
        self._plans_for("deselect_numeric_notes").filters.numeric_deselect |= wanted
        return self

    def select_behavior_notes(self, notes: Iterable[behavior_note]) -> pygraph:
        """Keep only candidates whose engines have every one of ``notes``."""
        wanted = notes_of(notes, behavior_note, "select_behavior_notes")
        self._plans_for("select_behavior_notes").filters.behavior_select |= wanted
        return self

    def deselect_behavior_notes(self, notes: Iterable[behavior_note]) -> pygraph:
        """Drop candidates whose engines have any of ``notes``."""
        wanted = notes_of(notes, behavior_note, "deselect_behavior_notes")
        self._plans_for("deselect_behavior_notes").filters.behavior_deselect |= wanted
        return self

    def deselect_engines(self, engine_names: Iterable[str]) -> pygraph:
        """Drop candidates by name: ``'eng12'`` (every knob choice) or a full plan name."""
        names = [engine_names] if isinstance(engine_names, str) else list(engine_names)
        self._plans_for("deselect_engines").filters.engines_deselect |= {str(n) for n in names}
        return self

    def deselect_workspace_greater_than(self, workspace_limit: int) -> pygraph:
        """Drop candidates that need more than ``workspace_limit`` bytes of workspace."""
        if int(workspace_limit) < 0:
            raise GraphError(f"deselect_workspace_greater_than: expected a size >= 0, got {workspace_limit}")
        self._plans_for("deselect_workspace_greater_than").filters.max_workspace = int(workspace_limit)
        return self

    def get_knobs_for_engine(self, engine_id: int) -> list[eng.KnobInfo]:
        """The tunable knobs of engine ``engine_id`` (``cudnn.knob``: type, bounds, stride)."""
        _check_engine_id(engine_id, "get_knobs_for_engine")

        def read() -> list[eng.KnobInfo]:
            e = self._engine(engine_id)
            try:
                return eng.knob_infos(e)
            finally:
                e.close()

        return self._pipeline.engine_knobs(engine_id, read)

    def create_execution_plan(self, engine_id: int, knobs: Mapping[knob_type | int, int] | None = None) -> pygraph:
        """Append a hand-picked engine config (engine global index and knob values, as
        ``get_engine_and_knobs_at_index`` reports them) after the ranked candidates, as 1.32 does:
        it is neither built nor selected; ``get_execution_plan_count() - 1`` is its index for
        ``build_plan_at_index`` and ``execute_plan_at_index``, and ``build_plans`` reaches it in
        turn (every one with ``ALL``, in parallel)."""
        _check_engine_id(engine_id, "create_execution_plan")
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
        _check_engine_id(engine_id)
        count = self.get_engine_count()
        if not 0 <= engine_id < count:
            raise GraphError(f"engine id {engine_id!r} is out of range: this graph has {count} engines "
                             "(get_engine_count())")
        return eng.engine(self._op_graph(), engine_id, self.sm_count, self.label(),
                          self._pipeline.device_property())

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
        winner, report = autotune(p, variant_pack, workspace, handle, warmup, repeats, progress,
                                  alternatives=p.alternatives(), max_plans=max_plans)
        self._pipeline = winner
        plan_report.remember(winner, report)
        plan_store.store(winner, DEFAULT_HEURISTICS, autotuned=True)
        return report

    def serialize(self, *, as_bytes: bool = False, include_kernels: bool = True) -> list[int] | bytes:
        """The selected plan and what binds it, for ``deserialize`` in any process: a list of
        byte values as the official API returns, or ``bytes`` with ``as_bytes=True``.

        The record holds cuDNN's own JSON of the plan; ``include_kernels=False`` marks it as one
        that ``deserialize(..., enforce_precompiled=True)`` refuses (cuDNN re-creates kernels of
        runtime-compiled engines when the plan is restored, whatever the flag)."""
        from .records import serialize_args as serialization

        return serialization.serialize(self._pipeline, as_bytes, include_kernels)

    def deserialize(self, handle_: Any = None, pyobj: Any = None, enforce_precompiled: bool = False) -> None:
        """``deserialize(handle, data)`` or ``deserialize(data)``: restore a plan from
        ``serialize()`` (bytes or a list of ints), or a graph from its printed JSON (a ``str``,
        ``str(graph)``: nodes and tensors come back, to build as any graph).

        A plan is refused (SerializationError) when made by another cuDNN version or on another
        GPU, and with ``enforce_precompiled=True`` when its engine compiles kernels at run time
        or it was serialized with ``include_kernels=False``."""
        from .records import serialize_args as serialization

        if pyobj is None or (isinstance(pyobj, bool) and not isinstance(handle_, (bool, int))):
            if pyobj is not None:  # deserialize(data, True): the one-argument form with the flag
                enforce_precompiled = pyobj
            handle_, pyobj = None, handle_
        if pyobj is None:
            raise TypeError("deserialize: missing the data (deserialize(data) or deserialize(handle, data))")
        enforce_precompiled = as_bool(enforce_precompiled, "deserialize", "enforce_precompiled")
        if isinstance(pyobj, str) and serialization.is_graph_json(pyobj):
            if handle_ is not None:
                as_handle_ptr(handle_)
                self.handle = handle_
            oplib.load_all()  # the JSON may hold a node of any op family (rebuilt by its module)
            serialization.graph_from_json(self, pyobj)
            return
        if handle_ is not None:
            as_handle_ptr(handle_)
            self.handle = handle_
        if self._nodes:
            self._require_validated()
        self._pipeline = serialization.deserialize(Pipeline(self), pyobj, enforce_precompiled)

    def populate_cuda_graph(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any,
                            cuda_graph: Any) -> None:
        """Add the selected plan's work to an empty CUDA graph (cudaGraph_t, int or object)."""
        plan_store.cuda_graph_call(self._pipeline, handle, variant_pack, workspace, cuda_graph, update=False)

    def update_cuda_graph(self, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any,
                          cuda_graph: Any) -> None:
        """Point a CUDA graph populated by this plan at new buffers."""
        plan_store.cuda_graph_call(self._pipeline, handle, variant_pack, workspace, cuda_graph, update=True)

    # -- introspection ----------------------------------------------------------------------

    @property
    def tensors(self) -> dict[str, Tensor]:
        """The graph's tensors by name (a copy); a name several tensors share is left out
        (``find_tensor`` by uid finds those)."""
        from .text import inspection as introspect

        return introspect.by_name(self._nodes)[0]

    def find_tensor(self, name_or_uid: str | int) -> Tensor | None:
        """The tensor named ``name_or_uid`` (a str) or with that uid (an int; uids are assigned at
        build unless given); None if no tensor has it. A name several tensors share raises ValueError."""
        from .text import inspection as introspect

        return introspect.find_tensor(self._nodes, name_or_uid)

    def get_node(self, name: str) -> Node | None:
        """The node called ``name``, or None."""
        return next((n for n in self._nodes if n.name == name), None)

    def get_inputs(self) -> list[Tensor]:
        """The tensors execute binds that no node produces (graph inputs), in node order."""
        from .text import inspection as introspect

        return introspect.inputs(self._nodes)

    def get_outputs(self) -> list[Tensor]:
        """The non-virtual tensors nodes produce (graph outputs), in node order."""
        from .text import inspection as introspect

        return introspect.outputs(self._nodes)

    def inspect(self) -> dict[str, Any]:
        """The graph's structure as a dict: context, nodes (name, type, inputs, outputs, params)
        and tensors by name (dim, stride, dtype, is_virtual, uid)."""
        from .text import inspection as introspect

        return introspect.inspect(self)

    def label(self) -> str:
        """'graph 'name'' (or 'graph'): how messages name this graph."""
        return f"graph {self.name!r}" if self.name else "graph"

    def query_tensor_attributes_of_uid(self, uid: int) -> Tensor:
        """The tensor of this graph with ``uid`` (GraphError if none)."""
        tensors = all_tensors(self._nodes) + [b.tensor for b in self._pipeline.bindings()] \
            if self._pipeline.has_plans() else all_tensors(self._nodes)
        for t in tensors:
            if t.has_uid() and t.get_uid() == uid:
                return t
        raise GraphError(f"no tensor of this graph has uid {uid}")

    def to_json(self) -> dict[str, Any]:
        """The graph as a JSON-ready dict: context, nodes, tensors (what ``str(graph)`` prints)."""
        ctx = self._context
        tensors: dict[str, Any] = {}
        keys: dict[int, str] = {}  # a second tensor of one name is keyed "name#2"
        for t in all_tensors(self._nodes):  # ragged offsets too: the tensors that use them name them
            key, n = t.get_name(), 1
            while key in tensors:
                n += 1
                key = f"{t.get_name()}#{n}"
            keys[id(t)] = key
            tensors[key] = t.to_dict()
        try:
            backend = version_string(loader.report().version)
        except Exception:  # noqa: BLE001 - no loadable libcudnn here: the JSON names no backend version
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
            "nodes": [node.to_json(keys) for node in self._nodes],
            "tensors": tensors,
        }

    def __str__(self) -> str:
        return dumps(self.to_json())

    __repr__ = __str__

    def key(self) -> int:
        """A stable 63-bit hash of what the graph computes (ops, attributes, shapes, types);
        names do not enter it, so equal graphs built by different code share plans."""
        return structure_key(self._nodes, self._context, self.sm_count)

    # -- pictures and the plan report ---------------------------------------------------------

    def to_dot(self, expand: bool = False) -> str:
        """The graph as Graphviz DOT text: ops and the tensors bound at execute as nodes,
        virtual tensors as dashed edges labelled with name, dims and type. ``expand=True``
        draws composites (attention, norms that expand) as the primitive ops they become."""
        from .text import diagram as picture

        return picture.from_graph(self, expand).dot()

    def save_picture(self, path: str, expand: bool = False) -> str:
        """Draw the graph into ``path``: ``.svg`` (drawn by cudnn-py, no Graphviz needed) or
        ``.dot`` / ``.gv``; returns the path. ``expand`` as in `to_dot`."""
        from .text import diagram as picture

        return str(picture.save(picture.from_graph(self, expand), path))

    def _repr_svg_(self) -> str:
        """Jupyter shows a graph as its picture."""
        from .text import diagram as picture

        return picture.from_graph(self).svg()

    def describe_plans(self, report: Sequence[Any] | None = None) -> PlanReport:
        """The candidate plans (after ``create_execution_plans`` or ``build``) as a table: index,
        engine, knobs, notes, workspace, status and, after ``autotune``, the median times (or
        those of ``report``, a table ``autotune`` returned). Prints as text, shows as HTML in Jupyter."""
        from .build import plan_report

        return plan_report.describe(self._pipeline, report)


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


def _check_engine_id(engine_id: Any, op: str = "") -> None:
    """An engine id argument (an int, not a bool), checked before anything needs a GPU."""
    if isinstance(engine_id, bool) or not isinstance(engine_id, int):
        raise TypeError(f"{op + ': ' if op else ''}engine_id: expected an int (0 .. get_engine_count() - 1), "
                        f"got {engine_id!r}")


def _plan_index(op: str, index: Any) -> int:
    """A plan index argument (an int), checked before anything needs the plans or a GPU."""
    if isinstance(index, bool) or not hasattr(type(index), "__index__"):
        raise TypeError(f"{op}: index: expected an int, got {index!r}")
    return operator.index(index)


# execute, the hot path, keeps Python's own error for a keyword it does not take (see `keywords`)
keywords.name_unknown_keywords(pygraph, "pygraph", skip=("execute",))
install_graph_class(pygraph)  # the class of the child graphs lower stages make (an SDPA score_mod's)
oplib.bind(pygraph)  # the op methods of ops.py now; the other families' when first read (oplib.FAMILIES)
