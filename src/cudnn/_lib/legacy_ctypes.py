"""The ctypes side of `cudnn.legacy`: buffers for out-parameters, host arrays and scalars,
data pointers from any tensor protocol, and debug callbacks.

`cudnn.legacy` decides *what* each C parameter is (from the generated tables); this module
is the one place that builds the ctypes objects the call needs and reads them back.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .enums import cudnnSeverity_t
from .structs import cudnnDebug_t

ArgumentError = ctypes.ArgumentError  # what a ctypes call raises for an argument it refuses

# -- out-parameters ---------------------------------------------------------------------------


def out_buffer(argtype: Any) -> Any:
    """A zeroed value for a ``T *`` out-parameter (``void **`` gets a c_void_p)."""
    pointee = getattr(argtype, "_type_", None)
    return pointee() if isinstance(pointee, type) else ctypes.c_void_p()


def out_array(argtype: Any, length: int) -> Any:
    """A zeroed array of ``length`` elements for a ``T *`` array out-parameter."""
    return (argtype._type_ * length)()


def out_string(length: int) -> Any:
    return ctypes.create_string_buffer(length)


def by_reference(buffer: Any) -> Any:
    """What to pass for an out-parameter: arrays as they are, scalars by reference."""
    return buffer if isinstance(buffer, ctypes.Array) else ctypes.byref(buffer)


def read_out(buffer: Any) -> Any:
    """Value of an out buffer: a number (None for a NULL pointer), or a list for arrays.

    Struct elements are copied, so the results outlive the buffer.
    """
    if isinstance(buffer, ctypes.Array):
        if buffer._type_ is ctypes.c_char:
            return buffer.value.decode(errors="replace")
        if issubclass(buffer._type_, ctypes.Structure):
            return [type(item).from_buffer_copy(item) for item in buffer]
        return list(buffer)
    return buffer.value


# -- inputs -------------------------------------------------------------------------------------

def in_array(argtype: Any, values: Sequence[int]) -> Any:
    """A C array for a ``const T *`` input given as a Python sequence."""
    return (argtype._type_ * len(values))(*values)


def host_scalar(value: float, double: bool) -> Any:
    """A host float or double for ``const void *alpha``-style scaling parameters."""
    return ctypes.byref(ctypes.c_double(value) if double else ctypes.c_float(value))


def is_ctypes(value: Any) -> bool:
    return isinstance(value, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes._Pointer))


def ctypes_address(value: Any) -> int:
    """The address a ctypes object stands for: a pointer's target, or the object's own storage."""
    if isinstance(value, (ctypes.c_void_p, ctypes.c_char_p)):
        return int(ctypes.cast(value, ctypes.c_void_p).value or 0)
    if isinstance(value, ctypes._Pointer):
        return int(ctypes.cast(value, ctypes.c_void_p).value or 0)
    return ctypes.addressof(value)


# -- data pointers ------------------------------------------------------------------------------

_DL_CPU = 1  # pinned host memory (kDLCUDAHost) is device-accessible, so it counts as device
_DL_CUDA_HOST = 3


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_uint32), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32 * 2), ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor),
    ]


_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _dlpack_pointer(obj: Any) -> tuple[int, bool]:
    """(data pointer, is host memory) of a DLPack producer, without consuming its capsule.

    An unconsumed capsule calls the producer's deleter when it is collected, as the protocol
    says; ``obj`` itself keeps the memory alive.
    """
    device = getattr(obj, "__dlpack_device__", None)
    on_host = device is not None and int(device()[0]) in (_DL_CPU, _DL_CUDA_HOST)
    try:
        # -1: we only read the pointer, no stream sync; host producers accept only None
        capsule = obj.__dlpack__(stream=None if on_host else -1)
    except (TypeError, ValueError):
        capsule = obj.__dlpack__()
    if _capsule_valid(capsule, b"dltensor"):
        tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    elif _capsule_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        tensor = managed.dl_tensor
    else:
        raise TypeError(f"{type(obj).__name__}.__dlpack__() did not return a DLPack capsule")
    return int(tensor.data or 0) + int(tensor.byte_offset), tensor.device.device_type == _DL_CPU


def data_pointer(obj: Any) -> tuple[int, bool | None]:
    """(address, is host memory or None when unknown) of anything that stands for memory.

    Accepts None (NULL), ints, ctypes objects, ``__cuda_array_interface__`` (CuPy, Numba,
    PyTorch), DLPack producers (JAX, NumPy, ...), ``data_ptr()`` (PyTorch, also tensors
    that require grad), a ``.ptr`` int (CuPy memory, cudnn-py buffers) and ``__index__``.
    """
    if obj is None:
        return 0, None
    if isinstance(obj, bool):
        raise TypeError("a pointer cannot be a bool")
    if isinstance(obj, int):
        if obj < 0:
            raise ValueError(f"a pointer cannot be negative, got {obj}")
        return obj, None
    if is_ctypes(obj):
        return ctypes_address(obj), None
    try:
        iface = obj.__cuda_array_interface__
    except Exception:  # noqa: BLE001  (absent, or refused: a torch tensor that requires grad)
        iface = None
    if isinstance(iface, dict):
        return int(iface["data"][0] or 0), False
    if hasattr(obj, "__dlpack__"):
        try:
            return _dlpack_pointer(obj)
        except (TypeError, BufferError, RuntimeError):
            pass  # e.g. torch refuses DLPack export of tensors that require grad
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        is_cuda = getattr(obj, "is_cuda", None)
        return int(data_ptr()), (not is_cuda) if isinstance(is_cuda, bool) else None
    iface = getattr(obj, "__array_interface__", None)
    if isinstance(iface, dict):
        return int(iface["data"][0] or 0), True
    ptr = getattr(obj, "ptr", None)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        return ptr, None
    try:
        return operator.index(obj), None
    except TypeError:
        raise TypeError(
            f"cannot use {type(obj).__module__}.{type(obj).__qualname__} as a pointer: give an int, "
            "a ctypes object, or a tensor with __cuda_array_interface__ or __dlpack__"
        ) from None


# -- descriptor queries -------------------------------------------------------------------------

def tensor_data_type(desc: int, is_filter: bool) -> int | None:
    """cudnnDataType_t of a tensor (or filter) descriptor, None if cuDNN cannot say."""
    from . import capi

    api = capi.legacy
    dtype, nb = ctypes.c_int(), ctypes.c_int()
    dims = (ctypes.c_int * 8)()
    if is_filter:
        fmt = ctypes.c_int()
        status = api.cudnnGetFilterNdDescriptor(desc, 8, ctypes.byref(dtype), ctypes.byref(fmt), ctypes.byref(nb), dims)
    else:
        strides = (ctypes.c_int * 8)()
        status = api.cudnnGetTensorNdDescriptor(desc, 8, ctypes.byref(dtype), ctypes.byref(nb), dims, strides)
    return None if status else dtype.value


# -- debug callbacks ----------------------------------------------------------------------------

_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(cudnnDebug_t), ctypes.c_char_p)
_callbacks: list[Any] = []  # cuDNN keeps the function pointer: so do we
_callbacks_lock = threading.Lock()


def callback(fn: Callable[[cudnnSeverity_t, int, cudnnDebug_t, str], None]) -> Any:
    """A C ``cudnnCallback_t`` calling ``fn(severity, udata, debug_info, message)``.

    The debug struct is copied, so ``fn`` may keep it. The function pointer lives as long as
    the process, since cuDNN may call it at any time after cudnnSetCallback.
    """

    def trampoline(severity: int, udata: int | None, dbg: Any, message: bytes | None) -> None:
        info = cudnnDebug_t.from_buffer_copy(dbg.contents) if dbg else cudnnDebug_t()
        fn(cudnnSeverity_t(severity), udata or 0, info, (message or b"").decode(errors="replace"))

    c_fn = _CALLBACK(trampoline)
    with _callbacks_lock:
        _callbacks.append(c_fn)
    return c_fn
