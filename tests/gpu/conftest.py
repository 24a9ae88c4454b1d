"""GPU tests compare with PyTorch: where torch is not installed (CI) they are not collected."""

from __future__ import annotations

import importlib.util

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if not HAVE_TORCH:
    collect_ignore_glob = ["test_*.py", "seed*.py", "wrapper_*.py"]


def pytest_report_header() -> str:
    return "GPU tests: collected" if HAVE_TORCH else "GPU tests: not collected (PyTorch is not installed)"
