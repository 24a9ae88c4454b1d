"""Selected plans kept beyond one build: the plan cache, serialization and CUDA graphs.

Functions of a `Pipeline`: each reads the selected plan through the pipeline's methods and
puts a restored plan back with ``Pipeline.adopt``, whichever way the plan was made.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..._lib import cuda, loader
from ..._lib.enums import behavior_note, data_type, heur_mode
from ..._lib.host import HostScalar
from ..._lib.status import CudnnError
from ...backend import kernel_cache as kc
from ...backend import plan as backend_plan
from ...backend.descriptor import Descriptor
from ...backend.handle import Handle, as_handle_ptr
from ..build.pipeline import Lowered, Pipeline, install_own_kernel_cache
from ..model.arguments import check_handle_type, check_variant_pack
from ..model.graph_errors import GraphError, GraphNotSupportedError, SerializationError
from ..model.tensor import Tensor
from ..plans import known_faults
from ..plans.candidates import Candidate
from ..run.bindings import Binding, ScratchSlot
from .plan_bytes import PlanRecord, ScratchRecord, TensorRecord, device_identity, record_tensors

# -- the plan cache ---------------------------------------------------------------------------

TUNED_SOURCE = "autotuned cache"  # the source of a plan adopted from an autotuned record


def cache_keys(p: Pipeline, modes: Sequence[heur_mode]) -> tuple[str, str] | None:
    """(autotuned key, heuristic key) of the pipeline's validated graph, or None if it cannot be cached.

    The key is that of the graph's default lowering, whichever lowering the plan belongs to:
    a record names its lowering (`lowering_of`), so a build finds an autotuned choice of
    another lowering."""
    from .plan_cache import plan_cache

    if not plan_cache.enabled or p.graph.kernel_cache is not None or p.graph.device_property is not None:
        return None  # an ahead-of-time build for described properties is not keyed by a local GPU
    if p.lowering is not None:
        p = Pipeline(p.graph)
    p.handle_ptr()  # a missing GPU surfaces as cuDNN's error, with its hint
    g = p.graph
    ident = (*p.identity(), known_faults.REVISION, g.sm_count, g.is_dynamic_shape_enabled,
             g.is_override_shape_enabled, device_identity(p.device()), loader.report().version)
    return plan_cache.key("tuned", ident), plan_cache.key("heuristic", ident, tuple(int(m) for m in modes))


def adopt_cached(p: Pipeline, modes: Sequence[heur_mode]) -> Pipeline | None:
    """Select the plan cached for this graph (autotuned first, then heuristic) in ``p``, or in
    the pipeline of the lowering the plan was built with; None on a miss."""
    from .plan_cache import log, plan_cache

    keys = cache_keys(p, modes)
    if keys is None:
        return None
    for key in keys:
        hit = plan_cache.lookup_memory(key)
        if hit is not None:
            remembered, plan = hit
            q = lowering_of(p, remembered)
            if q is None:
                continue
            q.adopt(plan, remembered.workspace, remembered.plan_name, source=_source(keys, key))
            plan_cache.hits += 1
            return q
    for key in keys:
        record = plan_cache.lookup_disk(key)
        if record is None:
            continue
        try:
            record.check_compatible(p.device())
            q = lowering_of(p, record)
            if q is None:
                raise GraphError(f"no lowering {record.extra.get('lowering')!r} of this graph")
            kernels = stored_kernels(q, key) if record.extra.get("kernels") else None
            if record.extra.get("kernels") and kernels is None:
                continue  # its kernels are gone or unusable (logged): a build compiles and stores both again
            plan = plan_from_record(q, record, kernels)
            check_fits(q, record, plan)
        except (CudnnError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # a damaged, foreign or swapped entry (GraphError, SerializationError: ValueErrors) is rebuilt
            log().warning("plan cache: entry %s unusable (%s); rebuilding", key, exc)
            plan_cache.forget(key)
            continue
        plan_cache.remember(key, record, plan)
        q.adopt(plan, record.workspace, record.plan_name, source=_source(keys, key))
        plan_cache.hits += 1
        plan_cache.disk_hits += 1
        return q
    plan_cache.misses += 1
    return None


def _source(keys: tuple[str, str], key: str) -> str:
    """What `describe_plans` names as the source of a plan the cache held under ``key``."""
    return TUNED_SOURCE if key == keys[0] else "cache"


def check_fits(p: Pipeline, rec: PlanRecord, plan: Descriptor) -> None:
    """Refuse a record whose tensors are not this graph's (a swapped or edited file), and take
    the workspace from the plan itself: a smaller figure would let cuDNN write past the buffer."""
    mine = sorted((b.uid, list(b.tensor.get_dim()), list(b.tensor.get_stride()), b.tensor.get_data_type().name)
                  for b in p.bindings())
    theirs = sorted((t.uid, list(t.dim), list(t.stride), t.data_type) for t in rec.tensors if not t.unused)
    if mine != theirs:
        raise SerializationError("the entry's tensors (uid, dims, strides, type) are not this graph's")
    rec.workspace = backend_plan.workspace_size(plan)


def lowering_of(p: Pipeline, rec: PlanRecord) -> Pipeline | None:
    """The pipeline of ``p``'s graph with the lowering ``rec`` was built with (``p`` itself for
    a record of no particular lowering); None if the graph has no such lowering."""
    name = rec.extra.get("lowering")
    return p if name is None or not p.graph.nodes else p.variant(name)


def store(p: Pipeline, modes: Sequence[heur_mode], autotuned: bool) -> None:
    """Remember the selected plan under this graph's key (heuristic or autotuned)."""
    from .plan_cache import plan_cache

    keys = cache_keys(p, modes)
    if keys is None or not p.has_plans():
        return
    cand = p.plans().selected
    if cand is None or cand.plan is None:
        return
    key = keys[0] if autotuned else keys[1]
    handle = p.handle()
    produce = None
    if isinstance(handle, Handle):  # the file's JSON is read on the cache's writer thread (`file_bytes`)
        rec = record(p, cand, autotuned, with_json=False)  # what a memory hit needs
        produce = functools.partial(file_bytes, rec, cand.plan, handle)
    else:  # a raw cudnnHandle_t, which its owner may destroy at any time: the JSON is read now
        rec = record(p, cand, autotuned)
    if store_kernels(p, key):  # first the kernels, then the plan that says it has them
        rec.extra["kernels"] = True
    plan_cache.store(key, rec, cand.plan, produce)


def file_bytes(rec: PlanRecord, plan: Descriptor, handle: Handle) -> bytes:
    """The plan cache's file of ``rec``, with the JSON of ``plan`` read now, on the cache's writer
    thread: a build does not wait while cuDNN serializes its plan (most of a millisecond for an
    attention graph's). The writer's queue holds ``plan`` and the ``handle`` it was built with
    until this returns, and a Handle closed meanwhile waits for it (`handle.before_destroy`).
    Read in the relaxed capture mode: a CUDA-graph capture on another thread stays intact."""
    with cuda.relaxed_capture_mode():
        text = backend_plan.plan_json(plan)
    return rec.replace(plan_json=text).to_bytes()


def store_kernels(p: Pipeline, key: str) -> bool:
    """Write the kernel cache of ``p``'s plans beside plan ``key``; False when there is none to keep."""
    from .plan_cache import plan_cache

    kernels = p.plans().kernel_cache
    if kernels is None or not plan_cache.enabled or loader.report().version < kc.SERIALIZE_SINCE:
        return False
    try:
        text = kc.descriptor_json(kernels)
    except CudnnError as exc:
        plan_cache.log_once("serialize", key, "kernel cache: cuDNN did not serialize the kernels of %s (%s)",
                            p.label, exc)
        return False
    return plan_cache.store_kernels(key, text, loader.report().version, device_identity(p.device()))


# -- compiled kernels on disk -----------------------------------------------------------------

def own_kernel_cache(p: Pipeline) -> Descriptor | None:
    """An empty kernel cache for the plans of a dynamic-shape graph, so that the plan cache can
    keep their compiled kernels on disk (cuDNN fills a kernel cache only for dynamic-shape
    graphs); None when the plan cache is off or cuDNN cannot serialize kernel caches."""
    from .plan_cache import plan_cache

    g = p.graph
    if (not (plan_cache.enabled and g.is_dynamic_shape_enabled) or g.device_property is not None
            or loader.report().version < kc.SERIALIZE_SINCE):
        return None
    return kc.descriptor_for_graph(p.op_graph(), f"{p.label}: kernel cache")


install_own_kernel_cache(own_kernel_cache)


def stored_kernels(p: Pipeline, key: str) -> Descriptor | None:
    """The kernel cache stored beside plan ``key``, finalized; None when there is none or it is
    unusable (damaged, another cuDNN or GPU: logged once on ``cudnn.cache``, removed, rewritten later)."""
    from .plan_cache import plan_cache

    version = loader.report().version
    if version < kc.SERIALIZE_SINCE:
        return None
    text = plan_cache.lookup_kernels(key, version, device_identity(p.device()))
    if text is None:
        return None
    try:
        return kc.descriptor_from_json(text, f"{p.label}: stored kernels")
    except CudnnError as exc:
        plan_cache.log_once("bad", key, "kernel cache: cuDNN refused the stored kernels of %s (%s); compiling",
                            p.label, exc)
        plan_cache.forget_kernels(key)
        return None


def plan_from_record(p: Pipeline, rec: PlanRecord, kernels: Descriptor | None = None) -> Descriptor:
    """The record's plan, finalized with ``kernels`` when given (no compilation); if cuDNN
    refuses the plan with them, it is finalized without (compiling), logged once."""
    label = f"{p.label}: {rec.plan_name}"
    if kernels is not None:
        from .plan_cache import plan_cache

        try:
            plan = backend_plan.plan_from_json(p.build_handle_ptr(), rec.plan_json, label, p.device_property(),
                                               kernels, p.plan_retention())
            plan_cache.kernel_hits += 1
            return plan
        except CudnnError as exc:
            plan_cache.log_once("plan", rec.graph_key, "kernel cache: the plan of %s did not accept its stored "
                                "kernels (%s); compiling", p.label, exc)
    return backend_plan.plan_from_json(p.build_handle_ptr(), rec.plan_json, label, p.device_property(),
                                       retention=p.plan_retention())


def _offset_uid(t: Tensor) -> int | None:
    offset = t.get_ragged_offset()
    return offset.get_uid() if offset is not None and offset.has_uid() else None


def _window(t: Tensor) -> tuple[int | None, int]:
    """(uid of the tensor ``t`` is a window into, byte offset) for a slice read in place, else (None, 0)."""
    window = t.window_of()
    return (window[0].get_uid(), window[1]) if window is not None else (None, 0)


def _tensor_record(b: Binding, unused: bool = False) -> TensorRecord:
    t = b.tensor
    return TensorRecord(b.uid, t.get_name(), t.get_dim(), t.get_stride(), t.get_data_type().name,
                        t.get_is_pass_by_value(), t.get_value(), b.node, b.port, _offset_uid(t), *_window(t), unused)


def binding_records(p: Pipeline) -> tuple[list[TensorRecord], list[ScratchRecord], int]:
    """What a graph made only to run ``p``'s plan binds: the tensors (windows and the tensors
    the plan does not read included), the workspace scratch and the bytes the scratch takes."""
    lowered = p.lowered()
    tensors = [_tensor_record(b) for b in lowered.bindings] + [_tensor_record(b, True) for b in lowered.unused]
    scratch = [ScratchRecord(s.uid, s.offset, s.nbytes, s.fill.hex() if s.fill is not None else None, s.zero,
                             s.constant) for s in lowered.slots]
    return tensors, scratch, lowered.scratch_bytes


def restored_lowering(rec: PlanRecord) -> Lowered:
    """The lowering a graph with no nodes runs ``rec``'s plan with: bindings, windows, scratch."""
    bound: list[Binding] = []
    unused: list[Binding] = []
    for t, tensor in zip(rec.tensors, record_tensors(rec.tensors)):
        const = HostScalar(t.value, data_type[t.data_type]) if t.value is not None else None
        (unused if t.unused else bound).append(Binding(t.uid, tensor, t.node, t.port, const))
    slots = [ScratchSlot(s.uid, s.offset, s.nbytes, bytes.fromhex(s.fill) if s.fill is not None else None, s.zero,
                         s.constant) for s in rec.scratch]
    return Lowered([], bound, slots, rec.scratch_bytes, unused)


def record(p: Pipeline, cand: Candidate, autotuned: bool, with_json: bool = True) -> PlanRecord:
    """What restores ``cand`` in another process: its plan JSON (without it, "": `file_bytes`
    adds it) and what it binds."""
    assert cand.plan is not None
    props = p.graph.device_property
    name, cc = props.identity() if props is not None else device_identity(p.device())
    tensors, scratch, scratch_bytes = binding_records(p)
    extra = {"lowering": p.lowering_name()} if p.lowered().alternatives else {}
    text = backend_plan.plan_json(cand.plan) if with_json else ""
    return PlanRecord(cand.name, text, int(cand.workspace or 0), tensors,
                      loader.report().version, name, cc, autotuned, f"{p.graph.key():x}", extra=extra,
                      scratch=scratch, scratch_bytes=scratch_bytes)


# -- serialization ----------------------------------------------------------------------------

def serialize(p: Pipeline) -> bytes:
    """The selected plan and what binds it, as bytes for `deserialize` (any process)."""
    return record(p, p.plans().require_selected(), False).to_bytes()


def deserialize(p: Pipeline, data: bytes) -> Pipeline:
    """Select the plan in ``data`` (in the pipeline of the lowering it was built with);
    refused (SerializationError) from another cuDNN or GPU, or a graph without its lowering."""
    rec = PlanRecord.from_bytes(data)
    rec.check_compatible(p.device())
    q = lowering_of(p, rec)
    if q is None:
        raise SerializationError(f"{p.label}: the plan was built with the {rec.extra.get('lowering')} lowering, "
                                 "which this graph does not offer")
    p = q
    plan = plan_from_record(p, rec)
    # a graph made only to run the plan binds as the record says
    p.adopt(plan, rec.workspace, rec.plan_name, None if p.graph.nodes else restored_lowering(rec))
    return p


# -- CUDA graphs ------------------------------------------------------------------------------

def cuda_graph_call(p: Pipeline, handle: Any, variant_pack: Mapping[Any, Any], workspace: Any, cuda_graph: Any,
                    update: bool) -> None:
    """Populate (or update) a CUDA graph with the selected plan's work on these buffers."""
    op = "update_cuda_graph" if update else "populate_cuda_graph"
    check_variant_pack(variant_pack, op, "variant_pack")  # the arguments first: no plan or GPU needed to see a mistake
    check_handle_type(handle, op)
    graph_ptr = cuda_graph_pointer(cuda_graph)
    cand = p.plans().require_selected()
    if cand.config is not None and int(behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API) not in {
            int(n) for n in cand.behavior_notes}:
        raise GraphNotSupportedError(f"{p.label}: plan {cand.name} does not support the native CUDA graph API "
                                     "(no SUPPORTS_CUDA_GRAPH_NATIVE_API note); select such a plan with "
                                     "select_behavior_notes([cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API]) "
                                     "before build_plans, or capture execute() with stream capture instead")
    runner = p.runner(cand)
    if any((s.fill is not None or s.zero) and not s.constant for s in runner.slots):
        raise GraphNotSupportedError(f"{p.label}: this graph initialises workspace scratch before each "
                                     "execute, which the native CUDA graph API does not record; capture "
                                     "execute() with stream capture instead")
    entry = runner.prepare(variant_pack, workspace)
    h = as_handle_ptr(handle) if handle is not None else p.handle_ptr()
    backend_plan.populate_cuda_graph(h, runner.plan, entry.pack, graph_ptr, update, p.label)


def cuda_graph_pointer(cuda_graph: Any) -> int:
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
