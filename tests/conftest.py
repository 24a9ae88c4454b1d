"""Test set-up for every test folder (tests/<subject>/, beside the source they test; helpers in
tests/support/, imported as the ``support`` package).

GPU tests are the modules named ``test_*_gpu.py``: they are marked `gpu` and skip where no GPU is
usable; they compare with PyTorch, so where torch is not installed they are not collected. After
collection one line says what became of them (not collected without PyTorch; collected and
skipped, with the reason; or collected to run), at every verbosity. A GPU test module that
touches the GPU while it is imported is a collection error naming it: on a machine without a
GPU it would stop the whole run before any test.

GPU tests run as a new user's first run does: the plan cache in a new, empty folder
(``$CUDNN_PY_CACHE_DIR``, unless ``CUDNN_PY_TEST_WARM_CACHE=1`` keeps the one given). A GPU test
that runs longer than ``$CUDNN_PY_TEST_HANG_SECONDS`` (default 480) is taken for a hang: every
thread's stack is written to the terminal and the run ends, rather than sitting until someone
kills it. With pytest-xdist and ``CUDNN_PY_TEST_GPUS=N``, worker ``i`` sees only GPU ``i % N``.

The other tests need no GPU: fake backends are given small ints as cuDNN handles (``fake_handles``).

At the end, skipped tests are counted by reason, one line each ("31 skipped: could not import
'torch'..."): one cause (no PyTorch, no GPU) skips tests in many files, and pytest's own list
(`-rs`, or `-ra`) names every file and line. Given -rs or -ra, that list is printed instead."""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from support.plan_stand_ins import FakePlan

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
if str(ROOT / "src") not in sys.path and not os.environ.get("CUDNN_PY_TEST_INSTALLED"):
    sys.path.insert(0, str(ROOT / "src"))
if str(TESTS) not in sys.path:  # the `support` package
    sys.path.insert(0, str(TESTS))

GPU_TESTS = "test_*_gpu.py"  # the GPU test modules, in any folder
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HANG_SECONDS = float(os.environ.get("CUDNN_PY_TEST_HANG_SECONDS", "480"))
FAKE_HANDLES = (0x1, 0x1000, 0x1234)  # what the fake backends' tests pass as handle=
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("CUDNN_PY_TEST_GPUS"):  # pytest -n N: one GPU per worker
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_worker[2:]) % int(os.environ["CUDNN_PY_TEST_GPUS"]))
if HAVE_TORCH and os.environ.get("CUDNN_PY_TEST_WARM_CACHE") != "1":
    os.environ["CUDNN_PY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cudnn-py-test-cache-")
_terminal: list[Any] = []  # the terminal's stderr, kept open for the stack dumps
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


def is_gpu_module(path: Path) -> bool:
    """A GPU test module: named ``test_*_gpu.py``, in any test folder."""
    return path.match(GPU_TESTS)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """GPU test modules compare with PyTorch: without it they are not collected."""
    return True if not HAVE_TORCH and is_gpu_module(collection_path) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    path = Path(str(collector.path)) if isinstance(collector, pytest.Module) else None
    if path is None or not is_gpu_module(path):
        yield
        return
    with gpu_untouched(os.path.relpath(path, ROOT)):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_gpu_module(Path(str(item.fspath))):
            item.add_marker(pytest.mark.gpu)
        if item.get_closest_marker("gpu"):
            reason = _gpu_reason()
            if reason:  # ahead of the test's own skip conditions: every GPU test skips for this reason
                item.add_marker(pytest.mark.skipif(True, reason=f"GPU test: {reason}"), append=False)


def pytest_configure(config: pytest.Config) -> None:
    """Keep a duplicate of the terminal's stderr (pytest's capture is suspended while plugins
    are configured): while a test runs fd 2 is captured, and a dump written there would be lost
    with the process."""
    _terminal.append(os.fdopen(os.dup(2), "w"))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the duplicate of stderr (left open, the interpreter warns at exit)."""
    while _terminal:
        _terminal.pop().close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A GPU test that runs past HANG_SECONDS dumps every thread's stack and ends the run."""
    if not _terminal or HANG_SECONDS <= 0 or not item.get_closest_marker("gpu"):
        yield
        return
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=_terminal[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def fake_handles(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In the tests without a GPU: make the fake handles live ones, as
    ``cudnn.legacy.cudnnCreate`` registers its handles (an int no handle was made for is refused
    before cuDNN reads it), then forget them. A build's release point asks cuDNN for its handle's
    stream: for a fake handle it does nothing (cuDNN would read whatever memory the int points at)."""
    if request.node.get_closest_marker("gpu"):
        yield
        return
    from cudnn._graph.build import pipeline
    from cudnn.backend.handle import note_raw

    real = pipeline.release_point
    monkeypatch.setattr(pipeline, "release_point", lambda handle: None if handle in FAKE_HANDLES else real(handle))
    for address in FAKE_HANDLES:
        note_raw(address, True)
    yield
    for address in FAKE_HANDLES:
        note_raw(address, False)


@pytest.fixture
def fake_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakePlan]]:
    """EXECUTION_PLAN stand-ins (support/plan_stand_ins.py) for the candidates' plans."""
    from support import plan_stand_ins

    yield from plan_stand_ins.fake_plans(monkeypatch)


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
    return (f"GPU tests: {n} collected, to run; plan cache {os.environ.get('CUDNN_PY_CACHE_DIR', 'default')}; "
            f"a test over {HANG_SECONDS:.0f} s dumps every stack and ends the run")


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
