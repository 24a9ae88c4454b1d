"""A plan serialized with ``serialize()`` and deserialized into an empty ``pygraph`` binds what
the graph it was built from bound, without a GPU: the tensors and by-value constants (an
attention's band bounds among them), a slice read in place (a window into its input's buffer
before cuDNN 9.22), the scratch a composite carves from the workspace (attention's Stats when
none is asked for, ALiBi slopes, the backward's softmax sums) and the tensors the plan does not
read. Each graph is lowered as for cuDNN 9.19; records go through bytes, as serialize() writes them.
"""

from __future__ import annotations

import gc
import json
import types
from typing import Any

import pytest
from support.fake_backend import Backend, Pack

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.build.pipeline import Lowered, Pipeline
from cudnn._graph.records import plan_reuse as plan_store
from cudnn._graph.records.plan_bytes import PlanRecord
from cudnn._graph.run.bindings import Binding
from cudnn._graph.run.runner import Runner
from cudnn._lib import release

dt = cudnn.data_type
H, F = dt.HALF, dt.FLOAT


@pytest.fixture(autouse=True)
def cudnn_9_19(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=91900))


def round_trip(g: cudnn.pygraph) -> tuple[Lowered, Lowered]:
    """(``g``'s lowering, the lowering a graph deserialized from its plan record runs with)."""
    g.validate()
    original = Pipeline(g).lowered()
    tensors, scratch, scratch_bytes = plan_store.binding_records(Pipeline(g))
    data = PlanRecord("eng0", "{}", 256, tensors, 91900, "NVIDIA H100", [9, 0], scratch=scratch,
                      scratch_bytes=scratch_bytes).to_bytes()
    return original, plan_store.restored_lowering(PlanRecord.from_bytes(data))


def described(bindings: list[Binding]) -> list[tuple[Any, ...]]:
    def window(b: Binding) -> Any:
        w = b.tensor.window_of()
        return None if w is None else (w[0].get_uid(), w[1])

    return sorted((b.uid, b.tensor.get_name(), b.tensor.get_dim(), b.tensor.get_stride(),
                   b.tensor.get_data_type().name, b.tensor.get_is_pass_by_value(), b.tensor.get_value(),
                   b.constant.value if b.constant is not None else None, window(b), b.node, b.port)
                  for b in bindings)


def assert_same(original: Lowered, restored: Lowered) -> None:
    assert described(restored.bindings) == described(original.bindings)
    assert described(restored.unused) == described(original.unused)
    assert restored.slots == original.slots and restored.scratch_bytes == original.scratch_bytes
    assert restored.nodes == []


def attention(**kw: Any) -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor(name="Q", dim=[2, 4, 64, 64], data_type=H)
    k, v = (g.tensor(name=n, dim=[2, 4, 96, 64], data_type=H) for n in ("K", "V"))
    o, stats = g.sdpa(q, k, v, attn_scale=0.125, name="attn", implementation=cudnn.attention_implementation.COMPOSITE,
                      **kw)
    o.set_output(True)
    if stats is not None:
        stats.set_output(True)
    return g


def test_a_slice_window_is_bound_in_place_after_a_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before cuDNN 9.22 a slice is a window into its input: the restored graph binds it at the
    input's address plus the offset, as the original does; the caller gives no buffer for it."""
    g = cudnn.pygraph(handle=1)
    a = g.tensor(name="A", dim=[16, 32, 128], data_type=dt.BFLOAT16)
    b = g.tensor(name="B", dim=[16, 128, 64], data_type=dt.BFLOAT16)
    a_slice = g.slice(a, [slice(8, None), slice(16, None), slice(None, None)], name="A_slice")
    c = g.matmul(a_slice, b, compute_data_type=F, name="matmul")
    c.set_output(True).set_data_type(dt.BFLOAT16)
    original, restored = round_trip(g)
    assert a_slice.window_of() == (a, 69632)
    assert_same(original, restored)
    (window,) = [x for x in restored.bindings if x.tensor.window_of() is not None]
    assert window.uid == a_slice.get_uid() and window.tensor.window_of()[0].get_uid() == a.get_uid()
    backend = Backend()
    backend.install(monkeypatch)
    pointers = {a.get_uid(): 0x7F0000000000, b.get_uid(): 0x7F0000100000, c.get_uid(): 0x7F0000200000}
    for lowered in (original, restored):
        runner = Runner("graph", Pack(99), 0, lowered.bindings, 1, None, unused=lowered.unused)
        runner.backend_execute = backend.execute
        runner.run_pointers(tuple(pointers), tuple(pointers.values()), 0, 1)
        assert [r.uid for r in runner.required] == list(pointers)  # the window is not the caller's to give
        del runner
    first, second = backend.executed
    assert first == second == {**pointers, a_slice.get_uid(): 0x7F0000000000 + 69632}
    gc.collect()
    release.drain()


@pytest.mark.parametrize("kw", [
    {"is_inference": True, "sliding_window_length": 16, "use_causal_mask": True, "use_alibi_mask": True},
    {"generate_stats": True, "diagonal_band_left_bound": 8, "diagonal_band_right_bound": 4},
    {"generate_stats": True, "diagonal_band_left_bound": 0, "diagonal_band_right_bound": 32,
     "diagonal_alignment": cudnn.diagonal_alignment.BOTTOM_RIGHT}], ids=["inference_alibi_window", "band", "above"])
def test_attention_bounds_and_scratch_survive_a_round_trip(kw: dict[str, Any]) -> None:
    """The band's bounds are by-value constants of the plan: the restored graph passes the same
    values; the scratch (Stats of an inference graph, the ALiBi slopes and their bytes) keeps
    its place in the workspace."""
    original, restored = round_trip(attention(**kw))
    assert_same(original, restored)
    constants = {b.tensor.get_name(): b.constant.value for b in restored.bindings if b.constant is not None}
    left = kw.get("sliding_window_length", kw.get("diagonal_band_left_bound"))
    if kw.get("diagonal_alignment") == cudnn.diagonal_alignment.BOTTOM_RIGHT:
        left = left - 96 + 64
    assert constants["attn::left_bound"] == left
    assert constants.get("attn::right_bound", 0) == kw.get("diagonal_band_right_bound", 0)
    if kw.get("is_inference"):  # Stats to scratch, and the slopes, written before each execute
        assert len(restored.slots) == 2 and restored.scratch_bytes > 0
        assert any(s.fill is not None for s in restored.slots)


def test_attention_backward_scratch_survives_a_round_trip() -> None:
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    q, k, v, o, do = (g.tensor(name=n, dim=[2, 4, 64, 64], data_type=H) for n in ("Q", "K", "V", "O", "dO"))
    stats = g.tensor(name="Stats", dim=[2, 4, 64, 1], data_type=F)
    for t in g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.125, sliding_window_length=8, use_causal_mask=True,
                             name="bwd"):
        t.set_output(True)
    original, restored = round_trip(g)
    assert original.slots and original.scratch_bytes
    assert_same(original, restored)


def test_a_restored_graph_reports_the_scratch_in_its_workspace() -> None:
    original, restored = round_trip(attention(is_inference=True, use_causal_mask=True))
    g = cudnn.pygraph()  # a pipeline refers to its graph weakly: the test holds it
    p = Pipeline(g)
    p.adopt(object(), 256, "eng0", restored)  # type: ignore[arg-type]
    assert p.workspace_size() == original.scratch_bytes + 256 > 256


def test_records_written_before_windows_and_scratch_were_recorded_still_load() -> None:
    g = attention(is_inference=True, use_causal_mask=True)
    g.validate()
    tensors, scratch, scratch_bytes = plan_store.binding_records(Pipeline(g))
    raw = json.loads(PlanRecord("eng0", "{}", 0, tensors, 91900, "GPU", [9, 0], scratch=scratch,
                                scratch_bytes=scratch_bytes).to_bytes())
    for key in ("scratch", "scratch_bytes"):
        del raw[key]
    for t in raw["tensors"]:
        for key in ("window_uid", "window_offset", "unused"):
            del t[key]
    old = PlanRecord.from_bytes(json.dumps(raw))
    assert old.scratch == [] and old.scratch_bytes == 0 and old.tensors[0].window_uid is None
    assert plan_store.restored_lowering(old).slots == []


def test_constant_scratch_survives_a_round_trip_and_older_records_load() -> None:
    """The affine epilogue's unit scale and zero bias are constant scratch (outside the
    workspace); a record keeps them so. A record written before constant scratch existed
    restores its slots as workspace scratch, written before each execute, as it was built."""
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=F, compute_data_type=F)
    X = g.tensor(name="x", dim=[64, 256, 1, 1], stride=[256, 1, 256, 256])
    S, B = (g.tensor(name=n, dim=[1, 256, 1, 1], stride=[256, 1, 256, 256], data_type=F) for n in ("scale", "bias"))
    Y, _, _ = g.layernorm(cudnn.norm_forward_phase.INFERENCE, X, S, B, 1e-5, name="ln", lowering="affine_epilogue")
    Y.set_output(True)
    original, restored = round_trip(g)
    assert [s.constant for s in original.slots] == [True, True] and original.scratch_bytes == 0
    assert restored.slots == original.slots and restored.scratch_bytes == 0
    tensors, scratch, scratch_bytes = plan_store.binding_records(Pipeline(g))
    raw = json.loads(PlanRecord("eng0", "{}", 0, tensors, 91900, "GPU", [9, 0], scratch=scratch,
                                scratch_bytes=scratch_bytes).to_bytes())
    for s in raw["scratch"]:
        del s["constant"]
    old = plan_store.restored_lowering(PlanRecord.from_bytes(json.dumps(raw)))
    assert [(s.uid, s.fill, s.zero, s.constant) for s in old.slots] == [
        (s.uid, s.fill, s.zero, False) for s in original.slots]
