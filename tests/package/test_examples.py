"""examples/: every script answers --help on any machine (without a GPU, without PyTorch);
without a GPU (or without PyTorch) each stops with a one-line message naming what it needs,
never a traceback; the quickstart notebook is valid nbformat 4 JSON and its cells that need no
GPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn._lib import cuda

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPTS = ["pygraph_conv_bias_relu.py", "graph_wrapper.py", "norms.py", "attention.py", "legacy_convolution.py"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


def torch_with_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(torch_with_cuda(), reason="checks the message given where the examples cannot run")
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_without_a_gpu_says_what_it_needs(script: str) -> None:
    source = (EXAMPLES / script).read_text()
    assert "Needs: an NVIDIA GPU" in source.split('"""')[1], "the docstring states what the example needs"
    out = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=120,
                         env=ENV, cwd=ROOT, check=False)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr, out.stderr
    message = out.stderr.strip()
    assert message.startswith(f"{script} needs ") and len(message.splitlines()) == 1, message
    assert ("PyTorch" in message) or ("NVIDIA GPU" in message)


ALL_SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))
# Runs a script as `python SCRIPT ARGS...` would, with PyTorch made unimportable first.
WITHOUT_TORCH = ("import runpy, sys; sys.modules['torch'] = None; script = sys.argv[1]; sys.argv = sys.argv[1:]; "
                 "sys.path.insert(0, script.rsplit('/', 1)[0]); runpy.run_path(script, run_name='__main__')")


def _run_example(script: str, *args: str, torch: bool) -> subprocess.CompletedProcess[str]:
    path = str(EXAMPLES / script)
    command = [sys.executable, path, *args] if torch else [sys.executable, "-c", WITHOUT_TORCH, path, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT, check=False)


def test_every_script_is_checked_here() -> None:
    assert set(SCRIPTS) <= set(ALL_SCRIPTS) and len(ALL_SCRIPTS) >= 8


@pytest.mark.parametrize("torch", [True, False], ids=["as-installed", "without-torch"])
@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_every_example_answers_help(script: str, torch: bool) -> None:
    """--help: exit 0, the usage line and the first paragraph of the docstring as description,
    on any machine: the command line is parsed before PyTorch or a GPU is looked for."""
    out = _run_example(script, "--help", torch=torch)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {script} [-h]"), out.stdout
    description = out.stdout.split("\n\n")[1]
    first_paragraph = (EXAMPLES / script).read_text().split('"""')[1].split("\n\n")[0]
    assert "".join(description.split()) == "".join(first_paragraph.split())  # argparse rewraps it


@pytest.mark.parametrize(("script", "args"), [
    ("legacy_convolution.py", ["--n", "0"]), ("fp8_linear.py", ["--tokens", "-4"]),
    ("torch_models.py", ["--layers", "0"]), ("torch_ddp_train.py", ["--steps", "0"]),
    ("torch_ddp_train.py", ["--models", "gpt,vit"]), ("graph_wrapper.py", ["--bogus"]), ("norms.py", ["extra"]),
])
def test_a_bad_argument_to_an_example_is_a_usage_error(script: str, args: list[str]) -> None:
    out = _run_example(script, *args, torch=False)
    assert out.returncode == 2, out.stderr
    error = out.stderr.strip().splitlines()[-1]
    assert out.stderr.startswith(f"usage: {script}"), out.stderr
    assert error.startswith((f"{script}: error: argument", f"{script}: error: unrecognized arguments")), error
    assert "PyTorch" not in out.stderr and "GPU" not in out.stderr


def notebook() -> dict:
    return json.loads((EXAMPLES / "quickstart.ipynb").read_text())


def test_notebook_is_valid_nbformat_4() -> None:
    nb = notebook()
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 4
    assert nb["metadata"]["kernelspec"]["language"] == "python"
    ids = set()
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], list) and all(isinstance(line, str) for line in cell["source"])
        assert cell["id"] not in ids
        ids.add(cell["id"])
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
            compile("".join(cell["source"]), cell["id"], "exec")
    try:
        import nbformat
    except ImportError:
        return
    nbformat.validate(nbformat.reads(json.dumps(nb), as_version=4))


@pytest.mark.skipif(cuda.device_count() > 0, reason="runs the notebook's no-GPU half")
def test_notebook_cells_without_the_gpu_tag_run_here() -> None:
    cells = [c for c in notebook()["cells"] if c["cell_type"] == "code"
             and "needs-gpu" not in c["metadata"].get("tags", [])]
    assert len(cells) >= 3
    program = "\n".join("".join(c["source"]) for c in cells) + "\nprint(g._repr_svg_()[:4])\n"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=ENV, check=False)
    assert out.returncode == 0, out.stderr
    assert "digraph" in out.stdout and "<svg" in out.stdout
