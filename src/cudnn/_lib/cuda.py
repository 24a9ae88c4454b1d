"""The few CUDA runtime/driver calls cudnn-py needs, through cuda-bindings, imported lazily.

Devices, memory (for workspaces and users without a framework), copies, events (timing),
and pointer queries (which device owns a pointer, how large its allocation is) so that a
bad buffer is refused in Python instead of faulting on the GPU.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any

from .errors import install_hint


class CudaError(RuntimeError):
    """A CUDA runtime or driver call failed."""

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
    except Exception:
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
        raise CudaError(call, err)
    return rest[0] if len(rest) == 1 else tuple(rest)


# -- devices -------------------------------------------------------------------------------

def device_count() -> int:
    """Number of usable CUDA devices; 0 when there is no driver or no GPU."""
    try:
        err, n = runtime().cudaGetDeviceCount()
    except Exception:
        return 0
    return int(n) if int(err) == 0 else 0


def why_no_gpu() -> str:
    """One line saying why no GPU is usable, or '' when one is."""
    try:
        err, n = runtime().cudaGetDeviceCount()
    except Exception as exc:
        return f"CUDA runtime unavailable: {exc}"
    if int(err) != 0:
        return f"no usable CUDA GPU: cudaGetDeviceCount returned {err.name}{_describe(err)}"
    if n == 0:
        return "no CUDA GPU found (cudaGetDeviceCount returned 0)"
    return ""


def current_device() -> int:
    return int(_rt("cudaGetDevice", runtime().cudaGetDevice()))


def set_device(device: int) -> None:
    _rt("cudaSetDevice", runtime().cudaSetDevice(device))


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    total_memory: int


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
    """Device memory from cudaMalloc, freed exactly once (close(), `with`, or GC)."""

    __slots__ = ("ptr", "nbytes", "device", "_finalizer", "__weakref__")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self.device = current_device()
        self.ptr = int(_rt("cudaMalloc", runtime().cudaMalloc(max(self.nbytes, 1))))
        self._finalizer = weakref.finalize(self, _free, self.ptr)

    def close(self) -> None:
        self._finalizer()
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
        _rt("cudaMemcpy", rt.cudaMemcpy(view, self.ptr, min(view.nbytes, self.nbytes), rt.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        return out


def copy_host_to_device_async(dst: int, data: bytes, stream: int) -> None:
    """Queue a copy of ``data`` to device address ``dst`` on ``stream`` (the bytes are
    copied to pinned staging by CUDA before this returns for pageable memory)."""
    rt = runtime()
    _rt("cudaMemcpyAsync", rt.cudaMemcpyAsync(dst, data, len(data), rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                                stream))


def memset_async(dst: int, value: int, nbytes: int, stream: int) -> None:
    """Queue setting ``nbytes`` bytes at device address ``dst`` to ``value`` on ``stream``."""
    _rt("cudaMemsetAsync", runtime().cudaMemsetAsync(dst, value, nbytes, stream))


def _free(ptr: int) -> None:
    try:
        runtime().cudaFree(ptr)
    except Exception:  # interpreter shutdown: nothing useful to do
        pass


@dataclass(frozen=True)
class PointerInfo:
    device: int  # -1 for host memory
    is_device: bool
    base: int
    size: int  # bytes from base; 0 when unknown

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
        except Exception:
            pass
    return PointerInfo(int(attrs.device) if is_device else -1, is_device, base, size)


# -- events and streams --------------------------------------------------------------------

class Event:
    """A CUDA event for timing; destroyed once."""

    __slots__ = ("handle", "_finalizer", "__weakref__")

    def __init__(self) -> None:
        self.handle = _rt("cudaEventCreate", runtime().cudaEventCreate())
        self._finalizer = weakref.finalize(self, _destroy_event, self.handle)

    def record(self, stream: int = 0) -> None:
        _rt("cudaEventRecord", runtime().cudaEventRecord(self.handle, stream))

    def synchronize(self) -> None:
        _rt("cudaEventSynchronize", runtime().cudaEventSynchronize(self.handle))

    def elapsed_ms(self, end: Event) -> float:
        return float(_rt("cudaEventElapsedTime", runtime().cudaEventElapsedTime(self.handle, end.handle)))


def _destroy_event(handle: Any) -> None:
    try:
        runtime().cudaEventDestroy(handle)
    except Exception:
        pass


def create_stream() -> int:
    rt = runtime()
    s = _rt("cudaStreamCreateWithFlags", rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
    return int(s)


def destroy_stream(stream: int) -> None:
    _rt("cudaStreamDestroy", runtime().cudaStreamDestroy(stream))


def _status_hint(status: int) -> str:
    reason = why_no_gpu()
    if reason:
        return reason + " (cuDNN needs an NVIDIA GPU and driver)"
    if status == 1008:  # CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED
        from . import loader

        if loader.is_loaded():
            deps = ", ".join(f"{k}: {v}" for k, v in loader.report().dependencies.items())
            return f"a cuDNN sub-library or one it needs failed to load ({deps})"
    return ""


# cuDNN reports a missing GPU as CUDNN_STATUS_NOT_INITIALIZED (1xxx) or as a sub-library
# load failure; both read better with the CUDA-side reason attached.
install_hint(1000, _status_hint)
