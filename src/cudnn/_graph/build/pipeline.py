"""The built state of a ``pygraph``, and the steps that make it.

One `Pipeline` per set of nodes holds everything derived from them: the expanded primitive
nodes and their bindings (uids, scratch slots), the backend operation graph, the candidate
plans, the selected plan and a Runner per executed plan. This module alone writes that state;
the plan cache (`records.plan_reuse`), autotuning and the plan queries of ``pygraph`` are handed the
pipeline and go through its methods. Adding a node to the graph replaces its pipeline.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._lib import enums, loader
from ..._lib.enums import build_plan_policy, heur_mode
from ..._lib.host import HostScalar
from ..._lib.record import Record
from ..._lib.status import (
    CudnnError,
    CudnnInitError,
    FeatureUnavailableError,
    cudnnGraphNotSupportedError,
    version_string,
)
from ...backend import engine as eng
from ...backend.descriptor import Descriptor
from ...backend.handle import Handle, as_handle_ptr, default_handle, release_point
from ..model.expand import expand
from ..model.graph_errors import GraphStateError
from ..model.lower import Lowering
from ..model.tensor import filling
from ..plans.candidates import Candidate, PlanSet
from ..plans.known_faults import guard_for
from ..run.bindings import SCRATCH_ALIGNMENT, Binding, ScratchSlot, needed_bytes
from ..run.runner import Runner

if TYPE_CHECKING:
    from ..model.graph_view import GraphView
    from ..model.node import Node
    from ..model.tensor import Tensor
    from .trial import Trial

DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)
OVERRIDE_SHAPE_SINCE = 92100  # CUDNN_ATTR_OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED
CUDA_GRAPH_RETENTION_SINCE = 92800  # CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION


def as_heur_modes(modes: Any) -> list[heur_mode]:
    """A list of heuristic modes from one mode or an iterable of them, less heur_mode.OPENSOURCE
    (`without_frontend_engines`)."""
    return without_frontend_engines([modes] if isinstance(modes, (heur_mode, int)) else list(modes))


def without_frontend_engines(modes: list[Any]) -> list[Any]:
    """``heur_mode.OPENSOURCE`` asks the official frontend for engines of its own (compiled with
    NVRTC: SDPA prefill on SM90/SM100, RMSNorm+SiLU on SM100), not libcudnn, and cudnn-py has none.
    Beside other modes it adds no candidate, as in the official where none of its engines matches
    the graph (a warning says so); alone it is refused, since no plan could come of it."""
    kept = [m for m in modes if m != heur_mode.OPENSOURCE]
    if len(kept) == len(modes):
        return kept
    what = ("the official frontend's own engines (compiled with NVRTC: SDPA prefill on SM90/SM100, "
            "RMSNorm+SiLU on SM100), which cudnn-py does not have")
    if not kept:
        raise cudnnGraphNotSupportedError(
            3000, "heur_mode.OPENSOURCE",
            f"selects {what}; no libcudnn version has such a heuristic mode (none up to the "
            f"{version_string(enums.HEADER_VERSION)} headers; the loaded libcudnn is "
            f"{version_string(loader.report().version)})",
            "ask cuDNN's heuristics instead: [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]")
    from ...log import get_logger

    get_logger("build").warning("heur_mode.OPENSOURCE adds no plan: it selects %s; planning with %s",
                                what, [str(m) for m in kept])
    return kept


def _no_kernel_cache(p: Pipeline) -> Descriptor | None:
    return None


# What gives a graph without a kernel cache of the user's one of its own: the plan cache, which
# keeps a dynamic-shape graph's compiled kernels on disk, installs its maker when it is imported
# (`records.plan_reuse`); until then, none.
_own_kernel_cache: Callable[[Pipeline], Descriptor | None] = _no_kernel_cache


def install_own_kernel_cache(maker: Callable[[Pipeline], Descriptor | None]) -> None:
    """Have ``maker(pipeline)`` give the kernel cache of a pipeline whose graph has none (None: none)."""
    global _own_kernel_cache
    _own_kernel_cache = maker


class Lowered(Record):
    """The validated graph as the backend sees it: primitive nodes, bindings and scratch.
    ``unused``: tensors of the user's nodes the expansion does not read; ``chosen``: the
    lowerings composites chose (e.g. attention_implementation.UNIFIED); ``alternatives``: the
    ones they could have chosen instead; ``trial``: the one of those worth trying unasked
    (`build.trial`), or None."""

    __slots__ = ("nodes", "bindings", "slots", "scratch_bytes", "unused", "chosen", "alternatives", "trial")

    def __init__(self, nodes: list[Node], bindings: list[Binding], slots: list[ScratchSlot], scratch_bytes: int,
                 unused: list[Binding], chosen: tuple[Any, ...] = (), alternatives: tuple[Any, ...] = (),
                 trial: Any = None) -> None:
        self.nodes, self.bindings, self.slots, self.scratch_bytes = nodes, bindings, slots, scratch_bytes
        self.unused, self.chosen, self.alternatives, self.trial = unused, chosen, alternatives, trial


class Pipeline:
    """Lowered graph, operation graph, plans, selected plan and runners of one ``pygraph``.

    The graph owns its pipeline; the pipeline refers back to the graph weakly, so that a graph
    no longer used is released at once (its plans and descriptors with it), not at the next
    collection of reference cycles."""

    def __init__(self, graph: GraphView, lowering: Any = None) -> None:
        self.graph: GraphView = graph if isinstance(graph, weakref.ProxyTypes) else weakref.proxy(graph)
        self.label = graph.label()
        self.lowering = lowering  # preferred lowering of composites that offer several; None: their default
        self._handle: Handle | None = None  # this thread's default handle, when the graph has none
        self._lowered: Lowered | None = None
        self._identity: tuple[int, int, tuple[int, ...]] | None = None
        self._op_graph: Descriptor | None = None
        self._knobs: dict[int, list[eng.KnobInfo]] = {}  # engine global index -> its knobs, read once
        self._plans: PlanSet | None = None
        self._runners: dict[int, Runner] = {}
        self._active: Runner | None = None
        self._trial: Trial | None = None  # the trial of another lowering, while it routes executes

    # -- handle and device ----------------------------------------------------------------------

    def handle_ptr(self) -> int:
        if self.graph.handle is not None:
            return as_handle_ptr(self.graph.handle)
        if self._handle is None or self._handle.closed:
            self._handle = default_handle()
        return self._handle.ptr

    def device_property(self) -> Descriptor | None:
        """The DEVICEPROP descriptor of ``pygraph(device_property=...)``: heuristics, engines and
        plans are made for that device; None builds for the handle's GPU."""
        props = self.graph.device_property
        return None if props is None else props.descriptor

    def plan_retention(self) -> int | None:
        """The graph's ``cuda_graph_retention=`` as the value its plans are built with, where it was
        given and the loaded cuDNN has the attribute (9.28); else None: the plans leave it to
        cuDNN (CUDNN_CUDA_GRAPH_RETENTION, else PER_GRAPH), the rule `get_cuda_graph_retention`
        reports by."""
        value = self.graph.cuda_graph_retention
        if value is None or loader.report().version < CUDA_GRAPH_RETENTION_SINCE:
            return None
        return int(value)

    def build_handle_ptr(self) -> int:
        """The handle the operation graph and plans are made with: none (0) for a graph given
        device properties and no handle (an ahead-of-time build, as the official frontend does);
        execute still runs on a real handle."""
        if self.graph.device_property is not None and self.graph.handle is None:
            return 0
        return self.handle_ptr()

    def handle(self) -> Handle | int:
        """The handle execute runs on when the caller gives none."""
        self.handle_ptr()
        return self.graph.handle if self.graph.handle is not None else self._handle  # type: ignore[return-value]

    def device(self) -> int:
        h = self.handle()
        if isinstance(h, Handle):
            return h.device
        from ..._lib import cuda

        return cuda.current_device()

    # -- lowering -------------------------------------------------------------------------------

    def lowered(self) -> Lowered:
        """Expand the (validated) nodes, give every tensor a uid, and list the bindings."""
        if self._lowered is None:
            version = loader.report().version
            user_nodes = self.graph.nodes
            mine = all_tensors(user_nodes)
            for t in mine:
                t.forget_filled(("uid",))  # each build assigns afresh: uids depend on this graph alone
            with filling(mine):
                nodes, ex = expand(user_nodes, self.graph.context, version, self.lowering)
                assign_uids(all_tensors([*user_nodes, *nodes]))
            slots, ends = [], [0, 0]  # the ends of the workspace's scratch and of the constant memory
            for s in ex.scratch:
                size = needed_bytes(s.tensor)
                at = ends[s.constant]
                slots.append(ScratchSlot(s.tensor.get_uid(), at, size, s.fill, s.zero, s.constant))
                ends[s.constant] = at + -(-size // SCRATCH_ALIGNMENT) * SCRATCH_ALIGNMENT
            offset = ends[False]
            scratch_uids = {s.uid for s in slots}
            used = {t.get_uid() for t in all_tensors(nodes)}
            # the user's tensors bind as the user declared them (an expansion may use views of them);
            # those the expansion does not read are accepted at execute and not given to cuDNN
            bound = make_bindings([*user_nodes, *nodes], self.graph.shared.user_tensor)
            bindings = [b for b in bound if b.uid in used and b.uid not in scratch_uids]
            unused = [b for b in bound if b.uid not in used]
            self._lowered = Lowered(nodes, bindings, slots, offset, unused, tuple(ex.chosen),
                                    tuple(ex.alternatives), ex.trial)
        return self._lowered

    def identity(self) -> tuple[int, int, tuple[int, ...]]:
        """`lowered_identity` of this pipeline, worked out once: a build that misses the plan
        cache asks for it when it looks the graph up and again when it stores the plan."""
        if self._identity is None:
            self._identity = lowered_identity(self)
        return self._identity

    def lowering_name(self) -> str:
        """The lowerings this pipeline's composites chose, e.g. ``"UNIFIED"`` ("" if none chose)."""
        return "+".join(getattr(c, "name", str(c)) for c in self.lowered().chosen)

    def alternatives(self) -> list[Pipeline]:
        """Pipelines of the same graph built with each other lowering its composites offer."""
        return [Pipeline(self.graph, alt) for alt in self.lowered().alternatives]

    def variant(self, name: str) -> Pipeline | None:
        """This pipeline, or the alternative whose lowering is called ``name``; None if neither."""
        if name == self.lowering_name():
            return self
        return next((q for q in self.alternatives() if q.lowering_name() == name), None)

    def bindings(self) -> list[Binding]:
        return self.lowered().bindings

    def op_graph(self) -> Descriptor:
        """The finalized backend operation graph (lowered on first use)."""
        if self._op_graph is None:
            self._op_graph = self._lower()
        return self._op_graph

    def has_op_graph(self) -> bool:
        return self._op_graph is not None

    def engine_knobs(self, engine_id: int, read: Callable[[], list[eng.KnobInfo]]) -> list[eng.KnobInfo]:
        """The knobs of engine ``engine_id`` of this operation graph: ``read()`` the first time,
        then kept. Reading them creates a KNOB_INFO descriptor for every knob type cuDNN has,
        which a knob sweep would otherwise pay for each config it makes."""
        known = self._knobs.get(engine_id)
        if known is None:
            known = self._knobs[engine_id] = read()
        return list(known)

    def _lower(self) -> Descriptor:
        lowered = self.lowered()
        release_point(self.build_handle_ptr())  # objects of graphs collected since go here, on purpose
        lowering = Lowering(self.build_handle_ptr(), loader.report().version)
        ops: list[Descriptor] = []
        for node in lowered.nodes:
            try:
                ops += node.lower(lowering)
            except cudnnGraphNotSupportedError as exc:
                if type(exc) is not cudnnGraphNotSupportedError:  # a refusal of ours: it names the node
                    raise
                # a 3xxx status of a descriptor's: name the node and the loaded cuDNN
                raise cudnnGraphNotSupportedError(exc.status, f"{self.label}: {node.label()}: {exc.context}",
                                                  exc.message or f"cuDNN {version_string(lowering.version)} "
                                                  "does not support this operation") from exc
        # a kernel cache needs dynamic shapes too (as in the official frontend)
        dynamic = self.graph.is_dynamic_shape_enabled or self.graph.kernel_cache is not None
        override = self.graph.is_override_shape_enabled
        if override and lowering.version < OVERRIDE_SHAPE_SINCE:
            raise FeatureUnavailableError(f"{self.label}: is_override_shape_enabled=True "
                                          "(CUDNN_ATTR_OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED)",
                                          OVERRIDE_SHAPE_SINCE, lowering.version)
        return eng.operation_graph(self.build_handle_ptr(), ops, self.graph.name or "graph", dynamic_shape=dynamic,
                                   override_shape=override)

    # -- plans ----------------------------------------------------------------------------------

    def plans(self) -> PlanSet:
        if self._plans is None:
            raise GraphStateError(f"{self.label}: call create_execution_plans() (or build()) first")
        return self._plans

    def has_plans(self) -> bool:
        return self._plans is not None

    def planset(self) -> PlanSet:
        """The plan set, made empty (with the graph's kernel cache) if there is none yet."""
        if self._plans is None:
            plans = PlanSet(self.label)
            plans.device_property = self.device_property()
            plans.retention = self.plan_retention()
            plans.guard = guard_for(self.lowered().nodes)
            if self.graph.kernel_cache is not None:
                plans.kernel_cache = self.graph.kernel_cache.descriptor_for(self.op_graph())
            else:  # dynamic shapes: a kernel cache of its own, that the plan cache keeps on disk
                plans.kernel_cache = _own_kernel_cache(self)
            self._plans = plans
        return self._plans

    def create_plans(self, modes: Sequence[heur_mode]) -> None:
        """Ask the heuristics, in order, for ranked engine configs."""
        op_graph = self.op_graph()
        plans = self.planset()
        ranked = False  # a mode before this one ranked the graph: this one is queried when needed
        for mode in modes:
            tolerant = mode == heur_mode.FALLBACK or len(modes) > 1  # others may handle the graph
            if ranked:
                plans.defer_ranking(functools.partial(eng.heuristics, op_graph, int(mode), self.graph.sm_count,
                                                      self.label, self.device_property()), mode.name)
                continue
            try:
                heur = eng.heuristics(op_graph, int(mode), self.graph.sm_count, self.label, self.device_property())
            except CudnnError as exc:
                if tolerant:
                    continue
                if isinstance(exc, (CudnnInitError, cudnnGraphNotSupportedError)):  # no GPU; or already so
                    raise
                # the official's HEURISTIC_QUERY_FAILED: not supported, whatever cuDNN's status
                raise cudnnGraphNotSupportedError(exc.status, exc.context, exc.message, exc.hint) from exc
            plans.add_ranking(heur, mode.name, tolerant)
            ranked = True

    def build_plans(self, policy: build_plan_policy, limit: int | None = None) -> None:
        """Build the first supported candidate, or (ALL) every one, or the first ``limit``; ALL
        on threads, which worker processes join only when asked for (`parallel.build_processes`)."""
        policy = build_plan_policy(policy)
        offload = None
        if policy == build_plan_policy.ALL:
            from ..plans.threads import build_processes

            setting = build_processes()
            if setting is not None:
                def offload(todo: Sequence[Candidate]) -> Any:
                    # an import down, here: only a build that asks for worker processes needs it
                    from . import workers

                    return workers.pool(self, todo, setting)
        self.plans().build(self.build_handle_ptr(), policy, limit, offload=offload)

    def build_candidate(self, cand: Candidate) -> Descriptor:
        return cand.build(self.build_handle_ptr(), self.label, self.plans().kernel_cache)

    def add_manual(self, cand: Candidate) -> None:
        """A hand-picked engine config, appended after the ranked candidates; neither built nor
        selected (build_plans, build_plan_at_index and execute_plan_at_index reach it)."""
        plans = self.planset()
        cand.device_property, cand.retention = plans.device_property, plans.retention
        plans.append(cand)

    def select(self, cand: Candidate) -> None:
        """Make ``cand`` the selected plan: a choice (select_plan, autotune) that ends any lowering trial."""
        self.plans().selected = cand
        self._trial = None

    def adopt(self, plan: Descriptor, workspace: int, name: str, lowered: Lowered | None = None,
              source: str = "cache") -> None:
        """Make a finalized plan (from the plan cache or serialized data) the selected one.

        ``lowered`` (bindings, windows, scratch) comes from the serialized record when the graph
        has no nodes to lower; ``source`` is where the plan came from, as `describe_plans` shows it."""
        if lowered is not None:
            self._lowered, self._identity = lowered, None
        else:
            self.lowered()
        plans = PlanSet(self.label)
        cand = Candidate(None, -1, {}, [], [], source, plan=plan, workspace=workspace, restored_name=name)
        plans.put_first(cand)
        plans.selected = cand
        self._plans = plans
        self._runners = {}
        self._active = None

    def workspace_size(self, cand: Candidate | None = None) -> int:
        """Workspace the caller passes for ``cand`` (the selected plan): scratch, then the plan's."""
        cand = cand if cand is not None else self.plans().require_selected()
        plan_ws = int(cand.workspace or 0)
        scratch = self.lowered().scratch_bytes
        return scratch + plan_ws if plan_ws else scratch

    # -- runners --------------------------------------------------------------------------------

    def runner(self, cand: Candidate) -> Runner:
        """The Runner of ``cand`` (its plan built on first use)."""
        runner = self._runners.get(id(cand))
        if runner is None:
            plan = cand.build(self.build_handle_ptr(), self.label)
            h = self.handle()
            device = h.device if isinstance(h, Handle) else None
            lowered = self.lowered()
            runner = Runner(self.label, plan, int(cand.workspace or 0), lowered.bindings, h, device,
                            lowered.slots, lowered.scratch_bytes, cand, lowered.unused,
                            replays=all(node.replayable for node in lowered.nodes))
            self._runners[id(cand)] = runner
        return runner

    def current_runner(self, sized: bool = False) -> Runner:
        """The Runner of the selected plan (what execute() uses); while a lowering trial runs, or
        after it found the other lowering faster, the Runner it routes this execute to. ``sized``:
        the caller sizes the workspace for the Runner it is given (its ``workspace_size``);
        otherwise it passes ``workspace_size()``, and only a Runner that fits in that is given."""
        active = self._active
        if active is None or self._plans is None or active.candidate is not self._plans.selected:
            plans = self._plans
            if plans is None or plans.selected is None:
                raise GraphStateError(f"{self.label}: execute() before build(); build the graph first")
            active = self._active = self.runner(plans.selected)
        trial = self._trial
        return active if trial is None else trial.route(active, sized)

    # -- the lowering trial ---------------------------------------------------------------------

    def start_trial(self, remember: Callable[[Pipeline], None]) -> None:
        """Try the other lowering this graph offers unasked (`build.trial`), where it offers one
        and trials are on; ``remember(winner)`` is called once the trial has decided."""
        from .trial import Trial, trials_enabled

        alternative = self.lowered().trial
        if alternative is None or self._trial is not None or not trials_enabled() or self._plans is None \
                or self.graph.kernel_cache is not None or self.graph.is_dynamic_shape_enabled \
                or self.graph.device_property is not None:
            return
        self._trial = Trial(self, Pipeline(self.graph, alternative), remember, DEFAULT_HEURISTICS)

    def end_trial(self) -> None:
        """Route every execute to the selected plan again (the trial decided for it, or gave up)."""
        self._trial = None

    def take_over(self, other: Pipeline) -> None:
        """Become ``other``, a pipeline of the same graph in another lowering, with its plan built
        and selected (the lowering trial kept it): its lowering, operation graph, plans and
        Runners; executes, plan queries and serialization then see that plan alone."""
        self.lowering = other.lowering
        self._lowered, self._identity, self._op_graph = other._lowered, other._identity, other._op_graph
        self._knobs, self._plans, self._runners = other._knobs, other._plans, other._runners
        self._active = other._active
        self._trial = None

    def trial_pending(self) -> bool:
        """Whether a lowering trial has yet to decide which lowering executes run."""
        trial = self._trial
        return trial is not None and not trial.decided


# -- uids and bindings ------------------------------------------------------------------------

def all_tensors(nodes: Sequence[Node]) -> list[Tensor]:
    """Every tensor the nodes touch (ragged offsets included), each once, in node order."""
    seen: dict[int, Tensor] = {}
    for node in nodes:
        for t in (*node.inputs.values(), *node.outputs.values()):
            seen.setdefault(id(t), t)
            ragged = t.get_ragged_offset()
            if ragged is not None:
                seen.setdefault(id(ragged), ragged)
    return list(seen.values())


def assign_uids(tensors: Sequence[Tensor]) -> None:
    """Give each tensor without a uid the smallest free one (deterministic for equal graphs)."""
    used = {t.get_uid() for t in tensors if t.has_uid()}
    next_uid = 1
    for t in tensors:
        if t.has_uid():
            continue
        while next_uid in used:
            next_uid += 1
        t.set_uid(next_uid)
        used.add(next_uid)


def lowered_identity(p: Pipeline) -> tuple[int, int, tuple[int, ...]]:
    """What identifies the backend graph ``p`` lowers to: the graph's key, the structure of the
    lowered nodes (what an expansion made) and their tensors' uids."""
    g = p.graph
    nodes = p.lowered().nodes
    uids = tuple(t.get_uid() for t in all_tensors(nodes))
    return g.key(), structure_key(nodes, g.context, g.sm_count), uids


def structure_key(nodes: Sequence[Node], context: Any, sm_count: int | None) -> int:
    """A stable 63-bit hash of what ``nodes`` compute (ops, attributes, shapes, types, and
    how tensors connect them); names and uids do not enter it."""
    import hashlib
    import marshal

    order: dict[int, int] = {}
    parts: list[Any] = [(context.io_data_type.name, context.intermediate_data_type.name,
                         context.compute_data_type.name, sm_count)]
    for node in nodes:
        ports = [(port, order.setdefault(id(t), len(order)), t.key_fields())
                 for port, t in {**node.inputs, **node.outputs}.items()]
        parts.append((node.key_fields(), ports))
    try:
        # marshal's format 2 writes equal values alike whatever objects hold them (no shared
        # references, no interning); it takes only plain builtin types
        text = marshal.dumps(parts, 2)
    except ValueError:  # an attribute of another type (an enum, a Fraction): its repr
        text = repr(parts).encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def make_bindings(nodes: Sequence[Node],
                  user_tensor: Callable[[Tensor], Tensor | None] = lambda t: None) -> list[Binding]:
    """One Binding per non-virtual tensor uid: what the variant pack must bind. ``user_tensor``:
    the user's tensor a graph's copy stands for (`SharedTensors.user_tensor`), bound to it too."""
    out: dict[int, Binding] = {}
    for node in nodes:
        for port, t in {**node.inputs, **node.outputs}.items():
            ragged = t.get_ragged_offset()
            for p, x in ((port, t), (f"{port}.ragged_offset", ragged)):
                if x is None or x.get_is_virtual() or x.get_uid() in out:
                    continue
                value = x.get_value()
                const = HostScalar(value, x.get_data_type()) if value is not None else None
                out[x.get_uid()] = Binding(x.get_uid(), x, node.label(), p, const, user_tensor(x))
    return list(out.values())
