"""Input hygiene: tensor names unique in a graph, no tensor produced by
another graph, no Python number where a tensor is needed; every refusal names the node."""

from __future__ import annotations

import json

import pytest

import cudnn

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def _graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)


# -- (a) one name, one tensor ----------------------------------------------------------------------

def test_two_tensors_given_one_name_are_two_tensors() -> None:
    """As in the official, names need not be unique: tensors are bound by object or uid. The
    graph's JSON keys the second "x#2", so both reach it and each node names the one it uses."""
    g = _graph()
    a = g.tensor(name="x", dim=[2, 3])
    b = g.tensor(name="x", dim=[2, 3], stride=[1, 2])
    g.add(a, b, name="sum").set_output(True)
    g.validate()
    assert a.get_name() == b.get_name() == "x"
    doc = json.loads(str(g))
    assert doc["nodes"][0]["inputs"] == {"IN_0": "x", "IN_1": "x#2"}
    assert doc["tensors"]["x"]["stride"] == [3, 1] and doc["tensors"]["x#2"]["stride"] == [1, 2]
    assert doc["tensors"]["x#2"]["name"] == "x"


def test_an_output_renamed_onto_an_input_name_stays_apart() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[4])
    y = g.relu(x, name="r").set_name("x").set_output(True)
    g.validate()
    doc = json.loads(str(g))
    assert doc["nodes"][0]["inputs"] == {"IN_0": "x"} and doc["nodes"][0]["outputs"] == {"OUT_0": "x#2"}
    assert y.get_name() == "x" and y is not x


def test_unnamed_tensors_get_node_port_names_and_all_reach_the_json() -> None:
    g = _graph()
    a, b = g.tensor(dim=[2, 3]), g.tensor(dim=[2, 3])
    g.mul(g.add(a, b, name="s"), a, name="m").set_output(True)
    assert (a.get_name(), b.get_name()) == ("s::IN_0", "s::IN_1")  # named at the call: printable at once
    g.validate()
    doc = json.loads(str(g))
    assert sorted(doc["tensors"]) == ["m::OUT_0", "s::IN_0", "s::IN_1", "s::OUT_0"]
    assert doc["nodes"][1]["inputs"] == {"IN_0": "s::OUT_0", "IN_1": "s::IN_0"}  # one tensor, one name


def test_a_generated_name_gives_way_to_a_chosen_one() -> None:
    g = _graph()
    a = g.tensor(dim=[4])
    y = g.relu(a, name="r")
    chosen = g.tensor(name="r::IN_0", dim=[4])  # the user picks the name the graph gave ``a``
    g.add(y, chosen, name="s").set_output(True)
    g.validate()
    assert (chosen.get_name(), a.get_name()) == ("r::IN_0", "r::IN_0.1")
    assert len(json.loads(str(g))["tensors"]) == 4


def test_constants_are_named_after_their_node() -> None:
    # node names that prefix the op's name ('a' < 'add::...') once kept the placeholder name
    g = _graph()
    x = g.tensor(name="x", dim=[4])
    y = g.add(g.add(x, 1.0, name="a"), 2.0, name="ad")
    y.set_output(True)
    g.validate()
    doc = json.loads(str(g))
    assert {"a::IN_1", "ad::IN_1"} <= set(doc["tensors"])
    assert doc["tensors"]["ad::IN_1"]["pass_by_value"] == 2.0


def test_a_named_scalar_keeps_its_name() -> None:
    g = _graph()
    alpha = g.tensor_scalar(0.5, cudnn.scalar_type.RUNTIME_PARAM, "alpha")
    g.mul(g.tensor(name="x", dim=[4]), alpha, name="m").set_output(True)
    g.validate()
    assert alpha.get_name() == "alpha" and "alpha" in json.loads(str(g))["tensors"]


def test_one_tensor_on_two_ports_is_one_entry() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[3])
    g.mul(x, x, name="sq").set_output(True)
    g.validate()
    assert sorted(json.loads(str(g))["tensors"]) == ["sq::OUT_0", "x"]


# -- (b) another graph's tensors ---------------------------------------------------------------------

def test_an_output_of_another_graph_is_refused_at_the_call() -> None:
    g1, g2 = _graph(), _graph()
    y1 = g1.relu(g1.tensor(name="x", dim=[4]), name="first").set_output(True)
    with pytest.raises(cudnn.GraphError, match=r"add 'second': IN_0 tensor 'first::OUT_0' is an output of "
                                               r"relu 'first' of another graph.*tensor_like"):
        g2.add(y1, g2.tensor(name="z", dim=[4]), name="second")
    assert g2.nodes == []  # nothing half-added
    x2 = g2.tensor_like(y1, name="y1")  # the documented way: a tensor of this graph with the same attributes
    g2.add(x2, g2.tensor(name="z", dim=[4]), name="second").set_output(True)
    g1.validate()
    assert x2.producer is None


def test_a_declared_tensor_may_serve_two_graphs() -> None:
    x = cudnn.tensor(name="x", dim=[4], stride=[1], data_type=HALF)  # tensors are not bound at declaration
    for _ in range(2):
        g = _graph()
        g.relu(x, name="r").set_output(True)
        g.validate()


# -- (c) numbers where a tensor is needed -----------------------------------------------------------

def test_a_number_as_convolution_weight_is_refused_at_the_call() -> None:
    g = _graph()
    x = g.tensor(name="X", dim=[1, 4, 8, 8])
    with pytest.raises(cudnn.GraphError, match=r"conv_fprop 'c': W got the number 3, which has no dims: this "
                                               r"input takes a tensor"):
        g.conv_fprop(x, 3, name="c")
    with pytest.raises(cudnn.GraphError, match=r"matmul 'm': B got the number 2.0"):
        g.matmul(g.tensor(name="A", dim=[2, 2]), 2.0, name="m")
    assert g.nodes == []


def test_a_number_where_a_node_needs_dims_is_refused_at_validate() -> None:
    g = _graph()
    g.reduction(5, cudnn.reduction_mode.ADD, name="r").set_output(True)
    with pytest.raises(cudnn.GraphError, match=r"reduction 'r': X got the number 5, which has no dims"):
        g.validate()


def test_missing_or_wrong_inputs_name_the_node() -> None:
    g = _graph()
    x = g.tensor(name="X", dim=[1, 4, 8, 8])
    with pytest.raises(cudnn.GraphError, match=r"conv_fprop 'c': weight is required, got None"):
        g.conv_fprop(x, None, name="c")
    with pytest.raises(TypeError, match=r"add 'p': b must be a cudnn.tensor"):
        g.add(x, "1", name="p")
    with pytest.raises(TypeError, match=r"relu 'q': compute_data_type: expected a cudnn.data_type"):
        g.relu(x, compute_data_type="floaty", name="q")
    with pytest.raises(cudnn.GraphError, match=r"conv_fprop 'c': convolution_mode: expected"):
        g.conv_fprop(x, g.tensor(name="W", dim=[4, 4, 3, 3]), convolution_mode="SIDEWAYS", name="c")
    assert g.nodes == []


def test_grouped_convolution_output_channels_are_a_multiple_of_the_groups() -> None:
    g = _graph()
    x = g.tensor(name="X", dim=[1, 4, 8, 8])
    g.conv_fprop(x, g.tensor(name="W", dim=[3, 2, 3, 3]), name="c").set_output(True)  # 2 groups, 3 outputs
    with pytest.raises(cudnn.GraphError, match=r"conv_fprop 'c': W: filter \[3, 2, 3, 3\] has 3 output "
                                               r"channels, not a multiple of the 2 groups"):
        g.validate()
