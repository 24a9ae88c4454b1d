"""DLPack through ctypes: the C structs of ``dlpack.h`` (v1.x) and a read-only peek at a capsule.

A consumer that only reads a tensor's metadata must not take ownership: it leaves the capsule
named ``"dltensor"`` / ``"dltensor_versioned"``, so the producer's capsule destructor calls the
tensor's deleter exactly once when the capsule is collected (DLPack Python spec). Renaming it to
``"used_..."`` without calling the deleter ourselves would leak; calling the deleter and leaving
the name would free twice.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .record import Record

CAPSULE = b"dltensor"
CAPSULE_VERSIONED = b"dltensor_versioned"
MAX_VERSION = (1, 1)  # the DLManagedTensorVersioned layout below; any 1.x has it

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2


# The two C enums are plain int constants (a producer may report codes newer DLPack minors add).

class DLDeviceType:
    """``DLDeviceType`` codes."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


class DLDataTypeCode:
    """``DLDataTypeCode`` values (DLPack 1.1)."""

    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    """The legacy (pre-1.0) exchange struct, capsule name ``"dltensor"``."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLManagedTensorVersioned(ctypes.Structure):
    """The DLPack 1.x exchange struct, capsule name ``"dltensor_versioned"``."""

    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLPackView(Record):
    """What a capsule said, copied out into Python values (the capsule may be gone): ``data`` is
    DLTensor.data (``byte_offset`` not applied), ``dtype`` (code, bits, lanes), ``strides`` in
    elements (None: packed row-major), ``version`` None for a legacy capsule."""

    __slots__ = ("data", "byte_offset", "device_type", "device_id", "dtype", "shape", "strides", "version", "flags")
    frozen = True

    def __init__(self, *, data: int, byte_offset: int, device_type: int, device_id: int,
                 dtype: tuple[int, int, int], shape: tuple[int, ...], strides: tuple[int, ...] | None,
                 version: tuple[int, int] | None, flags: int) -> None:
        self.data, self.byte_offset, self.device_type, self.device_id = data, byte_offset, device_type, device_id
        self.dtype, self.shape, self.strides, self.version, self.flags = dtype, shape, strides, version, flags


# Private prototypes (not ctypes.pythonapi's shared function objects, whose argtypes others may set).
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def capsule_name(capsule: Any) -> bytes | None:
    """``b"dltensor"`` or ``b"dltensor_versioned"`` when ``capsule`` is an unconsumed DLPack capsule."""
    for name in (CAPSULE_VERSIONED, CAPSULE):
        if _is_valid(capsule, name):
            return name
    return None


def peek(capsule: Any) -> DLPackView:
    """Read a DLPack capsule without consuming it: the capsule keeps its name and its destructor.

    Raises BufferError for a consumed or foreign capsule and for a DLPack major version other
    than 1 (the layout past ``deleter`` is then unknown; the destructor still frees it).
    """
    name = capsule_name(capsule)
    if name is None:
        raise BufferError(f"not an unconsumed DLPack capsule: {capsule!r}")
    address = _get_pointer(capsule, name)
    version: tuple[int, int] | None = None
    flags = 0
    if name == CAPSULE_VERSIONED:
        managed = DLManagedTensorVersioned.from_address(address)
        version = (int(managed.version.major), int(managed.version.minor))
        if version[0] != MAX_VERSION[0]:
            raise BufferError(f"DLPack version {version[0]}.{version[1]} is not supported (need 1.x)")
        flags = int(managed.flags)
        t = managed.dl_tensor
    else:
        t = DLManagedTensor.from_address(address).dl_tensor
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if ndim and t.strides else None
    return DLPackView(
        data=int(t.data or 0),
        byte_offset=int(t.byte_offset),
        device_type=int(t.device.device_type),
        device_id=int(t.device.device_id),
        dtype=(int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)),
        shape=shape,
        strides=strides if ndim else (),
        version=version,
        flags=flags,
    )
