"""Build time and autotuning: cold, warm in-process, from the disk cache in a new process;
autotuned vs heuristic GPU time.

    PYTHONPATH=src python benchmarks/bench_build.py [--other SITE_DIR]

Build = validate -> plans ready to execute (``pygraph.build``). "cold" runs with the plan
cache off (heuristics and plan finalization every time; cuDNN may still reuse kernels it
compiled earlier in the process), "warm" is the same graph built again in this process,
"disk" is a fresh process reading the cache directory this one wrote. Prints medians;
never asserts on time.

The official nvidia-cudnn-frontend is also named ``cudnn``, so it is measured in a child
process whose ``sys.path`` holds it instead of this repository (``--other``: the directory it
is installed in, or found on the default path when that is not this package): the same cases,
written against the documented API both share, built from fresh graphs the same way ("cold";
it has no plan cache, so no warm or disk column), and their GPU time with its own plans.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import cudnn

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]  # build(modes): validate -> plans ready to run

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
COLD_BUILDS = 9  # fresh graphs per cold median: one build varies by a few ms with the host


def conv_bias_relu(n: int, c: int, h: int, k: int, r: int):  # type: ignore[no-untyped-def]
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(k, c, r, r, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    conv = g.conv_fprop(X, W, padding=[r // 2, r // 2], stride=[1, 1], dilation=[1, 1])  # the official needs all three
    Y = g.relu(g.bias(conv, B)).set_output(True)
    y = torch.empty(n, k, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    return g, {X: x, W: w, B: b, Y: y}


def matmul_bias(b: int, m: int, k: int, n: int):  # type: ignore[no-untyped-def]
    a = torch.randn(b, m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(b, k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, 1, n, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    A, W, BIAS = g.tensor_like(a), g.tensor_like(w), g.tensor_like(bias)
    C = g.add(g.matmul(A, W), BIAS).set_output(True)
    c = torch.empty(b, m, n, device="cuda", dtype=torch.bfloat16)
    return g, {A: a, W: w, BIAS: bias, C: c}


def layer_norm(rows: int, cols: int, lowering: str | None = None):  # type: ignore[no-untyped-def]
    """bf16 X with fp32 scale/bias. cudnn-py lowers it by default as a unit-scale norm with the
    affine step in fused pointwise ops (a runtime-compiled kernel: fast to run, slow to build
    cold); ``lowering="norm"`` is the single norm operation the official frontend builds (it
    takes no such argument)."""
    extra = {"lowering": lowering} if lowering and not hasattr(cudnn, "_compiled_module") else {}
    x = torch.randn(rows, cols, 1, 1, device="cuda", dtype=torch.bfloat16)
    scale = torch.randn(1, cols, 1, 1, device="cuda", dtype=torch.float32)
    bias = torch.randn(1, cols, 1, 1, device="cuda", dtype=torch.float32)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float32)  # by value, on the host
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, S, B = g.tensor_like(x), g.tensor_like(scale), g.tensor_like(bias)
    E = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True, data_type=FLOAT)
    Y, _, _ = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=X, scale=S, bias=B,
                          epsilon=E, **extra)
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    y = torch.empty_like(x)
    return g, {X: x, S: scale, B: bias, E: eps, Y: y}


def attention(b: int, h: int, s: int, d: int):  # type: ignore[no-untyped-def]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    out, _ = g.sdpa(Q, K, V, attn_scale=d ** -0.5, generate_stats=False, use_causal_mask=True)
    out.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    o = torch.empty_like(q)
    return g, {Q: q, K: k, V: v, out: o}


CASES = {
    "conv+bias+relu N32 C64 H56 K64 3x3": lambda: conv_bias_relu(32, 64, 56, 64, 3),
    "conv+bias+relu N32 C256 H14 K256 3x3": lambda: conv_bias_relu(32, 256, 14, 256, 3),
    "matmul+bias bf16 8x1024x1024x1024": lambda: matmul_bias(8, 1024, 1024, 1024),
    "layernorm bf16 16384x4096 fp32 affine": lambda: layer_norm(16384, 4096),
    "  same, lowering='norm' (one operation)": lambda: layer_norm(16384, 4096, "norm"),
    "sdpa bf16 causal b4 h16 s2048 d128": lambda: attention(4, 16, 2048, 128),
}


def ms(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def gpu_us(g: cudnn.pygraph, pack: dict, repeats: int = 30) -> float:  # type: ignore[type-arg]
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    for _ in range(3):
        g.execute(pack, ws)
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.execute(pack, ws)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def child(case: str) -> None:
    """In a fresh process: the time of the first build of ``case`` (disk cache hit expected),
    after cuDNN itself is initialised (its handle and first plan), which every process pays once."""
    warm_up, _ = CASES["matmul+bias bf16 8x1024x1024x1024"]() if "conv" in case else CASES[next(iter(CASES))]()
    cudnn.plan_cache.enabled = False
    warm_up.build(HEUR)
    cudnn.plan_cache.enabled = True
    g, _ = CASES[case]()
    t = ms(functools.partial(g.build, HEUR))
    print(json.dumps({"ms": t, "disk_hits": cudnn.plan_cache.disk_hits}))


def official_child() -> None:
    """In a process whose ``cudnn`` is the official frontend: per case, the first build, the
    median of COLD_BUILDS builds of fresh graphs (the same measure as cudnn-py's cold column) and the
    GPU time of the plan it picked (or why a case failed); one JSON object on stdout."""
    out: dict[str, dict[str, float] | str] = {}
    for name, make in CASES.items():
        try:
            times = [ms(functools.partial(make()[0].build, HEUR)) for _ in range(COLD_BUILDS)]
            g, pack = make()
            g.build(HEUR)
            out[name] = {"first": times[0], "cold": statistics.median(times), "gpu_us": gpu_us(g, pack)}
        except Exception as exc:  # noqa: BLE001 - reported in the table, the other cases still run
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    print(json.dumps({"version": getattr(cudnn, "__version__", "?"), "cases": out}))


def official(other: str | None) -> dict | str:  # type: ignore[type-arg]
    """The official frontend's figures from a child process, or why there are none."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if other:
        env["PYTHONPATH"] = os.path.abspath(other)
    probe = subprocess.run([sys.executable, "-c", "import torch, cudnn, sys; "
                            "sys.exit(0 if hasattr(cudnn, '_compiled_module') else 3)"],
                           env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if probe.returncode:
        return "not importable" if probe.returncode != 3 else "not installed (the `cudnn` found is cudnn-py)"
    done = subprocess.run([sys.executable, __file__, "--official-child"], env=env, capture_output=True, text=True)
    if done.returncode:
        return f"failed: {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    if sys.argv[1:] == ["--official-child"]:
        official_child()
        return
    other = sys.argv[sys.argv.index("--other") + 1] if "--other" in sys.argv else None
    print(f"device: {torch.cuda.get_device_name()}  cuDNN {cudnn.backend_version_string()}")
    cache_dir = Path(tempfile.mkdtemp(prefix="cudnn-py-bench-"))
    cudnn.plan_cache.directory = cache_dir
    ours: dict[str, dict[str, float]] = {}
    print(f"\n{'case':40s} {'cold ms':>8s} {'warm ms':>8s} {'disk ms':>8s} {'heur us':>8s} {'tuned us':>9s} {'gain':>6s}")
    for name, make in CASES.items():
        cudnn.plan_cache.enabled = False
        cold = statistics.median(ms(functools.partial(make()[0].build, HEUR)) for _ in range(COLD_BUILDS))
        cudnn.plan_cache.enabled = True
        g, pack = make()
        g.build(HEUR)  # fills the cache (memory and disk)
        warm = statistics.median(ms(functools.partial(make()[0].build, HEUR)) for _ in range(5))
        env = {**os.environ, "CUDNN_PY_CACHE_DIR": str(cache_dir)}
        out = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True, text=True)
        disk = json.loads(out.stdout.strip().splitlines()[-1])["ms"] if out.returncode == 0 else float("nan")
        heur = gpu_us(g, pack)
        g2, pack2 = make()
        g2.validate()
        g2.build_operation_graph()
        g2.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        report = g2.autotune(pack2, repeats=10, progress=False)
        tuned = gpu_us(g2, pack2)
        ours[name] = {"cold": cold, "gpu_us": heur}
        print(f"{name:40s} {cold:8.2f} {warm:8.3f} {disk:8.2f} {heur:8.1f} {tuned:9.1f} {heur / tuned:5.2f}x"
              f"   ({report.best.name} of {len(report)})")
    theirs = official(other)
    if isinstance(theirs, str):
        print(f"\nofficial nvidia-cudnn-frontend: {theirs}")
        return
    print(f"\nofficial nvidia-cudnn-frontend {theirs['version']} (another process), side by side:")
    print(f"{'case':40s} {'official first':>14s} {'official cold':>13s} {'cudnn-py cold':>13s} {'ratio':>6s} "
          f"{'official GPU us':>15s} {'cudnn-py GPU us':>15s}")
    for name, row in theirs["cases"].items():
        mine = ours[name]
        if isinstance(row, str):
            print(f"{name:40s} failed: {row}")
            continue
        print(f"{name:40s} {row['first']:14.2f} {row['cold']:13.2f} {mine['cold']:13.2f} "
              f"{row['cold'] / mine['cold']:5.2f}x {row['gpu_us']:15.1f} {mine['gpu_us']:15.1f}")
    print("ratio: official cold build / cudnn-py cold build (above 1: cudnn-py builds faster)")


if __name__ == "__main__":
    main()
