"""Tensor interop without a GPU: NumPy (array interface and DLPack), hand-made CUDA array
interfaces and DLPack capsules (fake pointers, never dereferenced), torch and JAX CPU arrays,
and the dtype tables."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from enum import IntEnum
from typing import Any

import numpy as np
import pytest

import cudnn
from cudnn._lib import dlpack as dl
from cudnn.interop import framework_dtypes as dtypes
from cudnn.interop import tensors
from cudnn.interop.tensors import (
    TensorInfo,
    current_stream,
    data_ptr,
    data_type_of,
    describe,
    empty_like_framework,
    is_tensor_like,
    itemsize,
    torch_dtype,
)

D = cudnn.data_type
FAKE = 0xDEAD0000  # a device address nothing may read


# -- NumPy through __array_interface__ ------------------------------------------------------

VIEWS = {
    "contiguous": lambda a: a,
    "transposed": lambda a: a.transpose(2, 0, 1),
    "stepped": lambda a: a[:, ::2, 1::2],
    "offset": lambda a: a[1:, 1:, 2:],
    "reversed": lambda a: a[:, ::-1],
    "zero_size": lambda a: a[:, 3:],
    "scalar": lambda a: a[1, 2, 3, ...],  # a 0-d view (a[1, 2, 3] would be a copied scalar)
}


@pytest.mark.parametrize("view", VIEWS, ids=list(VIEWS))
def test_numpy_array_interface(view: str) -> None:
    base = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    a = np.asarray(VIEWS[view](base))
    info = describe(a)
    strides = tuple(s // 4 for s in a.strides) if a.size else info.strides  # numpy omits them: any will do
    assert info == TensorInfo(a.ctypes.data, a.shape, strides, D.FLOAT, 4, "cpu", 0, None, "numpy")
    assert data_ptr(a) == a.ctypes.data
    if a.size == 0:
        assert info.needed_bytes == 0
    elif view == "reversed":
        assert info.strides[1] < 0 and info.needed_bytes == (1 * 12 + 3 + 1) * 4  # forward reach only
    else:
        assert a.ctypes.data + info.needed_bytes <= base.ctypes.data + base.nbytes


def test_numpy_offset_view_points_past_the_base() -> None:
    base = np.zeros((4, 5), dtype=np.float64)
    info = describe(base[2:, 3:])
    assert info.ptr == base.ctypes.data + (2 * 5 + 3) * 8
    assert info.shape == (2, 2) and info.strides == (5, 1) and info.needed_bytes == (5 + 1 + 1) * 8


@pytest.mark.parametrize(("dtype", "expected"), [
    (np.float16, D.HALF), (np.float32, D.FLOAT), (np.float64, D.DOUBLE), (np.int8, D.INT8),
    (np.uint8, D.UINT8), (np.int32, D.INT32), (np.int64, D.INT64), (np.bool_, D.BYTE_BOOLEAN),
    (np.uint32, D.UINT32), (np.complex64, D.COMPLEX_FP32), (np.complex128, D.COMPLEX_FP64),
    (np.int16, D.NOT_SET), (np.uint64, D.NOT_SET),
])
def test_numpy_dtypes(dtype: Any, expected: D) -> None:
    a = np.zeros((2, 3), dtype=dtype)
    info = describe(a)
    assert info.dtype is expected and info.itemsize == a.itemsize and info.strides == (3, 1)


def test_ml_dtypes_by_name() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name, expected in [("bfloat16", D.BFLOAT16), ("float8_e4m3fn", D.FP8_E4M3),
                           ("float8_e5m2", D.FP8_E5M2), ("float8_e8m0fnu", D.FP8_E8M0)]:
        a = np.zeros((2, 2), dtype=getattr(ml_dtypes, name))
        info = describe(a)
        assert (info.dtype, info.itemsize, info.strides) == (expected, a.itemsize, (2, 1)), name
        assert data_type_of(a.dtype) is expected and data_type_of(getattr(ml_dtypes, name)) is expected
    assert describe(np.zeros(2, ml_dtypes.bfloat16)).ptr != 0


# -- NumPy through DLPack -------------------------------------------------------------------

class _Exporter:
    """Forwards DLPack to an array; ``legacy`` drops max_version/copy like an older producer."""

    def __init__(self, a: np.ndarray, legacy: bool = False) -> None:
        self.a, self.legacy, self.calls, self.capsules = a, legacy, [], []

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.legacy and ("max_version" in kwargs or "copy" in kwargs):
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        capsule = self.a.__dlpack__(**kwargs)
        self.capsules.append(repr(capsule))
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
@pytest.mark.parametrize("view", [v for v in VIEWS if v != "reversed"])
def test_numpy_dlpack_matches_array_interface(view: str, legacy: bool) -> None:
    base = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    a = np.asarray(VIEWS[view](base))
    exporter = _Exporter(a, legacy)
    info = describe(exporter)
    expected = describe(a)
    assert info.framework == "dlpack" and info.ptr == a.ctypes.data
    assert (info.shape, info.dtype, info.itemsize, info.device_type, info.device_id) == \
        (expected.shape, D.INT32, 4, "cpu", 0)
    if a.size:
        assert info.strides == expected.strides
    assert "stream" not in exporter.calls[0]  # numpy refuses any stream for host memory
    assert exporter.calls[0]["max_version"] == dl.MAX_VERSION and exporter.calls[0]["copy"] is False
    assert len(exporter.calls) == (2 if legacy else 1) and exporter.calls[1:] in ([], [{}])
    name = "dltensor" if legacy else "dltensor_versioned"
    assert len(exporter.capsules) == 1 and exporter.capsules[0].startswith(f'<capsule object "{name}"')


def test_dlpack_capsule_is_left_for_its_own_destructor() -> None:
    a = np.arange(6.0)
    kept: list[Any] = []

    class Keep:
        def __dlpack__(self, **kwargs: Any) -> Any:
            kept.append(a.__dlpack__(**kwargs))
            return kept[-1]

        def __dlpack_device__(self) -> tuple[int, int]:
            return a.__dlpack_device__()

    keep = Keep()
    before = sys.getrefcount(a)
    describe(keep)
    assert dl.capsule_name(kept[0]) == dl.CAPSULE_VERSIONED  # not renamed: not consumed
    assert sys.getrefcount(a) == before + 1  # the capsule's manager holds the array
    kept.clear()
    assert sys.getrefcount(a) == before  # the destructor called the deleter, once
    exporter = _Exporter(a)
    before = sys.getrefcount(a)
    for _ in range(500):
        describe(exporter)
    assert sys.getrefcount(a) == before  # no capsule leaked


# -- hand-made DLPack capsules -------------------------------------------------------------

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


class _Producer:
    """A DLPack producer with a capsule built by hand (no destructor: the struct lives here)."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None, *,
                 device: tuple[int, int] = (2, 0), dtype: tuple[int, int, int] = (2, 16, 1),
                 byte_offset: int = 0, versioned: bool = True, version: tuple[int, int] = (1, 1),
                 flags: int = 0, old: bool = False, name: bytes | None = None) -> None:
        n = len(shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = (ctypes.c_int64 * max(n, 1))(*strides) if strides is not None else None
        i64 = ctypes.POINTER(ctypes.c_int64)
        tensor = dl.DLTensor(FAKE, dl.DLDevice(*device), n, dl.DLDataType(*dtype),
                             ctypes.cast(self._shape, i64),
                             ctypes.cast(self._strides, i64) if self._strides is not None else None,
                             byte_offset)
        if versioned:
            self._managed: Any = dl.DLManagedTensorVersioned(dl.DLPackVersion(*version), None, dl._Deleter(),
                                                             flags, tensor)
        else:
            self._managed = dl.DLManagedTensor(tensor, None, dl._Deleter())
        self.name = name or (dl.CAPSULE_VERSIONED if versioned else dl.CAPSULE)
        self.device, self.old, self.calls = device, old, []

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.old and "max_version" in kwargs:
            raise TypeError("unexpected keyword argument 'max_version'")
        return _capsule_new(ctypes.addressof(self._managed), self.name, None)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def test_dlpack_cuda_capsule() -> None:
    producer = _Producer((2, 3, 4), None, device=(2, 3), byte_offset=64)
    info = describe(producer)
    assert producer.calls == [{"stream": -1, "max_version": dl.MAX_VERSION, "copy": False}]
    assert info.ptr == FAKE + 64 and info.shape == (2, 3, 4) and info.strides == (12, 4, 1)
    assert (info.dtype, info.itemsize, info.device_type, info.device_id, info.framework) == \
        (D.HALF, 2, "cuda", 3, "dlpack")
    assert info.needed_bytes == 24 * 2
    assert data_ptr(producer) == FAKE + 64


def test_dlpack_legacy_producer_without_keywords() -> None:
    producer = _Producer((5,), (2,), versioned=False, old=True)
    info = describe(producer)
    assert producer.calls == [{"stream": -1, "max_version": dl.MAX_VERSION, "copy": False}, {"stream": -1}]
    assert (info.shape, info.strides, info.ptr) == ((5,), (2,), FAKE)


@pytest.mark.parametrize(("device", "name", "stream"), [
    ((1, 0), "cpu", None), ((3, 0), "cuda_host", None), ((13, 0), "cuda_managed", -1),
    ((10, 1), "rocm", -1), ((4, 0), "opencl", None), ((99, 2), "dlpack_device_99", None),
])
def test_dlpack_devices_and_peek_stream(device: tuple[int, int], name: str, stream: int | None) -> None:
    producer = _Producer((3,), device=device)
    info = describe(producer)
    assert (info.device_type, info.device_id) == (name, device[1])
    assert producer.calls[0].get("stream") == stream


def test_jax_peeks_without_a_stream() -> None:
    # jax waits on any int stream it is given, so a CUDA jax array gets stream=None.
    jax_like = type("ArrayImpl", (_Producer,), {"__module__": "jaxlib._jax"})((2, 2), device=(2, 0))
    info = describe(jax_like)
    assert info.framework == "jax" and "stream" not in jax_like.calls[0]


@pytest.mark.parametrize(("dtype", "flags", "expected", "size"), [
    ((0, 8, 4), 0, D.INT8x4, 4), ((1, 8, 4), 0, D.UINT8x4, 4), ((0, 8, 32), 0, D.INT8x32, 32),
    ((4, 16, 1), 0, D.BFLOAT16, 2), ((10, 8, 1), 0, D.FP8_E4M3, 1), ((12, 8, 1), 0, D.FP8_E5M2, 1),
    ((14, 8, 1), 0, D.FP8_E8M0, 1), ((8, 8, 1), 0, D.NOT_SET, 1), ((6, 8, 1), 0, D.BYTE_BOOLEAN, 1),
    ((0, 4, 1), dl.FLAG_IS_SUBBYTE_TYPE_PADDED, D.INT4, 1),
    ((17, 4, 1), dl.FLAG_IS_SUBBYTE_TYPE_PADDED, D.FP4_E2M1, 1),
])
def test_dlpack_dtypes(dtype: tuple[int, int, int], flags: int, expected: D, size: int) -> None:
    info = describe(_Producer((4,), dtype=dtype, flags=flags))
    assert (info.dtype, info.itemsize) == (expected, size)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"dtype": (0, 4, 1)}, TypeError, "packed 4-bit"),
    ({"flags": dl.FLAG_IS_COPIED}, BufferError, "copy"),
    ({"version": (2, 0)}, BufferError, "version 2.0"),
    ({"name": b"used_dltensor"}, BufferError, "unconsumed"),
])
def test_dlpack_refusals(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        describe(_Producer((4,), **kwargs))


# -- __cuda_array_interface__ ---------------------------------------------------------------

class _CAI:
    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4", strides: tuple[int, ...] | None = None,
                 data: int = FAKE, version: int = 3, **extra: Any) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (data, False), "version": version, **extra}


class _CAIType:
    """The protocol as a class property, as CuPy and Numba have it."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> None:
        self.shape, self.strides = shape, strides

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": "<f2", "strides": self.strides, "data": (FAKE, False),
                "version": 2}


def test_cuda_array_interface_is_read_without_touching_memory() -> None:
    info = describe(_CAIType((2, 3, 4), (48, 2, 12)))
    assert info == TensorInfo(FAKE, (2, 3, 4), (24, 1, 6), D.HALF, 2, "cuda", 0, None, "cai")
    assert describe(_CAIType((2, 3))).strides == (3, 1)
    assert data_ptr(_CAIType((1,))) == FAKE
    assert tensors._PTR[_CAIType] is tensors._FAST_PTR["__cuda_array_interface__"]


def test_instance_level_protocols_are_not_cached_by_type() -> None:
    info = describe(_CAI((4, 4), "<i1", (8, 2), version=2))
    assert (info.dtype, info.itemsize, info.strides, info.framework) == (D.INT8, 1, (8, 2), "cai")
    assert _CAI not in tensors._ROUTES
    plain = _CAI((1,))
    del plain.__cuda_array_interface__
    assert not is_tensor_like(plain)


def test_cupy_like_device_and_extent() -> None:
    class PooledMemory:  # CuPy's own allocation: its block size bounds the array
        ptr, size = FAKE - 256, 4096

    class Ptr:
        ptr, mem = FAKE, PooledMemory()

    class Device:
        id = 1

    cupy_like = type("ndarray", (_CAIType,), {"__module__": "cupy._core.core", "data": Ptr(),
                                              "device": Device()})((8, 8))
    info = describe(cupy_like)
    assert (info.framework, info.device_id, info.extent_bytes) == ("cupy", 1, 4096 - 256)
    assert data_ptr(cupy_like) == FAKE


def test_cupy_imported_memory_is_not_sized_by_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy sizes memory it imported (DLPackMemory, UnownedMemory) from the producer's shape, too
    small for strided layouts (a channels-last weight came out 108 bytes for 9216): CUDA is asked."""
    class DLPackMemory:
        ptr, size = FAKE, 108

    class Ptr:
        ptr, mem = FAKE, DLPackMemory()

    class Device:
        id = 0

    asked: list[int] = []

    def locate(obj: Any, ptr: int) -> tuple[int, int | None]:
        asked.append(ptr)
        return 0, 9216

    monkeypatch.setattr(tensors, "_locate_pointer", locate)
    imported = type("ndarray", (_CAIType,), {"__module__": "cupy._core.core", "data": Ptr(),
                                             "device": Device()})((16, 32, 3, 3), (576, 2, 192, 64))
    assert describe(imported).extent_bytes == 9216 and asked == [FAKE]


@pytest.mark.parametrize(("cai", "error"), [
    (_CAI((2, 2), "<f4", (6, 2)), ValueError),
    (_CAI((2,), ">f4"), ValueError),
    (_CAI((2,), mask=object()), TypeError),
])
def test_cuda_array_interface_refusals(cai: _CAI, error: type) -> None:
    with pytest.raises(error):
        describe(cai)


# -- data_ptr, is_tensor_like, errors ----------------------------------------------------

class _Ptr(IntEnum):
    A = 0x1000


def test_data_ptr_of_ints() -> None:
    assert data_ptr(0) == 0 and data_ptr(0xABCDEF00) == 0xABCDEF00
    assert data_ptr(_Ptr.A) == 0x1000 and type(data_ptr(_Ptr.A)) is int
    with pytest.raises(TypeError):
        data_ptr(True)


@pytest.mark.parametrize("bad", [object(), "tensor", 1.5, None, [1, 2], True])
def test_unsupported_objects(bad: Any) -> None:
    assert not is_tensor_like(bad)
    for call in (describe, data_ptr):
        with pytest.raises(TypeError, match=r"cannot read a tensor from .*__cuda_array_interface__"):
            call(bad)


def test_describe_int_says_it_is_a_pointer() -> None:
    assert not is_tensor_like(1234)
    with pytest.raises(TypeError, match=r"builtins\.int \(an int is a raw pointer"):
        describe(1234)


def test_is_tensor_like() -> None:
    assert is_tensor_like(np.zeros(2)) and is_tensor_like(_CAIType((1,))) and is_tensor_like(_Producer((1,)))


# -- dtype tables ---------------------------------------------------------------------------

ITEMSIZES = {
    D.HALF: 2, D.FLOAT: 4, D.DOUBLE: 8, D.INT8: 1, D.UINT8: 1, D.INT32: 4, D.INT64: 8, D.BFLOAT16: 2,
    D.FP8_E4M3: 1, D.FP8_E5M2: 1, D.FP8_E8M0: 1, D.FP8_E5M3: 1, D.BYTE_BOOLEAN: 1,
    D.UINT32: 4, D.COMPLEX_FP32: 8, D.COMPLEX_FP64: 16, D.INT8x4: 4, D.UINT8x4: 4, D.INT8x32: 32,
}


def test_itemsize_bits_nbytes() -> None:
    assert {dt: itemsize(dt) for dt in ITEMSIZES} == ITEMSIZES
    assert dtypes.bits(D.BOOLEAN) == 1 and dtypes.nbytes(D.BOOLEAN, 17) == 3  # bit-packed masks
    with pytest.raises(ValueError, match="1 bits per element"):
        itemsize(D.BOOLEAN)
    for dt in (D.INT4, D.UINT4, D.FP4_E2M1):
        assert dtypes.bits(dt) == 4 and dtypes.nbytes(dt, 3) == 2
        with pytest.raises(ValueError, match="4 bits per element"):
            itemsize(dt)
    for dt in (D.NOT_SET, D.FAST_FLOAT_FOR_FP8):
        with pytest.raises(ValueError, match="no storage size"):
            itemsize(dt)
    assert {dt for dt in D} == set(ITEMSIZES) | {D.INT4, D.UINT4, D.FP4_E2M1, D.BOOLEAN, D.NOT_SET,
                                                  D.FAST_FLOAT_FOR_FP8}


def test_table_round_trips() -> None:
    for row in dtypes._TABLE:
        first = row.dtype
        if row.dlpack:
            assert dtypes.from_dlpack(*row.dlpack) is first
            assert data_type_of(row.dlpack) is first
        for name in row.names:
            assert data_type_of(name) is first and dtypes.from_name("torch." + name) is first
        if row.typestr:
            assert dtypes.from_typestr("<" + row.typestr) is first
        if row.names and row.typestr:
            assert data_type_of(np.dtype(dtypes.dtype_name(row.dtype))) is first
            assert dtypes.numpy_dtype(row.dtype).itemsize == itemsize(row.dtype)


@pytest.mark.parametrize(("given", "expected"), [
    ("float16", D.HALF), ("bfloat16", D.BFLOAT16), ("half", D.HALF), ("FP8_E4M3", D.FP8_E4M3),
    ("torch.float32", D.FLOAT), (D.INT64, D.INT64), (np.float16, D.HALF), (np.dtype("int8"), D.INT8),
    (np.zeros(2, np.float64), D.DOUBLE), ((2, 32), D.FLOAT), (dl.DLDataType(4, 16, 1), D.BFLOAT16),
])
def test_data_type_of(given: Any, expected: D) -> None:
    assert data_type_of(given) is expected


@pytest.mark.parametrize("bad", ["int16", "NOT_SET", "nope", np.int16, np.dtype("uint64"), float, object(),
                                 (7, 8, 1)])
def test_data_type_of_refuses(bad: Any) -> None:
    with pytest.raises(ValueError, match="no cuDNN data type"):
        data_type_of(bad)


# -- allocation and streams without torch ---------------------------------------------------

def test_empty_like_numpy() -> None:
    out = empty_like_framework(np.zeros(1), (2, 3, 4), (1, 8, 2), D.HALF)
    assert type(out) is np.ndarray and out.shape == (2, 3, 4) and out.dtype == np.float16
    assert out.strides == (2, 16, 4) and describe(out).needed_bytes == (1 + 16 + 6 + 1) * 2
    out = empty_like_framework("numpy", (0, 3), (3, 1), D.FLOAT)
    assert out.shape == (0, 3) and out.dtype == np.float32
    with pytest.raises(ValueError, match="non-negative"):
        empty_like_framework("numpy", (2, 2), (-1, 1), D.FLOAT)
    with pytest.raises(ValueError, match="one non-negative stride per dim"):
        empty_like_framework("numpy", (2, 2), (1,), D.FLOAT)


def test_empty_like_refuses_when_no_substitute_applies() -> None:
    with pytest.raises(TypeError, match="cannot allocate a opencl tensor for a dlpack input"):
        empty_like_framework(_Producer((1,), device=(4, 0)), (1,), (1,), D.FLOAT)


def test_current_stream_without_a_gpu_framework() -> None:
    assert current_stream(np.zeros(1)) == 0 and current_stream(_CAIType((1,))) == 0 and current_stream(7) == 0


def test_import_stays_light() -> None:
    heavy = ("numpy", "torch", "jax", "cupy", "numba", "ml_dtypes")
    code = f"import sys, cudnn, cudnn.interop.tensors; print(sorted(set({heavy!r}) & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(tensors.__file__).rsplit("/cudnn/", 1)[0], "PATH": ""})
    assert out.stdout.strip() == "[]"


# -- torch on the CPU -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


def test_torch_views(torch: Any) -> None:
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    for t in (base, base.transpose(0, 2), base[1:, ::2, 3:], base.permute(2, 0, 1)[2],
              base[:, :0], base.expand(2, 3, 4, 5)):
        info = describe(t)
        assert info.ptr == t.data_ptr() == data_ptr(t)
        assert (info.shape, info.strides) == (tuple(t.shape), t.stride())
        assert (info.dtype, info.itemsize, info.device_type, info.device_id, info.framework) == \
            (D.FLOAT, 4, "cpu", 0, "torch")
        assert info.extent_bytes == (60 - t.storage_offset()) * 4
        assert info.needed_bytes <= info.extent_bytes


def test_torch_storage_offset_and_extent(torch: Any) -> None:
    base = torch.zeros(10, 10, dtype=torch.float16)
    t = base[3:5, 2:7]
    info = describe(t)
    assert t.storage_offset() == 32 and info.ptr == base.data_ptr() + 32 * 2
    assert info.extent_bytes == (100 - 32) * 2 and info.needed_bytes == (10 + 4 + 1) * 2


def test_torch_channels_last_and_parameter(torch: Any) -> None:
    t = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert describe(t).strides == (60, 1, 15, 3)
    p = torch.nn.Parameter(torch.zeros(3, 2))
    assert describe(p).framework == "torch" and data_ptr(p) == p.data_ptr()
    assert not is_tensor_like(torch.Size([2, 3])) and not is_tensor_like(torch.float32)


@pytest.mark.parametrize(("name", "expected"), [
    ("float16", D.HALF), ("bfloat16", D.BFLOAT16), ("float32", D.FLOAT), ("float64", D.DOUBLE),
    ("int8", D.INT8), ("uint8", D.UINT8), ("int32", D.INT32), ("int64", D.INT64), ("bool", D.BYTE_BOOLEAN),
    ("uint32", D.UINT32), ("complex64", D.COMPLEX_FP32), ("float8_e4m3fn", D.FP8_E4M3),
    ("float8_e5m2", D.FP8_E5M2), ("float8_e8m0fnu", D.FP8_E8M0), ("float8_e4m3fnuz", D.NOT_SET),
    ("float4_e2m1fn_x2", D.NOT_SET), ("int16", D.NOT_SET),
])
def test_torch_dtypes(torch: Any, name: str, expected: D) -> None:
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"torch {torch.__version__} has no {name}")
    t = torch.empty(2, 3, dtype=dtype)
    info = describe(t)
    assert (info.dtype, info.itemsize) == (expected, t.element_size())
    if expected is not D.NOT_SET:
        assert data_type_of(dtype) is expected and torch_dtype(expected) is dtype
    else:
        with pytest.raises(ValueError):
            data_type_of(dtype)


def test_torch_dtype_for_every_named_type(torch: Any) -> None:
    assert torch_dtype(D.BYTE_BOOLEAN) is torch.bool and torch_dtype(D.HALF) is torch.float16
    for dt in (D.NOT_SET, D.FAST_FLOAT_FOR_FP8, D.INT8x4, D.FP8_E5M3):
        with pytest.raises(ValueError):
            torch_dtype(dt)


def test_torch_refusals(torch: Any) -> None:
    with pytest.raises(TypeError, match="layout torch.sparse_coo"):
        describe(torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="resolve_conj"):
        describe(torch.zeros(2, dtype=torch.complex64).conj())


def test_torch_empty_like_and_stream(torch: Any) -> None:
    out = empty_like_framework(torch.zeros(1), (2, 3, 4), (12, 1, 3), D.BFLOAT16)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 4) and out.stride() == (12, 1, 3)
    assert out.dtype is torch.bfloat16 and out.device.type == "cpu"
    assert current_stream(torch.zeros(1)) == 0


def test_torch_cpu_through_dlpack_and_array_interface(torch: Any) -> None:
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, 1:]
    wrapped = type("Wrapped", (), {"__dlpack__": lambda s, **k: t.__dlpack__(**k),
                                   "__dlpack_device__": lambda s: t.__dlpack_device__()})()
    info = describe(wrapped)
    assert (info.ptr, info.shape, info.strides, info.dtype) == (t.data_ptr(), (3, 3), (4, 1), D.INT64)


# -- JAX on the CPU (its DLPack export is the legacy capsule) --------------------------------

def test_jax_cpu() -> None:
    jnp = pytest.importorskip("jax.numpy")
    import jax

    # explicitly on the host: where jax has a GPU backend it places arrays there by default
    a = jax.device_put(jnp.arange(24, dtype=jnp.bfloat16).reshape(2, 3, 4), jax.devices("cpu")[0])
    info = describe(a)
    assert info.framework == "jax" and info.ptr == a.unsafe_buffer_pointer() == data_ptr(a)
    assert (info.shape, info.strides, info.dtype, info.itemsize, info.device_type) == \
        ((2, 3, 4), (12, 4, 1), D.BFLOAT16, 2, "cpu")
    assert data_type_of(jnp.float32) is D.FLOAT and data_type_of(a) is D.BFLOAT16
    out = empty_like_framework(a, (2, 3), (1, 2), D.FLOAT)  # immutable jax: host output from numpy
    assert type(out) is np.ndarray and out.strides == (4, 8)


def test_numpy_object_arrays_have_no_cudnn_type() -> None:
    info = describe(np.empty(3, dtype=object))
    assert (info.dtype, info.itemsize, info.strides) == (D.NOT_SET, 8, (1,))
