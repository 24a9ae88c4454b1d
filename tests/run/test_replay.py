"""Which executes a Runner replays from a captured CUDA graph, and which it executes.

No GPU here: packs, executes and captures are recorded by the fake backend, so each test sees
whether a call reached ``cudnnBackendExecute`` or a replay, and with which binding. The GPU
tests (tests/run/test_replay_gpu.py) check that replays compute what executes compute.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support.fake_backend import Backend
from support.fake_backend import sub_graph as fake_graph

import cudnn
from cudnn._graph.build.pipeline import all_tensors, assign_uids
from cudnn._graph.run.runner import REPLAY_AFTER
from cudnn.backend import replay

_addresses = itertools.count(0x7D0000000000, 0x10000)


class DeviceArray:
    """A float32 device buffer as the CUDA array interface describes one (never dereferenced)."""

    def __init__(self, shape: tuple[int, ...] = (4, 4)) -> None:
        self.ptr, self.shape = next(_addresses), shape

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": "<f4", "strides": None, "version": 3}


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Backend:
    b = Backend()
    b.install(monkeypatch)
    b.captures = True
    return b


def binding(*pairs: tuple[cudnn.tensor, DeviceArray]) -> dict[int, int]:
    return {t.get_uid(): a.ptr for t, a in pairs}


def one_pack(backend: Backend) -> tuple[Callable[[int], None], dict[int, int]]:
    """``run(n)``: n executes of C = A - B on the same three buffers; and their binding."""
    g, A, B, C = fake_graph((4, 4))
    runner = backend.runner(g)
    a, b, c = DeviceArray(), DeviceArray(), DeviceArray()

    def run(n: int) -> None:
        for _ in range(n):
            runner.run({A: a, B: b, C: c}, None, 1)

    return run, binding((A, a), (B, b), (C, c))


def test_a_pack_is_captured_after_it_ran_and_replayed_from_then_on(backend: Backend) -> None:
    run, bound = one_pack(backend)
    run(REPLAY_AFTER + 3)
    assert backend.executed == [bound] * REPLAY_AFTER
    assert backend.captured == [bound]
    assert backend.replayed == [bound] * 3


def test_swapped_keys_after_a_capture_replay_their_own_binding(backend: Backend) -> None:
    """The replay belongs to one pack: the same buffers under swapped keys are another pack,
    executed (and captured) on its own."""
    g, A, B, C = fake_graph((4, 4))
    runner = backend.runner(g)
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    for _ in range(REPLAY_AFTER + 1):
        runner.run({A: p, B: q, C: c}, None, 1)
    runner.run({B: p, A: q, C: c}, None, 1)
    runner.run({A: p, B: q, C: c}, None, 1)
    first, swapped = binding((A, p), (B, q), (C, c)), binding((A, q), (B, p), (C, c))
    assert backend.executed == [first] * REPLAY_AFTER + [swapped]
    assert backend.replayed == [first, first]


def test_a_launch_that_declines_falls_back_to_an_execute(backend: Backend) -> None:
    """A replay that does not launch (the stream is being captured, or its launch failed) leaves
    the call to cudnnBackendExecute."""
    run, _ = one_pack(backend)
    run(REPLAY_AFTER)
    backend.launches = False
    run(1)
    assert len(backend.executed) == REPLAY_AFTER + 1 and not backend.replayed
    assert len(backend.captured) == 1  # declining is not a reason to capture again


def test_a_plan_that_cannot_be_captured_is_not_tried_again(backend: Backend) -> None:
    run, _ = one_pack(backend)
    backend.captures = False
    run(REPLAY_AFTER + 4)
    assert len(backend.executed) == REPLAY_AFTER + 4 and len(backend.captured) == 1


def test_not_now_is_asked_again_at_the_next_execute(backend: Backend) -> None:
    """None ("not now": replays off, or the user's stream is being captured) is retried."""
    run, _ = one_pack(backend)
    backend.captures = None
    run(REPLAY_AFTER + 1)
    backend.captures = True
    run(2)
    assert len(backend.captured) == 3 and len(backend.executed) == REPLAY_AFTER + 2
    assert len(backend.replayed) == 1


def test_raw_pointer_packs_are_replayed_too(backend: Backend) -> None:
    g, A, B, C = fake_graph((4, 4))
    runner = backend.runner(g)
    uids = (A.get_uid(), B.get_uid(), C.get_uid())
    for _ in range(REPLAY_AFTER + 2):
        runner.run_pointers(uids, (0x1000, 0x2000, 0x3000), 0, 1)
    runner.run_pointers(uids, (0x5000, 0x2000, 0x3000), 0, 1)  # another pack: executed
    bound = dict(zip(uids, (0x1000, 0x2000, 0x3000)))
    assert backend.executed == [bound] * REPLAY_AFTER + [dict(zip(uids, (0x5000, 0x2000, 0x3000)))]
    assert backend.captured == [bound] and backend.replayed == [bound] * 2


def test_a_stream_the_caller_knows_reaches_the_replay(backend: Backend) -> None:
    """run_pointers' stream (cudnn.ops gives the one it has just set on the handle) goes to the
    replay's launch as it is; an execute through run() gives none, and the replay asks cuDNN."""
    g, A, B, C = fake_graph((4, 4))
    runner = backend.runner(g)
    uids = (A.get_uid(), B.get_uid(), C.get_uid())
    for _ in range(REPLAY_AFTER + 2):
        runner.run_pointers(uids, (0x1000, 0x2000, 0x3000), 0, 1, 0x77)
    run, _ = one_pack(backend)
    run(REPLAY_AFTER + 1)
    assert backend.launch_streams == [0x77, 0x77, None]


def scaled_graph() -> tuple[cudnn.pygraph, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    """C = A * s with s a float32 scalar passed by value."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A = g.tensor([4, 4], name="A")
    s = g.tensor([1, 1], name="s", is_pass_by_value=True)
    C = g.mul(A, s, name="scale").set_output(True)
    g.validate()
    assign_uids(all_tensors(g.nodes))
    return g, A, s, C


def test_a_host_buffer_passed_by_value_is_never_captured(backend: Backend) -> None:
    """A graph would keep the value it read at the capture; the host buffer may change."""
    g, A, s, C = scaled_graph()
    runner = backend.runner(g)
    a, c, host = DeviceArray(), DeviceArray(), np.ones((1, 1), np.float32)
    for _ in range(REPLAY_AFTER + 2):
        runner.run({A: a, s: host, C: c}, None, 1)
    assert len(backend.executed) == REPLAY_AFTER + 2 and not backend.captured
    uids = (A.get_uid(), s.get_uid(), C.get_uid())
    for _ in range(REPLAY_AFTER + 2):
        runner.run_pointers(uids, (a.ptr, host.ctypes.data, c.ptr), 0, 1)
    assert not backend.captured and not backend.replayed


def test_a_python_number_passed_by_value_is_part_of_the_pack(backend: Backend) -> None:
    """A number is copied into the pack's own host scalar: each value is its own pack, and each
    of them may be captured."""
    g, A, s, C = scaled_graph()
    runner = backend.runner(g)
    a, c = DeviceArray(), DeviceArray()
    for value in (2.0, 2.0, 2.0, 3.0):
        runner.run({A: a, s: value, C: c}, None, 1)
    assert len(backend.captured) == 1 and len(backend.replayed) == 1 and len(backend.executed) == 3


def test_replays_can_be_switched_off_and_on() -> None:
    assert replay.execute_replay()
    try:
        cudnn.set_execute_replay(False)
        assert not cudnn.execute_replay()
        assert replay.capture(1, 2, 3, None) is None  # "not now", asked again later; no CUDA call made
    finally:
        cudnn.set_execute_replay(True)
    assert replay.Replay(0).launch(1) is False  # a graph that failed to launch: executes from then on
    with pytest.raises(TypeError, match="set_execute_replay: expected True or False, got 'off'"):
        cudnn.set_execute_replay("off")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_graphs: expected an int >= 0, got -1"):
        cudnn.set_execute_replay(True, max_graphs=-1)
    with pytest.raises(TypeError, match="always: expected True or False, got 1"):
        cudnn.set_execute_replay(True, always=1)  # type: ignore[arg-type]


class _Driver:
    """cuGraphLaunch, cuStreamIsCapturing and cuStreamQuery as a replay's launch calls them,
    recording the calls; ``queued``: the streams with work left to run."""

    def __init__(self, queued: set[int], capturing: frozenset[int] = frozenset()) -> None:
        self.queued, self.capturing = queued, capturing
        self.calls: list[tuple[Any, ...]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(replay, "_launch_graph", lambda executable, stream: self.calls.append(
            ("launch", executable, stream)) or (0,))
        monkeypatch.setattr(replay, "_is_capturing", lambda stream: (0, int(stream in self.capturing)))
        monkeypatch.setattr(replay, "_stream_busy", lambda stream: self.calls.append(("query", stream)) or (
            600 if stream in self.queued else 0,))  # CUDA_ERROR_NOT_READY / CUDA_SUCCESS


@pytest.mark.parametrize("stream", [0, 7])
def test_a_replay_launches_when_its_stream_has_nothing_left_to_run(monkeypatch: pytest.MonkeyPatch,
                                                                   stream: int) -> None:
    driver = _Driver(queued={9})
    driver.install(monkeypatch)
    assert replay.Replay(0xE1).launch(1, stream) is True
    assert driver.calls == [("query", stream), ("launch", 0xE1, stream)]


def test_behind_queued_work_a_replay_declines_and_the_pack_is_executed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host is ahead of the GPU there: the execute's kernels follow the queued work back to
    back, where a graph launch would cost the GPU more; the replay stays for later calls."""
    driver = _Driver(queued={7})
    driver.install(monkeypatch)
    r = replay.Replay(0xE2)
    assert r.launch(1, 7) is False
    assert driver.calls == [("query", 7)] and r.executable == 0xE2
    driver.queued.clear()
    for _ in range(replay.BUSY_EXECUTES):
        assert r.launch(1, 7) is False
    assert r.launch(1, 7) is True
    assert driver.calls == [("query", 7), ("query", 7), ("launch", 0xE2, 7)]


def test_after_a_busy_stream_the_next_calls_are_executed_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking costs host time while the host is ahead: once the stream is found busy, the next
    BUSY_EXECUTES launches decline before any driver call (not even the capture check, which an
    execute does not need), then the stream is asked again; each Replay counts its own."""
    driver = _Driver(queued={7})
    driver.install(monkeypatch)
    r, other = replay.Replay(0xE7), replay.Replay(0xE8)
    calls = [r.launch(1, 7) for _ in range(2 * (replay.BUSY_EXECUTES + 1) + 1)]
    assert calls == [False] * len(calls)
    assert driver.calls == [("query", 7)] * 3  # the first call, and after each run of unasked calls
    driver.calls.clear()
    driver.queued.clear()
    assert other.launch(1, 7) is True
    assert driver.calls == [("query", 7), ("launch", 0xE8, 7)]


def test_always_replays_behind_queued_work_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = _Driver(queued={7})
    driver.install(monkeypatch)
    try:
        cudnn.set_execute_replay(True, always=True)
        assert replay.Replay(0xE3).launch(1, 7) is True
        assert driver.calls == [("launch", 0xE3, 7)]
        cudnn.set_execute_replay(True)  # always=None keeps the setting
        assert replay.Replay(0xE4).launch(1, 7) is True
    finally:
        cudnn.set_execute_replay(True, always=False)
    assert replay.Replay(0xE5).launch(1, 7) is False


def test_a_stream_being_captured_is_never_queried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Querying a capturing stream would invalidate the user's capture: the capture check comes
    first, and the pack is executed (recorded into the capture)."""
    driver = _Driver(queued=set(), capturing=frozenset({7}))
    driver.install(monkeypatch)
    assert replay.Replay(0xE6).launch(1, 7) is False
    assert driver.calls == []


def test_no_capture_beyond_max_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each captured execute holds device memory: at the bound, packs are executed ("not now",
    asked again once some are freed), before anything is asked of CUDA or cuDNN."""
    asked: list[int] = []
    monkeypatch.setattr(replay.capi, "get_log_callback", lambda: asked.append(0) or (0, 0, 0))
    try:
        cudnn.set_execute_replay(True, max_graphs=0)
        assert replay.capture(1, 2, 3, None) is None and not asked
    finally:
        cudnn.set_execute_replay(True, max_graphs=replay.MAX_GRAPHS)


@pytest.mark.parametrize(("value", "expected", "always"), [
    ("0", False, False), ("off", False, False), ("1", True, False), ("", True, False), ("always", True, True),
    (" Always ", True, True)])
def test_the_environment_sets_the_start_value(value: str, expected: bool, always: bool) -> None:
    code = "import cudnn; from cudnn.backend import replay; print(cudnn.execute_replay(), replay._always[0])"
    env = {**os.environ, "CUDNN_PY_EXECUTE_REPLAY": value}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(expected), str(always)]


@pytest.mark.parametrize(("mask", "asks_the_stream"), [
    (replay.capi.SEV_FATAL_EN | replay.capi.SEV_ERROR_EN, True),
    (replay.capi.SEV_FATAL_EN | replay.capi.SEV_ERROR_EN | replay.capi.SEV_WARNING_EN, False),
    (0xF, False)])
def test_no_capture_while_cudnns_log_callback_takes_more_than_errors(
        monkeypatch: pytest.MonkeyPatch, mask: int, asks_the_stream: bool) -> None:
    """The callback takes the GIL, which a capture holds: with warnings or info flowing, a
    capture is "not now" before anything else is asked of CUDA or cuDNN."""
    asked: list[int] = []
    monkeypatch.setattr(replay.capi, "get_log_callback", lambda: (0, mask, 0x1234))
    monkeypatch.setattr(replay.marshal, "handle_stream", lambda h: asked.append(h) or -1)
    monkeypatch.setattr(replay.cuda, "graph_calls", lambda: (None, None, None))
    assert replay.capture(1, 2, 3, None) is None
    assert asked == ([3] if asks_the_stream else [])


def test_a_plan_whose_replay_is_known_to_differ_is_always_executed(backend: Backend) -> None:
    """A Runner told its engine's captured execute writes other bits (Node.replayable) never
    captures a pack, whether bound by objects or by raw pointers."""
    g, A, B, C = fake_graph((4, 4))
    runner = backend.runner(g)
    runner.replays = False
    a, b, c = DeviceArray(), DeviceArray(), DeviceArray()
    for _ in range(REPLAY_AFTER + 3):
        runner.run({A: a, B: b, C: c}, None, 1)
        runner.run_pointers((A.get_uid(), B.get_uid(), C.get_uid()), (a.ptr, b.ptr, c.ptr + 0x100), 0, 1)
    assert backend.captured == [] and backend.replayed == []
    assert len(backend.executed) == 2 * (REPLAY_AFTER + 3)


def test_instance_norm_backward_is_not_replayed_and_the_other_norms_are() -> None:
    """Instance norm's backward engine, captured, wrote other bits than its execute (H100,
    cuDNN 9.19): graphs holding it are executed every time."""
    kinds = {}
    for op in ("instancenorm_backward", "layernorm_backward", "batchnorm_backward"):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
        dims, stats = [2, 4, 3, 3], [2, 4, 1, 1] if op == "instancenorm_backward" else [2, 1, 1, 1]
        if op == "batchnorm_backward":
            stats = [1, 4, 1, 1]
        dy, x = g.tensor(dims, name="dy"), g.tensor(dims, name="x")
        scale = g.tensor([1, 4, 1, 1] if op != "layernorm_backward" else [1, 4, 3, 3], name="scale")
        mean = g.tensor(stats, name="mean", data_type=cudnn.data_type.FLOAT)
        inv = g.tensor(stats, name="inv", data_type=cudnn.data_type.FLOAT)
        getattr(g, op)(dy, x, scale, mean, inv)
        kinds[op] = [node.replayable for node in g.nodes]
    assert kinds == {"instancenorm_backward": [False], "layernorm_backward": [True], "batchnorm_backward": [True]}


# -- direct replays: the captured kernels launched one by one (cudnn._lib.kernel_launch) -----------

class _Kernels:
    """Stands in for kernel_launch.Launches: records the streams it was launched on."""

    def __init__(self, works: bool = True) -> None:
        self.works, self.streams = works, []  # type: ignore[var-annotated]

    def launch(self, stream: int) -> bool:
        self.streams.append(stream)
        return self.works


def test_direct_replays_launch_the_kernels_idle_or_busy_and_never_into_a_capture(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``direct``, a pack whose kernels were read back launches them on the stream whether
    or not work is queued there (no query: they follow it as the execute's launches would); a
    stream being captured gets an execute; without ``direct`` the graph launches as before."""
    driver = _Driver(queued={7}, capturing=frozenset({9}))
    driver.install(monkeypatch)
    kernels = _Kernels()
    r = replay.Replay(0xF1, kernels)  # type: ignore[arg-type]
    try:
        cudnn.set_execute_replay(True, direct=True)
        assert r.launch(1, 7) is True and r.launch(1, 3) is True
        assert kernels.streams == [7, 3] and driver.calls == []
        assert r.launch(1, 9) is False and kernels.streams == [7, 3]  # captured: executed into the capture
        assert replay.Replay(0xF2).launch(1, 3) is True  # nothing read back: the graph
        assert driver.calls == [("query", 3), ("launch", 0xF2, 3)]
    finally:
        cudnn.set_execute_replay(True, direct=False)
    driver.calls.clear()
    assert r.launch(1, 3) is True and kernels.streams == [7, 3] and driver.calls == [("query", 3),
                                                                                      ("launch", 0xF1, 3)]


def test_a_direct_replay_the_driver_refuses_is_executed_then_launches_its_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = _Driver(queued=set())
    driver.install(monkeypatch)
    kernels = _Kernels(works=False)
    r = replay.Replay(0xF3, kernels)  # type: ignore[arg-type]
    try:
        cudnn.set_execute_replay(True, direct=True)
        assert r.launch(1, 5) is False and r.launches is None  # this call executes
        assert r.launch(1, 5) is True and driver.calls == [("query", 5), ("launch", 0xF3, 5)]
    finally:
        cudnn.set_execute_replay(True, direct=False)
    with pytest.raises(TypeError, match="direct: expected True or False, got 'yes'"):
        cudnn.set_execute_replay(True, direct="yes")  # type: ignore[arg-type]


def test_direct_is_set_by_the_environment() -> None:
    code = "import cudnn; from cudnn.backend import replay; print(cudnn.execute_replay(), replay._direct[0])"
    env = {**os.environ, "CUDNN_PY_EXECUTE_REPLAY": "direct"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


def test_kernel_launch_structs_are_cudas() -> None:
    """LaunchConfig / LaunchAttribute read what cuda-bindings' CUlaunchConfig / CUlaunchAttribute
    wrote, field by field, at the same addresses (the layout of cuda.h)."""
    import ctypes

    drv = pytest.importorskip("cuda.bindings.driver")
    from cudnn._lib.kernel_launch import LaunchAttribute, LaunchConfig

    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = 7, 8, 9
    config.blockDimX, config.blockDimY, config.blockDimZ, config.sharedMemBytes = 10, 11, 12, 13
    config.hStream = drv.CUstream(0x1234)
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = 2, 3, 4
    config.attrs, config.numAttrs = [attr], 1
    mine = LaunchConfig.from_address(config.getPtr())
    assert (mine.gridDimX, mine.gridDimY, mine.gridDimZ, mine.blockDimX, mine.blockDimY, mine.blockDimZ,
            mine.sharedMemBytes, mine.hStream, mine.numAttrs) == (7, 8, 9, 10, 11, 12, 13, 0x1234, 1)
    assert mine.attrs[0].id == 4 and bytes(mine.attrs[0].value[:12]) == bytes([2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
    assert ctypes.sizeof(LaunchAttribute) == 72


def test_kernel_launch_order_follows_the_edges() -> None:
    from cudnn._lib.kernel_launch import from_graph, topological

    assert topological(5, [(3, 1), (1, 0), (4, 0), (2, 4)]) == [2, 3, 1, 4, 0]  # ties in index order
    assert topological(3, []) == [0, 1, 2]
    assert topological(2, [(0, 1), (1, 0)]) is None  # a cycle: not read back
    assert from_graph(0) is None  # nothing readable without a driver (or a graph): launched as a whole
