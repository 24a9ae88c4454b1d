"""Run Python as if no NVIDIA wheel (cuDNN, cuBLAS, ...) were installed: cuda-pathfinder searches
an empty site-packages folder, and no variable points it (or cudnn-py) anywhere else. The
packages themselves still import; only the libraries the wheels carry are out of sight."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
# every variable that names a folder cudnn-py or cuda-pathfinder would search
FINDER_VARIABLES = ("CUDNN_PY_LIBRARY", "CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "CUDNN_PATH", "LD_LIBRARY_PATH")


def run(code: str, empty: Path) -> subprocess.CompletedProcess[str]:
    """``python -c code`` where site-packages is the empty folder ``empty`` for cuda-pathfinder."""
    prelude = (f"import site; site.getsitepackages = lambda prefixes=None: [{str(empty)!r}]; "
               "site.ENABLE_USER_SITE = False\n")
    env = {k: v for k, v in os.environ.items() if k not in FINDER_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
