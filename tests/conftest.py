"""Test set-up: tests under tests/gpu are marked `gpu` and skip where no GPU is usable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path and not os.environ.get("CUDNN_PY_TEST_INSTALLED"):
    sys.path.insert(0, str(ROOT / "src"))


def _gpu_reason() -> str:
    from cudnn._lib import cuda

    reason = cuda.why_no_gpu()
    if reason:
        return reason
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (GPU tests compare against it)"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_dir = ROOT / "tests" / "gpu"
    reason = None
    for item in items:
        if gpu_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
        if item.get_closest_marker("gpu"):
            if reason is None:
                reason = _gpu_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
