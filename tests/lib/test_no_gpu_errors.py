"""Without a usable GPU every entry point that needs one raises cudnn.CudaUnavailableError, a
public CudnnError, saying whether there is no driver at all, a driver too old, or no device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.libcudnn_marks import needs_libcudnn

import cudnn
from cudnn._lib import cuda

NO_GPU = cuda.why_no_gpu()
no_gpu = pytest.mark.skipif(not NO_GPU, reason="a GPU is usable here")
no_driver = pytest.mark.skipif(not cuda._libcuda_error(), reason="an NVIDIA driver (libcuda) is installed here")


def _conv_graph() -> Any:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(name="X", dim=[8, 64, 16, 16], stride=[64 * 256, 1, 64 * 16, 64])
    w = g.tensor(name="W", dim=[32, 64, 3, 3], stride=[576, 1, 192, 64])
    g.conv_fprop(x, w, padding=[1, 1], name="conv").set_output(True)
    return g


def _check(err: cudnn.CudaUnavailableError) -> None:
    assert isinstance(err, cudnn.CudnnError) and isinstance(err, cudnn.CudnnInitError)
    diag = cuda.diagnose()
    assert err.reason == diag.reason and err.detail == diag.detail
    assert err.status_name == "CUDNN_STATUS_NOT_INITIALIZED"
    assert "no usable CUDA GPU" in str(err) and err.hint.startswith(diag.detail)
    assert "hint: " in str(err) and "validated and printed without one" in str(err)


def test_the_errors_are_public() -> None:
    assert issubclass(cudnn.CudaUnavailableError, cudnn.CudnnInitError)
    assert issubclass(cudnn.CudaUnavailableError, cudnn.CudnnError)
    assert {"CudaUnavailableError", "CudaError"} <= set(dir(cudnn))
    assert issubclass(cudnn.CudaError, RuntimeError)


@no_gpu
@needs_libcudnn
@pytest.mark.parametrize("entry", ["create_handle", "build_modes", "build_no_modes", "Graph", "legacy_cudnnCreate",
                                   "jit"])
def test_every_gpu_entry_point_raises_cuda_unavailable(entry: str) -> None:
    def run() -> None:
        if entry == "create_handle":
            cudnn.create_handle()
        elif entry == "build_modes":
            _conv_graph().build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        elif entry == "build_no_modes":
            _conv_graph().build()
        elif entry == "Graph":
            x, w = np.zeros((8, 64, 16, 16), np.float16), np.zeros((32, 64, 3, 3), np.float16)
            with cudnn.Graph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT) as graph:
                graph.conv_fprop(image=x, weight=w, padding=[1, 1]).set_output(True)
        elif entry == "legacy_cudnnCreate":
            from cudnn import legacy

            legacy.cudnnCreate()
        else:
            cudnn.jit(heur_modes=[cudnn.heur_mode.A])(lambda: (_conv_graph(), []))()

    with pytest.raises(cudnn.CudaUnavailableError) as info:
        run()
    _check(info.value)


@no_gpu
@needs_libcudnn
def test_handle_error_keeps_cudnn_status_and_message() -> None:
    with pytest.raises(cudnn.CudaUnavailableError) as info:
        cudnn.create_handle()
    err = info.value
    assert err.context == "creating a cuDNN handle on the current device"
    assert str(err).startswith(f"{err.context}: CUDNN_STATUS_NOT_INITIALIZED (1001): {err.message}")
    assert f"hint: {cuda.diagnose().detail}" in str(err)


@no_driver
def test_no_driver_is_not_called_an_old_driver() -> None:
    diag = cuda.diagnose()
    assert diag.reason == "no_driver" and diag.driver_version == 0
    assert "no NVIDIA driver" in diag.detail and "libcuda" in diag.detail
    with pytest.raises(cudnn.CudaUnavailableError) as info:
        cuda.current_device()  # CUDA's own answer here is cudaErrorInsufficientDriver
    err = info.value
    assert err.reason == "no_driver"
    first_line = str(err).splitlines()[0]
    assert first_line.startswith("cudaGetDevice: no usable CUDA GPU: no NVIDIA driver")
    assert "insufficient" not in first_line.lower() and "too old" not in str(err)
    assert "cause: CUDA cudaGetDevice returned cudaErrorInsufficientDriver" in str(err)


class _FakeRuntime:
    """The three answers diagnose() reads from the CUDA runtime, chosen by the test."""

    def __init__(self, runtime: int, driver: int, count_error: int, count: int | None) -> None:
        from cuda.bindings import runtime as rt

        self.cudaError_t = rt.cudaError_t
        self._runtime, self._driver, self._count = runtime, driver, (rt.cudaError_t(count_error), count)

    def cudaRuntimeGetVersion(self) -> tuple[Any, int]:
        return self.cudaError_t(0), self._runtime

    def cudaDriverGetVersion(self) -> tuple[Any, int]:
        return self.cudaError_t(0), self._driver

    def cudaGetDeviceCount(self) -> tuple[Any, int | None]:
        return self._count

    def cudaGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return self.cudaError_t(0), b"described"


@pytest.fixture
def fake_runtime(monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("cuda.bindings.runtime")

    def install(runtime: int, driver: int, count_error: int, count: int | None, libcuda: str = "") -> None:
        fake = _FakeRuntime(runtime, driver, count_error, count)
        monkeypatch.setattr(cuda, "runtime", lambda: fake)
        monkeypatch.setattr(cuda, "_libcuda_error", lambda: libcuda)
        monkeypatch.setattr(cuda, "_library_runtime", 0)  # as before libcudnn is loaded

    return install


def test_diagnose_old_driver(fake_runtime: Any) -> None:
    fake_runtime(runtime=13050, driver=12040, count_error=35, count=None)
    d = cuda.diagnose()
    assert d.reason == "driver_too_old"
    assert "supports CUDA 12.4" in d.detail and "CUDA runtime here is 13.5" in d.detail
    assert "cudnn-py[cu12]" in d.advice and "update the NVIDIA driver" in d.advice


def test_diagnose_no_device(fake_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fake_runtime(runtime=13050, driver=13000, count_error=100, count=None)
    d = cuda.diagnose()
    assert d.reason == "no_device"
    assert "driver (CUDA 13.0) found no GPU" in d.detail and "CUDA_VISIBLE_DEVICES=''" in d.detail


def test_diagnose_no_driver_and_a_usable_gpu(fake_runtime: Any) -> None:
    fake_runtime(runtime=13050, driver=0, count_error=35, count=None, libcuda="libcuda.so.1: cannot open")
    assert cuda.diagnose().reason == "no_driver"
    assert "libcuda.so.1: cannot open" in cuda.why_no_gpu()
    fake_runtime(runtime=13050, driver=13000, count_error=0, count=2)
    d = cuda.diagnose()
    assert (d.reason, d.device_count, cuda.why_no_gpu()) == ("", 2, "")


def test_diagnose_other_failure(fake_runtime: Any) -> None:
    fake_runtime(runtime=13050, driver=13000, count_error=3, count=None)
    d = cuda.diagnose()
    assert d.reason == "cuda_error" and "cudaErrorInitializationError" in d.detail


def test_a_cuda_failure_with_a_gpu_stays_a_cuda_error(fake_runtime: Any) -> None:
    from cuda.bindings import runtime as rt

    fake_runtime(runtime=13050, driver=13000, count_error=0, count=1)
    with pytest.raises(cudnn.CudaError, match="cudaMalloc failed: cudaErrorMemoryAllocation"):
        cuda._rt("cudaMalloc", (rt.cudaError_t.cudaErrorMemoryAllocation, None))
    with pytest.raises(cudnn.CudaError):  # a no-GPU code while the GPU is there: CUDA's error as is
        cuda._rt("cudaGetDevice", (rt.cudaError_t.cudaErrorNoDevice, None))
