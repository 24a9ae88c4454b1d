"""cudnn.Graph without a GPU: recording, every naming rule of seed 000, uids, io tuples, the
errors of bad calls, failed blocks, the helpers, and ``cudnn.graph`` as package and function.

Only public behaviour is read: ``Graph.state``, ``Graph.resolve``, ``Graph.input_names`` /
``output_names``, error messages, and the tensors the ops return. Names, uids and io tuples
are settled when the block ends, before the one step that needs a GPU; that step is pygraph's
four public cuDNN calls, which the ``gpu_steps`` fixture stands in for (recording what the
wrapper asked) so that a graph gets to "built" on any machine. Tests that request
``real_build`` let it reach cuDNN.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import weakref
from typing import Any

import numpy as np
import pytest

import cudnn
from cudnn._graph.build.pipeline import all_tensors, assign_uids
from cudnn._graph.model.graph_errors import ExecutionInputError, GraphError, GraphStateError
from cudnn._lib.cuda import CudaError, why_no_gpu
from cudnn.wrapper import calls

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
FAKE = 0xDEAD0000  # a device address nothing reads
GPU_STEPS = ("build_operation_graph", "create_execution_plans", "check_support", "build_plans")
PASS_THROUGH = {"get_workspace_size", "get_workspace_size_plan_at_index", "serialize", "deserialize",
                "query_tensor_attributes_of_uid", "to_json", "to_dot", "save_picture", "describe_plans",
                "find_tensor", "get_node", "get_inputs", "get_outputs", "inspect", "get_cuda_graph_retention"}


class FakeCuda:
    """A stand-in for a GPU tensor: a __cuda_array_interface__ with a pointer never dereferenced."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None, typestr: str = "<f2",
                 ptr: int = FAKE) -> None:
        size = int(typestr[2:])
        if strides is None:
            strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "version": 3,
                                         "strides": tuple(s * size for s in strides), "data": (ptr, False)}


def nhwc(n: int, c: int, h: int, w: int) -> FakeCuda:
    return FakeCuda((n, c, h, w), (h * w * c, 1, w * c, c))


@pytest.fixture
def real_build() -> None:
    """Requested by tests whose build really calls cuDNN (no stand-ins)."""


@pytest.fixture(autouse=True)
def gpu_steps(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Stand in for pygraph's public cuDNN steps; returns the calls the wrapper made, in order."""
    made: list[tuple[str, tuple[Any, ...]]] = []
    if "real_build" not in request.fixturenames:
        for step in GPU_STEPS:
            monkeypatch.setattr(cudnn.pygraph, step, lambda self, *args, step=step: made.append((step, args)))
    return made


def conv_graph(named: bool = True, **graph_kwargs: Any) -> tuple[cudnn.Graph, FakeCuda, FakeCuda, Any]:
    x, w = nhwc(8, 64, 56, 56), nhwc(32, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, **graph_kwargs) as graph:
        kw = {"name": "conv2d"} if named else {}
        y = graph.conv_fprop(x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], **kw)
        y.set_output(True)
    assert graph.state == "built"
    return graph, x, w, y


# -- naming rules -------------------------------------------------------------------------------

def test_keyword_arguments_are_node_port() -> None:
    x, w = nhwc(8, 64, 56, 56), nhwc(32, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["conv2d::image", "conv2d::weight"],
                     outputs=["conv_out"]) as graph:
        y = graph.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv2d")
        X, W = graph.resolve(x), graph.resolve(w)  # names resolve while recording
        assert isinstance(X, cudnn.tensor) and X is not W
        assert graph.resolve("conv2d::image") is X and graph.resolve("conv2d::weight") is W
        assert graph.resolve("conv2d::Y") is y
        y.set_output(True).set_name("conv_out")
        assert graph.resolve("conv_out") is y
        assert graph.input_names is None  # resolved when the block ends
    assert graph.state == "built"
    assert graph.input_names == ("conv2d::image", "conv2d::weight")
    assert graph.output_names == ("conv2d::Y",)  # the name dict calls return it under
    assert (X.get_uid(), W.get_uid(), y.get_uid()) == (1, 2, 3)
    assert [graph.resolve(u) for u in (1, 2, 3)] == [X, W, y]
    assert (y.get_dim(), y.get_stride(), y.get_data_type()) == ([8, 32, 56, 56], [100352, 1, 1792, 32], HALF)
    # the tensors made from the objects carry the names, so the Runner's messages show them
    assert (X.get_name(), W.get_name()) == ("conv2d::image", "conv2d::weight")


def test_positional_arguments_are_node_index() -> None:
    graph, x, w, y = conv_graph()
    assert graph.resolve("conv2d::0") is graph.resolve(x) and graph.resolve("conv2d::weight") is graph.resolve(w)
    graph.set_io_tuples(["conv2d::0", "conv2d::weight"], [y])
    assert (graph.input_names, graph.output_names) == (("conv2d::0", "conv2d::weight"), ("conv2d::Y",))
    with pytest.raises(GraphError, match=r"no tensor of this graph is named 'conv2d::image'.*conv2d::0"):
        graph.set_io_tuples(["conv2d::image", "conv2d::weight"], [y])
    assert graph.input_names == ("conv2d::0", "conv2d::weight")  # a refused call changes nothing


def test_unnamed_nodes_are_op_dot_count() -> None:
    graph, x, w, y = conv_graph(named=False)
    assert [n.name for n in graph.pygraph.nodes] == ["conv_fprop.0"]
    graph.set_io_tuples(["conv_fprop.0::0", "conv_fprop.0::weight"], ["conv_fprop.0::Y"])
    assert [graph.resolve(n) for n in graph.input_names or ()] == [graph.resolve(x), graph.resolve(w)]
    assert graph.resolve("conv_fprop.0::Y") is y and graph.output_names == ("conv_fprop.0::Y",)


def test_the_count_is_per_op_and_counts_named_calls_too() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 1, 1)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        a = graph.conv_fprop(x, w, name="first")
        b = graph.conv_fprop(a, w)
        c = graph.relu(b)
        d = graph.relu(c, name="act")
        e = graph.relu(d)
        e.set_output(True)
    assert [n.name for n in graph.pygraph.nodes] == ["first", "conv_fprop.1", "relu.0", "act", "relu.2"]
    assert graph.resolve("conv_fprop.1::0") is a and graph.resolve("relu.2::OUT_0") is e
    assert graph.resolve("first::0") is graph.resolve(x) and graph.resolve("first::1") is graph.resolve(w)
    assert graph.resolve("conv_fprop.1::1") is graph.resolve(w)


def test_names_given_with_set_name() -> None:
    w = nhwc(16, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X = graph.tensor(name="X", dim=[8, 64, 8, 8], stride=[4096, 1, 512, 64])
        W = graph.tensor_like(w).set_name("W")
        y = graph.conv_fprop(image=X, weight=W, padding=[1, 1], name="conv2d")
        y.set_output(True).set_name("conv_out")
    graph.set_io_tuples(["X", "W"], ["conv_out"])
    assert (graph.input_names, graph.output_names) == (("X", "W"), ("conv2d::Y",))
    assert (graph.resolve("X"), graph.resolve("W"), graph.resolve("conv_out")) == (X, W, y)
    assert graph.resolve("conv2d::image") is X and graph.resolve("conv2d::weight") is W


def test_integer_uids_before_and_after_the_build() -> None:
    w = nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X = graph.tensor(name="X", dim=[2, 8, 4, 4], stride=[128, 1, 32, 8], uid=10)
        y = graph.conv_fprop(X, w, padding=[1, 1], name="c")
        y.set_output(True)
        assert graph.resolve(10) is X  # given: resolves at once
        with pytest.raises(GraphError, match="no tensor has uid 1 .uids are assigned when the `with` block ends"):
            graph.resolve(1)
        graph.set_io_tuples([10, 1], [2])  # 1 and 2 are assigned when the block ends
    assert (graph.input_names, graph.output_names) == (("c::0", "c::1"), ("c::Y",))
    assert graph.resolve(1) is graph.resolve(w) and graph.resolve(2) is y and y.get_uid() == 2
    with pytest.raises(GraphError, match=r"inputs\[1\] \(uid 99\): no tensor of this graph has uid 99; "
                                         r"its uids are \[1, 2, 10\]"):
        graph.set_io_tuples([10, 99], [2])


def test_tensor_objects() -> None:
    w = nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X = graph.tensor(name="X", dim=[2, 8, 4, 4], stride=[128, 1, 32, 8])
        unused = graph.tensor(name="U", dim=[1], stride=[1])
        y = graph.conv_fprop(X, w, padding=[1, 1], name="c")
        y.set_output(True)
    W = graph.resolve(w)
    assert graph.resolve(X) is X and graph.resolve(y) is y
    graph.set_io_tuples([W, X], [y])
    assert (graph.input_names, graph.output_names) == (("c::1", "c::0"), ("c::Y",))
    with pytest.raises(GraphError, match="declared with graph.tensor.. but used by no op"):
        graph.set_io_tuples([W, unused], [y])
    foreign = cudnn.pygraph().tensor(name="X", dim=[1], stride=[1])
    with pytest.raises(GraphError, match="not a tensor of this graph"):
        graph.set_io_tuples([W, foreign], [y])
    assert graph.input_names == ("c::1", "c::0")


def test_build_objects_by_identity_in_any_order() -> None:
    graph, x, w, y = conv_graph(named=False)
    graph.set_io_tuples([w, x], [y])
    assert graph.input_names == ("conv_fprop.0::weight", "conv_fprop.0::0")
    twin = nhwc(8, 64, 56, 56)  # same shape, another object
    with pytest.raises(GraphError, match="was not used to build this graph: tensor objects are matched by identity"):
        graph.set_io_tuples([w, twin], [y])


def test_one_object_used_twice_is_one_tensor() -> None:
    x = nhwc(2, 8, 4, 4)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.add(x, x).set_output(True)
    assert graph.resolve("add.0::0") is graph.resolve("add.0::1") is graph.resolve(x)
    with pytest.raises(GraphError, match=r"inputs\[1\] \('add.0::1'\) names the same tensor as inputs\[0\]"):
        graph.set_io_tuples(["add.0::0", "add.0::1"], ["add.0::OUT_0"])
    graph.set_io_tuples([x], ["add.0::OUT_0"])
    assert (graph.input_names, graph.output_names) == (("add.0::0",), ("add.0::OUT_0",))


def test_lists_of_tensors_and_list_results() -> None:
    a, b = FakeCuda((2, 3, 4)), FakeCuda((2, 5, 4))
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        c = graph.concatenate([a, b], axis=1)
        d = graph.concatenate(inputs=(c, a), axis=1, name="cat")
        d.set_output(True)
    assert graph.resolve("concatenate.0::0[0]") is graph.resolve(a)
    assert graph.resolve("concatenate.0::0[1]") is graph.resolve(b)
    assert graph.resolve("cat::inputs[0]") is c and graph.resolve("cat::inputs[1]") is graph.resolve(a)
    x, scale, bias = FakeCuda((4, 8, 1, 1)), FakeCuda((1, 8, 1, 1), typestr="<f4"), FakeCuda((1, 8, 1, 1), typestr="<f4")
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        y, mean, inv = graph.layernorm(cudnn.norm_forward_phase.TRAINING, x, scale, bias, 1e-5, name="ln")
        for t in (y, mean, inv):
            t.set_output(True)
    graph.set_io_tuples(["ln::1", "ln::2", "ln::3"], ["ln::Y", "ln::MEAN", "ln::INV_VARIANCE"])
    assert [graph.resolve(n) for n in graph.input_names or ()] == [graph.resolve(o) for o in (x, scale, bias)]
    assert [graph.resolve(n) for n in graph.output_names or ()] == [y, mean, inv]


def test_python_numbers_stay_graph_constants() -> None:
    x = nhwc(2, 8, 4, 4)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=[x], outputs=["mul.0::OUT_0"]) as graph:
        graph.mul(x, 0.5).set_output(True)
    assert graph.input_names == ("mul.0::0",)  # one input: the number is not one
    assert graph.resolve("mul.0::IN_1").get_value() == 0.5


def test_name_given_positionally() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    mode = cudnn.convolution_mode.CROSS_CORRELATION
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.conv_fprop(x, w, [1, 1], [1, 1], [1, 1], mode, FLOAT, "c").set_output(True)
    assert graph.pygraph.nodes[0].name == "c" and graph.resolve("c::1") is graph.resolve(w)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.conv_fprop(x, w, [1, 1], [1, 1], [1, 1], mode, FLOAT, "").set_output(True)  # "": unnamed
    assert graph.pygraph.nodes[0].name == "conv_fprop.0" and graph.resolve("conv_fprop.0::1") is graph.resolve(w)


def test_a_name_two_tensors_carry_is_ambiguous_where_it_is_used() -> None:
    x = nhwc(2, 8, 4, 4)
    # names need not be unique (as in the official); a name two tensors carry resolves to neither
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        a = graph.relu(x, name="a").set_name("t")
        graph.relu(a, name="b").set_name("t").set_output(True)
    with pytest.raises(GraphError, match="the name 't' is ambiguous: 2 tensors of this graph have it"):
        graph.resolve("t")
    assert graph.resolve("b::0").get_name() == "t"


def test_a_dead_object_no_longer_resolves() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    alive, old_id = weakref.ref(x), id(x)
    del x
    assert alive() is None  # freed at once: the graph does not keep the user's tensor alive
    for _ in range(1000):  # CPython hands the freed memory to the next object of that type
        other = nhwc(2, 8, 4, 4)
        if id(other) == old_id:
            break
    else:
        pytest.skip("no new object got the dead object's id")
    with pytest.raises(GraphError, match="was not used to build this graph"):
        graph.resolve(other)  # same id, another object: not taken for the dead one
    assert graph.resolve("c::0").get_name() == "c::0"  # the name stays


# -- io tuples --------------------------------------------------------------------------------

def test_io_tuples_given_inside_the_block_are_checked_at_its_end(gpu_steps: list[Any]) -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
        y.set_output(True)
        graph.set_io_tuples(["c::0", "c::1"], [y])
        assert graph.input_names is None and graph.state == "recording"
    assert (graph.input_names, graph.output_names) == (("c::0", "c::1"), ("c::Y",))
    gpu_steps.clear()
    with pytest.raises(GraphError, match="no tensor of this graph is named 'c::image'"):
        with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::image", "c::1"],
                         outputs=["c::Y"]) as bad:
            bad.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    assert bad.state == "failed"
    assert gpu_steps == []  # refused before any step that needs a GPU


REST = ["r::OUT_0", "scale.0::OUT_0"]


@pytest.mark.parametrize(("inputs", "outputs", "message"), [
    (["c::0"], ["c::Y", *REST], r"the graph inputs \['c::1'\] are missing from inputs"),
    (["c::0", "c::1"], REST, r"the graph outputs \['c::Y'\] are missing from outputs"),
    (["c::0", "c::1", "c::Y"], REST, r"inputs\[2\] \('c::Y'\) is a graph output, not a graph input"),
    (["c::0"], ["c::1", "c::Y", *REST], r"outputs\[0\] \('c::1'\) is a graph input, not a graph output"),
    (["c::0", "c::1"], ["v::Y", "c::Y", *REST], r"outputs\[0\] \('v::Y'\) is an intermediate \(virtual\) tensor"),
    (["c::0", "c::0"], ["c::Y", *REST], r"inputs\[1\] \('c::0'\) names the same tensor as inputs\[0\]"),
    (["c::0", "c::1"], ["c::Y", "c::Y", *REST], r"outputs\[1\] \('c::Y'\) names the same tensor as outputs\[0\]"),
    (["c::0", 3.5], ["c::Y", *REST], r"inputs\[1\] \(a builtins.float\): cannot refer to a tensor with"),
    (["c::0", "c::1"], ["c::Y", "scale.0::IN_1", *REST], r"outputs\[1\] \('scale.0::IN_1'\) is a constant the graph"),
])
@pytest.mark.parametrize("when", ["after the block", "as Graph(inputs=, outputs=)"])
def test_bad_io_tuples(inputs: list[Any], outputs: list[Any], message: str, when: str,
                       gpu_steps: list[Any]) -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    io = {"inputs": inputs, "outputs": outputs} if when.startswith("as") else {}

    def record(graph: cudnn.Graph) -> None:
        y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
        y.set_output(True)
        graph.relu(graph.conv_fprop(x, w, padding=[1, 1], name="v"), name="r").set_output(True)
        graph.scale(y, 2.0).set_output(True)

    if io:
        with pytest.raises(GraphError, match=message):
            with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, **io) as graph:
                record(graph)
        assert graph.state == "failed" and gpu_steps == []
        return
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        record(graph)
    graph.set_io_tuples(["c::0", "c::1"], ["c::Y", *REST])  # the valid one, kept on errors
    valid = (graph.input_names, graph.output_names)
    assert valid == (("c::0", "c::1"), ("c::Y", *REST))
    with pytest.raises(GraphError, match=message):
        graph.set_io_tuples(inputs, outputs)
    assert (graph.input_names, graph.output_names) == valid and graph.state == "built"


def test_io_tuples_must_be_lists() -> None:
    graph, _, _, y = conv_graph()
    with pytest.raises(ValueError, match="inputs must be a list or tuple"):
        graph.set_io_tuples("conv2d::0", [y])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outputs must be a list or tuple"):
        graph.set_io_tuples(["conv2d::0"], "conv2d::Y")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outputs must be a list or tuple"):
        cudnn.Graph(inputs=["a"], outputs="b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give both inputs= and outputs="):
        cudnn.Graph(inputs=["a"])


# -- calls that fail before reaching cuDNN ------------------------------------------------------

def test_positional_calls_check_the_count() -> None:
    graph, x, w, y = conv_graph()
    with pytest.raises(ExecutionInputError, match="set_io_tuples"):
        graph(x, w)
    graph.set_io_tuples(["conv2d::0", "conv2d::weight"], [y])
    with pytest.raises(ExecutionInputError, match=r"takes 2 positional inputs \['conv2d::0', 'conv2d::weight'\], got 3"):
        graph(x, w, x)
    with pytest.raises(ExecutionInputError, match="got 1"):
        graph(x)


def test_a_cpu_tensor_is_refused_naming_the_input() -> None:
    torch = pytest.importorskip("torch")  # without torch or CuPy, no outputs can be allocated at all
    graph, _, w, _ = conv_graph(inputs=["conv2d::0", "conv2d::weight"], outputs=["conv2d::Y"])
    cpu = torch.empty(8, 64, 56, 56, dtype=torch.float16)
    with pytest.raises(ExecutionInputError, match="conv2d::0: a torch tensor on cpu; the graph reads GPU memory"):
        graph(cpu, w)
    with pytest.raises(ExecutionInputError, match="conv2d::0: a numpy tensor on cpu"):
        graph(np.zeros((8, 64, 56, 56), np.float16), w)
    with pytest.raises(ExecutionInputError, match="conv2d::0: a torch tensor on cpu"):
        graph({"conv2d::0": cpu, "conv2d::weight": w})


def test_dict_calls_check_names() -> None:
    graph, x, w, _ = conv_graph()
    with pytest.raises(ExecutionInputError, match="dict key 'conv2d::image': no tensor of this graph is named"):
        graph({"conv2d::image": x, "conv2d::weight": w})
    with pytest.raises(ExecutionInputError, match=r"the dict lacks the graph inputs \['conv2d::weight'\]"):
        graph({"conv2d::0": x})
    other = nhwc(8, 64, 56, 56)
    with pytest.raises(ExecutionInputError, match="'conv2d::0' and .* name the same tensor .* different buffers"):
        graph({"conv2d::0": x, x: other, "conv2d::weight": w})
    with pytest.raises(ExecutionInputError, match="dict key uid 77"):
        graph({"conv2d::0": x, "conv2d::weight": w, 77: x})
    with pytest.raises(ExecutionInputError, match="dict key 'conv2d::Y' is an intermediate .virtual. tensor"):
        with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as chain:
            chain.relu(chain.conv_fprop(x, w, padding=[1, 1], name="conv2d")).set_output(True)
        chain({"conv2d::0": x, "conv2d::Y": other})


def test_dict_keys_in_every_form_resolve() -> None:
    graph, x, w, y = conv_graph()
    X, W = graph.resolve(x), graph.resolve(w)
    for name, t, keys in (("conv2d::0", X, [x, X, X.get_uid()]), ("conv2d::weight", W, [w, W, W.get_uid()]),
                          ("conv2d::Y", y, [y, y.get_uid()])):
        for key in keys:
            assert graph.resolve(key) is t
            # a dict call takes the key for that tensor: two buffers under the two keys are refused
            with pytest.raises(ExecutionInputError, match=rf"'{name}' and .* name the same tensor \({name}\)"):
                graph({name: nhwc(1, 1, 1, 1), key: nhwc(1, 1, 1, 1)})


def test_calls_before_the_graph_exists_are_refused() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    graph = cudnn.Graph(io_data_type=HALF)
    assert graph.state == "new" and graph.input_names is None
    with pytest.raises(GraphStateError, match="no graph yet"):
        graph(x, w)
    with pytest.raises(GraphStateError, match="no graph yet"):
        graph.resolve("c::0")
    with pytest.raises(GraphStateError, match="inside `with cudnn.Graph"):
        graph.conv_fprop(x, w)
    with graph:
        assert graph.state == "recording"
        y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
        y.set_output(True)
        with pytest.raises(GraphStateError, match="call it after the block"):
            graph({"c::0": x})
    assert graph.state == "built"
    with pytest.raises(GraphStateError, match="is built"):
        graph.relu(y)
    with pytest.raises(GraphStateError, match="a Graph is built once"):
        graph.__enter__()


# -- failures leave nothing half-built ---------------------------------------------------------

def test_an_error_in_the_block_discards_the_graph() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    graph = cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT)
    with pytest.raises(KeyError):
        with graph:
            graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
            raise KeyError("user code")
    assert graph.state == "failed" and graph.input_names is None
    for attempt in (lambda: graph({"c::0": x}), lambda: graph.set_io_tuples(["c::0"], ["c::Y"]),
                    lambda: graph.pygraph, lambda: graph.get_workspace_size(), lambda: graph.resolve("c::0")):
        with pytest.raises(GraphStateError, match="failed and holds nothing .*KeyError"):
            attempt()
    assert "failed" in repr(graph)


def test_a_failing_validation_discards_the_graph(gpu_steps: list[Any]) -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 4, 3, 3)  # 8 input channels, weight made for 4 per group: fine
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as good:
        good.conv_fprop(x, w, padding=[1, 1]).set_output(True)
    assert good.state == "built"
    gpu_steps.clear()
    bad_w = nhwc(8, 3, 3, 3)  # 3 does not divide 8
    with pytest.raises(GraphError, match="8 input channels are not a multiple of the filter's 3"):
        with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
            graph.conv_fprop(x, bad_w, padding=[1, 1]).set_output(True)
    assert graph.state == "failed" and gpu_steps == []
    with pytest.raises(GraphStateError, match="building raised GraphError: .*not a multiple"):
        graph.pygraph  # noqa: B018


def test_a_duplicate_node_name_is_refused() -> None:
    x = nhwc(2, 8, 4, 4)
    with pytest.raises(GraphError, match="node name 'a' is already used"):
        with cudnn.Graph(io_data_type=HALF) as graph:
            graph.relu(graph.relu(x, name="a"), name="a")
    assert graph.state == "failed"


def test_a_rejected_op_registers_nothing() -> None:
    x = nhwc(2, 8, 4, 4)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        with pytest.raises(TypeError, match="bogus"):
            graph.relu(x, bogus=1)
        with pytest.raises(GraphError, match="B is required"):
            graph.matmul(x, None)
        assert graph.pygraph.nodes == []
        with pytest.raises(GraphError, match=r"named 'relu.0::0'; known names: \[\]"):
            graph.resolve("relu.0::0")
        with pytest.raises(GraphError, match="was not used to build this graph"):
            graph.resolve(x)
        graph.relu(x).set_output(True)
    with pytest.raises(GraphError, match=r"known names: \['relu.1::0', 'relu.1::OUT_0'\]"):  # the refused call counted
        graph.resolve("relu.0::0")


def test_the_build_is_the_only_step_that_needs_a_gpu(real_build: None) -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    graph = cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::0", "c::1"], outputs=["c::Y"])
    made: dict[str, Any] = {}

    def record() -> None:
        with graph:
            y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
            y.set_output(True)
            made.update(X=graph.resolve(x), W=graph.resolve(w), Y=y)

    if why_no_gpu():  # cuDNN loads, but there is no device to build on: CUDA's or cuDNN's error
        with pytest.raises((CudaError, cudnn.CudnnError)) as info:
            record()
        assert graph.state == "failed"
        with pytest.raises(GraphStateError, match=f"building raised {type(info.value).__name__}"):
            graph({"c::0": x, "c::1": w})
    else:
        record()
        assert graph.state == "built" and graph.input_names == ("c::0", "c::1")
    # uids were settled before the step that needs the GPU, whatever it did
    assert [made[k].get_uid() for k in ("X", "W", "Y")] == [1, 2, 3]


# -- the Graph object ---------------------------------------------------------------------------

def test_constructor_arguments(gpu_steps: list[Any]) -> None:
    with pytest.raises(TypeError, match=r"cudnn.Graph\(\): 'io_type' is not an argument of cudnn.Graph; did you mean "
                                        r"'io_data_type'\?"):
        cudnn.Graph(io_type=HALF)
    with pytest.raises(ValueError, match="heuristics must be a list or tuple"):
        cudnn.Graph(heuristics=cudnn.heur_mode.A)
    with pytest.raises(ValueError, match="output_framework must be one of"):
        cudnn.Graph(output_framework="jax")
    with pytest.raises(TypeError):
        cudnn.Graph(None)  # type: ignore[misc]  # keyword-only
    graph, *_ = conv_graph(handle="auto")
    assert graph.pygraph.handle is None  # "auto": this thread's handle at run time
    given, *_ = conv_graph(handle=0x1234)  # a raw cudnnHandle_t, never used here
    assert given.pygraph.handle == 0x1234
    default_modes = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
    assert gpu_steps[:4] == [("build_operation_graph", ()), ("create_execution_plans", (default_modes,)),
                             ("check_support", ()), ("build_plans", ())]
    gpu_steps.clear()
    conv_graph(heuristics=(cudnn.heur_mode.B,))
    assert ("create_execution_plans", ([cudnn.heur_mode.B],)) in gpu_steps


def test_pygraph_methods_through_the_wrapper() -> None:
    graph, *_ = conv_graph(inputs=["conv2d::0", "conv2d::weight"], outputs=["conv2d::Y"])
    for name in ("build", "validate", "execute", "build_plans", "create_execution_plans", "key"):
        with pytest.raises(GraphStateError, match=f"calling {name} via cudnn.Graph is not allowed"):
            getattr(graph, name)
    assert graph.to_json()["nodes"][0]["name"] == "conv2d"
    assert "conv2d" in graph.to_dot()  # the picture of the built graph
    assert '"name": "conv2d"' in str(graph)
    assert repr(graph) == "<cudnn.Graph built inputs=['conv2d::0', 'conv2d::weight'] outputs=['conv2d::Y']>"
    with pytest.raises(AttributeError, match="no attribute 'conv_forward'"):
        graph.conv_forward  # noqa: B018
    with pytest.raises(AttributeError):
        graph._add  # noqa: B018
    assert {"conv_fprop", "relu", "layernorm", "set_io_tuples", "resolve", "to_json"} <= set(dir(graph))


def test_every_pygraph_method_is_an_op_a_pass_through_or_refused() -> None:
    """The methods that take a node name are the ops (less the tensor makers); of the rest,
    a few read the graph and pass through, and the build, plan and execute steps are refused."""
    x = nhwc(2, 8, 4, 4)
    public = [n for n in dir(cudnn.pygraph) if not n.startswith("_") and callable(getattr(cudnn.pygraph, n))]
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.relu(x).set_output(True)
        under = graph.pygraph
        for name in public:
            method = getattr(cudnn.pygraph, name)
            if name in ("tensor", "tensor_like", "autotune"):  # the wrapper's own
                assert getattr(type(graph), name) is not method and callable(getattr(graph, name))
            elif name in PASS_THROUGH:  # (get_node takes a name too: a node's, to read)
                assert getattr(graph, name).__self__ is under, name
            elif "name" in inspect.signature(method).parameters:  # an op: recorded by the wrapper
                op = getattr(graph, name)
                assert (op.__name__, op.__doc__) == (name, method.__doc__) and name in dir(graph), name
            else:
                with pytest.raises(GraphStateError, match=f"calling {name} via cudnn.Graph is not allowed"):
                    getattr(graph, name)
    assert {"conv_fprop", "conv_dgrad", "matmul", "reduction", "layernorm", "concatenate"} <= set(dir(graph))


# -- allocation policy ----------------------------------

def test_output_framework_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    assert calls.out_framework("auto", "torch") == "torch"
    assert calls.out_framework("auto", "cupy") == "torch"  # torch is loaded: as the official wrapper
    assert calls.out_framework("inputs", "cupy") == "cupy"
    assert calls.out_framework("cupy", "torch") == "cupy"
    assert calls.out_framework("inputs", "jax") == "torch"  # JAX cannot give writable empties
    monkeypatch.delitem(sys.modules, "torch")
    assert calls.out_framework("auto", "cupy") == "cupy"  # no torch loaded: CuPy in, CuPy out


# -- helpers -------------------------------------------------------------------------------------

def test_graph_context_manager_yields_graph_and_list() -> None:
    with cudnn.graph(None) as (g, tensors):
        assert isinstance(g, cudnn.pygraph) and tensors == []
        assert (g.context.io_data_type, g.context.intermediate_data_type, g.context.compute_data_type) == \
            (HALF, FLOAT, FLOAT)
    with cudnn.graph(None, name="g1", io_data_type=FLOAT) as (g, _):
        assert g.name == "g1" and g.context.io_data_type == FLOAT


def test_jit_builds_once_and_returns_uids(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []

    def fake_build(self: cudnn.pygraph, modes: Any) -> None:  # the cuDNN part of build() is a GPU matter
        built.append(modes)
        self.validate()
        assign_uids(all_tensors(self.nodes))

    monkeypatch.setattr(cudnn.pygraph, "build", fake_build)
    monkeypatch.setattr(cudnn.pygraph, "get_execution_plan_count", lambda self: len(built))

    def relu_graph(shape: list[int]) -> tuple[cudnn.pygraph, list[Any]]:
        with cudnn.graph(None) as (g, _):
            X = g.tensor(name="X", dim=shape, stride=[shape[1], 1])
            Y = g.relu(X).set_output(True)
        return g, [X, Y]

    make = cudnn.jit(heur_modes=cudnn.heur_mode.FALLBACK)(relu_graph)
    g, uids = make([4, 8])
    assert isinstance(g, cudnn.pygraph) and uids == [1, 2]
    assert built == [[cudnn.heur_mode.FALLBACK]] and make.__name__ == "relu_graph"
    make([4, 8])
    assert len(built) == 1  # plans exist: not built again
    built.clear()
    cudnn.jit([cudnn.heur_mode.A, cudnn.heur_mode.B], unused=1)(relu_graph)([2, 2])  # extra keywords ignored
    assert built == [[cudnn.heur_mode.A, cudnn.heur_mode.B]]


def test_graph_cache_is_first_in_first_out() -> None:
    made: list[int] = []

    @cudnn.graph_cache(key_fn=lambda n: n % 10, maxsize=2)
    def factory(n: int) -> str:
        made.append(n)
        return f"graph{n}"

    assert [factory(1), factory(11), factory(2)] == ["graph1", "graph1", "graph2"]
    factory(1)  # a hit does not refresh the entry
    factory(3)  # evicts 1, the oldest inserted
    factory(2)
    factory(1)
    assert made == [1, 2, 3, 1]


def test_cudnn_graph_is_the_function_beside_the_graph_layer() -> None:
    """``cudnn.graph`` is the official context manager (the function of cudnn/graph.py) after the
    graph layer's modules were imported by their paths, and ``cudnn._graph`` holds those modules."""
    code = textwrap.dedent("""
        import cudnn._graph.model.tensor as t
        from cudnn._graph.pygraph import pygraph
        import cudnn
        import cudnn._graph.families.conv_nodes
        from cudnn import graph
        assert cudnn.graph is graph and callable(graph)
        assert cudnn._graph.model.tensor is t and t.Tensor is cudnn.tensor and cudnn.pygraph is pygraph
        assert cudnn._graph.families.conv_nodes.ConvFprop
        with cudnn.graph(None, name="n") as (g, lst):
            assert isinstance(g, pygraph) and lst == [] and g.name == "n"
        import inspect
        assert list(inspect.signature(cudnn.graph).parameters)[:2] == ["handle", "name"]
        print("ok")
    """)
    import os

    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
