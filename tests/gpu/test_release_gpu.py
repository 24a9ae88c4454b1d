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

def conv_graph():
    x = torch.randn(8, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(32, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 32, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    ref = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), padding=1) + b.float())
    return g, {{X: x, W: w, B: b, Y: y}}, ws, y, ref
"""

# A collection inside cuda-bindings' symbol resolution, made certain: the first read of the
# environment made from a C call of cudnn-py's replay or CUDA module (cuda-bindings resolves its
# symbols at its first driver call, reading os.getenv under its lock) collects, with a captured
# pack's graph in a reference cycle and the collector off until then, so nothing frees it earlier.
NESTED_FIRST_CALL = PRELUDE + """
gc.disable()
g0, pack0, ws0, _, _ = conv_graph()
for _ in range(3):
    g0.execute(pack0, ws0)                  # the third execute is a capture: a Replay
cycle = [g0, pack0, ws0]
cycle.append(cycle)
del g0, pack0, ws0, cycle                  # reachable only through the cycle now
g1, pack1, ws1, y1, ref1 = conv_graph()
for _ in range(3):
    g1.execute(pack1, ws1)
armed = [True]
def read_from_a_c_call():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back               # os.getenv and Mapping.get
    name = frame.f_code.co_filename.replace(os.sep, "/") if frame is not None else ""
    return name.endswith(("cudnn/backend/replay.py", "cudnn/_lib/cuda.py"))
class CollectingEnviron(type(os.environ)):
    def __getitem__(self, key):
        if armed[0] and read_from_a_c_call():
            armed[0] = False
            traceback.print_stack(limit=6)   # where: inside cuda-bindings' first driver call
            gc.collect()                     # the dead Replay's finalizer runs here
        return super().__getitem__(key)
plain = type(os.environ)
os.environ.__class__ = CollectingEnviron   # what os.getenv reads, however it is bound
gc.enable()
for _ in range(5):
    g1.execute(pack1, ws1)                  # replays
torch.cuda.synchronize()
os.environ.__class__ = plain
print("collected inside a call" if not armed[0] else "nothing read the environment", file=sys.stderr)
gc.collect()
getattr(cudnn, "release_pending", lambda: 0)()
err = (y1.float() - ref1).abs().max().item()
print("ok", err)
"""

# The reliability probe's opening, as a new user meets it: mismatched buffers (a warning), a
# refused execute, then a long loop of one pack; default warnings, an empty plan cache.
FIRST_RUN = PRELUDE + """
g, pack, ws, y, ref = conv_graph()
X, W, B, Y = list(pack)
x, w, b = pack[X], pack[W], pack[B]
g.execute({X: torch.empty(x.numel() * 2, device="cuda", dtype=torch.float16), W: w, B: b, Y: y}, ws)
try:
    g.execute({X: x.cpu(), W: w, B: b, Y: y}, ws)
except cudnn.ExecutionInputError:
    pass
for round in range(3):
    g2, pack2, ws2, _, _ = conv_graph()
    for _ in range(3):
        g2.execute(pack2, ws2)
    del g2, pack2, ws2
for i in range(20000):
    g.execute(pack, ws)
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


def test_a_replay_collected_inside_cuda_bindings_first_call_does_not_block(tmp_path: Path) -> None:
    check(run_child(NESTED_FIRST_CALL, tmp_path))


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
