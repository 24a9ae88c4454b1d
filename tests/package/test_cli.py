"""python -m cudnn (and the cudnn-py command): --version, --help, info, demo, bench; without a GPU
or a driver each says so in words, never with a traceback; a bad argument is argparse's usage
error before anything looks for a GPU. `show` is tested with the pictures."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.no_nvidia_wheels import run as run_without_nvidia_wheels

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


COMMANDS = ("info", "demo", "show", "bench")


def _description(help_text: str) -> str:
    """The paragraph argparse prints between the usage and the argument lists ('' if none)."""
    paragraphs = help_text.split("\n\n")
    second = paragraphs[1] if len(paragraphs) > 1 else ""
    return "" if second.startswith(("options:", "positional arguments:")) else " ".join(second.split())


INFO = "from cudnn.cli import main\nraise SystemExit(main(['info'], prog='python -m cudnn'))\n"


def test_info_without_the_cudnn_wheel_leads_with_the_missing_cudnn(tmp_path: Path) -> None:
    """First what is missing for cudnn-py itself, and how to get it; then the rest."""
    out = run_without_nvidia_wheels(INFO, tmp_path)
    if out.returncode == 0 and "\ncuDNN: libcudnn" in out.stdout:
        pytest.skip("a cuDNN outside the Python packages is found here")
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("cudnn-py ")
    assert lines[1] == "cuDNN: not found"
    assert lines[2].startswith("  cuDNN 9 (libcudnn) was not found. Install it with `pip install \"cudnn-py[cu13]\"`")
    assert "[cu12]" in lines[2] and "$CUDNN_PY_LIBRARY" in lines[2]
    first_other = next(i for i, line in enumerate(lines) if "cublasLt" in line or line.startswith("NVIDIA driver:"))
    assert first_other > 2
    assert any(line.startswith("NVIDIA driver:") for line in lines) and lines[-1].startswith("GPU")
    assert "features of the loaded cuDNN" not in out.stdout


def test_info_without_cuda_bindings_says_the_driver_was_not_checked(tmp_path: Path) -> None:
    out = run_without_nvidia_wheels("import sys\nsys.modules['cuda.bindings'] = None\n" + INFO, tmp_path)
    if out.returncode == 0 and "\ncuDNN: libcudnn" in out.stdout:
        pytest.skip("a cuDNN outside the Python packages is found here")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == "cuDNN: not found"
    driver = next(line for line in lines if line.startswith("NVIDIA driver:"))
    assert driver.startswith("NVIDIA driver: not checked: cuda-bindings is not installed"), driver
    assert "libcuda" not in driver
    assert "CUDA runtime: not checked (no cuda-bindings)" in lines
    assert lines[-1] == "GPU: not checked (no cuda-bindings)"


def test_help() -> None:
    out = _run()
    assert out.returncode == 0
    assert out.stdout.startswith("usage: python -m cudnn [-h]"), out.stdout
    for command in COMMANDS:
        assert command in out.stdout


@pytest.mark.parametrize("module", ["cudnn.cli", "cudnn.collect_env"])
def test_other_modules_run_with_dash_m_are_named_so(module: str) -> None:
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": SRC}, check=False)
    assert out.returncode == 0 and out.stdout.startswith(f"usage: python -m {module} [-h]"), out.stdout
    assert _description(out.stdout)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_help_says_what_it_does(command: str) -> None:
    out = _run(command, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python -m cudnn {command} [-h]"), out.stdout
    assert len(_description(out.stdout)) > 40, out.stdout


@pytest.mark.parametrize("args", [
    ["bench", "--iters", "-1"], ["bench", "--iters", "0"], ["bench", "--iters", "ten"],
    ["bench", "--only", "fft"], ["bench", "--only", "conv,fft"], ["bench", "--bogus"],
    ["info", "--bogus"], ["demo", "--bogus"], ["show"], ["show", "g.json", "--bogus"], ["nosuch"],
])
def test_a_bad_argument_is_a_usage_error_before_any_gpu_check(args: list[str]) -> None:
    out = _run(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    usage, error = out.stderr.strip().splitlines()[0], out.stderr.strip().splitlines()[-1]
    assert usage.startswith("usage: python -m cudnn"), out.stderr
    assert error.startswith("python -m cudnn") and ": error: " in error, out.stderr
    assert "GPU" not in out.stderr and out.stdout == ""


def test_bench_names_the_wrong_value() -> None:
    assert "--iters: -1 is not positive" in _run("bench", "--iters", "-1").stderr
    assert "unknown case(s) fft; choose from conv, matmul, layernorm, sdpa" in _run("bench", "--only", "fft").stderr


def test_every_numeric_option_is_range_checked() -> None:
    """No option of any command takes a bare int or float: each numeric one is a checked type."""
    from cudnn import cli

    def options(ap: argparse.ArgumentParser) -> list[argparse.Action]:
        found = []
        for action in ap._actions:  # argparse has no public walk over its actions
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found += options(sub)
            else:
                found.append(action)
        return found

    actions = options(cli.parser())
    assert any(a.dest == "iters" for a in actions)
    assert [a.dest for a in actions if a.type in (int, float)] == []
    iters = next(a for a in actions if a.dest == "iters")
    assert iters.type is not None
    for bad in ("0", "-1", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            iters.type(bad)
    assert iters.type("3") == 3


def test_bench_from_python_checks_its_arguments_before_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    from cudnn.cli_bench import bench

    assert bench(["conv"], 0) == 2
    assert bench(["fft"], 5) == 2
    err = capsys.readouterr().err
    assert "iters must be at least 1, got 0" in err and "unknown case" in err and "GPU" not in err


def test_version() -> None:
    import cudnn

    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"cudnn-py {cudnn.__version__}"


def _console_script() -> str | None:
    """The installed ``cudnn-py`` command: beside this Python first, else on $PATH."""
    beside = Path(sys.executable).parent / "cudnn-py"
    return str(beside) if beside.is_file() else shutil.which("cudnn-py")


@pytest.mark.skipif(_console_script() is None, reason="the package's console script is not installed")
def test_console_script() -> None:
    import cudnn

    script = _console_script()
    assert script is not None
    out = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == f"cudnn-py {cudnn.__version__}"
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.startswith("usage: cudnn-py [-h]"), out.stdout
    out = subprocess.run([script, "bench", "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.startswith("usage: cudnn-py bench [-h]"), out.stdout
    assert _description(out.stdout)
    out = subprocess.run([script, "bench", "--iters", "-1"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "cudnn-py bench: error: argument --iters" in out.stderr, out.stderr


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
