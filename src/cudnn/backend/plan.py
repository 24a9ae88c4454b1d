"""Execution plans, variant packs, and execution.

`VariantPack` is built once per set of device pointers; `execute` is one C call with
pointers prepared ahead, which is what keeps the per-call cost of a graph near the bare
``cudnnBackendExecute``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence

from .._lib import capi
from .._lib.attributes import A
from .._lib.enums import cudnnBackendAttributeType_t as T
from .._lib.enums import cudnnBackendDescriptorType_t as D
from .._lib.status import raise_status
from .descriptor import BareDescriptor, Descriptor, create_raw, destroy_raw
from .handle import Handle

_INT64, _POINTER = ctypes.c_int64, ctypes.c_void_p
_UIDS, _POINTERS = int(A.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), int(A.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)
_WORKSPACE = int(A.CUDNN_ATTR_VARIANT_PACK_WORKSPACE)
_T_INT64, _T_POINTER = int(T.CUDNN_TYPE_INT64), int(T.CUDNN_TYPE_VOID_PTR)


def execution_plan(handle: Handle | int, engine_config: Descriptor, label: str = "",
                   kernel_cache: Descriptor | None = None, device_property: Descriptor | None = None,
                   retention: int | None = None) -> Descriptor:
    """A finalized EXECUTION_PLAN for ``engine_config`` (this is where kernels compile);
    a finalized kernel cache lets runtime-compiled engines reuse kernels across shapes.
    ``device_property`` (DEVICEPROP) builds it for a described device; a handle of 0 sets none.
    ``retention``: a cudnnCudaGraphRetention_t value (cuDNN >= 9.28 only), None to leave it unset."""
    return plan_descriptor(handle, engine_config, label, kernel_cache, device_property, retention).finalize()


def plan_descriptor(handle: Handle | int, engine_config: Descriptor, label: str = "",
                    kernel_cache: Descriptor | None = None, device_property: Descriptor | None = None,
                    retention: int | None = None) -> Descriptor:
    """`execution_plan` less its finalize: every attribute set, nothing compiled. Setting
    attributes counts holders of shared descriptors (the kernel cache), so it stays on one
    thread; only the finalize may run on another (_graph/plans/threads.py)."""
    plan = Descriptor(D.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, label)
    try:
        if int(handle):
            plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_HANDLE, int(handle), T.CUDNN_TYPE_HANDLE)
        if device_property is not None:
            plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, device_property)
        set_retention(plan, retention)
        plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, engine_config)
        if kernel_cache is not None:
            plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, kernel_cache)
    except BaseException:
        plan.close()
        raise
    return plan


def plan_from_json(handle: Handle | int, text: str, label: str = "",
                   device_property: Descriptor | None = None, kernel_cache: Descriptor | None = None,
                   retention: int | None = None) -> Descriptor:
    """A finalized EXECUTION_PLAN rebuilt from its JSON (see `plan_json`): no heuristics,
    no operation graph needed. ``device_property`` / a handle of 0 / ``retention``: as in
    `execution_plan` (the JSON holds neither DEVICEPROP nor the retention: they describe the
    process using the plan); a kernel cache that holds the plan's kernels spares their compilation."""
    plan = Descriptor(D.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, label)
    if int(handle):
        plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_HANDLE, int(handle), T.CUDNN_TYPE_HANDLE)
    if device_property is not None:
        plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, device_property)
    set_retention(plan, retention)
    if kernel_cache is not None:
        plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, kernel_cache)
    plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, text.encode() + b"\0", T.CUDNN_TYPE_CHAR)
    return plan.finalize()


def set_retention(plan: Descriptor, retention: int | None) -> None:
    """Set CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION (cuDNN >= 9.28: the caller checks) on an
    unfinalized plan: how CUDA graphs recorded from it keep its resources alive. None sets
    nothing: cuDNN then follows CUDNN_CUDA_GRAPH_RETENTION, else PER_GRAPH."""
    if retention is not None:
        plan.set(A.CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION, int(retention), T.CUDNN_TYPE_CUDA_GRAPH_RETENTION)


def cuda_graph_retention(plan: Descriptor) -> int:
    """The retention mode in effect for a finalized plan (cuDNN >= 9.28), as a cudnnCudaGraphRetention_t value."""
    return int(plan.get(A.CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION, T.CUDNN_TYPE_CUDA_GRAPH_RETENTION))


def workspace_size(plan: Descriptor) -> int:
    return int(plan.get(A.CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, T.CUDNN_TYPE_INT64))


# Held while cuDNN writes a plan's JSON: cuDNN makes it on the first read and keeps it in the
# plan, and the plan cache's writer thread reads it while another thread may serialize the same
# plan. A list, so that a forked child takes a fresh lock (the parent's writer may hold it).
_json_lock = [threading.Lock()]


def _fresh_json_lock() -> None:
    _json_lock[0] = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_json_lock)


def plan_json(plan: Descriptor) -> str:
    """The backend's JSON text of a plan (used for serialization and plan names); any thread
    may ask, one at a time."""
    with _json_lock[0]:
        values = plan.get_array(A.CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, T.CUDNN_TYPE_CHAR)
    return values[0] if values else ""


class PackLayout:
    """The uids of a plan's variant packs, fixed once (their C array built once), so a pack for
    new addresses (every call, when an allocator hands out other blocks) is four backend calls:
    create, two attributes and the workspace, finalize. Pointers are ints (or None for NULL):
    anything else raises TypeError."""

    __slots__ = ("uids", "label", "_uid_array", "_pointers", "_set", "_finalize")

    def __init__(self, uids: Sequence[int], label: str = "") -> None:
        self.uids = tuple(uids)
        self.label = label
        self._uid_array = (_INT64 * len(self.uids))(*self.uids)
        self._pointers = _POINTER * len(self.uids)  # kept: ctypes holds array types only weakly
        self._set = capi.graph.cudnnBackendSetAttribute
        self._finalize = capi.graph.cudnnBackendFinalize

    def make(self, pointers: Sequence[int], workspace: int = 0) -> int:
        """The address of a finalized VARIANT_PACK binding the uids, in order, to ``pointers``;
        the caller owns it and destroys it with `destroy_pack`."""
        n = len(self.uids)
        if len(pointers) != n:
            raise ValueError(f"{n} uids but {len(pointers)} pointers")
        ptr = create_raw(D.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        set_ = self._set
        try:
            status = (set_(ptr, _UIDS, _T_INT64, n, self._uid_array)
                      or set_(ptr, _POINTERS, _T_POINTER, n, self._pointers(*pointers))
                      or set_(ptr, _WORKSPACE, _T_POINTER, 1, ctypes.byref(_POINTER(workspace)))
                      or self._finalize(ptr))
        except BaseException:
            destroy_raw(ptr)
            raise
        if status:
            destroy_raw(ptr)
            where = f"{self.label}: " if self.label else ""
            raise_status(status, f"{where}making a VARIANT_PACK descriptor for {n} tensors")
        return ptr

    def make_owned(self, pointers: Sequence[int], workspace: int = 0) -> BareDescriptor:
        """`make`, the pack owned by the returned object (destroyed with it)."""
        return BareDescriptor(self.make(pointers, workspace))


destroy_pack = destroy_raw  # what `PackLayout.make` gives back is destroyed with this


def variant_pack(uids: Sequence[int], pointers: Sequence[int], workspace: int = 0,
                 label: str = "") -> BareDescriptor:
    """A finalized VARIANT_PACK binding tensor uids to device pointers, destroyed with the object."""
    return PackLayout(uids, label).make_owned(pointers, workspace)


def populate_cuda_graph(handle: Handle | int, plan: Descriptor, pack: Descriptor | BareDescriptor, cuda_graph: int,
                        update: bool = False, label: str = "") -> None:
    """Add the plan's kernels to a CUDA graph (or update them with a new pack's pointers)."""
    fn = capi.graph.cudnnBackendUpdateCudaGraph if update else capi.graph.cudnnBackendPopulateCudaGraph
    status = fn(int(handle), plan.ptr, pack.ptr, int(cuda_graph))
    if status:
        doing = "updating" if update else "populating"
        raise_status(status, f"{label + ': ' if label else ''}{doing} a CUDA graph")


def execute(handle: Handle | int, plan: Descriptor, pack: Descriptor | BareDescriptor, label: str = "") -> None:
    """Run ``plan`` on the handle's stream with the pointers of ``pack``."""
    status = capi.graph.cudnnBackendExecute(int(handle), plan.ptr, pack.ptr)
    if status:
        raise_status(status, f"{label + ': ' if label else ''}executing the plan")
