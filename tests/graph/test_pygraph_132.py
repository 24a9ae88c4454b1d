"""1.32's graph-object surface without a GPU: constructor keywords, heuristics= beside
heur_modes=, chaining, plan introspection on stand-in candidates, graph inspection, cudnn.Tensor's
plain attributes, cudnn.Node / NodeType, the top-level helpers, and generated node names.
The same on a GPU against torch: tests/graph/test_pygraph_132_gpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.plans.candidates import Candidate, PlanSet
from cudnn._graph.records import plan_reuse as plan_store

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
A, FALLBACK = cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK
TILE = cudnn.knob_type.TILE_SIZE if "TILE_SIZE" in cudnn.knob_type.__members__ else list(cudnn.knob_type)[1]


def relu_graph(**kw: Any) -> tuple[cudnn.pygraph, Any, Any]:
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT, handle=1, **kw)
    x = g.tensor([2, 3, 4], name="x")
    y = g.relu(x, name="r").set_output(True)
    return g, x, y


class Built(Candidate):
    """A candidate whose plan is 'built' without cuDNN (or fails, with ``fails``)."""

    fails = False

    def build(self, handle: int, label: str, kernel_cache: Any = None) -> Any:
        if self.fails:
            raise cudnn.cudnnGraphNotSupportedError(3000, label, f"{self.name} does not build")
        self.plan, self.workspace = "PLAN", 0
        return self.plan


def with_plans(g: cudnn.pygraph, count: int = 3) -> list[Candidate]:
    """Stand-in candidates (engines 10, 11, ...; one knob each) as if the heuristics offered them."""
    ps = PlanSet(g.label())
    cands = [Built(None, 10 + i, {int(TILE): i}, [], [], "A" if i < 2 else "FALLBACK") for i in range(count)]
    ps.all.extend(cands)
    g._pipeline._plans = ps  # the pipeline's plan set, made by hand
    return cands


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """create_execution_plans with an operation graph stood in: the modes asked are recorded."""
    asked: list[list[Any]] = []
    monkeypatch.setattr(cudnn.pygraph, "_op_graph", lambda self: "OPGRAPH")
    monkeypatch.setattr(pipeline_module.Pipeline, "create_plans", lambda self, modes: asked.append(list(modes)))
    return asked


# -- constructor -------------------------------------------------------------------------------

def test_constructor_keywords_of_1_32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDNN_CUDA_GRAPH_RETENTION", raising=False)
    g = cudnn.pygraph("g", HALF, FLOAT, FLOAT, None, None, None, None, None, False, False,
                      cudnn.cuda_graph_retention.NONE, is_cuda_graph_replay_expected=True)
    assert g.get_cuda_graph_retention() is cudnn.cuda_graph_retention.NONE and g.is_cuda_graph_replay_expected
    plain = cudnn.pygraph()
    assert plain.get_cuda_graph_retention() is cudnn.cuda_graph_retention.PER_GRAPH
    assert plain.is_cuda_graph_replay_expected is False
    monkeypatch.setenv("CUDNN_CUDA_GRAPH_RETENTION", "None")  # the variable, any case, when none is given
    assert plain.get_cuda_graph_retention() is cudnn.cuda_graph_retention.NONE
    assert g.get_cuda_graph_retention() is cudnn.cuda_graph_retention.NONE
    assert cudnn.pygraph(cuda_graph_retention="per_graph").get_cuda_graph_retention().name == "PER_GRAPH"
    monkeypatch.setenv("CUDNN_CUDA_GRAPH_RETENTION", "sometimes")  # ignored, as the official does
    assert plain.get_cuda_graph_retention() is cudnn.cuda_graph_retention.PER_GRAPH
    with pytest.raises(TypeError, match=r"cuda_graph_retention: expected a cudnn\.cuda_graph_retention"):
        cudnn.pygraph(cuda_graph_retention=3)
    with pytest.raises(TypeError, match="is_cuda_graph_replay_expected"):
        cudnn.pygraph(is_cuda_graph_replay_expected="yes")
    assert [m.name for m in cudnn.cuda_graph_retention] == ["PER_GRAPH", "NONE"]
    assert str(cudnn.cuda_graph_retention.NONE) == "cuda_graph_retention.NONE"


def test_graph_helper_passes_graph_kwargs() -> None:
    with cudnn.graph(None, "h", is_cuda_graph_replay_expected=True, sm_count=4) as (g, uids):
        assert (g.name, g.is_cuda_graph_replay_expected, g.sm_count, uids) == ("h", True, 4, [])
    with pytest.raises(TypeError, match="'bogus' is not an argument of pygraph"), cudnn.graph(None, bogus=1):
        pass


def test_context_and_nodes_are_read_only_properties() -> None:
    g, _, _ = relu_graph()
    assert isinstance(g.context, cudnn.GraphContext) and g.context.io_data_type is HALF
    assert [n.name for n in g.nodes] == ["r"]
    with pytest.raises(AttributeError):
        g.nodes = []  # type: ignore[misc]


# -- heuristics= and heur_modes= ----------------------------------------------------------------

def test_heuristics_and_heur_modes_are_one_argument(planned: list[list[Any]]) -> None:
    g, _, _ = relu_graph()
    g.validate()
    g.create_execution_plans([A])
    g.create_execution_plans(heuristics=[FALLBACK])
    g.create_execution_plans(heur_modes=[A, FALLBACK])
    g.create_execution_plans()  # 1.32: (A, FALLBACK)
    assert planned == [[A], [FALLBACK], [A, FALLBACK], [A, FALLBACK]]
    for call in (lambda: g.create_execution_plans([A], heur_modes=[A]),
                 lambda: g.build(heuristics=[A], heur_modes=[A]),
                 lambda: g.build([A], heur_modes=[FALLBACK])):
        with pytest.raises(TypeError, match=r"give the heuristic modes once, as heuristics= \(the 1.32 name\) or "
                                            r"heur_modes=, not both"):
            call()


def test_build_without_arguments_builds_a_plan_as_1_32(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[Any] = []
    monkeypatch.setattr(cudnn.pygraph, "build_operation_graph", lambda self: steps.append("op_graph"))
    monkeypatch.setattr(cudnn.pygraph, "create_execution_plans", lambda self, m: steps.append(list(m)))
    monkeypatch.setattr(cudnn.pygraph, "check_support", lambda self: steps.append("check"))
    monkeypatch.setattr(cudnn.pygraph, "build_plans", lambda self: steps.append("plans"))
    monkeypatch.setattr(plan_store, "adopt_cached", lambda p, modes: None)
    monkeypatch.setattr(plan_store, "store", lambda p, modes, autotuned: None)
    g, _, _ = relu_graph()
    g.build()
    g.build(heuristics=[A], ctx=object())
    g.build(heur_modes=[FALLBACK])
    assert steps == ["op_graph", [A, FALLBACK], "check", "plans", "op_graph", [A], "check", "plans",
                     "op_graph", [FALLBACK], "check", "plans"]


# -- plans: chaining and introspection ---------------------------------------------------------------

def test_plan_methods_before_plans_say_which_call_comes_first() -> None:
    g, _, _ = relu_graph()
    assert g.plans == [] and g.selected_engine is None and g.get_execution_plan_count() == 0
    for call in (lambda: g.select_plan(0), g.backend_plan_entries, lambda: g.get_engine_and_knobs_at_index(0),
                 lambda: g.build_plan_at_index(0), lambda: g.deselect_engines(["eng1"]),
                 lambda: g.select_numeric_notes([cudnn.numerical_note.TENSOR_CORE])):
        with pytest.raises(cudnn.GraphStateError, match=r"needs the candidate plans: call create_execution_plans"):
            call()


def test_plan_introspection_agrees_with_the_plan_index_methods() -> None:
    g, _, _ = relu_graph()
    cands = with_plans(g)
    plans = g.plans
    assert plans == g.backend_plan_entries() and len(plans) == g.get_execution_plan_count() == 3
    for i, entry in enumerate(plans):
        assert entry.cpp_index == i and entry.name == g.get_plan_name_at_index(i) == cands[i].name
        assert g.get_engine_and_knobs_at_index(i) == (10 + i, {TILE: i}) == (entry.engine_id, entry.knobs)
        assert all(isinstance(k, cudnn.knob_type) for k in entry.knobs)
    assert [e.mode for e in plans] == [A, A, FALLBACK]
    assert g.selected_engine is None  # every plan is the cuDNN backend's
    with pytest.raises(IndexError, match=r"plan index 3 is out of range: there are 3 candidate plans"):
        g.select_plan(3)
    with pytest.raises(IndexError, match=r"plan index -1 is out of range: there are 3"):
        g.get_engine_and_knobs_at_index(-1)
    with pytest.raises(TypeError, match="select_plan: index: expected an int, got '0'"):
        g.select_plan("0")  # type: ignore[arg-type]


def test_select_plan_pins_and_the_filters_chain() -> None:
    g, _, _ = relu_graph()
    cands = with_plans(g)
    assert g.select_plan(2) is g and g._pipeline.plans().selected is cands[2]
    g.build_plans()  # the pinned plan, not the first that builds
    assert g._pipeline.plans().selected is cands[2]
    g.build_plans(cudnn.build_plan_policy.ALL, ctx=None)
    assert g._pipeline.plans().selected is cands[2] and all(c.plan for c in cands)
    assert g.build_plan_at_index(1) is g and g._pipeline.plans().selected is cands[1]
    same = (g.deselect_engines(["eng99"]).deselect_workspace_greater_than(1 << 30)
            .select_numeric_notes([]).deselect_numeric_notes([]).select_behavior_notes([])
            .deselect_behavior_notes([]))
    assert same is g and g.get_execution_plan_count() == 3
    assert g.deselect_engines(engine_names=["eng10"]).get_execution_plan_count() == 2
    assert g.deselect_workspace_greater_than(workspace_limit=0) is g


def test_a_pinned_plan_that_fails_raises_rather_than_running_another() -> None:
    g, _, _ = relu_graph()
    cands = with_plans(g)
    cands[1].fails = True  # type: ignore[attr-defined]
    g.select_plan(1)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"eng11_k.* does not build"):
        g.build_plans()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="does not build"):
        g.build()  # no re-planning under a pin: the pinned plan again
    g.select_plan(0).build_plans()
    assert g._pipeline.plans().selected is cands[0]


def test_create_execution_plan_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn._graph.facade import plan_queries as graph_module  # where pygraph's plan methods are

    g, _, _ = relu_graph()
    monkeypatch.setattr(cudnn.pygraph, "_engine", lambda self, engine_id: "ENGINE")
    monkeypatch.setattr(graph_module.eng, "knob_infos", lambda e: [])
    monkeypatch.setattr(graph_module.eng, "engine_config", lambda e, knobs, label: "CONFIG")
    monkeypatch.setattr(graph_module, "candidate_from_config",
                        lambda cfg, source: Built(None, 7, {}, [], [], source))
    assert g.create_execution_plan(7) is g
    assert g.get_engine_and_knobs_at_index(0) == (7, {}) and g.plans[0].mode is None


def test_knobs_are_read_once_and_a_refused_config_releases_its_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn._graph.facade import plan_queries as graph_module  # where pygraph's plan methods are
    from cudnn.backend.engine import KnobInfo

    g, _, _ = relu_graph()
    reads: list[object] = []
    closed: list[object] = []

    class Engine:
        def close(self) -> None:
            closed.append(self)

    def knob_infos(e: object) -> list[KnobInfo]:
        reads.append(e)
        return [KnobInfo(cudnn.knob_type.KERNEL_CFG, max_value=4, min_value=0, stride=2)]

    monkeypatch.setattr(cudnn.pygraph, "_engine", lambda self, engine_id: Engine())
    monkeypatch.setattr(graph_module.eng, "knob_infos", knob_infos)
    monkeypatch.setattr(graph_module.eng, "engine_config", lambda e, knobs, label: "CONFIG")
    monkeypatch.setattr(graph_module, "candidate_from_config",
                        lambda cfg, source: Built(None, 7, {}, [], [], source))
    assert [(k.min_value, k.max_value, k.stride) for k in g.get_knobs_for_engine(7)] == [(0, 4, 2)]
    g.create_execution_plan(7, {cudnn.knob_type.KERNEL_CFG: 2})
    with pytest.raises(cudnn.GraphError, match=r"KERNEL_CFG=3 is outside 0\.\.4 step 2 for engine 7"):
        g.create_execution_plan(7, {cudnn.knob_type.KERNEL_CFG: 3})
    assert len(reads) == 1  # one read of the engine's knobs for the listing and both configs
    assert len(closed) == 2  # the listing's engine and the refused config's; the kept config holds its own
    assert g.get_execution_plan_count() == 1


# -- graph inspection ---------------------------------------------------------------------------------

def test_graph_inspection() -> None:
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    x, w = g.tensor([2, 3], name="x"), g.tensor([3, 4], name="w", uid=7)
    c = g.matmul(x, w, name="mm")
    y = g.add(c, 2.0, name="plus").set_output(True)
    assert g.get_inputs() == [x, w]  # the number 2.0 is a constant the graph carries
    assert g.get_outputs() == [y] and g.get_node("mm").node_type is cudnn.NodeType.MATMUL
    assert g.get_node("nope") is None and g.find_tensor("nope") is None and g.find_tensor(99) is None
    assert g.find_tensor("x") is x and g.find_tensor(7) is w and g.find_tensor("mm::C") is c
    assert set(g.tensors) >= {"x", "w", "mm::C", "plus::OUT_0"} and g.tensors["x"] is x
    with pytest.raises(TypeError, match=r"find_tensor: expected a tensor name \(str\) or uid \(int\)"):
        g.find_tensor(1.5)  # type: ignore[arg-type]
    assert g.inspect()["tensors"]["w"]["dtype"] == "None"  # before validate: not inferred yet
    g.validate()
    view = g.inspect()
    assert view["context"] == {"io_data_type": "data_type.HALF", "compute_data_type": "data_type.FLOAT"}
    assert view["nodes"][0] == {"name": "mm", "type": "MATMUL", "inputs": {"A": "x", "B": "w"},
                                "outputs": {"C": "mm::C"}, "params": g.get_node("mm").params}
    assert view["nodes"][1]["type"] == "POINTWISE" and view["nodes"][1]["params"]["mode"] == "ADD"
    assert view["tensors"]["w"] == {"dim": [3, 4], "stride": [4, 1], "dtype": "data_type.HALF",
                                    "is_virtual": False, "uid": 7}
    json.dumps(view)


def test_a_shared_name_is_refused_by_find_tensor_and_left_out_of_tensors() -> None:
    g = cudnn.pygraph(io_data_type=HALF)
    a, b = g.tensor([2], name="t", uid=3), g.tensor([2], name="t", uid=4)
    g.add(a, b, name="s").set_output(True)
    assert "t" not in g.tensors and g.find_tensor(4) is b
    with pytest.raises(ValueError, match=r"2 tensors are named 't' \(uids \[3, 4\]"):
        g.find_tensor("t")


def test_nodes_have_the_official_node_surface() -> None:
    g, x, y = relu_graph()
    node = g.get_node("r")
    assert isinstance(node, cudnn.Node) and node.node_type is cudnn.NodeType.POINTWISE
    assert (node.name, node.inputs, node.outputs) == ("r", {"IN_0": x}, {"OUT_0": y})
    assert node.params["mode"] == "RELU_FWD" and repr(node) == "Node('r', POINTWISE)"
    node.validate()
    node.infer_properties(g.context)
    assert y.get_dim() == [2, 3, 4]
    official = [
                "COMPOSITE", "CONV_FPROP", "CONV_DGRAD", "CONV_WGRAD", "GENSTATS", "RESHAPE", "SLICE",
                "CONCATENATE", "TRANSPOSE", "ROPE", "ROPE_BWD", "MOE_GROUPED_MATMUL_BWD", "MATMUL",
                "MATMUL_FP8", "POINTWISE", "REDUCTION", "RMSNORM", "RMSNORM_BWD"]
    assert [m.name for m in cudnn.NodeType][:len(official)] == official and len(cudnn.NodeType) == 56
    assert int(cudnn.NodeType.COMPOSITE) == 1 and str(cudnn.NodeType.SDPA) == "NodeType.SDPA"
    assert cudnn.graph_types.NodeType is cudnn.NodeType and cudnn.graph_types.Tensor is cudnn.Tensor
    assert cudnn.nodes.Node is cudnn.Node


def test_node_types_of_ops() -> None:
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    x = g.tensor([1, 8, 4, 4], stride=[128, 1, 32, 8], name="x")
    w = g.tensor([8, 8, 1, 1], stride=[8, 1, 8, 8], name="w")
    g.conv_fprop(x, w, [0, 0], [1, 1], [1, 1], name="conv")
    s = g.tensor([1, 8, 1, 1], stride=[8, 1, 8, 8], name="s")
    g.batchnorm_inference(x, s, s, s, s, name="bn")
    g.reduction(x, cudnn.reduction_mode.ADD, name="red")
    types = {n.name: n.node_type.name for n in g.nodes}
    assert types == {"conv": "CONV_FPROP", "bn": "BATCHNORM_INFERENCE", "red": "REDUCTION"}


# -- cudnn.Tensor -------------------------------------------------------------------------------------

def test_tensor_plain_attributes_are_its_getters_and_setters() -> None:
    assert cudnn.Tensor is cudnn.tensor
    g = cudnn.pygraph(io_data_type=HALF)
    t = g.tensor([2, 3], name="t")
    assert (t.name, t.dim, t.stride, t.data_type) == ("t", [2, 3], [3, 1], cudnn.data_type.NOT_SET)
    assert (t.uid, t.uid_assigned) == (0, False)
    assert (t.is_virtual, t.is_pass_by_value, t.pass_by_value, t.ragged_offset) == (False, False, None, None)
    assert (t.reordering_type, t.ragged_offset_multiplier, t.alignment_value) == \
        (cudnn.tensor_reordering.NONE, 1, 1)
    assert (t.dim_assigned, t.stride_assigned, t.scalar_type) == (True, True, None)
    t.name, t.dim, t.stride, t.data_type, t.uid = "u", [4, 5], [5, 1], FLOAT, 9
    assert (t.get_name(), t.get_dim(), t.get_stride(), t.get_data_type(), t.get_uid()) == ("u", [4, 5], [5, 1],
                                                                                           FLOAT, 9)
    t.dim.append(7)  # a copy, as the getter's
    assert t.get_dim() == [4, 5]
    t.is_virtual = True
    assert t.get_is_virtual() and not t.is_output
    with pytest.raises(TypeError, match="uid"):
        t.uid = -1
    assert t.set_alignment_value(3) is t and t.alignment_value == 3 and t.get_alignment() == 16
    t.alignment_value = 8
    assert t.alignment_value == 8
    with pytest.raises(ValueError, match="alignment_value must be >= 1"):
        t.set_alignment_value(0)
    assert g.tensor([2], alignment_value=5).alignment_value == 5


def test_inferred_layout_is_not_assigned() -> None:
    g = cudnn.pygraph(io_data_type=HALF)
    y = g.relu(g.tensor([2, 3], name="x"), name="r").set_output(True)
    assert not y.dim_assigned
    g.validate()
    assert y.dim == [2, 3] and not y.dim_assigned and not y.stride_assigned


def test_tensor_validate() -> None:
    t = cudnn.Tensor()
    with pytest.raises(ValueError, match="dims not set"):
        t.validate()
    t.set_dim([2, 3])
    with pytest.raises(ValueError, match="strides not set"):
        t.validate()
    t.set_stride([3])
    with pytest.raises(ValueError, match=r"2 dims \[2, 3\] but 1 strides"):
        t.validate()
    t.set_stride([3, 1]).set_is_virtual(True).set_is_pass_by_value(True)
    with pytest.raises(ValueError, match="can't be both virtual and pass_by_value"):
        t.validate()
    t.set_is_virtual(False).validate()


def test_scalars_say_their_scalar_type() -> None:
    g = cudnn.pygraph(io_data_type=FLOAT)
    s = g.tensor_scalar(2.0, cudnn.scalar_type.RUNTIME_PARAM, name="s")
    assert s.pass_by_value == 2.0 and s.is_pass_by_value
    assert s.scalar_type in (cudnn.scalar_type.RUNTIME_PARAM, None)


# -- generated node names -------------------------------------------------------------------------------

def test_generated_names_never_take_a_name_the_user_gave() -> None:
    g = cudnn.pygraph(io_data_type=HALF)
    x = g.tensor([2, 3], name="x")
    a = g.relu(x, name="1")
    b = g.relu(a)  # index 1 is taken by the user's "1"
    c = g.relu(b, name="3")
    d = g.relu(c)  # index 3 is taken: 4
    assert [n.name for n in g.nodes] == ["1", "2", "3", "4"] and d.get_name() == "4::OUT_0"
    with pytest.raises(cudnn.GraphError, match=r"a node named '2' \(the name an unnamed op was given\) is already"):
        g.relu(d, name="2")
    with pytest.raises(cudnn.GraphError, match=r"a node named '1' is already in this graph"):
        g.relu(d, name="1")


# -- top-level helpers -----------------------------------------------------------------------------------

def test_sdpa_capabilities_and_device_info() -> None:
    caps = cudnn.sdpa_capabilities()
    assert isinstance(caps, frozenset) and caps == frozenset()
    info = cudnn.DeviceInfo(0)
    assert info.ordinal == 0 and repr(info) == "DeviceInfo(cuda:0)"
    with pytest.raises(TypeError, match="DeviceInfo: ordinal: expected an int"):
        cudnn.DeviceInfo("0")  # type: ignore[arg-type]
    assert cudnn.handle is cudnn.Handle


def test_device_info_without_a_gpu_says_why() -> None:
    from cudnn._lib import cuda

    if cuda.device_count():
        pytest.skip("a GPU is visible: tests/graph/test_pygraph_132_gpu.py reads its facts")
    with pytest.raises((cudnn.CudaUnavailableError, cudnn.CudaError, ValueError, RuntimeError)):
        _ = cudnn.DeviceInfo(0).sm_count


def test_collect_env_prints_a_report() -> None:
    out = subprocess.run([sys.executable, "-m", "cudnn.collect_env", "--json"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["cudnn-py"]["cudnn-py"] == cudnn.__version__
    assert {"Python / Platform", "CUDA / GPUs", "PyTorch", "Environment Variables"} <= set(report)
    from cudnn import collect_env

    text = collect_env.format_report(collect_env.collect_env_info())
    assert "==== cudnn-py ====" in text and "libcudnn (loaded)" in text
