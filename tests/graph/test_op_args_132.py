"""Op methods read positional arguments in v1.23's order and in 1.32's (tensor inputs first,
then attributes), whichever the argument types allow, refuse a call both readings fit
differently, and name the closest argument for an unknown keyword."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnn
from cudnn._graph.methods.method_table import OPS, load_all

load_all()  # every op family imported: OPS lists every op method
DT = cudnn.data_type
TRAINING = cudnn.norm_forward_phase.TRAINING


def graph() -> Any:
    return cudnn.pygraph(io_data_type=DT.HALF, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)


def tensor(g: Any, dims: list[int], name: str, dtype: Any = DT.HALF) -> Any:
    strides = [int(np.prod(dims[i + 1:])) for i in range(len(dims))]
    return g.tensor(dims, strides, dtype, name=name)


def node_json(g: Any) -> list[dict[str, Any]]:
    return [n.to_json() for n in g.nodes]


# -- unknown keywords -----------------------------------------------------------------------------

def test_unknown_keyword_names_the_closest_argument() -> None:
    g = graph()
    x = tensor(g, [2, 8], "x")
    with pytest.raises(TypeError, match=r"^relu\(\): 'inpt' is not an argument of relu; did you mean 'input'\?"):
        g.relu(inpt=x)
    with pytest.raises(TypeError, match=r"'epsilom' is not an argument of layernorm; did you mean 'epsilon'\?"):
        g.layernorm(TRAINING, x, x, x, epsilom=1e-5)
    with pytest.raises(TypeError, match=r"'paddin' is not an argument of conv_fprop; did you mean 'padding'\?"):
        g.conv_fprop(x, x, paddin=[1, 1])
    with pytest.raises(TypeError, match=r"^sdpa\(\): 'is_causal' is not an argument of sdpa"):
        g.sdpa(x, x, x, is_causal=True)
    assert g.nodes == []


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_refuses_an_unknown_keyword_by_name(op: str) -> None:
    shown = OPS[op].__wrapped__.__name__  # an alias (scaled_dot_product_flash_attention) names its op
    with pytest.raises(TypeError, match=rf"^{shown}\(\): 'zzz_not_an_arg' is not an argument of {shown} "
                                        r"\(its arguments: "):
        getattr(graph(), op)(zzz_not_an_arg=1)


def test_a_far_keyword_gets_no_suggestion_but_the_list() -> None:
    with pytest.raises(TypeError) as info:
        graph().add(qqqqqq=1)
    assert "did you mean" not in str(info.value) and "its arguments: a, b, compute_data_type, name" in str(info.value)


def test_signatures_stay_the_v123_ones() -> None:
    import inspect
    params = list(inspect.signature(cudnn.pygraph.layernorm).parameters)
    assert params[:6] == ["self", "norm_forward_phase", "input", "scale", "bias", "epsilon"]


# -- 1.32's positional order ----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["layernorm", "rmsnorm", "instancenorm", "adalayernorm"])
def test_norm_forward_both_orders(op: str) -> None:
    g1, g2 = graph(), graph()
    outs = []
    for g, order in ((g1, "v123"), (g2, "132")):
        x = tensor(g, [4, 8, 1, 1], "x")
        s, b = tensor(g, [1, 8, 1, 1], "s", DT.FLOAT), tensor(g, [1, 8, 1, 1], "b", DT.FLOAT)
        if order == "v123":
            outs.append(getattr(g, op)(TRAINING, x, s, b, 1e-5, name="n"))
        else:
            outs.append(getattr(g, op)(x, s, b, 1e-5, TRAINING, name="n"))
    assert node_json(g1) == node_json(g2)
    assert [t is None for t in outs[0]] == [t is None for t in outs[1]]


def test_norm_forward_132_partial_positional_with_keywords() -> None:
    g = graph()
    x, s = tensor(g, [4, 8, 1, 1], "x"), tensor(g, [1, 8, 1, 1], "s", DT.FLOAT)
    y, inv = g.rmsnorm(x, s, norm_forward_phase=TRAINING, epsilon=1e-5)
    assert y.get_name().endswith("::Y") and inv is not None
    y.set_output(True)
    inv.set_output(True)
    g.validate()
    assert y.get_dim() == [4, 8, 1, 1] and inv.get_dim() == [4, 1, 1, 1]


def test_reduction_both_orders() -> None:
    mode = cudnn.reduction_mode.ADD
    g1, g2, g3 = graph(), graph(), graph()
    for g, call in ((g1, lambda g, x: g.reduction(x, mode, name="r")),
                    (g2, lambda g, x: g.reduction(x, None, mode, name="r")),
                    (g3, lambda g, x: g.reduction(input=x, mode=mode, name="r"))):
        call(g, tensor(g, [4, 8], "x")).set_dim([4, 1])
    assert node_json(g1) == node_json(g2) == node_json(g3)


def test_reduction_132_group_offset_positionally() -> None:
    g = graph()
    x, off = tensor(g, [16, 8], "x"), tensor(g, [4, 1], "off", DT.INT32)
    g.reduction(x, off, cudnn.reduction_mode.ADD, name="r")
    assert g.nodes[0].inputs.get("group_offset") is off or off in g.nodes[0].inputs.values()


def test_conv_both_orders_and_the_ambiguous_call() -> None:
    CC = cudnn.convolution_mode.CROSS_CORRELATION
    g1, g2, g3 = graph(), graph(), graph()
    for g, call in ((g1, lambda g, x, w: g.conv_fprop(x, w, None, [1, 1], [1, 1], [2, 2], [1, 1], CC, name="c")),
                    (g2, lambda g, x, w: g.conv_fprop(x, w, pre_padding=[1, 1], post_padding=[1, 1], stride=[2, 2],
                                                      dilation=[1, 1], name="c")),
                    (g3, lambda g, x, w: g.conv_fprop(x, w, [1, 1], [2, 2], [1, 1], CC, name="c"))):
        call(g, tensor(g, [1, 4, 8, 8], "x"), tensor(g, [4, 4, 3, 3], "w"))
    assert node_json(g1) == node_json(g2) == node_json(g3)
    g = graph()
    x, w = tensor(g, [1, 4, 8, 8], "x"), tensor(g, [4, 4, 3, 3], "w")
    # v1.23: padding None, stride [1, 1], dilation [2, 2]; 1.32: pre/post padding
    with pytest.raises(TypeError, match=r"^conv_fprop\(\): positional argument 4 onwards can be read two ways: "
                                        r"as stride=\[1, 1\], dilation=\[2, 2\] \(v1.23's order\) or as "
                                        r"pre_padding=\[1, 1\], post_padding=\[2, 2\] \(1.32's order\)"):
        g.conv_fprop(x, w, None, [1, 1], [2, 2])
    assert g.nodes == []
    # padding with pre/post is not a 1.32 call: the v1.23 reading, unchanged
    y = g.conv_fprop(x, w, [1, 1], [1, 1], [1, 1])
    y.set_output(True)
    g.validate()
    assert y.get_dim() == [1, 4, 8, 8]


def test_conv_132_stride_shapes_the_output() -> None:
    g = graph()
    x = tensor(g, [1, 4, 8, 8], "x")
    y = g.conv_wgrad(x, tensor(g, [1, 4, 4, 4], "dy"), None, [1, 1], [1, 1], [2, 2], [1, 1])
    assert g.nodes[0].stride == [2, 2] and g.nodes[0].pre_padding == [1, 1]
    y.set_dim([4, 4, 3, 3])


def test_moe_top_k_in_132_position() -> None:
    NONE = cudnn.moe_grouped_matmul_mode.NONE
    g1, g2 = graph(), graph()
    for g, tail in ((g1, (NONE, DT.FLOAT, 0)), (g2, (NONE, 0))):
        tok, w = tensor(g, [1, 16, 8], "t"), tensor(g, [2, 8, 4], "w")
        off = tensor(g, [2, 1, 1], "o", DT.INT32)
        g.moe_grouped_matmul(tok, w, off, None, None, *tail, name="m")
    assert node_json(g1) == node_json(g2)


def test_reshape_mode_or_name_second() -> None:
    g = graph()
    x = tensor(g, [2, 8], "x")
    a = g.reshape(x, "named")
    b = g.reshape(x, cudnn.reshape_mode.VIEW_ONLY)
    assert a.get_name() == "named::Y" and b.get_name() != "named::Y"
    assert "reshape_mode" not in node_json(g)[1]  # VIEW_ONLY, the default
    g.reshape(x, cudnn.reshape_mode.LOGICAL)
    assert node_json(g)[2]["reshape_mode"] == "LOGICAL"


@pytest.mark.parametrize(("op", "args"), [("relu", (None, None, None)), ("leaky_relu", (0.1,)),
                                         ("swish", (1.0,))])
def test_pointwise_name_before_compute_type(op: str, args: tuple[Any, ...]) -> None:
    g = graph()
    x = tensor(g, [2, 8], "x")
    y = getattr(g, op)(x, *args, "p", DT.FLOAT)
    assert y.get_name() == "p::OUT_0" and g.nodes[0].compute_data_type == DT.FLOAT
    y2 = getattr(g, op)(x, *args, DT.FLOAT, "q")
    assert y2.get_name() == "q::OUT_0"


def test_swish_backward_beta_third() -> None:
    g = graph()
    dy, x = tensor(g, [2, 8], "dy"), tensor(g, [2, 8], "x")
    g.swish_backward(dy, x, 1.5, name="sb")
    g.swish_backward(dy, x, DT.FLOAT, 1.5, name="sb2")
    g.swish_backward(dy, x, name="sb3")
    beta = [n.get("swish_beta") for n in node_json(g)]
    assert beta[0] == beta[1] and beta[0] != beta[2]


def test_block_scale_quantize_132_order_refuses_group_offset() -> None:
    g = graph()
    x = tensor(g, [4, 64], "x")
    g.block_scale_quantize(x, None, 32, name="a")
    g.block_scale_quantize(x, 32, name="b")
    assert {**node_json(g)[0], "name": "", "outputs": {}} == {**node_json(g)[1], "name": "", "outputs": {}}
    off = tensor(g, [2, 1], "off", DT.INT32)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="group_offset"):
        g.block_scale_quantize(x, off, 32)


def test_keyword_given_twice_is_refused() -> None:
    g = graph()
    x = tensor(g, [4, 8], "x")
    with pytest.raises(TypeError, match="multiple values"):
        g.reduction(x, cudnn.reduction_mode.ADD, mode=cudnn.reduction_mode.ADD)


# -- sdpa's Python-side arguments (1.32) ----------------------------------------------------------

def qkv(g: Any, b: int = 2, h: int = 2, s: int = 16, d: int = 64) -> list[Any]:
    return [tensor(g, [b, h, s, d], n) for n in "qkv"]


def test_sdpa_prefolded_scale_is_ln2_and_refuses_attn_scale() -> None:
    import math
    g = graph()
    q, k, v = qkv(g)
    with pytest.raises(ValueError, match="attn_scale_prefolded=True: leave attn_scale unset"):
        g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, attn_scale_prefolded=True)
    assert g.nodes == []
    g.sdpa(q, k, v, generate_stats=True, attn_scale_prefolded=True)
    assert g.nodes[0].opts.attn_scale_value == pytest.approx(math.log(2.0))
    g.sdpa(q, k, v, generate_stats=True, attn_scale_prefolded=False, attn_scale=0.5)
    assert g.nodes[1].opts.attn_scale_value == 0.5
    with pytest.raises(TypeError, match="attn_scale_prefolded must be a bool, got 'yes'"):
        g.sdpa(q, k, v, generate_stats=True, attn_scale_prefolded="yes")


def test_sdpa_softmax_precision() -> None:
    g = graph()
    q, k, v = qkv(g)
    g.sdpa(q, k, v, generate_stats=True, softmax_precision=DT.FLOAT)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="softmax_precision=HALF"):
        g.sdpa(q, k, v, generate_stats=True, softmax_precision=DT.HALF)
    with pytest.raises(ValueError, match=r"softmax_precision must be cudnn\.data_type\.FLOAT or HALF"):
        g.sdpa(q, k, v, generate_stats=True, softmax_precision=DT.INT8)
    assert len(g.nodes) == 1


def test_sdpa_backward_refuses_forward_only_arguments() -> None:
    g = graph()
    q, k, v = qkv(g)
    o, do = tensor(g, [2, 2, 16, 64], "o"), tensor(g, [2, 2, 16, 64], "do")
    st = tensor(g, [2, 2, 16, 1], "st", DT.FLOAT)
    for kw in ({"softmax_precision": DT.FLOAT}, {"attn_scale_prefolded": True}):
        with pytest.raises(ValueError, match="describe the forward's softmax"):
            g.sdpa_backward(q, k, v, o, do, st, **kw)
    g.sdpa_backward(q, k, v, o, do, st, attn_scale_prefolded=False)


@pytest.mark.parametrize("dtype", [DT.HALF, DT.FLOAT])
def test_sdpa_kv_mask_becomes_a_score_modifier(dtype: Any) -> None:
    g = graph()
    q, k, v = qkv(g)
    mask = tensor(g, [2, 1, 1, 16], "mask", dtype)
    o, stats = g.sdpa(q, k, v, generate_stats=True, kv_mask=mask)
    o.set_output(True)
    stats.set_output(True)
    g.validate()
    assert o.get_dim() == [2, 2, 16, 64] and stats.get_dim() == [2, 2, 16, 1]
    sub = cudnn.pygraph(io_data_type=DT.HALF, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    score = sub.tensor([2, 2, 16, 16], [512, 256, 16, 1], DT.FLOAT, is_virtual=True, name="s")
    out = g.nodes[0].opts.score_mod(sub, score)
    assert [n.op for n in sub.nodes] == ["add"]
    assert out in sub.nodes[-1].outputs.values()


@pytest.mark.parametrize("dtype", [DT.BOOLEAN, DT.INT8, DT.UINT8])
def test_sdpa_byte_kv_mask_is_refused_naming_the_additive_form(dtype: Any) -> None:
    g = graph()
    q, k, v = qkv(g)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=rf"sdpa .*: a {dtype.name} kv_mask is not served.*0.0 where a key is kept, -inf"):
        g.sdpa(q, k, v, generate_stats=True, kv_mask=tensor(g, [2, 1, 1, 16], "mask", dtype))


def test_sdpa_kv_mask_composes_with_score_mod_and_checks_dims() -> None:
    g = graph()
    q, k, v = qkv(g)

    def softcap(sub: Any, s: Any) -> Any:
        return sub.mul(sub.tanh(sub.div(s, 30.0)), 30.0)

    g.sdpa(q, k, v, generate_stats=True, kv_mask=tensor(g, [1, 1, 1, 16], "m", DT.FLOAT), score_mod=softcap)
    sub = cudnn.pygraph(io_data_type=DT.HALF, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    g.nodes[0].opts.score_mod(sub, sub.tensor([2, 2, 16, 16], [512, 256, 16, 1], DT.FLOAT, name="s"))
    assert [n.op for n in sub.nodes] == ["div", "tanh", "mul", "add"]
    for dims in ([2, 1, 16, 16], [3, 1, 1, 16], [2, 2, 1, 16], [2, 1, 1, 8]):
        with pytest.raises(ValueError, match=r"kv_mask dims .* must be \[1\|B, 1, 1, S_kv\] = \[1\|2, 1, 1, 16\]"):
            g.sdpa(q, k, v, generate_stats=True, kv_mask=tensor(g, dims, "bad", DT.BOOLEAN))
    assert len(g.nodes) == 1
