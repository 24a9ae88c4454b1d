"""What the official API's calls do, without a GPU (signatures in use, missing names,
graph JSON round trips, build() with no arguments, the 1.32 keywords). cuDNN's part of each
step is stood in for where it would need a device."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.model.lower import Lowering
from cudnn._graph.records.plan_bytes import PlanRecord
from cudnn._lib import enums
from cudnn.backend import attr_label
from cudnn.backend import descriptor as backend_descriptor

dt = cudnn.data_type
FLOAT, HALF = dt.FLOAT, dt.HALF
TRAIN = cudnn.norm_forward_phase.TRAINING


def graph(**kw: Any) -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT, **kw)


def nodes_of(g: cudnn.pygraph) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in json.loads(str(g))["nodes"]}


# -- a lowering that records (no libcudnn call) --------------------------------------------------

class FakeDesc:
    def __init__(self, kind: str, label: str) -> None:
        self.kind, self.label = kind, label
        self.attrs: dict[str, Any] = {}

    def set(self, attr: Any, value: Any, attr_type: Any = None) -> FakeDesc:
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(i, FakeDesc) for i in items):  # the value must be settable as the real one
            backend_descriptor._to_array(items, attr_type or backend_descriptor._infer_type(items, attr_label(attr)),
                                         attr_label(attr))
        self.attrs[attr_label(attr).removeprefix("CUDNN_ATTR_")] = value
        return self

    def finalize(self) -> FakeDesc:
        return self


class FakeLowering(Lowering):
    def descriptor(self, desc_type: Any, label: str) -> Any:  # type: ignore[override]
        return FakeDesc(desc_type.name, label)

    def tensor(self, t: Any) -> Any:  # type: ignore[override]
        return FakeDesc("TENSOR", t.get_name())


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """build_operation_graph without a device: lowering recorded, the loaded version settable
    (``state["version"]``), the operation graph's flags kept in ``state["op_graph"]``."""
    state: dict[str, Any] = {"version": 92800}
    monkeypatch.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=state["version"]))
    monkeypatch.setattr(pipeline_module, "Lowering", FakeLowering)

    def operation_graph(handle: int, ops: list[Any], label: str = "", dynamic_shape: bool = False,
                        override_shape: bool = False) -> str:
        state["op_graph"] = {"ops": ops, "dynamic_shape": dynamic_shape, "override_shape": override_shape}
        return "OPGRAPH"

    monkeypatch.setattr(pipeline_module.eng, "operation_graph", operation_graph)
    return state


def relu_graph(**kw: Any) -> tuple[cudnn.pygraph, Any, Any]:
    g = graph(handle=1, **kw)  # a raw handle: no default handle (and no device) is needed
    x = g.tensor([2, 3, 4], name="x")
    y = g.relu(x, name="r").set_output(True)
    return g, x, y


# -- signatures in use ---------------------------------------------------------------------------

def test_swish_takes_beta_second_and_refuses_a_data_type_there() -> None:
    g = graph()
    x = g.tensor([4, 4], name="x")
    g.swish(x, 1.5, FLOAT, "s").set_output(True)
    assert nodes_of(g)["s"]["swish_beta"] == "3FC00000"  # 1.5
    with pytest.raises(TypeError, match=r"swish_beta: expected a float, got <?data_type.FLOAT.*argument order"):
        g.swish(x, FLOAT, 1.5)
    g.swish_backward(x, x, FLOAT, 2.0, "sb").set_output(True)  # here compute_data_type comes first, officially
    assert nodes_of(g)["sb"]["swish_beta"] == "40000000"


def test_concatenate_positional_name_and_keyword_compute_type() -> None:
    g = graph()
    a, b = g.tensor([2, 3], name="a"), g.tensor([2, 5], name="b")
    y = g.concatenate([a, b], 1, None, "cat", compute_data_type=FLOAT).set_output(True)
    g.validate()
    assert y.get_name() == "cat::Y" and y.get_dim() == [2, 8]
    with pytest.raises(TypeError, match="concatenate: name must be a str"):
        g.concatenate([a, b], 1, None, FLOAT)
    with pytest.raises(TypeError, match="concatenate: inputs must be a list of tensors"):
        g.concatenate(a, 1)
    with pytest.raises(TypeError, match=r"concatenate '.*': axis: expected an int, got 1\.0"):
        g.concatenate([a, b], 1.0)


def test_conv_second_overload_by_position() -> None:
    g = graph()
    x, w = g.tensor([1, 8, 10, 10], name="x"), g.tensor([4, 8, 3, 3], name="w")
    # (image, weight, pre_padding, post_padding, stride, dilation, convolution_mode, compute_data_type)
    g.conv_fprop(x, w, [1, 0], [1, 2], [1, 1], [1, 1], cudnn.convolution_mode.CONVOLUTION, FLOAT).set_output(True)
    g.conv_fprop(x, w, [1, 0], [1, 2], [2, 2], [1, 1], name="kw", compute_data_type=FLOAT).set_output(True)
    g.conv_fprop(x, w, [1, 1], [1, 1], [1, 1], name="first").set_output(True)  # padding, stride, dilation
    g.validate()
    n = nodes_of(g)
    assert (n["0"]["pre_padding"], n["0"]["post_padding"], n["0"]["math_mode"]) == ([1, 0], [1, 2], "CONVOLUTION")
    assert n["0"]["compute_data_type"] == "FLOAT"
    assert (n["kw"]["pre_padding"], n["kw"]["post_padding"], n["kw"]["stride"]) == ([1, 0], [1, 2], [2, 2])
    assert n["kw"]["math_mode"] == "CROSS_CORRELATION"
    assert (n["first"]["pre_padding"], n["first"]["post_padding"]) == ([1, 1], [1, 1])


def test_knob_takes_max_before_min_and_is_read_only() -> None:
    k = cudnn.knob(cudnn.knob_type.TILE_M, 8, 1, 1)
    assert (k.type, k.max_value, k.min_value, k.stride) == (cudnn.knob_type.TILE_M, 8, 1, 1)
    assert k == cudnn.knob(knob_type=cudnn.knob_type.TILE_M, min_value=1, max_value=8, stride=1)
    assert json.loads(repr(k)) == {"knob_type": "TILE_M", "max_value": 8, "min_value": 1, "stride": 1}
    empty = cudnn.knob()
    assert (empty.type, empty.max_value, empty.min_value, empty.stride) == (cudnn.knob_type.NOT_SET, None, None, None)
    with pytest.raises(AttributeError, match="read-only"):
        k.max_value = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="min_value 8 is above max_value 1"):
        cudnn.knob(cudnn.knob_type.TILE_M, 1, 8)
    with pytest.raises(TypeError, match="knob: knob_type: expected a cudnn.knob_type"):
        cudnn.knob("TILE_M")
    with pytest.raises(TypeError, match="knob: stride: expected an int or None"):
        cudnn.knob(cudnn.knob_type.TILE_M, 8, 1, 1.5)


def test_slice_without_slices_is_the_whole_tensor() -> None:
    g = graph()
    y = g.slice(g.tensor([2, 3], name="x")).set_output(True)
    g.validate()
    assert y.get_dim() == [2, 3]
    with pytest.raises(TypeError, match="slices must be a list"):
        g.slice(g.tensor([2, 3], name="z"), slice(0, 1))


# -- reshape_mode, reduction group_offset ----------------------------------------------------------

def test_reshape_mode_is_in_the_json_and_lowered_gated_on_9_22() -> None:
    g = graph()
    x = g.tensor([2, 3, 4], name="x")
    g.reshape(x, "v").set_dim([6, 4]).set_output(True)
    g.reshape(x, name="l", reshape_mode=cudnn.reshape_mode.LOGICAL).set_dim([4, 6]).set_output(True)
    g.validate()
    n = nodes_of(g)
    assert "reshape_mode" not in n["v"] and n["l"]["reshape_mode"] == "LOGICAL"
    view, logical = g.nodes
    assert "OPERATION_RESHAPE_MODE" not in view.lower(FakeLowering(0, 91900))[0].attrs  # works before 9.22
    assert logical.lower(FakeLowering(0, 92200))[0].attrs["OPERATION_RESHAPE_MODE"] == cudnn.reshape_mode.LOGICAL
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"RESHAPE_MODE.*needs cuDNN >= 9\.22\.0"):
        logical.lower(FakeLowering(0, 92100))
    with pytest.raises(cudnn.GraphError, match="reshape_mode must be cudnn.reshape_mode.VIEW_ONLY or LOGICAL"):
        g.reshape(x, reshape_mode="SIDEWAYS")


def test_reduction_group_offset_port_and_lowering() -> None:
    g = graph()
    x = g.tensor([1, 10, 8], name="x")
    offsets = g.tensor([1, 4, 1], name="offsets", data_type=dt.INT32)
    y = g.reduction(x, cudnn.reduction_mode.ADD, group_offset=offsets, name="r")
    with pytest.raises(cudnn.GraphError, match="with group_offset, call set_dim"):
        y.set_output(True)
        g.validate()
    y.set_dim([1, 3, 8])
    g.validate()
    assert nodes_of(g)["r"]["inputs"] == {"X": "x", "GROUP_OFFSET": "offsets"}
    assert "OPERATION_REDUCTION_GROUP_OFFSET_DESC" in g.nodes[0].lower(FakeLowering(0, 92400))[0].attrs
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.24\.0"):
        g.nodes[0].lower(FakeLowering(0, 92300))


# -- the constructor ------------------------------------------------------------------------------

def test_constructor_stores_the_shape_flags_and_checks_types() -> None:
    g = cudnn.pygraph()
    assert g.name == "test_graph" and not g.is_dynamic_shape_enabled and not g.is_override_shape_enabled
    g = cudnn.pygraph("g", HALF, None, None, None, None, None, None, None, True, True)
    assert g.is_dynamic_shape_enabled and g.is_override_shape_enabled
    # the official's bool conversion (pybind11): None is False, a number by its truth value, a str refused
    assert not cudnn.pygraph(is_dynamic_shape_enabled=None).is_dynamic_shape_enabled
    assert cudnn.pygraph(is_dynamic_shape_enabled=1).is_dynamic_shape_enabled is True
    with pytest.raises(TypeError, match="pygraph: is_dynamic_shape_enabled: expected True or False, got 'yes'"):
        cudnn.pygraph(is_dynamic_shape_enabled="yes")
    with pytest.raises(TypeError, match="pygraph: name: expected a str"):
        cudnn.pygraph(3)
    with pytest.raises(TypeError, match="pygraph: sm_count: expected an int"):
        cudnn.pygraph(sm_count="all")


def test_dynamic_and_override_shape_reach_the_operation_graph(fake_backend: dict[str, Any]) -> None:
    g, _, _ = relu_graph()
    g.build_operation_graph()
    assert fake_backend["op_graph"]["dynamic_shape"] is False and fake_backend["op_graph"]["override_shape"] is False
    g, _, _ = relu_graph(is_dynamic_shape_enabled=True, is_override_shape_enabled=True)
    g.build_operation_graph()
    assert fake_backend["op_graph"]["dynamic_shape"] is True and fake_backend["op_graph"]["override_shape"] is True


def test_override_shape_needs_cudnn_9_21(fake_backend: dict[str, Any]) -> None:
    fake_backend["version"] = 92000
    g, _, _ = relu_graph(is_override_shape_enabled=True)
    with pytest.raises(cudnn.FeatureUnavailableError,
                       match=r"is_override_shape_enabled=True .*needs cuDNN >= 9\.21\.0; the loaded libcudnn is 9\.20\.0"):
        g.build_operation_graph()


def test_an_io_type_alone_types_every_tensor_and_node() -> None:
    """1.32 copies io_data_type into unset intermediate/compute types; cudnn-py infers them
    instead (FLOAT for floating inputs, as v1.23 graphs get): every such graph validates."""
    for io in (HALF, dt.BFLOAT16, FLOAT, dt.DOUBLE, dt.INT8, dt.INT32):
        g = cudnn.pygraph(io_data_type=io)
        x, w = g.tensor([1, 4, 6, 6], name="x"), g.tensor([4, 4, 3, 3], name="w")
        y = g.relu(g.conv_fprop(x, w, padding=[1, 1])).set_output(True)
        g.validate()
        assert y.get_data_type() == io
        assert all(n.compute_data_type != dt.NOT_SET for n in g.nodes)
        assert g.nodes[0].outputs["Y"].get_data_type() != dt.NOT_SET


# -- tensors: 1.32 keywords and the new methods ---------------------------------------------------

def test_tensor_keywords_of_1_32() -> None:
    g = graph()
    t = g.tensor([2, 3], None, HALF, reordering_type=None, uid=None, alignment_value=32)
    assert t.get_stride() == [3, 1] and t.alignment_value == 32 and not t.has_uid()
    # a promise about the values (1.32), not the address: the byte alignment stays cudnn-py's 16
    assert t.get_alignment() == 16 and g.tensor([2, 3], alignment_value=3).alignment_value == 3
    assert g.tensor([2, 3]).alignment_value == 1
    assert g.tensor([2, 3], ragged_offset_multiplier=1).get_ragged_offset_multiplier() == 1
    # passed to cuDNN (CUDNN_ATTR_TENSOR_RAGGED_OFFSET_MULTIPLIER, >= 9.24) when the graph is lowered
    assert g.tensor([2, 3], ragged_offset_multiplier=4).get_ragged_offset_multiplier() == 4
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'dim'"):
        g.tensor()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"pygraph.tensor\('t'\): reordering_type: expected a cudnn.tensor_reordering"):
        g.tensor([2], name="t", reordering_type="NONE")
    with pytest.raises(TypeError, match="alignment_value: expected an int"):
        g.tensor([2], alignment_value=1.5)


def test_tensor_like_template_keyword_and_is_virtual() -> None:
    g = graph()
    src = g.tensor([2, 3], name="src", data_type=HALF)
    a = g.tensor_like(template=src, name="a")
    b = g.tensor_like(src, "b", True)
    assert (a.get_dim(), a.get_name(), a.get_is_virtual()) == ([2, 3], "a", False)
    assert b.get_is_virtual()
    with pytest.raises(TypeError, match="tensor_like: give the template tensor once"):
        g.tensor_like(src, template=src)
    with pytest.raises(TypeError, match="tensor_like: missing the template tensor"):
        g.tensor_like()


def test_tensor_vector_and_compile_time_methods() -> None:
    t = cudnn.tensor()
    assert (t.get_vector_count(), t.get_vector_dimension(), t.get_has_compile_time_constant()) == (1, -1, False)
    assert t.set_vector_count_and_dimension(1, -1) is t
    assert t.set_vector_count_and_dimension(4, 1).get_vector_count() == 4  # lowered as VECTOR_COUNT
    assert t.set_vector_count_and_dimension(1, -1).get_vector_dimension() == -1
    with pytest.raises(TypeError, match="vector_count: expected an int"):
        t.set_vector_count_and_dimension("4", 1)
    with pytest.raises(ValueError, match="vector_count must be >= 1"):
        t.set_vector_count_and_dimension(0, 1)
    t.set_dim([2, 3])
    with pytest.raises(ValueError, match="vector_dimension 2 is not a dim"):
        t.set_vector_count_and_dimension(1, 2)
    assert t._set_data_type(HALF).get_data_type() == HALF
    with pytest.raises(TypeError, match="_set_data_type: expected a cudnn.data_type"):
        t._set_data_type("float16")
    assert t.set_data_type("float16").get_data_type() == HALF  # the public setter converts


def test_tensor_scalar(monkeypatch: pytest.MonkeyPatch) -> None:
    g = graph()
    runtime = g.tensor_scalar(0.5, cudnn.scalar_type.RUNTIME_PARAM)
    assert (runtime.get_value(), runtime.get_data_type(), runtime.get_is_pass_by_value()) == (0.5, FLOAT, True)
    assert not runtime.get_has_compile_time_constant()
    assert g.tensor_scalar(3, cudnn.scalar_type.RUNTIME_PARAM).get_data_type() == dt.INT32
    assert g.tensor_scalar(2**40, cudnn.scalar_type.RUNTIME_PARAM, "big").get_data_type() == dt.INT64
    x = g.tensor([2, 2], name="x")
    g.mul(x, runtime).set_output(True)
    g.validate()
    from cudnn._lib import loader

    monkeypatch.setattr(loader, "report", lambda: types.SimpleNamespace(version=92200))
    const = g.tensor_scalar(2.0, cudnn.scalar_type.COMPILE_TIME_CONST, "two")
    assert const.get_has_compile_time_constant() and const.to_dict()["is_compile_time_constant"] is True
    monkeypatch.setattr(loader, "report", lambda: types.SimpleNamespace(version=92100))
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"COMPILE_TIME_CONST.*needs cuDNN >= 9\.22\.0"):
        g.tensor_scalar(2.0, cudnn.scalar_type.COMPILE_TIME_CONST)
    with pytest.raises(TypeError, match="tensor_scalar: value must be a Python int or float"):
        g.tensor_scalar("2", cudnn.scalar_type.RUNTIME_PARAM)
    with pytest.raises(TypeError, match="tensor_scalar: scalar_type must be cudnn.scalar_type"):
        g.tensor_scalar(2.0, 7)


# -- execute: 1.32 keywords, tensor_uids, overrides ------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, Any]] = []

    def run(self, pack: Any, workspace: Any, handle: Any) -> None:
        self.calls.append((pack, workspace, handle))


def test_execute_keywords_of_1_32(monkeypatch: pytest.MonkeyPatch) -> None:
    g, x, y = relu_graph()
    g.validate()
    x.set_uid(1)
    y.set_uid(2)
    rec = Recorder()
    monkeypatch.setattr(pipeline_module.Pipeline, "current_runner", lambda self: rec)
    g.execute(tensor_dict={x: 10, y: 20}, workspace=0)
    g.execute([10, 20], 0, tensor_uids=(1, 2))
    g.execute({1: 10, 2: 20}, 0, None, [1], [[2, 3, 4]], [[12, 4, 1]])  # overrides restating the declaration
    assert [c[0] for c in rec.calls] == [{x: 10, y: 20}, {1: 10, 2: 20}, {1: 10, 2: 20}]
    with pytest.raises(ValueError, match="execute: 2 tensor_uids for 1 buffers"):
        g.execute([10], 0, tensor_uids=(1, 2))
    with pytest.raises(TypeError, match="with tensor_uids=, the buffers must be a list or tuple"):
        g.execute({1: 10}, 0, tensor_uids=(1,))
    with pytest.raises(TypeError, match="give the buffers once"):
        g.execute({1: 10}, tensor_dict={1: 10})
    with pytest.raises(TypeError, match="override_uids, override_shapes and override_strides go together"):
        g.execute({1: 10}, 0, override_uids=[1])
    with pytest.raises(NotImplementedError, match=r"override of tensor 'x' \(uid 1\) to dims \[1, 3, 4\]"):
        g.execute({1: 10}, 0, None, [1], [[1, 3, 4]], [[12, 4, 1]])
    import types

    from cudnn._graph import pygraph as graph_module

    monkeypatch.setattr(graph_module.loader, "report", lambda: types.SimpleNamespace(version=91900))
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9.21.0; the loaded libcudnn is 9.19.0"):
        g.execute({1: 10}, 0, None, [1], [[1, 3, 4]], [[12, 4, 1]])
    with pytest.raises(cudnn.GraphError, match="no tensor of this graph has uid 9"):
        g.get_workspace_size(None, [9], [[1]], [[1]])


def test_execute_before_plans_says_what_build_does(fake_backend: dict[str, Any]) -> None:
    g, x, y = relu_graph()
    g.build_operation_graph()  # (1.32's build() with no arguments builds plans too: test_pygraph_132.py)
    assert fake_backend["op_graph"]["ops"] and g.get_execution_plan_count() == 0
    with pytest.raises(cudnn.GraphStateError, match=r"execute\(\) before build: no plan is built yet. Call build\(\)"):
        g.execute({x: 1, y: 2}, 0)
    with pytest.raises(cudnn.GraphStateError, match=r"execute_plan_at_index\(\) before build"):
        g.execute_plan_at_index({x: 1, y: 2}, 0, 0)


def test_build_with_modes_runs_every_step(monkeypatch: pytest.MonkeyPatch, fake_backend: dict[str, Any]) -> None:
    steps: list[str] = []
    for step in ("create_execution_plans", "check_support", "build_plans"):
        monkeypatch.setattr(cudnn.pygraph, step, lambda self, *a, step=step: steps.append(step))
    monkeypatch.setattr(pipeline_module.Pipeline, "handle_ptr", lambda self: 1)
    monkeypatch.setattr(pipeline_module.Pipeline, "device", lambda self: 0)
    from cudnn._graph.records import plan_reuse as plan_store

    monkeypatch.setattr(plan_store, "adopt_cached", lambda p, modes: None)
    monkeypatch.setattr(plan_store, "store", lambda p, modes, autotuned: None)
    g, _, _ = relu_graph()
    g.build([cudnn.heur_mode.A])
    assert steps == ["create_execution_plans", "check_support", "build_plans"]


# -- serialize / deserialize of plans ------------------------------------------------------------

def plan_record(**extra: Any) -> bytes:
    return PlanRecord("eng0", "{}", 0, [], 92800, "GPU", [9, 0], extra=extra).to_bytes()


def test_enforce_precompiled_refuses_what_would_compile() -> None:
    g = cudnn.pygraph()
    with pytest.raises(cudnn.SerializationError, match="include_kernels=False"):
        g.deserialize(plan_record(include_kernels=False), enforce_precompiled=True)
    with pytest.raises(cudnn.SerializationError, match="RUNTIME_COMPILATION"):
        g.deserialize(None, list(plan_record(runtime_compiled=True)), True)
    with pytest.raises(cudnn.SerializationError, match="RUNTIME_COMPILATION"):
        g.deserialize(plan_record(runtime_compiled=True), True)  # deserialize(data, enforce_precompiled)
    with pytest.raises(TypeError, match="a list must hold byte values"):
        g.deserialize(pyobj=[1, 2, 999])
    with pytest.raises(TypeError, match="deserialize: pyobj: expected the bytes or list of ints"):
        g.deserialize(pyobj=3.5)
    with pytest.raises(TypeError, match="deserialize: enforce_precompiled: expected True or False"):
        g.deserialize(plan_record(), enforce_precompiled="yes")
    with pytest.raises(TypeError, match="deserialize: missing the data"):
        g.deserialize()


def test_serialize_returns_byte_values_unless_asked_for_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn._graph.records import plan_reuse as plan_store

    cand = types.SimpleNamespace(config=object(), behavior_notes=[int(cudnn.behavior_note.RUNTIME_COMPILATION)])
    planset = types.SimpleNamespace(require_selected=lambda: cand)
    monkeypatch.setattr(pipeline_module.Pipeline, "plans", lambda self: planset)
    monkeypatch.setattr(plan_store, "record", lambda p, c, autotuned: PlanRecord("eng0", "{}", 0, [], 1, "GPU", [9, 0]))
    g = cudnn.pygraph()
    data = g.serialize()
    assert isinstance(data, list) and all(isinstance(b, int) for b in data)
    raw = g.serialize(as_bytes=True, include_kernels=False)
    assert isinstance(raw, bytes) and bytes(data) != raw
    rec = PlanRecord.from_bytes(raw)
    assert rec.extra == {"include_kernels": False, "runtime_compiled": True}
    with pytest.raises(TypeError, match="serialize: as_bytes: expected True or False, got 'yes'"):
        g.serialize(as_bytes="yes")
    with pytest.raises(TypeError):
        g.serialize(True)  # keyword-only, as in 1.32


# -- deserialize of a printed graph ----------------------------------------------------------------

def conv_bias_relu() -> cudnn.pygraph:
    g = cudnn.pygraph("cbr", HALF, FLOAT, FLOAT)
    x = g.tensor([4, 8, 16, 16], [2048, 1, 128, 8], name="x")
    w = g.tensor([16, 8, 3, 3], [72, 1, 24, 8], name="w")
    b = g.tensor([1, 16, 1, 1], name="b")
    y = g.conv_fprop(x, w, padding=[1, 1], name="conv")
    y = g.bias(y, b, name="bias")
    g.relu(y, negative_slope=0.1, upper_clip=6.0, name="act").set_output(True).set_name("out")
    return g


def every_op() -> cudnn.pygraph:
    g = cudnn.pygraph("many", FLOAT)
    a, m = g.tensor([2, 8, 16], name="a"), g.tensor([2, 16, 4], name="m")
    c = g.matmul(a, m, padding=1.0, name="mm")
    d = g.mul(c, 0.5, name="half")  # a Python number: a by-value constant
    e = g.swish(d, 2.0, name="sw")
    r = g.reduction(e, cudnn.reduction_mode.MAX, name="red")
    r.set_dim([2, 8, 1])
    t = g.transpose(e, [0, 2, 1], name="tr")
    s = g.slice(t, [slice(None), slice(1, 3)], name="sl")
    cat = g.concatenate([s, s], 1, name="cat")
    rs = g.reshape(cat, "rs", cudnn.reshape_mode.LOGICAL)
    rs.set_dim([2, 32])
    gi = g.gen_index(e, 1, name="gi")
    g.cmp_gt(e, 0.0, name="cmp").set_output(True).set_data_type(dt.BOOLEAN)
    for out in (r, rs, gi):
        out.set_output(True)
    return g


def norms() -> cudnn.pygraph:
    g = cudnn.pygraph("norms", dt.BFLOAT16, FLOAT, FLOAT)
    x = g.tensor([4, 128, 64], name="x")
    s, b = g.tensor([1, 1, 64], name="s"), g.tensor([1, 1, 64], name="b")
    y, mean, inv = g.layernorm(TRAIN, x, s, b, 1e-5, name="ln")
    y2, inv2 = g.rmsnorm(TRAIN, y, s, None, 1e-6, name="rms", zero_centered_gamma=True)
    dx, ds, db = g.layernorm_backward(y2, x, s, mean, inv, name="lnb")
    for t in (y2, inv2, dx, ds, db):
        t.set_output(True)
    return g


def batch_norms() -> cudnn.pygraph:
    g = cudnn.pygraph("bn", HALF, FLOAT, FLOAT)
    x = g.tensor([8, 16, 4, 4], [256, 1, 64, 16], name="x")
    ch = {n: g.tensor([1, 16, 1, 1], name=n, data_type=FLOAT) for n in ("s", "b", "rm", "rv", "peer")}
    y, mean, inv, nm, nv = g.batchnorm(x, ch["s"], ch["b"], ch["rm"], ch["rv"], 1e-5, 0.1, [ch["peer"]], name="bn")
    dx, ds, db = g.batchnorm_backward(y, x, ch["s"], mean, inv, name="dbn")
    for t in (nm, nv, dx, ds, db):
        t.set_output(True)
    return g


@pytest.mark.parametrize("make", [conv_bias_relu, every_op, norms, batch_norms])
@pytest.mark.parametrize("validated", [False, True], ids=["declared", "validated"])
def test_a_printed_graph_deserializes_to_the_same_graph(make: Any, validated: bool) -> None:
    g = make()
    if validated:
        g.validate()
    text = str(g)
    back = cudnn.pygraph()
    back.deserialize(text)
    assert json.loads(str(back)) == json.loads(text)
    back.validate()
    g.validate()
    assert json.loads(str(back)) == json.loads(str(g))
    assert back.key() == g.key()
    again = cudnn.pygraph()
    again.deserialize(None, str(back))  # the (handle, str) form
    again.validate()
    assert json.loads(str(again)) == json.loads(str(g))


def test_deserialized_graph_keeps_uids_and_names() -> None:
    g = conv_bias_relu()
    g.validate()
    for i, t in enumerate(cudnn._graph.build.pipeline.all_tensors(g.nodes), start=1):
        t.set_uid(100 + i)
    back = cudnn.pygraph()
    back.deserialize(str(g))
    assert back.query_tensor_attributes_of_uid(101).get_name() == "x"
    out = next(t for t in cudnn._graph.build.pipeline.all_tensors(back.nodes) if t.get_name() == "out")
    assert out.has_uid() and not out.get_is_virtual()
    assert back.name == "cbr" and back.context.io_data_type == HALF


def bad(doc: Any) -> str:
    return json.dumps(doc)


def base_doc() -> dict[str, Any]:
    g = conv_bias_relu()
    g.validate()
    return json.loads(str(g))


def test_malformed_graph_json_names_the_node_or_tensor() -> None:
    doc = base_doc()
    doc["nodes"][1]["inputs"]["IN_1"] = "nope"
    with pytest.raises(cudnn.SerializationError, match=r"node 1 \('bias', tag 'POINTWISE'\): input IN_1 names tensor "
                                                       r"'nope', which is not in the JSON's 'tensors'"):
        cudnn.pygraph().deserialize(bad(doc))
    doc = base_doc()
    doc["nodes"][0]["tag"] = "WARP_DRIVE"
    with pytest.raises(cudnn.SerializationError, match=r"node 0 \('conv', tag 'WARP_DRIVE'\): cudnn-py cannot rebuild "
                                                       r"WARP_DRIVE nodes"):
        cudnn.pygraph().deserialize(bad(doc))
    doc = base_doc()
    doc["tensors"]["w"]["data_type"] = "HALFISH"
    with pytest.raises(cudnn.SerializationError, match=r"tensor 'w': data_type: unknown data type 'HALFISH'"):
        cudnn.pygraph().deserialize(bad(doc))
    doc = base_doc()
    doc["nodes"][0]["stride"] = "wide"
    with pytest.raises(cudnn.SerializationError, match=r"node 0 \('conv'.*'stride' must be a list of ints"):
        cudnn.pygraph().deserialize(bad(doc))
    doc = base_doc()
    doc["nodes"][2]["outputs"]["OUT_0"] = "x"
    with pytest.raises(cudnn.SerializationError, match=r"output OUT_0: tensor 'x' is already defined"):
        cudnn.pygraph().deserialize(bad(doc))
    doc = base_doc()
    doc["tensors"]["x"]["dim"] = [4, -8, 16, 16]
    back = cudnn.pygraph()
    back.deserialize(bad(doc))
    with pytest.raises(cudnn.GraphError, match="dims must be positive"):
        back.validate()
    doc = base_doc()
    doc["nodes"] = "all of them"
    with pytest.raises(cudnn.SerializationError, match="'nodes' must be a list"):
        cudnn.pygraph().deserialize(bad(doc))
    with pytest.raises(cudnn.SerializationError, match="already has 3 nodes"):
        conv_bias_relu().deserialize(bad(base_doc()))
    with pytest.raises(cudnn.SerializationError, match="not a serialized cudnn-py plan"):
        cudnn.pygraph().deserialize("{not json")


# -- names: enums, datatypes, wrapper, loader helpers ---------------------------------------------------

def test_enum_members_of_the_official_api() -> None:
    assert cudnn.knob_type.NOT_SET == -1 and cudnn.knob_type.CTA_COUNT == 37
    assert [m.name for m in cudnn.scalar_type] == ["RUNTIME_PARAM", "COMPILE_TIME_CONST"]
    assert [m.name for m in cudnn.moe_grouped_matmul_mode] == ["NONE", "GATHER", "SCATTER"]
    # the official 1.32 values (its C++ MoeGroupedMatmulMode_t, NOT_SET = 0 first); lowering maps by name
    assert [int(m) for m in cudnn.moe_grouped_matmul_mode] == [1, 2, 3]
    backend = enums.C_ENUMS["cudnnMoeGroupedMatmulMode_t"]
    assert all(f"CUDNN_MOE_GROUPED_MATMUL_MODE_{m.name}" in backend for m in cudnn.moe_grouped_matmul_mode)
    official_knobs = ["NOT_SET", "SWIZZLE", "TILE_SIZE", "EDGE", "MULTIPLY", "SPLIT_K_BUF", "TILEK", "STAGES", "REDUCTION_MODE", "SPLIT_K_SLC", "IDX_MODE", "SPECFILT", "KERNEL_CFG", "WORKSPACE", "TILE_CGA_M", "TILE_CGA_N", "BLOCK_SIZE", "OCCUPANCY", "ARRAY_SIZE_PER_THREAD", "SPLIT_COLS", "TILE_ROWS", "TILE_COLS", "LOAD_SIZE", "CTA_COUNT", "STREAM_K", "SPLIT_P_SLC", "TILE_M", "TILE_N", "WARP_SPEC_CFG", "SWAP_AB", "INPUT_TMA_ENABLE", "OUTPUT_TMA_ENABLE"]
    assert set(official_knobs) <= set(cudnn.knob_type.__members__)


def test_public_enums_keep_every_header_member_but_the_count_sentinel() -> None:
    for public, (cname, prefix) in enums.PUBLIC_SOURCE.items():
        members = enums.C_ENUMS[cname]
        top = max(members.values())
        for member, value in members.items():
            if not member.startswith(prefix):
                continue
            name = member[len(prefix):]
            sentinel = value == top and name.rstrip("S").endswith("COUNT")
            assert sentinel != (name in enums.PUBLIC_ENUMS[public]), f"{public}.{name}"


def test_datatypes_module() -> None:
    d = cudnn.datatypes
    assert d._library_type(HALF) is HALF and d._library_type("bfloat16") == dt.BFLOAT16
    with pytest.raises(TypeError, match="No available conversion from type <class .object.>"):
        d._library_type(object)
    assert d.is_windows() is sys.platform.startswith("win") and cudnn.is_windows() == d.is_windows()
    assert d._is_torch_tensor(3) is False
    if "torch" not in sys.modules:
        try:
            import torch
        except ImportError:
            assert d.is_torch_available() is False and d.torch_available is False
            assert d._torch_to_cudnn_data_type("float16") is None and d._cudnn_to_torch_data_type(HALF) is None
            return
    import torch

    assert d.is_torch_available() and d._torch_to_cudnn_data_type(torch.bool) == dt.BOOLEAN
    assert d._cudnn_to_torch_data_type(HALF) in (torch.half, torch.float16)
    assert d._library_type(torch.float32) == FLOAT


def test_wrapper_default_handle_checks_the_stream_first() -> None:
    with pytest.raises(TypeError, match="get_default_handle: stream: cannot use builtins.str as a CUDA stream"):
        cudnn.wrapper.get_default_handle("now")
    cudnn.wrapper.destroy_default_handle()  # nothing handed out: nothing to do
    assert cudnn.Handle is cudnn.backend.Handle


def test_new_names_are_listed() -> None:
    for name in ("scalar_type", "moe_grouped_matmul_mode", "datatypes", "is_windows", "load_cudnn", "Handle"):
        assert name in dir(cudnn)
