"""What a process pays to start: import, cold build, warm build, build from the disk caches in a
new process (plans and compiled kernels), host enqueue and GPU time, per case, cudnn-py beside
PyTorch and the official nvidia-cudnn-frontend (when it can be imported).

    PYTHONPATH=src python benchmarks/bench_startup.py [--cases conv,conv_dynamic,matmul,layernorm,sdpa]
        [--other SITE_DIR]   # where the official frontend is installed (it is also named cudnn)
        [--profile 15]   # also cProfile the cold and the disk builds (top 15 by own time)
        [--cold-runs 3]   # fresh processes per package for each case's cold build
        [--first-graph-only] [--first-graph-runs 5]   # only the first-graph rows (default handle; a handle made first), N processes per package

cold: first build of the graph in a process whose cuDNN is already initialised (another graph
built first), plan cache off: the median over ``--cold-runs`` fresh processes per package, the
order alternating (one build's time moves with the state of the process and the host; a single
process per package made the ratio of one case swing either way between runs), and the ratio of
each package's best process as well (a new process builds at one of two speeds for its whole
life: see bench_build.py). warm: the same graph built again, plan cache on (memory hit).
disk: a fresh process that finds the plan (and, for dynamic-shape graphs, the kernels) in the
cache directory this process wrote; "disk, first use" times the first build of that process
(cuDNN's sublibraries load there), "disk" the build after another graph initialised cuDNN.
PyTorch has no build: its cold/warm columns are its first and second call. The official
frontend (also named ``cudnn``) runs the same cases in a child process that sees it instead of
this repository: it has no plan cache, so its warm column is a fresh graph of the case built
again in that process, and it has no disk column. Host enqueue: host microseconds per call
while the GPU is busy; GPU: CUDA events over back-to-back calls. Medians; prints, never asserts
on time.

Every process gets a new, empty driver JIT cache (``CUDA_CACHE_PATH``, see bench_build.py) unless
the caller chose one, so that no package's figures depend on which ran first; the disk children
share this process's, as a later process on the same machine would. Run it from an installed
package or after ``python -m compileall src``: a source tree without bytecode (with
PYTHONDONTWRITEBYTECODE set) compiles cudnn-py's modules again in every process, which the
first-graph row would count (the benchmark says so when it finds them uncompiled).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _processes import official_env as _official_env
from _processes import own_jit_cache

if "--child" not in sys.argv:  # a disk child (`in_child`) shares its parent's, as a later process would
    own_jit_cache("bench-startup-jit-")

T_START = time.perf_counter()
import cudnn

IMPORT_S = time.perf_counter() - T_START
import torch
import torch.nn.functional as F

dt = cudnn.data_type
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
OFFICIAL = hasattr(cudnn, "_compiled_module")  # this process runs the official frontend (--official-child)


# -- cases: (graph, variant pack, the PyTorch call) ------------------------------------------------

def conv(dynamic: bool = False) -> tuple[Any, dict, Callable[[], Any]]:  # type: ignore[type-arg]
    torch.manual_seed(0)
    x = torch.randn(32, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT,
                      is_dynamic_shape_enabled=dynamic)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    conv = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])  # the official needs all three
    Y = g.relu(g.bias(conv, B)).set_output(True)
    y = torch.empty_like(x)
    return g, {X: x, W: w, B: b, Y: y}, lambda: F.relu(F.conv2d(x, w, b.view(-1), padding=1))


def matmul() -> tuple[Any, dict, Callable[[], Any]]:  # type: ignore[type-arg]
    a = torch.randn(8, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, 1, 1024, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    A, W, BI = g.tensor_like(a), g.tensor_like(w), g.tensor_like(bias)
    C = g.add(g.matmul(A, W), BI).set_output(True)
    c = torch.empty(8, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    return g, {A: a, W: w, BI: bias, C: c}, lambda: torch.baddbmm(bias, a, w)


def layernorm() -> tuple[Any, dict, Callable[[], Any]]:  # type: ignore[type-arg]
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.rand(1, 4096, device="cuda", dtype=torch.bfloat16) + 0.5
    b = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    X, S, B = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b)
    pack = {X: x, S: s, B: b}
    eps: Any = 1e-5
    if OFFICIAL:  # its epsilon is a tensor: one float passed by value
        eps = g.tensor(dim=[1, 1], stride=[1, 1], is_pass_by_value=True, data_type=dt.FLOAT)
        pack[eps] = torch.full((1, 1), 1e-5, dtype=torch.float32)
    Y, _, _ = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=X, scale=S, bias=B,
                          epsilon=eps)  # by keyword: the official 1.32 takes the tensors first
    Y.set_output(True).set_data_type(dt.BFLOAT16)
    pack[Y] = torch.empty_like(x)
    return g, pack, lambda: F.layer_norm(x, (4096,), s.view(-1), b.view(-1), 1e-5)


def sdpa() -> tuple[Any, dict, Callable[[], Any]]:  # type: ignore[type-arg]
    bs, h, s, d = 2, 16, 1024, 128
    q, k, v = (torch.randn(bs, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    O, _ = g.sdpa(Q, K, V, generate_stats=False, attn_scale=d ** -0.5, use_causal_mask=True)
    O.set_output(True).set_dim([bs, h, s, d]).set_stride([h * s * d, s * d, d, 1])
    o = torch.empty_like(q)
    return g, {Q: q, K: k, V: v, O: o}, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


CASES: dict[str, Callable[[], tuple[Any, dict, Callable[[], Any]]]] = {  # type: ignore[type-arg]
    "conv": conv, "conv_dynamic": lambda: conv(True), "matmul": matmul, "layernorm": layernorm, "sdpa": sdpa}
LABELS = {"conv": "conv+bias+relu fp16 N32 C64 H56 K64 3x3", "conv_dynamic": "  same, is_dynamic_shape_enabled",
          "matmul": "matmul+bias bf16 8x1024x1024x1024", "layernorm": "layernorm bf16 16384x4096 (infer)",
          "sdpa": "sdpa bf16 b2 h16 s1024 d128 causal"}


def warm_up() -> None:
    """Initialise cuDNN (handle, sublibraries) with small conv and matmul graphs of other shapes,
    plan cache off, so that the timed build is not the process's first use of cuDNN."""
    enabled = not OFFICIAL and cudnn.plan_cache.enabled
    if not OFFICIAL:
        cudnn.plan_cache.enabled = False
    for shape in ((4, 32, 16, 16), (4, 32, 64, 64)):
        g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
        if shape[2] == 16:
            X = g.tensor(name="X", dim=list(shape), stride=[32 * 256, 1, 16 * 32, 32])
            W = g.tensor(name="W", dim=[32, 32, 3, 3], stride=[32 * 9, 1, 3 * 32, 32])
            g.relu(g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])).set_output(True)
        else:
            A = g.tensor(name="A", dim=[4, 32, 64], stride=[32 * 64, 64, 1])
            B = g.tensor(name="B", dim=[4, 64, 32], stride=[64 * 32, 32, 1])
            g.matmul(A, B).set_output(True)
        g.build(HEUR)
    if not OFFICIAL:
        cudnn.plan_cache.enabled = enabled


def ms(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def host_us(fn: Callable[[], Any], calls: int = 100, batches: int = 10) -> float:
    """Host microseconds per call while the GPU queue is full (the host is what is timed)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(batches):
        torch.cuda._sleep(50_000_000)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(samples)


def gpu_us(fn: Callable[[], Any], calls: int = 20, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda._sleep(5_000_000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / calls)
    return statistics.median(times)


def profiled(label: str, fn: Callable[[], Any], top: int) -> None:
    """Run ``fn`` under cProfile and print its ``top`` functions by own time (to stderr)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    body = text.getvalue()
    print(f"--- profile: {label}\n{body[body.find('ncalls'):]}", file=sys.stderr)


def child(case: str, first_use: bool, profile: int) -> None:
    """A fresh process: build ``case`` from the disk caches; prints JSON."""
    if not first_use:
        warm_up()
    g, _, _ = CASES[case]()
    t0 = time.perf_counter()
    if profile:
        profiled(f"{case} from the disk caches", lambda: g.build(HEUR), profile)
    else:
        g.build(HEUR)
    build_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"ms": build_ms, "import_ms": IMPORT_S * 1e3, "disk_hits": cudnn.plan_cache.disk_hits,
                      "kernel_hits": cudnn.plan_cache.kernel_hits}))


def in_child(case: str, first_use: bool, cache_dir: Path, profile: int = 0) -> dict[str, float]:
    cudnn.plan_cache.flush()  # the child reads what this process's writer thread wrote
    env = {**os.environ, "CUDNN_PY_CACHE_DIR": str(cache_dir)}
    args = [sys.executable, __file__, "--child", case, "--profile", str(profile)]
    out = subprocess.run(args + (["--first-use"] if first_use else []), env=env, capture_output=True, text=True)
    if profile or out.returncode:
        print(out.stderr[-6000:], file=sys.stderr)
    if out.returncode:
        return {"ms": float("nan"), "import_ms": float("nan"), "disk_hits": 0, "kernel_hits": 0}
    return json.loads(out.stdout.strip().splitlines()[-1])


def cold_child(case: str) -> None:
    """In a fresh process, with whichever ``cudnn`` it imports: the cold build of ``case`` after
    `warm_up` (cudnn-py's plan cache is off in its environment); prints JSON."""
    warm_up()
    g, _, _ = CASES[case]()
    torch.cuda.synchronize()
    print(json.dumps({"ms": ms(functools.partial(g.build, HEUR))}))


def cold_in_processes(case: str, runs: int,
                      official_env: dict[str, str] | None) -> tuple[list[float], list[float] | str]:
    """The cold build of ``case`` in each of ``runs`` fresh processes of cudnn-py and of the
    official (``official_env``: None when it cannot run; else its times or why it failed),
    cudnn-py first in even runs, the official first in odd ones."""
    here = str(Path(__file__).resolve().parent.parent / "src")
    envs = {"ours": {**os.environ, "PYTHONPATH": here, "CUDNN_PY_PLAN_CACHE": "0"}, "official": official_env}
    times: dict[str, list[float]] = {"ours": [], "official": []}
    failed = ""
    for k in range(runs):
        for who in ("ours", "official") if k % 2 == 0 else ("official", "ours"):
            env = envs[who]
            if env is None or (who == "official" and failed):
                continue
            out = subprocess.run([sys.executable, __file__, "--cold-child", case], env=env, capture_output=True,
                                 text=True, cwd="/")
            if out.returncode:
                why = f"failed: {out.stderr.strip().splitlines()[-1:]}"
                if who == "ours":
                    raise SystemExit(f"{case}: cudnn-py's cold build {why}")
                failed = why
                continue
            times[who].append(json.loads(out.stdout.strip().splitlines()[-1])["ms"])
    return times["ours"], times["official"] or failed or "not run"


def official_child() -> None:
    """In a process whose ``cudnn`` is the official frontend: per case, the first build of the
    case after cuDNN is initialised, a fresh graph of it built again, host enqueue and GPU time
    (or why the case failed); one JSON object on stdout."""
    warm_up()
    out: dict[str, dict[str, float] | str] = {}
    for case, make in CASES.items():
        try:
            g, pack, _ = make()
            g.build(HEUR)  # its first build of the case (the cold column comes from `cold_in_processes`)
            warm = ms(functools.partial(make()[0].build, HEUR))
            ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
            run = functools.partial(g.execute, pack, ws)
            out[case] = {"warm": warm, "host": host_us(run), "gpu": gpu_us(run)}
        except Exception as exc:  # noqa: BLE001 - reported in the table, the other cases still run
            out[case] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    print(json.dumps({"version": getattr(cudnn, "__version__", "?"), "cases": out}))


def official(other: str | None) -> dict[str, Any] | str:
    """The official frontend's rows from a child process that does not see this repository, or
    why there are none."""
    env = _official_env(other)
    probe = subprocess.run([sys.executable, "-c", "import cudnn, sys; sys.exit(0 if hasattr(cudnn, "
                            "'_compiled_module') else 3)"], env=env, capture_output=True, text=True, cwd="/")
    if probe.returncode:
        return "not importable" if probe.returncode != 3 else "not installed (the `cudnn` found is cudnn-py)"
    done = subprocess.run([sys.executable, __file__, "--official-child"], env=env, capture_output=True, text=True,
                          cwd="/")
    if done.returncode:
        return f"failed: {done.stderr.strip().splitlines()[-1:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def official_import_ms(other: str | None) -> str:
    """`import cudnn` of the official frontend in a process that does not see this repository
    (``other``: the directory it is installed in; else the default path), median of 5 processes."""
    env = _official_env(other)
    code = ("import time; t = time.perf_counter(); import cudnn; "
            "print((time.perf_counter() - t) * 1e3, hasattr(cudnn, '_compiled_module'))")
    times = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")
        if out.returncode or out.stdout.split()[-1:] != ["True"]:
            return "not importable"
        times.append(float(out.stdout.split()[0]))
    return f"{statistics.median(times):.1f} ms"


FIRST_GRAPH = "import cudnn + conv+bias+relu 8x64x56x56 3x3 fp16, first graph of a new process"
FIRST_GRAPH_RUNS = 5  # fresh processes per side
COLD_RUNS = 3  # fresh processes per package for each case's cold build


def first_graph_child(own_handle: bool = False) -> None:
    """In a fresh process (CUDA already initialised by torch, no graph built yet, no plan cache):
    the time of ``import cudnn`` plus declaring and building the first graph, cuDNN's own start
    included (each frontend loads what it needs at import or on first use); prints JSON.
    ``own_handle``: the official samples' way, a handle made first (``cudnn.create_handle()``,
    timed too) and passed to the graph."""
    x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    handle = {"handle": cudnn.create_handle()} if own_handle else {}
    g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT, **handle)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1]), B)).set_output(True)
    g.build(HEUR)
    print(json.dumps({"ms": IMPORT_S * 1e3 + (time.perf_counter() - t0) * 1e3, "plan": Y is not None}))


def first_graph_times(envs: dict[str, dict[str, str]], runs: int, own_handle: bool = False,
                      ) -> dict[str, list[float] | str]:
    """`first_graph_child` in ``runs`` fresh processes per package (``envs``: name -> environment),
    the order alternating as in `cold_in_processes`: per package its times, or why it failed."""
    argv = [sys.executable, __file__, "--first-graph-child"] + (["own-handle"] if own_handle else [])
    out: dict[str, list[float] | str] = {who: [] for who in envs}
    names = list(envs)
    for k in range(runs):
        for who in names if k % 2 == 0 else names[::-1]:
            got = out[who]
            if isinstance(got, str):
                continue
            done = subprocess.run(argv, env=envs[who], capture_output=True, text=True, cwd="/")
            if done.returncode:
                out[who] = f"failed: {done.stderr.strip().splitlines()[-1:]}"
                continue
            got.append(json.loads(done.stdout.strip().splitlines()[-1])["ms"])
    return out


def uncompiled_modules() -> list[str]:
    """The modules of cudnn-py's first graph that a new process would compile from source (no
    bytecode beside them)."""
    import cudnn._graph.pygraph as graph_module  # the modules the first graph loads

    names = [m for m in sys.modules if m.startswith(("cudnn.graph", "cudnn.backend"))]
    files = [getattr(sys.modules[m], "__file__", None) or "" for m in names] + [graph_module.__file__ or ""]
    return [f for f in files if f.endswith(".py") and not os.path.exists(importlib.util.cache_from_source(f))]


def first_graph_rows(other: str | None, runs: int = FIRST_GRAPH_RUNS) -> None:
    """The first graph of a new process, cudnn-py (plan cache off) beside the official, and the ratio."""
    missing = uncompiled_modules()
    if missing:
        print(f"\nnote: {len(missing)} of cudnn-py's modules have no bytecode here: every new process compiles "
              "them, which an installed package does not (`python -m compileall src` first)")
    here = str(Path(__file__).resolve().parent.parent / "src")
    envs = {"ours": {**os.environ, "PYTHONPATH": here, "CUDNN_PY_PLAN_CACHE": "0"}, "official": _official_env(other)}

    def text(got: list[float] | str) -> str:
        return got if isinstance(got, str) else f"{statistics.median(got):.1f} ms [{min(got):.1f}-{max(got):.1f}]"

    for own_handle in (False, True):
        times = first_graph_times(envs, runs, own_handle)
        how = ", a handle made first (cudnn.create_handle(), passed as handle=)" if own_handle else ""
        print(f"\n{FIRST_GRAPH}{how} (median [range] of {runs} processes per package, the order alternating):")
        ours, theirs = times["ours"], times["official"]
        print(f"  cudnn-py {text(ours)}; official {text(theirs)}", end="")
        if isinstance(ours, list) and isinstance(theirs, list):
            ratio = statistics.median(theirs) / statistics.median(ours)
            print(f"; ratio official / cudnn-py {ratio:.2f}x, best process {min(theirs) / min(ours):.2f}x "
                  "(above 1: cudnn-py is faster)")
        else:
            print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--child")
    ap.add_argument("--first-use", action="store_true")
    ap.add_argument("--official-child", action="store_true")
    ap.add_argument("--first-graph-child", nargs="?", const="default", choices=["default", "own-handle"])
    ap.add_argument("--cold-child")
    ap.add_argument("--cold-runs", type=int, default=COLD_RUNS, metavar="N",
                    help="fresh processes per package for each case's cold build (alternating)")
    ap.add_argument("--first-graph-only", action="store_true",
                    help="only the first-graph rows (import + first graph of a new process)")
    ap.add_argument("--first-graph-runs", type=int, default=FIRST_GRAPH_RUNS, metavar="N",
                    help="fresh processes per package for the first-graph rows (alternating)")
    ap.add_argument("--other", metavar="SITE_DIR", help="where the official frontend (also named cudnn) is installed")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print the N functions with the most own time of the cold and the disk builds")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.first_use, args.profile)
        return
    if args.official_child:
        official_child()
        return
    if args.first_graph_child:
        first_graph_child(args.first_graph_child == "own-handle")
        return
    if args.cold_child:
        cold_child(args.cold_child)
        return
    if args.first_graph_only:
        first_graph_rows(args.other, args.first_graph_runs)
        return
    theirs = official(args.other)  # first: its child process has the GPU to itself
    cache_dir = Path(tempfile.mkdtemp(prefix="cudnn-py-startup-"))
    cudnn.plan_cache.directory = cache_dir
    print(f"device: {torch.cuda.get_device_name()}  cuDNN {cudnn.backend_version_string()}  torch {torch.__version__}")
    print(f"import cudnn (this process): {IMPORT_S * 1e3:.1f} ms; "
          f"official frontend's import: {official_import_ms(args.other)}")
    warm_up()
    head = (f"{'case':40s} {'':8s} {'cold ms':>8s} {'warm ms':>8s} {'disk ms':>8s} {'disk, 1st':>9s} "
            f"{'host us':>8s} {'GPU us':>8s}")
    print(head)
    official_env = _official_env(args.other) if isinstance(theirs, dict) else None
    for case in args.cases.split(","):
        cold_runs, their_cold = cold_in_processes(case, args.cold_runs, official_env)
        cold = statistics.median(cold_runs)
        if args.profile:  # a cold build in this process (plan cache off), under the profiler
            cudnn.plan_cache.enabled = False
            h = CASES[case]()[0]
            profiled(f"{case} cold build", lambda h=h: h.build(HEUR), args.profile)
            cudnn.plan_cache.enabled = True
        g, pack, torch_call = CASES[case]()
        g.build(HEUR)  # writes the disk cache
        again = [CASES[case]()[0] for _ in range(3)]
        warm = statistics.median(ms(lambda h=h: h.build(HEUR)) for h in again)
        disk = in_child(case, False, cache_dir)
        if args.profile:
            in_child(case, False, cache_dir, args.profile)
        first = in_child(case, True, cache_dir)
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        run = lambda g=g, pack=pack, ws=ws: g.execute(pack, ws)
        host, gpu = host_us(run), gpu_us(run)
        kernels = " (kernels from disk)" if disk["kernel_hits"] else ""
        print(f"{LABELS[case]:40s} {'cudnn-py':8s} {cold:8.2f} {warm:8.3f} {disk['ms']:8.2f} {first['ms']:9.2f} "
              f"{host:8.1f} {gpu:8.1f}  disk hits {disk['disk_hits']}{kernels}")
        row = theirs["cases"].get(case) if isinstance(theirs, dict) else theirs
        if isinstance(row, dict):
            cold_text, ratio = f"{'-':>8s}", ""
            if isinstance(their_cold, list):
                cold_text = f"{statistics.median(their_cold):8.2f}"
                ratio = (f"  cold: official / cudnn-py {statistics.median(their_cold) / cold:.2f}x, best process "
                         f"{min(their_cold) / min(cold_runs):.2f}x")
            print(f"{'':40s} {'official':8s} {cold_text} {row['warm']:8.3f} {'':8s} {'':9s} "
                  f"{row['host']:8.1f} {row['gpu']:8.1f}{ratio}")
        else:
            print(f"{'':40s} {'official':8s} {row}")
        if case == "conv_dynamic":
            continue  # PyTorch has no dynamic-shape mode: its row is the conv row
        t_cold, t_warm = ms(torch_call), ms(torch_call)
        print(f"{'':40s} {'torch':8s} {t_cold:8.2f} {t_warm:8.3f} {'':8s} {'':9s} "
              f"{host_us(torch_call):8.1f} {gpu_us(torch_call):8.1f}")
    first_graph_rows(args.other, args.first_graph_runs)


if __name__ == "__main__":
    main()
