"""cuDNN data types <-> framework dtypes, from one table; every mapping is derived from it.

Sub-byte types (INT4, UINT4, FP4_E2M1) are 4 bits per element and cuDNN reads them packed two
per byte, and BOOLEAN is one bit per element (masks, packed least significant bit first), so
``itemsize`` refuses them: use ``bits`` or ``nbytes``. A framework bool, one byte per element,
is BYTE_BOOLEAN from cuDNN 9.25; before it there is no byte boolean and a framework bool is
BOOLEAN, as the official package binds it (`pre_byte_booleans`: the buffer is then larger than
the packed bits need, and execute warns that cuDNN reads it bit-packed). Frameworks that have
4-bit dtypes (torch.int4, ml_dtypes.int4) store one element per byte; ``describe`` reports
that producer itemsize.
FAST_FLOAT_FOR_FP8 is a compute type with no storage form.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from .._lib.dlpack import DLDataTypeCode as C
from .._lib.enums import data_type as D


class _Row(NamedTuple):
    dtype: D
    bits: int | None  # storage bits per element; None: not a storage type
    dlpack: tuple[int, int, int] | None  # (code, bits, lanes)
    names: tuple[str, ...]  # torch / numpy / ml_dtypes / jax dtype names; the first is canonical
    typestr: str | None  # array-interface typestr without its byte-order character


# Where two rows share a name, DLPack code or typestr, the first row wins the lookup.
_TABLE: tuple[_Row, ...] = (
    _Row(D.FLOAT, 32, (C.kDLFloat, 32, 1), ("float32",), "f4"),
    _Row(D.DOUBLE, 64, (C.kDLFloat, 64, 1), ("float64",), "f8"),
    _Row(D.HALF, 16, (C.kDLFloat, 16, 1), ("float16",), "f2"),
    _Row(D.INT8, 8, (C.kDLInt, 8, 1), ("int8",), "i1"),
    _Row(D.INT32, 32, (C.kDLInt, 32, 1), ("int32",), "i4"),
    _Row(D.INT8x4, 32, (C.kDLInt, 8, 4), (), None),
    _Row(D.UINT8, 8, (C.kDLUInt, 8, 1), ("uint8",), "u1"),
    _Row(D.UINT8x4, 32, (C.kDLUInt, 8, 4), (), None),
    _Row(D.INT8x32, 256, (C.kDLInt, 8, 32), (), None),
    _Row(D.BFLOAT16, 16, (C.kDLBfloat, 16, 1), ("bfloat16",), None),
    _Row(D.INT64, 64, (C.kDLInt, 64, 1), ("int64",), "i8"),
    _Row(D.BOOLEAN, 1, None, (), None),  # bit-packed: 8 elements a byte, least significant bit first
    _Row(D.FP8_E4M3, 8, (C.kDLFloat8_e4m3fn, 8, 1), ("float8_e4m3fn",), None),
    _Row(D.FP8_E5M2, 8, (C.kDLFloat8_e5m2, 8, 1), ("float8_e5m2",), None),
    _Row(D.FAST_FLOAT_FOR_FP8, None, None, (), None),
    _Row(D.FP8_E8M0, 8, (C.kDLFloat8_e8m0fnu, 8, 1), ("float8_e8m0fnu",), None),
    _Row(D.FP4_E2M1, 4, (C.kDLFloat4_e2m1fn, 4, 1), ("float4_e2m1fn",), None),
    _Row(D.INT4, 4, (C.kDLInt, 4, 1), ("int4",), None),
    _Row(D.UINT4, 4, (C.kDLUInt, 4, 1), ("uint4",), None),
    _Row(D.UINT32, 32, (C.kDLUInt, 32, 1), ("uint32",), "u4"),
    _Row(D.COMPLEX_FP32, 64, (C.kDLComplex, 64, 1), ("complex64",), "c8"),
    _Row(D.COMPLEX_FP64, 128, (C.kDLComplex, 128, 1), ("complex128",), "c16"),
    _Row(D.BYTE_BOOLEAN, 8, (C.kDLBool, 8, 1), ("bool",), "b1"),
    _Row(D.FP8_E5M3, 8, None, (), None),
)

_ROWS: dict[D, _Row] = {row.dtype: row for row in _TABLE}
_BY_NAME: dict[str, D] = {}
_BY_DLPACK: dict[tuple[int, int, int], D] = {}
_BY_TYPESTR: dict[str, D] = {}
for _entry in _TABLE:
    for _name in _entry.names:
        _BY_NAME.setdefault(_name, _entry.dtype)
    if _entry.dlpack:
        _code, _bits, _lanes = _entry.dlpack
        _BY_DLPACK.setdefault((int(_code), _bits, _lanes), _entry.dtype)
    if _entry.typestr:
        _BY_TYPESTR.setdefault(_entry.typestr, _entry.dtype)
del _entry, _name, _code, _bits, _lanes

# The short names people type for a data type, beside the framework names of `_TABLE` and the
# cudnn.data_type member names ("HALF", "FP8_E4M3", ...); every string is matched without case.
_SPELLINGS: dict[str, D] = {
    "fp16": D.HALF, "bf16": D.BFLOAT16, "fp32": D.FLOAT, "fp64": D.DOUBLE,
    "fp8_e4m3fn": D.FP8_E4M3, "fp8_e8m0fnu": D.FP8_E8M0, "fp4_e2m1fn": D.FP4_E2M1,
}
_BY_MEMBER: dict[str, D] = {member.lower(): dt for member, dt in D.__members__.items()}


def from_string(text: str) -> D:
    """A data type's name as typed -> data_type, or NOT_SET: a framework name ('float16',
    'torch.bfloat16'), a short name ('fp16', 'bf16', 'fp32') or a cudnn.data_type member name
    ('HALF', 'half'), without case. A framework's name wins: 'bool' is a framework bool."""
    key = text.strip().lower().removeprefix("torch.")
    dt = from_name(key)
    if dt is not D.NOT_SET:
        return dt
    dt = _SPELLINGS.get(key, D.NOT_SET)
    return dt if dt is not D.NOT_SET else _BY_MEMBER.get(key.removeprefix("data_type."), D.NOT_SET)


def refusal(what: str, value: Any) -> str:
    """The message for ``value``, given as ``what``, that is no data type: what is taken, and the
    closest name when ``value`` is a string."""
    hint = ""
    if isinstance(value, str):
        import difflib

        close = difflib.get_close_matches(value.strip().lower(), string_names(), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"{what}: expected a cudnn.data_type, a framework dtype (torch.float16, numpy.float16, ...) or a "
            "data type's name in any case: a cudnn.data_type member name ('HALF', 'BFLOAT16', 'FLOAT', "
            "'FP8_E4M3', ...), a framework dtype name ('float16', 'bfloat16', 'float32', 'float8_e4m3fn', ...) "
            f"or 'fp16', 'bf16', 'fp32', 'fp64'; got {value!r}{hint}")


def string_names() -> list[str]:
    """Every name `from_string` takes (lower case, ``torch.`` and ``data_type.`` prefixes aside)."""
    return sorted({*_BY_NAME, *_SPELLINGS, *_BY_MEMBER} - {"not_set"})


def from_name(name: str) -> D:
    """A framework dtype name ('float16', 'float8_e4m3fn', 'torch.int32') -> data_type, or NOT_SET."""
    return _bool_type(_BY_NAME.get(name.removeprefix("torch."), D.NOT_SET))


def from_dlpack(code: int, bits: int, lanes: int = 1) -> D:
    """A DLPack (code, bits, lanes) -> data_type, or NOT_SET where cuDNN has no equivalent."""
    return _bool_type(_BY_DLPACK.get((int(code), int(bits), int(lanes)), D.NOT_SET))


def from_typestr(typestr: str) -> D:
    """An array-interface typestr ('<f2', '|b1') -> data_type, or NOT_SET ('<V2' says nothing)."""
    return _bool_type(_BY_TYPESTR.get(typestr[1:], D.NOT_SET))


def data_type_of(x: Any) -> D:
    """The cuDNN data_type of a dtype given in any common form; ValueError when there is none.

    Accepts a cudnn.data_type (returned as is), a torch dtype, a numpy / cupy / ml_dtypes dtype
    or scalar type, a jax dtype, a DLPack dtype ((code, bits[, lanes]) or a struct with those
    fields), anything with a ``.dtype`` (arrays, tensors), or a string (`from_string`): a framework
    name such as "float16", a short name such as "fp16" / "bf16", or a member name such as "HALF".
    """
    dt = _lookup(x)
    if dt is D.NOT_SET:
        raise ValueError(f"no cuDNN data type for {x!r} ({type(x).__module__}.{type(x).__qualname__})")
    return dt


def _lookup(x: Any) -> D:
    if isinstance(x, D):
        return x
    if isinstance(x, str):
        return from_string(x)
    if isinstance(x, tuple) and 2 <= len(x) <= 3:
        return from_dlpack(*x)
    kind = type(x)
    if kind.__name__ == "dtype" and kind.__module__ == "torch":
        return from_name(str(x))
    if all(hasattr(x, field) for field in ("code", "bits", "lanes")):
        return from_dlpack(x.code, x.bits, x.lanes)
    name = getattr(x, "name", None)
    if isinstance(name, str) and hasattr(x, "itemsize") and hasattr(x, "kind"):  # numpy dtype
        return from_name(name)
    if isinstance(x, type) and x.__module__ != "builtins":  # np.float16, ml_dtypes.bfloat16, jnp.float32
        import numpy

        try:
            return _lookup(numpy.dtype(x))
        except TypeError:
            return D.NOT_SET
    inner = getattr(x, "dtype", None)  # arrays and tensors
    return _lookup(inner) if inner is not None and inner is not x else D.NOT_SET


BYTE_BOOLEAN_SINCE = 92500


@functools.cache
def pre_byte_booleans() -> bool:
    """Whether the loaded cuDNN predates BYTE_BOOLEAN (9.25): framework bools are then BOOLEAN,
    as the official package binds them, and BOOLEAN outputs get framework bool buffers. False
    without a loadable libcudnn."""
    from .._lib import loader

    try:
        return loader.report().version < BYTE_BOOLEAN_SINCE
    except Exception:  # noqa: BLE001 - no libcudnn here: today's types
        return False


def _bool_type(dt: D) -> D:
    """A framework bool's data type on the loaded cuDNN (see `pre_byte_booleans`)."""
    return D.BOOLEAN if dt == D.BYTE_BOOLEAN and pre_byte_booleans() else dt


def _row(dt: D) -> _Row:
    row = _ROWS.get(D(dt))
    if row is None or row.bits is None:
        raise ValueError(f"data_type.{D(dt).name} has no storage size (unset or compute-only)")
    return row


def bits(dt: D) -> int:
    """Storage bits per element: 4 for INT4/UINT4/FP4_E2M1, 32 for the INT8x4 vector, 1 for
    BOOLEAN, ..."""
    return int(_row(dt).bits)  # type: ignore[arg-type]


def itemsize(dt: D) -> int:
    """Bytes per element; ValueError for 4-bit types (packed two per byte: use ``nbytes``)."""
    b = bits(dt)
    if b % 8:
        raise ValueError(f"data_type.{D(dt).name} is {b} bits per element, packed two per byte: "
                         "use nbytes(dtype, count) for buffer sizes")
    return b // 8


def nbytes(dt: D, count: int) -> int:
    """Bytes that ``count`` packed elements of ``dt`` occupy (sub-byte types rounded up)."""
    return (count * bits(dt) + 7) // 8


def dtype_name(dt: D) -> str:
    """The framework dtype name of a data_type ('float16', 'bfloat16', ...); ValueError if none."""
    if D(dt) == D.BOOLEAN and pre_byte_booleans():
        dt = D.BYTE_BOOLEAN  # the framework's bool, as the official allocates it (more bytes than the bits)
    row = _ROWS.get(D(dt))
    if row is None or not row.names:
        raise ValueError(f"data_type.{D(dt).name} has no framework dtype")
    return row.names[0]


def torch_dtype(dt: D) -> Any:
    """data_type -> torch dtype (torch imported here, lazily); ValueError where torch lacks it."""
    import torch

    name = dtype_name(dt)
    value = getattr(torch, name, None)
    if value is None:
        raise ValueError(f"torch {torch.__version__} has no torch.{name} for data_type.{D(dt).name}")
    return value


def numpy_dtype(dt: D) -> Any:
    """data_type -> numpy dtype (bfloat16 / fp8 / int4 through ml_dtypes when installed)."""
    import numpy

    name = dtype_name(dt)
    try:
        return numpy.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes

        return numpy.dtype(getattr(ml_dtypes, name))
    except (ImportError, AttributeError):
        raise ValueError(f"numpy has no {name} dtype for data_type.{D(dt).name}: install ml_dtypes") from None
