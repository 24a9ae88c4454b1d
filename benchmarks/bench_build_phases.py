"""Where a rebuild spends its time, phase by phase, both packages in one process; and whether the
handle a graph is built on changes its build time.

    PYTHONPATH=SITE_DIR python benchmarks/bench_build_phases.py [--cases TEXT] [--rounds N]

SITE_DIR is where the official nvidia-cudnn-frontend is installed: this process imports it as
``cudnn`` and loads cudnn-py beside it under another name (from ``BENCH_CUDNN_PY_DIR``, else this
repository's ``src/cudnn``), as ``bench_build.py --interleaved`` does, on the same libcudnn.
The cases are bench_build's (``--cases TEXT`` keeps those whose name contains TEXT; by default
the SDPA backward cases and the causal s8192 forward).

Phases: after two untimed builds of each package, ``--rounds N`` rounds (default 12) each build a
fresh graph with one package, then with the other, the order alternating, timing
``validate``, ``build_operation_graph``, ``create_execution_plans``, ``check_support`` and
``build_plans`` one by one. The packages split the work differently: the official finalizes the
operation graph and queries heuristics in ``create_execution_plans`` and finalizes the plan in
``build_plans``; cudnn-py lowers and finalizes the operation graph in ``build_operation_graph``
and queries heuristics and finalizes the plan in ``check_support``. Medians per phase, and the
per-round ratio of the totals (official / cudnn-py: above 1, cudnn-py builds faster).

Handles: each package's graphs built on its own default handle and on a handle it created,
and the official's graphs on a handle cudnn-py created, rotating, with the median build time
and its ratio to the official on its own default handle.
Prints; never asserts on time.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import bench_build as bb  # it gives the process its own driver JIT cache, then imports torch

PHASES = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans")


def phase_ms(make: Any) -> dict[str, float]:
    """The build of a fresh graph from ``make`` (`bench_build.settled`), phase by phase (ms)."""
    g = bb.settled(make)
    out: dict[str, float] = {}
    for phase in PHASES:
        step = getattr(g, phase)
        t = time.perf_counter()
        step(bb.HEUR) if phase == "create_execution_plans" else step()
        out[phase] = (time.perf_counter() - t) * 1e3
    out["total"] = sum(out.values())
    return out


class OnHandle:
    """A package whose ``pygraph`` builds on ``handle`` (every other name is the package's)."""

    def __init__(self, package: Any, handle: Any) -> None:
        self._package, self._handle = package, handle

    def __getattr__(self, name: str) -> Any:
        if name == "pygraph" and self._handle is not None:
            return functools.partial(self._package.pygraph, handle=self._handle)
        return getattr(self._package, name)


def phases(cases: dict[str, Any], packages: dict[str, Any], rounds: int) -> None:
    print(f"rebuild ms per phase, one process, {rounds} rounds, the order alternating")
    for name, make in cases.items():
        times: dict[str, list[dict[str, float]]] = {who: [] for who in packages}
        for package in packages.values():
            bb.use(package)
            phase_ms(make)
            phase_ms(make)
        for k in range(rounds):
            for who in list(packages)[:: 1 if k % 2 == 0 else -1]:
                bb.use(packages[who])
                times[who].append(phase_ms(make))
        print(name)
        for who, rows in times.items():
            cells = " ".join(f"{p}={statistics.median(r[p] for r in rows):.2f}" for p in (*PHASES, "total"))
            print(f"  {who:9s} {cells}")
        ratios = [a["total"] / b["total"] for a, b in zip(times["official"], times["cudnn-py"])]
        print(f"  official / cudnn-py per round: {statistics.median(ratios):.3f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)


def handles(cases: dict[str, Any], packages: dict[str, Any], rounds: int) -> None:
    official, ours = packages["official"], packages["cudnn-py"]
    theirs_handle, our_handle = official.create_handle(), ours.create_handle()
    variants = {"official": OnHandle(official, None),
                "official on its created handle": OnHandle(official, theirs_handle),
                "cudnn-py": OnHandle(ours, None),
                "cudnn-py on its created handle": OnHandle(ours, our_handle)}
    try:  # the official wraps a foreign cudnnHandle_t in its Handle (1.32)
        variants["official on cudnn-py's handle"] = OnHandle(official, official.Handle(int(our_handle), 0))
    except Exception as exc:  # noqa: BLE001 - an older official: the row is left out, saying why
        print(f"(no row for the official on cudnn-py's handle: {exc})")
    print(f"\nrebuild ms by handle, one process, {rounds} rounds, the order rotating")
    for name, make in cases.items():
        times: dict[str, list[float]] = {v: [] for v in variants}
        for v in variants.values():
            bb.use(v)
            bb.build_ms(make)
            bb.build_ms(make)
        keys = list(variants)
        for k in range(rounds):
            order = keys[k % len(keys):] + keys[:k % len(keys)]
            for v in order[::-1] if k % 2 else order:
                bb.use(variants[v])
                times[v].append(bb.build_ms(make))
        base = statistics.median(times["official"])
        print(name)
        for v, row in times.items():
            ratios = [a / b for a, b in zip(times["official"], row)]
            print(f"  {v:30s} {statistics.median(row):8.2f}  official / this {base / statistics.median(row):.3f}, "
                  f"per round {statistics.median(ratios):.3f} [{min(ratios):.2f}-{max(ratios):.2f}]", flush=True)


def main() -> None:
    official = bb.cudnn
    if not hasattr(official, "_compiled_module"):
        raise SystemExit("the `cudnn` imported is not the official frontend: put its site directory on PYTHONPATH")
    here = Path(__file__).resolve().parents[1] / "src" / "cudnn"
    ours = bb.load_beside("cudnn_py", os.environ.get(bb.OURS_DIR, str(here)))
    ours.plan_cache.enabled = False
    packages = {"official": official, "cudnn-py": ours}
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 12
    if "--cases" in sys.argv:
        text = sys.argv[sys.argv.index("--cases") + 1]
        cases = {k: v for k, v in bb.CASES.items() if text in k and k not in bb.OURS_ONLY}
    else:
        cases = {k: v for k, v in bb.CASES.items() if k.startswith("sdpa bwd") or "fwd bf16 causal" in k}
    if not cases:
        raise SystemExit("--cases: no case name matches")
    print(f"official {official.__version__}, cudnn-py {ours.__version__}")
    phases(cases, packages, rounds)
    handles(cases, packages, rounds)
    print(f"libcudnn: {', '.join(bb.libcudnn_mapped())}")


if __name__ == "__main__":
    main()
