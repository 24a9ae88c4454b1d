"""examples/ run on the GPU: each script exits 0 after its own check against PyTorch (it prints
OK per compared tensor), and every code cell of the quickstart notebook runs in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("script", ["pygraph_conv_bias_relu.py", "graph_wrapper.py", "norms.py", "attention.py"])
def test_example_runs_and_matches_pytorch(script: str, tmp_path: Path) -> None:
    args = ["--picture", str(tmp_path / "g.svg")] if script == "pygraph_conv_bias_relu.py" else []
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                         timeout=300, env=ENV, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout and "MISMATCH" not in out.stdout, out.stdout
    print(out.stdout)


def test_notebook_runs() -> None:
    nb = json.loads((EXAMPLES / "quickstart.ipynb").read_text())
    program = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, env=ENV,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
