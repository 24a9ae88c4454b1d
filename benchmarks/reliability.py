"""The reliability suite's long profiles on the GPU, one summary line per part.

    python benchmarks/reliability.py [--quick] [--sanitizer]

Parts: differential fuzzing (tests/graph/test_fuzz_gpu.py; long: 5,000 graphs over 2,000
structures, wide sizes), soak (``CUDNN_PY_SOAK=full``: 1,000,000 executes of one graph, 10,000
build/destroy cycles with one in 5 built by cuDNN, 2,000 handles created and destroyed; about
4 minutes on an H200), concurrency (16 threads, 4 processes on one cache directory, fork), faults, and with
``--sanitizer`` tools/sanitize.sh. ``--quick`` runs the tests' default (CI-sized) profiles.
Each part runs pytest in a subprocess; the lines the tests print (``reliability: ...``) are
collected and printed together at the end, with the pytest outcome of each part.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LONG = {
    "fuzz": ("tests/graph/test_fuzz_gpu.py", {"CUDNN_PY_GPU_FUZZ": "5000", "CUDNN_PY_GPU_FUZZ_STRUCTURES": "2000",
                                            "CUDNN_PY_GPU_FUZZ_VARIETY": "wide", "CUDNN_PY_GPU_FUZZ_SECONDS": "1800"}),
    "soak": ("tests/run/test_soak_gpu.py", {"CUDNN_PY_SOAK": "full"}),
    "concurrency": ("tests/run/test_concurrency_gpu.py", {"CUDNN_PY_THREAD_ROUNDS": "400"}),
    "faults": ("tests/plans/test_faults_gpu.py tests/plans/test_faults.py", {}),
}


def run_part(name: str, paths: str, env: dict[str, str], timeout: float) -> list[str]:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *paths.split()]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        out, status = done.stdout + done.stderr, str(done.returncode)
    except subprocess.TimeoutExpired as exc:
        out, status = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else \
            (exc.stdout or ""), f"timeout after {timeout:.0f} s"
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("reliability:")]
    tail = [ln for ln in out.splitlines() if " passed" in ln or " failed" in ln or " error" in ln][-1:]
    lines.append(f"reliability: {name} pytest {status} {tail[0].strip() if tail else ''} "
                 f"({time.perf_counter() - start:.0f} s)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tests' default profiles")
    ap.add_argument("--sanitizer", action="store_true", help="also run tools/sanitize.sh")
    ap.add_argument("--parts", default=",".join(LONG), help="comma-separated subset of " + ",".join(LONG))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per part")
    args = ap.parse_args()
    summary: list[str] = []
    for name in args.parts.split(","):
        paths, env = LONG[name]
        lines = run_part(name, paths, {} if args.quick else env, args.timeout)
        for ln in lines:
            print(ln, flush=True)
        summary += lines
    if args.sanitizer:
        done = subprocess.run(["bash", str(ROOT / "tools" / "sanitize.sh")], cwd=ROOT, capture_output=True,
                              text=True, check=False)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("reliability:")]
        print("\n".join(lines), flush=True)
        summary += lines
    print("\n== summary ==\n" + "\n".join(summary))


if __name__ == "__main__":
    main()
