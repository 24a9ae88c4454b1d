"""cudnn.Graph without a GPU: recording, every naming rule of seed 000, io tuples, the errors of
bad calls, the helpers, and ``cudnn.graph`` as package and context manager.

Building needs cuDNN, so ``Graph._build_plans`` (the one step that calls it) is replaced by
uid assignment alone: the tests check names, uids and io plans, never a fake execution (a
call that gets as far as executing raises GraphStateError: there are no plans).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import cudnn
from cudnn.graph.errors import ExecutionInputError, GraphError, GraphStateError
from cudnn.interop.tensors import TensorInfo, describe
from cudnn.wrapper import calls
from cudnn.wrapper.context import Graph, _is_op

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
FAKE = 0xDEAD0000  # a device address nothing reads


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


@pytest.fixture(autouse=True)
def no_cudnn_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace only the cuDNN steps of the build (plans) by the uid assignment they start with."""
    monkeypatch.setattr(Graph, "_build_plans", lambda self: self._graph()._assign_uids())


def conv_graph(named: bool = True, **graph_kwargs: Any) -> tuple[Graph, FakeCuda, FakeCuda, Any]:
    x, w = nhwc(8, 64, 56, 56), nhwc(32, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, **graph_kwargs) as graph:
        kw = {"name": "conv2d"} if named else {}
        y = graph.conv_fprop(x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], **kw)
        y.set_output(True)
    return graph, x, w, y


def uid(graph: Graph, ref: Any) -> int:
    return graph._rec().resolve(ref).get_uid()


# -- naming rules -------------------------------------------------------------------------------

def test_keyword_arguments_are_node_port() -> None:
    x, w = nhwc(8, 64, 56, 56), nhwc(32, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["conv2d::image", "conv2d::weight"],
                     outputs=["conv_out"]) as graph:
        y = graph.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv2d")
        y.set_output(True).set_name("conv_out")
    rec = graph._rec()
    assert rec.resolve("conv2d::image") is rec.tensor_of(x) and rec.resolve("conv2d::weight") is rec.tensor_of(w)
    assert rec.resolve("conv2d::Y") is y and rec.resolve("conv_out") is y
    io = graph._io
    assert io is not None and io.in_names == ("conv2d::image", "conv2d::weight")
    assert io.in_uids == (uid(graph, x), uid(graph, w))
    (out,) = io.outs
    assert (out.uid, out.name, out.dims, out.strides, out.dtype) == \
        (y.get_uid(), "conv2d::Y", (8, 32, 56, 56), (100352, 1, 1792, 32), HALF)
    # the tensors made from the objects carry the names, so the Runner's messages show them
    assert rec.tensor_of(x).get_name() == "conv2d::image"


def test_positional_arguments_are_node_index() -> None:
    graph, x, w, y = conv_graph()
    graph.set_io_tuples(["conv2d::0", "conv2d::weight"], [y])
    assert graph._io.in_uids == (uid(graph, x), uid(graph, w))  # type: ignore[union-attr]
    with pytest.raises(GraphError, match=r"no tensor of this graph is named 'conv2d::image'.*conv2d::0"):
        graph.set_io_tuples(["conv2d::image", "conv2d::weight"], [y])


def test_unnamed_nodes_are_op_dot_count() -> None:
    graph, x, w, y = conv_graph(named=False)
    graph.set_io_tuples(["conv_fprop.0::0", "conv_fprop.0::weight"], ["conv_fprop.0::Y"])
    assert graph._io.in_uids == (uid(graph, x), uid(graph, w))  # type: ignore[union-attr]
    assert graph._io.outs[0].uid == y.get_uid()  # type: ignore[union-attr]


def test_the_count_is_per_op_and_counts_named_calls_too() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 1, 1)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        a = graph.conv_fprop(x, w, name="first")
        b = graph.conv_fprop(a, w)
        c = graph.relu(b)
        d = graph.relu(c, name="act")
        e = graph.relu(d)
        e.set_output(True)
    names = [n.name for n in graph.pygraph.nodes]
    assert names == ["first", "conv_fprop.1", "relu.0", "act", "relu.2"]
    rec = graph._rec()
    assert rec.resolve("conv_fprop.1::0") is a and rec.resolve("relu.2::OUT_0") is e
    assert rec.resolve("first::0") is rec.tensor_of(x) and rec.resolve("first::1") is rec.tensor_of(w)
    assert rec.resolve("conv_fprop.1::1") is rec.tensor_of(w)


def test_names_given_with_set_name() -> None:
    x, w = nhwc(8, 64, 8, 8), nhwc(16, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X = graph.tensor(name="X", dim=[8, 64, 8, 8], stride=[4096, 1, 512, 64])
        W = graph.tensor_like(w).set_name("W")
        y = graph.conv_fprop(image=X, weight=W, padding=[1, 1], name="conv2d")
        y.set_output(True).set_name("conv_out")
    graph.set_io_tuples(["X", "W"], ["conv_out"])
    assert graph._io.in_uids == (X.get_uid(), W.get_uid())  # type: ignore[union-attr]
    assert graph._io.in_names == ("X", "W") and graph._io.outs[0].name == "conv2d::Y"  # type: ignore[union-attr]
    assert x is not None


def test_integer_uids_before_and_after_the_build() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X = graph.tensor(name="X", dim=[2, 8, 4, 4], stride=[128, 1, 32, 8], uid=10)
        y = graph.conv_fprop(X, w, padding=[1, 1], name="c")
        y.set_output(True)
        graph.set_io_tuples([10, 1], [2])  # 10 is set; 1 and 2 are given by the build
    io = graph._io
    assert io is not None and io.in_uids == (10, 1) and io.outs[0].uid == 2
    assert graph._rec().resolve(1) is graph._rec().tensor_of(w) and y.get_uid() == 2
    with pytest.raises(GraphError, match="no tensor of this graph has uid 99; its uids are"):
        graph.set_io_tuples([10, 99], [2])
    assert x is not None


def test_tensor_objects() -> None:
    w = nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X = graph.tensor(name="X", dim=[2, 8, 4, 4], stride=[128, 1, 32, 8])
        unused = graph.tensor(name="U", dim=[1], stride=[1])
        y = graph.conv_fprop(X, w, padding=[1, 1], name="c")
        y.set_output(True)
    W = graph._rec().tensor_of(w)
    graph.set_io_tuples([W, X], [y])
    assert graph._io.in_uids == (W.get_uid(), X.get_uid())  # type: ignore[union-attr]
    with pytest.raises(GraphError, match="declared with graph.tensor.. but used by no op"):
        graph.set_io_tuples([W, unused], [y])
    foreign = cudnn.pygraph().tensor(name="X", dim=[1], stride=[1])
    with pytest.raises(GraphError, match="not a tensor of this graph"):
        graph.set_io_tuples([W, foreign], [y])


def test_build_objects_by_identity_in_any_order() -> None:
    graph, x, w, y = conv_graph(named=False)
    graph.set_io_tuples([w, x], [y])
    assert graph._io.in_uids == (uid(graph, w), uid(graph, x))  # type: ignore[union-attr]
    twin = nhwc(8, 64, 56, 56)  # same shape, another object
    with pytest.raises(GraphError, match="was not used to build this graph: tensor objects are matched by identity"):
        graph.set_io_tuples([w, twin], [y])


def test_one_object_used_twice_is_one_tensor() -> None:
    x = nhwc(2, 8, 4, 4)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.add(x, x).set_output(True)
    rec = graph._rec()
    assert rec.resolve("add.0::0") is rec.resolve("add.0::1") is rec.tensor_of(x)
    with pytest.raises(GraphError, match=r"inputs\[1\] \('add.0::1'\) names the same tensor as inputs\[0\]"):
        graph.set_io_tuples(["add.0::0", "add.0::1"], ["add.0::OUT_0"])
    graph.set_io_tuples([x], ["add.0::OUT_0"])


def test_lists_of_tensors_and_list_results() -> None:
    a, b = FakeCuda((2, 3, 4)), FakeCuda((2, 5, 4))
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        c = graph.concatenate([a, b], axis=1)
        d = graph.concatenate(inputs=(c, a), axis=1, name="cat")
        d.set_output(True)
    rec = graph._rec()
    assert rec.resolve("concatenate.0::0[0]") is rec.tensor_of(a) and rec.resolve("concatenate.0::0[1]") is rec.tensor_of(b)
    assert rec.resolve("cat::inputs[0]") is c and rec.resolve("cat::inputs[1]") is rec.tensor_of(a)
    x, scale, bias = FakeCuda((4, 8, 1, 1)), FakeCuda((1, 8, 1, 1), typestr="<f4"), FakeCuda((1, 8, 1, 1), typestr="<f4")
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        y, mean, inv = graph.layernorm(cudnn.norm_forward_phase.TRAINING, x, scale, bias, 1e-5, name="ln")
        for t in (y, mean, inv):
            t.set_output(True)
    graph.set_io_tuples(["ln::1", "ln::2", "ln::3"], ["ln::Y", "ln::MEAN", "ln::INV_VARIANCE"])
    assert [o.uid for o in graph._io.outs] == [y.get_uid(), mean.get_uid(), inv.get_uid()]  # type: ignore[union-attr]


def test_python_numbers_stay_graph_constants() -> None:
    x = nhwc(2, 8, 4, 4)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=[x], outputs=["mul.0::OUT_0"]) as graph:
        graph.mul(x, 0.5).set_output(True)
    assert len(graph._io.in_uids) == 1  # type: ignore[union-attr]


def test_name_given_positionally() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    mode = cudnn.convolution_mode.CROSS_CORRELATION
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.conv_fprop(x, w, [1, 1], [1, 1], [1, 1], mode, FLOAT, "c").set_output(True)
    assert graph.pygraph.nodes[0].name == "c" and graph._rec().resolve("c::1") is graph._rec().tensor_of(w)


def test_a_dead_object_no_longer_resolves() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    rec = graph._rec()
    assert len(rec._objects) == 2
    del x
    assert len(rec._objects) == 1  # the entry went with the object: its id may be reused
    assert rec.resolve("c::0").get_name() == "c::0"  # the name stays


# -- io tuples --------------------------------------------------------------------------------

def test_io_tuples_given_inside_the_block_are_checked_at_its_end() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
        y.set_output(True)
        graph.set_io_tuples(["c::0", "c::1"], [y])
        assert graph._io is None
    assert graph._io is not None and graph._io.in_names == ("c::0", "c::1")
    with pytest.raises(GraphError, match="no tensor of this graph is named 'c::image'"):
        with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::image", "c::1"],
                         outputs=["c::Y"]) as bad:
            bad.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    assert bad._state == "failed"


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
def test_bad_io_tuples(inputs: list[Any], outputs: list[Any], message: str) -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
        y.set_output(True)
        graph.relu(graph.conv_fprop(x, w, padding=[1, 1], name="v"), name="r").set_output(True)
        graph.scale(y, 2.0).set_output(True)
    graph.set_io_tuples(["c::0", "c::1"], ["c::Y", *REST])  # the valid one, kept on errors
    valid = graph._io
    with pytest.raises(GraphError, match=message):
        graph.set_io_tuples(inputs, outputs)
    assert graph._io is valid


def test_io_tuples_must_be_lists() -> None:
    graph, x, w, y = conv_graph()
    with pytest.raises(ValueError, match="inputs must be a list or tuple"):
        graph.set_io_tuples("conv2d::0", [y])  # type: ignore[arg-type]
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
    torch = pytest.importorskip("torch")
    graph, x, w, y = conv_graph(inputs=["conv2d::0", "conv2d::weight"], outputs=["conv2d::Y"])
    cpu = torch.empty(8, 64, 56, 56, dtype=torch.float16)
    with pytest.raises(ExecutionInputError, match="conv2d::0: a torch tensor on cpu; the graph reads GPU memory"):
        graph(cpu, w)
    with pytest.raises(ExecutionInputError, match="conv2d::0: a numpy tensor on cpu"):
        graph(np.zeros((8, 64, 56, 56), np.float16), w)
    with pytest.raises(ExecutionInputError, match="conv2d::0: a torch tensor on cpu"):
        graph({"conv2d::0": cpu, "conv2d::weight": w})


def test_dict_calls_check_names() -> None:
    graph, x, w, y = conv_graph()
    with pytest.raises(ExecutionInputError, match="dict key 'conv2d::image': no tensor of this graph is named"):
        graph({"conv2d::image": x, "conv2d::weight": w})
    with pytest.raises(ExecutionInputError, match=r"the dict lacks the graph inputs \['conv2d::weight'\]"):
        graph({"conv2d::0": x})
    other = nhwc(8, 64, 56, 56)
    with pytest.raises(ExecutionInputError, match="'conv2d::0' and .* name the same tensor .* different buffers"):
        graph({"conv2d::0": x, x: other, "conv2d::weight": w})
    with pytest.raises(ExecutionInputError, match="dict key uid 77"):
        graph({"conv2d::0": x, "conv2d::weight": w, 77: x})


def test_dict_keys_in_every_form_resolve() -> None:
    graph, x, w, y = conv_graph()
    X = graph._rec().tensor_of(x)
    for key_x, key_w, key_y in (("conv2d::0", "conv2d::weight", "conv2d::Y"), (x, w, y), (X.get_uid(), w, y)):
        assert [graph._uid_of(k) for k in (key_x, key_w, key_y)] == [X.get_uid(), uid(graph, w), y.get_uid()]


def test_calls_before_the_graph_exists_are_refused() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 8, 3, 3)
    graph = cudnn.Graph(io_data_type=HALF)
    with pytest.raises(GraphStateError, match="no graph yet"):
        graph(x, w)
    with pytest.raises(GraphStateError, match="inside `with cudnn.Graph"):
        graph.conv_fprop(x, w)
    with graph:
        y = graph.conv_fprop(x, w, padding=[1, 1], name="c")
        y.set_output(True)
        with pytest.raises(GraphStateError, match="call it after the block"):
            graph({"c::0": x})
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
    assert graph._state == "failed" and graph._pygraph is None and graph._recorder is None
    for attempt in (lambda: graph({"c::0": x}), lambda: graph.set_io_tuples(["c::0"], ["c::Y"]),
                    lambda: graph.pygraph, lambda: graph.get_workspace_size()):
        with pytest.raises(GraphStateError, match="failed and holds nothing .*KeyError"):
            attempt()


def test_a_failing_build_discards_the_graph() -> None:
    x, w = nhwc(2, 8, 4, 4), nhwc(8, 4, 3, 3)  # 8 input channels, weight made for 4 per group: fine
    bad_w = nhwc(8, 3, 3, 3)  # 3 does not divide 8
    with pytest.raises(GraphError):
        with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
            graph.conv_fprop(x, bad_w, padding=[1, 1]).set_output(True)
    assert graph._state == "failed"
    assert w is not None


def test_a_duplicate_node_name_is_refused() -> None:
    x = nhwc(2, 8, 4, 4)
    with pytest.raises(GraphError, match="node name 'a' is already used"):
        with cudnn.Graph(io_data_type=HALF) as graph:
            graph.relu(graph.relu(x, name="a"), name="a")
    assert graph._state == "failed"


def test_a_rejected_op_registers_nothing() -> None:
    x = nhwc(2, 8, 4, 4)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        with pytest.raises(TypeError):
            graph.relu(x, bogus=1)
        with pytest.raises(GraphError):
            graph.matmul(x, None)
        assert graph._rec().names == {} and graph._rec()._objects == {}
        graph.relu(x).set_output(True)
    assert sorted(graph._rec().names) == ["relu.1::0", "relu.1::OUT_0"]  # the refused call counted


# -- the Graph object ---------------------------------------------------------------------------

def test_constructor_arguments() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['io_type'\]"):
        cudnn.Graph(io_type=HALF)
    with pytest.raises(ValueError, match="heuristics must be a list or tuple"):
        cudnn.Graph(heuristics=cudnn.heur_mode.A)
    with pytest.raises(ValueError, match="output_framework must be one of"):
        cudnn.Graph(output_framework="jax")
    with pytest.raises(TypeError):
        cudnn.Graph(None)  # type: ignore[misc]  # keyword-only
    assert cudnn.Graph(handle="auto")._handle is None
    assert cudnn.Graph()._heuristics == [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def test_pygraph_methods_through_the_wrapper() -> None:
    graph, x, w, y = conv_graph()
    for name in ("build", "validate", "execute", "build_plans", "create_execution_plans", "key"):
        with pytest.raises(GraphStateError, match=f"calling {name} via cudnn.Graph is not allowed"):
            getattr(graph, name)
    assert graph.to_json()["nodes"][0]["name"] == "conv2d"
    assert '"name": "conv2d"' in str(graph) and "built" in repr(graph)
    with pytest.raises(AttributeError, match="no attribute 'conv_forward'"):
        graph.conv_forward  # noqa: B018
    assert {"conv_fprop", "relu", "layernorm", "set_io_tuples"} <= set(dir(graph))


def test_ops_are_the_pygraph_methods_that_add_nodes() -> None:
    import inspect

    for name in ("conv_fprop", "conv_dgrad", "matmul", "relu", "add", "reduction", "layernorm", "concatenate"):
        assert _is_op(name), name
    for name in ("build", "execute", "validate", "tensor", "tensor_like", "to_json", "key", "serialize", "_add"):
        assert not _is_op(name), name
    # cross-check: the methods that take a node name are exactly the ops (plus the tensor makers)
    public = [n for n in dir(cudnn.pygraph) if not n.startswith("_") and callable(getattr(cudnn.pygraph, n))]
    named = {n for n in public if "name" in inspect.signature(getattr(cudnn.pygraph, n)).parameters}
    assert named - {"tensor", "tensor_like"} == {n for n in public if _is_op(n)}


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
        self._assign_uids()

    monkeypatch.setattr(cudnn.pygraph, "build", fake_build)
    monkeypatch.setattr(cudnn.pygraph, "get_execution_plan_count", lambda self: len(built))

    @cudnn.jit(heur_modes=cudnn.heur_mode.FALLBACK)
    def make(shape: list[int]) -> tuple[cudnn.pygraph, list[Any]]:
        with cudnn.graph(None) as (g, _):
            X = g.tensor(name="X", dim=shape, stride=[shape[1], 1])
            Y = g.relu(X).set_output(True)
        return g, [X, Y]

    g, uids = make([4, 8])
    assert uids == [1, 2] and built == [[cudnn.heur_mode.FALLBACK]] and make.__name__ == "make"
    make([4, 8])
    assert len(built) == 1  # plans exist: not built again
    assert cudnn.jit([cudnn.heur_mode.A, cudnn.heur_mode.B], unused=1) is not None


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


def test_cudnn_graph_is_the_package_and_the_function() -> None:
    code = textwrap.dedent("""
        import cudnn.graph.tensor as t
        from cudnn.graph import pygraph
        import cudnn
        import cudnn.graph.nodes.conv
        from cudnn import graph
        assert cudnn.graph is graph and callable(graph)
        assert cudnn.graph.tensor is t and t.Tensor is cudnn.tensor and cudnn.graph.pygraph is pygraph
        assert cudnn.graph.nodes.conv.ConvFprop
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
