"""Replayed executes compute what cudnnBackendExecute computes, on the stream it would use.

A pack executed twice is captured into a CUDA graph and launched from it afterwards
(`cudnn.backend.replay`). Each test counts the launches (so a replay is known to have run) and
compares with PyTorch on the same inputs, changed in place between calls: a replay reading a
stale copy, or running on another stream, would give the old result. The tests of what a
replay computes replay behind queued work too (``always=True``), so that inputs written just
before a call do not turn its replay into an execute; the default, which executes there, has a
test of its own. Tolerances: fp16 conv
as test_call_path_gpu (atol 5e-3, rtol 3e-3); cudnn.ops results are compared bit for bit with
the same op with replays off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import cudnn
from cudnn.backend import replay

pytestmark = pytest.mark.gpu
HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
TOL = {"atol": 5e-3, "rtol": 3e-3}


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The streams replays were launched on, in order (launches that declined are not listed)."""
    seen: list[int] = []
    launch = replay.Replay.launch

    def counted(self: replay.Replay, handle: int, stream: int | None = None) -> bool:
        done = launch(self, handle, stream)
        if done:
            seen.append(cudnn.get_stream(handle))
        return done

    monkeypatch.setattr(replay.Replay, "launch", counted)
    cudnn.set_execute_replay(True, always=True)
    yield seen
    cudnn.set_execute_replay(True, always=False)


def nhwc(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)


def conv_graph(x: torch.Tensor, w: torch.Tensor) -> tuple[cudnn.pygraph, Any, Any, Any, torch.Tensor, torch.Tensor]:
    """A built 3x3 conv of ``x`` by ``w`` (padding 1): the graph, its X, W, Y, an output buffer
    and a workspace."""
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty_like(torch.nn.functional.conv2d(x, w, padding=1))
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    return g, X, W, Y, y, ws


def test_pygraph_execute_replays_with_the_inputs_of_each_call(launches: list[int]) -> None:
    torch.manual_seed(0)
    x, w = nhwc(4, 32, 16, 16), nhwc(32, 32, 3, 3)
    g, X, W, Y, y, ws = conv_graph(x, w)
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream())
    pack = {X: x, W: w, Y: y}
    for _ in range(6):
        x.copy_(nhwc(4, 32, 16, 16))
        g.execute(pack, ws, handle)
        torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)
    assert len(launches) == 4  # the first two calls execute, then the pack is captured


def test_a_replay_runs_on_the_stream_the_handle_has_now(launches: list[int]) -> None:
    """Captured while the handle was bound to one stream, launched on another: the new input is
    written on that other stream behind a long sleep, so only a replay ordered after it on that
    stream reads it."""
    torch.manual_seed(1)
    x, w = nhwc(4, 32, 16, 16), nhwc(32, 32, 3, 3)
    g, X, W, Y, y, ws = conv_graph(x, w)
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, first)
    with torch.cuda.stream(first):
        for _ in range(3):
            g.execute({X: x, W: w, Y: y}, ws, handle)
    first.synchronize()
    new = nhwc(4, 32, 16, 16)
    cudnn.set_stream(handle, second)
    with torch.cuda.stream(second):
        torch.cuda._sleep(50_000_000)  # tens of ms: a replay on another stream would run first
        x.copy_(new)
        g.execute({X: x, W: w, Y: y}, ws, handle)
    second.synchronize()
    torch.testing.assert_close(y, torch.nn.functional.conv2d(new, w, padding=1), **TOL)
    assert launches == [first.cuda_stream, second.cuda_stream]


def test_by_default_a_pack_behind_queued_work_is_executed_and_replayed_once_the_stream_is_idle(
        launches: list[int]) -> None:
    """Behind a long sleep the host is ahead of the GPU: the captured pack is executed (its
    kernels follow the queued work back to back), and computes the new input written behind the
    sleep; the next BUSY_EXECUTES calls are executed without asking, and once the stream has run
    everything, the call after them replays."""
    cudnn.set_execute_replay(True, always=False)
    torch.manual_seed(3)
    x, w = nhwc(4, 32, 16, 16), nhwc(32, 32, 3, 3)
    g, X, W, Y, y, ws = conv_graph(x, w)
    handle = cudnn.create_handle()
    stream = torch.cuda.Stream()
    cudnn.set_stream(handle, stream)
    pack = {X: x, W: w, Y: y}
    with torch.cuda.stream(stream):
        for _ in range(3):  # two executes (the second captures the pack), then a replay on the idle stream
            g.execute(pack, ws, handle)
            stream.synchronize()
        assert launches == [stream.cuda_stream]
        new = nhwc(4, 32, 16, 16)
        torch.cuda._sleep(50_000_000)  # tens of ms of queued work
        x.copy_(new)
        g.execute(pack, ws, handle)
        assert launches == [stream.cuda_stream], "replayed behind queued work"
        stream.synchronize()
        torch.testing.assert_close(y, torch.nn.functional.conv2d(new, w, padding=1), **TOL)
        for _ in range(replay.BUSY_EXECUTES):
            g.execute(pack, ws, handle)
        assert launches == [stream.cuda_stream], "asked the stream again too early"
        x.copy_(nhwc(4, 32, 16, 16))
        stream.synchronize()
        g.execute(pack, ws, handle)
        stream.synchronize()
    assert launches == [stream.cuda_stream] * 2
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)


def test_a_users_cuda_graph_capture_records_a_real_execute(launches: list[int]) -> None:
    """A pack already replayed, then executed inside torch.cuda.graph: the capture succeeds and
    its replays compute with the inputs of each replay."""
    torch.manual_seed(2)
    x, w = nhwc(4, 32, 16, 16), nhwc(32, 32, 3, 3)
    g, X, W, Y, y, ws = conv_graph(x, w)
    side = torch.cuda.Stream()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, side)
    with torch.cuda.stream(side):
        for _ in range(3):
            g.execute({X: x, W: w, Y: y}, ws, handle)
    side.synchronize()
    assert len(launches) == 1
    user = torch.cuda.CUDAGraph()
    with torch.cuda.graph(user, stream=side):
        g.execute({X: x, W: w, Y: y}, ws, handle)
    assert len(launches) == 1  # declined inside the capture
    for _ in range(2):
        x.copy_(nhwc(4, 32, 16, 16))
        y.zero_()
        user.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)


def test_at_max_graphs_packs_are_executed(launches: list[int]) -> None:
    torch.manual_seed(5)
    x, w = nhwc(2, 16, 8, 8), nhwc(16, 16, 3, 3)
    g, X, W, Y, y, ws = conv_graph(x, w)
    try:
        cudnn.set_execute_replay(True, max_graphs=0)
        for _ in range(5):
            g.execute({X: x, W: w, Y: y}, ws)
        assert not launches
    finally:
        cudnn.set_execute_replay(True, max_graphs=replay.MAX_GRAPHS)
    for _ in range(2):  # room again: the next execute captures, the one after replays
        g.execute({X: x, W: w, Y: y}, ws)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)
    assert len(launches) == 1


def test_a_host_scalar_changed_in_place_is_read_at_every_execute(launches: list[int]) -> None:
    """A pass-by-value tensor given as a host tensor: never captured (a graph would keep the
    value it saw), so every execute reads its current value."""
    x = torch.randn(8, 64, device="cuda")
    g = cudnn.pygraph(io_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor_like(x)
    S = g.tensor([1, 1], [1, 1], data_type=FLOAT, is_pass_by_value=True, name="s")
    Y = g.mul(X, S).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y, s = torch.empty_like(x), torch.ones(1, 1)
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    for value in range(5):
        s.fill_(float(value))
        g.execute({X: x, S: s, Y: y}, ws)
        torch.testing.assert_close(y, x * value)
    assert not launches


def test_the_graph_wrapper_replays(launches: list[int]) -> None:
    torch.manual_seed(3)
    x, w = nhwc(4, 32, 16, 16), nhwc(32, 32, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::0", "c::1"], outputs=["c::Y"]) as graph:
        graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    for _ in range(8):
        x.copy_(nhwc(4, 32, 16, 16))
        y = graph(x, w)
        torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)
        del y  # the next output takes the block back: its pack repeats
    assert launches


def ops_steps() -> dict[str, Any]:
    """cudnn.ops calls, forward and backward, whose results are compared with replays on and off."""
    import cudnn.ops as ops

    def layer_norm(x: torch.Tensor, p: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        x = x.detach().requires_grad_()
        y = ops.layer_norm(x, [x.shape[-1]], p["w"], p["b"])
        y.float().square().sum().backward()
        return [y, x.grad]

    def attention(x: torch.Tensor, p: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        q = x.view(1, 32, 4, 64).transpose(1, 2).detach().requires_grad_()
        y = ops.scaled_dot_product_attention(q, q, q, is_causal=True)
        y.float().square().sum().backward()
        return [y, q.grad]

    def batch_norm(x: torch.Tensor, p: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        img = x.view(2, 64, 8, 8).to(memory_format=torch.channels_last)
        y = ops.batch_norm(img, p["mean"], p["var"], p["gamma"], p["beta"], training=True)
        return [y, p["mean"].clone(), p["var"].clone()]

    def conv(x: torch.Tensor, p: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        img = x.view(2, 64, 8, 8).to(memory_format=torch.channels_last)
        return [ops.conv2d_bias_act(img, p["k"], p["kb"], padding=1, act="relu")]

    return {"layer_norm": layer_norm, "attention": attention, "batch_norm": batch_norm, "conv": conv}


def run_ops(step: Any) -> list[list[torch.Tensor]]:
    """Twelve calls of ``step`` on fresh inputs in one buffer, with the same parameters each time;
    the outputs of each call, on the host."""
    torch.manual_seed(4)
    p = {"w": torch.randn(512, device="cuda", dtype=torch.bfloat16),
         "b": torch.randn(512, device="cuda", dtype=torch.bfloat16),
         "mean": torch.zeros(64, device="cuda"), "var": torch.ones(64, device="cuda"),
         "gamma": torch.randn(64, device="cuda", dtype=torch.bfloat16),
         "beta": torch.randn(64, device="cuda", dtype=torch.bfloat16),
         "k": torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last),
         "kb": torch.randn(64, device="cuda", dtype=torch.bfloat16)}
    x = torch.empty(16, 512, device="cuda", dtype=torch.bfloat16)
    out = []
    for _ in range(12):  # outputs cycle through a few blocks: each pack repeats every few calls
        x.copy_(torch.randn(16, 512, device="cuda", dtype=torch.bfloat16))
        out.append([t.cpu() for t in step(x, p)])  # kept on the host: the GPU blocks keep cycling
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("name", ["layer_norm", "attention", "batch_norm", "conv"])
def test_ops_give_the_same_bits_replayed_or_executed(name: str, launches: list[int]) -> None:
    step = ops_steps()[name]
    replayed = run_ops(step)
    assert launches, f"{name}: no execute was replayed"
    cudnn.set_execute_replay(False)
    count = len(launches)
    executed = run_ops(step)
    assert len(launches) == count
    for a, b in zip(replayed, executed):
        for u, v in zip(a, b):
            assert torch.equal(u, v), name


@pytest.mark.parametrize("name", ["layer_norm", "attention", "batch_norm", "conv"])
def test_direct_replays_give_the_execute_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``direct`` replays (the captured kernels launched one by one) write what executes write,
    bit for bit, on the ops' graphs, forward and backward; at least one pack of each op was
    read back and launched that way."""
    from cudnn._lib import kernel_launch

    step = ops_steps()[name]
    direct: list[bool] = []
    launch = kernel_launch.Launches.launch

    def counted(self: kernel_launch.Launches, stream: int) -> bool:
        done = launch(self, stream)
        direct.append(done)
        return done

    monkeypatch.setattr(kernel_launch.Launches, "launch", counted)
    cudnn.ops.CACHE.clear()  # new graphs: their packs are captured with direct on
    try:
        cudnn.set_execute_replay(True, direct=True)
        replayed = run_ops(step)
    finally:
        cudnn.set_execute_replay(True, direct=False)
    assert direct and all(direct), f"{name}: direct launches {direct}"
    cudnn.set_execute_replay(False)
    try:
        executed = run_ops(step)
    finally:
        cudnn.set_execute_replay(True)
    for a, b in zip(replayed, executed):
        for u, v in zip(a, b):
            assert torch.equal(u, v), name


def test_autotune_never_times_a_capture(monkeypatch: pytest.MonkeyPatch, launches: list[int]) -> None:
    """With warmup=0 each plan still executes REPLAY_AFTER times before its timed runs, so the
    capture (host work of milliseconds, inside the CUDA events) falls outside them: every
    timed run is a replay."""
    from cudnn._graph.build import autotune as tuning
    from cudnn._graph.run import runner as runner_module

    timing = [False]
    captured_while_timing: list[bool] = []
    real_capture, real_median = runner_module.capture, tuning._Timer.median_ms

    def capture(*args: Any) -> Any:
        captured_while_timing.append(timing[0])
        return real_capture(*args)

    def median_ms(self: Any, run: Any, repeats: int) -> float:
        timing[0] = True
        try:
            return real_median(self, run, repeats)
        finally:
            timing[0] = False

    monkeypatch.setattr(runner_module, "capture", capture)
    monkeypatch.setattr(tuning._Timer, "median_ms", median_ms)
    torch.manual_seed(4)
    x, w = nhwc(4, 32, 16, 16), nhwc(32, 32, 3, 3)
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.build_plans(cudnn.build_plan_policy.ALL)
    y = torch.empty_like(torch.nn.functional.conv2d(x, w, padding=1))
    report = g.autotune({X: x, W: w, Y: y}, warmup=0, repeats=3, progress=False)
    assert [r for r in report if r.time_ms is not None]
    assert captured_while_timing and not any(captured_while_timing)
    assert len(launches) >= 3  # a plan's timed runs were replays
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)
