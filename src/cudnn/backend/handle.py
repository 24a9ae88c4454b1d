"""cuDNN handles: one per device (and per thread when shared), bound to a stream.

A handle belongs to the device that was current when it was created; work issued through it
runs there. ``default_handle()`` gives each (device, thread) its own lazily created handle
for APIs called with ``handle=None``, since a handle must not be used by two threads at once.
cudnnCreate takes tens of milliseconds, and so does cuDNN's opening of its engine libraries at a
process's first finalized descriptor; `prefetch_default_handle` starts both on a helper thread
when a graph is about to be declared, so that they run while Python imports the graph layer.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

from .._lib import attributes, capi, cuda, enums, marshal, release
from .._lib.status import CudnnInitError, DescriptorClosedError, raise_status


class Handle:
    """An owned ``cudnnHandle_t``. ``int(handle)`` is the C pointer.

    ``address`` is the pointer too, read without checks by execute paths (0 once destroyed);
    ``last_stream`` is the stream last set through ``set_stream`` (0 at first)."""

    __slots__ = ("address", "device", "last_stream", "_finalizer", "__weakref__")

    def __init__(self, device: int | None = None, *, drain: bool = True) -> None:
        """A new handle on ``device`` (the current one when None). ``drain=False`` runs none of
        the queued releases first: for a helper thread, which must not release objects another
        thread's capture could still be recording."""
        if _forked[0]:
            raise fork_error()
        if drain:
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
        self._own(ptr, cuda.current_device() if device is None else device)

    @classmethod
    def _adopt(cls, ptr: int, device: int) -> Handle:
        """A Handle owning ``ptr``, a cudnnHandle_t created on ``device`` elsewhere (`_Prefetch`)."""
        h = cls.__new__(cls)
        h._own(ptr, device)
        return h

    def _own(self, ptr: int, device: int) -> None:
        self.address: int = ptr
        self._finalizer = weakref.finalize(self, release.later, _destroy, ptr)
        self.last_stream = 0
        self.device = device
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
    for p in list(_prefetches):
        p.disown()
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
    made = sum(p.discard() for p in list(_prefetches))  # made ahead and never taken
    return len(handles) + made


def live_handle_count() -> int:
    """How many cuDNN handles this process created and has not destroyed (for leak checks)."""
    return _alive[0]


_before_destroy: list[Callable[[], None]] = []  # see `before_destroy`


def before_destroy(hook: Callable[[], None]) -> None:
    """Have ``hook()`` run before each Handle is destroyed: the plan cache waits there for the
    plans it is still serializing (on its writer thread), which may have been built with it."""
    _before_destroy.append(hook)


def _destroy(ptr: int) -> None:
    """A Handle's release: by close(), or by `release.drain` once the Handle was collected."""
    _alive[0] -= 1
    for hook in _before_destroy:
        try:
            hook()
        except Exception:  # noqa: BLE001 - a release must not raise; the handle goes all the same
            pass
    _destroy_raw(ptr)


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
    """This thread's handle for ``device`` (the current device when None), created once (or
    the one `prefetch_default_handle` made)."""
    if _forked[0]:
        raise fork_error()
    dev = cuda.current_device() if device is None else device
    handles: dict[int, Handle] | None = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    h = handles.get(dev)
    if h is None or h.closed:
        h = handles[dev] = _take_prefetched(dev) or Handle(dev)
    return h


def _take_prefetched(device: int) -> Handle | None:
    """The handle `prefetch_default_handle` made for this thread, if it was for ``device`` (and
    is usable here: `_Prefetch.take`); it is then no longer this thread's to take."""
    prefetch: _Prefetch | None = getattr(_local, "prefetch", None)
    if prefetch is None or prefetch.device != device:
        return None
    _local.prefetch = None
    return prefetch.take()


def prefetch_default_handle(last_try: bool = False) -> None:
    """Start making this thread's default handle for its current device on a helper thread,
    when the process has no cuDNN handle yet and this thread has a current CUDA context (a
    framework made one); `default_handle` takes it. Once a process at most; never initialises
    CUDA, never raises: a handle that failed is made again, with its error, where it is needed.
    ``last_try``: whatever the answer, later calls do nothing (asking costs tens of
    microseconds where the driver library is not open, too much for every graph declared).

    A process that made a handle already is not about to wait for one, so none is made for it.
    (``cudnn.create_handle()``, which the official samples call before declaring a graph, imports
    the graph layer before it makes its handle: the first one is then this helper's.)"""
    if _prefetched[0] or _alive[0] or _forked[0]:
        return
    if last_try:
        _prefetched[0] = True
    try:
        context = cuda.live_context()
        if context is None:
            return
        device = cuda.current_device()
        capi.graph.cudnnCreate  # noqa: B018 - binds it (opening libcudnn) here, on the calling thread
    except Exception:  # noqa: BLE001 - no library or no CUDA: the handle is made (and fails) when needed
        return
    _prefetched[0] = True
    _created[0] = True  # CUDA is live in this process: a forked child cannot use it
    _local.prefetch = _Prefetch(context, device)


_prefetched = [False]  # prefetch_default_handle started its one helper, or had its last try


class _Prefetch:
    """A cudnnHandle_t being created on a helper thread, in the context of the thread that asked.

    The helper calls cudnnCreate, then `_open_engine_libraries` (ctypes releases the GIL in
    both); the asking thread wraps the handle in a `Handle` when it takes it. One never taken
    (its thread ended first) is destroyed at the next release point, as a collected Handle is; a
    forked child never destroys it. The finalizer is the ownership: whoever detaches it owns ``ptr``."""

    __slots__ = ("context", "device", "ptr", "_thread", "_finalizer", "__weakref__")

    def __init__(self, context: int, device: int) -> None:
        self.context, self.device, self.ptr = context, device, 0
        self._finalizer: weakref.finalize | None = None
        _prefetches.add(self)
        self._thread = threading.Thread(target=self._create, name="cudnn-py handle", daemon=True)
        self._thread.start()

    def _create(self) -> None:
        try:
            if cuda.make_current(self.context):
                status, ptr = marshal.create_handle()
                if not status and ptr:
                    self.ptr = ptr
                    self._finalizer = weakref.finalize(self, release.later, _destroy_raw, ptr)
                    _open_engine_libraries()
        except Exception:  # noqa: BLE001 - the asking thread makes its handle itself, and reports why it fails
            pass

    def _claim(self) -> bool:
        """Wait for the helper, then own ``ptr``: False when it failed or was claimed before."""
        self._thread.join()
        finalizer, self._finalizer = self._finalizer, None
        return finalizer is not None and finalizer.detach() is not None

    def take(self) -> Handle | None:
        """The handle, owned by a `Handle` now; None when it failed or the asking thread's current
        context is no longer the one it was made in."""
        if not self._claim():
            return None
        if cuda.live_context() != self.context:
            release.later(_destroy_raw, self.ptr)
            return None
        return Handle._adopt(self.ptr, self.device)

    def discard(self) -> bool:
        """Destroy the handle now, unless it failed or was taken (`destroy_all_handles`)."""
        if not self._claim():
            return False
        _destroy_raw(self.ptr)
        return True

    def disown(self) -> None:
        """After fork(): the handle is the parent's, never to be destroyed here."""
        if self._finalizer is not None:
            self._finalizer.detach()


_prefetches: weakref.WeakSet[_Prefetch] = weakref.WeakSet()


def _open_engine_libraries() -> None:
    """Finalize one tensor descriptor, then destroy it: cuDNN opens its engine libraries when a
    process finalizes its first descriptor, which the first graph's lowering would otherwise wait
    for. Plain table values only: the enums may be being built on the importing thread meanwhile.
    A failure is left for the graph's own lowering to meet and report."""
    c = enums.C_ENUMS
    kind, a = c["cudnnBackendAttributeType_t"], attributes.A
    status, ptr = marshal.create_descriptor(c["cudnnBackendDescriptorType_t"]["CUDNN_BACKEND_TENSOR_DESCRIPTOR"])
    if status:
        return
    try:
        for attr, attr_type, values in (
                (a.CUDNN_ATTR_TENSOR_UNIQUE_ID, "CUDNN_TYPE_INT64", (1,)),
                (a.CUDNN_ATTR_TENSOR_DIMENSIONS, "CUDNN_TYPE_INT64", (1, 1, 1, 1)),
                (a.CUDNN_ATTR_TENSOR_STRIDES, "CUDNN_TYPE_INT64", (1, 1, 1, 1)),
                (a.CUDNN_ATTR_TENSOR_DATA_TYPE, "CUDNN_TYPE_DATA_TYPE", (c["cudnnDataType_t"]["CUDNN_DATA_FLOAT"],)),
                (a.CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, "CUDNN_TYPE_INT64", (16,))):
            if marshal.set_plain(ptr, attr, kind[attr_type], values):
                return
        capi.graph.cudnnBackendFinalize(ptr)
    finally:
        capi.graph.cudnnBackendDestroyDescriptor(ptr)


def _destroy_raw(ptr: int) -> None:
    """cudnnDestroy, for a Handle's release and a prefetched cudnnHandle_t that no Handle took."""
    try:
        capi.graph.cudnnDestroy(ptr)
    except Exception:  # noqa: BLE001 - a release must not raise (interpreter shutdown)
        pass


# -- the documented module-level functions ------------------------------------------------

def create_handle() -> Handle:
    """A new cuDNN handle on the current device (the one `prefetch_default_handle` made for this
    thread, when it is there for the current context and no default handle took it)."""
    if getattr(_local, "prefetch", None) is not None:
        made = _take_prefetched(cuda.current_device())
        if made is not None:
            return made
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
