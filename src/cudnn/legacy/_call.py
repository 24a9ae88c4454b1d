"""One C function as a Python function: arguments converted by their Kind, out-parameters
allocated and returned, statuses raised as cuDNN exceptions.

Bad arguments are refused here, before the C call, with the function and parameter named:
wrong count or type, None where a descriptor is required, a descriptor of the wrong type or
already destroyed, host memory where cuDNN reads device memory, an int out of the C range.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Any

from .._lib import legacy_ctypes as lc
from .._lib.enums import cudnnDataType_t
from .._lib.status import DescriptorClosedError, raise_status
from ..interop.streams import stream_ptr
from ._objects import NULL, Opaque, adopt, mark_destroyed
from ._signature import OUT_KINDS, Kind, Param, Signature

# C integer types: (bits, signed).
_INTS: dict[str, tuple[int, bool]] = {
    "int": (32, True), "int32_t": (32, True), "unsigned": (32, False), "unsigned int": (32, False),
    "uint32_t": (32, False), "int64_t": (64, True), "long long": (64, True), "long": (64, True),
    "uint64_t": (64, False), "size_t": (64, False), "unsigned long long": (64, False),
}
_FLOATS = frozenset({"float", "double"})
_DT = cudnnDataType_t
# cudnnSetTensor's value: struct format per tensor data type.
_PACK: dict[int, str] = {
    _DT.CUDNN_DATA_FLOAT: "<f", _DT.CUDNN_DATA_DOUBLE: "<d", _DT.CUDNN_DATA_HALF: "<e",
    _DT.CUDNN_DATA_INT8: "<b", _DT.CUDNN_DATA_UINT8: "<B", _DT.CUDNN_DATA_INT32: "<i",
    _DT.CUDNN_DATA_INT64: "<q", _DT.CUDNN_DATA_BOOLEAN: "<?",
}


class Binding:
    """A C function of a generated table, callable with Python values."""

    def __init__(self, sig: Signature, api: Any, enums: Mapping[str, type[IntEnum]], opaque: frozenset[str]) -> None:
        self.sig = sig
        self._api = api
        self._enums = enums
        self._opaque = opaque
        self._names = tuple(p.name for p in sig.inputs)
        self._by_name = {p.name: p for p in sig.params}
        self._pysig = sig.python_signature()
        self._convert: dict[Kind, Callable[[Param, Any, Any, dict[str, Any]], Any]] = {
            Kind.VALUE: self._value, Kind.ENUM: self._enum, Kind.HANDLE: self._handle,
            Kind.STREAM: self._stream, Kind.CALLBACK: self._callback, Kind.SCALE: self._scale,
            Kind.FILL: self._fill, Kind.POINTER: self._pointer, Kind.IN_ARRAY: self._in_array,
        }

    # -- the call ---------------------------------------------------------------------------

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Convert the Python arguments, make the C call, raise its status, return the outputs."""
        if kwargs or len(args) != len(self._names):
            args = self._bind(args, kwargs)
        given = dict(zip(self._names, args))
        cfunc = getattr(self._api, self.sig.name)
        cargs: list[Any] = []
        outs: list[tuple[Param, Any]] = []
        for p, argtype in zip(self.sig.params, cfunc.argtypes):
            if p.kind in OUT_KINDS:
                buffer = self._out_buffer(p, argtype, given)
                outs.append((p, buffer))
                cargs.append(lc.by_reference(buffer))
            else:
                cargs.append(self._convert[p.kind](p, given[p.name], argtype, given))
        try:
            result = cfunc(*cargs)
        except lc.ArgumentError as exc:  # a type we let through that ctypes still refused
            raise TypeError(f"{self.sig.name}(): {exc}") from None
        if self.sig.restype == "cudnnStatus_t":
            if result:
                raise_status(result, lambda: self._describe(given))
            result = None
        elif isinstance(result, bytes):
            result = result.decode(errors="replace")
        if self.sig.destroys:
            first = self.sig.params[0]
            target = given[first.name]
            mark_destroyed(target if isinstance(target, Opaque) else None, first.base, cargs[0] or 0)
        return self._results(result, outs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        try:
            bound = self._pysig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.sig.name}(): {exc}; the call is {self.sig}") from None
        bound.apply_defaults()
        return tuple(bound.arguments[name] for name in self._names)

    def _results(self, result: Any, outs: list[tuple[Param, Any]]) -> Any:
        values = {p.name: self._out_value(p, lc.read_out(buffer)) for p, buffer in outs}
        for p, _ in outs:
            if p.filled is not None:  # cut arrays to the count cuDNN filled in
                values[p.name] = values[p.name][: max(0, int(values[p.filled]))]
        returned = [values[p.name] for p in self.sig.outputs]
        if result is not None:
            returned.insert(0, result)
        if not returned:
            return None
        return returned[0] if len(returned) == 1 else tuple(returned)

    def _out_value(self, p: Param, raw: Any) -> Any:
        enum = self._enums.get(p.base)
        if p.kind is Kind.OUT_ARRAY:
            return [self._as_enum(enum, x) for x in raw] if enum else raw
        if p.kind is Kind.OUT_STRING:
            return raw
        if p.base in self._opaque:
            return adopt(p.base, raw) if raw else None
        if p.base == "cudaStream_t":
            return int(raw or 0)
        return self._as_enum(enum, raw) if enum else raw

    @staticmethod
    def _as_enum(enum: type[IntEnum] | None, value: int) -> Any:
        return enum(value) if enum is not None and value in enum._value2member_map_ else value

    def _out_buffer(self, p: Param, argtype: Any, given: dict[str, Any]) -> Any:
        if p.kind is Kind.OUT:
            return lc.out_buffer(argtype)
        assert p.length is not None
        length = self._int(self._by_name[p.length], given[p.length])
        if length < 0:
            raise ValueError(f"{self.sig.name}(): {p.length} cannot be negative, got {length}")
        return lc.out_string(length) if p.kind is Kind.OUT_STRING else lc.out_array(argtype, length)

    def _describe(self, given: dict[str, Any]) -> str:
        return f"{self.sig.name}({', '.join(f'{k}={_short(v)}' for k, v in given.items())})"

    def _error(self, p: Param, message: str) -> TypeError:
        return TypeError(f"{self.sig.name}(): {p.name} ({p.ctype}) {message}")

    # -- inputs by kind -----------------------------------------------------------------------

    def _int(self, p: Param, value: Any) -> int:
        try:
            number = operator.index(value)
        except TypeError:
            raise self._error(p, f"must be an integer, got {type(value).__name__}") from None
        bits, signed = _INTS.get(p.base, (32, True))
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not low <= number <= high:
            raise OverflowError(f"{self.sig.name}(): {p.name} ({p.ctype}) = {number} is out of range [{low}, {high}]")
        return number

    def _value(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> Any:
        if p.base in _FLOATS:
            return self._float(p, value)
        return self._int(p, value)

    def _float(self, p: Param, value: Any) -> float:
        if value is None or isinstance(value, (str, bytes)):
            raise self._error(p, f"must be a number, got {type(value).__name__}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise self._error(p, f"must be a number, got {type(value).__name__}") from None

    def _enum(self, p: Param, value: Any, argtype: Any = None, given: Any = None) -> int:
        enum = self._enums.get(p.base)
        if isinstance(value, str) and enum is not None:
            try:
                return int(enum[value])
            except KeyError:
                raise ValueError(f"{self.sig.name}(): {value!r} is not a {p.base} member "
                                 f"(members: {', '.join(enum.__members__)})") from None
        kind = type(value).__name__
        if isinstance(value, IntEnum) and kind in self._enums and kind != p.base:
            raise self._error(p, f"must be a {p.base}, got {kind}.{value.name}")
        return self._int(p, value)

    def _handle(self, p: Param, value: Any, argtype: Any = None, given: Any = None) -> int | None:
        if isinstance(value, Opaque):
            if value.ctype != p.base:
                raise self._error(p, f"must be a {p.base}, got a {value.ctype}")
            if value.destroyed:
                raise DescriptorClosedError(f"{self.sig.name}(): {p.name} {value!r} was already destroyed")
            return value.value
        if value is NULL:
            return None
        if value is None or (lc.is_ctypes(value) and not lc.ctypes_address(value)) or (
                isinstance(value, int) and not isinstance(value, bool) and value == 0):
            if p.optional:
                return None
            raise self._error(p, f"must be a {p.base}, got {value!r}; pass cudnn.legacy.NULL "
                                 "if this call accepts NULL there")
        if isinstance(value, bool):
            raise self._error(p, "must be a handle or descriptor, got a bool")
        if lc.is_ctypes(value):
            return lc.ctypes_address(value)
        try:
            return operator.index(value)  # a raw pointer, or an object such as cudnn.Handle
        except TypeError:
            raise self._error(p, f"must be a {p.base}, got {type(value).__name__}") from None

    def _stream(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> int | None:
        try:
            return stream_ptr(value) or None
        except (TypeError, ValueError) as exc:
            raise self._error(p, str(exc)) from None

    def _callback(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> Any:
        if value is None or value is NULL:
            return None
        if callable(value):
            return lc.callback(value)
        return self._handle(p, value)

    def _scale(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> Any:
        if lc.is_ctypes(value):
            return lc.ctypes_address(value)
        number = self._float(p, value)
        return lc.host_scalar(number, self._data_type(p, given) == _DT.CUDNN_DATA_DOUBLE)

    def _fill(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> Any:
        if lc.is_ctypes(value):
            return lc.ctypes_address(value)
        dtype = self._data_type(p, given)
        if dtype == _DT.CUDNN_DATA_BFLOAT16:
            bits = struct.unpack("<I", struct.pack("<f", self._float(p, value)))[0]
            bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
            return struct.pack("<H", (bits >> 16) & 0xFFFF)
        fmt = _PACK.get(dtype) if dtype is not None else None
        if fmt is None:
            raise self._error(p, f"cannot be made from a Python number for data type {_short(dtype)}; "
                                 "pass a ctypes value of that type")
        number = self._float(p, value) if fmt in ("<f", "<d", "<e") else operator.index(value)
        return struct.pack(fmt, number)

    def _data_type(self, p: Param, given: dict[str, Any]) -> int | None:
        """Data type of the descriptor that decides a scalar's precision (see the module doc)."""
        if p.dtype_from is None:
            return None
        desc_param = self._by_name[p.dtype_from]
        desc = given.get(p.dtype_from)
        if desc is None or desc is NULL:
            return None
        pointer = self._handle(desc_param, desc)
        if not pointer:
            return None
        return lc.tensor_data_type(pointer, desc_param.base == "cudnnFilterDescriptor_t")

    def _pointer(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> int | None:
        if isinstance(value, Opaque):
            raise self._error(p, f"must be memory, got the descriptor {value!r}")
        if isinstance(value, (str, bytes, float)):
            raise self._error(p, f"must be a pointer or a tensor, got {type(value).__name__}")
        try:
            address, host = lc.data_pointer(value)
        except (TypeError, ValueError) as exc:
            raise self._error(p, str(exc)) from None
        if host and not p.host:
            raise self._error(p, f"is read on the GPU, but this {type(value).__name__} is in host memory")
        return address or None

    def _in_array(self, p: Param, value: Any, argtype: Any, given: dict[str, Any]) -> Any:
        if value is None or value is NULL:
            return None
        host_array = hasattr(value, "__array_interface__") and not hasattr(value, "__cuda_array_interface__")
        if isinstance(value, (list, tuple, range)) or host_array:
            if p.device:
                raise self._error(p, "is read on the GPU: pass device memory (a CUDA tensor), not a host array")
            items = value.tolist() if host_array else list(value)
            if not isinstance(items, list):
                raise self._error(p, "must be a one-dimensional array")
            convert = self._enum if p.base in self._enums else (lambda q, x: self._int(q, x))
            return lc.in_array(argtype, [convert(p, x) for x in items])
        return self._pointer(p, value, argtype, given)


def _short(value: Any) -> str:
    """A short text for an argument in an error message."""
    if isinstance(value, IntEnum):
        return value.name
    if value is None or value is NULL or isinstance(value, (int, float, str, Opaque)):
        return repr(value)
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        return repr(value)
    return f"<{type(value).__name__}>"


def make_function(binding: Binding) -> Callable[..., Any]:
    """The public Python function: C name, C parameter names, the prototype as its doc."""
    sig = binding.sig

    def function(*args: Any, **kwargs: Any) -> Any:
        return binding(args, kwargs)

    function.__name__ = function.__qualname__ = sig.name
    function.__signature__ = sig.python_signature()  # type: ignore[attr-defined]
    function.__doc__ = _doc(sig)
    function.__module__ = "cudnn.legacy"
    function.binding = binding  # type: ignore[attr-defined]  # for introspection and tests
    return function


def _doc(sig: Signature) -> str:
    params = ", ".join(f"{p.ctype} {p.name}" for p in sig.params)
    lines = [str(sig), "", f"C: {sig.restype} {sig.name}({params});"]
    if sig.outputs:
        lines.append(f"Returns the out-parameters {', '.join(p.name for p in sig.outputs)}.")
    if sig.deprecated:
        lines.append("Deprecated in cuDNN 9 (the graph API replaces it); still supported by the library.")
    return "\n".join(lines)
