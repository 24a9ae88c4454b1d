"""Executing a built plan: from a variant pack of tensors to one ``cudnnBackendExecute``.

A call with the same buffer objects as an earlier one is a dict lookup and one C call:
the backend variant pack for that set of objects was made (and the buffers checked) the
first time. Cache entries hold weak references and vanish when a buffer object dies, so an
id can never be confused with a new object's. Raw int pointers key by value. A torch tensor
can be re-pointed in place (``set_``, a growing ``resize_``, ``.data =``): its address is read
again on every call, and a tensor that moved is checked again.
"""

from __future__ import annotations

import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import compress
from typing import Any

from .._lib import capi, cuda
from .._lib.enums import data_type
from .._lib.errors import DescriptorClosedError, raise_status
from .._lib.host import HostScalar
from ..backend import plan as backend_plan
from ..backend.descriptor import Descriptor
from ..backend.handle import as_handle_ptr
from .errors import ExecutionInputError
from .tensor import Tensor

_CACHE_SIZE = 8


@dataclass
class Binding:
    """A non-virtual tensor of the built graph: what a buffer for it must look like."""

    uid: int
    tensor: Tensor
    node: str  # 'conv_fprop 'conv2d'' - for messages
    port: str
    constant: HostScalar | None = None  # graph-carried by-value constant

    @property
    def label(self) -> str:
        return f"{self.node}: {self.port} tensor {self.tensor.label()} (uid {self.uid})"


class _Entry:
    """A finalized backend variant pack and the host scalars it points at."""

    __slots__ = ("pack", "pack_ptr", "keep")

    def __init__(self, pack: Descriptor, keep: list[Any]) -> None:
        self.pack = pack
        self.pack_ptr = pack.ptr
        self.keep = keep


class _Seen:
    """A cache hit: the entry, and which buffers are torch tensors (``mask``) at what addresses."""

    __slots__ = ("entry", "mask", "ptrs")

    def __init__(self, entry: _Entry, values: list[Any]) -> None:
        self.entry = entry
        torch = sys.modules.get("torch")
        mask = tuple(torch is not None and isinstance(v, torch.Tensor) for v in values)
        self.mask = mask if any(mask) else None
        self.ptrs = tuple(v.data_ptr() for v in compress(values, mask)) if self.mask else ()

    def moved(self, values: Iterable[Any]) -> bool:
        """Whether a torch tensor among ``values`` (the same objects) now points elsewhere."""
        return tuple(v.data_ptr() for v in compress(values, self.mask)) != self.ptrs  # type: ignore[arg-type]


class Runner:
    """Runs one execution plan; made at build time, used by every execute()."""

    __slots__ = ("label", "plan", "plan_ptr", "workspace_size", "device", "default_handle", "by_uid",
                 "by_tensor", "required", "_cache", "_refs", "_packs", "backend_execute", "candidate", "__weakref__")

    def __init__(self, label: str, plan: Descriptor, workspace_size: int, bindings: list[Binding],
                 default_handle: Any, device: int | None) -> None:
        self.label = label
        self.plan = plan
        self.plan_ptr = plan.ptr
        self.workspace_size = workspace_size
        self.device = device
        self.default_handle = default_handle  # a Handle, or an int cudnnHandle_t
        self.by_uid = {b.uid: b for b in bindings}
        self.by_tensor = {id(b.tensor): b for b in bindings}
        self.required = [b for b in bindings if b.constant is None]
        self._cache: OrderedDict[tuple[Any, ...], _Seen] = OrderedDict()  # by buffer identity
        self._refs: dict[tuple[Any, ...], list[Any]] = {}  # weak references behind each identity key
        self._packs: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()  # by addresses
        self.backend_execute = capi.graph.cudnnBackendExecute

    # -- the hot path -----------------------------------------------------------------------

    def run(self, variant_pack: Mapping[Any, Any], workspace: Any, handle: Any) -> None:
        seen = self._cache.get((*map(id, variant_pack.values()), id(workspace)))
        if seen is None or (seen.mask is not None and seen.moved((*variant_pack.values(), workspace))):
            entry = self.entry_for(variant_pack, workspace)
        else:
            entry = seen.entry
        if handle is None:
            handle = self.default_handle
        try:
            h = handle if type(handle) is int else handle._ptr
        except AttributeError:
            h = as_handle_ptr(handle)  # a clear TypeError for anything else
        status = self.backend_execute(h, self.plan_ptr, entry.pack_ptr)
        if status:
            self.failed(status, handle)

    def failed(self, status: int, handle: Any) -> None:
        """Raise for a failed ``cudnnBackendExecute``."""
        if getattr(handle, "closed", False):
            raise handle_closed_error()
        raise_status(status, f"{self.label}: executing the plan")

    # -- the first call with a set of buffers ------------------------------------------------

    def entry_for(self, variant_pack: Mapping[Any, Any], workspace: Any) -> _Entry:
        """The backend variant pack for these buffers, checking them the first time they are seen."""
        values = [*variant_pack.values(), workspace]
        stable = _stable_key(values)
        seen = self._cache.get(stable if stable is not None else tuple(map(id, values)))
        if seen is not None and (seen.mask is None or not seen.moved(values)):
            return seen.entry
        entry = self._prepare(variant_pack, workspace)
        self._remember(values, stable, entry)
        return entry

    def _prepare(self, variant_pack: Mapping[Any, Any], workspace: Any) -> _Entry:
        uids: list[int] = []
        ptrs: list[int] = []
        keep: list[Any] = []
        seen: set[int] = set()
        for key, value in variant_pack.items():
            if key is None:
                continue
            binding = self._binding(key)
            if binding.uid in seen:
                raise ExecutionInputError(f"{self.label}: {binding.label} is given twice in the variant pack")
            seen.add(binding.uid)
            ptr, scalar = self._pointer(binding, value)
            if scalar is not None:
                keep.append(scalar)
            uids.append(binding.uid)
            ptrs.append(ptr)
        missing = [b.label for b in self.required if b.uid not in seen]
        if missing:
            raise ExecutionInputError(f"{self.label}: the variant pack lacks " + "; ".join(missing))
        for b in self.by_uid.values():
            if b.constant is not None and b.uid not in seen:
                uids.append(b.uid)
                ptrs.append(b.constant.ptr)
                keep.append(b.constant)
        workspace_ptr = self._workspace_pointer(workspace)
        # New buffer objects often sit where earlier ones were (framework allocators reuse
        # blocks): reuse the backend pack made for those addresses.
        by_address = (tuple(uids), tuple(ptrs), workspace_ptr)
        entry = self._packs.get(by_address)
        if entry is None:
            entry = _Entry(backend_plan.variant_pack(uids, ptrs, workspace_ptr, self.label), keep)
            self._packs[by_address] = entry
            while len(self._packs) > _CACHE_SIZE:
                self._packs.popitem(last=False)
        return entry

    def _remember(self, values: list[Any], stable: tuple[Any, ...] | None, entry: _Entry) -> None:
        """Cache by object identity while every object lives (weak references evict the entry
        when one dies, so an id is never mistaken for a newer object's); int pointers key by value."""
        key = stable if stable is not None else tuple(map(id, values))
        refs = []
        evict = self._evictor(key)
        try:
            for v in values:
                if type(v) is not int and v is not None:
                    refs.append(weakref.ref(v, evict))
        except TypeError:
            return  # an object without weak references: not cached, checked on every call
        self._cache[key] = _Seen(entry, values)
        self._refs[key] = refs
        while len(self._cache) > _CACHE_SIZE:
            old, _ = self._cache.popitem(last=False)
            self._refs.pop(old, None)

    def _evictor(self, key: tuple[Any, ...]) -> Callable[[Any], None]:
        runner_ref = weakref.ref(self)

        def evict(_: Any) -> None:
            runner = runner_ref()
            if runner is not None:
                runner._cache.pop(key, None)
                runner._refs.pop(key, None)

        return evict

    def _binding(self, key: Any) -> Binding:
        if isinstance(key, Tensor):
            binding = self.by_tensor.get(id(key))
            if binding is None:
                what = "an intermediate (virtual) tensor" if key.get_is_virtual() else "not a tensor of this graph"
                raise ExecutionInputError(f"{self.label}: variant pack key {key.label()} is {what}")
            return binding
        if isinstance(key, int) and not isinstance(key, bool):
            binding = self.by_uid.get(key)
            if binding is None:
                raise ExecutionInputError(f"{self.label}: variant pack key uid {key} is not a uid of this graph "
                                          f"(known: {sorted(self.by_uid)})")
            return binding
        raise ExecutionInputError(f"{self.label}: variant pack keys must be cudnn.tensor objects or int uids, "
                                  f"got {type(key).__name__}")

    def _pointer(self, b: Binding, value: Any) -> tuple[int, HostScalar | None]:
        t = b.tensor
        if t.get_is_pass_by_value():
            if isinstance(value, (int, float, bool)) and not isinstance(value, type(None)):
                scalar = HostScalar(value, t.get_data_type())
                return scalar.ptr, scalar
            info = self._describe(b, value)
            if info.device_type not in ("cpu", "cuda_host"):
                raise ExecutionInputError(f"{self.label}: {b.label} is passed by value and needs a host "
                                          f"tensor or a Python number, got memory on {info.device_type}")
            self._check_layout(b, info)
            return info.ptr, None
        if type(value) is int:
            self._check_raw_pointer(b.label, value, _needed_bytes(t))
            return value, None
        info = self._describe(b, value)
        if info.device_type not in ("cuda", "cuda_managed"):
            raise ExecutionInputError(f"{self.label}: {b.label} must be in GPU memory, got a "
                                      f"{info.framework} tensor on {info.device_type}")
        if self.device is not None and info.device_id != self.device:
            raise ExecutionInputError(f"{self.label}: {b.label} is on cuda:{info.device_id} but the graph was "
                                      f"built for cuda:{self.device}")
        self._check_layout(b, info)
        if info.ptr % t.get_alignment():
            raise ExecutionInputError(f"{self.label}: {b.label} starts at {info.ptr:#x}, which is not "
                                      f"{t.get_alignment()}-byte aligned")
        return info.ptr, None

    def _describe(self, b: Binding, value: Any) -> Any:
        from ..interop import tensors as interop

        try:
            return interop.describe(value)
        except (TypeError, ValueError, BufferError) as exc:
            raise ExecutionInputError(f"{self.label}: {b.label}: {exc}") from None

    def _check_layout(self, b: Binding, info: Any) -> None:
        t = b.tensor
        if t.get_data_type() == data_type.BOOLEAN:  # bit-packed masks: any bytes, enough of them
            needed = _needed_bytes(t)
            have = info.extent_bytes if info.extent_bytes is not None else info.needed_bytes
            if have < needed:
                raise ExecutionInputError(f"{self.label}: {b.label} is a bit-packed BOOLEAN mask of "
                                          f"{t.element_count()} elements needing {needed} bytes; the buffer has {have}")
            return
        if info.dtype != t.get_data_type():
            raise ExecutionInputError(f"{self.label}: {b.label} expects {t.get_data_type().name} data, "
                                      f"got {info.framework} {info.dtype.name}")
        dims, strides = t.get_dim(), t.get_stride()
        if (list(info.shape), list(info.strides)) != (dims, strides) and \
                _squeezed(info.shape, info.strides) != _squeezed(dims, strides):
            raise ExecutionInputError(f"{self.label}: {b.label} expects dims {dims} strides {strides}, got a "
                                      f"buffer with shape {list(info.shape)} strides {list(info.strides)}")
        needed = _needed_bytes(t)
        if info.extent_bytes is not None and info.extent_bytes < needed:
            raise ExecutionInputError(f"{self.label}: {b.label} needs {needed} bytes for dims {dims} strides "
                                      f"{strides}; the buffer has {info.extent_bytes}")

    def _check_raw_pointer(self, label: str, ptr: int, needed: int) -> None:
        if ptr <= 0:
            raise ExecutionInputError(f"{self.label}: {label}: pointer {ptr} is not a device address")
        try:
            where = cuda.pointer_info(ptr)
        except Exception:
            return  # memory CUDA cannot describe (e.g. from a foreign allocator): trust the caller
        if not where.is_device:
            raise ExecutionInputError(f"{self.label}: {label}: {ptr:#x} is not GPU memory")
        if self.device is not None and where.device != self.device:
            raise ExecutionInputError(f"{self.label}: {label}: {ptr:#x} is on cuda:{where.device}, the graph "
                                      f"on cuda:{self.device}")
        if where.size and where.end < ptr + needed:
            raise ExecutionInputError(f"{self.label}: {label} needs {needed} bytes at {ptr:#x}; its allocation "
                                      f"ends {where.end - ptr} bytes after it")

    def _workspace_pointer(self, workspace: Any) -> int:
        need = self.workspace_size
        if workspace is None:
            if need:
                raise ExecutionInputError(f"{self.label}: the plan needs a workspace of {need} bytes; got None")
            return 0
        if type(workspace) is int:
            if need:
                self._check_raw_pointer("workspace", workspace, need)
            return workspace
        from ..interop import tensors as interop

        try:
            info = interop.describe(workspace)
        except (TypeError, ValueError, BufferError) as exc:
            raise ExecutionInputError(f"{self.label}: workspace: {exc}") from None
        size = info.extent_bytes if info.extent_bytes is not None else info.needed_bytes
        if size < need:
            raise ExecutionInputError(f"{self.label}: the workspace has {size} bytes; the plan needs {need}")
        if need and info.device_type not in ("cuda", "cuda_managed"):
            raise ExecutionInputError(f"{self.label}: the workspace must be GPU memory, got {info.device_type}")
        return info.ptr


def handle_closed_error() -> DescriptorClosedError:
    return DescriptorClosedError("this cuDNN handle was destroyed (destroy_handle / close)")


def _stable_key(values: list[Any]) -> tuple[Any, ...] | None:
    """A key for packs holding raw int pointers (compared by value), else None.

    None needs no such key: it is a singleton, so its id is stable."""
    if not any(type(v) is int for v in values):
        return None
    return tuple(("ptr", v) if type(v) is int else id(v) for v in values)


def _needed_bytes(t: Tensor) -> int:
    """Bytes the tensor's dims and strides reach (sub-byte types count packed bits)."""
    from ..interop.tensors import nbytes

    span = sum((d - 1) * s for d, s in zip(t.get_dim(), t.get_stride())) + 1
    return nbytes(t.get_data_type(), span)


def _squeezed(dims: Any, strides: Any) -> list[tuple[int, int]]:
    return [(int(d), int(s)) for d, s in zip(dims, strides) if d != 1]
