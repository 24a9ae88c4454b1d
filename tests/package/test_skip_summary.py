"""The end of a test run as the README's command prints it: skipped tests counted by reason, one
line each, failures and errors listed one by one (tests/conftest.py, pyproject's addopts), in a
small project with this one's conftest and pytest settings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SKIPS = '''import pytest

def test_passes():
    pass

@pytest.mark.skip(reason="no frobnicator here")
def test_marked():
    pass

@pytest.mark.parametrize("i", range(3))
def test_skips_inside(i):
    pytest.skip("no frobnicator here")

def test_fails():
    assert 1 == 2

@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke")

def test_errors(broken):
    pass
'''
MODULE_SKIP = 'import pytest\n\npytest.importorskip("no_such_module_here")\n\ndef test_never():\n    pass\n'
OTHER_SKIP = 'import pytest\n\ndef test_other():\n    pytest.skip("root writes anywhere")\n'


def _pytest_settings() -> str:
    """pyproject.toml's [tool.pytest.ini_options] table, as written."""
    text = (ROOT / "pyproject.toml").read_text()
    table = re.search(r"^\[tool\.pytest\.ini_options\]\n(?:(?!\[).*\n|\n)*", text, re.MULTILINE)
    assert table is not None
    return table.group(0)


GPU_TESTS = '''import pytest

def test_any():
    pass

@pytest.mark.skipif(True, reason="needs two GPUs")
def test_two():
    pass
'''
# A CPU-only torch of a few lines: the GPU tests are collected, and no GPU is usable
FAKE_TORCH = {"torch/__init__.py": "from . import cuda\n",
              "torch/cuda/__init__.py": "def _lazy_init():\n    pass\n\ndef is_available():\n    return False\n"}


def _run(tmp_path: Path, *args: str, tests: dict[str, str] | None = None, returncode: int = 1) -> str:
    (tmp_path / "tests" / "gpu").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "pyproject.toml").write_text(_pytest_settings())
    if tests is None:
        tests = {"test_skips.py": SKIPS, "test_module_skip.py": MODULE_SKIP, "test_other.py": OTHER_SKIP}
    for name, text in tests.items():
        (tmp_path / "tests" / name).write_text(text)
    for name, text in FAKE_TORCH.items():
        (tmp_path / "site" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / name).write_text(text)
    paths = [str(ROOT / "src")] if "gpu/test_two_gpu.py" not in tests else [str(tmp_path / "site"), str(ROOT / "src")]
    env = {**os.environ, "CUDNN_PY_TEST_INSTALLED": "1", "PYTHONPATH": os.pathsep.join(paths)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == returncode, out.stdout + out.stderr
    return out.stdout


def test_skips_are_counted_by_reason_and_failures_listed_one_by_one(tmp_path: Path) -> None:
    out = _run(tmp_path)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "skipped, by reason" in line)
    assert re.fullmatch(r"=+ 6 skipped, by reason \(-rs lists each test\) =+", lines[start]), out
    assert lines[start + 1:start + 4] == [
        "4 skipped: no frobnicator here",
        "1 skipped: could not import 'no_such_module_here': No module named 'no_such_module_here'",
        "1 skipped: root writes anywhere",
    ], out
    assert "short test summary info" in lines[start + 4], out  # then failures and errors, one line each
    assert any(line.startswith("FAILED tests/test_skips.py::test_fails") for line in lines), out
    assert any(line.startswith("ERROR tests/test_skips.py::test_errors") for line in lines), out
    assert not any(line.startswith("SKIPPED") for line in lines), out
    assert lines[-1].startswith("1 failed, 1 passed, 6 skipped, 1 error"), out


def test_asked_for_it_pytest_lists_every_skipped_test_instead(tmp_path: Path) -> None:
    out = _run(tmp_path, "-rs")
    assert "skipped, by reason" not in out
    assert re.search(r"^SKIPPED \[3\] tests/test_skips\.py:\d+: no frobnicator here$", out, re.MULTILINE), out
    assert re.search(r"^SKIPPED \[1\] tests/test_other\.py:\d+: root writes anywhere$", out, re.MULTILINE), out


def test_every_gpu_test_skipped_for_want_of_a_gpu_is_counted_under_that_reason(tmp_path: Path) -> None:
    """A GPU test's own skip condition ("needs two GPUs") comes after the missing GPU."""
    out = _run(tmp_path, tests={"gpu/test_two_gpu.py": GPU_TESTS}, returncode=0)
    reason = re.search(r"^GPU tests: 2 collected, all skipped here: (.+)$", out, re.MULTILINE)
    assert reason is not None, out
    assert f"2 skipped: GPU test: {reason.group(1)}" in out.splitlines(), out
