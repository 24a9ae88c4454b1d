"""GPU tests compare with PyTorch: where torch is not installed they are not collected (the line
tests/conftest.py prints after collection says what became of them).

They run as a new user's first run does: the plan cache in a new, empty folder
(``$CUDNN_PY_CACHE_DIR``, unless ``CUDNN_PY_TEST_WARM_CACHE=1`` keeps the one given). A test
that runs longer than ``$CUDNN_PY_TEST_HANG_SECONDS`` (default 480) is taken for a hang: every
thread's stack is written to the terminal and the run ends, rather than sitting until someone
kills it. With pytest-xdist and ``CUDNN_PY_TEST_GPUS=N``, worker ``i`` sees only GPU ``i % N``.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if not HAVE_TORCH:
    collect_ignore_glob = ["test_*.py", "seed*.py", "wrapper_*.py"]

HANG_SECONDS = float(os.environ.get("CUDNN_PY_TEST_HANG_SECONDS", "480"))
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("CUDNN_PY_TEST_GPUS"):  # pytest -n N: one GPU per worker
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_worker[2:]) % int(os.environ["CUDNN_PY_TEST_GPUS"]))
if HAVE_TORCH and os.environ.get("CUDNN_PY_TEST_WARM_CACHE") != "1":
    os.environ["CUDNN_PY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cudnn-py-test-cache-")
_terminal: list[Any] = []  # the terminal's stderr, kept open for the stack dumps


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
    if not _terminal or HANG_SECONDS <= 0:
        yield
        return
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=_terminal[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
