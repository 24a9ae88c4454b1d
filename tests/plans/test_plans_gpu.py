"""Engines and plans on the GPU: heuristics, knobs, notes, autotuning, serialization, the
plan cache, CUDA graphs and the kernel cache. Results are compared with PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import cudnn
from cudnn._graph.records.plan_bytes import PlanRecord

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]  # build() with no arguments builds no plans

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
SRC = str(Path(__file__).resolve().parents[2] / "src")


def conv_bias_relu(n: int = 4, c: int = 32, h: int = 16, k: int = 64, **kw):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(k, c, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT, **kw)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    y = torch.empty(n, k, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    ref = torch.relu(F.conv2d(x.float(), w.float(), padding=1) + b.float())
    return g, {X: x, W: w, B: b, Y: y}, y, ref


def matmul_graph():  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    a = torch.randn(2, 128, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(2, 64, 96, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B).set_output(True)
    c = torch.empty(2, 128, 96, device="cuda", dtype=torch.float16)
    return g, {A: a, B: b, C: c}, c, a.float() @ b.float()


def workspace_for(g: cudnn.pygraph, index: int | None = None) -> torch.Tensor:
    size = g.get_workspace_size() if index is None else g.get_workspace_size_plan_at_index(index)
    return torch.empty(size, device="cuda", dtype=torch.uint8)


def check(out: torch.Tensor, ref: torch.Tensor) -> None:
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=1e-2)


@pytest.mark.parametrize("make", [conv_bias_relu, matmul_graph], ids=["conv_bias_relu", "matmul"])
def test_every_candidate_plan_runs_correctly(make) -> None:  # type: ignore[no-untyped-def]
    g, pack, out, ref = make()
    g.validate()
    g.build_operation_graph()
    assert g.get_engine_count() > 0
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK])
    count = g.get_execution_plan_count()
    assert count > 0
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    ran = 0
    for i in range(count):
        name = g.get_plan_name_at_index(i)
        assert name.startswith("eng")
        try:
            ws = workspace_for(g, i)
        except cudnn.CudnnError:
            continue  # this config does not build here; the others must
        out.fill_(float("nan"))
        g.execute_plan_at_index(pack, ws, i)
        check(out, ref)
        ran += 1
    assert ran >= 1
    with pytest.raises(IndexError, match=f"plan index {count} is out of range"):
        g.get_plan_name_at_index(count)


@pytest.mark.parametrize("make", [conv_bias_relu, matmul_graph], ids=["conv_bias_relu", "matmul"])
def test_plan_names_carry_the_knob_choices_of_each_config(make) -> None:  # type: ignore[no-untyped-def]
    """Heuristics rank many configs of one engine that differ only in knob values: each is its
    own candidate, named by its choices, which are knobs the engine has and values in their
    range; a mode asked twice, or one whose configs another mode gave, adds nothing."""
    g, _, _, _ = make()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert len(set(names)) == len(names), names
    assert any("_k" in n for n in names), f"no config chose a knob value: {names}"
    for name in names:
        engine, *choices = name.split("_")
        infos = {int(k.type): k for k in g.get_knobs_for_engine(int(engine.removeprefix("eng")))}
        for choice in choices:
            knob, value = (int(part) for part in choice.removeprefix("k").split("="))
            assert knob in infos and infos[knob].allows(value), f"{name}: knob {knob}={value} vs {infos}"
    g.create_execution_plans([cudnn.heur_mode.A])
    assert g.get_execution_plan_count() == len(names)
    g.create_execution_plans([cudnn.heur_mode.FALLBACK])
    after = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert after[:len(names)] == names and len(set(after)) == len(after)


def test_a_build_reads_only_the_configs_it_needs_and_picks_what_the_full_list_ranks_first() -> None:
    """cuDNN makes each ranked config as it is read; a build reads the best one alone, and the
    rest only when that one is filtered out or does not build. The choice is the same as
    from the whole list."""
    g, pack, out, ref = conv_bias_relu()
    g.build(HEUR)
    chosen = g.runner().candidate.name  # the selected plan
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]  # reads the whole list
    assert len(names) > 1 and names[0] == chosen
    g.execute(pack, workspace_for(g))
    check(out, ref)

    g2, pack2, out2, _ = conv_bias_relu()
    g2.validate()
    g2.build_operation_graph()
    g2.create_execution_plans(HEUR)
    g2.deselect_engines([chosen])  # the best config is filtered out: the build reads on
    g2.build_plans()
    assert g2.get_execution_plan_count() == len(names) - 1
    assert g2.get_plan_name_at_index(0) == names[1]
    out2.fill_(float("nan"))
    g2.execute(pack2, workspace_for(g2))
    check(out2, ref)


def test_instant_mode_where_available() -> None:
    g, pack, out, ref = conv_bias_relu()
    g.build([cudnn.heur_mode.INSTANT, cudnn.heur_mode.FALLBACK])
    g.execute(pack, workspace_for(g))
    check(out, ref)


def test_knobs_and_a_hand_picked_engine_config() -> None:
    g, pack, out, ref = matmul_graph()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    g.build_plans()
    name = g.get_plan_name_at_index(0)
    engine_id = int(name.split("_")[0].removeprefix("eng"))
    knobs = g.get_knobs_for_engine(engine_id)
    if "_k" in name:  # the heuristics' config chose knob values, so the engine has knobs
        assert knobs, f"{name}: the engine reports no knobs"
    assert all(k.min_value <= k.max_value and k.stride >= 1 for k in knobs)
    choice = {k.type: k.min_value for k in knobs[:1]}
    count = g.get_execution_plan_count()
    assert g.create_execution_plan(engine_id, choice) is g
    assert g.get_execution_plan_count() == count + 1  # appended, as 1.32 does: not built, not selected
    assert g.get_plan_name_at_index(0) == name
    g.build_plan_at_index(count)
    assert g.get_plan_name_at_index(count).startswith(f"eng{engine_id}")
    out.fill_(float("nan"))
    ws = torch.empty(g.get_workspace_size_plan_at_index(count), device="cuda", dtype=torch.uint8)
    g.execute_plan_at_index(pack, ws, count)
    check(out, ref)
    if knobs:
        bad = knobs[0]
        with pytest.raises(cudnn.GraphError, match="outside"):
            g.create_execution_plan(engine_id, {bad.type: bad.max_value + bad.stride})
    with pytest.raises(cudnn.GraphError, match="engine id .* is out of range"):
        g.create_execution_plan(g.get_engine_count(), {})


def test_note_filters() -> None:
    g, pack, out, ref = conv_bias_relu()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    total = g.get_execution_plan_count()
    notes = [set(g.get_behavior_notes_for_plan_at_index(i)) for i in range(total)]
    g.deselect_numeric_notes([cudnn.numerical_note.NONDETERMINISTIC])
    for i in range(g.get_execution_plan_count()):
        assert cudnn.numerical_note.NONDETERMINISTIC not in g.get_numerical_notes_for_plan_at_index(i)
    first = g.get_plan_name_at_index(0)
    g.deselect_engines([first])
    assert first not in [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert all(isinstance(n, cudnn.behavior_note) for s in notes for n in s)
    if g.get_execution_plan_count():
        g.build_plans()
        assert isinstance(g.get_behavior_notes(), list)
        out.fill_(float("nan"))
        g.execute(pack, workspace_for(g))
        check(out, ref)
    g.deselect_workspace_greater_than(0)
    for i in range(g.get_execution_plan_count()):
        assert g.get_workspace_size_plan_at_index(i) == 0


def test_autotune_picks_a_plan_no_slower_than_the_heuristic_choice() -> None:
    g, pack, out, ref = conv_bias_relu(n=16, c=64, h=56, k=64)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    report = g.autotune(pack, warmup=2, repeats=5, progress=False)
    times = {r.index: r.time_ms for r in report if r.time_ms is not None}
    assert report.best.time_ms == min(times.values())
    if 0 in times:
        assert report.best.time_ms <= times[0]
    assert "plan" in str(report)
    out.fill_(float("nan"))
    g.execute(pack, workspace_for(g))
    check(out, ref)


def test_serialize_then_deserialize_in_a_new_process(tmp_path: Path) -> None:
    g, pack, out, ref = conv_bias_relu()
    g.build(HEUR)
    g.execute(pack, workspace_for(g))
    torch.cuda.synchronize()
    blob = g.serialize(as_bytes=True)
    (tmp_path / "plan.bin").write_bytes(blob)
    out_uid = next(t.get_uid() for t, v in pack.items() if v is out)
    torch.save({t.get_uid(): v.cpu() for t, v in pack.items() if v is not out}, tmp_path / "inputs.pt")
    script = f"""
import torch, cudnn
g = cudnn.pygraph()
g.deserialize(None, open({str(tmp_path / 'plan.bin')!r}, 'rb').read())
feeds = {{u: v.cuda() for u, v in torch.load({str(tmp_path / 'inputs.pt')!r}).items()}}
y_attr = g.query_tensor_attributes_of_uid({out_uid})
y = torch.empty_strided(y_attr.get_dim(), y_attr.get_stride(), device='cuda', dtype=torch.float16)
ws = torch.empty(g.get_workspace_size(), device='cuda', dtype=torch.uint8)
g.execute({{**feeds, {out_uid}: y}}, ws)
torch.cuda.synchronize()
torch.save(y.cpu(), {str(tmp_path / 'out.pt')!r})
"""
    env = {**os.environ, "PYTHONPATH": SRC}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    other = torch.load(tmp_path / "out.pt")
    assert torch.equal(other, out.cpu())  # the same plan on the same data: the same bits
    with pytest.raises(cudnn.SerializationError, match="not a serialized cudnn-py plan"):
        cudnn.pygraph().deserialize(None, b"garbage")
    stale = blob.replace(f'"cudnn_version": {cudnn.backend_version()}'.encode(), b'"cudnn_version": 90000')
    with pytest.raises(cudnn.SerializationError, match="serialized with cuDNN 9.0.0"):
        cudnn.pygraph().deserialize(None, stale)


def test_plan_cache_hits_in_process_and_from_disk(tmp_path: Path) -> None:
    cache = cudnn.plan_cache
    old_dir = cache.directory
    cache.directory = tmp_path
    cache.clear(disk=False)
    try:
        g1, pack1, out1, ref1 = conv_bias_relu(h=20)
        t0 = time.perf_counter()
        g1.build(HEUR)
        cold = time.perf_counter() - t0
        hits = cache.hits
        g2, pack2, out2, ref2 = conv_bias_relu(h=20)
        t0 = time.perf_counter()
        g2.build(HEUR)
        warm = time.perf_counter() - t0
        assert cache.hits == hits + 1 and warm < cold
        g2.execute(pack2, workspace_for(g2))
        check(out2, ref2)
        cache.flush()  # the cache's writer thread writes the file
        files = list((tmp_path / "plans").glob("*.json"))
        assert len(files) == 1
        # A new process with the same directory reads the plan from disk.
        script = ("import cudnn, sys; sys.path.insert(0, %r); from test_plans_gpu import conv_bias_relu, "
                  "workspace_for, check, HEUR\ng, pack, out, ref = conv_bias_relu(h=20)\ng.build(HEUR)\n"
                  "g.execute(pack, workspace_for(g)); check(out, ref)\n"
                  "print(cudnn.plan_cache.disk_hits)") % str(Path(__file__).parent)
        env = {**os.environ, "PYTHONPATH": SRC, "CUDNN_PY_CACHE_DIR": str(tmp_path)}
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[-1] == "1"
        # A corrupt entry is ignored and rewritten, never trusted.
        files[0].write_bytes(b"{corrupt")
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[-1] == "0" and files[0].read_bytes().startswith(b"{")
        assert b"cudnn-py-plan" in files[0].read_bytes()
    finally:
        cache.directory = old_dir


def test_plans_serialized_by_the_cache_s_writer_run_here_and_restore_from_disk(tmp_path: Path) -> None:
    """The cache's writer thread reads each plan's JSON while the graph already runs; a handle
    destroyed right after a build waits for it; every file written then restores its plan."""
    cache = cudnn.plan_cache
    old_dir = cache.directory
    cache.directory = tmp_path
    cache.clear(disk=False)
    shapes = [(3, 16, 12), (5, 24, 20), (2, 32, 28), (4, 8, 10), (6, 16, 14)]
    try:
        for n, c, h in shapes:  # executed at once after its build: while its JSON may be read
            g, pack, out, ref = conv_bias_relu(n=n, c=c, h=h)
            g.build(HEUR)
            g.execute(pack, workspace_for(g))
            check(out, ref)
        handle = cudnn.create_handle()
        g, pack, out, ref = conv_bias_relu(n=7, c=16, h=9, handle=handle)
        g.build(HEUR)
        cudnn.destroy_handle(handle)  # waits for the writer: no flush() here
        assert len(list((tmp_path / "plans").glob("*.json"))) == len(shapes) + 1
        cache.clear(disk=False)  # as in a new process: only the disk is left
        hits = cache.disk_hits
        for n, c, h in [*shapes, (7, 16, 9)]:
            g, pack, out, ref = conv_bias_relu(n=n, c=c, h=h)
            g.build(HEUR)
            g.execute(pack, workspace_for(g))
            check(out, ref)
        assert cache.disk_hits == hits + len(shapes) + 1
    finally:
        cache.directory = old_dir


def test_plan_cache_survives_a_read_only_directory(tmp_path: Path) -> None:
    cache = cudnn.plan_cache
    old_dir = cache.directory
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    cache.directory = ro
    cache.clear(disk=False)
    try:
        g, pack, out, ref = conv_bias_relu(h=12)
        g.build(HEUR)  # cannot write: logged, still builds and runs
        g.execute(pack, workspace_for(g))
        check(out, ref)
    finally:
        cache.directory = old_dir
        ro.chmod(0o700)


def test_native_cuda_graph_populate_update_and_replay() -> None:
    from cuda.bindings import runtime as rt

    g, pack, out, ref = conv_bias_relu()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.select_behavior_notes([cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API])
    if g.get_execution_plan_count() == 0:
        pytest.skip("no engine with SUPPORTS_CUDA_GRAPH_NATIVE_API for this graph on this cuDNN")
    g.build_plans()
    ws = workspace_for(g)
    err, graph = rt.cudaGraphCreate(0)
    assert int(err) == 0
    out.fill_(float("nan"))
    g.populate_cuda_graph(None, pack, ws, graph)
    err, exec_graph = rt.cudaGraphInstantiate(graph, 0)
    assert int(err) == 0
    stream = torch.cuda.current_stream().cuda_stream
    assert int(rt.cudaGraphLaunch(exec_graph, stream)[0]) == 0
    check(out, ref)
    # new output buffer: update the graph, relaunch
    out2 = torch.full_like(out, float("nan"))
    pack2 = {t: (out2 if v is out else v) for t, v in pack.items()}
    g.update_cuda_graph(None, pack2, ws, graph)
    err, exec_graph2 = rt.cudaGraphInstantiate(graph, 0)
    assert int(rt.cudaGraphLaunch(exec_graph2, stream)[0]) == 0
    check(out2, ref)


def test_a_plan_without_the_note_is_refused_for_native_cuda_graphs() -> None:
    g, pack, out, ref = conv_bias_relu()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.deselect_behavior_notes([cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API])
    if g.get_execution_plan_count() == 0:
        pytest.skip("every engine supports the native CUDA graph API here")
    g.build_plans()
    with pytest.raises(cudnn.GraphError, match="does not support the native CUDA graph API"):
        g.populate_cuda_graph(None, pack, workspace_for(g), 12345)


def test_execute_under_torch_stream_capture_replays_correctly() -> None:
    g, pack, out, ref = conv_bias_relu()
    handle = cudnn.create_handle()
    g.handle = handle
    g.build(HEUR)
    ws = workspace_for(g)
    g.execute(pack, ws, handle=handle)  # first call prepares the variant pack outside capture
    torch.cuda.synchronize()
    x, w, b, _ = pack.values()
    cuda_graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.graph(cuda_graph, stream=side):
        cudnn.set_stream(handle=handle, stream=side)
        g.execute(pack, ws, handle=handle)
    out.fill_(float("nan"))
    x.mul_(2.0)
    cuda_graph.replay()
    check(out, torch.relu(F.conv2d(x.float(), w.float(), padding=1) + b.float()))
    handle.close()


def test_a_capture_stays_intact_while_the_cache_s_writer_serializes_plans(tmp_path: Path) -> None:
    """Plans the cache's writer thread serializes during a torch.cuda.graph capture (global mode,
    on this thread) leave the capture intact, and their files restore them."""
    cache = cudnn.plan_cache
    old_dir = cache.directory
    cache.directory = tmp_path
    cache.clear(disk=False)
    gate = threading.Event()
    handle = cudnn.create_handle()
    try:
        g0, pack0, out0, ref0 = conv_bias_relu(n=2, c=16, h=8, handle=handle)
        g0.build(HEUR)
        ws0 = workspace_for(g0)
        g0.execute(pack0, ws0, handle=handle)  # prepares the variant pack outside the capture
        cache.flush()
        blocker = PlanRecord("gate", "{}", 0, [], cudnn.backend_version(), "none", [0, 0])
        cache.store("gate", blocker, None, lambda: b"{}" if gate.wait(60) else b"")  # type: ignore[arg-type]
        shapes = [(3, 16, 12), (5, 24, 20), (2, 32, 28), (4, 8, 10)]
        for n, c, h in shapes:  # their files wait behind the gate
            conv_bias_relu(n=n, c=c, h=h)[0].build(HEUR)
        assert len(list((tmp_path / "plans").glob("*.json"))) == 1  # g0's alone
        cuda_graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.graph(cuda_graph, stream=side):
            cudnn.set_stream(handle=handle, stream=side)
            gate.set()
            cache.flush()  # the writer reads the four plans' JSON now, during the capture
            g0.execute(pack0, ws0, handle=handle)
        assert len(list((tmp_path / "plans").glob("*.json"))) == 2 + len(shapes)  # the gate's too
        out0.fill_(float("nan"))
        cuda_graph.replay()
        check(out0, ref0)
        handle.close()
        cache.clear(disk=False)
        hits = cache.disk_hits
        for n, c, h in shapes:
            g, pack, out, ref = conv_bias_relu(n=n, c=c, h=h)
            g.build(HEUR)
            g.execute(pack, workspace_for(g))
            check(out, ref)
        assert cache.disk_hits == hits + len(shapes)
    finally:
        gate.set()  # a failure before the capture leaves no write waiting
        handle.close()
        cache.directory = old_dir


def test_kernel_cache_reuses_kernels_across_shapes() -> None:
    if cudnn.backend_version() < 90400:
        pytest.skip("kernel cache needs cuDNN 9.4")
    kc = cudnn.create_kernel_cache()
    times = []
    for h in (16, 24, 32):
        g, pack, out, ref = conv_bias_relu(h=h, kernel_cache=kc)
        t0 = time.perf_counter()
        try:
            g.build(HEUR)
        except cudnn.cudnnGraphNotSupportedError as exc:
            pytest.skip(f"no dynamic-shape engine for this graph here: {exc}")
        times.append(time.perf_counter() - t0)
        g.execute(pack, workspace_for(g))
        check(out, ref)
    assert kc.in_use
