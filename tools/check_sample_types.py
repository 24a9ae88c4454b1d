"""Runs mypy over the code of the official sample notebooks, against cudnn's declared API, and
lists the errors that come from cudnn's signatures (an op, keyword or type a checker says cudnn
lacks), apart from the samples' own untyped code.

    python tools/check_sample_types.py [NOTEBOOK_DIR]   (default: the conformance suite's samples)

Each notebook's code cells become one module (IPython lines such as ``!pip`` and ``%matplotlib``
left out); torch and the other frameworks are ``Any``. An error is listed when mypy names cudnn
in it (``"pygraph"``, ``CoreOpMethods``, ``Module "cudnn"``, ...); the exit status is 1 when any is.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = Path("/work/shared/conformance/suite/samples/python")
CUDNN_ERROR = re.compile(r'pygraph|OpMethods|Module "cudnn|"cudnn\.|cudnn\._|\bTensor\b|Handle|data_type|heur_mode')
CONFIG = """[mypy]
python_version = 3.10
mypy_path = {src}
ignore_missing_imports = true
follow_imports_for_stubs = true
check_untyped_defs = true
allow_redefinition = true
disable_error_code = import-untyped, no-redef, var-annotated
[mypy-torch.*,numpy.*,cupy.*,jax.*,matplotlib.*,IPython.*,triton.*,tqdm.*]
follow_imports = skip
"""


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines: list[str] = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        for line in "".join(cell.get("source", [])).splitlines():
            stripped = line.lstrip()
            lines.append("pass  # " + line if stripped.startswith(("!", "%")) else line)
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    notebooks = sorted(folder.rglob("*.ipynb"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for nb in notebooks:
            (out / (re.sub(r"\W", "_", nb.stem) + "_nb.py")).write_text(notebook_code(nb))
        config = out / "mypy.ini"
        config.write_text(CONFIG.format(src=ROOT / "src"))
        run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--no-incremental",
                              "--show-error-codes", "--no-error-summary", *sorted(map(str, out.glob("*_nb.py")))],
                             capture_output=True, text=True, cwd=tmp)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    ours = [line for line in errors if CUDNN_ERROR.search(line)]
    print(f"{len(notebooks)} notebooks, {len(errors)} mypy errors, {len(ours)} naming cudnn:")
    for line in ours:
        print("  " + line)
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
