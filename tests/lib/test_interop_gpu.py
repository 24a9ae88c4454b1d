"""Tensor interop on a GPU: torch CUDA tensors (own API, CUDA array interface, DLPack), CuPy and
JAX arrays, allocation in the example's framework, and the framework's current stream."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

import cudnn
from cudnn.interop.tensors import (
    current_stream,
    data_ptr,
    describe,
    empty_like_framework,
)

D = cudnn.data_type


# -- torch ----------------------------------------------------------------------------------

def test_torch_cuda_view() -> None:
    base = torch.randn(4, 6, 8, device="cuda", dtype=torch.float16)
    t = base[1:, :, 2:]
    info = describe(t)
    assert info.ptr == t.data_ptr() == data_ptr(t) == base.data_ptr() + (48 + 2) * 2
    assert (info.device_type, info.device_id) == ("cuda", t.device.index)
    assert t.device.index == torch.cuda.current_device()
    assert (info.shape, info.strides, info.dtype, info.itemsize, info.framework) == \
        ((3, 6, 6), (48, 8, 1), D.HALF, 2, "torch")
    assert info.extent_bytes == (4 * 6 * 8 - 50) * 2
    assert info.needed_bytes == (2 * 48 + 5 * 8 + 5 + 1) * 2


@pytest.mark.parametrize(("dtype", "expected"), [
    (torch.float32, D.FLOAT), (torch.bfloat16, D.BFLOAT16), (torch.float8_e4m3fn, D.FP8_E4M3),
    (torch.float8_e5m2, D.FP8_E5M2),
])
def test_torch_cuda_channels_last(dtype: Any, expected: D) -> None:
    t = torch.empty(2, 3, 4, 5, device="cuda", dtype=dtype, memory_format=torch.channels_last)
    info = describe(t)
    assert info.strides == t.stride() == (60, 1, 15, 3)
    assert (info.dtype, info.itemsize, info.ptr, info.device_type) == (expected, t.element_size(),
                                                                       t.data_ptr(), "cuda")
    assert info.extent_bytes == info.needed_bytes == 120 * t.element_size()


class _CAIOnly:
    """A torch tensor seen only through __cuda_array_interface__ (a Numba-like producer)."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.t.__cuda_array_interface__


class _DLPackOnly:
    """A torch tensor seen only through DLPack; records what it was asked."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.calls = t, []

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()


def test_torch_through_cuda_array_interface() -> None:
    base = torch.zeros(64, 32, device="cuda", dtype=torch.float16)
    t = base[8:, 4:20]
    info = describe(_CAIOnly(t))
    assert info.framework == "cai" and info.ptr == t.data_ptr() == data_ptr(_CAIOnly(t))
    assert (info.shape, info.strides, info.dtype, info.itemsize) == ((56, 16), (32, 1), D.HALF, 2)
    assert (info.device_type, info.device_id) == ("cuda", t.device.index)  # asked of CUDA
    assert info.extent_bytes is not None and info.extent_bytes >= (64 * 32 - 8 * 32 - 4) * 2


def test_torch_through_dlpack() -> None:
    base = torch.zeros(4, 6, 8, device="cuda", dtype=torch.bfloat16)
    t = base[1:, :, 2:]
    wrapped = _DLPackOnly(t)
    info = describe(wrapped)
    assert wrapped.calls[-1].get("stream") == -1  # a peek asks for no synchronisation
    assert info.framework == "dlpack" and info.ptr == t.data_ptr()
    assert (info.shape, info.strides, info.dtype, info.itemsize) == ((3, 6, 6), (48, 8, 1), D.BFLOAT16, 2)
    assert (info.device_type, info.device_id) == ("cuda", t.device.index)
    assert info.extent_bytes is not None and info.extent_bytes >= (4 * 6 * 8 - 50) * 2


def test_torch_empty_like() -> None:
    example = torch.zeros(1, device="cuda")
    index = example.device.index
    out = empty_like_framework(example, (2, 3, 4, 5), (60, 1, 15, 3), D.BFLOAT16, index)
    assert isinstance(out, torch.Tensor) and out.is_cuda and out.device.index == index
    assert tuple(out.shape) == (2, 3, 4, 5) and out.stride() == (60, 1, 15, 3) and out.dtype is torch.bfloat16
    out.fill_(1.5)
    assert float(out.float().sum()) == 1.5 * 120
    fp8 = empty_like_framework("torch", (4, 8), (1, 4), D.FP8_E4M3, index)
    assert fp8.is_cuda and fp8.dtype is torch.float8_e4m3fn and fp8.stride() == (1, 4)


def test_current_stream_follows_torch() -> None:
    t = torch.zeros(1, device="cuda")
    assert current_stream(t) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    assert side.cuda_stream != 0
    with torch.cuda.stream(side):
        assert current_stream(t) == side.cuda_stream
        assert current_stream("torch") == side.cuda_stream
    assert current_stream(t) == torch.cuda.current_stream().cuda_stream != side.cuda_stream
    assert current_stream(torch.zeros(1)) == 0


def test_second_gpu() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    t = torch.zeros(8, 8, device="cuda:1")
    assert describe(t).device_id == 1 and describe(_CAIOnly(t)).device_id == 1
    out = empty_like_framework(t, (4,), (1,), D.FLOAT, 1)
    assert out.device.index == 1
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):
        assert current_stream(t) == side.cuda_stream


# -- CuPy -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cp() -> Any:
    return pytest.importorskip("cupy")


def test_cupy_view(cp: Any) -> None:
    base = cp.zeros((4, 6, 8), dtype=cp.float32)
    a = base[1:, ::2, 3:]
    info = describe(a)
    assert info.framework == "cupy" and info.ptr == a.data.ptr == data_ptr(a)
    assert a.data.ptr == base.data.ptr + (48 + 3) * 4
    assert (info.device_type, info.device_id) == ("cuda", a.device.id)
    assert (info.shape, info.strides, info.dtype, info.itemsize) == ((3, 3, 5), (48, 16, 1), D.FLOAT, 4)
    mem = base.data.mem
    assert info.extent_bytes == mem.ptr + mem.size - a.data.ptr
    assert info.extent_bytes >= (4 * 6 * 8 - 51) * 4 >= info.needed_bytes


def test_cupy_empty_like(cp: Any) -> None:
    example = cp.zeros(1, dtype=cp.float32)
    out = empty_like_framework(example, (2, 3, 4), (1, 8, 2), D.HALF, example.device.id)
    assert isinstance(out, cp.ndarray) and out.shape == (2, 3, 4) and out.strides == (2, 16, 4)
    assert out.dtype == cp.float16 and out.device.id == example.device.id
    out.fill(1)
    assert float(out.sum()) == 24.0
    info = describe(out)
    assert info.strides == (1, 8, 2) and info.extent_bytes >= info.needed_bytes == 24 * 2


def test_cupy_current_stream(cp: Any) -> None:
    a = cp.zeros(4)
    assert current_stream(a) == cp.cuda.get_current_stream().ptr
    side = cp.cuda.Stream(non_blocking=True)
    with side:
        assert current_stream(a) == side.ptr != 0
        assert current_stream("cupy") == side.ptr


def test_torch_tensor_read_by_cupy_matches(cp: Any) -> None:
    t = torch.arange(12, device="cuda", dtype=torch.float32).reshape(3, 4).t()
    a = cp.asarray(t)
    assert describe(a).ptr == describe(t).ptr and describe(a).strides == describe(t).strides == (1, 4)


# -- JAX (kept last: importing it starts its GPU client) ------------------------------------

@pytest.fixture(scope="module")
def jax() -> Any:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to torch
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    return jax


def test_jax_array(jax: Any) -> None:
    gpu = jax.devices("gpu")[0]
    a = jax.device_put(jax.numpy.arange(24, dtype=jax.numpy.float32).reshape(2, 3, 4), gpu)
    info = describe(a)
    assert info.framework == "jax" and info.ptr == a.unsafe_buffer_pointer() == data_ptr(a)
    assert (info.device_type, info.device_id) == ("cuda", getattr(gpu, "local_hardware_id", gpu.id))
    assert (info.shape, info.strides, info.dtype, info.itemsize) == ((2, 3, 4), (12, 4, 1), D.FLOAT, 4)
    assert info.extent_bytes is not None and info.extent_bytes >= 96
    assert current_stream(a) == 0
    b = jax.device_put(jax.numpy.zeros((4, 4), dtype=jax.numpy.bfloat16), gpu)
    assert describe(b).dtype is D.BFLOAT16


def test_jax_outputs_come_from_torch(jax: Any) -> None:
    gpu = jax.devices("gpu")[0]
    a = jax.device_put(jax.numpy.zeros(4), gpu)
    out = empty_like_framework(a, (2, 3), (1, 2), D.HALF, describe(a).device_id)
    assert isinstance(out, torch.Tensor) and out.is_cuda and out.stride() == (1, 2)
    assert out.dtype is torch.float16 and out.device.index == describe(a).device_id
