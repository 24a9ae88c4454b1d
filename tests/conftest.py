"""Test set-up: tests under tests/gpu are marked `gpu` and skip where no GPU is usable.

After collection one line says what became of the GPU tests (not collected without PyTorch;
collected and skipped, with the reason; or collected to run), at every verbosity. A GPU test
module that touches the GPU while it is imported is a collection error naming it: on a machine
without a GPU it would stop the whole run before any test.

At the end, skipped tests are counted by reason, one line each ("31 skipped: could not import
'torch'..."): one cause (no PyTorch, no GPU) skips tests in many files, and pytest's own list
(`-rs`, or `-ra`) names every file and line. Given -rs or -ra, that list is printed instead."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path and not os.environ.get("CUDNN_PY_TEST_INSTALLED"):
    sys.path.insert(0, str(ROOT / "src"))

GPU_DIR = Path(__file__).resolve().parent / "gpu"
HAVE_TORCH = importlib.util.find_spec("torch") is not None
_reason: list[str] = []  # why GPU tests skip here ('' when they run), computed once


class GpuAtImportError(RuntimeError):
    """A GPU test module asked for the GPU while being imported."""


def _gpu_reason() -> str:
    if not _reason:
        _reason.append(_find_gpu_reason())
    return _reason[0]


def _find_gpu_reason() -> str:
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


@contextlib.contextmanager
def gpu_untouched(module: str) -> Iterator[None]:
    """While ``module`` is imported, starting CUDA in torch (``torch.cuda._lazy_init``, which
    every device query and CUDA tensor goes through) raises GpuAtImportError naming it."""
    try:
        import torch.cuda as tcuda
    except ImportError:
        yield
        return
    lazy_init = tcuda._lazy_init

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise GpuAtImportError(
            f"{module} touches the GPU at import (torch.cuda initialised); where there is no GPU "
            "that stops the whole test run: ask inside a test or a fixture (functools.cache it)")

    tcuda._lazy_init = refuse
    try:
        yield
    finally:
        tcuda._lazy_init = lazy_init


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    path = Path(str(collector.path)) if isinstance(collector, pytest.Module) else None
    if path is None or GPU_DIR not in path.parents:
        yield
        return
    with gpu_untouched(os.path.relpath(path, ROOT)):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if GPU_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
        if item.get_closest_marker("gpu"):
            reason = _gpu_reason()
            if reason:  # ahead of the test's own skip conditions: every GPU test skips for this reason
                item.add_marker(pytest.mark.skipif(True, reason=f"GPU test: {reason}"), append=False)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str:
    """One line, shown even with -q, saying what became of the GPU tests."""
    if not HAVE_TORCH:
        return "GPU tests: not collected (PyTorch is not installed; they compare against it)"
    n = sum(1 for item in items if item.get_closest_marker("gpu"))
    if not n:
        return "GPU tests: none selected"
    reason = _gpu_reason()
    if reason:
        return f"GPU tests: {n} collected, all skipped here: {reason}"
    hang = float(os.environ.get("CUDNN_PY_TEST_HANG_SECONDS", "480"))
    return (f"GPU tests: {n} collected, to run; plan cache {os.environ.get('CUDNN_PY_CACHE_DIR', 'default')}; "
            f"a test over {hang:.0f} s dumps every stack and ends the run")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    """What a skipped test or module was skipped for, as given to pytest.skip (no location)."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line per skip reason, with its count, most frequent first; failures and errors are
    listed after it by pytest (-rfE)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped or "s" in terminalreporter.reportchars or config.option.no_summary:
        return
    counts = Counter(skip_reason(report) for report in skipped)
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, by reason (-rs lists each test)")
    width = len(str(max(counts.values())))
    for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{n:>{width}} skipped: {reason}")
