"""The compute-sanitizer log reader of tools/sanitize_support.py: memory errors, leaks by owner
and the documented filters (cuda-bindings' cuGetProcAddress lookups, torch's cuBLAS handles,
the allocations the closing context reset makes for itself), on a log in the sanitizer's format."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture(scope="module")
def support():
    spec = importlib.util.spec_from_file_location("sanitize_support_under_test", TOOLS / "sanitize_support.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def leak(size: int, *frames: str) -> list[str]:
    return [f"========= Leaked {size:,} bytes at 0x7f0000000000",
            "=========     Saved host backtrace up to driver entry point at cudaMalloc time",
            *(f"=========         Host Frame: {f} [0x1234]" for f in frames), "========="]


LOOKUP = ["========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to \"named symbol not found\" "
          "on CUDA API call to cuGetProcAddress_v2.",
          "=========     Saved host backtrace up to driver entry point at error", "========="]


def write_log(tmp_path: Path, records: list[list[str]], errors: int, leaked: int) -> Path:
    lines = ["========= COMPUTE-SANITIZER"] + [ln for r in records for ln in r]
    lines += [f"========= LEAK SUMMARY: {leaked * 1000} bytes leaked in {leaked} allocations",
              f"========= ERROR SUMMARY: {errors} errors"]
    log = tmp_path / "memcheck.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_filters_are_listed_and_not_counted(support, tmp_path, capsys):
    records = [LOOKUP, LOOKUP,
               leak(67_108_864, "cuMemAlloc_v2 in libcuda.so.1", "cublasCreate_v2 in libcublas.so.13",
                    "at::cuda::getCurrentCUDABlasHandle() in libtorch_cuda.so"),
               leak(22_413_653, "cuMemAlloc_v2 in libcuda.so.1", "cudaDeviceReset in libcudart.so.13",
                    "reset_context in sanitize_support.py:181", "pytest_unconfigure in sanitize_support.py:203")]
    support.report("memcheck", write_log(tmp_path, records, errors=4, leaked=2), "0")
    line = capsys.readouterr().out.splitlines()[0]
    assert "memory errors 0, leaks 0 " in line
    assert "1 of torch's cuBLAS handles or 1 of the context reset itself" in line
    assert "benign cuGetProcAddress lookups filtered 2" in line


def test_every_other_leak_counts_with_its_owner(support, tmp_path, capsys):
    records = [LOOKUP,
               leak(4096, "cuMemAlloc_v2 in libcuda.so.1",
                    "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long) "
                    "in libc10_cuda.so"),
               leak(512, "cuMemAlloc_v2 in libcuda.so.1", "cudnnBackendFinalize in libcudnn_graph.so.9",
                    "ffi_call in libffi.so.8", "_ctypes_callproc in _ctypes.cpython-312-x86_64-linux-gnu.so")]
    support.report("memcheck", write_log(tmp_path, records, errors=4, leaked=2), "0")
    out = capsys.readouterr().out
    line = out.splitlines()[0]
    assert "memory errors 1, leaks 2 " in line  # 4 errors = 1 lookup + 2 leak records + 1 memory error
    assert "torch 1" in line and "cuDNN called through cudnn-py (ctypes) 1" in line
    assert "[torch] c10::cuda::CUDACachingAllocator" in out


def test_a_reset_frame_elsewhere_in_a_backtrace_is_not_taken_for_the_closing_reset(support):
    assert support.owner(["cuMemAlloc_v2 in libcuda.so.1", "my_reset_context in model.py:3"]) == "other"
    assert support.owner(["reset_context in sanitize_support.py:181"]) == support.RESET


def test_a_failed_release_still_resets_the_context(support, monkeypatch, capsys):
    """Whatever the release left behind must reach the leak check: the reset runs anyway."""
    def release():
        raise RuntimeError("boom")

    resets: list[int] = []
    monkeypatch.setattr(support, "release_everything", release)
    monkeypatch.setattr(support, "reset_context", lambda: (resets.append(1), (False, "cudaDeviceReset 999"))[1])
    support.pytest_unconfigure(None)  # a reset that did not work: no os._exit, the process goes on
    out = capsys.readouterr().out
    assert "sanitize cleanup failed: RuntimeError: boom" in out
    assert "sanitize reset: cudaDeviceReset 999" in out
    assert resets == [1]


def test_a_reset_that_raises_leaves_the_process_to_end_normally(support, monkeypatch, capsys):
    def reset():
        raise OSError("no CUDA here")

    monkeypatch.setattr(support, "release_everything", lambda: "sanitize cleanup: stand-in")
    monkeypatch.setattr(support, "reset_context", reset)
    support.pytest_unconfigure(None)
    out = capsys.readouterr().out
    assert "sanitize cleanup: stand-in" in out and "context reset failed: OSError: no CUDA here" in out
