"""cuDNN handles: one per device (and per thread when shared), bound to a stream.

A handle belongs to the device that was current when it was created; work issued through it
runs there. ``default_handle()`` gives each (device, thread) its own lazily created handle
for APIs called with ``handle=None``, since a handle must not be used by two threads at once.
"""

from __future__ import annotations

import os
import threading
import weakref

from .._lib import capi, cuda, marshal, release
from .._lib.errors import CudnnInitError, DescriptorClosedError, raise_status


class Handle:
    """An owned ``cudnnHandle_t``. ``int(handle)`` is the C pointer.

    ``address`` is the pointer too, read without checks by execute paths (0 once destroyed);
    ``last_stream`` is the stream last set through ``set_stream`` (0 at first)."""

    __slots__ = ("address", "device", "last_stream", "_finalizer", "__weakref__")

    def __init__(self, device: int | None = None) -> None:
        if _forked[0]:
            raise fork_error()
        release.drain()  # a known point: dead handles and plans go before another handle comes
        if device is None or device == cuda.current_device():  # cudnnCreate binds the current device
            status, ptr = marshal.create_handle()
        else:
            previous = cuda.current_device()
            cuda.set_device(device)
            try:
                status, ptr = marshal.create_handle()
            finally:
                cuda.set_device(previous)
        if status:
            where = "the current device" if device is None else f"device {device}"
            raise_status(status, f"creating a cuDNN handle on {where}")
        self.address: int = ptr
        self._finalizer = weakref.finalize(self, release.later, _destroy, ptr)
        self.last_stream = 0
        self.device = cuda.current_device() if device is None else device
        _live.add(self)
        _by_address[ptr] = self
        _created[0] = True
        _alive[0] += 1

    @property
    def ptr(self) -> int:
        """The cudnnHandle_t address (DescriptorClosedError once destroyed)."""
        if not self.address:
            raise closed_error()
        return self.address

    def __int__(self) -> int:
        return self.ptr

    __index__ = __int__

    @property
    def closed(self) -> bool:
        """Whether the handle was destroyed."""
        return not self.address

    def close(self) -> None:
        """Destroy the handle (idempotent)."""
        if self.address:
            _by_address.pop(self.address, None)
        self.address = 0
        release.now(self._finalizer)

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_stream(self, stream: int) -> None:
        """Issue this handle's work on the raw ``cudaStream_t`` ``stream``
        (``cudnn.set_stream`` also takes framework stream objects)."""
        if isinstance(stream, bool) or not isinstance(stream, int):
            raise TypeError(f"Handle.set_stream takes a raw cudaStream_t int, got {type(stream).__name__}; "
                            "cudnn.set_stream(handle, stream) takes framework streams")
        status = capi.graph.cudnnSetStream(self.ptr, stream)
        if status:
            raise_status(status, f"setting stream {stream:#x} on the cuDNN handle of device {self.device}")
        self.last_stream = stream

    @property
    def stream(self) -> int:
        """The stream work is issued on (as cuDNN reports it)."""
        status, stream = marshal.get_stream(self.ptr)
        if status:
            raise_status(status, "getting the stream of a cuDNN handle")
        return stream

    def __repr__(self) -> str:
        state = "destroyed" if self.closed else f"{self.address:#x}"
        return f"<cudnn.Handle device={self.device} {state} stream={self.last_stream:#x}>"


def closed_error() -> Exception:
    """What using a handle with no C pointer raises: destroyed, or inherited across fork()."""
    if _forked[0]:
        return fork_error()
    return DescriptorClosedError("this cuDNN handle was destroyed (destroy_handle / close)")


# -- fork(): a child cannot use the parent's CUDA context ------------------------------------

_live: weakref.WeakSet[Handle] = weakref.WeakSet()  # handles of this process
# address -> open Handle: what a raw int handle may name (an entry goes with close() or the Handle)
_by_address: weakref.WeakValueDictionary[int, Handle] = weakref.WeakValueDictionary()
_raw: set[int] = set()  # handles of cudnn.legacy's cudnnCreate, until its cudnnDestroy
_created = [False]  # this process made a handle: CUDA is initialised
_alive = [0]  # cudnnHandle_t created and not yet destroyed (live_handle_count)
_forked = [False]  # set in a child forked after that


def fork_error() -> CudnnInitError:
    return CudnnInitError(1001, "using cuDNN in a process forked after its parent initialised CUDA",
                          "the CUDA context and cuDNN handles belong to the parent; a forked child cannot use "
                          "the GPU: start workers with multiprocessing's 'spawn' or 'forkserver' method")


def forked() -> bool:
    """Whether this process is a child forked after its parent initialised CUDA (whose CUDA
    objects it must neither use nor destroy)."""
    return _forked[0]


def _after_fork_in_child() -> None:
    """The inherited handles become unusable here (without a CUDA call, which could hang)."""
    if not _created[0]:
        return
    _forked[0] = True
    _alive[0] = 0  # the parent's handles are not this process's to destroy
    _by_address.clear()
    _raw.clear()
    for h in list(_live):
        h._finalizer.detach()  # never cudnnDestroy the parent's handle
        h.address = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def destroy_all_handles() -> int:
    """Destroy every handle of this process still alive, default handles included, and return
    how many: for a clean shutdown (before ``cudaDeviceReset``, or a leak-checked exit)."""
    handles = [h for h in list(_live) if not h.closed]
    for h in handles:
        h.close()
    return len(handles)


def live_handle_count() -> int:
    """How many cuDNN handles this process created and has not destroyed (for leak checks)."""
    return _alive[0]


def _destroy(ptr: int) -> None:
    """A Handle's release: by close(), or by `release.drain` once the Handle was collected."""
    _alive[0] -= 1
    try:
        capi.graph.cudnnDestroy(ptr)
    except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter shutdown)
        pass


def as_handle_ptr(handle: Handle | int | None) -> int:
    """C pointer of a Handle, a raw int handle, or the default handle when None."""
    if handle is None:
        return default_handle().ptr
    if isinstance(handle, Handle):
        return handle.ptr
    if isinstance(handle, int) and not isinstance(handle, bool):
        if handle == 0:
            raise ValueError("a cuDNN handle cannot be 0 (NULL)")
        if not is_live(handle):
            raise unknown_handle_error(handle)
        return int(handle)
    raise TypeError(f"expected a cudnn handle (from cudnn.create_handle()), got {type(handle).__name__}")


def is_live(address: int) -> bool:
    """Whether ``address`` is a cuDNN handle of this process not yet destroyed: one cudnn-py
    created (``cudnn.create_handle``, default handles, ``cudnn.legacy.cudnnCreate``)."""
    return address in _by_address or address in _raw


def unknown_handle_error(address: int) -> Exception:
    """What a raw int that is no live handle of this process raises (cuDNN itself would read
    whatever memory it points at)."""
    if _forked[0]:
        return fork_error()
    return DescriptorClosedError(
        f"{address:#x} is not a live cuDNN handle of this process: cudnn.create_handle() never returned it "
        "(nor cudnn.legacy.cudnnCreate), or it was destroyed since")


def note_raw(address: int, alive: bool) -> None:
    """A handle created (``alive``) or destroyed outside a Handle, by ``cudnn.legacy``."""
    if alive:
        _raw.add(address)
    else:
        _raw.discard(address)


def release_point(handle: int) -> None:
    """Run the queued releases (`cudnn._lib.release`) unless ``handle``'s stream is being
    captured: where cudnn-py starts building for that handle."""
    if release.pending():
        stream = marshal.handle_stream(handle) if handle else 0
        if stream >= 0:
            cuda.release_unless_capturing(stream)


_local = threading.local()


def default_handle(device: int | None = None) -> Handle:
    """This thread's handle for ``device`` (the current device when None), created once."""
    if _forked[0]:
        raise fork_error()
    dev = cuda.current_device() if device is None else device
    handles: dict[int, Handle] | None = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    h = handles.get(dev)
    if h is None or h.closed:
        h = handles[dev] = Handle(dev)
    return h


# -- the documented module-level functions ------------------------------------------------

def create_handle() -> Handle:
    """A new cuDNN handle on the current device."""
    return Handle()


def destroy_handle(handle: Handle | int) -> None:
    """Destroy a handle from create_handle() (idempotent for Handle objects)."""
    if isinstance(handle, Handle):
        handle.close()
        return
    ptr = as_handle_ptr(handle)
    owner = _by_address.get(ptr)
    if owner is not None:  # int(h) of a Handle: destroyed through it, once
        owner.close()
        return
    status = capi.graph.cudnnDestroy(ptr)
    if status:
        raise_status(status, "destroying a cuDNN handle")
    note_raw(ptr, False)


def set_stream(handle: Handle | int, stream: int) -> None:
    """Make ``handle`` issue its work on the raw ``cudaStream_t`` ``stream``."""
    if isinstance(handle, Handle):
        handle.set_stream(stream)
        return
    status = capi.graph.cudnnSetStream(as_handle_ptr(handle), stream)
    if status:
        raise_status(status, f"setting stream {stream:#x} on a cuDNN handle")


def get_stream(handle: Handle | int) -> int:
    """The raw ``cudaStream_t`` ``handle`` issues its work on."""
    if isinstance(handle, Handle):
        return handle.stream
    status, stream = marshal.get_stream(as_handle_ptr(handle))
    if status:
        raise_status(status, "getting the stream of a cuDNN handle")
    return stream
