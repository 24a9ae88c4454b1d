"""Host time per call of a tiny one-conv graph: cudnn.Graph against the bare pygraph.execute,
PyTorch's conv2d, and the official nvidia-cudnn-frontend when it can be imported.

The GPU queue is filled first (``torch.cuda._sleep``), so the time measured is what the host
spends issuing a call, not the GPU's. The cases take turns batch by batch, so a machine that
speeds up or slows down during the run moves them all alike: each ratio is the median over the
rounds of that round's ratio, and the times printed are medians of the batches. Asserts
nothing about time.

    PYTHONPATH=src python benchmarks/bench_call_overhead.py [--calls 200] [--batches 30]
        [--other SITE_DIR]    # a sys.path entry with another `cudnn` (the official frontend)

cudnn-py launches a pack it has executed twice from a CUDA graph it captured
(`cudnn.set_execute_replay`) when the stream has nothing left to run (the GPU waits for the
host); behind queued work, as here, it executes the pack, whose kernels then follow that work
back to back. Rows marked ``[replays always]`` replay behind queued work too (``always=True``:
the host time a replay takes), rows marked ``[replays off]`` never replay, and the bare
``cuGraphLaunch`` of the captured execute is what a replay cannot go below.

The official frontend is also named ``cudnn``; it is measured in a child process that does
not see this repository's src/ ("not installed" when it cannot be imported there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SHAPE_X, SHAPE_W = (1, 8, 8, 8), (8, 8, 3, 3)  # small enough that the host is the limit
SLEEP_CYCLES = 60_000_000  # ~30 ms of GPU spin per batch, longer than a batch takes the host


def timed(fns: dict[str, Callable[[], Any]], calls: int, batches: int) -> dict[str, list[float]]:
    """Host microseconds per call of each function, one batch of each in turn per round (the
    order rotating), while the GPU is busy with earlier work: name -> one sample per round.
    Cases named with `REPLAYS_OFF` run with cudnn-py's replays switched off for their batch,
    those named with `REPLAYS_ALWAYS` replaying behind queued work too."""
    import torch

    def batch(name: str, fn: Callable[[], Any], n: int) -> float:
        mode = (False, False) if name.endswith(REPLAYS_OFF) else (True, True) if name.endswith(REPLAYS_ALWAYS) else None
        if mode:
            switch(*mode)
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        if mode:
            switch(True, False)
        return took

    for name, fn in fns.items():
        batch(name, fn, 20)
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for round_ in range(batches):
        for name, fn in order[round_ % len(order):] + order[:round_ % len(order)]:
            torch.cuda._sleep(SLEEP_CYCLES)
            samples[name].append(batch(name, fn, calls) / calls * 1e6)
            torch.cuda.synchronize()
    return samples


def switch(replays: bool, always: bool) -> None:
    """cudnn-py's replays on or off, and whether behind queued work too (the official frontend
    has none)."""
    import cudnn

    if hasattr(cudnn, "set_execute_replay"):
        cudnn.set_execute_replay(replays, always=always)


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def ratio(samples: dict[str, list[float]], name: str, base: str) -> float:
    """The median over the rounds of ``name``'s time over ``base``'s in the same round."""
    return statistics.median(a / b for a, b in zip(samples[name], samples[base]))


def inputs() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    x = torch.randn(*SHAPE_X, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(*SHAPE_W, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    return x, w


BARE = "cudnnBackendExecute alone (one ctypes call)"
TORCH = "torch.nn.functional.conv2d"
EXECUTE = "pygraph.execute (same buffers)"
WRAPPER = "cudnn.Graph g(x, w, handle=h)"
GRAPH_LAUNCH = "cuGraphLaunch of the captured execute alone"
ALLOC = "torch.empty_strided (alone)"
REPLAYS_OFF = "  [replays off]"
REPLAYS_ALWAYS = "  [replays always]"


def conv_graph() -> tuple[Any, ...]:
    """The measured graph (a 3x3 convolution), built, and its buffers: ``(handle, g, (X, W, Y),
    (x, w), pack, ws)``; the pack binds a new output tensor."""
    import torch

    import cudnn

    x, w = inputs()
    handle = cudnn.create_handle()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), dtype=torch.float16, device=x.device)
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=x.device)
    return handle, g, (X, W, Y), (x, w), {X: x, W: w, Y: y}, ws


def measure_ours(calls: int, batches: int) -> dict[str, list[float]]:
    import torch

    import cudnn
    from cudnn._lib import cuda

    handle, g, (X, W, Y), (x, w), pack, ws = conv_graph()
    runner = g.runner()
    entry = runner.prepare(pack, ws)
    for _ in range(3):  # the pack is captured for replay after its second execute
        g.execute(pack, ws, handle)
    execute, h, plan_ptr, pack_ptr = bare_execute(), int(handle), runner.plan_ptr, entry.pack_ptr
    launch_graph, stream = cuda.graph_calls()[0], cudnn.get_stream(handle)
    executable = entry.replay.executable if entry.replay else None

    with cudnn.Graph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT,
                     inputs=["c::image", "c::weight"], outputs=["c::Y"]) as graph:
        graph.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="c").set_output(True)
    torch.testing.assert_close(graph(x, w), torch.nn.functional.conv2d(x, w, padding=1), atol=5e-3, rtol=3e-3)
    feed = {"c::image": x, "c::weight": w}
    fresh = itertools.cycle([inputs()[0] for _ in range(16)])  # the Runner checks each object once
    dims, strides = Y.get_dim(), Y.get_stride()
    cases: dict[str, Callable[[], Any]] = {
        BARE: lambda: execute(h, plan_ptr, pack_ptr),
        TORCH: lambda: torch.nn.functional.conv2d(x, w, padding=1),
        ALLOC: lambda: torch.empty_strided(dims, strides, dtype=torch.float16, device=x.device),
        EXECUTE: lambda: g.execute(pack, ws, handle),
        EXECUTE + REPLAYS_ALWAYS: lambda: g.execute(pack, ws, handle),
        EXECUTE + REPLAYS_OFF: lambda: g.execute(pack, ws, handle),
        "pygraph.execute (new output each call)": lambda: g.execute(
            {X: x, W: w, Y: torch.empty_strided(dims, strides, dtype=torch.float16, device=x.device)}, ws, handle),
        WRAPPER: lambda: graph(x, w, handle=handle),
        WRAPPER + REPLAYS_ALWAYS: lambda: graph(x, w, handle=handle),
        WRAPPER + REPLAYS_OFF: lambda: graph(x, w, handle=handle),
        "cudnn.Graph g(x, w)  [default handle, torch stream]": lambda: graph(x, w),
        "cudnn.Graph g({...}, handle=h)  [dict]": lambda: graph(dict(feed), handle=handle),
        "cudnn.Graph g(x_i, w, handle=h)  [16 inputs in turn]": lambda: graph(next(fresh), w, handle=handle),
    }
    if executable:
        cases[GRAPH_LAUNCH] = lambda: launch_graph(executable, stream)
    results = timed(cases, calls, batches)
    torch.cuda.synchronize()
    cudnn.destroy_handle(handle)
    return results


def bare_execute() -> Any:
    """``cudnnBackendExecute`` as a plain ctypes user binds it: argtypes of three pointers, an
    int status, called with Python ints."""
    import ctypes

    from cudnn._lib import loader

    fn = loader.lib()["cudnnBackendExecute"]  # a function object of its own (not the one cudnn-py uses)
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3
    return fn


def breakdown(calls: int, batches: int) -> dict[str, list[float]]:
    """Host microseconds of the pieces of a call (this checkout's cudnn): the bare call bound
    otherwise, the identity key, the handle and the output allocation apart."""
    import ctypes
    import functools

    import torch

    import cudnn
    from cudnn._graph.run.packs import identity_key, torch_key
    from cudnn._lib import loader

    handle, g, (_, _, Y), (x, w), pack, ws = conv_graph()
    dims, strides = tuple(Y.get_dim()), tuple(Y.get_stride())
    runner = g.runner()
    g.execute(pack, ws, handle)
    entry = runner.prepare(pack, ws)
    h, plan_ptr, pack_ptr = int(handle), runner.plan_ptr, entry.pack_ptr
    hv, pv, kv = ctypes.c_void_p(h), ctypes.c_void_p(plan_ptr), ctypes.c_void_p(pack_ptr)
    typed = bare_execute()
    untyped = loader.lib()["cudnnBackendExecute"]
    untyped.restype = ctypes.c_int
    dp = torch.Tensor.data_ptr
    key_of = torch_key(len(pack))
    last = key_of(pack, ws, dp)
    dev = torch.device("cuda", x.device.index)
    with cudnn.Graph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT,
                     inputs=["c::image", "c::weight"], outputs=["c::Y"]) as graph:
        graph.conv_fprop(image=x, weight=w, padding=[1, 1], name="c").set_output(True)
    graph(x, w, handle=handle)
    pieces: dict[str, Callable[[], Any]] = {
        "bare: argtypes, int arguments": lambda: typed(h, plan_ptr, pack_ptr),
        "bare: no argtypes, prebuilt c_void_p": lambda: untyped(hv, pv, kv),
        "runner.execute(entry, handle)": lambda: runner.execute(entry, handle),
        "runner.run(pack, ws, handle)": lambda: runner.run(pack, ws, handle),
        "g.execute(pack, ws, handle)": lambda: g.execute(pack, ws, handle),
        "graph(x, w, handle=h)": lambda: graph(x, w, handle=handle),
        "host only: a lambda doing nothing": lambda: None,
        "host only: identity_key (a loop)": lambda: identity_key(pack, ws, torch.Tensor),
        "host only: torch_key(3) (straight-line)": lambda: key_of(pack, ws, dp),
        "host only: torch_key(3) == the latest key": lambda: key_of(pack, ws, dp) == last,
        "host only: x.data_ptr()": lambda: x.data_ptr(),
        "host only: g.runner()": g.runner,
        "alloc: partial(torch.empty_strided, keywords)": functools.partial(
            torch.empty_strided, dims, strides, dtype=torch.float16, device=dev),
        "alloc: torch.empty_strided(keywords) in a lambda": lambda: torch.empty_strided(
            dims, strides, dtype=torch.float16, device=dev),
        "alloc: partial(empty.new_empty_strided)": functools.partial(
            torch.empty(0, dtype=torch.float16, device=dev).new_empty_strided, dims, strides),
    }
    results = timed(pieces, calls, batches)
    torch.cuda.synchronize()
    cudnn.destroy_handle(handle)
    return results


def measure_official(calls: int, batches: int) -> dict[str, float]:
    """In the child process: the same graph through nvidia-cudnn-frontend."""
    import torch

    import cudnn

    x, w = inputs()
    handle = cudnn.create_handle()
    cases: dict[str, Callable[[], Any]] = {}
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), dtype=torch.float16, device=x.device)
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=x.device)
    pack = {X: x, W: w, Y: y}
    cases["official pygraph.execute"] = lambda: g.execute(pack, ws, handle=handle)
    if hasattr(cudnn, "Graph"):
        with cudnn.Graph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT,
                         inputs=["c::image", "c::weight"], outputs=["c::Y"]) as graph:
            graph.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1],
                             name="c").set_output(True)
        cases["official cudnn.Graph g(x, w, handle=h)"] = lambda: graph(x, w, handle=handle)
    results = {name: median(samples) for name, samples in timed(cases, calls, batches).items()}
    torch.cuda.synchronize()
    cudnn.destroy_handle(handle)
    return results


def official_in_child(calls: int, batches: int, other: str | None) -> dict[str, float] | str:
    """Run this script as a child that cannot see this repo's cudnn; its results, or why not."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = os.path.join(os.path.dirname(here), "src")
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != ours]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(([other] if other else []) + path)}
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--calls", str(calls), "--batches", str(batches)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=600)
    last = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode == 0 and last[0].startswith("{"):
        return json.loads(last[0])
    return last[0] if last[0].startswith("not installed") else f"failed: {done.stderr.strip()[-300:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per batch (the GPU queue holds them)")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--other", help="a sys.path entry holding another cudnn (e.g. the official frontend)")
    parser.add_argument("--no-other", action="store_true", help="skip the child process of the official frontend")
    parser.add_argument("--breakdown", action="store_true", help="also time the pieces of a call")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ours = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != ours]
        try:
            import cudnn

            if not hasattr(cudnn, "_compiled_module"):
                raise ImportError(f"{cudnn.__file__} is not nvidia-cudnn-frontend")
        except ImportError as exc:
            print(f"not installed ({exc})")
            return
        print(json.dumps(measure_official(args.calls, args.batches)))
        return

    import torch

    import cudnn

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn-py {cudnn.__version__}, "
          f"libcudnn {cudnn.backend_version_string()}; {args.batches} batches of {args.calls} calls, median")
    results = measure_ours(args.calls, args.batches)
    official = "skipped (--no-other)" if args.no_other else official_in_child(args.calls, args.batches, args.other)
    print(f"\n{'':56s} {'us/call':>8s} {'vs torch':>9s} {'vs bare':>8s}")
    for name, samples in results.items():
        print(f"{name:56s} {median(samples):8.2f} {ratio(results, name, TORCH):8.2f}x "
              f"{ratio(results, name, BARE):7.2f}x")
    if isinstance(official, dict):  # another process: compared by medians
        torch_us = median(results[TORCH])
        for name, us in official.items():
            print(f"{name:56s} {us:8.2f} {us / torch_us:8.2f}x {us / median(results[BARE]):7.2f}x  (other process)")
    else:
        print(f"{'nvidia-cudnn-frontend':56s} {official}")
    bare_us, execute_us, wrapper_us = median(results[BARE]), median(results[EXECUTE]), median(results[WRAPPER])
    floor = statistics.median((b + a) / b for b, a in zip(results[BARE], results[ALLOC]))
    print(f"\npygraph.execute: {ratio(results, EXECUTE, BARE):.2f}x the bare cudnnBackendExecute "
          f"({execute_us - bare_us:.2f} us of Python per call)")
    print(f"cudnn.Graph: {ratio(results, WRAPPER, BARE):.2f}x the bare call; the floor (a cudnnBackendExecute + a "
          f"torch.empty_strided) is {floor:.2f}x, so the wrapper's own Python costs "
          f"{wrapper_us - bare_us - median(results[ALLOC]):.2f} us")
    if isinstance(official, dict) and "official cudnn.Graph g(x, w, handle=h)" in official:
        theirs = official["official cudnn.Graph g(x, w, handle=h)"]
        print(f"official cudnn.Graph: {theirs:.2f} us per call; cudnn-py takes {wrapper_us / theirs:.2f}x its time")
    if args.breakdown:
        pieces = breakdown(args.calls, args.batches)
        base = "bare: argtypes, int arguments"
        print(f"\n{'pieces of a call':56s} {'us/call':>8s} {'vs bare':>8s}")
        for name, samples in pieces.items():
            print(f"{name:56s} {median(samples):8.2f} {ratio(pieces, name, base):7.2f}x")


if __name__ == "__main__":
    main()
