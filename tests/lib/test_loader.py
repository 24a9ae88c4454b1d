"""Loading libcudnn: from the installed wheel, lazily, and with useful failures."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.no_nvidia_wheels import run as run_without_nvidia_wheels

import cudnn
from cudnn._lib import loader

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": SRC, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_import_opens_nothing_and_needs_no_torch() -> None:
    out = _run(
        "import sys, cudnn; from cudnn._lib import loader;"
        "print(loader.is_loaded(), 'torch' in sys.modules, 'cuda.bindings.runtime' in sys.modules)"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False"]


def test_loads_cudnn9_from_wheel_and_reports_versions() -> None:
    version = cudnn.backend_version()
    assert 90000 <= version < 100000
    major, minor, patch = version // 10000, version // 100 % 100, version % 100
    assert cudnn.backend_version_string() == f"{major}.{minor}.{patch}"
    report = cudnn.library_info()
    assert Path(report.path).name.startswith("libcudnn.so.9")
    assert report.cudart_version >= 12000
    # where a framework imported earlier in this process (a CUDA PyTorch) opened it first, that copy
    assert report.found_via.startswith(("cuda-pathfinder", "$CUDNN_PY_LIBRARY", "already loaded in this process"))
    assert set(report.dependencies) == {"nvrtc", "cublasLt", "cublas"}
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", cudnn.__version__)


def test_override_variable_pointing_nowhere_lists_what_was_tried(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libcudnn.so.9"
    out = _run(
        "import cudnn\ntry:\n    cudnn.backend_version()\nexcept cudnn.LibraryNotFoundError as e:\n    print(e)",
        CUDNN_PY_LIBRARY=str(missing),
    )
    assert out.returncode == 0, out.stderr
    assert str(missing) in out.stdout
    assert "CUDNN_PY_LIBRARY" in out.stdout


def test_without_the_cudnn_wheel_the_error_says_so_first_then_what_else_is_missing(tmp_path: Path) -> None:
    """cuda-pathfinder opens cuBLASLt before libcudnn and fails there when neither is installed:
    the error still leads with the missing cuDNN and how to get it, and names cuBLASLt after."""
    out = run_without_nvidia_wheels(
        "import cudnn\ntry:\n    cudnn.backend_version()\nexcept cudnn.LibraryNotFoundError as e:\n    print(e)\n"
        "else:\n    print('loaded', cudnn.library_info().found_via)", tmp_path)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("loaded"):
        pytest.skip(f"a cuDNN outside the Python packages is found here: {out.stdout.strip()}")
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("cuDNN 9 (libcudnn) was not found. Install it with"), lines
    assert "cudnn-py[cu13]" in lines[0] and "[cu12]" in lines[0] and "$CUDNN_PY_LIBRARY" in lines[0]
    assert lines[1] == "Tried:" and all(line.startswith("  - ") for line in lines[2:]), lines
    pathfinder = next(line for line in lines if line.startswith("  - cuda-pathfinder: "))
    said = pathfinder.removeprefix("  - cuda-pathfinder: ")
    dependency = "a library libcudnn needs is missing too: "
    if said.startswith(dependency):  # it stopped at cuBLASLt, before looking for libcudnn
        assert "cublasLt" in said and "cudnn" not in said.removeprefix(dependency).lower(), said
    else:  # it found cuBLASLt (a system CUDA) and looked for libcudnn
        assert "cudnn" in said.lower(), said
    assert any(line.startswith("  - system loader (libcudnn.so.9):") for line in lines)


def test_override_variable_accepts_the_library_folder() -> None:
    folder = str(Path(loader.report().path).parent)
    out = _run("import cudnn; print(cudnn.backend_version(), cudnn.library_info().found_via)",
               CUDNN_PY_LIBRARY=folder)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == str(cudnn.backend_version())
    assert "$CUDNN_PY_LIBRARY" in out.stdout


def test_report_is_readable() -> None:
    text = str(cudnn.library_info())
    assert cudnn.backend_version_string() in text
    assert "path:" in text


def test_a_copy_a_framework_already_opened_is_used_without_a_search() -> None:
    """As after `import torch`: libcudnn and the libraries its engines open are already in the
    process. cudnn-py uses those copies (a second libcudnn would clash) and imports no finder."""
    report = loader.report()
    paths = [report.path] + [p.split(" (")[0] for p in report.dependencies.values() if p.startswith("/")]
    code = ("import ctypes, os, sys\n"
            f"for p in {paths!r}:\n"
            "    ctypes.CDLL(p, mode=os.RTLD_GLOBAL)\n"
            "import cudnn\n"
            "info = cudnn.library_info()\n"
            "print(info.found_via, '|', info.path, '|', 'cuda.pathfinder' in sys.modules)\n"
            "print(sorted(k for k, v in info.dependencies.items() if 'already loaded' in v))")
    out = _run(code)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    via, path, finder = (part.strip() for part in first.split("|"))
    assert via == "already loaded in this process"
    assert os.path.realpath(path) == os.path.realpath(report.path)
    loaded_deps = ast.literal_eval(second)
    assert loaded_deps == sorted(n for n, p in report.dependencies.items() if p.startswith("/"))
    assert finder == ("False" if len(loaded_deps) == len(report.dependencies) else "True")


def test_library_path_folders_are_searched_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty, first, second = (tmp_path / n for n in ("empty", "first", "second"))
    for folder in (empty, first, second):
        folder.mkdir()
    for folder in (first, second):
        (folder / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", os.pathsep.join(["", "$ORIGIN/lib", str(empty), str(first), str(second)]))
    assert loader._on_library_path("libnvrtc.so.13") == str(first / "libnvrtc.so.13")
    assert loader._on_library_path("libnvrtc.so.12") is None
    monkeypatch.delenv("LD_LIBRARY_PATH")
    assert loader._on_library_path("libnvrtc.so.13") is None


def test_nvrtc_on_the_library_path_is_the_copy_opened(tmp_path: Path) -> None:
    """Without a copy in the process, NVRTC comes from $LD_LIBRARY_PATH when a folder there holds
    it (the copy cuDNN's own dlopen by soname finds first), not from cuda-pathfinder's search."""
    report = loader.report()
    nvrtc = report.dependencies["nvrtc"].split(" (")[0]
    if not nvrtc.startswith("/"):
        pytest.skip(f"no NVRTC here: {report.dependencies['nvrtc']}")
    soname = f"libnvrtc.so.{report.cudart_version // 1000}"
    code = ("import ctypes, os\n"
            f"ctypes.CDLL({report.path!r}, mode=os.RTLD_GLOBAL)  # as a framework opens libcudnn\n"
            "import cudnn\n"
            "print(cudnn.library_info().dependencies['nvrtc'])\n")
    empty, held = tmp_path / "empty", tmp_path / "held"
    empty.mkdir()
    held.mkdir()
    (held / soname).symlink_to(os.path.realpath(nvrtc))
    out = _run(code, LD_LIBRARY_PATH=os.pathsep.join([str(empty), str(held)]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{held / soname} (LD_LIBRARY_PATH)"
