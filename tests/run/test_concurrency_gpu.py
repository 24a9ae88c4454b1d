"""Concurrency: 16 threads executing (and building) mixed graphs on shared and per-thread handles
and streams; 4 processes building and caching the same graphs into one plan-cache directory at
once; a process forked after CUDA was initialised.

Threads: four graphs built once (conv + bias + ReLU, matmul, layer norm, pointwise) are shared
by all threads; each thread also builds graphs of its own while the others run (the plan cache
is shared). A third of the threads use their own handle bound to their own stream, a third
share one handle (cuDNN allows a handle in one thread at a time: they take a lock), a third
pass no handle (the graph's). Each thread has its own buffers and checks every result against
float64 references. Summary lines start ``reliability: concurrency``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudnn
from cudnn._graph.records.plan_bytes import PlanRecord

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
HALF, BF16, FLOAT = cudnn.data_type.HALF, cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
SRC = str(Path(__file__).resolve().parents[2] / "src")
THREADS = 16
TORCH_OF = {HALF: torch.float16, BF16: torch.bfloat16, FLOAT: torch.float32}
ROUNDS = int(os.environ.get("CUDNN_PY_THREAD_ROUNDS", "40"))

Feed = Callable[[], tuple[dict[str, torch.Tensor], torch.Tensor]]  # new inputs -> (tensors, reference)


class Shared:
    """A built graph and how to make inputs, outputs and the reference for it."""

    def __init__(self, g: cudnn.pygraph, ins: dict[str, Any], out: Any, feed: Feed, tol: float) -> None:
        self.g, self.ins, self.out, self.feed, self.tol = g, ins, out, feed, tol
        g.build(HEUR)

    def run(self, handle: Any, lock: threading.Lock | None) -> None:
        data, ref = self.feed()
        y = torch.empty_strided(self.out.get_dim(), self.out.get_stride(), device="cuda",
                                dtype=TORCH_OF[self.out.get_data_type()]).fill_(float("nan"))
        ws = torch.empty(max(self.g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        pack = {self.ins[k]: v for k, v in data.items()}
        pack[self.out] = y
        if lock is None:
            self.g.execute(pack, ws, handle=handle)
        else:
            with lock:
                self.g.execute(pack, ws, handle=handle)
        torch.cuda.current_stream().synchronize()
        err = float((y.double() - ref).norm() / ref.norm().clamp_min(1e-12))
        assert err < self.tol, f"{self.g.name}: relative error {err:.3g}"


def shared_graphs() -> list[Shared]:
    graphs = []
    g = cudnn.pygraph(name="conv", io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="x", dim=[2, 16, 10, 10], stride=[1600, 1, 160, 16], data_type=HALF)
    W = g.tensor(name="w", dim=[32, 16, 3, 3], stride=[144, 1, 48, 16], data_type=HALF)
    B = g.tensor(name="b", dim=[1, 32, 1, 1], stride=[32, 1, 1, 1], data_type=HALF)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)

    def conv_feed() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        x = torch.randn(2, 16, 10, 10, device="cuda").half().to(memory_format=torch.channels_last)
        w = (torch.randn(32, 16, 3, 3, device="cuda") / 12).half().to(memory_format=torch.channels_last)
        b = torch.randn(1, 32, 1, 1, device="cuda").half()
        ref = torch.relu(F.conv2d(x.double(), w.double(), padding=1) + b.double())
        return {"x": x, "w": w, "b": b}, ref

    graphs.append(Shared(g, {"x": X, "w": W, "b": B}, Y, conv_feed, 5e-3))

    g = cudnn.pygraph(name="matmul", io_data_type=BF16, compute_data_type=FLOAT)
    A = g.tensor(name="a", dim=[3, 48, 40], stride=[1920, 40, 1], data_type=BF16)
    Bm = g.tensor(name="b", dim=[1, 40, 24], stride=[960, 24, 1], data_type=BF16)
    C = g.matmul(A, Bm).set_output(True)

    def mm_feed() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        a, b = torch.randn(3, 48, 40, device="cuda").bfloat16(), torch.randn(1, 40, 24, device="cuda").bfloat16()
        return {"a": a, "b": b}, a.double() @ b.double()

    graphs.append(Shared(g, {"a": A, "b": Bm}, C, mm_feed, 2e-2))

    g = cudnn.pygraph(name="layernorm", intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="x", dim=[33, 256], stride=[256, 1], data_type=HALF)
    S = g.tensor(name="s", dim=[1, 256], stride=[256, 1], data_type=FLOAT)
    Bb = g.tensor(name="b", dim=[1, 256], stride=[256, 1], data_type=FLOAT)
    Y, _, _ = g.layernorm(cudnn.norm_forward_phase.INFERENCE, X, S, Bb, 1e-5)
    Y.set_output(True).set_data_type(HALF)

    def ln_feed() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        x = torch.randn(33, 256, device="cuda").half()
        s, b = torch.rand(1, 256, device="cuda") + 0.5, torch.randn(1, 256, device="cuda")
        ref = F.layer_norm(x.double(), (256,), s.double().reshape(-1), b.double().reshape(-1), 1e-5)
        return {"x": x, "s": s, "b": b}, ref

    graphs.append(Shared(g, {"x": X, "s": S, "b": Bb}, Y, ln_feed, 1e-2))

    g = cudnn.pygraph(name="pointwise", io_data_type=FLOAT, compute_data_type=FLOAT)
    P = g.tensor(name="p", dim=[64, 96], stride=[96, 1], data_type=FLOAT)
    Q = g.tensor(name="q", dim=[1, 96], stride=[96, 1], data_type=FLOAT)
    R = g.tanh(g.mul(g.add(P, Q), P)).set_output(True)

    def pw_feed() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        p, q = torch.randn(64, 96, device="cuda"), torch.randn(1, 96, device="cuda")
        return {"p": p, "q": q}, torch.tanh((p.double() + q.double()) * p.double())

    graphs.append(Shared(g, {"p": P, "q": Q}, R, pw_feed, 1e-5))
    return graphs


def own_graph(i: int) -> None:
    """A graph built in this thread (alike across threads: they meet in the plan cache)."""
    n = 16 + (i % 4) * 8
    a, b = torch.randn(n, 32, device="cuda").half(), torch.randn(32, 40, device="cuda").half()
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.relu(g.matmul(A, B)).set_output(True)
    g.build(HEUR)
    c = torch.full((n, 40), float("nan"), device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    torch.cuda.current_stream().synchronize()  # this thread's default handle issues on the legacy stream
    g.execute({A: a, B: b, C: c}, ws)
    torch.cuda.synchronize()
    ref = torch.relu(a.double() @ b.double())
    assert float((c.double() - ref).norm() / ref.norm()) < 5e-3, "thread-built graph: wrong result"


def test_sixteen_threads_mixed_graphs_handles_and_streams() -> None:
    graphs = shared_graphs()
    shared_handle = cudnn.create_handle()
    shared_stream = torch.cuda.Stream()
    cudnn.set_stream(shared_handle, shared_stream)
    lock = threading.Lock()
    errors: list[str] = []
    counts = [0] * THREADS
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        mode = t % 3
        try:
            stream = shared_stream if mode == 1 else torch.cuda.Stream()
            handle = None
            if mode == 0:
                handle = cudnn.create_handle()
                cudnn.set_stream(handle, stream)
            elif mode == 1:
                handle = shared_handle
            with torch.cuda.stream(stream if mode != 2 else torch.cuda.default_stream()):
                barrier.wait()
                for r in range(ROUNDS):
                    graphs[(t + r) % len(graphs)].run(handle, lock if mode == 1 else None)
                    counts[t] += 1
                    if r % 10 == t % 10:
                        own_graph(t + r)
                        counts[t] += 1
            if mode == 0:
                cudnn.destroy_handle(handle)
        except BaseException as exc:  # noqa: BLE001 (reported below, with the thread)
            errors.append(f"thread {t} (mode {mode}): {type(exc).__name__}: {exc}")

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    hung = [i for i, th in enumerate(threads) if th.is_alive()]
    print(f"\nreliability: concurrency threads {THREADS} threads ran {sum(counts)} checked executes "
          f"(handles: own+own stream / shared with lock / graph's) in {time.perf_counter() - start:.1f} s: "
          f"{len(errors)} errors, {len(hung)} hung")
    for e in errors[:10]:
        print("  " + e)
    assert not hung, f"threads {hung} did not finish"
    assert not errors, errors[0]
    cudnn.destroy_handle(shared_handle)


# -- 4 processes, one cache directory --------------------------------------------------------------

WORKER = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {src!r})
    import torch
    import cudnn
    HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
    torch.manual_seed(0)
    while time.time() < {start}:
        time.sleep(0.005)
    ok = 0
    for n, k in [(64, 64), (96, 40), (33, 128), (128, 32)]:
        for act in ("relu", "tanh"):
            a, b = torch.randn(2, n, k, device="cuda").half(), torch.randn(2, k, 48, device="cuda").half()
            g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
            A, B = g.tensor_like(a), g.tensor_like(b)
            C = getattr(g, act)(g.matmul(A, B)).set_output(True)
            g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            c = torch.full((2, n, 48), float("nan"), device="cuda", dtype=torch.float16)
            g.execute({{A: a, B: b, C: c}}, torch.empty(max(g.get_workspace_size(), 1), device="cuda",
                                                        dtype=torch.uint8))
            torch.cuda.synchronize()
            ref = getattr(torch, act)(a.double() @ b.double())
            ok += float((c.double() - ref).norm() / ref.norm()) < 5e-3
    pc = cudnn.plan_cache
    print(json.dumps({{"ok": ok, "hits": pc.hits, "disk_hits": pc.disk_hits, "misses": pc.misses}}))
""")
GRAPHS_PER_WORKER = 8


def spawn(cache_dir: Path, start: float) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDNN_PY_CACHE_DIR": str(cache_dir), "CUDNN_PY_PLAN_CACHE": "1"}
    return subprocess.Popen([sys.executable, "-c", WORKER.format(src=SRC, start=start)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen[str]) -> dict[str, int]:
    out, err = p.communicate(timeout=200)
    assert p.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_four_processes_share_one_plan_cache_directory(tmp_path: Path) -> None:
    start = time.time() + 12  # all four import torch and cudnn first, then build at once
    results = [finish(p) for p in [spawn(tmp_path, start) for _ in range(4)]]
    files = sorted((tmp_path / "plans").glob("*.json"))
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".json"]
    records = [PlanRecord.from_bytes(p.read_bytes()) for p in files]  # every file whole
    for r in records:
        r.check_compatible(torch.cuda.current_device())
    again = finish(spawn(tmp_path, 0))
    print(f"\nreliability: concurrency processes 4 processes built {GRAPHS_PER_WORKER} graphs each into one cache "
          f"dir: results ok {[r['ok'] for r in results]}, cache files {len(files)}, leftovers {len(leftovers)}; "
          f"a 5th process: {again['disk_hits']} disk hits, {again['misses']} misses, ok {again['ok']}")
    assert all(r["ok"] == GRAPHS_PER_WORKER for r in results)
    assert len(files) == GRAPHS_PER_WORKER and not leftovers, leftovers
    assert again["ok"] == GRAPHS_PER_WORKER and again["disk_hits"] == GRAPHS_PER_WORKER and again["misses"] == 0


# -- fork after CUDA was initialised -----------------------------------------------------------------

FORK = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {src!r})
    import torch
    import cudnn
    HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT

    def graph():
        g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
        A = g.tensor(name="a", dim=[64, 64], stride=[64, 1], data_type=HALF)
        B = g.tensor(name="b", dim=[64, 64], stride=[64, 1], data_type=HALF)
        C = g.matmul(A, B).set_output(True)
        return g, A, B, C

    g, A, B, C = graph()
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    a, b, c = (torch.randn(64, 64, device="cuda").half() for _ in range(3))
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({{A: a, B: b, C: c}}, ws)
    torch.cuda.synchronize()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        steps = {{}}
        for name, step in [("execute_inherited", lambda: g.execute({{A: a, B: b, C: c}}, ws)),
                           ("build_new", lambda: graph()[0].build([cudnn.heur_mode.A])),
                           ("create_handle", cudnn.create_handle)]:
            try:
                step()
                steps[name] = "no error"
            except BaseException as exc:
                steps[name] = f"{{type(exc).__module__}}.{{type(exc).__name__}}: {{exc}}"
        os.write(w, json.dumps(steps).encode())
        os._exit(0)
    os.close(w)
    import select, signal, time
    deadline = time.time() + 60
    data = b""
    while time.time() < deadline:
        ready, _, _ = select.select([r], [], [], 1)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print(json.dumps({{"hang": True, "partial": data.decode(errors="replace")}}))
    else:
        print(json.dumps({{"hang": False, "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                          "steps": json.loads(data or b"{{}}")}}))
""")


def test_fork_after_cuda_init_is_a_clear_error_not_a_hang() -> None:
    out = subprocess.run([sys.executable, "-c", FORK.format(src=SRC)], capture_output=True, text=True, timeout=180,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nreliability: concurrency fork {json.dumps(report)}")
    assert not report["hang"], f"the forked child hung: {report}"
    assert report["signal"] == 0, f"the forked child died of signal {report['signal']}"
    for step, what in report["steps"].items():
        assert what != "no error", f"{step} in a forked child ran without an error"
        assert what.startswith("cudnn."), f"{step}: not a cudnn exception: {what}"
        assert "fork" in what, f"{step}: the error does not say why (fork): {what}"


@pytest.fixture(autouse=True)
def _plan_cache_in_tmp(tmp_path: Path) -> Any:
    pc = cudnn.plan_cache
    saved = pc.directory
    pc.directory = tmp_path / "thread-cache"
    yield
    pc.directory = saved
