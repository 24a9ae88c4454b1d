"""Python values <-> the C arrays of backend attributes, and the calls that pass them.

The backend reads and writes every attribute as (type, count, array of elements); this
module owns that conversion and the ctypes objects it needs, so the descriptor layer above
deals in Python values only.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from enum import IntEnum
from typing import Any

from . import capi, enums
from .enums import cudnnBackendAttributeType_t as AttrType
from .structs import cudnnFraction_t


class Fraction(cudnnFraction_t):
    """cudnnFraction_t (the header's struct): numerator / denominator (resample window and strides)."""

    def __repr__(self) -> str:
        return f"Fraction({self.numerator}, {self.denominator})"


class _Elements(dict[Any, tuple[Any, Any]]):
    """Attribute type -> (ctypes element type, Python enum of the values or None); the enum is
    looked up (and so built) when its attribute type is first used, not at import."""

    def __getitem__(self, attr_type: AttrType) -> tuple[Any, type[IntEnum] | None]:
        elem, enum = super().__getitem__(attr_type)
        if isinstance(enum, str):
            enum = getattr(enums, enum)
            super().__setitem__(attr_type, (elem, enum))
        return elem, enum

    def items(self) -> Any:
        return [(k, self[k]) for k in self.keys()]


# Attribute type -> (ctypes element type, name of the Python enum of the values, or None).
ELEMENT: _Elements = _Elements({
    AttrType.CUDNN_TYPE_HANDLE: (ctypes.c_void_p, None),
    AttrType.CUDNN_TYPE_DATA_TYPE: (ctypes.c_int, "cudnnDataType_t"),
    AttrType.CUDNN_TYPE_BOOLEAN: (ctypes.c_bool, None),
    AttrType.CUDNN_TYPE_INT64: (ctypes.c_int64, None),
    AttrType.CUDNN_TYPE_FLOAT: (ctypes.c_float, None),
    AttrType.CUDNN_TYPE_DOUBLE: (ctypes.c_double, None),
    AttrType.CUDNN_TYPE_VOID_PTR: (ctypes.c_void_p, None),
    AttrType.CUDNN_TYPE_CONVOLUTION_MODE: (ctypes.c_int, "cudnnConvolutionMode_t"),
    AttrType.CUDNN_TYPE_HEUR_MODE: (ctypes.c_int, "cudnnBackendHeurMode_t"),
    AttrType.CUDNN_TYPE_KNOB_TYPE: (ctypes.c_int, "cudnnBackendKnobType_t"),
    AttrType.CUDNN_TYPE_NAN_PROPOGATION: (ctypes.c_int, "cudnnNanPropagation_t"),
    AttrType.CUDNN_TYPE_NUMERICAL_NOTE: (ctypes.c_int, "cudnnBackendNumericalNote_t"),
    AttrType.CUDNN_TYPE_LAYOUT_TYPE: (ctypes.c_int, "cudnnBackendLayoutType_t"),
    AttrType.CUDNN_TYPE_ATTRIB_NAME: (ctypes.c_int, "cudnnBackendAttributeName_t"),
    AttrType.CUDNN_TYPE_POINTWISE_MODE: (ctypes.c_int, "cudnnPointwiseMode_t"),
    AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR: (ctypes.c_void_p, None),
    AttrType.CUDNN_TYPE_GENSTATS_MODE: (ctypes.c_int, "cudnnGenStatsMode_t"),
    AttrType.CUDNN_TYPE_BN_FINALIZE_STATS_MODE: (ctypes.c_int, "cudnnBnFinalizeStatsMode_t"),
    AttrType.CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: (ctypes.c_int, "cudnnReduceTensorOp_t"),
    AttrType.CUDNN_TYPE_BEHAVIOR_NOTE: (ctypes.c_int, "cudnnBackendBehaviorNote_t"),
    AttrType.CUDNN_TYPE_TENSOR_REORDERING_MODE: (ctypes.c_int, "cudnnBackendTensorReordering_t"),
    AttrType.CUDNN_TYPE_RESAMPLE_MODE: (ctypes.c_int, "cudnnResampleMode_t"),
    AttrType.CUDNN_TYPE_PADDING_MODE: (ctypes.c_int, "cudnnPaddingMode_t"),
    AttrType.CUDNN_TYPE_INT32: (ctypes.c_int32, None),
    AttrType.CUDNN_TYPE_CHAR: (ctypes.c_char, None),
    AttrType.CUDNN_TYPE_SIGNAL_MODE: (ctypes.c_int, "cudnnSignalMode_t"),
    AttrType.CUDNN_TYPE_FRACTION: (Fraction, None),
    AttrType.CUDNN_TYPE_NORM_MODE: (ctypes.c_int, "cudnnBackendNormMode_t"),
    AttrType.CUDNN_TYPE_NORM_FWD_PHASE: (ctypes.c_int, "cudnnBackendNormFwdPhase_t"),
    AttrType.CUDNN_TYPE_RNG_DISTRIBUTION: (ctypes.c_int, "cudnnRngDistribution_t"),
    AttrType.CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE: (ctypes.c_int, "cudnnMoeGroupedMatmulMode_t"),
    AttrType.CUDNN_TYPE_RESHAPE_MODE: (ctypes.c_int, "cudnnBackendReshapeMode_t"),
    AttrType.CUDNN_TYPE_OPERATIONGRAPH_MODE: (ctypes.c_int, "cudnnBackendOperationGraphMode_t"),
    AttrType.CUDNN_TYPE_CUDA_GRAPH_RETENTION: (ctypes.c_int, "cudnnCudaGraphRetention_t"),
})


def enum_attribute_types() -> dict[str, AttrType]:
    """C enum name -> the attribute type whose values it holds, without building the enums."""
    return {enum if isinstance(enum, str) else enum.__name__: attr_type
            for attr_type, (_, enum) in dict.items(ELEMENT) if enum is not None}


_ARRAY_TYPES: dict[tuple[Any, int], Any] = {}  # (element type, count) -> its ctypes array type, counts up to 64


def array_type(elem: Any, n: int) -> Any:
    """The ctypes array type of ``n`` ``elem``, kept once made (for counts up to 64). ctypes
    holds the array types it makes only weakly, and each is a reference cycle: made afresh for
    every attribute, they would be garbage the collector frees and the next build makes again."""
    t = _ARRAY_TYPES.get((elem, n))
    if t is None:
        t = elem * n
        if n <= 64:
            t = _ARRAY_TYPES.setdefault((elem, n), t)
    return t


def pack(items: list[Any], attr_type: AttrType) -> tuple[Any, int]:
    """(C array, element count) for ``items``; descriptors come as pointer ints.

    Raises TypeError for values of the wrong kind (a float for INT64, a string for a number).
    CHAR counts bytes, the terminating NUL included."""
    elem, enum_cls = ELEMENT[attr_type]
    n = len(items)
    if attr_type == AttrType.CUDNN_TYPE_CHAR:
        data = b"".join(i.encode() if isinstance(i, str) else bytes(i) for i in items)
        buf = ctypes.create_string_buffer(data, len(data))
        return buf, len(buf)
    if attr_type == AttrType.CUDNN_TYPE_FRACTION:
        return array_type(Fraction, n)(*[i if isinstance(i, Fraction) else Fraction(*i) for i in items]), n
    if enum_cls is not None:
        return array_type(elem, n)(*[int(i) for i in items]), n
    if elem in (ctypes.c_int64, ctypes.c_int32):
        for item in items:
            if isinstance(item, bool) or (not isinstance(item, int) and not hasattr(item, "__index__")):
                raise TypeError(f"expected int values, got {type(item).__name__} {item!r}")
        values = [int(i) for i in items]
        bound = 1 << (8 * ctypes.sizeof(elem) - 1)
        for v in values:  # ctypes would wrap an out-of-range value silently
            if not -bound <= v < bound:
                raise OverflowError(f"{v} is out of the range of a {8 * ctypes.sizeof(elem)}-bit int")
        return array_type(elem, n)(*values), n
    if elem in (ctypes.c_float, ctypes.c_double):
        for item in items:
            if not isinstance(item, (int, float)) or isinstance(item, bool):
                raise TypeError(f"expected float values, got {type(item).__name__} {item!r}")
        return array_type(elem, n)(*[float(i) for i in items]), n
    if elem is ctypes.c_bool:
        return array_type(elem, n)(*[bool(i) for i in items]), n
    return array_type(elem, n)(*[int(i) for i in items]), n  # pointers: handles, void pointers, descriptors


# the struct format character of the attribute types `set_plain` takes that are not C-int enums
_FORMAT = {int(AttrType.CUDNN_TYPE_INT64): "q", int(AttrType.CUDNN_TYPE_BOOLEAN): "B",
           int(AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR): "Q"}
_PACKERS: dict[tuple[int, int], Any] = {}  # (attribute type, count) -> struct packer, for counts up to 16


def set_plain(ptr: int, attr: int, attr_type: int, values: list[int] | tuple[int, ...]) -> int:
    """Set an attribute of 64-bit ints, bools, descriptor pointers or a C-int enum type from
    Python ints, without the checks of `pack`: the caller has made sure of the values' kind.
    Raises OverflowError for a value out of the element's range. (The values are packed into
    bytes by a `struct` packer kept per type and count: the cheapest buffer to make per call,
    and most attributes of a graph are these.)"""
    n = len(values)
    pack = _PACKERS.get((attr_type, n))
    if pack is None:
        pack = struct.Struct(f"{n}{_FORMAT.get(attr_type, 'i')}").pack
        if n <= 16:
            _PACKERS[attr_type, n] = pack
    try:
        data = pack(*values)
    except struct.error:
        raise OverflowError(_out_of_range(values, _FORMAT.get(attr_type, "i"))) from None
    return capi.graph.cudnnBackendSetAttribute(ptr, attr, attr_type, n, data)


def _out_of_range(values: list[int] | tuple[int, ...], fmt: str) -> str:
    """What `set_plain`'s packer refused: the first value out of the element's range."""
    size = struct.calcsize(fmt)
    low, high = (0, 1 << (8 * size)) if fmt in "BQ" else (-(1 << (8 * size - 1)), 1 << (8 * size - 1))
    bad = next((v for v in values if not low <= int(v) < high), None)
    return f"{bad} is out of the range of a {8 * size}-bit {'unsigned ' if fmt in 'BQ' else ''}int"


def create_descriptor(desc_type: int) -> tuple[int, int]:
    """(status, pointer) of a new backend descriptor."""
    ptr = ctypes.c_void_p()
    status = capi.graph.cudnnBackendCreateDescriptor(desc_type, ctypes.byref(ptr))
    return status, ptr.value or 0


def set_attribute(ptr: int, attr: int, attr_type: AttrType, array: Any, count: int) -> int:
    return capi.graph.cudnnBackendSetAttribute(ptr, attr, int(attr_type), count, array)


def attribute_count(ptr: int, attr: int, attr_type: AttrType) -> tuple[int, int]:
    """(status, number of elements the attribute holds)."""
    n = ctypes.c_int64(0)
    status = capi.graph.cudnnBackendGetAttribute(ptr, attr, int(attr_type), 0, ctypes.byref(n), None)
    return status, n.value


def get_attribute(ptr: int, attr: int, attr_type: AttrType, count: int) -> tuple[int, list[Any]]:
    """(status, values): ints, floats, bools, Fractions, pointer ints (0 for NULL), or one str for CHAR."""
    elem, _ = ELEMENT[attr_type]
    array = array_type(elem, count)()
    n = ctypes.c_int64(0)
    status = capi.graph.cudnnBackendGetAttribute(ptr, attr, int(attr_type), count, ctypes.byref(n), array)
    if status:
        return status, []
    if attr_type == AttrType.CUDNN_TYPE_CHAR:
        return status, [bytes(array[: n.value]).split(b"\0", 1)[0].decode(errors="replace")]
    if elem is Fraction:
        return status, [array[i] for i in range(n.value)]
    values = list(array[: n.value])
    return status, [v or 0 for v in values] if elem is ctypes.c_void_p else values


def get_descriptors(ptr: int, attr: int, targets: list[int]) -> tuple[int, int]:
    """Fill the caller's descriptors ``targets`` from a descriptor-valued attribute: (status, filled)."""
    array = array_type(ctypes.c_void_p, len(targets))(*targets)
    n = ctypes.c_int64(0)
    status = capi.graph.cudnnBackendGetAttribute(ptr, attr, int(AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR),
                                                 len(targets), ctypes.byref(n), array)
    return status, n.value


def create_handle() -> tuple[int, int]:
    """(status, cudnnHandle_t) on the current device."""
    ptr = ctypes.c_void_p()
    status = capi.graph.cudnnCreate(ctypes.byref(ptr))
    return status, ptr.value or 0


def get_stream(handle: int) -> tuple[int, int]:
    """(status, cudaStream_t) of a handle."""
    out = ctypes.c_void_p()
    status = capi.graph.cudnnGetStream(handle, ctypes.byref(out))
    return status, out.value or 0


_stream_out = threading.local()  # per thread: ctypes releases the GIL during the call


def handle_stream(handle: int) -> int:
    """The cudaStream_t a handle is bound to, for hot paths (no objects made per call); -1 when
    cuDNN refuses the handle."""
    try:
        out, ref, call = _stream_out.args
    except AttributeError:  # this thread's first call
        out = ctypes.c_void_p()
        ref, call = ctypes.byref(out), capi.graph.cudnnGetStream
        _stream_out.args = (out, ref, call)
    if call(handle, ref):
        return -1
    return out.value or 0
