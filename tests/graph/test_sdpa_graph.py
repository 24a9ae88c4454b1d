"""Attention graphs without a GPU: signatures against the official order, argument translation,
inference of O / Stats / dQ / dK / dV, the JSON, the expansion, and every validation error."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import cudnn
from cudnn import pygraph
from cudnn._graph.model.expand import expand

dt = cudnn.data_type
H, F, I32, I64 = dt.HALF, dt.FLOAT, dt.INT32, dt.INT64

SDPA_ORDER = ["q", "k", "v", "is_inference", "attn_scale", "bias", "block_mask", "use_alibi_mask",
              "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask", "use_causal_mask_bottom_right",
              "sliding_window_length", "diagonal_alignment", "diagonal_band_left_bound",
              "diagonal_band_right_bound", "dropout", "rng_dump", "paged_attention_k_table",
              "paged_attention_v_table", "paged_attention_max_seq_len_kv", "compute_data_type", "name",
              "score_mod", "generate_stats", "implementation", "score_max", "score_sum_exp", "sink_token",
              "unfuse_fma"]
SDPA_KW_ONLY = ["max_total_seq_len_q", "max_total_seq_len_kv", "cu_seq_len_q", "cu_seq_len_kv", "stats_use_log2",
                "softmax_precision", "attn_scale_prefolded", "kv_mask"]
BWD_ORDER = ["q", "k", "v", "o", "dO", "stats", "attn_scale", "bias", "dBias", "use_alibi_mask",
             "use_padding_mask", "seq_len_q", "seq_len_kv", "max_total_seq_len_q", "max_total_seq_len_kv",
             "use_causal_mask", "use_causal_mask_bottom_right", "sliding_window_length", "diagonal_alignment",
             "diagonal_band_left_bound", "diagonal_band_right_bound", "dropout", "rng_dump",
             "use_deterministic_algorithm", "compute_data_type", "name", "score_mod", "score_mod_bprop",
             "sink_token", "dSink_token"]


def params(fn: Any) -> tuple[list[str], list[str]]:
    sig = inspect.signature(fn)
    pos = [p.name for p in sig.parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
    kw = [p.name for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY]
    return pos, kw


def test_signatures_follow_the_official_order() -> None:
    assert params(pygraph.sdpa) == (SDPA_ORDER, SDPA_KW_ONLY)
    assert params(pygraph.sdpa_backward) == (BWD_ORDER, ["softmax_precision", "attn_scale_prefolded"])
    assert pygraph.scaled_dot_product_flash_attention is pygraph.sdpa
    assert pygraph.scaled_dot_product_flash_attention_backward is pygraph.sdpa_backward
    defaults = {p.name: p.default for p in inspect.signature(pygraph.sdpa).parameters.values()}
    assert defaults["diagonal_alignment"] == cudnn.diagonal_alignment.TOP_LEFT
    assert defaults["implementation"] == cudnn.attention_implementation.AUTO
    assert defaults["name"] == "" and defaults["use_causal_mask"] is False and defaults["unfuse_fma"] is False


def test_enums() -> None:
    assert [m.name for m in cudnn.diagonal_alignment] == ["TOP_LEFT", "BOTTOM_RIGHT"]
    assert [m.name for m in cudnn.attention_implementation] == ["AUTO", "COMPOSITE", "UNIFIED"]


# -- helpers ---------------------------------------------------------------------------------------

def graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def qkv(g: cudnn.pygraph, b: int = 2, hq: int = 8, hk: int = 2, sq: int = 64, skv: int = 96, d: int = 64,
        dv: int = 64, bshd: bool = False) -> tuple[cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    def t(name: str, h: int, s: int, dd: int) -> cudnn.tensor:
        stride = [s * h * dd, dd, h * dd, 1] if bshd else [h * s * dd, s * dd, dd, 1]
        return g.tensor(name=name, dim=[b, h, s, dd], stride=stride, data_type=H)
    return t("Q", hq, sq, d), t("K", hk, skv, d), t("V", hk, skv, dv)


def lens(g: cudnn.pygraph, b: int = 2) -> dict[str, Any]:
    return {"use_padding_mask": True, "seq_len_q": g.tensor(dim=[b, 1, 1, 1], data_type=I32),
            "seq_len_kv": g.tensor(dim=[b, 1, 1, 1], data_type=I32)}


def fwd(g: cudnn.pygraph, *args: Any, **kw: Any) -> list[Any]:
    kw.setdefault("generate_stats", True) if "is_inference" not in kw else None
    o, s = g.sdpa(*args, **kw)
    o.set_output(True)
    if s is not None:
        s.set_output(True)
    return [o, s]


# -- inference --------------------------------------------------------------------------------------

def test_outputs_are_inferred_in_qs_layout() -> None:
    g = graph()
    q, k, v = qkv(g, bshd=True, dv=32)
    o, s = fwd(g, q, k, v, attn_scale=0.125)
    g.validate()
    assert o.get_dim() == [2, 8, 64, 32] and o.get_stride() == [64 * 8 * 32, 32, 8 * 32, 1]
    assert o.get_data_type() == H
    assert s.get_dim() == [2, 8, 64, 1] and s.get_stride() == [8 * 64, 64, 1, 1] and s.get_data_type() == F
    assert k.get_dim() == [2, 2, 96, 64]  # the user's K is not transposed in place


def test_is_inference_gives_no_stats() -> None:
    g = graph()
    o, s = fwd(g, *qkv(g), is_inference=True)
    assert s is None and o is not None


def test_backward_gradients_like_qkv() -> None:
    g = graph()
    q, k, v = qkv(g)
    o = g.tensor(dim=[2, 8, 64, 64], data_type=H)
    do = g.tensor(dim=[2, 8, 64, 64], data_type=H)
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, use_causal_mask=True)
    for t in (dq, dk, dv):
        t.set_output(True)
    g.validate()
    assert (dq.get_dim(), dk.get_dim(), dv.get_dim()) == (q.get_dim(), k.get_dim(), v.get_dim())
    assert dq.get_stride() == q.get_stride() and dk.get_data_type() == H


def test_json_shows_the_users_node() -> None:
    g = graph()
    fwd(g, *qkv(g), attn_scale=0.5, use_causal_mask_bottom_right=True, sliding_window_length=16, name="attn")
    g.validate()
    (node,) = g.to_json()["nodes"]
    assert node["tag"] == "SDPA_FWD" and node["name"] == "attn"
    assert node["right_bound"] == 0 and node["left_bound"] == 16 and node["diagonal_alignment"] == "BOTTOM_RIGHT"
    assert node["attn_scale_value"] == 0.5 and node["generate_stats"] is True
    assert set(node["inputs"]) == {"Q", "K", "V"} and set(node["outputs"]) == {"O", "Stats"}


# -- expansion --------------------------------------------------------------------------------------

def ops_of(g: cudnn.pygraph, version: int = 91900) -> tuple[list[Any], list[Any]]:
    g.validate()
    nodes, ex = expand(g.nodes, g.context, version)
    return nodes, ex.scratch


def test_auto_picks_unified_for_plain_attention_and_composite_for_masks() -> None:
    g = graph()
    fwd(g, *qkv(g), attn_scale=0.1)
    nodes, _ = ops_of(g)
    assert [n.op for n in nodes] == ["sdpa_fwd"]
    g = graph()
    fwd(g, *qkv(g), attn_scale=0.1, use_causal_mask=True)
    nodes, _ = ops_of(g)
    assert nodes[0].op == "matmul" and nodes[-1].op == "matmul" and "gen_index" in [n.op for n in nodes]
    g = graph()
    fwd(g, *qkv(g), attn_scale=0.1)
    nodes, _ = ops_of(g, 91200)  # below 9.13.1: composite
    assert nodes[0].op == "matmul"


def test_auto_offers_the_composite_lowering_as_an_alternative_to_unified() -> None:
    from cudnn._graph.build.pipeline import Pipeline

    g = graph()
    fwd(g, *qkv(g), attn_scale=0.1)
    g.validate()
    default = Pipeline(g)
    nodes, ex = expand(g.nodes, g.context, 91900)
    assert [c.name for c in ex.chosen] == ["UNIFIED"] and [a.name for a in ex.alternatives] == ["COMPOSITE"]
    nodes, ex = expand(g.nodes, g.context, 91900, prefer=cudnn.attention_implementation.COMPOSITE)
    assert nodes[0].op == "matmul" and [c.name for c in ex.chosen] == ["COMPOSITE"]
    assert [a.name for a in ex.alternatives] == ["UNIFIED"]
    # a graph whose attention has one possible lowering offers none
    g2 = graph()
    fwd(g2, *qkv(g2), attn_scale=0.1, implementation=cudnn.attention_implementation.COMPOSITE)
    g2.validate()
    assert expand(g2.nodes, g2.context, 91900)[1].alternatives == []
    assert default.lowering is None


def test_composite_transposes_k_as_a_view_sharing_its_uid() -> None:
    g = graph()
    q, k, v = qkv(g)
    fwd(g, q, k, v, implementation=cudnn.attention_implementation.COMPOSITE)
    nodes, _ = ops_of(g)
    kt = nodes[0].inputs["B"]
    assert kt is not k and kt.get_dim() == [2, 2, 64, 96] and kt.get_stride() == [96 * 64 * 2, 96 * 64, 1, 64]
    kt.set_uid(42)
    assert k.get_uid() == 42 and k.get_dim() == [2, 2, 96, 64]


def test_backward_scratch_softmax_sum_and_dq_accum() -> None:
    g = graph()
    q, k, v = qkv(g)
    o, do = (g.tensor(dim=[2, 8, 64, 64], data_type=H) for _ in range(2))
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    outs = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, use_alibi_mask=True, use_causal_mask=True)
    for t in outs:
        t.set_output(True)
    nodes, scratch = ops_of(g)
    names = {s.tensor.get_name().split("::")[1]: s for s in scratch}
    assert set(names) == {"softmax_sum", "dQ_accum", "alibi_slopes"}
    assert names["softmax_sum"].tensor.get_dim() == [2, 8, 64, 1]
    assert len(names["alibi_slopes"].fill) == 8 * 4
    assert [n.op for n in nodes].count("reduction") >= 3  # rowsum, dK and dV head-group sums


def test_backward_lowers_to_the_officials_tensors() -> None:
    """The backward's primitive graph has the tensors of the official's: one by-value scale for
    the scores and for dS, K's view for dQ in the intermediate type, and dO * O with the strides
    the official gives it (cuDNN compiles the same kernel from the same graph)."""
    g = graph()
    q, k, v = qkv(g, hk=8, sq=64, skv=64)
    o, do = (g.tensor(dim=[2, 8, 64, 64], data_type=H) for _ in range(2))
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    outs = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, use_causal_mask=True, name="bwd")
    for t in outs:
        t.set_output(True)
    nodes, _ = ops_of(g)
    by_name = {n.name.split(".", 1)[1]: n for n in nodes}
    scale = by_name["attn_scale"].inputs["IN_1"]
    assert scale.get_value() == 0.125 and by_name["mul_dS_attn_scale"].inputs["IN_1"] is scale
    assert by_name["reshape_k"].outputs["Y"].get_data_type() == F
    prod = by_name["mul_dO_O"].outputs["OUT_0"]
    assert prod.get_dim() == [2, 8, 64, 64] and prod.get_stride() == [8 * 64 * 64, 64 * 64, 8 * 64, 1]
    tensors = {id(t): t for n in nodes for t in (*n.inputs.values(), *n.outputs.values())}
    assert sum(t.get_is_pass_by_value() for t in tensors.values()) == 3  # the scale, one, -inf


def test_deterministic_backward_writes_dq_directly() -> None:
    g = graph()
    q, k, v = qkv(g, hk=8)
    o, do = (g.tensor(dim=[2, 8, 64, 64], data_type=H) for _ in range(2))
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, st, use_deterministic_algorithm=True)
    for t in (dq, dk, dv):
        t.set_output(True)
    nodes, scratch = ops_of(g)
    assert [s.tensor.get_name() for s in scratch] == ["0::softmax_sum"]
    assert any(n.outputs.get("C") is dq for n in nodes)


def test_user_dropout_mask_backward_scales_dp_and_needs_no_scale_inverse() -> None:
    """dS = P * (dP * mask * scale - rowsum(dO * O)): the official graph's scale_inverse tensor on the
    row sum is ignored by cuDNN 9.19's engines (a wrong dQ/dK), so it is not in the graph at all."""
    g = graph()
    q, k, v = qkv(g, hk=8)
    o, do = (g.tensor(dim=[2, 8, 64, 64], data_type=H) for _ in range(2))
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    mask = g.tensor(name="mask", dim=[2, 8, 64, 96], data_type=H)
    scale, scale_inv = (g.tensor(name=n, dim=[1, 1, 1, 1], data_type=F) for n in ("scale", "scale_inv"))
    outs = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, dropout=(mask, scale, scale_inv), name="bwd")
    for t in outs:
        t.set_output(True)
    nodes, _ = ops_of(g)
    by_name = {n.name.split(".", 1)[1]: n for n in nodes}
    assert [t.get_name() for t in by_name["dP_dropout_mask"].inputs.values()][1] == "mask"
    assert by_name["dP_dropout_scale"].inputs["IN_1"] is scale
    assert "mul_dS_dropout_scale" not in by_name  # the scale moved from dS to dP
    assert by_name["scale_dropout_inv"].inputs["IN_1"].get_value() == 1.0  # rowsum(dO * O) as it is
    assert by_name["mul_p_dropout_scale"].inputs["IN_1"] is scale  # dV's P * mask * scale unchanged
    used = {id(t) for n in nodes for t in (*n.inputs.values(), *n.outputs.values())}
    assert id(scale_inv) not in used and "Dropout_scale_inv" not in g.nodes[0].inputs


def test_philox_dropout_backward_keeps_the_official_graph() -> None:
    g = graph()
    q, k, v = qkv(g, hk=8)
    o, do = (g.tensor(dim=[2, 8, 64, 64], data_type=H) for _ in range(2))
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    seed, off = g.tensor(dim=[1, 1, 1, 1], data_type=I64), g.tensor(dim=[1, 1, 1, 1], data_type=I64)
    outs = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, dropout=(0.25, seed, off), name="bwd")
    for t in outs:
        t.set_output(True)
    nodes, _ = ops_of(g)
    by_name = {n.name.split(".", 1)[1]: n for n in nodes}
    assert by_name["scale_dropout_inv"].inputs["IN_1"].get_value() == 0.75
    assert by_name["mul_dS_dropout_scale"].inputs["IN_1"].get_value() == pytest.approx(1 / 0.75)
    assert "dP_dropout_scale" not in by_name


def test_rng_dump_refused_for_decode() -> None:
    g = graph()
    q, k, v = qkv(g, sq=1)
    seed, off = g.tensor(dim=[1, 1, 1, 1], data_type=I64), g.tensor(dim=[1, 1, 1, 1], data_type=I64)
    fwd(g, q, k, v, name="attn", dropout=(0.1, seed, off), rng_dump=g.tensor(dim=[2, 8, 1, 96], data_type=F))
    with err(r"sdpa 'attn': rng_dump: not supported with s_q = 1"):
        g.validate()


def test_alibi_slopes() -> None:
    import struct

    from cudnn._graph.families.sdpa_masks import alibi_slopes

    assert struct.unpack("<4f", alibi_slopes(4)) == pytest.approx([0.25, 0.0625, 0.015625, 0.00390625])
    assert len(alibi_slopes(12)) == 48


# -- argument translation and bad input ---------------------------------------------------------------

def err(match: str) -> Any:
    return pytest.raises(cudnn.GraphError, match=match)


def test_is_inference_and_generate_stats() -> None:
    g = graph()
    with err("exactly one of is_inference and generate_stats"):
        g.sdpa(*qkv(g), is_inference=True, generate_stats=True)
    with err("exactly one of is_inference and generate_stats"):
        g.sdpa(*qkv(g))
    with pytest.raises(TypeError, match="generate_stats: expected True or False, got 1"):
        g.sdpa(*qkv(g), generate_stats=1)  # the official checks for a Python bool itself


def test_causal_with_explicit_right_bound_and_windows() -> None:
    g = graph()
    with err("use_causal_mask sets the right bound to 0"):
        g.sdpa(*qkv(g), is_inference=True, use_causal_mask=True, diagonal_band_right_bound=3)
    with err("cannot both be True"):
        g.sdpa(*qkv(g), is_inference=True, use_causal_mask=True, use_causal_mask_bottom_right=True)
    with err("sliding_window_length sets the left bound"):
        g.sdpa(*qkv(g), is_inference=True, sliding_window_length=4, diagonal_band_left_bound=4)
    with pytest.raises(TypeError, match=r"diagonal_band_left_bound: expected an int, got 4\.0"):
        g.sdpa(*qkv(g), is_inference=True, diagonal_band_left_bound=4.0)


def test_dropout_forms() -> None:
    g = graph()
    seed, off = g.tensor(dim=[1, 1, 1, 1], data_type=I64), g.tensor(dim=[1, 1, 1, 1], data_type=I64)
    with err(r"dropout probability must be in \[0, 1\), got 1.0"):
        g.sdpa(*qkv(g), is_inference=True, dropout=(1.0, seed, off))
    with err("dropout must be"):
        g.sdpa(*qkv(g), is_inference=True, dropout=(0.1,))
    with err("rng_dump is only used with"):
        g.sdpa(*qkv(g), is_inference=True, rng_dump=g.tensor(dim=[1, 1, 1, 1], data_type=F))
    fwd(g, *qkv(g), dropout=(0.1, seed, g.tensor(dim=[2, 1, 1, 1], data_type=I64)))
    with err("offset must be an INT64 or INT32 tensor of all-1 dims"):
        g.validate()


@pytest.mark.parametrize("case, match", [
    ("batch", r"K: batch 3 must equal Q's batch 2"),
    ("heads", r"multiple of K's h=3"),
    ("head_dim", r"head dim d_qk=60 is not supported"),
    ("dtype", r"must be HALF or BFLOAT16"),
    ("seq", r"V: sequence length 32 must equal K's 96"),
    ("stride", r"last dim \(head dim\) must have stride 1"),
])
def test_bad_qkv(case: str, match: str) -> None:
    g = graph()
    q, k, v = qkv(g)
    if case == "batch":
        k = g.tensor(dim=[3, 2, 96, 64], data_type=H)
    elif case == "heads":
        k = g.tensor(dim=[2, 3, 96, 64], data_type=H)
    elif case == "head_dim":
        q, k = g.tensor(dim=[2, 8, 64, 60], data_type=H), g.tensor(dim=[2, 2, 96, 60], data_type=H)
    elif case == "dtype":
        q = g.tensor(dim=[2, 8, 64, 64], data_type=F)
    elif case == "seq":
        v = g.tensor(dim=[2, 2, 32, 64], data_type=H)
    elif case == "stride":
        q = g.tensor(dim=[2, 8, 64, 64], stride=[8 * 64 * 64, 64 * 64, 1, 64], data_type=H)
    fwd(g, q, k, v, name="attn")
    with err("sdpa 'attn': " + ".*" + match):
        g.validate()


def test_large_head_dims_are_left_to_the_engines() -> None:
    """As in the official, only d % 8 is checked here: what the loaded cuDNN runs decides the rest."""
    g = graph()
    q, k, v = g.tensor(dim=[2, 8, 64, 520], data_type=H), g.tensor(dim=[2, 2, 96, 520], data_type=H), \
        g.tensor(dim=[2, 2, 96, 264], data_type=H)
    o, _ = fwd(g, q, k, v, name="attn")
    g.validate()
    assert o.get_dim() == [2, 8, 64, 264]


def test_bottom_right_rules_are_those_of_a_bottom_right_causal_mask() -> None:
    """BOTTOM_RIGHT alignment restricts bias, ALiBi and dropout only with a right bound (a causal
    mask); with a sliding window alone they combine, as in the official."""
    seed_off = lambda g: (g.tensor(dim=[1, 1, 1, 1], data_type=I64), g.tensor(dim=[1, 1, 1, 1], data_type=I64))  # noqa: E731
    g = graph()
    fwd(g, *qkv(g), name="attn", diagonal_alignment=cudnn.diagonal_alignment.BOTTOM_RIGHT,
        diagonal_band_left_bound=16, bias=g.tensor(dim=[1, 8, 64, 96], data_type=H), dropout=(0.1, *seed_off(g)))
    g.validate()
    g = graph()
    fwd(g, *qkv(g), name="attn", diagonal_alignment=cudnn.diagonal_alignment.BOTTOM_RIGHT,
        diagonal_band_right_bound=0, dropout=(0.1, *seed_off(g)))
    with err(r"BOTTOM_RIGHT causal mask \(diagonal_band_right_bound set\) cannot be combined with dropout"):
        g.validate()


def test_bad_masks_and_tables() -> None:
    def check(match: str, **kw: Any) -> None:
        g = graph()
        extra = {key: (val(g) if callable(val) and key not in ("score_mod",) else val) for key, val in kw.items()}
        fwd(g, *qkv(g), name="attn", **extra)
        with err(match):
            g.validate()

    check("padding mask needs both", use_padding_mask=True)
    check("only used with use_padding_mask", seq_len_q=lambda g: g.tensor(dim=[2, 1, 1, 1], data_type=I32))
    check("BOTTOM_RIGHT causal mask .* cannot be combined with bias", use_causal_mask_bottom_right=True,
          bias=lambda g: g.tensor(dim=[1, 8, 64, 96], data_type=H))
    check("ALiBi needs a causal mask", use_alibi_mask=True)
    check("bias: dims .* must broadcast", bias=lambda g: g.tensor(dim=[1, 8, 64, 95], data_type=H))
    check("a page table must be INT32", **lens(graph()), paged_attention_k_table=lambda g: g.tensor(
        dim=[2, 1, 3, 1], data_type=I64), paged_attention_v_table=lambda g: g.tensor(dim=[2, 1, 3, 1], data_type=I32))
    check("diagonal_band_right_bound: must be >= 0, got -1", diagonal_band_right_bound=-1)
    check("score_mod: must return a cudnn.tensor", score_mod=lambda sub, s: 3)
    check(r"score_mod: must return a tensor of the score's shape \[2, 8, 64, 96\]",
          score_mod=lambda sub, s: sub.reduction(s, cudnn.reduction_mode.MAX).set_dim([2, 8, 64, 1]))
    check("UNIFIED|unified", use_causal_mask=True, implementation=cudnn.attention_implementation.UNIFIED)


# -- a left bound <= 0: a band on or above the diagonal ------------------------------------------------

def with_version(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """The loaded libcudnn's version as validation reads it (the loader's report)."""
    import types

    from cudnn._lib import loader

    monkeypatch.setattr(loader, "report", lambda: types.SimpleNamespace(version=version))


@pytest.mark.parametrize("kw", [
    {"diagonal_band_left_bound": 0, "diagonal_band_right_bound": 8},
    {"diagonal_band_left_bound": -4, "diagonal_band_right_bound": 16},
    {"sliding_window_length": 0, "diagonal_band_right_bound": 8},
    {"diagonal_band_left_bound": 0},
    {"diagonal_band_left_bound": -2, "use_causal_mask_bottom_right": True},
    {"diagonal_band_left_bound": 0, "diagonal_band_right_bound": 4,
     "diagonal_alignment": cudnn.diagonal_alignment.BOTTOM_RIGHT}], ids=str)
def test_forward_takes_a_left_bound_at_or_above_the_diagonal_from_cudnn_9_10(
        monkeypatch: pytest.MonkeyPatch, kw: dict[str, Any]) -> None:
    """As the official: the fp16/bf16 forward leaves left_bound <= 0 to cuDNN from 9.10 on."""
    for version in (91000, 91900, 92800):
        with_version(monkeypatch, version)
        g = graph()
        fwd(g, *qkv(g), name="attn", **kw)
        g.validate()
        (node,) = g.to_json()["nodes"]
        assert node["left_bound"] == kw.get("diagonal_band_left_bound", kw.get("sliding_window_length"))


@pytest.mark.parametrize("version", [90100, 90900, 90901])
def test_forward_refuses_a_left_bound_at_or_above_the_diagonal_before_cudnn_9_10(
        monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Below 9.10 the official raises INVALID_VALUE (a RuntimeError); ours is a GraphError, both classes."""
    with_version(monkeypatch, version)
    for left in (0, -3):
        g = graph()
        fwd(g, *qkv(g), name="attn", diagonal_band_left_bound=left, diagonal_band_right_bound=8)
        with pytest.raises(cudnn.GraphError) as info:
            g.validate()
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
        assert not isinstance(info.value, cudnn.cudnnGraphNotSupportedError)
        text = str(info.value)
        assert text.startswith("sdpa 'attn': diagonal_band_left_bound: ") and "needs cuDNN >= 9.10.0" in text
        assert f"expected > 0, got {left}" in text and str(version // 10000) in text


def test_forward_left_bound_gate_applies_at_build_to_the_version_being_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    with_version(monkeypatch, 92800)
    g = graph()
    fwd(g, *qkv(g), name="attn", diagonal_band_left_bound=0, diagonal_band_right_bound=8)
    g.validate()
    with err(r"sdpa 'attn': diagonal_band_left_bound: a left bound <= 0 .* needs cuDNN >= 9\.10\.0, the loaded "
             r"libcudnn is 9\.9\.0"):
        expand(g.nodes, g.context, 90900)
    nodes, _ = expand(g.nodes, g.context, 91000)
    assert nodes[0].op == "matmul"


@pytest.mark.parametrize("alignment, left, want", [
    (cudnn.diagonal_alignment.TOP_LEFT, 0, 0.0),
    (cudnn.diagonal_alignment.TOP_LEFT, -5, -5.0),
    (cudnn.diagonal_alignment.BOTTOM_RIGHT, 0, 0.0 - 96 + 64),  # left - s_kv + s_q, as the official folds it
    (cudnn.diagonal_alignment.BOTTOM_RIGHT, -5, -5.0 - 96 + 64)])
def test_a_left_bound_at_or_above_the_diagonal_lowers_as_any_other(alignment: Any, left: int, want: float) -> None:
    """The official's composite band: keep col + left > row (BOTTOM_RIGHT: shifted by s_kv - s_q),
    the left bound a FLOAT constant; keep col <= row + right (an INT32 shift)."""
    g = graph()
    fwd(g, *qkv(g), name="attn", diagonal_alignment=alignment, diagonal_band_left_bound=left,
        diagonal_band_right_bound=8)
    nodes, _ = ops_of(g)
    by_name = {n.name.split(".", 1)[1]: n for n in nodes}
    window = by_name["col_plus_window"].inputs["IN_1"]
    assert window.get_data_type() == F and window.get_value() == want
    assert by_name["col_gt_row"].op == "cmp_gt"
    assert by_name["row_plus_right"].inputs["IN_1"].get_value() == 8
    assert [n.op for n in nodes].count("binary_select") == 2


def test_backward_refuses_a_left_bound_at_or_above_the_diagonal() -> None:
    """The official's backward raises for left_bound <= 0 on every cuDNN (ValueError in its Python
    validator, INVALID_VALUE -> RuntimeError in its C++ one); a GraphError is both."""
    for left in (0, -1):
        g = graph()
        q, k, v = qkv(g, hk=8)
        o, do = (g.tensor(dim=[2, 8, 64, 64], data_type=H) for _ in range(2))
        st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
        for t in g.sdpa_backward(q, k, v, o, do, st, diagonal_band_left_bound=left, diagonal_band_right_bound=8,
                                 name="bwd"):
            t.set_output(True)
        with err(rf"sdpa_backward 'bwd': diagonal_band_left_bound: must be > 0 \(the sliding window length\) in "
                 rf"attention backward, got {left}"):
            g.validate()


def test_ragged_offset_wrong_shape() -> None:
    g = graph()
    q, k, v = qkv(g)
    q.set_ragged_offset(g.tensor(dim=[2, 1, 1, 1], data_type=I32))
    fwd(g, q, k, v, name="attn", **lens(g))
    with err(r"Q: ragged offset must be INT32 or INT64 \[b \+ 1, 1, 1, 1\] = \[3, 1, 1, 1\]"):
        g.validate()


def test_score_mod_sub_graph_is_spliced_in() -> None:
    g = graph()
    cap = 30.0
    fwd(g, *qkv(g), name="attn", score_mod=lambda sub, s: sub.mul(sub.tanh(sub.div(s, cap)), cap))
    nodes, _ = ops_of(g)
    ops = [n.op for n in nodes]
    assert ops[:4] == ["matmul", "div", "tanh_fwd" if "tanh_fwd" in ops else "tanh", "mul"]
    assert nodes[1].name.startswith("attn::score_mod::")


def test_paged_caches_need_the_lengths_not_the_padding_flag() -> None:
    """A score_mod does its own masking from seq_len_q/kv: paged caches need the lengths, as in
    the official, and use_padding_mask only where no score_mod masks."""
    def paged(g: cudnn.pygraph, **kw: Any) -> None:
        q = g.tensor(name="Q", dim=[2, 8, 64, 64], data_type=H)
        k, v = (g.tensor(name=n, dim=[6, 2, 32, 64], data_type=H) for n in ("K", "V"))
        tables = {n: g.tensor(name=n, dim=[2, 1, 3, 1], data_type=I32)
                  for n in ("paged_attention_k_table", "paged_attention_v_table")}
        fwd(g, q, k, v, name="attn", paged_attention_max_seq_len_kv=96, **tables, **kw)

    g = graph()
    lengths = {n: g.tensor(name=n, dim=[2, 1, 1, 1], data_type=I32) for n in ("seq_len_q", "seq_len_kv")}
    paged(g, score_mod=lambda sub, s: s, **lengths)
    g.validate()
    g = graph()
    paged(g)
    with err("paged K/V caches need the sequence lengths seq_len_q and seq_len_kv"):
        g.validate()


def test_ragged_backward_needs_no_padding_mask() -> None:
    """The official refuses ragged offsets without a padding mask in the forward only."""
    def ragged(g: cudnn.pygraph, t: cudnn.tensor) -> cudnn.tensor:
        return t.set_ragged_offset(g.tensor(dim=[3, 1, 1, 1], data_type=I32))

    g = graph()
    q, k, v = (ragged(g, t) for t in qkv(g, bshd=True))
    o = ragged(g, g.tensor(dim=[2, 8, 64, 64], stride=[64 * 8 * 64, 64, 8 * 64, 1], data_type=H))
    do = g.tensor(dim=[2, 8, 64, 64], stride=[64 * 8 * 64, 64, 8 * 64, 1], data_type=H)
    st = g.tensor(dim=[2, 8, 64, 1], data_type=F)
    for grad in g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125):
        grad.set_output(True)
    g.validate()
    g = graph()
    q, k, v = (ragged(g, t) for t in qkv(g, bshd=True))
    fwd(g, q, k, v, name="attn")
    with err("a ragged offset needs use_padding_mask=True"):
        g.validate()


def test_unified_takes_ragged_tensors_with_the_padding_mask() -> None:
    """Ragged offsets are attributes of the tensor descriptors, which the SDPA_FWD operation
    takes as any other (as in the official, whose ragged UNIFIED cases run on cuDNN 9.19)."""
    from cudnn._graph.families.sdpa_unified_nodes import unified_refusal

    g = graph()
    q, k, v = (t.set_ragged_offset(g.tensor(dim=[3, 1, 1, 1], data_type=I32)) for t in qkv(g, bshd=True))
    fwd(g, q, k, v, name="attn", is_inference=True, **lens(g))
    g.validate()
    node = g.nodes[0]
    assert unified_refusal(node, g.context, 91900) is None
    assert "needs cuDNN >= 9.15" in (unified_refusal(node, g.context, 91400) or "")


def test_an_unused_stats_output_is_allowed_and_not_produced() -> None:
    """generate_stats=True with Stats left unmarked (notebook 52): the official runs it, so the
    graph validates and the forward writes workspace scratch statistics instead."""
    g = graph()
    o, stats = g.sdpa(*qkv(g), generate_stats=True, name="attn")
    o.set_output(True)
    g.validate()
    nodes, _ = expand(g.nodes, g.context, 91900)
    used = {id(t) for n in nodes for t in (*n.inputs.values(), *n.outputs.values())}
    assert id(stats) not in used and id(o) in used
    stats.set_output(True)  # wanted after all, even without validating again: produced
    nodes, _ = expand(g.nodes, g.context, 91900)
    assert any(t is stats for n in nodes for t in n.outputs.values())
    g2 = graph()
    x = g2.tensor(name="x", dim=[4, 4], data_type=H)
    g2.relu(x, name="r")  # any other unused output is still a mistake worth naming
    with err("relu 'r': OUT_0 tensor 'r::OUT_0' is never used and not marked as an output"):
        g2.validate()
