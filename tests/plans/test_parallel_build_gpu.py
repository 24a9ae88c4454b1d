"""build_plans(ALL) on several threads (_graph/plans/threads.py) on the GPU: the same plans as on one
thread, each computing what PyTorch computes; a candidate that fails fails alone; no thread
and no descriptor outlives the build."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudnn
from cudnn._graph.plans.candidates import Candidate
from cudnn._graph.plans.threads import ENV, PROCESSES_ENV
from cudnn.backend import Descriptor
from cudnn.backend.descriptor import live_count

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
HALF, FLOAT, BF16 = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16


def conv_graph():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = torch.randn(4, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1]), B)).set_output(True)
    y = torch.empty(4, 64, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    ref = torch.relu(F.conv2d(x.float(), w.float(), padding=1) + b.float())
    return g, {X: x, W: w, B: b, Y: y}, y, ref, 2e-2


def sdpa_graph():  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    out, _ = g.sdpa(Q, K, V, attn_scale=0.125, generate_stats=False, use_causal_mask=True)
    out.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    o = torch.empty_like(q)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.125)
    return g, {Q: q, K: k, V: v, out: o}, o, ref, 3e-2


GRAPHS = {"conv": conv_graph, "sdpa": sdpa_graph}


def build_all(make: Any, threads: str | None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Build every candidate with CUDNN_PY_BUILD_THREADS=``threads`` (None: the default) and no
    worker processes; run each built plan. Per plan name: its status and its output (None where
    it did not build)."""
    monkeypatch.setenv(PROCESSES_ENV, "0")
    if threads is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, threads)
    cudnn.plan_cache.enabled = False
    try:
        g, pack, out, ref, tol = make()
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans(HEUR)
        before = threading.active_count()
        g.build_plans(cudnn.build_plan_policy.ALL)
        assert threading.active_count() == before  # no build thread outlives the call
        return run_every_plan(g, pack, out, ref, tol)
    finally:
        cudnn.plan_cache.enabled = True


def run_every_plan(g: Any, pack: dict[Any, Any], out: torch.Tensor, ref: torch.Tensor, tol: float) -> dict[str, Any]:
    """Run each plan of ``g`` that built, checking ``out`` against ``ref`` within ``tol``; per
    plan name its status and its output (None where it did not build)."""
    rows = {r.name: r for r in g.describe_plans().rows}
    outputs: dict[str, Any] = {}
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        if rows[name].status.startswith(("failed", "not built")):
            outputs[name] = (rows[name].status, None)
            continue
        ws = torch.empty(max(1, g.get_workspace_size_plan_at_index(i)), device="cuda", dtype=torch.uint8)
        out.fill_(float("nan"))
        g.execute_plan_at_index(pack, ws, i)
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)
        outputs[name] = ("built", out.clone())
    return outputs


def refuse_plan(victim: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on in this process, finalizing a plan of the candidate named ``victim`` fails as
    cuDNN's NOT_SUPPORTED does: a plan made here (labelled with the graph alone, the candidate
    named in its error) or one restored from a worker's (labelled with the candidate's name)."""
    made_here: weakref.WeakSet[Descriptor] = weakref.WeakSet()
    start_build, finalize = Candidate.start_build, Descriptor.finalize

    def tagging(self: Candidate, *args: Any, **kwargs: Any) -> Descriptor | None:
        plan = start_build(self, *args, **kwargs)
        if plan is not None and self.name == victim:
            made_here.add(plan)
        return plan

    def refuse(self: Descriptor) -> Descriptor:
        if self in made_here or self.label.endswith(f": {victim}"):
            from cudnn._lib.status import raise_status

            raise_status(3000, f"{self.label}: finalizing EXECUTION_PLAN descriptor (refused by the test)")
        return finalize(self)

    monkeypatch.setattr(Candidate, "start_build", tagging)
    monkeypatch.setattr(Descriptor, "finalize", refuse)


@pytest.mark.parametrize("graph", list(GRAPHS))
def test_same_plans_and_results_on_one_thread_and_on_several(graph: str, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = build_all(GRAPHS[graph], "1", monkeypatch)
    parallel = build_all(GRAPHS[graph], None, monkeypatch)
    assert list(parallel) == list(serial)  # same names, same order
    assert sum(1 for status, _ in serial.values() if status == "built") >= 1
    for name, (status, out) in serial.items():
        assert parallel[name][0] == status, name
        if out is not None:  # the same plan (a nondeterministic engine may differ in the last bits)
            torch.testing.assert_close(parallel[name][1], out, atol=1e-3, rtol=1e-3)


def test_a_failing_candidate_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """One candidate's finalize is made to fail (NOT_SUPPORTED): on one thread and on several it
    alone fails, with the same error naming it; the others build and compute the reference."""
    probe = build_all(conv_graph, "1", monkeypatch)
    victim = next(name for name, (status, _) in probe.items() if status == "built")
    refuse_plan(victim, monkeypatch)
    serial = build_all(conv_graph, "1", monkeypatch)
    several = build_all(conv_graph, "4", monkeypatch)
    for got in (serial, several):
        assert got[victim][0].startswith("failed") and got[victim][1] is None
        assert {n for n, (s, _) in got.items() if s == "built"} == {n for n, (s, _) in probe.items()
                                                                   if s == "built"} - {victim}
    g, *_ = conv_graph()
    monkeypatch.setenv(ENV, "4")
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(HEUR)
    g.build_plans(cudnn.build_plan_policy.ALL)
    index = next(i for i in range(g.get_execution_plan_count()) if g.get_plan_name_at_index(i) == victim)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=f"{victim}: finalizing EXECUTION_PLAN"):
        g.build_plan_at_index(index)


def test_descriptors_and_threads_return_to_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    build_all(conv_graph, None, monkeypatch)  # cuDNN and the process's caches are warm
    gc.collect()
    cudnn.release_pending()
    descriptors, threads = live_count(), threading.active_count()
    for setting in ("1", None, "3"):
        build_all(conv_graph, setting, monkeypatch)
        build_all(sdpa_graph, setting, monkeypatch)
        gc.collect()
        cudnn.release_pending()
        assert live_count() == descriptors, f"threads={setting}: {live_count() - descriptors} descriptors left"
        assert threading.active_count() == threads
