"""`import cudnn` time above a bare interpreter, and what the import pulls in.

    python benchmarks/bench_import.py                  # 21 fresh processes each way
    python benchmarks/bench_import.py --runs 41 --top 20
    python benchmarks/bench_import.py --against /path/to/site-packages   # another `cudnn`

Each run starts a fresh interpreter (no warm module cache): ``python -c pass`` and
``python -c "import cudnn"`` alternate, and the median of their wall-time difference is the
import cost a user sees. The in-process time of the import alone, the first use of a few
public names (``cudnn.data_type.HALF`` builds one enum; ``cudnn.pygraph`` imports the graph
builder), the largest modules of ``python -X importtime`` and any optional framework the
import loaded are printed too. CPU only; prints, never asserts on time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# Optional packages `import cudnn` must not load (they are imported where a caller uses them).
OPTIONAL = ("torch", "cupy", "jax", "numpy", "numba", "cuda.bindings", "cuda.core", "cuda.pathfinder", "certifi")
# Statements timed after `import cudnn` in the same process: the cost of first use.
FIRST_GRAPH = ("g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT); "
               "X = g.tensor(name='X', dim=[8, 64, 56, 56], stride=[200704, 1, 3584, 64]); "
               "W = g.tensor(name='W', dim=[64, 64, 3, 3], stride=[576, 1, 192, 64]); "
               "B = g.tensor(name='B', dim=[1, 64, 1, 1], stride=[64, 1, 1, 1]); "
               "g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True); g.validate()")
FIRST_USE = (
    "cudnn.data_type.HALF",
    "cudnn.CudnnError",
    "cudnn.pygraph",
    "cudnn.Graph",
    FIRST_GRAPH,  # the first graph: the graph builder's modules and the enums it reads (no GPU needed)
)


def _env(pythonpath: str, source_copy: Path | None = None) -> dict[str, str]:
    """The children's environment: ``pythonpath`` first, and .pyc files written and read, as an
    installed package has them; or, given ``source_copy`` (a new folder), a copy of the package
    there for which no .pyc is written (cudnn's modules compiled at each import, the stdlib's not)."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if source_copy is not None:
        shutil.copytree(Path(pythonpath) / "cudnn", source_copy / "cudnn",
                        ignore=shutil.ignore_patterns("__pycache__"))
        env.update(PYTHONPATH=str(source_copy), PYTHONDONTWRITEBYTECODE="1")
    return env


def _wall(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - start


def _in_process(code: str, env: dict[str, str], setup: str = "pass") -> float:
    """Seconds a fresh child spent running ``code`` after ``setup``, timed by the child."""
    probe = f"import time\n{setup}\nt = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def _importtime(code: str, env: dict[str, str]) -> dict[str, tuple[int, int]]:
    """module -> (self us, cumulative us) from ``python -X importtime``."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, check=True,
                         capture_output=True, text=True)
    times: dict[str, tuple[int, int]] = {}
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|")
        times[name.strip()] = (int(self_us), int(cumulative_us))
    return times


def _loaded_optional(env: dict[str, str]) -> list[str]:
    code = ("import sys; before = set(sys.modules); import cudnn; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    new = out.stdout.split()
    return [name for name in new if any(name == p or name.startswith(p + ".") for p in OPTIONAL)]


def measure(env: dict[str, str], runs: int) -> dict[str, float]:
    """Median wall time above a bare interpreter, and the median in-process import time."""
    for stmt in ("import cudnn", *FIRST_USE):  # write the .pyc files first: users import compiled modules
        _wall(f"import cudnn; {stmt}", env)
    above, inside = [], []
    for _ in range(runs):
        bare = _wall("pass", env)
        with_cudnn = _wall("import cudnn", env)
        above.append(with_cudnn - bare)
        inside.append(_in_process("import cudnn", env))
    return {"above_bare_s": statistics.median(above), "in_process_s": statistics.median(inside),
            "spread_s": statistics.quantiles(above, n=4)[2] - statistics.quantiles(above, n=4)[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21, help="fresh processes each way (default 21)")
    ap.add_argument("--top", type=int, default=15, help="modules of -X importtime to list (default 15)")
    ap.add_argument("--against", help="a folder holding another `cudnn` package, timed the same way")
    ap.add_argument("--from-source", action="store_true",
                    help="compile cudnn's modules at each import (no .pyc), as with PYTHONDONTWRITEBYTECODE=1 "
                         "and no __pycache__")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_import_") as tmp:  # source copies, removed after
        def copy_folder(name: str) -> Path | None:
            return Path(tmp, name) if args.from_source else None

        env = _env(str(SRC), copy_folder("cudnn-py"))
        result = measure(env, args.runs)
        print(f"python {sys.version.split()[0]}, {args.runs} fresh processes each way, "
              f"{'cudnn compiled at each import' if args.from_source else 'compiled modules (.pyc)'}")
        print(f"import cudnn (cudnn-py, {SRC}):")
        print(f"  above a bare interpreter: {result['above_bare_s'] * 1e3:7.1f} ms median "
              f"(interquartile spread {result['spread_s'] * 1e3:.1f} ms)")
        print(f"  in-process import:        {result['in_process_s'] * 1e3:7.1f} ms median")
        if args.against:
            other = measure(_env(args.against, copy_folder("against")), args.runs)
            print(f"import cudnn ({args.against}):")
            print(f"  above a bare interpreter: {other['above_bare_s'] * 1e3:7.1f} ms median "
                  f"(ratio cudnn-py / other: {result['above_bare_s'] / other['above_bare_s']:.2f})")
            print(f"  in-process import:        {other['in_process_s'] * 1e3:7.1f} ms median")

        print("first use after `import cudnn` (in-process, median of 5 fresh processes):")
        for stmt in FIRST_USE:
            samples = [_in_process(stmt, env, setup="import cudnn") for _ in range(5)]
            label = "first conv+bias+relu graph, validated" if stmt == FIRST_GRAPH else stmt
            print(f"  {label:<24} {statistics.median(samples) * 1e3:7.2f} ms")

        bare = _importtime("pass", env)
        with_cudnn = _importtime("import cudnn", env)
        added = {name: t for name, t in with_cudnn.items() if name not in bare}
        print(f"python -X importtime -c 'import cudnn': {len(added)} modules beyond a bare interpreter; "
              f"largest self times:")
        for name, (self_us, cumulative_us) in sorted(added.items(), key=lambda kv: -kv[1][0])[: args.top]:
            print(f"  {self_us / 1e3:7.2f} ms self {cumulative_us / 1e3:7.2f} ms cumulative  {name}")
        optional = _loaded_optional(env)
        print(f"optional packages loaded by `import cudnn`: {', '.join(optional) if optional else 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
