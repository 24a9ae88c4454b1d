"""python -m cudnn: the demo without a GPU explains itself and shows the graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn._lib import cuda

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "cudnn", *args], capture_output=True, text=True, env=env,
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
    assert out.returncode == 0 and "demo" in out.stdout
