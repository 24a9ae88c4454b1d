"""The few CUDA runtime/driver calls cudnn-py needs, through cuda-bindings, imported lazily
(stream capture goes through the driver with ctypes.PyDLL, whose calls keep the GIL).

Devices, memory (for workspaces and users without a framework), copies, events (timing),
and pointer queries (which device owns a pointer, how large its allocation is) so that a
bad buffer is refused in Python instead of faulting on the GPU. When no GPU is usable,
``diagnose()`` tells apart no driver at all, a driver too old for the CUDA runtime and no
device, and every call that needs one raises ``CudaUnavailableError`` saying which.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from . import release
from .record import Record
from .status import CudaUnavailableError, install_gpu_check


class CudaError(RuntimeError):
    """A CUDA runtime or driver call failed (with a GPU present: a missing GPU or driver raises
    ``CudaUnavailableError`` instead)."""

    def __init__(self, call: str, err: Any) -> None:
        self.call, self.error = call, err
        name = getattr(err, "name", str(err))
        super().__init__(f"{call} failed: {name}{_describe(err)}")


def _describe(err: Any) -> str:
    try:
        rt = runtime()
        if isinstance(err, rt.cudaError_t):
            _, text = rt.cudaGetErrorString(err)
            return f" ({text.decode() if isinstance(text, bytes) else text})"
    except Exception:  # noqa: BLE001 - a description is optional: the caller reports the status either way
        pass
    return ""


@functools.cache
def runtime() -> Any:
    try:
        from cuda.bindings import runtime as rt
    except ImportError as exc:  # pragma: no cover - cuda-bindings is a dependency
        raise ImportError("cudnn-py needs cuda-bindings for CUDA calls: pip install cuda-bindings") from exc
    return rt


@functools.cache
def driver() -> Any:
    from cuda.bindings import driver as drv

    return drv


def _rt(call: str, result: Any) -> Any:
    """Unpack a cuda.bindings runtime or driver result tuple, raising CudaError on failure."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        if int(err) in _NO_GPU_ERRORS:
            d = diagnose()
            if d.reason:
                raise CudaUnavailableError.from_cuda(call, err.name, d.reason, d.detail, d.advice)
        raise CudaError(call, err)
    return rest[0] if len(rest) == 1 else tuple(rest)


# -- devices -------------------------------------------------------------------------------

def device_count() -> int:
    """Number of usable CUDA devices; 0 when there is no driver or no GPU."""
    try:
        err, n = runtime().cudaGetDeviceCount()
    except Exception:  # noqa: BLE001 - cuda-bindings' own errors when libcuda is missing: no device
        return 0
    return int(n) if int(err) == 0 else 0


# cudaError_t values meaning "no usable GPU here" rather than a failed call: initialization,
# stub library, insufficient driver, devices unavailable, no device, driver mismatch, compat.
_NO_GPU_ERRORS = frozenset({3, 34, 35, 46, 100, 803, 804})
_LIBCUDA = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
_library_runtime = 0  # the CUDA runtime libcudnn was built with, once loaded (note_library_runtime)
_NEEDS_GPU = ("cuDNN needs an NVIDIA GPU and its driver; graphs can be declared, validated and printed "
              "without one (graph.validate(), print(graph))")


class GpuDiagnosis(Record):
    """Why no GPU is usable (``reason`` empty when one is), from the CUDA runtime's answers.

    ``reason``: ``"no_driver"`` (libcuda missing), ``"driver_too_old"``, ``"no_device"``,
    ``"cuda_error"`` (another initialization failure) or ``"no_bindings"``. ``detail`` is one
    line saying what was found, ``advice`` what to do. Versions are CUDA's (12040 is 12.4):
    ``driver_version`` the CUDA version the driver supports (0 without a driver),
    ``runtime_version`` the CUDA runtime of cuda-bindings (and of libcudnn once loaded)."""

    __slots__ = ("reason", "detail", "advice", "driver_version", "runtime_version", "device_count")
    frozen = True

    def __init__(self, reason: str, detail: str, advice: str, driver_version: int, runtime_version: int,
                 device_count: int) -> None:
        self.reason, self.detail, self.advice = reason, detail, advice
        self.driver_version, self.runtime_version, self.device_count = driver_version, runtime_version, device_count


def cuda_version_string(version: int) -> str:
    """12040 -> '12.4'."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _version(result: Any) -> int:
    err, value = result
    return int(value or 0) if int(err) == 0 else 0


def _libcuda_error() -> str:
    """'' when the driver library opens, else the loader's reason."""
    try:
        ctypes.CDLL(_LIBCUDA)
    except OSError as exc:
        return str(exc)
    return ""


def diagnose() -> GpuDiagnosis:
    """Tell apart no driver at all, a driver too old for the CUDA runtime, no device, and a usable GPU."""
    try:
        rt = runtime()
    except ImportError as exc:
        return GpuDiagnosis("no_bindings", f"no usable CUDA GPU: {exc}", "pip install cuda-bindings", 0, 0, 0)
    try:
        runtime_version = _version(rt.cudaRuntimeGetVersion())
        driver_version = _version(rt.cudaDriverGetVersion())
        err, n = rt.cudaGetDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cuda-bindings could not reach the runtime at all
        return GpuDiagnosis("cuda_error", f"no usable CUDA GPU: the CUDA runtime failed ({exc})",
                            _NEEDS_GPU, 0, 0, 0)
    count = int(n or 0) if int(err) == 0 else 0
    if count:
        return GpuDiagnosis("", "", "", driver_version, runtime_version, count)
    # libcudnn's own CUDA runtime, once it is loaded, may be newer than cuda-bindings'
    runtime_version = max(runtime_version, _library_runtime)
    code = int(err)
    if driver_version == 0 and (missing := _libcuda_error()):
        return GpuDiagnosis("no_driver", f"no usable CUDA GPU: no NVIDIA driver ({missing})",
                            _NEEDS_GPU + "; install the NVIDIA driver on a machine with a GPU",
                            0, runtime_version, 0)
    if driver_version and (code in (35, 803, 804) or driver_version // 1000 < runtime_version // 1000):
        drv, need = cuda_version_string(driver_version), cuda_version_string(runtime_version)
        major = driver_version // 1000
        alt = f"; or install the CUDA {major} packages (pip install 'cudnn-py[cu{major}]')" \
            if major in (12, 13) and major != runtime_version // 1000 else ""
        return GpuDiagnosis("driver_too_old", f"no usable CUDA GPU: the NVIDIA driver supports CUDA {drv} but the "
                            f"CUDA runtime here is {need}", f"update the NVIDIA driver to one for CUDA "
                            f"{runtime_version // 1000} or newer{alt}", driver_version, runtime_version, 0)
    if code in (0, 100):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return GpuDiagnosis("no_device", f"no usable CUDA GPU: the NVIDIA driver (CUDA "
                            f"{cuda_version_string(driver_version)}) found no GPU{shown}", _NEEDS_GPU,
                            driver_version, runtime_version, 0)
    return GpuDiagnosis("cuda_error", f"no usable CUDA GPU: cudaGetDeviceCount returned {err.name}{_describe(err)}",
                        _NEEDS_GPU, driver_version, runtime_version, 0)


def why_no_gpu() -> str:
    """One line saying why no GPU is usable, or '' when one is (``diagnose()`` has the parts)."""
    return diagnose().detail


def current_device() -> int:
    """The calling thread's CUDA device: the device of its current context when it has one (one
    driver call, no import), else the CUDA runtime's answer."""
    get = _ctx_get_device()
    if get is not None:
        device = ctypes.c_int()
        if get(ctypes.byref(device)) == 0:
            return device.value
    return int(_rt("cudaGetDevice", runtime().cudaGetDevice()))


@functools.cache
def _ctx_get_device() -> Any:
    """The driver's cuCtxGetDevice, or None without a driver library."""
    try:
        fn = ctypes.CDLL(_LIBCUDA).cuCtxGetDevice
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
    return fn


def live_context() -> int | None:
    """The calling thread's current CUDA context, or None when it has none, without loading the
    driver library or initialising CUDA: only a process whose driver is already loaded and
    initialised (by a framework, or by cudnn-py) answers with a context."""
    fns = _context_calls()
    if fns is None:
        return None
    ctx = ctypes.c_void_p()
    if fns[0](ctypes.byref(ctx)) != 0:  # CUDA_ERROR_NOT_INITIALIZED before cuInit
        return None
    return ctx.value or None


def make_current(context: int) -> bool:
    """Make ``context`` (from `live_context`) the calling thread's current context."""
    fns = _context_calls()
    return fns is not None and fns[1](context) == 0


def _context_calls() -> tuple[Any, Any] | None:
    """The driver's cuCtxGetCurrent and cuCtxSetCurrent once this process has the driver
    library open (RTLD_NOLOAD: this never opens it), else None (asked again next time)."""
    if _CONTEXT_CALLS:
        return _CONTEXT_CALLS[0]
    try:
        drv = ctypes.CDLL(_LIBCUDA, mode=os.RTLD_NOLOAD)
    except (OSError, AttributeError):  # not open yet; AttributeError: no RTLD_NOLOAD (Windows)
        return None
    get, put = drv.cuCtxGetCurrent, drv.cuCtxSetCurrent
    get.restype, get.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]
    put.restype, put.argtypes = ctypes.c_int, [ctypes.c_void_p]
    _CONTEXT_CALLS.append((get, put))
    return get, put


_CONTEXT_CALLS: list[tuple[Any, Any]] = []


def set_device(device: int) -> None:
    _rt("cudaSetDevice", runtime().cudaSetDevice(device))


def free_memory() -> int:
    """Bytes free on the calling thread's device (cudaMemGetInfo)."""
    free, _total = _rt("cudaMemGetInfo", runtime().cudaMemGetInfo())
    return int(free)


class DeviceInfo(Record):
    """A device's name, compute capability, SM count and memory in bytes."""

    __slots__ = ("index", "name", "compute_capability", "sm_count", "total_memory")
    frozen = True

    def __init__(self, index: int, name: str, compute_capability: tuple[int, int], sm_count: int,
                 total_memory: int) -> None:
        self.index, self.name, self.compute_capability = index, name, compute_capability
        self.sm_count, self.total_memory = sm_count, total_memory


@functools.cache
def device_info(device: int) -> DeviceInfo:
    p = _rt("cudaGetDeviceProperties", runtime().cudaGetDeviceProperties(device))
    name = p.name.decode(errors="replace") if isinstance(p.name, bytes) else str(p.name)
    return DeviceInfo(device, name.rstrip("\x00"), (p.major, p.minor), p.multiProcessorCount, p.totalGlobalMem)


def synchronize(stream: int | None = None) -> None:
    rt = runtime()
    if stream is None:
        _rt("cudaDeviceSynchronize", rt.cudaDeviceSynchronize())
    else:
        _rt("cudaStreamSynchronize", rt.cudaStreamSynchronize(stream))


# -- memory --------------------------------------------------------------------------------

class DeviceBuffer:
    """Device memory from cudaMalloc, freed exactly once: by close() or `with`, else at the
    next safe point after the object is collected (`release`)."""

    __slots__ = ("ptr", "nbytes", "device", "_finalizer", "__weakref__")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self.device = current_device()
        self.ptr = int(_rt("cudaMalloc", runtime().cudaMalloc(max(self.nbytes, 1))))
        self._finalizer = weakref.finalize(self, release.later, _free, self.ptr)

    def close(self) -> None:
        release.now(self._finalizer)
        self.ptr = 0

    def __int__(self) -> int:
        return self.ptr

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def copy_from_host(self, data: Any, stream: int | None = None) -> None:
        """Copy a host buffer (bytes, numpy array, anything with the buffer protocol)."""
        view = memoryview(data).cast("B")
        if view.nbytes > self.nbytes:
            raise ValueError(f"host data of {view.nbytes} bytes does not fit {self.nbytes}")
        rt = runtime()
        _rt("cudaMemcpy", rt.cudaMemcpy(self.ptr, view, view.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice))

    def copy_to_host(self, out: Any) -> Any:
        view = memoryview(out).cast("B")
        rt = runtime()
        _rt("cudaMemcpy", rt.cudaMemcpy(view, self.ptr, min(view.nbytes, self.nbytes),
                                        rt.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        return out


def filled_buffer(data: bytes, device: int | None = None) -> DeviceBuffer:
    """Device memory on ``device`` (the current one when None) holding ``data``, written before
    this returns. Allocated and copied in relaxed capture mode, on a stream of its own: a
    capture under way (on this thread or another) neither records the copy nor is broken by it."""
    previous = current_device()
    target = previous if device is None else device
    with relaxed_capture_mode():
        switch = target != previous
        if switch:
            set_device(target)
        try:
            buffer = DeviceBuffer(len(data))
            stream = create_stream()
            try:
                copy_host_to_device_async(buffer.ptr, data, stream)
                synchronize(stream)
            finally:
                destroy_stream(stream)
        finally:
            if switch:
                set_device(previous)
    return buffer


def copy_host_to_device_async(dst: int, data: bytes, stream: int) -> None:
    """Queue a copy of ``data`` to device address ``dst`` on ``stream`` (the bytes are
    copied to pinned staging by CUDA before this returns for pageable memory)."""
    rt = runtime()
    _rt("cudaMemcpyAsync", rt.cudaMemcpyAsync(dst, data, len(data), rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                                stream))


def memset_async(dst: int, value: int, nbytes: int, stream: int) -> None:
    """Queue setting ``nbytes`` bytes at device address ``dst`` to ``value`` on ``stream``."""
    _rt("cudaMemsetAsync", runtime().cudaMemsetAsync(dst, value, nbytes, stream))


def repeated_unit(data: bytes) -> tuple[int, int] | None:
    """(size, value) when ``data`` is one 1-, 2- or 4-byte unit repeated (a little-endian value),
    else None: such a fill can be a memset rather than a copy from the host."""
    for size in (1, 2, 4):
        if data and len(data) % size == 0 and data == data[:size] * (len(data) // size):
            return size, int.from_bytes(data[:size], "little")
    return None


def memset_units_async(dst: int, size: int, value: int, count: int, stream: int) -> None:
    """Queue setting ``count`` units of ``size`` bytes (1, 2 or 4; ``dst`` aligned to it) at ``dst``
    to ``value``: a memset, which CUDA graphs capture and which needs no host staging."""
    drv = driver()
    call = {1: drv.cuMemsetD8Async, 2: drv.cuMemsetD16Async, 4: drv.cuMemsetD32Async}[size]
    _rt(call.__name__, call(dst, value, count, stream))


def _free(ptr: int) -> None:
    try:
        runtime().cudaFree(ptr)
    except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter shutdown: nothing to do)
        pass


class PointerInfo(Record):
    """Where a pointer lives: ``device`` (-1 for host memory) and its allocation's ``base`` and
    ``size`` in bytes (0 when unknown)."""

    __slots__ = ("device", "is_device", "base", "size")
    frozen = True

    def __init__(self, device: int, is_device: bool, base: int, size: int) -> None:
        self.device, self.is_device, self.base, self.size = device, is_device, base, size

    @property
    def end(self) -> int:
        return self.base + self.size


def pointer_info(ptr: int) -> PointerInfo:
    """Device and allocation bounds of a pointer (managed and device memory count as device)."""
    rt = runtime()
    attrs = _rt("cudaPointerGetAttributes", rt.cudaPointerGetAttributes(ptr))
    kind = int(attrs.type)
    is_device = kind in (int(rt.cudaMemoryType.cudaMemoryTypeDevice), int(rt.cudaMemoryType.cudaMemoryTypeManaged))
    base, size = ptr, 0
    if is_device:
        try:
            drv = driver()
            b, s = _rt("cuMemGetAddressRange", drv.cuMemGetAddressRange(ptr))
            base, size = int(b), int(s)
        except Exception:  # noqa: BLE001 - bounds unknown (size 0): the caller then skips the bounds check
            pass
    return PointerInfo(int(attrs.device) if is_device else -1, is_device, base, size)


# -- events and streams --------------------------------------------------------------------

class Event:
    """A CUDA event for timing; destroyed once."""

    __slots__ = ("handle", "_finalizer", "__weakref__")

    def __init__(self) -> None:
        self.handle = _rt("cudaEventCreate", runtime().cudaEventCreate())
        self._finalizer = weakref.finalize(self, release.later, _destroy_event, self.handle)

    def record(self, stream: int = 0) -> None:
        _rt("cudaEventRecord", runtime().cudaEventRecord(self.handle, stream))

    def synchronize(self) -> None:
        _rt("cudaEventSynchronize", runtime().cudaEventSynchronize(self.handle))

    def elapsed_ms(self, end: Event) -> float:
        return float(_rt("cudaEventElapsedTime", runtime().cudaEventElapsedTime(self.handle, end.handle)))

    def query(self) -> bool:
        """Whether the work before the event's latest record has run (it never waits)."""
        rt = runtime()
        result = rt.cudaEventQuery(self.handle)
        err = result[0] if isinstance(result, tuple) else result
        if err == rt.cudaError_t.cudaErrorNotReady:
            return False
        _rt("cudaEventQuery", result)
        return True


def _destroy_event(handle: Any) -> None:
    try:
        runtime().cudaEventDestroy(handle)
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass


def create_stream() -> int:
    rt = runtime()
    s = _rt("cudaStreamCreateWithFlags", rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
    return int(s)


def destroy_stream(stream: int) -> None:
    _rt("cudaStreamDestroy", runtime().cudaStreamDestroy(stream))


# -- CUDA graphs (a plan's execute captured once, launched many times) ----------------------

def capture_graph(stream: int, work: Callable[[], int], read: Callable[[int], Any] | None = None) -> tuple[int, Any]:
    """Capture what ``work()`` enqueues on ``stream`` and instantiate it: the executable graph's
    handle (an int, for `destroy_graph_exec`), or 0 when ``work`` returned a nonzero status, the
    capture failed, or the graph holds anything but kernels and memsets (`REPLAYABLE_NODES`);
    and what ``read(graph)`` made of the graph before it was instantiated (None without ``read``
    or without an executable).

    The capture is thread-local (a call of this thread that is unsafe inside a capture, such as
    a synchronization, a legacy-stream launch or an allocation, fails instead of running, and
    the capture with it) and is made holding the GIL: beginning it, ``work()`` (which must make
    only calls that keep the GIL, see `capi.execute_holding_gil`) and ending it, so no other
    Python thread issues CUDA work while it is open. cuDNN shares state between its handles,
    and another thread's cuDNN call inside that window fails. A finalizer the garbage collector
    runs inside the window only queues its release (`release`)."""
    drv = _driver_holding_gil()
    if drv.cuStreamBeginCapture_v2(stream, _CAPTURE_THREAD_LOCAL):
        return 0, None
    status, err, graph = 1, 1, ctypes.c_void_p()
    try:
        status = work()
    finally:
        err = drv.cuStreamEndCapture(stream, ctypes.byref(graph))  # always ends it, whatever work() did
    if err or status:
        if graph.value:
            drv.cuGraphDestroy(graph)
        return 0, None
    executable, made = ctypes.c_void_p(), None
    try:
        if set(graph_node_types(graph.value or 0)) - REPLAYABLE_NODES:
            return 0, None
        err = drv.cuGraphInstantiateWithFlags(ctypes.byref(executable), graph, 0)
        if not err and read is not None:
            made = read(graph.value or 0)
    finally:
        drv.cuGraphDestroy(graph)
    return (0, None) if err else (executable.value or 0, made)


# CUgraphNodeType values a replay may hold: kernels and memsets, which read and write only the
# device memory their parameters name. Copies (which may read host memory that the library
# rewrites at every execute), host callbacks, events, allocations and child or conditional
# graphs would make a replay differ from the execute it stands for: such packs are executed.
GRAPH_NODE_KERNEL, GRAPH_NODE_MEMSET, GRAPH_NODE_EMPTY = 0, 2, 5
REPLAYABLE_NODES = frozenset({GRAPH_NODE_KERNEL, GRAPH_NODE_MEMSET, GRAPH_NODE_EMPTY})


def graph_node_types(graph: int) -> list[int]:
    """The CUgraphNodeType of every node of the (not instantiated) CUDA graph ``graph``."""
    drv = _driver_holding_gil()
    count = ctypes.c_size_t(0)
    if drv.cuGraphGetNodes(graph, None, ctypes.byref(count)):
        return [-1]
    nodes = (ctypes.c_void_p * max(count.value, 1))()
    if drv.cuGraphGetNodes(graph, nodes, ctypes.byref(count)):
        return [-1]
    kind = ctypes.c_int(-1)

    def node_type(node: int | None) -> int:
        return -1 if drv.cuGraphNodeGetType(node, ctypes.byref(kind)) else kind.value

    return [node_type(node) for node in nodes[:count.value]]


_CAPTURE_THREAD_LOCAL = 1  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


@functools.cache
def _driver_holding_gil() -> ctypes.PyDLL:
    """The driver's stream-capture calls through ctypes.PyDLL, which keeps the GIL during a call
    (cuda-bindings releases it); OSError without a driver library."""
    drv = ctypes.PyDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    p = ctypes.c_void_p
    for name, args in (("cuStreamBeginCapture_v2", [p, ctypes.c_int]), ("cuStreamEndCapture", [p, p]),
                       ("cuGraphInstantiateWithFlags", [p, p, ctypes.c_ulonglong]), ("cuGraphDestroy", [p]),
                       ("cuGraphGetNodes", [p, p, p]), ("cuGraphNodeGetType", [p, p]),
                       ("cuStreamIsCapturing", [p, p]), ("cuThreadExchangeStreamCaptureMode", [p])):
        fn = getattr(drv, name)
        fn.restype, fn.argtypes = ctypes.c_int, args
    return drv


def destroy_graph_exec(executable: int) -> None:
    """Destroy an executable graph (one still running is freed when it completes). Called by
    `release.drain`, never from a finalizer."""
    try:
        driver().cuGraphExecDestroy(executable)
    except Exception:  # noqa: BLE001 - a release must not raise (the context may be gone at exit)
        pass


def stream_capturing(stream: int) -> bool:
    """Whether ``stream`` is being captured (the legacy stream: whether a capture makes using it
    an error); True too when the driver refuses the question, False with no usable driver.
    One driver call through ctypes: the first release point of a process would otherwise import
    cuda-bindings' driver module (tens of milliseconds) for it."""
    try:
        drv = _driver_holding_gil()
    except OSError:  # no driver library: nothing is being captured
        return False
    status = ctypes.c_int(0)
    err = drv.cuStreamIsCapturing(stream, ctypes.byref(status))
    return bool(err) or bool(status.value)


_CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED


@contextlib.contextmanager
def relaxed_capture_mode() -> Iterator[None]:
    """This thread's stream-capture mode relaxed for the block (cuThreadExchangeStreamCaptureMode),
    then set back: for calls a helper thread makes for nobody's capture (the plan cache's writer
    reading a plan's JSON from cuDNN), which must not invalidate a capture another thread has
    under way in the global mode (torch.cuda.graph's default). Nothing happens without a driver."""
    try:
        drv = _driver_holding_gil()
    except OSError:
        yield
        return
    mode = ctypes.c_int(_CAPTURE_RELAXED)
    failed = drv.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))  # mode: the previous one now
    try:
        yield
    finally:
        if not failed:
            drv.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))


def release_unless_capturing(stream: int) -> int:
    """Run the queued releases (`release.drain`) unless ``stream`` is being captured, where a
    release could break the capture; how many ran. For the points where cudnn-py builds plans
    or captures a pack."""
    if not release.pending() or stream_capturing(stream):
        return 0
    return release.drain()


def graph_calls() -> tuple[Callable[[int, int], Any], Callable[[int], Any], Callable[[int], Any]]:
    """cuda-bindings' ``cuGraphLaunch(executable, stream) -> (CUresult,)``,
    ``cuStreamIsCapturing(stream) -> (CUresult, status)`` and ``cuStreamQuery(stream) ->
    (CUresult,)``, for hot paths that read the results themselves (each is falsy on success /
    not capturing / nothing left to run on the stream).

    cuda-bindings resolves its driver symbols at its first driver call, running Python code
    under a lock of its own that a nested call waits for: that first call is made here, at a
    point cudnn-py chooses, rather than at whichever launch comes first."""
    drv = driver()
    drv.cuDriverGetVersion()
    return drv.cuGraphLaunch, drv.cuStreamIsCapturing, drv.cuStreamQuery


def _gpu_problem() -> tuple[str, str, str] | None:
    """For errors.raise_status: (reason, detail, advice) when no GPU is usable, else None."""
    d = diagnose()
    return (d.reason, d.detail, d.advice) if d.reason else None


def note_library_runtime(version: int) -> None:
    """Called by the loader once libcudnn is open: the CUDA runtime version it was built with,
    which ``diagnose`` reports when it is newer than cuda-bindings' (0 until then)."""
    global _library_runtime
    _library_runtime = int(version)


# cuDNN reports a missing GPU as CUDNN_STATUS_NOT_INITIALIZED (1xxx) or as a sub-library load
# failure: with no usable GPU those raise CudaUnavailableError saying why.
install_gpu_check(_gpu_problem)
