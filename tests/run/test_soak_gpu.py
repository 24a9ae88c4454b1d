"""Soak and leaks: many executes of one graph, many build/destroy cycles of varied graphs, with
no growth of host memory (RSS and malloc's heap in use), GPU memory, live backend descriptors
and handles, or Python objects.

Figures are taken after a warm-up (first packs, first plans, allocator pools, cuDNN's own
caches) and after ``gc.collect()``. What must not grow at all: live backend descriptors
(``cudnn.backend.descriptor.live_count()``), live cuDNN handles
(``cudnn.backend.handle.live_handle_count()``) and memory held by torch's allocator (nothing is
allocated in the loops). What may move by allocator noise only: RSS, the heap malloc has handed
out (``mallinfo2``: it tells a leak from pages glibc keeps after a free) and GPU memory in use
(``cudaMemGetInfo``) within 16 MiB, Python objects within 200. A leak of one small object per
execute (200,000 of them) or of one plan per build exceeds these.

Knobs: ``CUDNN_PY_SOAK_EXECUTES`` (default 200,000) and ``CUDNN_PY_SOAK_SECONDS`` (time box,
default 60); ``CUDNN_PY_SOAK_BUILDS`` (default 1,000), ``CUDNN_PY_SOAK_BUILD_SECONDS`` (default 60)
and ``CUDNN_PY_SOAK_REAL_EVERY`` (default 1: every cycle is built by cuDNN; n: one cycle in n is,
the others take their repeated shape's plan from the plan cache); ``CUDNN_PY_SOAK_HANDLES``
(default 400). ``CUDNN_PY_SOAK=full`` makes the defaults 1,000,000 executes (60 s box), 10,000
build cycles with one in 10 built by cuDNN (150 s box) and 2,000 handles: a cuDNN build of these
graphs takes about 55 ms on an H200, so 10,000 of them would not fit one 300 s device command.
The build soak samples memory 20 times (every 500 cycles of 10,000) and prints the series, so a
plateau (a cache filling) is told from a leak (steady growth). Summary lines start ``reliability: soak``.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudnn
from cudnn._lib import capi, marshal
from cudnn.backend.descriptor import live_count
from cudnn.backend.handle import live_handle_count

HALF, BF16, FLOAT = cudnn.data_type.HALF, cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
MIB = 1 << 20
MEMORY_NOISE = 16 * MIB
OBJECT_NOISE = 200
FULL = os.environ.get("CUDNN_PY_SOAK", "") == "full"


def knob(name: str, default: float, full: float) -> float:
    return float(os.environ.get(name, full if FULL else default))


_LIBC = ctypes.CDLL(None)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_in_use() -> int:
    """Bytes glibc's malloc has handed out and not taken back (all arenas, mmapped blocks too);
    -1 where mallinfo2 is missing (glibc < 2.33, musl)."""
    fn = getattr(_LIBC, "mallinfo2", None)
    if fn is None:
        return -1
    fn.restype = _MallInfo2
    info = fn()
    return int(info.uordblks + info.hblkhd)


@dataclass
class Probe:
    rss: int
    heap: int
    gpu_used: int
    torch_allocated: int
    descriptors: int
    handles: int
    objects: int

    @staticmethod
    def take() -> Probe:
        torch.cuda.synchronize()
        gc.collect()
        cudnn.release_pending()  # what the collection freed, released now rather than at the next build
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        free, total = torch.cuda.mem_get_info()
        return Probe(rss, heap_in_use(), total - free, torch.cuda.memory_allocated(), live_count(),
                     live_handle_count(), len(gc.get_objects()))

    def growth(self, later: Probe) -> Probe:
        return Probe(*(b - a for a, b in zip(vars(self).values(), vars(later).values())))

    def text(self) -> str:
        return (f"RSS {self.rss / MIB:+.2f} MiB, heap {self.heap / MIB:+.2f} MiB, GPU {self.gpu_used / MIB:+.2f} MiB, "
                f"torch allocated {self.torch_allocated:+d} B, live descriptors {self.descriptors:+d}, "
                f"live handles {self.handles:+d}, objects {self.objects:+d}")


def check_growth(g: Probe) -> None:
    assert g.descriptors == 0, f"backend descriptors leaked: {g.text()}"
    assert g.handles == 0, f"cuDNN handles leaked: {g.text()}"
    assert g.torch_allocated == 0, f"GPU memory held by torch grew: {g.text()}"
    assert g.objects <= OBJECT_NOISE, f"Python objects grew: {g.text()}"
    assert g.rss <= MEMORY_NOISE, f"host memory grew: {g.text()}"
    assert g.heap <= MEMORY_NOISE, f"malloc's heap in use grew: {g.text()}"
    assert g.gpu_used <= MEMORY_NOISE, f"GPU memory grew: {g.text()}"


# -- 1. executes of one graph ----------------------------------------------------------------------

def plan_cache_in(folder: Path, enabled: bool) -> Iterator[Any]:
    """The plan cache in ``folder``, emptied before and after, on or off; restored after."""
    cache = cudnn.plan_cache
    saved = cache.directory, cache.enabled
    cache.directory, cache.enabled = folder, enabled
    cache.clear(disk=False)
    yield cache
    cache.directory, cache.enabled = saved
    cache.clear(disk=False)


@pytest.fixture
def fresh_plan_cache(tmp_path: Path) -> Iterator[Any]:
    """The plan cache on and empty, in a new folder: a new user's first run."""
    yield from plan_cache_in(tmp_path, True)


def conv_bias_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[cudnn.pygraph, Any, Any, Any, Any]:
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    g.build(HEUR)
    return g, X, W, B, Y


def abandoned_replay(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> None:
    """A graph whose pack was captured for replay, left in a reference cycle (only the collector
    frees it, at whatever point of the soak it runs): its release must wait for a safe point."""
    g, X, W, B, Y = conv_bias_relu(x, w, b)
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    for _ in range(3):
        g.execute({X: x, W: w, B: b, Y: y}, ws)
    cycle: list[Any] = [g, y, ws]
    cycle.append(cycle)


def test_execute_soak(fresh_plan_cache: Any) -> None:
    total = int(knob("CUDNN_PY_SOAK_EXECUTES", 200_000, 1_000_000))
    budget = knob("CUDNN_PY_SOAK_SECONDS", 60, 60)
    torch.manual_seed(0)
    x = torch.randn(2, 16, 12, 12, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = (torch.randn(16, 16, 3, 3, device="cuda") / 12).half().to(memory_format=torch.channels_last)
    b = torch.randn(1, 16, 1, 1, device="cuda", dtype=torch.float16)
    abandoned_replay(x, w, b)
    g, X, W, B, Y = conv_bias_relu(x, w, b)
    ys = [torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16).fill_(float("nan"))
          for _ in range(2)]
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    packs = [{X: x, W: w, B: b, Y: y} for y in ys]
    for i in range(2000):  # warm-up: both packs prepared, pools settled
        g.execute(packs[i % 2], ws)
    base = Probe.take()
    start, done, mid = time.perf_counter(), 0, None
    while done < total:
        pack = packs[1] if done % 1000 == 999 else packs[0]  # a second binding now and then
        g.execute(pack, ws)
        done += 1
        if done % 10000 == 0:
            torch.cuda.synchronize()
            if mid is None and done >= total // 2:
                mid = Probe.take()
            if time.perf_counter() - start > budget:
                break
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    end = Probe.take()
    growth = base.growth(end)
    half = mid or end
    print(f"\nreliability: soak executes {done} of one graph in {seconds:.1f} s ({seconds / done * 1e6:.1f} us "
          f"each){' (time box reached)' if done < total else ''}: growth {growth.text()}; "
          f"first half {base.growth(half).text()}; second half {half.growth(end).text()}")
    ref = torch.relu(F.conv2d(x.double(), w.double(), padding=1) + b.double())
    for y in ys:
        torch.testing.assert_close(y.double(), ref, atol=2e-2, rtol=1e-2)
    check_growth(growth)


# -- 2. build / destroy cycles of varied graphs ------------------------------------------------------

Maker = Callable[[Any], tuple[cudnn.pygraph, dict[Any, torch.Tensor], torch.Tensor, torch.Tensor]]


def matmul(m: int, n: int, k: int, dt: torch.dtype) -> Maker:
    def make(handle: Any) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor], torch.Tensor, torch.Tensor]:
        a, bm = torch.randn(2, m, k, device="cuda", dtype=dt), torch.randn(2, k, n, device="cuda", dtype=dt)
        g = cudnn.pygraph(io_data_type=HALF if dt == torch.float16 else BF16, compute_data_type=FLOAT, handle=handle)
        A, Bm = g.tensor_like(a), g.tensor_like(bm)
        C = g.matmul(A, Bm).set_output(True)
        c = torch.full((2, m, n), float("nan"), device="cuda", dtype=dt)
        return g, {A: a, Bm: bm, C: c}, c, a.double() @ bm.double()
    return make


def conv(c: int, h: int) -> Maker:
    def make(handle: Any) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor], torch.Tensor, torch.Tensor]:
        x = torch.randn(2, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        w = (torch.randn(16, c, 3, 3, device="cuda") / c).half().to(memory_format=torch.channels_last)
        g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT, handle=handle)
        X, W = g.tensor_like(x), g.tensor_like(w)
        Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
        g.validate()
        y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16).fill_(float("nan"))
        return g, {X: x, W: w, Y: y}, y, F.conv2d(x.double(), w.double(), padding=1)
    return make


def layernorm(rows: int, hidden: int) -> Maker:
    def make(handle: Any) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor], torch.Tensor, torch.Tensor]:
        x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
        s, b = torch.rand(1, hidden, device="cuda") + 0.5, torch.randn(1, hidden, device="cuda")
        g = cudnn.pygraph(intermediate_data_type=FLOAT, compute_data_type=FLOAT, handle=handle)
        X, S, B = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b)
        Y, _, _ = g.layernorm(cudnn.norm_forward_phase.INFERENCE, X, S, B, 1e-5)
        Y.set_output(True).set_data_type(BF16)
        y = torch.full_like(x, float("nan"))
        ref = F.layer_norm(x.double(), (hidden,), s.double().reshape(-1), b.double().reshape(-1), 1e-5)
        return g, {X: x, S: s, B: b, Y: y}, y, ref
    return make


def pointwise(n: int) -> Maker:
    def make(handle: Any) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor], torch.Tensor, torch.Tensor]:
        a, bb = torch.randn(n, 64, device="cuda"), torch.randn(1, 64, device="cuda")
        g = cudnn.pygraph(io_data_type=FLOAT, compute_data_type=FLOAT, handle=handle)
        A, Bb = g.tensor_like(a), g.tensor_like(bb)
        Y = g.relu(g.add(A, Bb)).set_output(True)
        y = torch.full_like(a, float("nan"))
        return g, {A: a, Bb: bb, Y: y}, y, torch.relu(a.double() + bb.double())
    return make


MAKERS = [matmul(64, 64, 64, torch.float16), matmul(33, 96, 40, torch.bfloat16), conv(16, 8), conv(8, 13),
          layernorm(33, 768), matmul(128, 32, 64, torch.float16), pointwise(33), layernorm(8, 1024)]


def cycle(i: int, handles: list[Any], cached: bool) -> None:
    """Build one graph (on one of a few long-lived handles), run it once, check it, drop it all:
    with the plan cache off, cuDNN builds it (heuristics, plan finalization); with it on, a
    repeated shape takes its plan from the cache (the graph is still made, validated and lowered)."""
    cudnn.plan_cache.enabled = cached
    g, pack, out, ref = MAKERS[i % len(MAKERS)](handles[i % len(handles)])
    g.build(HEUR)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), ref, atol=5e-2, rtol=2e-2)


@pytest.fixture
def memory_plan_cache(tmp_path: Path) -> Iterator[Any]:
    """The plan cache in a fresh folder, emptied before and after; off unless a cycle turns it on."""
    yield from plan_cache_in(tmp_path, False)


def test_build_destroy_cycles(memory_plan_cache: Any) -> None:
    """Varied graphs built, run and dropped; the default handle and two long-lived ones take
    turns (the cost of creating and destroying handles is test_handle_churn's)."""
    total = int(knob("CUDNN_PY_SOAK_BUILDS", 1000, 10_000))
    budget = knob("CUDNN_PY_SOAK_BUILD_SECONDS", 60, 150)
    real_every = int(knob("CUDNN_PY_SOAK_REAL_EVERY", 1, 10))
    every = max(total // 20, 1)
    torch.manual_seed(1)
    handles = [None, cudnn.create_handle(), cudnn.create_handle()]
    for i in range(4 * len(MAKERS)):  # warm-up: every kind built on every handle, then cached
        cycle(i, handles, cached=i >= 3 * len(MAKERS) and real_every > 1)
    series, start, done = [Probe.take()], time.perf_counter(), 0
    while done < total and time.perf_counter() - start < budget:
        cycle(done, handles, cached=done % real_every != 0)
        done += 1
        if done % every == 0:
            series.append(Probe.take())
    seconds = time.perf_counter() - start
    if done % every:
        series.append(Probe.take())
    for h in handles[1:]:
        cudnn.destroy_handle(h)
    base, mid, end = series[0], series[len(series) // 2], series[-1]
    growth, first, second = base.growth(end), base.growth(mid), mid.growth(end)
    rss = " ".join(f"{(p.rss - base.rss) / MIB:.1f}" for p in series)
    heap = " ".join(f"{(p.heap - base.heap) / MIB:.1f}" for p in series)
    real = (done + real_every - 1) // real_every
    print(f"\nreliability: soak builds {done} build/execute/destroy cycles of {len(MAKERS)} graph kinds "
          f"({real} built by cuDNN, {done - real} from the plan cache) in {seconds:.1f} s "
          f"({seconds / max(done, 1) * 1e3:.1f} ms each){' (time box reached)' if done < total else ''}: "
          f"growth {growth.text()}; first half {first.text()}; second half {second.text()}"
          f"\nreliability: soak builds series every {every} cycles, MiB over the start: RSS [{rss}]; heap [{heap}]")
    # libcudnn's own caches (compiled kernels, heuristics) may fill during the first half; a leak
    # keeps growing, so memory is judged on the second half, counts on the whole run
    check_growth(Probe(second.rss, second.heap, second.gpu_used, growth.torch_allocated, growth.descriptors,
                       growth.handles, growth.objects))


# -- 3. handles created and destroyed ------------------------------------------------------------

def raw_pair() -> None:
    """cudnnCreate + cudnnDestroy straight through the C binding, no cudnn-py object."""
    status, ptr = marshal.create_handle()
    assert status == 0, f"cudnnCreate: status {status}"
    status = capi.graph.cudnnDestroy(ptr)
    assert status == 0, f"cudnnDestroy: status {status}"


def our_pair() -> None:
    cudnn.destroy_handle(cudnn.create_handle())


def test_handle_churn() -> None:
    """Creating and destroying cudnn.Handle objects costs no more than libcudnn's own
    cudnnCreate/cudnnDestroy pair, measured side by side in blocks that take turns. What that
    pair keeps is libcudnn's and is reported, not judged (long-lived handles avoid it)."""
    n = int(knob("CUDNN_PY_SOAK_HANDLES", 400, 2000))
    for _ in range(8):
        raw_pair()
        our_pair()
    grown = {"raw": Probe(0, 0, 0, 0, 0, 0, 0), "ours": Probe(0, 0, 0, 0, 0, 0, 0)}
    for block in range(8):
        name, pair = ("raw", raw_pair) if block % 2 == 0 else ("ours", our_pair)
        before = Probe.take()
        for _ in range(n // 8):
            pair()
        g = before.growth(Probe.take())
        grown[name] = Probe(*(a + b for a, b in zip(vars(grown[name]).values(), vars(g).values())))
    pairs = n // 8 * 4
    raw, ours = grown["raw"], grown["ours"]
    print(f"\nreliability: soak handles {pairs} cudnnCreate/cudnnDestroy pairs through the C binding keep "
          f"{raw.heap / pairs / 1024:.1f} KiB heap, {raw.rss / pairs / 1024:.1f} KiB RSS, "
          f"{raw.gpu_used / pairs / 1024:.1f} KiB GPU each (libcudnn's); {pairs} through cudnn.create_handle/"
          f"destroy_handle keep {ours.heap / pairs / 1024:.1f} KiB heap, {ours.rss / pairs / 1024:.1f} KiB RSS, "
          f"{ours.gpu_used / pairs / 1024:.1f} KiB GPU each; cudnn-py's: {ours.text()}")
    assert ours.handles == 0 and ours.descriptors == 0, f"handles or descriptors leaked: {ours.text()}"
    assert ours.objects <= OBJECT_NOISE, f"Python objects grew: {ours.text()}"
    assert ours.heap <= raw.heap + MEMORY_NOISE, f"cudnn-py's handles keep more than libcudnn's: {ours.text()}"
    assert ours.gpu_used <= raw.gpu_used + MEMORY_NOISE, f"cudnn-py's handles keep more GPU memory: {ours.text()}"
