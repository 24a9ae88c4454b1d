"""No hang from releasing CUDA objects: the sequence that blocked a plain execute loop for ever.

The first replay launch was cuda-bindings' first driver call, which resolves its symbols holding
a non-reentrant lock and calls ``os.getenv`` while it does. A garbage collection there ran the
finalizer of a Replay captured earlier and left in a reference cycle, and that finalizer called
``cuGraphExecDestroy`` through cuda-bindings: a nested first call, waiting for the lock its own
thread held. Each check runs in a child process with a fresh plan cache folder and Python's
default warnings (a new user's first run); the child dumps its stacks and exits if it blocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn

pytestmark = pytest.mark.gpu
SRC = Path(__file__).resolve().parents[2] / "src"
CHILD_SECONDS = 90

PRELUDE = f"""
import faulthandler, gc, os, sys, traceback
faulthandler.dump_traceback_later({CHILD_SECONDS - 30}, exit=True)
import torch
import cudnn
"""

# The opening of the reliability probe that hung before the fix (fresh plan cache, default
# warnings): two graphs on one explicit handle, a swapped-keys check, a run of refused executes
# (their exceptions and closures leave cycles with graphs whose packs were captured), then a
# long loop of one pack whose first replayed launch is cuda-bindings' first driver call. Whether
# a collection falls inside that call depends on allocation counts: this child ran through on
# the code before the fix too (2 of 2), so it guards the first-run path, not the deadlock itself;
# that finalizers make no CUDA call is tested without a GPU (tests/run/test_release.py).
FIRST_RUN = PRELUDE + """
handle = cudnn.create_handle()

def small(h=handle):
    x = torch.randn(8, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(32, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 32, 1, 1, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=h)
    X, W, B = (g.tensor(name=n, dim=list(t.shape), stride=list(t.stride()), data_type=cudnn.data_type.HALF)
               for n, t in (("X", x), ("W", w), ("B", b)))
    Y = g.relu(input=g.bias(input=g.conv_fprop(X, W, padding=[1, 1]), bias=B))
    Y.set_output(True).set_data_type(cudnn.data_type.HALF)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty(8, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    ref = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), b.reshape(-1).float(), padding=1))
    return g, (X, W, B, Y), (x, w, b, y), ws, ref

def swapped_keys():
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    A = g.tensor(name="A", dim=[4, 64, 64], stride=[4096, 64, 1], data_type=cudnn.data_type.FLOAT)
    B = g.tensor(name="B", dim=[4, 64, 64], stride=[4096, 64, 1], data_type=cudnn.data_type.FLOAT)
    Y = g.sub(a=A, b=B)
    Y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    p, q, y = (torch.randn(4, 64, 64, device="cuda") for _ in range(3))
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    g.execute({A: p, B: q, Y: y}, ws, handle=handle)
    g.execute({B: p, A: q, Y: y}, ws, handle=handle)
    torch.cuda.synchronize()
    assert (y - (q - p)).abs().max().item() < 1e-5

def refused_executes():
    g, (X, W, B, Y), (x, w, b, y), ws, ref = small()
    cases = {
        "cpu": lambda: g.execute({X: x.cpu(), W: w, B: b, Y: y}, ws, handle=handle),
        "dtype": lambda: g.execute({X: x.float(), W: w, B: b, Y: y}, ws, handle=handle),
        "small": lambda: g.execute({X: x, W: w, B: b, Y: y[:1]}, ws, handle=handle),
        "missing": lambda: g.execute({X: x, W: w, Y: y}, ws, handle=handle),
        "none": lambda: g.execute({X: None, W: w, B: b, Y: y}, ws, handle=handle),
        "key": lambda: g.execute({"nope": x, W: w, B: b, Y: y}, ws, handle=handle),
        "closed": lambda: (lambda h: (cudnn.destroy_handle(h), g.execute({X: x, W: w, B: b, Y: y}, ws, handle=h)))(
            cudnn.create_handle()),
    }
    for f in cases.values():
        try:
            f()
            torch.cuda.synchronize()
        except Exception:
            pass
    g.execute({X: x, W: w, B: b, Y: y}, ws, handle=handle)
    torch.cuda.synchronize()
    assert (y.float() - ref).abs().max().item() < 0.5

swapped_keys()
refused_executes()
g, (X, W, B, Y), (x, w, b, y), ws, ref = small()
pack = {X: x, W: w, B: b, Y: y}
for i in range(100000):
    g.execute(pack, ws, handle=handle)
    if i % 5000 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
gc.collect()
print("ok", (y.float() - ref).abs().max().item())
"""


def run_child(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "CUDNN_PY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONWARNINGS": ""}
    env.pop("CUDNN_PY_EXECUTE_REPLAY", None)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the child blocked for {CHILD_SECONDS} s:\n{exc.stderr}") from None


def check(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0 and done.stdout.startswith("ok"), (
        f"exit {done.returncode}; stdout {done.stdout[-500:]!r}\nstderr (the stacks if it blocked):\n"
        f"{done.stderr[-6000:]}")
    err = float(done.stdout.split()[1])
    assert err < 0.1, f"the replayed conv + bias + ReLU is wrong: max error {err} (fp16, |ref| ~ 10)"


def test_a_first_run_with_default_warnings_and_an_empty_plan_cache_runs_through(tmp_path: Path) -> None:
    check(run_child(FIRST_RUN, tmp_path))


def test_a_captured_conv_holds_only_kernels_and_memsets() -> None:
    """What is replayed is what the execute launches: the node types of a real capture."""
    import torch

    from cudnn._lib import cuda

    seen: list[list[int]] = []
    original = cuda.graph_node_types

    def record(graph: int) -> list[int]:
        kinds = original(graph)
        seen.append(kinds)
        return kinds

    cuda.graph_node_types = record  # type: ignore[assignment]
    try:
        x = torch.randn(4, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        w = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
        X, W = g.tensor_like(x), g.tensor_like(w)
        Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        for _ in range(4):
            g.execute({X: x, W: w, Y: y}, ws)
        torch.cuda.synchronize()
    finally:
        cuda.graph_node_types = original  # type: ignore[assignment]
    assert seen, "no pack was captured"
    assert seen[0] and set(seen[0]) <= cuda.REPLAYABLE_NODES, seen[0]
    torch.testing.assert_close(y.float(), torch.nn.functional.conv2d(x.float(), w.float(), padding=1),
                               atol=5e-2, rtol=1e-2)


def test_stream_capturing_answers_as_the_driver_does_under_a_torch_capture() -> None:
    """`cuda.stream_capturing`, which decides whether a release point may release, gives
    cuda-bindings' answer (err or status of cuStreamIsCapturing): False outside a capture, True
    for the stream torch is capturing, False again once it ended."""
    import torch
    from cuda.bindings import driver

    from cudnn._lib import cuda

    def both(stream: int) -> tuple[bool, bool]:
        err, status = driver.cuStreamIsCapturing(stream)
        return cuda.stream_capturing(stream), bool(int(err)) or bool(int(status))

    side = torch.cuda.Stream()
    seen = [both(side.cuda_stream)]
    graph = torch.cuda.CUDAGraph()
    x = torch.zeros(16, device="cuda")
    with torch.cuda.stream(side):
        graph.capture_begin()
        x.add_(1)
        seen.append(both(side.cuda_stream))
        graph.capture_end()
    seen.append(both(side.cuda_stream))
    graph.replay()
    torch.cuda.synchronize()
    assert all(ours == theirs for ours, theirs in seen), seen
    assert [ours for ours, _ in seen] == [False, True, False], seen
    assert float(x.sum()) == 16.0
