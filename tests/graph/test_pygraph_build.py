"""pygraph without a GPU: declaring tensors and ops, inference, the rules, JSON and keys."""

from __future__ import annotations

import json

import pytest

import cudnn
from cudnn._graph.families.pointwise_nodes import TABLE, float_bits

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def _graph(**kw: object) -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT, **kw)


def _nhwc(n: int, c: int, h: int, w: int) -> list[int]:
    return [h * w * c, 1, w * c, c]


def test_seed001_graph_json() -> None:
    g = cudnn.pygraph(name="cudnn_graph_0", io_data_type=HALF, compute_data_type=FLOAT)
    X = g.tensor(name="X", dim=[8, 64, 56, 56], stride=[56 * 56 * 64, 1, 56 * 64, 64], data_type=HALF)
    W = g.tensor(name="W", dim=[32, 64, 3, 3], stride=[3 * 3 * 64, 1, 3 * 64, 64])
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1], compute_data_type=FLOAT)
    assert repr(Y.set_output(True)).startswith('[{"data_type":null,"dim":[],"is_pass_by_value":false')
    g.validate()
    doc = json.loads(str(g))
    assert set(doc) == {"context", "cudnn_backend_version", "cudnn_frontend_version", "json_version",
                        "nodes", "tensors"}
    node = doc["nodes"][0]
    assert node == {"compute_data_type": "FLOAT", "dilation": [1, 1], "inputs": {"W": "W", "X": "X"},
                    "math_mode": "CROSS_CORRELATION", "name": "0", "outputs": {"Y": "0::Y"},
                    "post_padding": [1, 1], "pre_padding": [1, 1], "stride": [1, 1], "tag": "CONV_FPROP"}
    y = doc["tensors"]["0::Y"]
    assert (y["data_type"], y["dim"], y["stride"], y["is_virtual"]) == ("HALF", [8, 32, 56, 56],
                                                                        [100352, 1, 1792, 32], False)
    assert doc["tensors"]["W"]["data_type"] == "HALF"  # inferred from io_data_type
    assert '"dim": [8,32,56,56]' in str(g)  # int arrays stay on one line


def test_conv_inference_stride_padding_dilation_3d_and_groups() -> None:
    g = _graph()
    X = g.tensor(name="X", dim=[2, 8, 10, 12, 14], data_type=HALF)
    W = g.tensor(name="W", dim=[16, 4, 3, 3, 3], data_type=HALF)  # 2 groups
    Y = g.conv_fprop(X, W, pre_padding=[1, 0, 2], post_padding=[1, 1, 0], stride=[2, 1, 3], dilation=[1, 2, 1])
    Y.set_output(True)
    g.validate()
    assert Y.get_dim() == [2, 16, 5, 9, 5]
    assert Y.get_stride()[1] == 1  # channels last


def test_dgrad_and_wgrad_inference() -> None:
    g = _graph()
    DY = g.tensor(name="DY", dim=[2, 16, 8, 8], data_type=HALF)
    W = g.tensor(name="W", dim=[16, 4, 3, 3], data_type=HALF)
    DX = g.conv_dgrad(DY, W, padding=[1, 1]).set_output(True)
    X = g.tensor(name="X", dim=[2, 4, 8, 8], data_type=HALF)
    DW = g.conv_wgrad(X, DY, padding=[1, 1]).set_output(True)
    g.validate()
    assert DX.get_dim() == [2, 4, 8, 8] and DW.get_dim() == [16, 4, 3, 3]
    g2 = _graph()
    strided = g2.conv_dgrad(g2.tensor(name="DY", dim=[2, 16, 4, 4]), g2.tensor(name="W", dim=[16, 4, 3, 3]),
                            padding=[1, 1], stride=[2, 2]).set_output(True)
    g2.validate()  # strided: the smallest DX that gives DY, as the official infers ((4 - 1) * 2 + 3 - 2)
    assert strided.get_dim() == [2, 4, 7, 7]
    strided.set_dim([2, 4, 8, 8])  # set_dim chooses the other size that gives DY
    g2.validate()
    assert strided.get_dim() == [2, 4, 8, 8] and strided.get_data_type() == HALF  # the user's dims kept


def test_matmul_broadcast_and_pointwise_strides() -> None:
    g = _graph()
    A = g.tensor(name="A", dim=[1, 4, 8])
    B = g.tensor(name="B", dim=[3, 8, 16])
    C = g.matmul(A, B).set_output(True)
    x = g.tensor(name="x", dim=[2, 3, 4, 5], stride=[60, 1, 15, 3])
    b = g.tensor(name="b", dim=[1, 3, 1, 1])
    out = g.add(x, b).set_output(True)
    g.validate()
    assert C.get_dim() == [3, 4, 16] and C.get_stride() == [64, 16, 1]
    assert out.get_dim() == [2, 3, 4, 5] and out.get_stride() == [60, 1, 15, 3]


def test_every_pointwise_method_has_the_documented_signature() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[4, 4])
    y = g.tensor(name="y", dim=[4, 4])
    m = g.tensor(name="m", dim=[4, 4], data_type=cudnn.data_type.BOOLEAN)
    for method, spec in TABLE.items():
        args = {1: (x,), 2: (x, y), 3: (x, y, m)}[len(spec.tensors)]
        kwargs = {"axis": 1} if method == "gen_index" else {}
        if method.startswith("leaky_relu"):
            kwargs = {"negative_slope": 0.01}
        out = getattr(g, method)(*args, **kwargs, name=f"n_{method}")
        assert out.get_name() == f"n_{method}::OUT_0"
        out.set_output(True)
    g.validate()
    doc = json.loads(str(g))
    modes = {n["name"]: n["mode"] for n in doc["nodes"]}
    assert modes["n_bias"] == "ADD" and modes["n_scale"] == "MUL" and modes["n_relu_backward"] == "RELU_BWD"
    assert len(doc["nodes"]) == len(TABLE)
    with pytest.raises(TypeError, match=r"pygraph.leaky_relu\(\): missing a required argument: 'negative_slope'"):
        g.leaky_relu(x)


def test_pointwise_attributes_in_json_as_float_bits() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[2, 2])
    g.relu(x, negative_slope=0.1, upper_clip=6.0, name="r").set_output(True)
    g.swish(x, 1.5, FLOAT, name="s").set_output(True)
    g.validate()
    nodes = {n["name"]: n for n in json.loads(str(g))["nodes"]}
    assert nodes["r"]["relu_lower_clip_slope"] == "3DCCCCCD" == float_bits(0.1)
    assert nodes["r"]["relu_upper_clip"] == "40C00000" and nodes["r"]["relu_lower_clip"] is None
    assert nodes["s"]["swish_beta"] == "3FC00000"


def test_scalar_constants_take_the_rank_of_the_other_input() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[2, 3, 4])
    y = g.mul(x, 0.5, name="half").set_output(True)
    g.validate()
    const = g.nodes[0].inputs["IN_1"]
    assert const.get_dim() == [1, 1, 1] and const.get_is_pass_by_value() and const.get_value() == 0.5
    assert const.get_name() == "half::IN_1"
    assert json.loads(str(g))["tensors"]["half::IN_1"]["pass_by_value"] == 0.5
    assert y.get_dim() == [2, 3, 4]


def test_reduction_reshape_genstats_and_structural_inference() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[2, 8, 4, 4], stride=_nhwc(2, 8, 4, 4))
    r = g.reduction(x, cudnn.reduction_mode.ADD).set_dim([2, 8, 1, 1]).set_output(True)
    s = g.reshape(x).set_dim([2, 128]).set_output(True)
    total, sq = g.genstats(x)
    total.set_output(True)
    sq.set_output(True)
    t = g.transpose(x, [0, 2, 3, 1]).set_output(True)
    sl = g.slice(x, [slice(0, 1), slice(2, 6, 2)]).set_output(True)
    cat = g.concatenate([x, x], axis=1).set_output(True)
    g.validate()
    assert r.get_stride() == [8, 1, 8, 8] and s.get_stride() == [128, 1]
    assert total.get_dim() == [1, 8, 1, 1] and sq.get_data_type() == HALF
    assert t.get_dim() == [2, 4, 4, 8] and sl.get_dim() == [1, 2, 4, 4] and cat.get_dim() == [2, 16, 4, 4]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda g, x: g.conv_fprop(x, g.tensor(name="W", dim=[4, 3, 3, 3])),
         "conv_fprop '0': W: 8 input channels are not a multiple of the filter's 3"),
        (lambda g, x: g.matmul(x, g.tensor(name="B", dim=[2, 8, 5, 5])),
         r"matmul '0': A \[2, 8, 4, 4\] has K=4 but B \[2, 8, 5, 5\] has K=5"),
        (lambda g, x: g.add(x, g.tensor(name="y", dim=[2, 3, 4, 4])),
         r"add '0': dims do not broadcast at axis 1"),
        (lambda g, x: g.add(x, g.tensor(name="y", dim=[8, 4, 4])), "add '0': inputs must have the same rank"),
        (lambda g, x: g.conv_fprop(x, g.tensor(name="W", dim=[4, 8, 9, 9])), "output dims .* are not positive"),
        (lambda g, x: g.reshape(x), "reshape '0': Y: call set_dim"),
        (lambda g, x: g.reduction(x, cudnn.reduction_mode.ADD).set_dim([2, 3, 1, 1]),
         r"reduction '0': Y: dims \[2, 3, 1, 1\] must equal X's"),
        (lambda g, x: g.gen_index(x, axis=7), "gen_index '0': axis 7 is out of range"),
        (lambda g, x: g.conv_fprop(x, g.tensor(name="W", dim=[4, 8, 3, 3]), padding=[1]),
         "pre_padding needs 2 values"),
    ],
)
def test_bad_graphs_name_the_node_and_port(build, message) -> None:  # type: ignore[no-untyped-def]
    g = _graph()
    x = g.tensor(name="x", dim=[2, 8, 4, 4])
    build(g, x).set_output(True)
    with pytest.raises(cudnn.GraphError, match=message):
        g.validate()


def test_graph_rules() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[4, 4])
    g.relu(x)  # never marked
    with pytest.raises(cudnn.GraphError, match="relu '0': OUT_0 tensor '0::OUT_0' is never used and not marked"):
        g.validate()

    g = _graph()
    v = g.tensor(name="v", dim=[4, 4], is_virtual=True)
    g.relu(v).set_output(True)
    with pytest.raises(cudnn.GraphError, match="'v' is virtual but no node produces it"):
        g.validate()

    g = _graph()
    a = g.tensor(name="a", dim=[4, 4], uid=3)
    b = g.tensor(name="b", dim=[4, 4], uid=3)
    g.add(a, b).set_output(True)
    with pytest.raises(cudnn.GraphError, match="has uid 3, already used by"):
        g.validate()

    g = cudnn.pygraph()
    g.relu(g.tensor(name="x", dim=[4])).set_output(True)
    with pytest.raises(cudnn.GraphError, match="'x' has no data type"):
        g.validate()

    g = _graph()
    g.relu(g.tensor(dim=[2]), name="same")
    with pytest.raises(cudnn.GraphError, match="a node named 'same' is already in this graph"):
        g.relu(g.tensor(dim=[2]), name="same")
    with pytest.raises(cudnn.GraphError, match="the graph has no nodes"):
        _graph().validate()


def test_in_place_uid_is_allowed_in_single_node_graphs_only() -> None:
    g = _graph()
    x = g.tensor(name="x", dim=[4, 4], uid=1)
    y = g.relu(x).set_uid(1).set_output(True)
    g.validate()
    assert x.get_uid() == y.get_uid() == 1
    g2 = _graph()
    x2 = g2.tensor(name="x", dim=[4, 4], uid=1)
    g2.relu(g2.relu(x2)).set_uid(1).set_output(True)
    with pytest.raises(cudnn.GraphError, match="in-place use of a uid is only allowed in single-node graphs"):
        g2.validate()


def test_defaults_compute_type_and_output_types() -> None:
    g = cudnn.pygraph()
    x = g.tensor(name="x", dim=[4, 4], data_type=cudnn.data_type.DOUBLE)
    out = g.exp(x).set_output(True)
    mid = g.tensor(name="i8", dim=[4, 4], data_type=cudnn.data_type.INT8)
    y = g.matmul(mid, g.tensor(name="i8b", dim=[4, 4], data_type=cudnn.data_type.INT8))
    y.set_output(True).set_data_type(cudnn.data_type.INT32)
    cmp = g.cmp_gt(x, 0.0).set_output(True)
    g.validate()
    assert g.nodes[0].compute_data_type == cudnn.data_type.DOUBLE and out.get_data_type() == cudnn.data_type.DOUBLE
    assert g.nodes[1].compute_data_type == cudnn.data_type.INT32
    assert cmp.get_data_type() == cudnn.data_type.DOUBLE  # like its input; BOOLEAN would be bit-packed


def test_tensor_setters_chain_and_getters() -> None:
    t = cudnn.tensor()
    assert t.set_name("t").set_dim([2, 3]).set_stride([3, 1]).set_data_type(HALF).set_uid(9) is t
    assert t.set_is_virtual(True).set_is_pass_by_value(True).set_reordering_type(cudnn.tensor_reordering.F16x16) is t
    assert (t.get_name(), t.get_dim(), t.get_stride(), t.get_data_type(), t.get_uid(), t.get_is_virtual()) == \
        ("t", [2, 3], [3, 1], HALF, 9, True)
    assert t.get_is_pass_by_value() and not t.set_is_pass_by_value(False).get_is_pass_by_value()
    assert t.get_reordering_type() == cudnn.tensor_reordering.F16x16
    with pytest.raises(TypeError, match="dim: expected a list of ints"):
        t.set_dim("abc")
    with pytest.raises(TypeError, match="uid: expected a non-negative int"):
        t.set_uid(-2)
    with pytest.raises(TypeError, match="data_type"):
        t.set_data_type("not a type")


def test_key_ignores_names_but_not_shapes() -> None:
    def build(name: str, n: int) -> int:
        g = _graph()
        x = g.tensor(name=name, dim=[n, 4])
        g.relu(x, name=name + "r").set_output(True)
        g.validate()
        return g.key()

    assert build("a", 2) == build("b", 2)
    assert build("a", 2) != build("a", 3)


@pytest.mark.parametrize("change", [
    "dim", "stride", "data_type", "pass_by_value", "reordering", "vector", "ragged", "ragged_type", "alignment",
    "alignment_value",
    "attribute", "compute_type", "op"])
def test_key_changes_with_every_field_that_identifies_the_graph(change: str) -> None:
    """What the plan cache keys on: each tensor field a plan depends on, and the node's op,
    attributes and compute type, changes the key; names and uids do not."""
    def key(which: str, name: str = "x", uid: int = 1) -> int:
        g = _graph()
        x = g.tensor(name=name, uid=uid, dim=[2, 4, 1] if which == "dim" else [2, 3, 1],
                     stride=[3, 1, 3] if which == "stride" else [3, 1, 1],
                     data_type=HALF if which == "data_type" else FLOAT)
        if which == "pass_by_value":
            x.set_is_pass_by_value(True)
        if which == "reordering":
            x.set_reordering_type(cudnn.tensor_reordering.F16x16)
        if which == "vector":
            x.set_vector_count_and_dimension(4, 1)
        if which in ("ragged", "ragged_type"):
            x.set_ragged_offset(g.tensor(name="r", dim=[3, 1, 1], stride=[1, 1, 1],
                                         data_type=cudnn.data_type.INT32 if which == "ragged" else cudnn.data_type.INT64))
        if which == "alignment":
            x.set_alignment(256)
        if which == "alignment_value":
            x.set_alignment_value(8)
        extra = {"compute_data_type": HALF} if which == "compute_type" else {}
        if which == "op":
            y = g.tanh(x, name=name + "r", **extra)
        else:
            y = g.relu(x, name=name + "r", lower_clip=0.5 if which == "attribute" else None, **extra)
        y.set_output(True)
        return g.key()

    assert key("") == key("", name="other", uid=7)
    assert key(change) != key("")
    if change == "ragged_type":  # the offsets' own type, not only that there are offsets
        assert key("ragged_type") != key("ragged")


def test_pipeline_order_errors() -> None:
    g = _graph()
    g.relu(g.tensor(dim=[2])).set_output(True)
    with pytest.raises(cudnn.GraphStateError, match="execute\\(\\) before build"):
        g.execute({}, None)
    with pytest.raises(cudnn.GraphStateError, match="build_operation_graph"):
        g.create_execution_plans([cudnn.heur_mode.A])
    assert g.get_execution_plan_count() == 0


def test_tensor_like_from_tensor_and_shape_description() -> None:
    g = _graph()
    src = g.tensor(name="src", dim=[2, 3], data_type=HALF, uid=4)
    copy = g.tensor_like(src, "copy")
    assert (copy.get_dim(), copy.get_stride(), copy.get_data_type(), copy.get_uid()) == ([2, 3], [3, 1], HALF, 0)

    class Shape:
        shape = (5, 6)
        dtype = "float32"

    t = g.tensor_like(Shape())
    assert t.get_dim() == [5, 6] and t.get_stride() == [6, 1] and t.get_data_type() == FLOAT
    with pytest.raises(TypeError, match="tensor_like: expected"):
        g.tensor_like(object())


def test_backend_layout_gives_low_rank_tensors_leading_unit_dims() -> None:
    from cudnn._graph.model.lower import backend_layout

    assert backend_layout([8, 256], [256, 1]) == ([1, 8, 256], [2048, 256, 1])
    assert backend_layout([5], [1]) == ([1, 1, 5], [5, 5, 1])
    assert backend_layout([2, 3, 4], [12, 4, 1]) == ([2, 3, 4], [12, 4, 1])


def test_gradient_shapes_must_agree_with_the_forward_convolution() -> None:
    g = _graph()
    dy = g.tensor(name="DY", dim=[2, 16, 8, 8])
    w = g.tensor(name="W", dim=[16, 4, 3, 3])
    g.conv_dgrad(dy, w, padding=[0, 0]).set_dim([2, 4, 8, 8]).set_output(True)
    with pytest.raises(cudnn.GraphError, match=r"X \[2, 4, 8, 8\] convolved with W \[16, 4, 3, 3\] gives "
                                               r"\[2, 16, 6, 6\], but DY is \[2, 16, 8, 8\]"):
        g.validate()
