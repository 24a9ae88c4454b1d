"""Tensors from any framework -> pointer, shape, strides, dtype, device, without importing frameworks.

An object's route is chosen once per type and cached: torch tensors through their own API,
JAX arrays through DLPack, then by protocol: ``__cuda_array_interface__`` (CuPy, Numba),
``__array_interface__`` (NumPy), ``__dlpack__`` (anything else). A framework module is imported
only inside a function handed an object of that framework, where it is already loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

from .._lib import dlpack as _dl
from .._lib.enums import data_type
from .._lib.layout import row_major
from .framework_dtypes import (
    bits,
    data_type_of,
    dtype_name,
    from_dlpack,
    from_name,
    from_typestr,
    itemsize,
    nbytes,
    numpy_dtype,
    torch_dtype,
)

__all__ = [
    "TensorInfo", "bits", "current_stream", "data_ptr", "data_type_of", "describe", "dtype_name",
    "empty_like_framework", "framework_of", "is_tensor_like", "itemsize", "nbytes", "numpy_dtype",
    "row_major", "span_bytes", "torch_dtype",
]


def span_bytes(shape: Sequence[int], strides: Sequence[int], item_bytes: int) -> int:
    """Bytes from element [0,...,0] to the end of the last element: 0 if any dim is 0.

    Negative strides reach below the first element; only the forward reach is counted.
    """
    if any(d == 0 for d in shape):
        return 0
    return (sum((d - 1) * s for d, s in zip(shape, strides) if s > 0) + 1) * item_bytes


class TensorInfo(NamedTuple):
    """What cuDNN needs to know about a framework tensor, read once through its protocol
    (immutable; a named tuple because execute reads one per buffer on a first call).

    ``itemsize`` is the producer's bytes per element: for sub-byte dtypes that frameworks
    store one per byte (torch.int4, ml_dtypes.int4) it is 1, while cuDNN reads them packed.
    """

    ptr: int  # address of element [0, ..., 0] (byte offset applied)
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: data_type  # NOT_SET when cuDNN has no equivalent
    itemsize: int
    device_type: str  # "cuda", "cpu", "cuda_host", "cuda_managed", or the DLPack device name
    device_id: int
    extent_bytes: int | None  # bytes from ptr to the end of the allocation, when known
    framework: str  # "torch", "cupy", "jax", "numba", "numpy", "dlpack", "cai"

    @property
    def needed_bytes(self) -> int:
        """Bytes the shape and strides span from ``ptr``."""
        return span_bytes(self.shape, self.strides, self.itemsize)


# -- readers: one per route ----------------------------------------------------------------

def _read_torch(t: Any, framework: str) -> TensorInfo:
    """A torch.Tensor through its own API (exact storage extent, any device)."""
    import torch

    if t.layout is not torch.strided:
        raise TypeError(f"a torch tensor with layout {t.layout} has no strides: cuDNN needs a strided tensor")
    if t.is_conj() or t.is_neg():
        raise ValueError("the torch tensor is a lazy conjugate/negative view: call .resolve_conj() / "
                         ".resolve_neg() so that its memory holds the values")
    size = t.element_size()
    try:
        extent: int | None = t.untyped_storage().nbytes() - t.storage_offset() * size
    except (RuntimeError, NotImplementedError):  # storage-less tensor subclasses
        extent = None
    device = t.device
    dt = _TORCH_DTYPES.get(t.dtype)
    if dt is None:
        dt = _TORCH_DTYPES[t.dtype] = from_name(str(t.dtype))
    return TensorInfo(t.data_ptr(), tuple(t.shape), tuple(t.stride()), dt, size, device.type, device.index or 0,
                      extent, framework)


_TORCH_DTYPES: dict[Any, data_type] = {}  # torch.dtype -> data_type, filled as dtypes are seen


def _array_dtype(obj: Any, typestr: str) -> tuple[data_type, int]:
    """(data_type, itemsize) of an array-interface array: its dtype name first ('<V2' may be bfloat16)."""
    if typestr[:1] == ">":
        raise ValueError(f"big-endian data (typestr {typestr!r}) is not supported")
    np_dtype = getattr(obj, "dtype", None)
    name, size = getattr(np_dtype, "name", None), getattr(np_dtype, "itemsize", None)
    dt = from_name(name) if isinstance(name, str) else data_type.NOT_SET
    if dt is data_type.NOT_SET:
        dt = from_typestr(typestr)
    return dt, size if isinstance(size, int) else int(typestr[2:].partition("[")[0])


def _element_strides(byte_strides: Sequence[int] | None, shape: tuple[int, ...],
                     size: int) -> tuple[int, ...]:
    if byte_strides is None:
        return tuple(row_major(shape))
    if any(s % size for s in byte_strides):
        raise ValueError(f"byte strides {tuple(byte_strides)} are not multiples of the element size {size}")
    return tuple(int(s) // size for s in byte_strides)


def _interface(obj: Any, attr: str) -> tuple[int, tuple[int, ...], tuple[int, ...], data_type, int]:
    """(ptr, shape, strides, dtype, itemsize) from a CUDA or NumPy array-interface dict."""
    spec = getattr(obj, attr)
    if spec.get("mask") is not None:
        raise TypeError(f"{attr} with a mask (masked array) is not supported")
    data = spec.get("data")
    if not isinstance(data, tuple):
        raise TypeError(f"{attr} without a (pointer, read_only) 'data' tuple is not supported")
    shape = tuple(int(d) for d in spec["shape"])
    dt, size = _array_dtype(obj, spec["typestr"])
    return int(data[0] or 0), shape, _element_strides(spec.get("strides"), shape, size), dt, size


def _read_cai(obj: Any, framework: str) -> TensorInfo:
    """``__cuda_array_interface__`` v2/v3 (CuPy, Numba, ...); the pointer is never dereferenced.

    The interface's optional ``stream`` is not synchronised here: callers order work themselves.
    """
    ptr, shape, strides, dt, size = _interface(obj, "__cuda_array_interface__")
    device_id, extent = _LOCATE.get(framework, _locate_pointer)(obj, ptr)
    return TensorInfo(ptr, shape, strides, dt, size, "cuda", device_id, extent, framework)


def _read_array_interface(obj: Any, framework: str) -> TensorInfo:
    """NumPy's ``__array_interface__``: host memory."""
    ptr, shape, strides, dt, size = _interface(obj, "__array_interface__")
    return TensorInfo(ptr, shape, strides, dt, size, "cpu", 0, None, framework)


def _read_dlpack(obj: Any, framework: str) -> TensorInfo:
    """Any ``__dlpack__`` producer, read through a capsule that is peeked at, never consumed."""
    device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (_DL.kDLCPU, 0)
    stream = _PEEK_STREAM.get(framework, -1) if int(device[0]) in _STREAM_DEVICES else None
    view = _peek(obj, stream)
    if view.flags & _dl.FLAG_IS_COPIED:
        raise BufferError(f"{_name(obj)} exported a copy through DLPack: cuDNN needs its own memory")
    code, dl_bits, lanes = view.dtype
    size, rest = divmod(dl_bits * lanes, 8)
    if rest:
        if not view.flags & _dl.FLAG_IS_SUBBYTE_TYPE_PADDED:
            raise TypeError(f"{_name(obj)} exports packed {dl_bits}-bit elements through DLPack; "
                            "give them as uint8 bytes instead")
        size = lanes
    ptr = view.data + view.byte_offset
    device_type = _DEVICE_NAMES.get(view.device_type, f"dlpack_device_{view.device_type}")
    extent = _locate_pointer(obj, ptr)[1] if device_type in ("cuda", "cuda_managed") else None
    strides = view.strides if view.strides is not None else tuple(row_major(view.shape))
    return TensorInfo(ptr, view.shape, strides, from_dlpack(code, dl_bits, lanes), size,
                      device_type, view.device_id, extent, framework)


def _peek(obj: Any, stream: int | None) -> _dl.DLPackView:
    """Ask for a versioned, uncopied capsule (older producers: a plain one) and read it.

    The capsule is dropped on return; its own destructor then calls the producer's deleter.
    """
    kwargs: dict[str, Any] = {} if stream is None else {"stream": stream}
    try:
        capsule = obj.__dlpack__(max_version=_dl.MAX_VERSION, copy=False, **kwargs)
    except TypeError:  # a producer older than the 2023.12 array API: no max_version / copy
        capsule = obj.__dlpack__(**kwargs)
    return _dl.peek(capsule)


# stream= for a read-only peek at a device array: -1 asks for no synchronisation (DLPack spec);
# jax takes any int as a stream to wait on, so it gets None (it then waits on the host).
_PEEK_STREAM: dict[str, int | None] = {"jax": None}
_DL = _dl.DLDeviceType
_STREAM_DEVICES = {int(_DL.kDLCUDA), int(_DL.kDLROCM), int(_DL.kDLCUDAManaged)}
_DEVICE_NAMES: dict[int, str] = {
    _DL.kDLCPU: "cpu", _DL.kDLCUDA: "cuda", _DL.kDLCUDAHost: "cuda_host", _DL.kDLOpenCL: "opencl",
    _DL.kDLVulkan: "vulkan", _DL.kDLMetal: "metal", _DL.kDLVPI: "vpi", _DL.kDLROCM: "rocm",
    _DL.kDLROCMHost: "rocm_host", _DL.kDLExtDev: "ext_dev", _DL.kDLCUDAManaged: "cuda_managed",
    _DL.kDLOneAPI: "oneapi", _DL.kDLWebGPU: "webgpu", _DL.kDLHexagon: "hexagon", _DL.kDLMAIA: "maia",
    _DL.kDLTrn: "trn",
}


def _locate_pointer(obj: Any, ptr: int) -> tuple[int, int | None]:
    """(device, bytes to the end of its allocation) of a device pointer, asked of CUDA, else (0, None)."""
    from .._lib import cuda

    try:
        where = cuda.pointer_info(ptr)
    except (ImportError, OSError, RuntimeError):  # no cuda-bindings, no driver or no GPU (CudaError)
        return 0, None
    if not where.is_device:
        return 0, None
    return where.device, (where.end - ptr if where.size else None)


_CUPY_OWN_MEMORY = frozenset({"Memory", "PooledMemory", "ManagedMemory", "MemoryAsync"})


def _locate_cupy(a: Any, ptr: int) -> tuple[int, int | None]:
    """CuPy knows its device and the memory block behind the arrays it allocated. Memory it
    imported (DLPack, ``__cuda_array_interface__``) carries a size CuPy derived from the
    producer's shape, short for strided layouts (a channels-last weight of 9216 bytes reads
    as 108): for any memory class but CuPy's own, CUDA is asked instead."""
    try:
        mem = a.data.mem
        if type(mem).__name__ not in _CUPY_OWN_MEMORY:
            return int(a.device.id), _locate_pointer(a, ptr)[1]
        return int(a.device.id), int(mem.ptr) + int(mem.size) - ptr
    except AttributeError:
        return _locate_pointer(a, ptr)


_LOCATE: dict[str, Callable[[Any, int], tuple[int, int | None]]] = {"cupy": _locate_cupy}


# -- routes: chosen once per type ---------------------------------------------------------

class _Route(NamedTuple):
    framework: str
    read: Callable[[Any, str], TensorInfo]
    ptr: Callable[[Any], int]


_READERS: dict[str, Callable[[Any, str], TensorInfo]] = {
    "torch": _read_torch,
    "__cuda_array_interface__": _read_cai,
    "__array_interface__": _read_array_interface,
    "__dlpack__": _read_dlpack,
}
_PACKAGES = {"cupy": "cupy", "numba": "numba", "numba_cuda": "numba", "jax": "jax",
             "jaxlib": "jax", "numpy": "numpy"}
_PROTOCOL_ORDER: dict[str, tuple[str, ...]] = {"torch": ("torch",), "jax": ("__dlpack__",)}
_DEFAULT_ORDER = ("__cuda_array_interface__", "__array_interface__", "__dlpack__")
_UNKNOWN_PACKAGE = {"__cuda_array_interface__": "cai", "__array_interface__": "numpy", "__dlpack__": "dlpack"}
_FAST_PTR: dict[str, Callable[[Any], int]] = {
    "torch": lambda t: t.data_ptr(),
    "cupy": lambda a: a.data.ptr,
    "jax": lambda a: a.block_until_ready().unsafe_buffer_pointer(),  # jax's own stream may still write
    "__cuda_array_interface__": lambda a: int(a.__cuda_array_interface__["data"][0] or 0),
    "__array_interface__": lambda a: int(a.__array_interface__["data"][0] or 0),
}
_ROUTES: dict[type, _Route] = {}


def _framework_of(kind: type) -> str | None:
    if any(c.__name__ == "Tensor" and c.__module__.partition(".")[0] == "torch" for c in kind.__mro__):
        return "torch"  # torch.Tensor and its subclasses (nn.Parameter, user subclasses)
    return _PACKAGES.get(kind.__module__.partition(".")[0])


def _classify(obj: Any, holder: Any) -> _Route | None:
    """The route for ``obj``, looking for protocols on ``holder`` (its type, or itself)."""
    kind = type(obj)
    if issubclass(kind, int):  # a raw pointer (or a bool) is not a tensor
        return None
    framework = _framework_of(kind)
    for protocol in _PROTOCOL_ORDER.get(framework or "", _DEFAULT_ORDER):
        if protocol == "torch" or hasattr(holder, protocol):
            name = framework or _UNKNOWN_PACKAGE[protocol]
            read = _READERS[protocol]
            ptr = _FAST_PTR.get(name) or _FAST_PTR.get(protocol) or (lambda o: describe(o).ptr)
            return _Route(name, read, ptr)
    return None


def _route(obj: Any) -> _Route | None:
    route = _ROUTES.get(type(obj))
    if route is None:
        route = _classify(obj, type(obj))
        if route is not None:
            _ROUTES[type(obj)] = route
        else:  # protocols set on the instance itself cannot be cached by type
            route = _classify(obj, obj)
    return route


def _name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _unsupported(obj: Any) -> TypeError:
    hint = " (an int is a raw pointer: it has no shape)" if isinstance(obj, int) else ""
    return TypeError(
        f"cannot read a tensor from {_name(obj)}{hint}: expected a torch.Tensor, a JAX array, an object "
        "with __cuda_array_interface__ (CuPy, Numba), __dlpack__ / __dlpack_device__, "
        "or __array_interface__ (NumPy)")


# -- public API ----------------------------------------------------------------------------

def describe(obj: Any) -> TensorInfo:
    """Pointer, shape, strides (elements), dtype, device and extent of a framework tensor.

    Reading a JAX array waits on the host until its value is computed (JAX's DLPack export).
    """
    route = _route(obj)
    if route is None:
        raise _unsupported(obj)
    return route.read(obj, route.framework)


def is_tensor_like(obj: Any) -> bool:
    """Whether ``describe`` has a route for ``obj`` (a raw int pointer is not tensor-like)."""
    return _route(obj) is not None


def _int_ptr(value: int) -> int:
    return int(value)


_PTR: dict[type, Callable[[Any], int]] = {int: _int_ptr}


def data_ptr(obj: Any) -> int:
    """The device address of ``obj``'s first element: an int as is, else the cheapest protocol read.

    Hot path: one dict lookup keyed by ``type(obj)`` and one attribute call for known types.
    A JAX array is waited for first (as ``describe`` does): JAX computes on streams of its own.
    """
    get = _PTR.get(type(obj))
    if get is None:
        kind = type(obj)
        if issubclass(kind, int) and not issubclass(kind, bool):
            get = _PTR[kind] = _int_ptr
        else:
            route = _route(obj)
            if route is None:
                raise _unsupported(obj)
            get = route.ptr
            if _ROUTES.get(kind) is route:
                _PTR[kind] = get
    return get(obj)


def framework_of(obj: Any) -> str:
    """The framework name ``describe`` would report for ``obj`` (TypeError when unsupported)."""
    route = _route(obj)
    if route is None:
        raise _unsupported(obj)
    return route.framework


# -- allocation and streams ---------------------------------------------------------------

def _device_type(example: Any, framework: str) -> str:
    """Where ``example`` lives, cheaply (no DLPack capsule, no synchronisation)."""
    if isinstance(example, str):
        return "cpu" if example == "numpy" else "cuda"
    if framework == "torch":
        return str(example.device.type)
    if framework == "numpy":
        return "cpu"
    if hasattr(example, "__dlpack_device__"):
        code = int(example.__dlpack_device__()[0])
        return _DEVICE_NAMES.get(code, f"dlpack_device_{code}")
    return "cuda"


def _empty_torch(shape: tuple[int, ...], strides: tuple[int, ...], dt: data_type, device_type: str,
                 device_id: int) -> Callable[[], Any]:
    import torch

    device = torch.device(device_type, device_id) if device_type == "cuda" else torch.device(device_type)
    return partial(torch.empty_strided, shape, strides, dtype=torch_dtype(dt), device=device)


def _empty_cupy(shape: tuple[int, ...], strides: tuple[int, ...], dt: data_type, device_type: str,
                device_id: int) -> Callable[[], Any]:
    import cupy

    if device_type != "cuda":
        raise ValueError(f"CuPy allocates CUDA memory, not {device_type!r} memory")
    np_dtype = numpy_dtype(dt)
    size, byte_strides = span_bytes(shape, strides, np_dtype.itemsize), tuple(s * np_dtype.itemsize for s in strides)

    def make() -> Any:
        with cupy.cuda.Device(device_id):
            return cupy.ndarray(shape, dtype=np_dtype, memptr=cupy.cuda.alloc(size), strides=byte_strides)

    return make


def _empty_numpy(shape: tuple[int, ...], strides: tuple[int, ...], dt: data_type, device_type: str,
                 device_id: int) -> Callable[[], Any]:
    import numpy

    np_dtype = numpy_dtype(dt)
    size, byte_strides = span_bytes(shape, strides, np_dtype.itemsize), tuple(s * np_dtype.itemsize for s in strides)

    def make() -> Any:
        buffer = numpy.empty(size, dtype=numpy.uint8)
        return numpy.ndarray(shape, dtype=np_dtype, buffer=buffer, strides=byte_strides)

    return make


_ALLOCATE: dict[str, Callable[..., Any]] = {"torch": _empty_torch, "cupy": _empty_cupy, "numpy": _empty_numpy}
# Frameworks that cannot hand out an uninitialised writable buffer here (JAX arrays are
# immutable; Numba, raw CAI and DLPack producers) get one from these, first importable wins.
_SUBSTITUTES: dict[str, tuple[str, ...]] = {"cuda": ("torch", "cupy"), "cpu": ("numpy",)}


def empty_like_framework(example: Any, shape: Sequence[int], strides: Sequence[int], dtype: data_type,
                         device_id: int = 0) -> Any:
    """An uninitialised tensor of ``shape`` / ``strides`` (elements) / ``dtype`` on ``device_id``.

    Made by ``example``'s framework (or one named: "torch", "cupy", "numpy"). For JAX, Numba and
    other producers, whose arrays cannot be allocated writable here, a torch tensor is made
    (else CuPy for CUDA, NumPy for host memory); TypeError when none of them is installed.
    """
    return allocator(example, shape, strides, dtype, device_id)()


def allocator(example: Any, shape: Sequence[int], strides: Sequence[int], dtype: data_type,
              device_id: int = 0) -> Callable[[], Any]:
    """A zero-argument maker of such tensors (``empty_like_framework`` without the call), for
    callers that allocate the same layout again and again."""
    framework = example if isinstance(example, str) else framework_of(example)
    shape, strides = tuple(int(d) for d in shape), tuple(int(s) for s in strides)
    if len(shape) != len(strides) or any(s < 0 for s in strides):
        raise ValueError(f"shape {shape} and strides {strides} must have one non-negative stride per dim")
    device_type = _device_type(example, framework)
    if framework in _ALLOCATE:
        return _ALLOCATE[framework](shape, strides, data_type(dtype), device_type, device_id)
    for substitute in _SUBSTITUTES.get(device_type, ()):
        try:
            return _ALLOCATE[substitute](shape, strides, data_type(dtype), device_type, device_id)
        except ImportError:
            continue
    wanted = " or ".join(_SUBSTITUTES.get(device_type, ())) or "nothing"
    raise TypeError(f"cannot allocate a {device_type} tensor for a {framework} input: {framework} cannot "
                    f"make an uninitialised writable array here, and {wanted} is not installed")


def current_stream(example: Any) -> int:
    """The ``cudaStream_t`` that ``example``'s framework is working on for its device; 0 otherwise.

    torch: torch.cuda.current_stream(device); CuPy: its current stream; others: 0 (legacy default).
    ``example`` may also be a framework name ("torch", "cupy"): its current device then.
    """
    from .streams import stream_getter

    framework = example if isinstance(example, str) else framework_of(example) if _route(example) else ""
    if framework == "torch":
        import torch

        device = getattr(example, "device", None)
        if device is not None and device.type != "cuda":
            return 0
        if device is None and not torch.cuda.is_available():
            return 0
        index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    elif framework == "cupy":
        import cupy

        index = example.device.id if not isinstance(example, str) else cupy.cuda.Device().id
    else:
        return 0
    return stream_getter(framework)(index)
