"""Releasing CUDA and cuDNN objects: never from a finalizer, always at a point cudnn-py chooses.

The hang these guard against (a process blocked for ever in an execute loop): the garbage
collector ran inside cuda-bindings' first driver call, which resolves its symbols holding a
non-reentrant lock, and a dead Replay's finalizer called cuda-bindings again, waiting for that
lock. Here a fake library with such a lock stands in for cuda-bindings; the test that collects
a Replay inside it would block (it fails after a timeout instead) if the finalizer made the call.
"""

from __future__ import annotations

import copy
import functools
import gc
import subprocess
import sys
import threading
import types
import weakref
from typing import Any

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._lib import cuda, release
from cudnn.backend import replay


@pytest.fixture(autouse=True)
def empty_queue() -> Any:
    release.drain()
    yield
    release.drain()


class Owner:
    """An object owning a fake C resource the way cudnn-py's owners do."""

    def __init__(self, log: list[str], name: str) -> None:
        self.finalizer = weakref.finalize(self, release.later, log.append, name)


def test_a_collected_owner_only_queues_its_release() -> None:
    gc.collect()
    release.drain()  # what earlier tests left for the collector is not this test's
    log: list[str] = []
    a, b = Owner(log, "a"), Owner(log, "b")
    cycle: list[Any] = [a, b]
    cycle.append(cycle)
    del a, b, cycle
    gc.collect()
    assert log == [] and release.pending() == 2
    assert release.drain() == 2
    assert log == ["a", "b"] and release.pending() == 0


def test_close_releases_at_once_and_only_once() -> None:
    log: list[str] = []
    owner = Owner(log, "x")
    release.now(owner.finalizer)
    release.now(owner.finalizer)
    del owner
    gc.collect()
    assert log == ["x"] and release.pending() == 0


def test_a_failing_release_does_not_stop_the_others() -> None:
    log: list[str] = []

    def broken() -> None:
        raise RuntimeError("context gone")

    release.later(broken)
    release.later(log.append, "after")
    assert release.drain() == 2 and log == ["after"]


def test_releases_queued_while_draining_are_run_too() -> None:
    log: list[str] = []
    release.later(lambda: release.later(log.append, "child"))
    assert release.drain() == 2 and log == ["child"]


def test_the_public_name_drains() -> None:
    log: list[str] = []
    release.later(log.append, 1)
    assert cudnn.release_pending() == 1 and log == [1]


class _LazyLibrary:
    """cuda-bindings' driver module as it behaves: the first call resolves the library under a
    non-reentrant lock, running Python code (where the collector can run) while it holds it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready = False
        self.destroyed: list[int] = []
        self.blocked = False

    def _init(self) -> None:
        if self.ready:
            return
        with self.lock:
            gc.collect()  # what an allocation inside the resolution (os.getenv) can trigger
            self.ready = True

    def cuGraphLaunch(self, executable: int, stream: int) -> tuple[int]:
        self._init()
        return (0,)

    def cuGraphExecDestroy(self, executable: int) -> tuple[int]:
        if not self.ready:  # a nested first call: the real library waits here for ever
            if not self.lock.acquire(timeout=2):
                self.blocked = True
                return (1,)
            self.lock.release()
        self.destroyed.append(executable)
        return (0,)


def test_a_replay_collected_inside_a_library_call_makes_no_call_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hang's sequence: a captured pack dies in a reference cycle; the next replay's launch is
    the library's first call, and the collector runs inside its initialisation."""
    lib = _LazyLibrary()
    monkeypatch.setattr(cuda, "driver", lambda: lib)
    monkeypatch.setattr(replay, "_launch_graph", lib.cuGraphLaunch)
    monkeypatch.setattr(replay, "_is_capturing", lambda stream: (0, 0))
    monkeypatch.setattr(replay, "_stream_busy", lambda stream: (0,))
    dead = replay.Replay(0xDEAD)
    cycle: list[Any] = [dead]
    cycle.append(cycle)
    del dead, cycle
    live = replay.Replay(0x1111)
    assert live.launch(handle=1, stream=7)
    assert not lib.blocked, "the finalizer called the library while its initialisation held the lock"
    assert lib.destroyed == [] and release.pending() == 1
    release.drain()
    assert lib.destroyed == [0xDEAD]
    del live
    release.drain()
    assert lib.destroyed == [0xDEAD, 0x1111]


def test_the_driver_bindings_are_initialised_when_the_launch_calls_are_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """cudnn-py makes cuda-bindings' first driver call itself, where it binds the launch calls,
    not at whichever launch comes first."""
    calls: list[str] = []

    class Driver:
        def cuDriverGetVersion(self) -> tuple[int, int]:
            calls.append("version")
            return (0, 13000)

        cuGraphLaunch = cuStreamIsCapturing = cuStreamQuery = None

    monkeypatch.setattr(cuda, "driver", lambda: Driver())
    cuda.graph_calls()
    assert calls == ["version"]


def test_asking_whether_a_stream_is_captured_imports_no_cuda_bindings() -> None:
    """A release point asks the driver whether the stream is being captured. That is one ctypes
    call (here, with no driver library, the answer is False), not an import of cuda-bindings'
    driver module, which costs a process's first release point tens of milliseconds."""
    code = ("import sys\nfrom cudnn._lib import cuda\n"
            "print(cuda.stream_capturing(0), 'cuda.bindings.driver' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("call", [
    "cudnn.destroy_handle(12345)",
    "cudnn.get_stream(12345)",
    "cudnn.set_stream(handle=12345, stream=0)",
    "cudnn.pygraph(handle=12345)",
])
def test_a_raw_handle_cudnn_py_never_made_is_refused_without_reaching_cudnn(call: str) -> None:
    """Raw int handles stay accepted, but one that no live handle of this process has is a Python
    exception: cuDNN would dereference it (SIGSEGV). Run in a child: before, the child died."""
    code = ("import cudnn\n"
            f"try:\n    {call}\nexcept cudnn.DescriptorClosedError as exc:\n    print('refused:', exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{call}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert "refused: 0x3039 is not a live cuDNN handle of this process" in done.stdout


def test_a_destroyed_handles_address_is_refused_and_a_live_one_accepted() -> None:
    from cudnn.backend import handle as handles

    handles.note_raw(0x5000, True)  # as cudnn.legacy.cudnnCreate registers one
    assert handles.as_handle_ptr(0x5000) == 0x5000
    handles.note_raw(0x5000, False)  # its cudnnDestroy
    with pytest.raises(cudnn.DescriptorClosedError, match="0x5000 is not a live cuDNN handle"):
        handles.as_handle_ptr(0x5000)


def test_a_graph_no_longer_used_is_released_without_a_collection() -> None:
    """A pygraph and its pipeline form no reference cycle: dropping the last reference releases
    them (and queues their descriptors' release) at once, as the official's graphs are, rather
    than at the collector's next pass, which a process building many graphs may not reach soon."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor([2, 3, 4], name="x")
    g.relu(x, name="r").set_output(True)
    g.validate()
    graph, pipeline = weakref.ref(g), weakref.ref(g._pipeline)
    gc.disable()
    try:
        del g
        assert graph() is None and pipeline() is None
        assert x.get_dim() == [2, 3, 4]  # a tensor kept by the caller outlives its graph
    finally:
        gc.enable()


def _conv_bias_relu() -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor([8, 64, 56, 56], [200704, 1, 3584, 64], name="x")
    w = g.tensor([64, 64, 3, 3], [576, 1, 192, 64], name="w")
    b = g.tensor([1, 64, 1, 1], [64, 1, 64, 64], name="b")
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    g.relu(g.bias(y, b)).set_output(True)
    return g


def _layernorm() -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor([64, 1024, 1, 1], [1024, 1, 1024, 1024], name="x")
    scale = g.tensor([1, 1024, 1, 1], [1024, 1, 1024, 1024], name="scale")
    bias = g.tensor([1, 1024, 1, 1], [1024, 1, 1024, 1024], name="bias")
    eps = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True, data_type=cudnn.data_type.FLOAT)
    y, _, _ = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=x, scale=scale, bias=bias,
                          epsilon=eps)
    y.set_output(True)
    return g


def _sdpa(backward: bool) -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    dims, strides = [2, 4, 256, 64], [65536, 16384, 64, 1]
    q, k, v = (g.tensor(dims, strides, name=n) for n in "qkv")
    if not backward:
        o, stats = g.sdpa(q=q, k=k, v=v, generate_stats=True, attn_scale=0.125, use_causal_mask=True)
        o.set_output(True)
        stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        return g
    o, d_o = g.tensor(dims, strides, name="o"), g.tensor(dims, strides, name="dO")
    stats = g.tensor([2, 4, 256, 1], [1024, 256, 1, 1], name="stats", data_type=cudnn.data_type.FLOAT)
    for t in g.sdpa_backward(q=q, k=k, v=v, o=o, dO=d_o, stats=stats, attn_scale=0.125, use_causal_mask=True):
        t.set_output(True)
    return g


@pytest.mark.parametrize("make", [_conv_bias_relu, _layernorm, functools.partial(_sdpa, False),
                                  functools.partial(_sdpa, True)],
                         ids=["conv+bias+relu", "layernorm", "sdpa", "sdpa_backward"])
def test_a_validated_and_lowered_graph_leaves_no_garbage_for_the_collector(make: Any) -> None:
    """Nothing of a graph, its nodes and tensors, or the expansion and lowering of its
    composites forms a reference cycle: all of it is freed when the graph is dropped. A cycle
    would leave it to the collector, whose next pass then runs inside whatever the process does
    next (for a process that builds graph after graph: inside the next build)."""

    def validate_and_lower() -> None:
        g = make()
        g.validate()
        with pytest.MonkeyPatch.context() as mp:  # expanded and lowered for cuDNN 9.19, no library needed
            mp.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=91900))
            assert pipeline_module.Pipeline(g).lowered().bindings

    validate_and_lower()  # what a first use sets up once (lazily bound names, caches) is not the graph's
    gc.collect()
    gc.disable()
    try:
        validate_and_lower()
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_an_output_kept_after_its_graph_is_gone_has_no_producer() -> None:
    """A tensor refers to the node that produces it weakly: kept by the caller after its graph is
    dropped, it has no producer, and another graph refuses it as an input as it refuses the
    output of a graph still alive, naming the node it came from."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    y = g.relu(g.tensor([2, 3, 4], name="x"), name="r")
    assert y.producer is not None and y.producer.name == "r"
    del g
    assert y.producer is None and y.producer_label == "relu 'r'"
    h = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    with pytest.raises(cudnn.GraphError, match=r"relu 'again': IN_0 tensor 'r::OUT_0' is an output of "
                                               r"relu 'r' of another graph.*tensor_like"):
        h.relu(y, name="again")


def test_a_deep_copy_of_a_graph_has_its_own_producers() -> None:
    """A graph's deep copy holds copies of its nodes and tensors; a copied output's producer is
    the copied node, not the original's (which the weak reference would otherwise keep)."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    g.relu(g.tensor([2, 3, 4], name="x"), name="r").set_output(True)
    h = copy.deepcopy(g)
    node = h.nodes[0]
    assert node is not g.nodes[0] and node.outputs["OUT_0"].producer is node
    h.validate()
    assert node.outputs["OUT_0"].get_dim() == [2, 3, 4]
    del g
    assert node.outputs["OUT_0"].producer is node


def test_a_deep_copy_of_a_norm_graph_looks_at_its_own_nodes() -> None:
    """A norm node asks its graph's other nodes whether they share its tensors; in a deep copy
    of the graph it asks the copy's."""
    g = _layernorm()
    h = copy.deepcopy(g)
    assert h.nodes[0].graph_nodes is h.nodes
    assert g.nodes[0].graph_nodes is g.nodes
    h.validate()
