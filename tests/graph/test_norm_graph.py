"""Normalization ops without a GPU: inference of dims/strides/dtypes, JSON, returns, bad input,
and what lowering emits (recorded by a fake Lowering; no libcudnn call is made)."""

from __future__ import annotations

from typing import Any

import pytest

import cudnn
from cudnn import FeatureUnavailableError
from cudnn._graph.build.pipeline import all_tensors, assign_uids
from cudnn._graph.model.expand import expand
from cudnn._graph.model.lower import Lowering
from cudnn._lib.enums import cudnnBackendDescriptorType_t as D
from cudnn.backend import attr_label
from cudnn.backend import descriptor as backend_descriptor

dt = cudnn.data_type
TRAIN, INFER = cudnn.norm_forward_phase.TRAINING, cudnn.norm_forward_phase.INFERENCE


def graph(io: Any = dt.HALF) -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)


def outputs(*tensors: Any) -> None:
    for t in tensors:
        if t is not None:
            t.set_output(True)


def ln_inputs(g: cudnn.pygraph, x: list[int] = [4, 128, 768], p: list[int] | None = None) -> tuple:  # noqa: B006
    p = p or [1] * (len(x) - 1) + [x[-1]]
    X = g.tensor(name="x", dim=x)
    S = g.tensor(name="scale", dim=p, data_type=dt.FLOAT)
    B = g.tensor(name="bias", dim=p, data_type=dt.FLOAT)
    return X, S, B


def nhwc(g: cudnn.pygraph, name: str, n: int = 4, c: int = 8, h: int = 6, w: int = 6, **kw: Any) -> cudnn.tensor:
    return g.tensor(name=name, dim=[n, c, h, w], stride=[c * h * w, 1, w * c, c], **kw)


def channel(g: cudnn.pygraph, name: str, c: int = 8) -> cudnn.tensor:
    return g.tensor(name=name, dim=[1, c, 1, 1], stride=[c, 1, c, c], data_type=dt.FLOAT)


def shape(t: cudnn.tensor) -> tuple:
    return t.get_dim(), t.get_stride(), t.get_data_type()


# -- forward inference ---------------------------------------------------------------------------

def test_layernorm_training_infers_stats_and_json() -> None:
    g = graph(dt.BFLOAT16)
    X, S, B = ln_inputs(g)
    out = g.layernorm(TRAIN, X, S, B, 1e-5, name="ln")
    assert isinstance(out, list) and len(out) == 3
    Y, M, V = out
    outputs(Y, M, V)
    g.validate()
    assert shape(Y) == ([4, 128, 768], [98304, 768, 1], dt.BFLOAT16)
    # statistics take the graph's io type, as the official infers (FLOAT only where the graph has none)
    assert shape(M) == ([4, 128, 1], [128, 1, 1], dt.BFLOAT16)
    assert shape(V) == shape(M)
    assert [t.get_name() for t in out] == ["ln::Y", "ln::MEAN", "ln::INV_VARIANCE"]
    node = g.to_json()["nodes"][0]
    assert set(node) == {"compute_data_type", "forward_phase", "inputs", "name", "outputs", "tag"}
    assert node["tag"] == "LAYER_NORM" and node["forward_phase"] == "TRAINING"
    assert node["inputs"] == {"X": "x", "SCALE": "scale", "BIAS": "bias", "EPSILON": "ln::EPSILON"}
    assert node["outputs"] == {"Y": "ln::Y", "MEAN": "ln::MEAN", "INV_VARIANCE": "ln::INV_VARIANCE"}
    eps = g.to_json()["tensors"]["ln::EPSILON"]
    assert eps["is_pass_by_value"] and eps["pass_by_value"] == 1e-5
    assert eps["dim"] == [1, 1, 1] and eps["data_type"] == "FLOAT"


@pytest.mark.parametrize("op,tag,n", [("layernorm", "LAYER_NORM", 3), ("instancenorm", "INSTANCE_NORM", 3),
                                      ("adalayernorm", "ADA_LAYER_NORM", 3), ("rmsnorm", "RMS_NORM", 2)])
def test_inference_phase_returns_none_for_statistics(op: str, tag: str, n: int) -> None:
    g = graph()
    if op == "instancenorm":
        X, S, B = nhwc(g, "x"), channel(g, "s"), channel(g, "b")
    elif op == "adalayernorm":
        X, S, B = ln_inputs(g, [2, 16, 64], [2, 1, 64])
    else:
        X, S, B = ln_inputs(g)
    out = getattr(g, op)(INFER, X, S, B, epsilon=1e-5)
    assert len(out) == n and out[1:] == [None] * (n - 1)
    out[0].set_output(True)
    g.validate()
    assert out[0].get_dim() == X.get_dim() and out[0].get_stride() == X.get_stride()
    node = g.to_json()["nodes"][0]
    assert node["tag"] == tag and node["forward_phase"] == "INFERENCE"
    assert list(node["outputs"]) == ["Y"]


def test_rmsnorm_with_and_without_bias() -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 1024])
    Y, V = g.rmsnorm(TRAIN, X, S, B, 1e-6)
    Y2, V2 = g.rmsnorm(TRAIN, X, S, epsilon=1e-6)
    outputs(Y, V, Y2, V2)
    g.validate()
    assert shape(V) == ([8, 1], [1, 1], dt.HALF)
    nodes = g.to_json()["nodes"]
    assert "BIAS" in nodes[0]["inputs"] and "BIAS" not in nodes[1]["inputs"]
    assert nodes[1]["outputs"] == {"Y": "1::Y", "INV_VARIANCE": "1::INV_VARIANCE"}


def test_documented_shape_examples() -> None:
    """Shapes the reference frontend infers (api_spec section 7)."""
    g = graph()
    X = g.tensor(name="x", dim=[4, 8, 1, 1], stride=[8, 1, 8, 8])
    S, B = channel(g, "s"), channel(g, "b")
    Y, M, V = g.layernorm(TRAIN, X, S, B, 1e-5)
    outputs(Y, M, V)
    g.validate()
    assert M.get_dim() == [4, 1, 1, 1] and Y.get_stride() == [8, 1, 8, 8]
    g = graph()
    X = nhwc(g, "x", 4, 8, 2, 2)
    out = g.batchnorm(X, channel(g, "s"), channel(g, "b"), channel(g, "rm"), channel(g, "rv"), 1e-5, 0.1)
    outputs(*out)
    g.validate()
    for t in out[1:]:
        assert shape(t) == ([1, 8, 1, 1], [8, 1, 8, 8], dt.HALF)
    assert out[0].get_stride() == X.get_stride()


def test_instancenorm_statistics_per_sample_and_channel() -> None:
    g = graph()
    Y, M, V = g.instancenorm(TRAIN, nhwc(g, "x"), channel(g, "s"), channel(g, "b"), 1e-5)
    outputs(Y, M, V)
    g.validate()
    assert shape(M) == ([4, 8, 1, 1], [8, 1, 8, 8], dt.HALF)


def test_adalayernorm_keeps_the_batch_in_its_statistics() -> None:
    g = graph(dt.BFLOAT16)
    X, S, B = ln_inputs(g, [2, 16, 64], [2, 1, 64])
    Y, M, V = g.adalayernorm(TRAIN, X, S, B, epsilon=1e-5)
    outputs(Y, M, V)
    g.validate()
    assert M.get_dim() == [2, 16, 1]
    g.adalayernorm(INFER, X, S, epsilon=1e-5)  # bias is optional
    assert "BIAS" not in g.nodes[1].inputs


def test_batchnorm_without_running_statistics() -> None:
    g = graph()
    out = g.batchnorm(nhwc(g, "x"), channel(g, "s"), channel(g, "b"), None, None, 1e-5, None)
    assert len(out) == 5 and out[3:] == [None, None]
    outputs(*out)
    g.validate()
    node = g.to_json()["nodes"][0]
    assert node["tag"] == "BATCHNORM" and node["peer_stats"] == []
    assert set(node["inputs"]) == {"X", "SCALE", "BIAS", "EPSILON"}
    assert set(node["outputs"]) == {"Y", "MEAN", "INV_VARIANCE"}


def test_batchnorm_running_statistics_take_the_previous_type() -> None:
    g = graph(None)  # no io type: the running statistics take the previous ones', the others FLOAT
    rm = g.tensor(name="rm", dim=[1, 8, 1, 1], data_type=dt.HALF)
    rv = g.tensor(name="rv", dim=[1, 8, 1, 1], data_type=dt.HALF)
    out = g.batchnorm(nhwc(g, "x", data_type=dt.HALF), channel(g, "s"), channel(g, "b"), rm, rv, 1e-5, 0.1,
                      name="bn")
    outputs(*out)
    g.validate()
    assert out[3].get_data_type() == dt.HALF and out[1].get_data_type() == dt.FLOAT
    node = g.to_json()["nodes"][0]
    assert node["inputs"]["PREV_RUNNING_MEAN"] == "rm" and node["inputs"]["MOMENTUM"] == "bn::MOMENTUM"
    assert node["outputs"]["NEXT_RUNNING_VAR"] == "bn::NEXT_RUNNING_VAR"


def test_batchnorm_inference_json_and_shape() -> None:
    g = graph()
    X = nhwc(g, "x")
    Y = g.batchnorm_inference(X, channel(g, "m"), channel(g, "iv"), channel(g, "s"), channel(g, "b"))
    assert isinstance(Y, cudnn.tensor)
    Y.set_output(True)
    g.validate()
    assert shape(Y) == (X.get_dim(), X.get_stride(), dt.HALF)
    node = g.to_json()["nodes"][0]
    assert node["tag"] == "BATCHNORM_INFERENCE" and set(node) == {"compute_data_type", "inputs", "name",
                                                                 "outputs", "tag"}
    assert list(node["inputs"]) == ["X", "MEAN", "INV_VARIANCE", "SCALE", "BIAS"]


def test_open_scale_dims_are_inferred() -> None:
    g = graph()
    X = g.tensor(name="x", dim=[8, 32, 64])
    S = cudnn.tensor(name="s", data_type=dt.FLOAT)
    B = cudnn.tensor(name="b", data_type=dt.FLOAT)
    Y, M, V = g.layernorm(TRAIN, X, S, B, 1e-5)
    outputs(Y, M, V)
    g.validate()
    assert S.get_dim() == [1, 32, 64] and M.get_dim() == [8, 1, 1]


def test_zero_centered_gamma_is_an_attribute_of_the_norm() -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 64])
    Y, M, V = g.layernorm(TRAIN, X, S, B, 1e-5, name="ln", zero_centered_gamma=True)
    outputs(Y, M, V)
    g.validate()
    (ln,) = g.nodes
    assert ln.inputs["SCALE"] is S and ln.inputs["SCALE_OFFSET"].get_value() == 1.0
    node = g.to_json()["nodes"][0]
    assert node["zero_centered_gamma"] is True
    assert node["inputs"] == {"X": "x", "SCALE": "scale", "BIAS": "bias", "EPSILON": "ln::EPSILON",
                              "SCALE_OFFSET": "ln::SCALE_OFFSET"}
    assert g.to_json()["tensors"]["ln::SCALE_OFFSET"]["pass_by_value"] == 1.0
    with pytest.raises(TypeError, match="zero_centered_gamma: expected True or False, got 'yes'"):
        g.layernorm(TRAIN, X, S, B, 1e-5, zero_centered_gamma="yes")  # type: ignore[arg-type]


def test_unnamed_norms_get_numbered_names() -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 64])
    Y, _, _ = g.layernorm(INFER, X, S, B, 1e-5)
    Z, _ = g.rmsnorm(INFER, Y, S, epsilon=1e-5)
    assert [n.name for n in g.nodes] == ["0", "1"]
    assert Z.get_name() == "1::Y"


# -- backward inference ----------------------------------------------------------------------------

def test_layernorm_backward_shapes_and_types() -> None:
    g = graph(dt.BFLOAT16)
    X, S, _ = ln_inputs(g)
    DY = g.tensor(name="dy", dim=[4, 128, 768])
    M = g.tensor(name="m", dim=[4, 128, 1], data_type=dt.FLOAT)
    V = g.tensor(name="v", dim=[4, 128, 1], data_type=dt.FLOAT)
    out = g.layernorm_backward(DY, X, S, M, V, name="dln")
    outputs(*out)
    g.validate()
    # DX shaped as X (the backend requires it); the gradients channels last (NHWC order), in the
    # io type, as the official infers
    assert shape(out[0]) == ([4, 128, 768], X.get_stride(), dt.BFLOAT16) and X.get_stride() == [98304, 768, 1]
    assert shape(out[1]) == ([1, 1, 768], [768, 1, 1], dt.BFLOAT16)
    node = g.to_json()["nodes"][0]
    assert node["tag"] == "LAYER_NORM_BPROP" and set(node) == {"compute_data_type", "inputs", "name",
                                                              "outputs", "tag"}
    assert list(node["inputs"]) == ["DY", "X", "SCALE", "MEAN", "INV_VARIANCE"]
    assert node["outputs"] == {"DX": "dln::DX", "DSCALE": "dln::DSCALE", "DBIAS": "dln::DBIAS"}


@pytest.mark.parametrize("has_dbias", [True, False])
def test_rmsnorm_backward_documented_names(has_dbias: bool) -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [8, 64])
    V = g.tensor(name="v", dim=[8, 1], data_type=dt.FLOAT)
    out = g.rmsnorm_backward(g.tensor(name="dy", dim=[8, 64]), X, S, V, has_dbias, name="r")
    assert len(out) == 3 and (out[2] is None) != has_dbias
    outputs(*out)
    g.validate()
    node = g.to_json()["nodes"][0]
    assert node["tag"] == "RMS_NORM_BPROP"
    want = {"DX": "r::DX", "DSCALE": "r::Dscale"} | ({"DBIAS": "r::Dbias"} if has_dbias else {})
    assert node["outputs"] == want


def test_instancenorm_and_batchnorm_backward() -> None:
    g = graph()
    X, S = nhwc(g, "x"), channel(g, "s")
    stats = [g.tensor(name=n, dim=[4, 8, 1, 1], stride=[8, 1, 8, 8], data_type=dt.FLOAT) for n in ("m", "v")]
    din = g.instancenorm_backward(nhwc(g, "dy"), X, S, *stats)
    peers = [g.tensor(name=f"peer{i}", dim=[2, 32, 1, 1], data_type=dt.FLOAT) for i in range(2)]
    dbn = g.batchnorm_backward(nhwc(g, "dy2"), X, S, channel(g, "bm"), channel(g, "bv"), peers)
    outputs(*din, *dbn)
    g.validate()
    assert shape(din[1]) == ([1, 8, 1, 1], [8, 1, 8, 8], dt.HALF)
    assert din[0].get_stride() == X.get_stride()
    nodes = g.to_json()["nodes"]
    assert nodes[0]["tag"] == "INSTANCE_NORM_BPROP"
    assert nodes[1]["tag"] == "DBN" and nodes[1]["peer_stats"] == ["peer0", "peer1"]


def test_instancenorm_backward_without_statistics_needs_epsilon() -> None:
    g = graph()
    out = g.instancenorm_backward(nhwc(g, "dy"), nhwc(g, "x"), channel(g, "s"), epsilon=1e-5)
    outputs(*out)
    g.validate()
    assert set(g.nodes[0].inputs) == {"DY", "X", "SCALE", "EPSILON"}
    with pytest.raises(cudnn.GraphError, match="needs epsilon"):
        g.instancenorm_backward(nhwc(g, "dy"), nhwc(g, "x"), channel(g, "s"))
    with pytest.raises(cudnn.GraphError, match="both mean and inv_variance"):
        g.instancenorm_backward(nhwc(g, "dy"), nhwc(g, "x"), channel(g, "s"), mean=channel(g, "m"))


def test_adalayernorm_backward_gradients_per_sample() -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [2, 16, 64], [2, 1, 64])
    st = [g.tensor(name=n, dim=[2, 16, 1], data_type=dt.FLOAT) for n in ("m", "v")]
    out = g.adalayernorm_backward(g.tensor(name="dy", dim=[2, 16, 64]), X, S, *st)
    outputs(*out)
    g.validate()
    assert out[1].get_dim() == [2, 1, 64] and g.to_json()["nodes"][0]["tag"] == "ADA_LAYER_NORM_BPROP"


def test_bn_finalize_from_genstats() -> None:
    g = graph()
    X = nhwc(g, "x")
    total, squares = g.genstats(X)
    out = g.bn_finalize(total, squares, channel(g, "s"), channel(g, "b"), 1e-5, 4 * 6 * 6,
                        channel(g, "rm"), channel(g, "rv"), 0.1, name="fin")
    assert len(out) == 6
    outputs(*out)
    g.validate()
    for t in out:
        assert shape(t) == ([1, 8, 1, 1], [8, 1, 8, 8], dt.HALF)
    count = g.nodes[1].inputs["ACCUM_COUNT"]
    assert count.get_data_type() == dt.INT64 and count.get_value() == 144 and count.get_dim() == [1, 1, 1, 1]
    assert g.to_json()["nodes"][1]["tag"] == "BN_FINALIZE"
    with pytest.raises(cudnn.GraphError, match="accum_count must be an int"):
        g.bn_finalize(total, squares, channel(g, "s"), channel(g, "b"), 1e-5, 144.0)


# -- bad input -------------------------------------------------------------------------------------

def validate_error(g: cudnn.pygraph, *tensors: Any) -> str:
    outputs(*tensors)
    with pytest.raises(cudnn.GraphError) as info:
        g.validate()
    return str(info.value)


@pytest.mark.parametrize("scale_dims,needle", [
    ([768], "has 1 dims [768] but X has 3"),
    ([1, 1, 512], "at axis 2 it has 512, expected 1 or 768"),
    ([4, 1, 768], "axis 0 of X [4, 128, 768] is the batch"),
    ([1, 1, 1], "select no axis of X"),
])
def test_scale_that_does_not_match_the_normalized_axes(scale_dims: list[int], needle: str) -> None:
    g = graph()
    X = g.tensor(name="x", dim=[4, 128, 768])
    S = g.tensor(name="gamma", dim=scale_dims, data_type=dt.FLOAT)
    out = g.layernorm(TRAIN, X, S, S, 1e-5, name="ln")
    msg = validate_error(g, *out)
    assert "layernorm 'ln': SCALE tensor 'gamma'" in msg and needle in msg


def test_bias_must_match_scale() -> None:
    g = graph()
    X, S, _ = ln_inputs(g)
    B = g.tensor(name="beta", dim=[1, 128, 768], data_type=dt.FLOAT)
    msg = validate_error(g, *g.layernorm(TRAIN, X, S, B, 1e-5, name="ln"))
    assert "layernorm 'ln': BIAS tensor 'beta' has dims [1, 128, 768]; expected [1, 1, 768]" in msg


@pytest.mark.parametrize("op", ["instancenorm", "batchnorm"])
def test_channel_parameters_must_be_per_channel(op: str) -> None:
    g = graph()
    X, S, B = nhwc(g, "x"), g.tensor(name="s", dim=[1, 8, 6, 1], data_type=dt.FLOAT), channel(g, "b")
    out = (g.instancenorm(TRAIN, X, S, B, 1e-5, name="n") if op == "instancenorm"
           else g.batchnorm(X, S, B, None, None, 1e-5, None, name="n"))
    msg = validate_error(g, *out)
    assert f"{op} 'n': SCALE tensor 's' has dims [1, 8, 6, 1]" in msg and "expected [1, 8, 1, 1]" in msg


def test_running_statistics_with_the_wrong_shape() -> None:
    g = graph()
    rm = g.tensor(name="rm", dim=[1, 4, 1, 1], data_type=dt.FLOAT)
    out = g.batchnorm(nhwc(g, "x"), channel(g, "s"), channel(g, "b"), rm, channel(g, "rv"), 1e-5, 0.1, name="bn")
    assert "batchnorm 'bn': PREV_RUNNING_MEAN tensor 'rm' has dims [1, 4, 1, 1]" in validate_error(g, *out)


@pytest.mark.parametrize("epsilon,needle", [
    ("tensor", "EPSILON tensor 'eps' must be a scalar (every dim 1), got dims [1, 4]"),
    ([1e-5], "epsilon must be a cudnn.tensor, a framework tensor or a Python number; got list"),
    (None, "epsilon is required, got None"),
])
def test_epsilon_must_be_a_scalar(epsilon: Any, needle: str) -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 64])
    if epsilon == "tensor":
        epsilon = g.tensor(name="eps", dim=[1, 4], data_type=dt.FLOAT, is_pass_by_value=True)
        msg = validate_error(g, *g.layernorm(TRAIN, X, S, B, epsilon, name="ln"))
        assert msg.startswith("layernorm 'ln': ")
    else:
        with pytest.raises((cudnn.GraphError, TypeError)) as info:  # a TypeError for a list
            g.layernorm(TRAIN, X, S, B, epsilon, name="ln")
        msg = str(info.value)
        assert msg.startswith("layernorm 'ln': ")
    assert needle in msg


def test_rmsnorm_requires_epsilon() -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [8, 64])
    with pytest.raises(cudnn.GraphError, match="rmsnorm '0': epsilon is required"):
        g.rmsnorm(TRAIN, X, S)


@pytest.mark.parametrize("given,needle", [
    ({"rm": None, "rv": "t", "momentum": 0.1}, "in_running_mean is None but in_running_var is given"),
    ({"rm": "t", "rv": None, "momentum": 0.1}, "in_running_var is None but in_running_mean is given"),
    ({"rm": None, "rv": None, "momentum": 0.1}, "momentum is given but in_running_mean and in_running_var are None"),
    ({"rm": "t", "rv": "t", "momentum": None}, "momentum is None but in_running_mean and in_running_var are given"),
])
def test_running_statistics_come_in_pairs_with_a_momentum(given: dict, needle: str) -> None:  # type: ignore[type-arg]
    g = graph()
    stat = {k: (channel(g, k) if v == "t" else v) for k, v in given.items()}
    with pytest.raises(cudnn.GraphError) as info:
        g.batchnorm(nhwc(g, "x"), channel(g, "s"), channel(g, "b"), stat["rm"], stat["rv"], 1e-5,
                    stat["momentum"], name="bn")
    assert str(info.value).startswith("batchnorm 'bn': ") and needle in str(info.value)


@pytest.mark.parametrize("phase", [cudnn.norm_forward_phase.NOT_SET, 1, "train"])
def test_forward_phase_must_be_training_or_inference(phase: Any) -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 64])
    with pytest.raises(cudnn.GraphError, match="norm_forward_phase must be cudnn.norm_forward_phase.TRAINING"):
        g.layernorm(phase, X, S, B, 1e-5)


def test_phase_given_by_name() -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 64])
    assert g.layernorm("INFERENCE", X, S, B, 1e-5)[1] is None


def test_backward_statistics_and_gradient_shapes_are_checked() -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [8, 64])
    V = g.tensor(name="v", dim=[1, 64], data_type=dt.FLOAT)
    out = g.layernorm_backward(g.tensor(name="dy", dim=[8, 64]), X, S, V, V, name="dln")
    msg = validate_error(g, *out)
    assert "layernorm_backward 'dln': MEAN tensor 'v' has dims [1, 64]; expected [8, 1]" in msg
    g = graph()
    X, S, _ = ln_inputs(g, [8, 64])
    V = g.tensor(name="v", dim=[8, 1], data_type=dt.FLOAT)
    out = g.layernorm_backward(g.tensor(name="dy", dim=[8, 32]), X, S, V, V, name="dln")
    assert "layernorm_backward 'dln': DY tensor 'dy' has dims [8, 32]; expected [8, 64]" in validate_error(g, *out)


def test_user_dims_on_statistics_outputs_are_checked() -> None:
    g = graph()
    X, S, B = ln_inputs(g, [8, 64])
    Y, M, V = g.layernorm(TRAIN, X, S, B, 1e-5, name="ln")
    M.set_dim([1, 64])
    assert "layernorm 'ln': MEAN: dims [1, 64] do not match the inferred [8, 1]" in validate_error(g, Y, M, V)


def test_has_dbias_is_a_bool_and_peer_stats_a_list() -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [8, 64])
    assert g.rmsnorm_backward(X, X, S, X, None)[2] is None  # None is False, as the official converts a bool
    with pytest.raises(TypeError, match="has_dbias: expected True or False, got 'yes'"):
        g.rmsnorm_backward(X, X, S, X, "yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="peer_stats must be a list of tensors"):
        g.batchnorm(nhwc(g, "x"), channel(g, "s"), channel(g, "b"), None, None, 1e-5, None, peer_stats=X)


def test_batchnorm_inference_lowering_choice_is_checked() -> None:
    g = graph()
    with pytest.raises(cudnn.GraphError, match="lowering must be 'auto', 'norm' or 'pointwise'"):
        g.batchnorm_inference(nhwc(g, "x"), *(channel(g, n) for n in "mvsb"), lowering="fast")


# -- lowering (recorded) ----------------------------------------------------------------------------

class FakeDesc:
    """Records what lowering sets; values are checked to be settable (types inferred, arrays built)."""

    def __init__(self, kind: str, label: str, tensor: Any = None) -> None:
        self.kind, self.label, self.tensor = kind, label, tensor
        self.attrs: dict[str, Any] = {}

    def set(self, attr: Any, value: Any, attr_type: Any = None) -> FakeDesc:
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(i, FakeDesc) for i in items):
            t = attr_type or backend_descriptor._infer_type(items, attr_label(attr))
            backend_descriptor._to_array(items, t, attr_label(attr))
        self.attrs[attr_label(attr).removeprefix("CUDNN_ATTR_").removeprefix("OPERATION_")] = value
        return self

    def finalize(self) -> FakeDesc:
        return self


class FakeLowering(Lowering):
    def __init__(self, version: int = 91900) -> None:
        super().__init__(0, version)
        self.made: dict[int, FakeDesc] = {}

    def descriptor(self, desc_type: D, label: str) -> Any:  # type: ignore[override]
        self.require(f"{label}: {desc_type.name}", None)
        return FakeDesc(desc_type.name.replace("CUDNN_BACKEND_", ""), label)

    def tensor(self, t: cudnn.tensor) -> Any:  # type: ignore[override]
        """One descriptor per tensor object, as the real Lowering."""
        if id(t) not in self.made:
            self.tensor_objects.append(t)
            self.made[id(t)] = FakeDesc("TENSOR", t.get_name(), (t.get_uid(), t.get_dim(), t.get_stride(),
                                                                 t.get_data_type(), t.get_is_virtual()))
        return self.made[id(t)]


def lower(g: cudnn.pygraph, version: int = 91900) -> list[FakeDesc]:
    g.validate()
    nodes, _ = expand(g.nodes, g.context, version)
    assign_uids(all_tensors(nodes))
    lw = FakeLowering(version)
    return [op for n in nodes for op in n.lower(lw)]


def test_layernorm_lowers_to_norm_forward_in_the_canonical_view() -> None:
    g = graph(dt.BFLOAT16)
    X, S, B = ln_inputs(g)
    out = g.layernorm(TRAIN, X, S, B, 1e-5, name="ln", lowering="norm")
    outputs(*out)
    (op,) = lower(g)
    assert op.kind == "OPERATION_NORM_FORWARD_DESCRIPTOR"
    a = op.attrs
    assert a["NORM_FWD_MODE"] == cudnn.norm_mode.LAYER_NORM and a["NORM_FWD_PHASE"] == TRAIN
    assert set(a) == {"NORM_FWD_MODE", "NORM_FWD_PHASE", "NORM_FWD_XDESC", "NORM_FWD_SCALE_DESC",
                      "NORM_FWD_BIAS_DESC", "NORM_FWD_EPSILON_DESC", "NORM_FWD_YDESC", "NORM_FWD_MEAN_DESC",
                      "NORM_FWD_INV_VARIANCE_DESC"}
    uid, dims, strides, _, _ = a["NORM_FWD_XDESC"].tensor
    assert (uid, dims, strides) == (X.get_uid(), [512, 768, 1, 1], [768, 1, 768, 768])
    assert a["NORM_FWD_SCALE_DESC"].tensor[1:3] == ([1, 768, 1, 1], [768, 1, 768, 768])
    assert a["NORM_FWD_MEAN_DESC"].tensor[1:3] == ([512, 1, 1, 1], [1, 1, 1, 1])
    assert a["NORM_FWD_EPSILON_DESC"].tensor[1] == [1, 1, 1, 1]
    assert X.get_dim() == [4, 128, 768]  # the user's tensor is untouched


def test_no_canonical_view_when_another_node_shares_a_tensor() -> None:
    g = graph()
    X, S, B = ln_inputs(g)
    Y, M, V = g.layernorm(TRAIN, X, S, B, 1e-5, name="ln")
    g.add(Y, X).set_output(True)
    outputs(M, V)
    a = lower(g)[0].attrs
    assert a["NORM_FWD_XDESC"].tensor[1] == [4, 128, 768]  # every port as given: none in the view
    assert a["NORM_FWD_SCALE_DESC"].tensor[1] == [1, 1, 768] and a["NORM_FWD_MEAN_DESC"].tensor[1] == [4, 128, 1]


@pytest.mark.parametrize("x", [[4, 128, 768], [512, 768]], ids=["3d", "2d"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_zero_centered_gamma_lowers_an_add_and_the_norm_in_one_view(x: list[int], backward: bool) -> None:
    """cuDNN reads X's first dim as the rows when SCALE comes from a pointwise op (the GPU log:
    "rows: 4, cols: 98304 deduced"): the ADD and the norm both get the [rows, hidden, 1, 1] view."""
    g = graph()
    X, S, B = ln_inputs(g, x)
    stats = [g.tensor(name=n, dim=x[:-1] + [1], data_type=dt.FLOAT) for n in ("m", "v")]
    if backward:
        out = g.layernorm_backward(g.tensor(name="dy", dim=x), X, S, *stats, name="ln", zero_centered_gamma=True)
        out[0].set_stride(X.get_stride())  # DX laid out as X: the official infers channels last (no such view in 3-D)
        outputs(*out)
    else:
        outputs(*g.layernorm(TRAIN, X, S, B, 1e-5, name="ln", zero_centered_gamma=True))
    add, norm = lower(g)
    assert add.kind == "OPERATION_POINTWISE_DESCRIPTOR"
    assert add.attrs["POINTWISE_PW_DESCRIPTOR"].attrs["POINTWISE_MODE"] == cudnn.pointwise_mode.ADD
    scale_in, one, plus = (add.attrs[f"POINTWISE_{k}DESC"].tensor for k in ("X", "B", "Y"))
    assert scale_in[:3] == (S.get_uid(), [1, 768, 1, 1], [768, 1, 768, 768])
    assert one[1] == [1, 1, 1, 1]
    graph_uids = {t.get_uid() for n in g.nodes for t in (*n.inputs.values(), *n.outputs.values())}
    assert plus[1:] == ([1, 768, 1, 1], [768, 1, 768, 768], dt.FLOAT, True) and plus[0] not in graph_uids
    key = "NORM_BWD" if backward else "NORM_FWD"
    assert norm.attrs[f"{key}_SCALE_DESC"] is add.attrs["POINTWISE_YDESC"]
    assert norm.attrs[f"{key}_XDESC"].tensor[1:3] == ([512, 768, 1, 1], [768, 1, 768, 768])
    assert norm.attrs[f"{key}_INV_VARIANCE_DESC"].tensor[1:3] == ([512, 1, 1, 1], [1, 1, 1, 1])
    if not backward:
        assert norm.attrs["NORM_FWD_BIAS_DESC"].tensor[1] == [1, 768, 1, 1]


def test_rmsnorm_backward_without_dbias_sets_no_dbias() -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [8, 64])
    V = g.tensor(name="v", dim=[8, 1], data_type=dt.FLOAT)
    outputs(*g.rmsnorm_backward(g.tensor(name="dy", dim=[8, 64]), X, S, V, False))
    (op,) = lower(g)
    assert op.kind == "OPERATION_NORM_BACKWARD_DESCRIPTOR"
    assert set(op.attrs) == {"NORM_BWD_MODE", "NORM_BWD_XDESC", "NORM_BWD_DYDESC", "NORM_BWD_SCALE_DESC",
                             "NORM_BWD_INV_VARIANCE_DESC", "NORM_BWD_DXDESC", "NORM_BWD_DSCALE_DESC"}
    assert op.attrs["NORM_BWD_MODE"] == cudnn.norm_mode.RMS_NORM
    assert op.attrs["NORM_BWD_DXDESC"].tensor[1] == [8, 64, 1, 1]


def test_batchnorm_lowers_running_statistics_and_peers() -> None:
    g = graph()
    peers = [g.tensor(name=f"p{i}", dim=[2, 32, 1, 1], data_type=dt.FLOAT) for i in range(2)]
    out = g.batchnorm(nhwc(g, "x"), channel(g, "s"), channel(g, "b"), channel(g, "rm"), channel(g, "rv"),
                      1e-5, 0.1, peers)
    outputs(*out)
    (op,) = lower(g)
    a = op.attrs
    assert a["NORM_FWD_MODE"] == cudnn.norm_mode.BATCH_NORM and a["NORM_FWD_PHASE"] == TRAIN
    for key in ("EXP_AVG_FACTOR_DESC", "INPUT_RUNNING_MEAN_DESC", "OUTPUT_RUNNING_VAR_DESC"):
        assert f"NORM_FWD_{key}" in a
    assert [d.label for d in a["NORM_FWD_PEER_STAT_DESCS"]] == ["p0", "p1"]
    assert a["NORM_FWD_XDESC"].tensor[2] == [288, 1, 48, 8]  # batch norm keeps the user's layout


def test_batchnorm_inference_is_pointwise_unless_a_dbn_follows() -> None:
    g = graph()
    X = nhwc(g, "x")
    Y = g.batchnorm_inference(X, *(channel(g, n) for n in "mvsb"), name="bni")
    Y.set_output(True)
    ops = lower(g)
    assert [o.attrs["POINTWISE_PW_DESCRIPTOR"].attrs["POINTWISE_MODE"].name for o in ops] == ["SUB", "MUL", "MUL",
                                                                                              "ADD"]
    inner = [o.attrs["POINTWISE_YDESC"].tensor for o in ops[:3]]
    graph_uids = {t.get_uid() for n in g.nodes for t in (*n.inputs.values(), *n.outputs.values())}
    assert all(t[4] and t[3] == dt.FLOAT and t[1] == X.get_dim() for t in inner)  # virtual float intermediates
    assert len({t[0] for t in inner}) == 3 and not {t[0] for t in inner} & graph_uids
    assert ops[-1].attrs["POINTWISE_YDESC"].tensor[0] == Y.get_uid()
    g = graph()
    X, S = nhwc(g, "x"), channel(g, "s")
    M, V = channel(g, "m"), channel(g, "v")
    Y = g.batchnorm_inference(X, M, V, S, channel(g, "b"))
    dx = g.relu_backward(nhwc(g, "dy"), Y)
    outputs(*g.batchnorm_backward(dx, X, S, M, V))
    ops = lower(g)
    assert ops[0].kind == "OPERATION_NORM_FORWARD_DESCRIPTOR" and ops[0].attrs["NORM_FWD_PHASE"] == INFER
    assert "NORM_FWD_MEAN_DESC" in ops[0].attrs and ops[-1].kind == "OPERATION_NORM_BACKWARD_DESCRIPTOR"


def test_adalayernorm_needs_cudnn_9_9() -> None:
    g = graph()
    X, S, B = ln_inputs(g, [2, 16, 64], [2, 1, 64])
    g.adalayernorm(INFER, X, S, B, epsilon=1e-5, name="ada")[0].set_output(True)
    with pytest.raises(FeatureUnavailableError, match=r"adalayernorm 'ada': ADA_LAYER_NORM .*cuDNN >= 9.9.0"):
        lower(g, version=90800)
    (op,) = lower(g, version=91900)
    assert op.attrs["NORM_FWD_MODE"] == cudnn.norm_mode.ADA_LAYER_NORM
    assert op.attrs["NORM_FWD_XDESC"].tensor[1] == [2, 16, 64]  # per-sample scale: no flattened view


def test_bn_finalize_lowering() -> None:
    """The backend requires the accumulation count and the exponential average factor even
    without running statistics (9.19: "... || !hasBnAccumCnt || !hasBnExpAverageFactor")."""
    g = graph()
    total, squares = channel(g, "sum"), channel(g, "sq_sum")
    outputs(*g.bn_finalize(total, squares, channel(g, "s"), channel(g, "b"), 1e-5, 144, name="fin"))
    (op,) = lower(g)
    assert op.kind == "OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR"
    assert {"BN_FINALIZE_ACCUM_COUNT_DESC", "BN_FINALIZE_EXP_AVERATE_FACTOR_DESC", "BN_FINALIZE_EQ_SCALE_DESC",
            "BN_FINALIZE_SAVED_INV_STD_DESC", "BN_FINALIZE_MATH_PREC", "BN_FINALIZE_STATS_MODE"} <= set(op.attrs)
    assert "BN_FINALIZE_PREV_RUNNING_MEAN_DESC" not in op.attrs
    momentum = g.nodes[0].inputs["MOMENTUM"]
    assert momentum.get_value() == 0.0 and momentum.get_name() == "fin::MOMENTUM"
    y_sum, y_sq = (op.attrs[f"BN_FINALIZE_Y_{k}_DESC"].tensor for k in ("SUM", "SQ_SUM"))
    assert y_sum[1:] == y_sq[1:]  # alike but for the uid


def test_bn_finalize_sums_must_be_alike() -> None:
    g = graph()
    sq = g.tensor(name="sq", dim=[1, 8, 1, 1], data_type=dt.HALF)
    out = g.bn_finalize(channel(g, "sum"), sq, channel(g, "s"), channel(g, "b"), 1e-5, 144, name="fin")
    msg = validate_error(g, *out)
    assert "bn_finalize 'fin': SQ_SUM tensor 'sq' has strides [8, 1, 1, 1] and type HALF" in msg
    assert "cuDNN needs the two alike" in msg


def test_a_tensor_on_two_ports_gets_one_descriptor() -> None:
    g = graph()
    X, S, _ = ln_inputs(g)
    g.layernorm(INFER, X, S, S, 1e-5, lowering="norm")[0].set_output(True)
    (op,) = lower(g)
    assert op.attrs["NORM_FWD_SCALE_DESC"] is op.attrs["NORM_FWD_BIAS_DESC"]
    assert op.attrs["NORM_FWD_SCALE_DESC"].tensor[1] == [1, 768, 1, 1]


def test_constants_are_named_after_the_node_and_port() -> None:
    g = graph()
    out = g.batchnorm(nhwc(g, "x"), channel(g, "s"), channel(g, "b"), channel(g, "rm"), channel(g, "rv"), 1e-5,
                      0.1, name="b")
    node = g.to_json()["nodes"][0]
    assert node["inputs"]["EPSILON"] == "b::EPSILON" and node["inputs"]["MOMENTUM"] == "b::MOMENTUM"
    assert out[0].get_name() == "b::Y"


@pytest.mark.parametrize("op", ["rmsnorm", "rmsnorm_backward", "layernorm_backward", "adalayernorm"])
def test_zero_centered_gamma_for_other_norms(op: str) -> None:
    g = graph()
    X, S, _ = ln_inputs(g, [2, 8, 64], [2, 1, 64] if op == "adalayernorm" else None)
    V = g.tensor(name="v", dim=[2, 8, 1], data_type=dt.FLOAT)
    DY = g.tensor(name="dy", dim=[2, 8, 64])
    if op == "rmsnorm":
        out = g.rmsnorm(TRAIN, X, S, epsilon=1e-5, name="n", zero_centered_gamma=True)
    elif op == "adalayernorm":
        out = g.adalayernorm(TRAIN, X, S, epsilon=1e-5, name="n", zero_centered_gamma=True)
    elif op == "rmsnorm_backward":
        out = g.rmsnorm_backward(DY, X, S, V, True, name="n", zero_centered_gamma=True)
    else:
        out = g.layernorm_backward(DY, X, S, V, V, name="n", zero_centered_gamma=True)
    outputs(*out)
    g.validate()
    (norm,) = g.nodes
    assert norm.inputs["SCALE"] is S and g.to_json()["nodes"][0]["zero_centered_gamma"] is True
    if op.endswith("_backward"):
        assert out[1].get_dim() == S.get_dim() and out[1].get_data_type() == dt.HALF  # the io type
    ops = lower(g)
    assert [o.kind for o in ops] == ["OPERATION_POINTWISE_DESCRIPTOR", ops[1].kind]
    assert ops[1].kind.startswith("OPERATION_NORM_")


def test_options_that_change_lowering_change_the_graph_key() -> None:
    """The plan cache keys on graph.key(): a graph lowered otherwise must not share its plan."""
    def ln(zero_centered: bool) -> int:
        g = graph()
        X, S, B = ln_inputs(g, [8, 64])
        outputs(g.layernorm(INFER, X, S, B, 1e-5, name="ln", zero_centered_gamma=zero_centered)[0])
        g.validate()
        return g.key()

    def bni(lowering: str) -> tuple[int, dict[str, Any]]:
        g = graph()
        g.batchnorm_inference(nhwc(g, "x"), *(channel(g, n) for n in "mvsb"), name="bni",
                              lowering=lowering).set_output(True)
        g.validate()
        return g.key(), g.to_json()["nodes"][0]

    assert ln(True) != ln(False) and ln(True) == ln(True)
    keys = {lowering: bni(lowering) for lowering in ("auto", "norm", "pointwise")}
    assert len({k for k, _ in keys.values()}) == 3
    assert "lowering" not in keys["auto"][1] and keys["norm"][1]["lowering"] == "norm"


# -- fp32 SCALE/BIAS with a 16-bit X: the affine-epilogue lowering --------------------------------

def pointwise_mode(op: FakeDesc) -> Any:
    return op.attrs["POINTWISE_PW_DESCRIPTOR"].attrs["POINTWISE_MODE"]


@pytest.mark.parametrize("io", [dt.BFLOAT16, dt.HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
def test_fp32_affine_lowers_a_unit_scale_norm_and_a_fused_affine(io: Any, phase: Any) -> None:
    """cuDNN 9.19 has only a generic engine for a 16-bit X with fp32 SCALE/BIAS; with the affine
    epilogue the norm gets a unit SCALE and zero BIAS in X's type (workspace scratch) and
    Y = Yhat * SCALE + BIAS follows in fp32 pointwise ops; MEAN and INV_VARIANCE stay the norm's
    outputs."""
    g = graph(io)
    X, S, B = ln_inputs(g)
    Y, M, V = g.layernorm(phase, X, S, B, 1e-5, name="ln", lowering="affine_epilogue")
    outputs(Y, M, V)
    norm, mul, add = lower(g)
    a = norm.attrs
    assert norm.kind == "OPERATION_NORM_FORWARD_DESCRIPTOR" and a["NORM_FWD_PHASE"] == phase
    for port in ("SCALE", "BIAS"):
        uid, dims, strides, dtype, virtual = a[f"NORM_FWD_{port}_DESC"].tensor
        assert (dims, strides, dtype, virtual) == ([1, 768, 1, 1], [768, 1, 768, 768], io, False)
        assert uid not in (S.get_uid(), B.get_uid())
    assert a["NORM_FWD_YDESC"].tensor[1:] == ([512, 768, 1, 1], [768, 1, 768, 768], dt.FLOAT, True)
    assert a["NORM_FWD_XDESC"].tensor[0] == X.get_uid()
    assert ("NORM_FWD_MEAN_DESC" in a) == (phase == TRAIN)
    if phase == TRAIN:
        assert a["NORM_FWD_MEAN_DESC"].tensor[:2] == (M.get_uid(), [512, 1, 1, 1])
        assert a["NORM_FWD_INV_VARIANCE_DESC"].tensor[0] == V.get_uid()
    assert (pointwise_mode(mul), pointwise_mode(add)) == (cudnn.pointwise_mode.MUL, cudnn.pointwise_mode.ADD)
    assert mul.attrs["POINTWISE_XDESC"] is a["NORM_FWD_YDESC"]
    assert mul.attrs["POINTWISE_BDESC"].tensor[:4] == (S.get_uid(), [1, 768, 1, 1], [768, 1, 768, 768], dt.FLOAT)
    assert add.attrs["POINTWISE_XDESC"] is mul.attrs["POINTWISE_YDESC"]
    assert add.attrs["POINTWISE_BDESC"].tensor[:2] == (B.get_uid(), [1, 768, 1, 1])
    assert add.attrs["POINTWISE_YDESC"].tensor[:5] == (Y.get_uid(), [512, 768, 1, 1], [768, 1, 768, 768], io, False)


def test_fp32_affine_scratch_is_a_filled_unit_scale_and_a_zeroed_bias() -> None:
    g = graph(dt.BFLOAT16)
    X, S, B = ln_inputs(g)
    outputs(*g.layernorm(TRAIN, X, S, B, 1e-5, name="ln"))
    g.validate()
    from cudnn._graph.families.norm_nodes import NormLowering
    nodes, ex = expand(g.nodes, g.context, 91900)  # the default: the single norm, the epilogue its alternative
    assert len(nodes) == 1 and not ex.scratch
    assert ex.chosen == [NormLowering.NORM] and ex.alternatives == [NormLowering.AFFINE_EPILOGUE]
    nodes, ex = expand(g.nodes, g.context, 91900, prefer=NormLowering.AFFINE_EPILOGUE)  # what autotune also builds
    assert len(nodes) == 3 and ex.chosen == [NormLowering.AFFINE_EPILOGUE] and ex.alternatives == [NormLowering.NORM]
    unit, zero = ex.scratch
    assert unit.tensor.get_name() == "ln::UNIT_SCALE" and unit.fill == b"\x80\x3f" * 768 and not unit.zero
    assert zero.tensor.get_name() == "ln::ZERO_BIAS" and zero.fill is None and zero.zero
    assert unit.constant and zero.constant  # only read: written once, outside the workspace
    assert [t.tensor.get_data_type() for t in ex.scratch] == [dt.BFLOAT16] * 2
    g16 = graph(dt.HALF)
    X, S, B = ln_inputs(g16)
    outputs(*g16.layernorm(INFER, X, S, B, 1e-5, name="ln", lowering="affine_epilogue"))
    g16.validate()
    assert expand(g16.nodes, g16.context, 91900)[1].scratch[0].fill == b"\x00\x3c" * 768  # fp16 1.0


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_fp32_affine_is_the_lowering_a_default_build_tries(op: str) -> None:
    """The expansion a build makes offers the affine epilogue as its trial (`build.trial`); one
    that prefers a lowering (autotune's, a forced one), a float X or an older cuDNN offers none."""
    from cudnn._graph.families.norm_nodes import NormLowering

    def trial(io: Any, version: int = 91900, prefer: Any = None, lowering: str = "auto") -> Any:
        g = graph(io)
        X, S, B = ln_inputs(g)
        outputs(*getattr(g, op)(TRAIN, X, S, B, 1e-5, name="n", lowering=lowering))
        g.validate()
        return expand(g.nodes, g.context, version, prefer)[1].trial

    assert trial(dt.BFLOAT16) is NormLowering.AFFINE_EPILOGUE
    assert trial(dt.HALF) is NormLowering.AFFINE_EPILOGUE
    assert trial(dt.BFLOAT16, prefer=NormLowering.AFFINE_EPILOGUE) is None
    assert trial(dt.BFLOAT16, prefer=NormLowering.NORM) is None
    assert trial(dt.BFLOAT16, lowering="norm") is None
    assert trial(dt.BFLOAT16, version=91800) is None
    assert trial(dt.FLOAT) is None


@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_rmsnorm_fp32_affine_needs_no_bias_in_the_norm(with_bias: bool) -> None:
    g = graph(dt.BFLOAT16)
    X, S, B = ln_inputs(g)
    outputs(*g.rmsnorm(TRAIN, X, S, B if with_bias else None, 1e-5, name="rms", lowering="affine_epilogue"))
    ops = lower(g)
    assert [o.kind for o in ops] == ["OPERATION_NORM_FORWARD_DESCRIPTOR"] + ["OPERATION_POINTWISE_DESCRIPTOR"] * (
        2 if with_bias else 1)
    assert "NORM_FWD_BIAS_DESC" not in ops[0].attrs and ops[0].attrs["NORM_FWD_MODE"] == cudnn.norm_mode.RMS_NORM
    assert ops[0].attrs["NORM_FWD_SCALE_DESC"].tensor[3] == dt.BFLOAT16
    assert ops[-1].attrs["POINTWISE_YDESC"].tensor[3] == dt.BFLOAT16


def _single_norm(g: cudnn.pygraph, version: int = 91900) -> bool:
    ops = lower(g, version)
    return len(ops) == 1 and ops[0].kind == "OPERATION_NORM_FORWARD_DESCRIPTOR"


@pytest.mark.parametrize("case", ["params_in_x_type", "fp32_x", "zero_centered", "y_used_by_another_node",
                                  "fp32_y", "older_cudnn", "forced_norm"])
def test_the_single_norm_where_the_affine_epilogue_does_not_apply(case: str) -> None:
    g = graph(dt.FLOAT if case == "fp32_x" else dt.BFLOAT16)
    X = g.tensor(name="x", dim=[4, 128, 768])
    pdt = dt.BFLOAT16 if case == "params_in_x_type" else dt.FLOAT
    S, B = (g.tensor(name=n, dim=[1, 1, 768], data_type=pdt) for n in ("scale", "bias"))
    Y, M, V = g.layernorm(TRAIN, X, S, B, 1e-5, name="ln", zero_centered_gamma=case == "zero_centered",
                          lowering="norm" if case == "forced_norm" else "auto")
    outputs(M, V)
    if case == "y_used_by_another_node":
        g.add(Y, X).set_output(True)
    else:
        Y.set_output(True)
    if case == "fp32_y":
        Y.set_data_type(dt.FLOAT)
    if case == "zero_centered":
        assert [o.kind for o in lower(g)] == ["OPERATION_POINTWISE_DESCRIPTOR", "OPERATION_NORM_FORWARD_DESCRIPTOR"]
        return
    if case == "y_used_by_another_node":
        assert lower(g)[0].attrs["NORM_FWD_SCALE_DESC"].tensor[3] == dt.FLOAT
        return
    version = 91800 if case == "older_cudnn" else 91900
    assert _single_norm(g, version)
    assert expand(g.nodes, g.context, version)[1].alternatives == []  # nothing else for autotune to time


def test_forced_affine_epilogue_is_refused_where_it_does_not_apply() -> None:
    g = graph(dt.BFLOAT16)
    X = g.tensor(name="x", dim=[4, 128, 768])
    S, B = (g.tensor(name=n, dim=[1, 1, 768], data_type=dt.BFLOAT16) for n in ("scale", "bias"))
    outputs(*g.layernorm(TRAIN, X, S, B, 1e-5, name="ln", lowering="affine_epilogue"))
    msg = validate_error(g)
    assert "layernorm 'ln'" in msg and "'affine_epilogue' cannot be used" in msg
    assert "SCALE must be a FLOAT tensor in memory, got BFLOAT16" in msg
    with pytest.raises(cudnn.GraphError, match="lowering must be 'auto', 'norm', 'affine_epilogue', got 'fast'"):
        g.layernorm(TRAIN, X, S, B, 1e-5, name="ln2", lowering="fast")


def test_forced_lowering_is_in_the_json_and_the_graph_key() -> None:
    def ln(lowering: str) -> cudnn.pygraph:
        g = graph(dt.BFLOAT16)
        X, S, B = ln_inputs(g, [8, 64])
        outputs(g.layernorm(INFER, X, S, B, 1e-5, name="ln", lowering=lowering)[0])
        g.validate()
        return g

    graphs = {lw: ln(lw) for lw in ("auto", "norm", "affine_epilogue")}
    assert len({g.key() for g in graphs.values()}) == 3
    assert "lowering" not in graphs["auto"].to_json()["nodes"][0]
    back = cudnn.pygraph()
    back.deserialize(str(graphs["norm"]))
    assert back.to_json()["nodes"][0]["lowering"] == "norm" and _single_norm(back)
