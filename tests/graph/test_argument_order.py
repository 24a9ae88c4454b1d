"""Arguments are checked before anything needs a GPU, a handle or the plans, so a mistake is
seen on any machine: a wrong heuristics list, build policy, plan index, engine id, variant pack
or handle raises its TypeError (the official's class for a wrong argument) naming the call and
the argument, where it used to report the missing GPU (or the missing plans) first.

The steps that need a GPU are replaced by ones that fail the test if reached (`gpu_steps`), so
these tests say the same with and without a GPU; `test_without_a_gpu_the_mistake_is_reported`
runs the issue's calls for real where there is none."""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import pytest
from support.fake_backend import Backend, sub_graph

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.records import plan_reuse as plan_store
from cudnn._graph.run import runner as runner_module
from cudnn._lib import cuda

A, B, FALLBACK = cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK
HALF = cudnn.data_type.HALF


class ReachedTheGpu(AssertionError):
    """A step that needs a GPU (or the plans it makes) was reached."""


@pytest.fixture
def gpu_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ReachedTheGpu("a step that needs the GPU was reached")

    for step in ("op_graph", "create_plans", "build_plans", "build_candidate", "build_handle_ptr"):
        monkeypatch.setattr(pipeline_module.Pipeline, step, refuse)
    monkeypatch.setattr(plan_store, "adopt_cached", refuse)
    monkeypatch.setattr(cudnn.pygraph, "get_engine_count", refuse)


def relu_graph() -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=HALF)
    g.relu(g.tensor([2, 3], name="x"), name="r").set_output(True)
    return g


MODE = r"expected a cudnn\.heur_mode \([A-Z_, ]+\)"
MISTAKES: list[tuple[str, Any, type[Exception], str]] = [
    ("build(['A'])", lambda g: g.build(["A"]), TypeError,
     rf"^build: heuristics\[0\]: {MODE}, got 'A'; did you mean cudnn\.heur_mode\.A\?$"),
    ("build(heur_mode.A)", lambda g: g.build(A), TypeError,
     r"^build: heuristics: expected a list of cudnn\.heur_mode, got heur_mode\.A; one mode goes in a list too: "
     r"\[cudnn\.heur_mode\.A\]$"),
    ("build(heur_modes='A')", lambda g: g.build(heur_modes="A"), TypeError,
     r"^build: heuristics: expected a list of cudnn\.heur_mode, got 'A'$"),
    ("build([A, 3])", lambda g: g.build([A, 3]), TypeError, rf"^build: heuristics\[1\]: {MODE}, got 3$"),
    ("build([])", lambda g: g.build([]), cudnn.GraphError, r"^build: give at least one cudnn\.heur_mode$"),
    ("create_execution_plans(['a'])", lambda g: g.create_execution_plans(["a"]), TypeError,
     rf"^create_execution_plans: heuristics\[0\]: {MODE}, got 'a'; did you mean cudnn\.heur_mode\.A\?$"),
    ("create_execution_plans(B)", lambda g: g.create_execution_plans(heuristics=B), TypeError,
     r"^create_execution_plans: heuristics: expected a list of cudnn\.heur_mode"),
    ("build_plans('ALL')", lambda g: g.build_plans("ALL"), TypeError,
     r"^build_plans: policy: expected one of cudnn\.build_plan_policy\.HEURISTICS_CHOICE, "
     r"cudnn\.build_plan_policy\.ALL; got 'ALL'; did you mean cudnn\.build_plan_policy\.ALL\?$"),
    ("build_plans(None)", lambda g: g.build_plans(None), TypeError, r"^build_plans: policy: .*; got None$"),
    *((f"{op}(bad index)", call, TypeError, rf"^{op}: index: expected an int, got {bad}$")
      for op, call, bad in (
          ("select_plan", lambda g: g.select_plan("0"), "'0'"),
          ("build_plan_at_index", lambda g: g.build_plan_at_index(1.0), "1.0"),
          ("get_plan_name_at_index", lambda g: g.get_plan_name_at_index("x"), "'x'"),
          ("get_engine_and_knobs_at_index", lambda g: g.get_engine_and_knobs_at_index(None), "None"),
          ("get_workspace_size_plan_at_index", lambda g: g.get_workspace_size_plan_at_index("1"), "'1'"),
          ("get_behavior_notes_for_plan_at_index", lambda g: g.get_behavior_notes_for_plan_at_index(1.5), "1.5"),
          ("get_numerical_notes_for_plan_at_index", lambda g: g.get_numerical_notes_for_plan_at_index(True), "True"),
          ("execute_plan_at_index", lambda g: g.execute_plan_at_index({}, index="0"), "'0'"))),
    ("get_knobs_for_engine('1')", lambda g: g.get_knobs_for_engine("1"), TypeError,
     r"^get_knobs_for_engine: engine_id: expected an int \(0 \.\. get_engine_count\(\) - 1\), got '1'$"),
    ("create_execution_plan('1')", lambda g: g.create_execution_plan("1"), TypeError,
     r"^create_execution_plan: engine_id: expected an int"),
    ("create_execution_plan(1, [1])", lambda g: g.create_execution_plan(1, [1]), TypeError,
     r"^create_execution_plan: knobs: expected a dict of cudnn\.knob_type -> int, got \[1\]$"),
    ("select_numeric_notes(note)", lambda g: g.select_numeric_notes(cudnn.numerical_note.TENSOR_CORE), TypeError,
     r"^select_numeric_notes: expected a list of cudnn\.numerical_note, got numerical_note\.TENSOR_CORE$"),
    ("deselect_behavior_notes(['x'])", lambda g: g.deselect_behavior_notes(["x"]), TypeError,
     r"^deselect_behavior_notes: expected cudnn\.behavior_note values, got 'x'$"),
    ("execute([...])", lambda g: g.execute([1, 2]), TypeError,
     r"^execute: tensor_to_device_buffer: expected a dict of cudnn\.tensor \(or uid, or name\) -> buffer, got list; "
     r"a list of buffers goes with tensor_uids=\[\.\.\.\]$"),
    ("execute(handle='h')", lambda g: g.execute({}, None, "h"), TypeError,
     r"^execute: handle: expected a cudnn handle \(from cudnn\.create_handle\(\)\) or None, got str$"),
    ("execute_plan_at_index([...])", lambda g: g.execute_plan_at_index([1]), TypeError,
     r"^execute_plan_at_index: tensor_to_device_buffer: expected a dict"),
    ("autotune([])", lambda g: g.autotune([]), TypeError, r"^autotune: variant_pack: expected a dict"),
    ("autotune(warmup='3')", lambda g: g.autotune({}, warmup="3"), TypeError,
     r"^autotune: warmup: expected an int, got '3'$"),
    ("autotune(repeats=0)", lambda g: g.autotune({}, repeats=0), ValueError, r"^autotune: warmup must be >= 0 and "),
    ("autotune(handle='h')", lambda g: g.autotune({}, handle="h"), TypeError, r"^autotune: handle: expected a"),
    ("populate_cuda_graph(pack=[])", lambda g: g.populate_cuda_graph(None, [], None, 0), TypeError,
     r"^populate_cuda_graph: variant_pack: expected a dict"),
    ("update_cuda_graph(handle='h')", lambda g: g.update_cuda_graph("h", {}, None, 0), TypeError,
     r"^update_cuda_graph: handle: expected a cudnn handle"),
    ("populate_cuda_graph(graph='g')", lambda g: g.populate_cuda_graph(None, {}, None, "g"), TypeError,
     r"^expected a cudaGraph_t \(int, cuda\.bindings graph or torch\.cuda\.CUDAGraph\), got str$"),
]


@pytest.mark.parametrize(("call", "error", "message"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_reported_before_anything_needs_the_gpu(gpu_steps: None, call: Any, error: type[Exception],
                                                            message: str) -> None:
    with pytest.raises(error, match=message):
        call(relu_graph())


@pytest.mark.parametrize("call", [
    lambda g: g.build(), lambda g: g.build([A, FALLBACK]), lambda g: g.build((B,)), lambda g: g.build(heur_modes=[A]),
    lambda g: g.build(iter([A])),
    lambda g: g.build_plans(cudnn.build_plan_policy.ALL), lambda g: g.build_plans(1),
    lambda g: g.get_knobs_for_engine(0), lambda g: g.create_execution_plan(0, {}),
], ids=["build()", "build([A, FALLBACK])", "build((B,))", "build(heur_modes=[A])", "build(iterator)",
        "build_plans(ALL)", "build_plans(1)", "get_knobs_for_engine(0)",
        "create_execution_plan(0, {})"])
def test_what_is_right_goes_on_to_the_gpu(gpu_steps: None, call: Any) -> None:
    with pytest.raises(ReachedTheGpu):
        call(relu_graph())


def test_right_heuristics_go_on_to_the_state_check(gpu_steps: None) -> None:
    with pytest.raises(cudnn.GraphStateError, match=r"call build_operation_graph\(\) \(or build\(\)\) first"):
        relu_graph().create_execution_plans([FALLBACK])  # no operation graph yet: the mistake was the argument's


def test_the_graph_wrapper_checks_its_arguments_when_made() -> None:
    with pytest.raises(TypeError, match=rf"^cudnn\.Graph: heuristics\[0\]: {MODE}, got 'A'; did you mean "
                                        r"cudnn\.heur_mode\.A\?$"):
        cudnn.Graph(heuristics=["A"])
    with pytest.raises(ValueError, match="heuristics must be a list or tuple"):  # as the official's wrapper
        cudnn.Graph(heuristics=A)
    with pytest.raises(TypeError, match=r"^cudnn\.Graph: io_data_type: expected a cudnn\.data_type"):
        cudnn.Graph(io_data_type="fp61")
    assert cudnn.Graph(heuristics=(B,), io_data_type="fp16").state == "new"


_addresses = itertools.count(0x7C0000000000, 0x10000)


class Buffer:
    """A float32 device tensor stand-in (``__cuda_array_interface__``)."""

    def __init__(self, shape: tuple[int, ...] = (4, 4)) -> None:
        self.ptr, self.shape = next(_addresses), shape

    def data_ptr(self) -> int:
        return self.ptr

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": "<f4", "strides": None, "version": 3}


def test_a_built_graph_refuses_a_variant_pack_that_is_no_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    """What reached the runner as an AttributeError ('list' object has no attribute 'values') is
    the TypeError the official raises; a dict still runs."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=Buffer))
    g, A_, B_, C_ = sub_graph((4, 4))
    backend = Backend()
    backend.install(monkeypatch)
    runner = backend.runner(g)
    monkeypatch.setattr(pipeline_module.Pipeline, "current_runner", lambda self: runner)
    monkeypatch.setattr(runner_module, "is_live_handle", lambda h: True)
    a, b, c = Buffer(), Buffer(), Buffer()
    g.execute({A_: a, B_: b, C_: c}, Buffer((64,)), 1)
    assert len(backend.executed) == 1
    for pack in ([a, b, c], (a, b, c), None):
        with pytest.raises(TypeError, match=r"^execute: tensor_to_device_buffer: expected a dict of cudnn\.tensor "
                                            rf"\(or uid, or name\) -> buffer, got {type(pack).__name__}; a list of "
                                            r"buffers goes with tensor_uids=\[\.\.\.\]$"):
            g.execute(pack, None, 1)
    assert len(backend.executed) == 1


@pytest.mark.skipif(not cuda.why_no_gpu(), reason="a GPU is usable here")
def test_without_a_gpu_the_mistake_is_reported() -> None:
    """The issue's calls, with nothing stood in, on a machine without a GPU."""
    for call in (lambda g: g.build(["A"]), lambda g: g.build(A), lambda g: g.build_plans("ALL"),
                 lambda g: g.execute([1])):
        with pytest.raises(TypeError):
            call(relu_graph())
    g = relu_graph()
    with pytest.raises(cudnn.CudaUnavailableError):  # and a right call still finds no GPU
        g.build([A])
