"""python -m cudnn (and the cudnn-py command): --version, info, demo, bench; without a GPU or a
driver each says so in words, never with a traceback. `show` is tested with the pictures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn._lib import cuda

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "cudnn", *args], capture_output=True, text=True, env=env, check=False,
                          timeout=120)


@pytest.mark.skipif(cuda.device_count() > 0, reason="checks the no-GPU path")
def test_demo_without_gpu_prints_the_validated_graph() -> None:
    out = _run("demo")
    assert out.returncode == 0, out.stderr
    assert "No GPU here" in out.stdout
    text = out.stdout[out.stdout.index("{"): out.stdout.rindex("}") + 1]
    graph = json.loads(text)
    assert [n["tag"] for n in graph["nodes"]] == ["CONV_FPROP", "POINTWISE", "POINTWISE"]
    assert graph["tensors"]["Y"]["dim"] == [4, 64, 28, 28]


def test_info_reports_the_library() -> None:
    out = _run("info")
    assert out.returncode == 0, out.stderr
    assert "libcudnn 9." in out.stdout and "path:" in out.stdout


def test_help() -> None:
    out = _run()
    assert out.returncode == 0
    for command in ("info", "demo", "show", "bench"):
        assert command in out.stdout


def test_version() -> None:
    import cudnn

    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"cudnn-py {cudnn.__version__}"


@pytest.mark.skipif(shutil.which("cudnn-py") is None, reason="the package's console script is not installed")
def test_console_script() -> None:
    import cudnn

    out = subprocess.run(["cudnn-py", "--version"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == f"cudnn-py {cudnn.__version__}"


def test_info_lists_the_features_the_loaded_cudnn_gates() -> None:
    import cudnn

    out = _run("info")
    assert out.returncode == 0, out.stderr
    version = cudnn.backend_version()
    lines = out.stdout.splitlines()
    start = lines.index(f"features of the loaded cuDNN {cudnn.backend_version_string()}:")
    features = lines[start + 1:]
    assert any("kernel cache JSON" in f for f in features)
    assert any("SDPA_FWD" in f and "9.13.1" in f for f in features)
    for f in features:  # yes / no agrees with the version printed beside it
        flag, since = f.split()[:2]
        major, minor, patch = (int(p) for p in since.split("."))
        assert (flag == "yes") == (version >= major * 10000 + minor * 100 + patch), f
        assert flag == "yes" or "needs cuDNN >=" in f


def _has_libcuda() -> bool:
    try:
        from cuda.bindings import driver

        driver.cuDriverGetVersion()
    except Exception:  # noqa: BLE001 - whatever cuda-bindings raises without libcuda
        return False
    return True


@pytest.mark.skipif(_has_libcuda(), reason="checks the wording on a machine without an NVIDIA driver")
def test_info_without_a_driver_says_there_is_none() -> None:
    out = _run("info")
    assert out.returncode == 0, out.stderr
    driver_line = next(line for line in out.stdout.splitlines() if line.startswith("NVIDIA driver:"))
    assert "none" in driver_line and "libcuda.so.1" in driver_line and "too old" not in out.stdout
    assert "GPU: none (no driver)" in out.stdout


@pytest.mark.skipif(cuda.device_count() > 0, reason="checks the no-GPU path")
def test_bench_without_gpu_is_a_message() -> None:
    out = _run("bench", "--only", "conv")
    assert out.returncode == 1 and "bench needs an NVIDIA GPU" in out.stderr
    assert "Traceback" not in out.stderr
    unknown = _run("bench", "--only", "fft")
    assert unknown.returncode == 2 and "unknown case" in unknown.stderr
