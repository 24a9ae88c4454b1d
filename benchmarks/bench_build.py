"""Build time and autotuning: cold, warm in-process, from the disk cache in a new process;
autotuned vs heuristic GPU time.

    PYTHONPATH=src python benchmarks/bench_build.py [--other SITE_DIR] [--cold-only] [--pairs N]
        [--builds N] [--per-process] [--cases TEXT] [--no-kernel-cfg]
    PYTHONPATH=src python benchmarks/bench_build.py --other SITE_DIR --interleaved [--rounds N] [--cases TEXT]
        [--plan-cache-miss]

``--cold-only`` measures the cold build and the GPU time of its plan only (no warm, disk or
autotuned columns): the side-by-side comparison with the official, in a fraction of the time,
each package measured the same way, in new processes per case: ``--pairs N`` (default 3) pairs
of processes, one of each package, the first pair cudnn-py's first, the next the official's
first, and so on; each figure is the median over a package's processes, and each ratio is given
three times: of those medians; of the best (lowest) figure of any process of each package
("best"); and as the median of the per-pair ratios (with their range).
A new process builds at one of two speeds for its whole life, about 1.4x apart, with either
package alike (seen on a virtual machine with an H200; neither pinning to one CPU nor fixing
the address layout with ``setarch -R`` avoids it). With a handful of processes, how many slow
ones each package draws decides the medians and the pair ratios; the best process of each is a
fast one as soon as each package has one (where half the processes are slow, the odds of none
among N are 2^-N), which makes "best" the ratio to read for a new process, with ``--pairs`` of
6 or more.
Compare rebuilds with ``--interleaved``, where both packages build in one process, round after
round.
``--per-process`` also prints each process's first build and rebuild median as it ends, in
the order they ran (to see the machine's drift behind a ratio).
``--cases TEXT`` keeps the cases whose name contains TEXT (for both packages);
``--no-kernel-cfg`` leaves out the KERNEL_CFG workload, ``--kernel-cfg-runs N`` runs it in N
processes per mode (default 3; modes: one thread, threads alone (the default), threads joined
by worker processes once the build proves long (``CUDNN_PY_BUILD_PROCESSES=auto``), and worker
processes from the start with ``CUDNN_PY_BUILD_PROCESSES`` set to the cores this process may use).

``--interleaved`` measures rebuilds only, both packages in one process per case: the official
imported as ``cudnn``, cudnn-py loaded beside it under another name (its imports are relative),
both on the libcudnn torch loaded (the footer names the libcudnn files mapped). After two
untimed builds of each, ``--rounds N`` (default INTERLEAVED_ROUNDS) rounds each build a fresh
graph with one package, then with the other, the order alternating between rounds; each ratio is
given of the two medians and as the median of the per-round ratios. A rebuild spends nearly all
its time in cuDNN's plan finalize, whose speed drifts between processes by more than the two
packages differ; within one process, builds a few milliseconds apart see the same machine. A
first build cannot be measured so (the first package to build a graph compiles the kernels the
other then reuses): ``--cold-only`` gives those. With ``--plan-cache-miss`` cudnn-py builds as it
does by default, its plan cache on (in a directory of its own), but emptied before each of its
builds: a build of a shape the process has not seen, which looks the graph up, misses, and
stores the plan it built (the plan's JSON is read and the file written by the cache's thread after
the build returns; the benchmark waits for that, outside the timed build, so that it does not run
during the other package's build).

Build = validate -> plans ready to execute (``pygraph.build``), timed with the GPU idle and the
graphs dropped before already released (`build_ms`). "cold" runs with the plan
cache off (heuristics and plan finalization every time; cuDNN may still reuse kernels it
compiled earlier in the process), "warm" is the same graph built again in this process,
"disk" is a fresh process reading the cache directory this one wrote. Prints medians;
never asserts on time.

The official nvidia-cudnn-frontend is also named ``cudnn``, so it is measured in a child
process whose ``sys.path`` holds it instead of this repository (``--other``: the directory it
is installed in, or found on the default path when that is not this package): the same cases,
written against the documented API both share, built from fresh graphs the same way ("cold";
it has no plan cache, so no warm or disk column), and their GPU time with its own plans. Each
case of the official runs in its own process right after cudnn-py's measurement of that case,
so that both see the machine in the same state (with ``--cold-only``, cudnn-py's figures come
from new processes per case too, so that no state a case leaves affects the next, and the
order alternates: a build is CPU-bound, and the clock a core runs at moves with the load of the
whole machine, so run nothing else beside it).

Two build times per process: "first", the first build of the case in a new process (its
kernels compiled, nothing cached: what a serving process pays for a new shape), and "rebuild",
the median of COLD_BUILDS builds of fresh graphs, the first among them (``--builds N``: N
builds), with no plan cache (cuDNN may reuse the kernels it compiled in the process).

Every process of this benchmark, this one included, runs in the same working directory (the
temp folder): NVRTC, which compiles the kernels of runtime-compiled engines, looks for each
header a kernel includes in the working directory first, so a build is slower in a folder on a
slow file system, and the two packages must not be measured in different ones.

Runtime-compiled engines hand their kernels to the CUDA driver, which keeps the machine code
it generates in a cache on disk (``CUDA_CACHE_PATH``, shared by every process of the user):
a process that builds a graph another process built before skips that step. Unless
``CUDA_CACHE_PATH`` is set, every process of this benchmark (this one, each official child,
each KERNEL_CFG child) gets a new empty cache directory of its own, so that no measurement
depends on which package ran first.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _processes import CHILD_CWD, enter_child_cwd, ours_env, own_jit_cache
from _processes import official_env as _official_env
from _timing import host_time, kernel_time

own_jit_cache("bench-build-jit-")  # see the module docstring

import torch  # noqa: E402 - after the JIT cache is chosen

import cudnn  # noqa: E402

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
    """bf16 X with fp32 scale/bias: by default the single norm operation, as the official
    frontend builds it (cudnn-py then tries the affine epilogue on its executes, see `gpu_us`);
    ``lowering="affine_epilogue"`` (cudnn-py only; the official builds its default) a unit-scale
    norm with the affine step in fused pointwise ops, a runtime-compiled kernel: faster to run,
    slower to build."""
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


def sdpa_forward(b: int, h: int, s: int, d: int, causal: bool, stats: bool = False):  # type: ignore[no-untyped-def]
    """SDPA forward, bf16 [b, h, s, d]; with ``stats`` it also writes the softmax stats a backward reads."""
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    out, st = g.sdpa(Q, K, V, attn_scale=d ** -0.5, generate_stats=stats, use_causal_mask=causal)
    out.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    o = torch.empty_like(q)
    pack = {Q: q, K: k, V: v, out: o}
    if stats:
        s_buf = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
        st.set_output(True).set_data_type(FLOAT).set_dim(list(s_buf.shape)).set_stride(list(s_buf.stride()))
        pack[st] = s_buf
    return g, pack


def sdpa_backward(b: int, h: int, s: int, d: int, causal: bool):  # type: ignore[no-untyped-def]
    """SDPA backward of [b, h, s, d]; its forward is built and run first (not timed), as a
    training step builds it, so the backward reads real O and stats."""
    fwd, fpack = sdpa_forward(b, h, s, d, causal, stats=True)
    fwd.build(HEUR)
    ws = torch.empty(max(1, fwd.get_workspace_size()), device="cuda", dtype=torch.uint8)
    fwd.execute(fpack, ws)
    q, k, v, o, stats = fpack.values()
    d_o = torch.randn_like(o)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    ins = [g.tensor_like(t) for t in (q, k, v, o, d_o, stats)]
    grads = [torch.empty_like(t) for t in (q, k, v)]
    outs = g.sdpa_backward(*ins, attn_scale=d ** -0.5, use_causal_mask=causal)
    for t, buf in zip(outs, grads):
        t.set_output(True).set_dim(list(buf.shape)).set_stride(list(buf.stride()))
    return g, dict(zip(ins, (q, k, v, o, d_o, stats))) | dict(zip(outs, grads))


def sdpa_decode(b: int, h: int, s_kv: int, d: int, block: int = 64):  # type: ignore[no-untyped-def]
    """One query token per sequence over a paged K/V cache of ``block``-token pages in a shuffled
    order (as bench_sdpa.py's decode case), bf16, inference."""
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    nblk = s_kv // block
    caches, tables = [], []
    for _ in range(2):  # K, V
        t = torch.randn(b, h, s_kv, d, device="cuda", dtype=torch.bfloat16)
        blocks = t.view(b, h, nblk, block, d).permute(0, 2, 1, 3, 4).reshape(b * nblk, h, block, d)
        perm = torch.randperm(b * nblk, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        container = torch.empty_like(blocks)
        container[perm] = blocks
        caches.append(container)
        tables.append(perm.view(b, 1, nblk, 1).to(torch.int32).contiguous())
    seq_q = torch.ones(b, 1, 1, 1, dtype=torch.int32, device="cuda")
    seq_kv = torch.full((b, 1, 1, 1), s_kv, dtype=torch.int32, device="cuda")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    bufs = [q, caches[0], caches[1], tables[0], tables[1], seq_q, seq_kv]
    Q, KC, VC, KT, VT, SQ, SKV = (g.tensor_like(t) for t in bufs)
    out, _ = g.sdpa(Q, KC, VC, is_inference=True, attn_scale=d ** -0.5, use_padding_mask=True, seq_len_q=SQ,
                    seq_len_kv=SKV, paged_attention_k_table=KT, paged_attention_v_table=VT,
                    paged_attention_max_seq_len_kv=s_kv)
    o = torch.empty_like(q)
    out.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    return g, dict(zip((Q, KC, VC, KT, VT, SQ, SKV), bufs)) | {out: o}


CASES = {
    "conv+bias+relu N32 C64 H56 K64 3x3": lambda: conv_bias_relu(32, 64, 56, 64, 3),
    "conv+bias+relu N32 C256 H14 K256 3x3": lambda: conv_bias_relu(32, 256, 14, 256, 3),
    "matmul+bias bf16 8x1024x1024x1024": lambda: matmul_bias(8, 1024, 1024, 1024),
    "layernorm bf16 16384x4096 fp32 scale/bias": lambda: layer_norm(16384, 4096),
    "  same, lowering='affine_epilogue' (opt-in)": lambda: layer_norm(16384, 4096, "affine_epilogue"),
    "sdpa bf16 causal b4 h16 s2048 d128": lambda: attention(4, 16, 2048, 128),
    # the SDPA forward, backward and decode build cases (a backward's forward is built before the timed build)
    "sdpa fwd bf16 b8 h16 s1024 d64": lambda: sdpa_forward(8, 16, 1024, 64, False),
    "sdpa bwd bf16 b8 h16 s1024 d64": lambda: sdpa_backward(8, 16, 1024, 64, False),
    "sdpa bwd bf16 causal b4 h16 s4096 d128": lambda: sdpa_backward(4, 16, 4096, 128, True),
    "sdpa fwd bf16 causal b2 h32 s8192 d128": lambda: sdpa_forward(2, 32, 8192, 128, True),
    "sdpa bwd bf16 causal b2 h32 s8192 d128": lambda: sdpa_backward(2, 32, 8192, 128, True),
    "sdpa decode bf16 b16 h32 s_kv4096 d128 paged64": lambda: sdpa_decode(16, 32, 4096, 128),
}
# cases the official has no counterpart of (it would build another graph): cudnn-py's figures alone
OURS_ONLY = {"  same, lowering='affine_epilogue' (opt-in)": "cudnn-py only: the official has no such lowering"}


def kernel_cfg_workload() -> dict:  # type: ignore[type-arg]
    """The official suite's test_conv_relu_execution_plan_creation, timed: the conv+relu graph,
    one plan per KERNEL_CFG value of every engine (create_execution_plan), then
    build_plans(ALL). Run in a fresh process per measurement (cuDNN keeps compiled kernels in a
    process); CUDNN_PY_BUILD_THREADS and CUDNN_PY_BUILD_PROCESSES of that process set how
    cudnn-py builds the plans."""
    x = torch.randn(20, 40, 30, 40, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(54, 40, 3, 4, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="X", dim=x.size(), stride=x.stride(), data_type=x.dtype)
    W = g.tensor(name="W", dim=w.size(), stride=w.stride(), data_type=w.dtype)
    conv = g.conv_fprop(image=X, weight=W, padding=[0, 1], stride=[2, 3], dilation=[1, 1])
    g.relu(name="relu", input=conv, lower_clip=0.5, upper_clip=0.55).set_output(True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.validate()
    g.build_operation_graph()
    t1 = time.perf_counter()
    for engine in range(g.get_engine_count()):
        try:
            knobs = g.get_knobs_for_engine(engine)
        except Exception:  # noqa: BLE001 - an engine without knobs here (the packages raise different classes)
            continue
        for knob in knobs:
            if knob.type == cudnn.knob_type.KERNEL_CFG:
                for value in range(knob.min_value, knob.max_value + 1, knob.stride):
                    try:
                        g.create_execution_plan(engine, {cudnn.knob_type.KERNEL_CFG: value})
                    except Exception:  # noqa: BLE001 - a knob value this engine refuses
                        continue
    workers: list[str] = []  # cudnn-py's word on worker processes (the official logs nothing there)

    class Note(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "worker process" in record.getMessage():
                workers.append(record.getMessage().split(": ", 1)[-1])

    logging.getLogger("cudnn.build").addHandler(Note(logging.INFO))
    logging.getLogger("cudnn.build").setLevel(logging.INFO)
    t2, c2 = time.perf_counter(), time.process_time()
    error = ""
    try:
        g.build_plans(cudnn.build_plan_policy.ALL)
    except Exception as exc:  # noqa: BLE001 - a package that raises when some plan fails: reported, timed
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    t3, c3 = time.perf_counter(), time.process_time()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    built = ([r.name for r in g.describe_plans().rows if r.status in ("built", "selected")]
             if hasattr(g, "describe_plans") else names)  # the official has no per-plan status
    return {"graph_ms": (t1 - t0) * 1e3, "create_ms": (t2 - t1) * 1e3, "build_ms": (t3 - t2) * 1e3,
            "build_cpu_ms": (c3 - c2) * 1e3, "plans": len(names), "built": built, "error": error,
            "workers": workers}


def kernel_cfg_in_child(setting: dict[str, str] | None, env: dict[str, str] | None = None) -> dict | str:  # type: ignore[type-arg]
    """`kernel_cfg_workload` in a fresh process: cudnn-py with the build variables of ``setting``
    (CUDNN_PY_BUILD_THREADS, CUDNN_PY_BUILD_PROCESSES; those it lacks unset), or with ``env``
    the official frontend."""
    if env is None:
        env = {k: v for k, v in ours_env().items() if k not in ("CUDNN_PY_BUILD_THREADS", "CUDNN_PY_BUILD_PROCESSES")}
        env.update(setting or {})
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--kernel-cfg-child"], env=env,
                          capture_output=True, text=True, cwd=CHILD_CWD)
    if done.returncode:
        return f"failed: {done.stderr.strip().splitlines()[-1:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


KERNEL_CFG_RUNS = 3  # fresh processes per mode, alternated


def kernel_cfg_rows(other_env: dict[str, str] | None) -> None:
    """The KERNEL_CFG workload: cudnn-py serial (threads=1, no workers) vs threads alone (the
    default) vs threads joined by worker processes once the build proves long
    (CUDNN_PY_BUILD_PROCESSES=auto) vs worker processes from the start (CUDNN_PY_BUILD_PROCESSES,
    one per core), each in fresh processes, alternated;
    the same plans must be built every way; the official beside."""
    from cudnn._graph.plans.threads import available_cores, build_threads

    cores, threads = str(available_cores()), build_threads()
    modes = {"1": ("cudnn-py, threads=1, no workers", {"CUDNN_PY_BUILD_THREADS": "1", "CUDNN_PY_BUILD_PROCESSES": "0"}),
             "threads": (f"cudnn-py, default (threads={threads}, no workers)", {}),
             "auto": ("cudnn-py, CUDNN_PY_BUILD_PROCESSES=auto", {"CUDNN_PY_BUILD_PROCESSES": "auto"}),
             "processes": (f"cudnn-py, CUDNN_PY_BUILD_PROCESSES={cores}", {"CUDNN_PY_BUILD_PROCESSES": cores})}
    runs: dict[str, list[dict]] = {m: [] for m in modes}  # type: ignore[type-arg]
    n_runs = int(sys.argv[sys.argv.index("--kernel-cfg-runs") + 1]) if "--kernel-cfg-runs" in sys.argv \
        else KERNEL_CFG_RUNS
    for _ in range(n_runs):
        for mode, (_, setting) in modes.items():
            got = kernel_cfg_in_child(setting)
            if isinstance(got, str):
                print(f"\nKERNEL_CFG workload, {mode}: {got}")
                return
            runs[mode].append(got)
    serial = runs["1"]
    assert all(r["built"] == serial[0]["built"] for rs in runs.values() for r in rs), \
        "KERNEL_CFG workload: the plans built on several threads or in worker processes differ from those built on one"
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("graph_ms", "create_ms", "build_ms")}
           for m, rs in runs.items()}
    n = len(serial[0]["built"])
    print(f"\nKERNEL_CFG workload (conv+relu of test_conv_relu_execution_plan_creation): "
          f"{serial[0]['plans']} plans, {n} built, the same names in every mode (median of {n_runs} processes each)")
    print(f"{'':42s} {'op graph ms':>11s} {'create ms':>10s} {'build_plans ms':>14s} {'total ms':>9s}")
    for m, (label, _) in modes.items():
        row = med[m]
        print(f"{label:42s} {row['graph_ms']:11.1f} {row['create_ms']:10.1f} {row['build_ms']:14.1f} "
              f"{sum(row.values()):9.1f}")
    for m in ("auto", "processes"):
        print(f"  {modes[m][0]}: " + "; ".join(dict.fromkeys(w for r in runs[m] for w in r["workers"])))
    s_tot = sum(med["1"].values())
    for m in ("threads", "auto", "processes"):
        gain = med["1"]["build_ms"] / max(med[m]["build_ms"], 1e-9)
        print(f"speed-up of '{modes[m][0]}' over threads=1: build_plans {gain:.2f}x, "
              f"total {s_tot / sum(med[m].values()):.2f}x")
    # the CPU time of the process says nothing of compiles that ran in worker processes
    busy = {m: statistics.median(r["build_cpu_ms"] / max(r["build_ms"], 1e-9) for r in runs[m])
            for m in ("1", "threads")}
    print(f"cores busy during build_plans (CPU time of the process / wall time): threads=1 {busy['1']:.1f}, "
          f"threads={threads} {busy['threads']:.1f}")
    if other_env is not None:
        theirs = kernel_cfg_in_child(None, other_env)
        if isinstance(theirs, str):
            print(f"official: {theirs}")
        else:
            t_tot = theirs["graph_ms"] + theirs["create_ms"] + theirs["build_ms"]
            print(f"{'official (one process)':42s} {theirs['graph_ms']:11.1f} {theirs['create_ms']:10.1f} "
                  f"{theirs['build_ms']:14.1f} {t_tot:9.1f}   ratio official / cudnn-py: default "
                  f"(threads alone) {t_tot / sum(med['threads'].values()):.2f}x, auto "
                  f"{t_tot / sum(med['auto'].values()):.2f}x ({theirs['plans']} plans, "
                  f"{theirs['build_cpu_ms'] / max(theirs['build_ms'], 1e-9):.1f} cores busy)"
                  + (f"; build_plans raised {theirs['error']}" if theirs.get("error") else ""))


def ms(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def build_ms(make) -> float:  # type: ignore[no-untyped-def]
    """The build of a fresh graph from ``make``, timed alone: the GPU work its inputs queued has
    finished, and so has the release of graphs dropped before. The official frontend destroys a
    graph's plans when the graph is freed, and a built official graph is part of a reference
    cycle (1.32: a traceback it keeps holds it), so it is freed by the garbage collector, whose
    pass would otherwise run inside whichever build comes next, of either package; a collection
    here frees it first. cudnn-py releases its plans at its next build, capture or handle (never
    from a finalizer) or on ``cudnn.release_pending()``, called here after the collection."""
    return ms(functools.partial(settled(make).build, HEUR))


def settled(make):  # type: ignore[no-untyped-def]
    """A fresh graph from ``make``, once the GPU work its inputs queued has finished and the
    graphs dropped before are released (see `build_ms`)."""
    g, _ = make()
    torch.cuda.synchronize()
    gc.collect()
    settle = getattr(cudnn, "release_pending", None)  # cudnn-py only
    if settle is not None:
        settle()
    return g


def gpu_us(g: cudnn.pygraph, pack: dict, calls: int = 20, repeats: int = 7) -> float:  # type: ignore[type-arg]
    """Microseconds of GPU work per execute of the built plan: executes queued back to back behind
    a GPU spin (`kernel_time`), so that neither package's host time per call enters the figure
    (behind queued work cudnn-py executes a captured pack rather than replaying it, see
    `cudnn.set_execute_replay`). A cudnn-py graph that tries another lowering (the layer norm of
    fp32 scale/bias) is first executed until its trial has decided: the plan it then runs is the
    one timed, and named (`plan_name`)."""
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)

    def run() -> None:
        g.execute(pack, ws)

    pending = getattr(g, "lowering_trial_pending", None)  # cudnn-py only
    deadline = time.perf_counter() + 60
    while pending is not None and pending() and time.perf_counter() < deadline:
        run()
        torch.cuda.synchronize()
    return kernel_time(run, calls, repeats, host_time(run, calls)) * 1e6


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


INTERLEAVED_ROUNDS = 15  # --interleaved: rounds of one fresh build per package
OURS_DIR = "BENCH_CUDNN_PY_DIR"  # --interleaved: the child loads cudnn-py from this package directory


def use(package: Any) -> None:
    """Switch every case to ``package`` (either frontend): the cases read it, and the values
    taken from it, from this module's globals ``cudnn``, ``HEUR``, ``HALF`` and ``FLOAT``."""
    global cudnn, HEUR, HALF, FLOAT
    cudnn = package
    HEUR = [package.heur_mode.A, package.heur_mode.FALLBACK]
    HALF, FLOAT = package.data_type.HALF, package.data_type.FLOAT


def load_beside(name: str, package_dir: str) -> Any:
    """The package in ``package_dir`` (cudnn-py) imported as ``name``, beside the ``cudnn`` already
    imported (the official)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(package_dir, "__init__.py"),
                                                  submodule_search_locations=[package_dir])
    if spec is None or spec.loader is None:
        raise SystemExit(f"no package in {package_dir}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def interleaved_child(rounds: int, cache_miss: bool = False) -> None:
    """In a process of its own whose ``cudnn`` is the official: per case, the rebuild times of
    both packages, alternating (see the module docstring; ``cache_miss``: ``--plan-cache-miss``);
    one JSON object on stdout."""
    packages = {"official": cudnn, "cudnn-py": load_beside("cudnn_py", os.environ[OURS_DIR])}
    cache = packages["cudnn-py"].plan_cache
    cache.enabled = cache_miss
    if cache_miss:
        cache.directory = Path(tempfile.mkdtemp(prefix="cudnn-py-bench-miss-"))

    def timed(who: str, make: Any) -> float:
        use(packages[who])
        if not (cache_miss and who == "cudnn-py"):
            return build_ms(make)
        cache.clear(disk=True)  # a shape never built: the lookup misses
        ms_taken = build_ms(make)
        cache.flush()  # the writer's work (the plan's JSON, the file) is not left to the next build
        return ms_taken

    out: dict[str, dict[str, list[float]] | str] = {}
    for name, make in CASES.items():  # the parent leaves out OURS_ONLY cases
        try:
            times: dict[str, list[float]] = {who: [] for who in packages}
            for who in packages:  # untimed: kernels compiled, plans of both made once
                timed(who, make)
                timed(who, make)
            for k in range(rounds):
                for who in list(packages)[:: 1 if k % 2 == 0 else -1]:
                    times[who].append(timed(who, make))
            out[name] = times
        except Exception as exc:  # noqa: BLE001 - reported in the table, the other cases still run
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
    print(json.dumps({"version": getattr(packages["official"], "__version__", "?"), "cases": out,
                      "libcudnn": libcudnn_mapped()}))


def libcudnn_mapped() -> list[str]:
    """The libcudnn.so files this process has mapped (one, when both packages share it)."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "/libcudnn.so" in line})


def interleaved_rows(official_env: dict[str, str], rounds: int, cache_miss: bool = False) -> None:
    """--interleaved: a new process per case (`interleaved_child`), a row per case: rebuild ms of
    each package (medians), the ratio official / cudnn-py of the medians (above 1: cudnn-py builds
    faster), and the median [lowest-highest] of the per-round ratios."""
    env = official_env | {OURS_DIR: os.path.dirname(os.path.abspath(cudnn.__file__)), "CUDNN_PY_PLAN_CACHE": "0"}
    print(f"\nrebuild ms, both packages in one process per case, {rounds} rounds of one fresh build each, "
          "the order alternating" + ("; cudnn-py's plan cache on and emptied before each of its builds (a miss)"
                                     if cache_miss else ""))
    print(f"{'case':46s} {'official':>9s} {'cudnn-py':>9s} {'ratio':>6s} {'rounds: median [range]':>23s}")
    version, libraries = "?", set()
    for name in CASES:
        if name in OURS_ONLY:
            continue
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--interleaved-child", "--case", name,
                               "--rounds", str(rounds)] + (["--plan-cache-miss"] if cache_miss else []), env=env,
                              capture_output=True, text=True, cwd=CHILD_CWD)
        if done.returncode:
            print(f"{name:46s} failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        version, row = got["version"], got["cases"][name]
        libraries.update(got["libcudnn"])
        if isinstance(row, str):
            print(f"{name:46s} failed: {row}", flush=True)
            continue
        theirs, mine = (statistics.median(row[who]) for who in ("official", "cudnn-py"))
        ratios = [t / m for t, m in zip(row["official"], row["cudnn-py"])]
        spread = f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
        print(f"{name:46s} {theirs:9.2f} {mine:9.2f} {theirs / mine:5.2f}x {spread:>23s}", flush=True)
    print(f"official: nvidia-cudnn-frontend {version}; libcudnn: {', '.join(sorted(libraries))}"
          + ("  (more than one: the packages did not share cuDNN)" if len(libraries) > 1 else ""))


def select_cases(argv: list[str]) -> None:
    """Keep the cases named by ``--cases TEXT`` (a substring of the name), or the one case
    ``--case NAME`` names exactly, in this process."""
    for flag, keep in (("--cases", lambda text, n: text in n), ("--case", lambda text, n: text == n)):
        if flag in argv:
            text = argv[argv.index(flag) + 1]
            for name in [n for n in CASES if not keep(text, n)]:
                del CASES[name]
            if not CASES:
                raise SystemExit(f"{flag} {text!r}: no case name matches")


def cold_child() -> None:
    """In a process of its own, with whichever ``cudnn`` it imports (cudnn-py with its plan cache
    off, or the official frontend): per case, the first build, the median of COLD_BUILDS builds
    of fresh graphs (the cold column) and the GPU time of the plan it picked (or why a case
    failed); one JSON object on stdout."""
    out: dict[str, dict[str, Any] | str] = {}
    for name, make in CASES.items():
        try:
            times = [build_ms(make) for _ in range(COLD_BUILDS)]
            g, pack = make()
            g.build(HEUR)
            out[name] = {"first": times[0], "cold": statistics.median(times), "gpu_us": gpu_us(g, pack),
                         "plan": plan_name(g), "order": candidate_order(g)}
        except Exception as exc:  # noqa: BLE001 - reported in the table, the other cases still run
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    print(json.dumps({"version": getattr(cudnn, "__version__", "?"), "cases": out}))


def plan_name(g: Any) -> str:
    """The name of the plan a built graph executes: cudnn-py's selected plan, else the first
    candidate's (the official builds the first candidate that finalizes; "?" if neither says)."""
    try:
        # cudnn-py: the plan its executes run, after a lowering trial too
        running = g.runner().candidate if hasattr(g, "lowering_trial_pending") else None
        if running is not None:
            return str(running.name)
        if hasattr(g, "describe_plans"):
            selected = [r.name for r in g.describe_plans().rows if r.status == "selected"]
            if selected:
                return str(selected[0])
        return str(g.get_plan_name_at_index(0))
    except Exception:  # noqa: BLE001 - a name is for the reader; the figures stand without it
        return "?"


def candidate_order(g: Any, n: int = 6) -> list[str]:
    """The first ``n`` candidate plans of a built graph, in the order its heuristics ranked them
    (cudnn-py and the official alike: ``get_plan_name_at_index``): where the two packages chose
    different plans, this shows whether their orders differ or one skipped a candidate."""
    try:
        count = int(g.get_execution_plan_count())
        return [str(g.get_plan_name_at_index(i)) for i in range(min(n, count))]
    except Exception:  # noqa: BLE001 - an order is for the reader; the figures stand without it
        return []


def official_available(other: str | None) -> str:
    """"" when the official frontend can be imported with ``--other``, else why not."""
    probe = subprocess.run([sys.executable, "-c", "import torch, cudnn, sys; "
                            "sys.exit(0 if hasattr(cudnn, '_compiled_module') else 3)"],
                           env=_official_env(other), capture_output=True, text=True, cwd=CHILD_CWD)
    if probe.returncode:
        return "not importable" if probe.returncode != 3 else "not installed (the `cudnn` found is cudnn-py)"
    return ""


def in_child(env: dict[str, str], case: str) -> tuple[str, dict | str]:  # type: ignore[type-arg]
    """The version and the figures (`cold_child`) for ``case`` of the ``cudnn`` a new process with
    ``env`` imports, or why there are none."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-child", "--case", case,
                           "--builds", str(COLD_BUILDS)], env=env, capture_output=True, text=True, cwd=CHILD_CWD)
    if done.returncode:
        return "?", f"failed: {done.stderr.strip().splitlines()[-1:]}"
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return got["version"], got["cases"][case]


def main() -> None:
    global COLD_BUILDS
    if "--builds" in sys.argv:
        COLD_BUILDS = int(sys.argv[sys.argv.index("--builds") + 1])
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    select_cases(sys.argv)
    if sys.argv[1:2] == ["--cold-child"]:
        cold_child()
        return
    if sys.argv[1:] == ["--kernel-cfg-child"]:
        print(json.dumps(kernel_cfg_workload()))
        return
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else INTERLEAVED_ROUNDS
    cache_miss = "--plan-cache-miss" in sys.argv
    if sys.argv[1:2] == ["--interleaved-child"]:
        interleaved_child(rounds, cache_miss)
        return
    other = sys.argv[sys.argv.index("--other") + 1] if "--other" in sys.argv else None
    if other:
        other = os.path.abspath(other)  # before the chdir below
    enter_child_cwd()  # this process's own builds run where every child runs (NVRTC looks up headers there)
    cold_only = "--cold-only" in sys.argv
    pairs = int(sys.argv[sys.argv.index("--pairs") + 1]) if "--pairs" in sys.argv else PAIRS
    print(f"device: {torch.cuda.get_device_name()}  cuDNN {cudnn.backend_version_string()}")
    if "--interleaved" in sys.argv:
        unavailable = official_available(other)
        if unavailable:
            raise SystemExit(f"--interleaved: official nvidia-cudnn-frontend {unavailable}")
        interleaved_rows(_official_env(other), rounds, cache_miss)
        return
    cache_dir = Path(tempfile.mkdtemp(prefix="cudnn-py-bench-"))
    cudnn.plan_cache.directory = cache_dir
    ours: dict[str, dict[str, Any]] = {}
    unavailable = official_available(other)
    theirs: dict[str, dict | str] = {}  # type: ignore[type-arg]
    version = "?"
    if cold_only:  # like the official: new processes per case, in alternating order; a row per case
        side_by_side_cold(pairs)
        read_libraries_once(None if unavailable else _official_env(other))
        for name in CASES:
            version = cold_pairs(name, pairs, None if unavailable else _official_env(other), ours, theirs,
                                 "--per-process" in sys.argv) or version
            cold_row(name, ours[name], theirs.get(name, f"official nvidia-cudnn-frontend {unavailable}"))
        print(f"official: nvidia-cudnn-frontend {version}" if not unavailable else "")
        if "--no-kernel-cfg" not in sys.argv:
            kernel_cfg_rows(None if unavailable else _official_env(other))
        return
    print(f"\n{'case':46s} {'cold ms':>8s} {'warm ms':>8s} {'disk ms':>8s} {'heur us':>8s} {'tuned us':>9s} "
          f"{'gain':>6s}")
    for name, make in CASES.items():
        cudnn.plan_cache.enabled = False
        cold = statistics.median(build_ms(make) for _ in range(COLD_BUILDS))
        cudnn.plan_cache.enabled = True
        g, pack = make()
        g.build(HEUR)  # fills the cache (memory and disk)
        warm = statistics.median(build_ms(make) for _ in range(5))
        cudnn.plan_cache.flush()  # the child reads what this process's writer thread wrote
        env = ours_env(CUDNN_PY_CACHE_DIR=str(cache_dir))
        out = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True, text=True,
                             cwd=CHILD_CWD)
        disk = json.loads(out.stdout.strip().splitlines()[-1])["ms"] if out.returncode == 0 else float("nan")
        heur = gpu_us(g, pack)
        g2, pack2 = make()
        g2.validate()
        g2.build_operation_graph()
        g2.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        report = g2.autotune(pack2, repeats=10, progress=False)
        tuned = gpu_us(g2, pack2)
        ours[name] = {"cold": cold, "gpu_us": heur}
        print(f"{name:46s} {cold:8.2f} {warm:8.3f} {disk:8.2f} {heur:8.1f} {tuned:9.1f} {heur / tuned:5.2f}x"
              f"   ({report.best.name} of {len(report)})")
        if name in OURS_ONLY:
            theirs[name] = OURS_ONLY[name]
        elif not unavailable:
            version, theirs[name] = in_child(_official_env(other), name)
    if "--no-kernel-cfg" not in sys.argv:
        kernel_cfg_rows(None if unavailable else _official_env(other))
    if unavailable:
        print(f"\nofficial nvidia-cudnn-frontend: {unavailable}")
        return
    print(f"\nofficial nvidia-cudnn-frontend {version} (the official in a new process per case, cudnn-py's first), "
          "side by side:")
    print(f"{'case':46s} {'official first':>14s} {'official cold':>13s} {'cudnn-py cold':>13s} {'ratio':>6s} "
          f"{'official GPU us':>15s} {'cudnn-py GPU us':>15s} {'GPU ratio':>9s}")
    for name, row in theirs.items():
        mine = ours[name]
        if isinstance(row, str):
            print(f"{name:46s} {row if name in OURS_ONLY else 'failed: ' + row}")
            continue
        print(f"{name:46s} {row['first']:14.2f} {row['cold']:13.2f} {mine['cold']:13.2f} "
              f"{row['cold'] / mine['cold']:5.2f}x {row['gpu_us']:15.1f} {mine['gpu_us']:15.1f} "
              f"{gpu_flag(mine['gpu_us'] / row['gpu_us'])}")
    print("ratio: official cold build / cudnn-py cold build (above 1: cudnn-py builds faster); "
          "GPU ratio: cudnn-py's chosen plan / the official's (the aim: at most 1.03)")


PAIRS = 3  # --cold-only: pairs of processes per case (one per package), alternating which goes first


def cold_pairs(name: str, pairs: int, official_env: dict[str, str] | None, ours: dict[str, dict[str, Any]],
               theirs: dict[str, Any], per_process: bool = False) -> str:
    """Measure case ``name`` in ``pairs`` pairs of new processes (`cold_child`), cudnn-py first in
    even pairs and the official first in odd ones; store the medians over each package's
    processes in ``ours`` / ``theirs`` (with the official's, the per-pair first-build and
    rebuild ratios; or why it failed); with ``per_process``, print each process's figures.
    Returns the official's version ("" if it did not run)."""
    mine = ours_env(CUDNN_PY_PLAN_CACHE="0")
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "official": []}
    if name in OURS_ONLY:
        theirs[name] = OURS_ONLY[name]
    version = ""
    for k in range(pairs):
        for who in ("ours", "official") if k % 2 == 0 else ("official", "ours"):
            if who == "ours":
                _, got = in_child(mine, name)
                if isinstance(got, str):
                    raise SystemExit(f"{name}: {got}")
                runs["ours"].append(got)
            elif official_env is not None and not isinstance(theirs.get(name), str):
                version, got = in_child(official_env, name)
                if isinstance(got, str):
                    theirs[name] = got
                else:
                    runs["official"].append(got)
            if per_process and runs[who] and len(runs[who]) == k + 1:
                print(f"  pair {k}: {who:8s} first {runs[who][-1]['first']:8.1f}  rebuild {runs[who][-1]['cold']:7.2f}",
                      flush=True)
    ours[name] = over_processes(runs["ours"])
    if runs["official"] and not isinstance(theirs.get(name), str):
        pairs_of = list(zip(runs["official"], runs["ours"]))
        theirs[name] = over_processes(runs["official"]) | {
            "first_pair_ratios": [t["first"] / m["first"] for t, m in pairs_of],
            "pair_ratios": [t["cold"] / m["cold"] for t, m in pairs_of]}
    return version


def read_libraries_once(official_env: dict[str, str] | None) -> None:
    """One untimed process of each package, building the first case: the first process on a
    machine reads cuDNN's libraries (about a gigabyte) from disk, the later ones from memory, and
    no timed process should be that first one (it doubled a first build here)."""
    name = next(iter(CASES))
    in_child(ours_env(CUDNN_PY_PLAN_CACHE="0"), name)
    if official_env is not None:
        in_child(official_env, name)


def over_processes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over a package's processes, and the best (lowest) first build
    and rebuild of any of them (``best_first``, ``best_cold``)."""
    return {key: statistics.median(r[key] for r in runs) for key in ("first", "cold", "gpu_us")} | {
        "best_first": min(r["first"] for r in runs), "best_cold": min(r["cold"] for r in runs),
        "plans": sorted({str(r.get("plan", "?")) for r in runs}), "order": runs[0].get("order", [])}


def gpu_flag(ratio: float) -> str:
    return f"{ratio:8.3f}x" + ("  (GPU time more than 3% over the official's)" if ratio > 1.03 else "")


def side_by_side_cold(pairs: int) -> None:
    """The header of --cold-only's table (`cold_row` prints each case as it is measured)."""
    print(f"\nbuild ms, cudnn-py beside the official frontend: each package in {pairs} new processes per case, "
          "the order alternating; medians over processes, and the ratio of each package's best process")
    print(f"{'case':46s} {'first: official':>15s} {'cudnn-py':>9s} {'ratio':>6s} {'best':>6s} "
          f"{'pairs: median [range]':>22s}   {'rebuild: official':>17s} {'cudnn-py':>9s} {'ratio':>6s} {'best':>6s} "
          f"{'pairs: median [range]':>22s}   {'GPU us: official':>16s} {'cudnn-py':>9s} {'ratio':>9s}", flush=True)


def cold_row(name: str, mine: dict[str, Any], row: dict[str, Any] | str) -> None:
    """One case of --cold-only: ratios official / cudnn-py (above 1: cudnn-py builds faster): of
    the medians, of the best process of each package, and per pair of processes (their median,
    lowest and highest); the GPU ratio cudnn-py / official (the aim: at most 1.03); cudnn-py's
    figures alone where the official has none.

    Where both packages spend the build in the same cuDNN finalize, the speed a new process
    happens to run at (see the module docstring) moves a process's figures by more than the
    packages differ: read the best-process ratio."""
    if isinstance(row, str):
        print(f"{name:46s} {'':15s} {mine['first']:9.1f} {'':36s}   {'':17s} {mine['cold']:9.2f} {'':36s}   "
              f"{'':16s} {mine['gpu_us']:9.1f}   ({row})", flush=True)
        return

    def spread(ratios: list[float]) -> str:
        return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"

    print(f"{name:46s} {row['first']:15.1f} {mine['first']:9.1f} {row['first'] / mine['first']:5.2f}x "
          f"{row['best_first'] / mine['best_first']:5.2f}x {spread(row['first_pair_ratios']):>22s}   "
          f"{row['cold']:17.2f} {mine['cold']:9.2f} {row['cold'] / mine['cold']:5.2f}x "
          f"{row['best_cold'] / mine['best_cold']:5.2f}x {spread(row['pair_ratios']):>22s}   "
          f"{row['gpu_us']:16.1f} {mine['gpu_us']:9.1f} {gpu_flag(mine['gpu_us'] / row['gpu_us'])}"
          + (f"  plans: official {', '.join(row['plans'])}; cudnn-py {', '.join(mine['plans'])}; candidates "
             f"in order: official {', '.join(row['order']) or '?'}; cudnn-py {', '.join(mine['order']) or '?'}"
             if row["plans"] != mine["plans"] else "  (the same plan)"), flush=True)


if __name__ == "__main__":
    main()
