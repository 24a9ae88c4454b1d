"""Host-memory scalars for by-value tensors: a Python number stored in a cuDNN data type.

cuDNN reads a by-value tensor's value from a host pointer at execution; the buffer must
outlive every variant pack that points at it, so callers keep the returned object.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

from .enums import data_type

_CTYPES: dict[data_type, Any] = {
    data_type.FLOAT: ctypes.c_float,
    data_type.DOUBLE: ctypes.c_double,
    data_type.INT8: ctypes.c_int8,
    data_type.UINT8: ctypes.c_uint8,
    data_type.INT32: ctypes.c_int32,
    data_type.UINT32: ctypes.c_uint32,
    data_type.INT64: ctypes.c_int64,
    data_type.BOOLEAN: ctypes.c_bool,
}


def _half_bits(value: float) -> int:
    return int.from_bytes(struct.pack("<e", value), "little")


def _bfloat16_bits(value: float) -> int:
    bits = int.from_bytes(struct.pack("<f", value), "little")
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:  # NaN stays a quiet NaN
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


class HostScalar:
    """One value in host memory; ``ptr`` is its address."""

    __slots__ = ("value", "dtype", "_buf", "ptr")

    def __init__(self, value: float | int | bool, dtype: data_type) -> None:
        self.value, self.dtype = value, dtype
        if dtype == data_type.HALF:
            self._buf: Any = ctypes.c_uint16(_half_bits(float(value)))
        elif dtype == data_type.BFLOAT16:
            self._buf = ctypes.c_uint16(_bfloat16_bits(float(value)))
        elif dtype in _CTYPES:
            cls = _CTYPES[dtype]
            is_float = cls in (ctypes.c_float, ctypes.c_double)
            self._buf = cls(float(value) if is_float else int(value))
        else:
            raise TypeError(f"a by-value scalar of type {dtype.name} is not supported")
        self.ptr = ctypes.addressof(self._buf)

    def __repr__(self) -> str:
        return f"HostScalar({self.value!r}, {self.dtype.name})"
