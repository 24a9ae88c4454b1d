"""Low-precision graphs without a GPU: FP8 / MXFP8 attention, block-scale quantize/dequantize and
FP8 matmul compositions: signatures against the official order, output inference, the JSON, the
expanded FP8 attention graphs (the op order the FP8 engines match), and every validation error."""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest

import cudnn
from cudnn import GraphError, pygraph
from cudnn._graph.families import sdpa_fp8_nodes as sdpa_fp8, sdpa_mxfp8_nodes as sdpa_mxfp8
from cudnn._graph.model.expand import expand

dt = cudnn.data_type
E4, E5, F, H, E8 = dt.FP8_E4M3, dt.FP8_E5M2, dt.FLOAT, dt.HALF, dt.FP8_E8M0
F8_128x4 = cudnn.tensor_reordering.F8_128x4

FP8_ORDER = ["q", "k", "v", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o", "is_inference",
             "attn_scale", "bias", "use_alibi_mask", "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask",
             "use_causal_mask_bottom_right", "sliding_window", "diagonal_alignment", "left_bound", "right_bound",
             "dropout", "rng_dump", "paged_attention_k_table", "paged_attention_v_table",
             "paged_attention_max_seq_len_kv", "compute_data_type", "name", "fn", "generate_stats", "score_max",
             "score_sum_exp", "sink_token"]
FP8_BWD_ORDER = ["q", "k", "v", "o", "dO", "stats", "descale_q", "descale_k", "descale_v", "descale_o", "descale_dO",
                 "descale_s", "descale_dP", "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP", "attn_scale",
                 "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask", "use_causal_mask_bottom_right",
                 "diagonal_alignment", "left_bound", "right_bound", "use_deterministic_algorithm", "dropout",
                 "compute_data_type", "name", "sink_token", "dSink_token"]
MX_ORDER = ["q", "k", "v", "descale_q", "descale_k", "descale_v", "attn_scale", "use_causal_mask",
            "use_causal_mask_bottom_right", "diagonal_alignment", "diagonal_band_left_bound",
            "diagonal_band_right_bound", "compute_data_type", "name", "generate_stats", "sink_token", "unfuse_fma"]
MX_BWD_ORDER = ["q", "q_T", "k", "k_T", "v", "o_f16", "dO_f16", "dO", "dO_T", "stats", "descale_q", "descale_q_T",
                "descale_k", "descale_k_T", "descale_v", "descale_dO", "descale_dO_T", "attn_scale",
                "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask", "use_causal_mask_bottom_right",
                "diagonal_alignment", "left_bound", "right_bound", "use_deterministic_algorithm", "dropout",
                "compute_data_type", "name", "sink_token", "dSink_token"]
FWD_SCALES = ["descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"]
BWD_SCALES = ["descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP", "scale_s",
              "scale_dQ", "scale_dK", "scale_dV", "scale_dP"]


def positional(fn: Any) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD][1:]


def test_signatures_follow_the_official_order() -> None:
    assert positional(pygraph.sdpa_fp8) == FP8_ORDER
    assert positional(pygraph.sdpa_fp8_backward) == FP8_BWD_ORDER
    assert positional(pygraph.sdpa_mxfp8) == MX_ORDER
    assert positional(pygraph.sdpa_mxfp8_backward) == MX_BWD_ORDER
    assert positional(pygraph.block_scale_quantize) == ["input", "block_size", "axis", "transpose",
                                                        "compute_data_type", "name"]
    assert positional(pygraph.block_scale_dequantize) == ["input", "descale", "block_size", "is_negative_scale",
                                                          "compute_data_type", "name"]


# -- helpers ---------------------------------------------------------------------------------------

def graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=E4, intermediate_data_type=F, compute_data_type=F)


def qkv(g: cudnn.pygraph, b: int = 2, hq: int = 8, hk: int = 2, s: int = 128, d: int = 128,
        dtype: Any = E4) -> list[cudnn.tensor]:
    return [g.tensor(name=n, dim=[b, h, s, d], data_type=dtype) for n, h in (("q", hq), ("k", hk), ("v", hk))]


def scales(g: cudnn.pygraph, names: list[str]) -> dict[str, cudnn.tensor]:
    return {n: g.tensor(name=n, dim=[1, 1, 1, 1], data_type=F) for n in names}


def fwd(g: cudnn.pygraph, **kw: Any) -> list[Any]:
    q, k, v = kw.pop("qkv", None) or qkv(g)
    sc = scales(g, FWD_SCALES)
    sc.update(kw.pop("scales", {}))
    kw.setdefault("generate_stats", True) if "is_inference" not in kw else None
    out = g.sdpa_fp8(q, k, v, **sc, **kw)
    for t in out:
        if t is not None:
            t.set_output(True)
    return out


def bwd(g: cudnn.pygraph, b: int = 2, hq: int = 8, hk: int = 2, s: int = 128, d: int = 128, **kw: Any) -> list[Any]:
    q, k, v = qkv(g, b, hq, hk, s, d)
    o = g.tensor(name="o", dim=[b, hq, s, d], data_type=E4)
    d_o = g.tensor(name="dO", dim=[b, hq, s, d], data_type=kw.pop("do_type", E4))
    stats = g.tensor(name="stats", dim=[b, hq, s, 1], data_type=F)
    sc = scales(g, BWD_SCALES)
    sc.update(kw.pop("scales", {}))
    out = g.sdpa_fp8_backward(q, k, v, o, d_o, stats, **sc, **kw)
    for t in out:
        t.set_output(True)
    return out


def names(g: cudnn.pygraph, version: int = 91900) -> list[str]:
    nodes, _ = expand(g.nodes, g.context, version)
    return [n.name.split(".", 1)[1] for n in nodes]


# -- sdpa_fp8 ------------------------------------------------------------------------------------

def test_fp8_forward_infers_outputs_and_prints() -> None:
    g = graph()
    o, stats, amax_s, amax_o = fwd(g, attn_scale=0.125, use_causal_mask=True, name="attn")
    g.validate()
    assert o.get_dim() == [2, 8, 128, 128] and o.get_data_type() == E4 and o.get_stride() == [131072, 16384, 128, 1]
    assert stats.get_dim() == [2, 8, 128, 1] and stats.get_data_type() == F
    for a in (amax_s, amax_o):
        assert a.get_dim() == [1, 1, 1, 1] and a.get_data_type() == F
    node = json.loads(str(g))["nodes"][0]
    assert node["tag"] == "SDPA_FP8_FWD" and node["right_bound"] == 0 and node["attn_scale_value"] == 0.125
    assert set(node["inputs"]) == {"Q", "K", "V", "Descale_Q", "Descale_K", "Descale_V", "Descale_S", "Scale_S",
                                   "Scale_O"}
    assert set(node["outputs"]) == {"O", "Stats", "Amax_S", "Amax_O"}


def test_fp8_forward_inference_returns_no_stats() -> None:
    g = graph()
    _, stats, amax_s, _ = fwd(g, is_inference=True)
    g.validate()
    assert stats is None and amax_s.get_dim() == [1, 1, 1, 1]


def test_fp8_forward_expansion_follows_the_fp8_pattern() -> None:
    g = graph()
    fwd(g, attn_scale=0.125, use_causal_mask=True, is_inference=True)
    g.validate()
    got = names(g)
    assert got[:4] == ["bmm1", "attn_scale", "descale_q", "descale_k"]
    assert got.index("softmax") < got.index("amax_s") < got.index("scale_s") < got.index("bmm2_matmul")
    assert got[-4:] == ["bmm2_descale_a", "bmm2_descale_b", "bmm2_scale_c", "bmm2_amax_c"]
    assert "stats" in got  # the FP8 softmax always forms Stats (virtual when not requested)
    nodes, _ = expand(g.nodes, g.context, 91900)
    scale_s = next(n for n in nodes if n.name.endswith(".scale_s"))
    assert scale_s.outputs["OUT_0"].get_data_type() == E4  # P enters bmm2 in FP8
    bmm2 = next(n for n in nodes if n.name.endswith(".bmm2_matmul"))
    assert bmm2.outputs["C"].get_dim() == [2, 8, 128, 128]  # GQA through the matmul's head broadcast


def test_fp8_forward_dropout_and_padding() -> None:
    g = graph()
    seed, offset = (g.tensor(name=n, dim=[1, 1, 1, 1], data_type=dt.INT64) for n in ("seed", "offset"))
    lens = {n: g.tensor(name=n, dim=[2, 1, 1, 1], data_type=dt.INT32) for n in ("seq_len_q", "seq_len_kv")}
    fwd(g, dropout=(0.1, seed, offset), use_padding_mask=True, **lens)
    g.validate()
    got = names(g)
    assert "rng" in got and "select_padding" in got and got.index("dropout_scale") < got.index("amax_s")


def test_fp8_forward_paged_kv_loads_the_caches() -> None:
    """K and V from paged caches [blocks, h, block_size, d] through page tables [b, 1, pages, 1]:
    two paged_cache_load nodes feed bmm1 (Kᵀ) and bmm2 (V), and the node prints its tables."""
    g = graph()
    q = g.tensor(name="q", dim=[2, 8, 128, 128], data_type=E4)
    k, v = (g.tensor(name=n, dim=[16, 2, 32, 128], data_type=E4) for n in ("k_cache", "v_cache"))
    tables = {n: g.tensor(name=n, dim=[2, 1, 8, 1], data_type=dt.INT32)
              for n in ("paged_attention_k_table", "paged_attention_v_table")}
    lens = {n: g.tensor(name=n, dim=[2, 1, 1, 1], data_type=dt.INT32) for n in ("seq_len_q", "seq_len_kv")}
    o, *_ = fwd(g, qkv=[q, k, v], use_padding_mask=True, paged_attention_max_seq_len_kv=256, **lens, **tables)
    g.validate()
    assert o.get_dim() == [2, 8, 128, 128]
    node = json.loads(str(g))["nodes"][0]
    assert {"Page_table_K", "Page_table_V"} <= set(node["inputs"])
    nodes, _ = expand(g.nodes, g.context, 91900)
    loads = [n for n in nodes if n.op == "paged_cache_load"]
    assert [n.outputs["Y"].get_dim() for n in loads] == [[2, 2, 128, 256], [2, 2, 256, 128]]
    bmm1 = next(n for n in nodes if n.name.endswith(".bmm1"))
    assert bmm1.inputs["B"] is loads[0].outputs["Y"]


def test_fp8_takes_and_ignores_a_max_kv_length_without_paged_caches() -> None:
    """As the official: sdpa_fp8 accepts paged_attention_max_seq_len_kv without page tables and
    keeps K's sequence length (sdpa refuses it there)."""
    g = graph()
    o, *_ = fwd(g, paged_attention_max_seq_len_kv=4096)
    g.validate()
    assert g.nodes[0].dims.s_kv == g.nodes[0].inputs["K"].get_dim()[2] != 4096
    assert o.get_dim()[2] == g.nodes[0].inputs["Q"].get_dim()[2]


def test_fp8_paged_kv_needs_the_sequence_lengths() -> None:
    g = graph()
    q = g.tensor(name="q", dim=[2, 8, 128, 128], data_type=E4)
    k, v = (g.tensor(name=n, dim=[16, 2, 32, 128], data_type=E4) for n in ("k_cache", "v_cache"))
    tables = {n: g.tensor(name=n, dim=[2, 1, 8, 1], data_type=dt.INT32)
              for n in ("paged_attention_k_table", "paged_attention_v_table")}
    fwd(g, qkv=[q, k, v], **tables)
    with pytest.raises(GraphError, match="paged K/V caches need the sequence lengths seq_len_q and seq_len_kv"):
        g.validate()


def test_fp8_forward_refuses_rng_dump() -> None:
    """The FP8 engine faulted writing rng_dump on cuDNN 9.19 (H200): refused at the call."""
    g = graph()
    seed, offset = (g.tensor(name=n, dim=[1, 1, 1, 1], data_type=dt.INT64) for n in ("seed", "offset"))
    with pytest.raises(GraphError, match="rng_dump is refused with FP8 attention"):
        fwd(g, dropout=(0.2, seed, offset), rng_dump=cudnn.tensor().set_name("dump"))
    assert not g.nodes


def test_fp8_backward_infers_outputs_and_expands() -> None:
    g = graph()
    dq, dk, dv, *amax = bwd(g, attn_scale=0.125, use_causal_mask=True, do_type=E5)
    g.validate()
    assert dq.get_dim() == [2, 8, 128, 128] and dk.get_dim() == [2, 2, 128, 128] and dv.get_dim() == [2, 2, 128, 128]
    assert all(t.get_data_type() == E4 for t in (dq, dk, dv))
    assert all(a.get_dim() == [1, 1, 1, 1] and a.get_data_type() == F for a in amax)
    assert json.loads(str(g))["nodes"][0]["tag"] == "SDPA_FP8_BWD"
    got = names(g)
    assert got[:4] == ["mul_dO_O", "reduce_dO", "descale_dO_sum", "descale_O"]
    assert got.index("sub_s_stats") < got.index("exp_s") < got.index("scale_s") < got.index("s_transpose")
    assert got.index("mul_dS_attn_scale") < got.index("amax_dP") < got.index("scale_dP")
    for mm in ("bmm_S_T_dO", "bmm_dP_K", "bmm_dP_T_Q"):
        assert got.index(f"{mm}_scale_c") < got.index(f"{mm}_amax_c")
    assert "bmm_S_T_dO_gqa" in got and "bmm_dP_T_Q_gqa" in got and "bmm_dP_K_gqa" not in got  # head-group sums
    nodes, _ = expand(g.nodes, g.context, 91900)
    ds = next(n for n in nodes if n.name.endswith(".scale_dP"))
    assert ds.outputs["OUT_0"].get_data_type() == E5  # dS takes dO's FP8 type


def test_fp8_backward_user_dropout_mask_keeps_scale_inverse() -> None:
    g = graph()
    mask = g.tensor(name="mask", dim=[2, 8, 128, 128], data_type=F)
    s, s_inv = (g.tensor(name=n, dim=[1, 1, 1, 1], data_type=F) for n in ("scale", "scale_inv"))
    bwd(g, dropout=(mask, s, s_inv))
    g.validate()
    got = names(g)
    assert "scale_dropout_inv" in got and "mul_p_dropout_mask" in got


# -- bad input: clear errors in validate (or at the call) -------------------------------------------

@pytest.mark.parametrize("arg", FWD_SCALES)
def test_fp8_forward_missing_scale(arg: str) -> None:
    g = graph()
    fwd(g, scales={arg: None})
    with pytest.raises(GraphError, match=f"sdpa_fp8 '0': {arg}: is required"):
        g.validate()


@pytest.mark.parametrize("arg", ["descale_dP", "scale_dQ"])
def test_fp8_backward_missing_scale(arg: str) -> None:
    g = graph()
    bwd(g, scales={arg: None})
    with pytest.raises(GraphError, match=f"sdpa_fp8_backward '0': {arg}: is required"):
        g.validate()


@pytest.mark.parametrize(("dims", "dtype", "got"), [([1, 1, 1, 2], F, r"FLOAT \[1, 1, 1, 2\]"),
                                                    ([1, 1, 1, 1], H, r"HALF \[1, 1, 1, 1\]")])
def test_fp8_scale_of_the_wrong_shape_or_type(dims: list[int], dtype: Any, got: str) -> None:
    g = graph()
    fwd(g, scales={"scale_o": g.tensor(name="so", dim=dims, data_type=dtype)})
    want = rf"scale_o: a per-tensor scale must be FLOAT with dims \[1, 1, 1, 1\], got {got}"
    with pytest.raises(GraphError, match=want):
        g.validate()


def test_fp8_refuses_half_inputs_bias_and_head_dims() -> None:
    g = graph()
    fwd(g, qkv=qkv(g, dtype=H))
    with pytest.raises(GraphError, match="Q: data type must be FP8_E4M3 or FP8_E5M2, got HALF"):
        g.validate()
    g = graph()
    fwd(g, bias=g.tensor(name="bias", dim=[1, 8, 128, 128], data_type=F))
    with pytest.raises(GraphError, match="bias: FP8 attention takes no bias"):
        g.validate()
    g = graph()
    fwd(g, qkv=qkv(g, d=72))
    with pytest.raises(GraphError, match="multiples of 16 and at most 256, got d_qk=72"):
        g.validate()


def test_fp8_argument_translation_errors() -> None:
    g = graph()
    q, k, v = qkv(g)
    sc = scales(g, FWD_SCALES)
    with pytest.raises(GraphError, match="give exactly one of is_inference and generate_stats"):
        g.sdpa_fp8(q, k, v, **sc)
    with pytest.raises(GraphError, match="use_causal_mask sets the right bound to 0"):
        g.sdpa_fp8(q, k, v, **sc, generate_stats=True, use_causal_mask=True, right_bound=3)
    with pytest.raises(GraphError, match="dropout probability must be in"):
        g.sdpa_fp8(q, k, v, **sc, generate_stats=True, dropout=(1.0, q, q))
    with pytest.raises(TypeError):
        g.sdpa_fp8(q, k, v, **sc, generate_stats=True, score_mod=lambda g, s: s)  # type: ignore[call-arg]
    assert not g.nodes  # refusals add nothing


def test_fp8_backward_o_and_stats_checked() -> None:
    g = graph()
    bwd(g, d=64)
    g.validate()  # d=64 is valid in itself: the SM rule is checked at build
    g = graph()
    q, k, v = qkv(g)
    o = g.tensor(name="o", dim=[2, 8, 128, 128], data_type=H)
    stats = g.tensor(name="stats", dim=[2, 8, 128, 1], data_type=F)
    g.sdpa_fp8_backward(q, k, v, o, o, stats, **scales(g, BWD_SCALES))
    with pytest.raises(GraphError, match="O: must be FP8_E4M3 or FP8_E5M2"):
        g.validate()


def test_fp8_left_bound_at_or_above_the_diagonal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the official: the FP8 forward checks no sign of the left bound (cuDNN decides, on any
    version); the backward refuses left_bound <= 0. Messages name the op's own arguments."""
    import types

    from cudnn._lib import loader

    monkeypatch.setattr(loader, "report", lambda: types.SimpleNamespace(version=90900))
    for kw in ({"left_bound": 0, "right_bound": 8}, {"sliding_window": -2, "right_bound": 8}, {"left_bound": 0}):
        g = graph()
        fwd(g, name="attn", **kw)
        g.validate()
        assert json.loads(str(g))["nodes"][0]["left_bound"] == kw.get("left_bound", kw.get("sliding_window"))
    g = graph()
    fwd(g, name="attn", right_bound=-1)
    with pytest.raises(GraphError, match=r"sdpa_fp8 'attn': right_bound: must be >= 0, got -1"):
        g.validate()
    for left in (0, -3):
        g = graph()
        bwd(g, name="bwd", left_bound=left, right_bound=8)
        with pytest.raises(GraphError, match=rf"sdpa_fp8_backward 'bwd': left_bound: must be > 0 .* got {left}"):
            g.validate()


def test_fp8_architecture_rules_at_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SM rules of the FP8 engines, as they read on a Hopper and on an Ampere GPU."""
    monkeypatch.setattr(sdpa_fp8, "device_sm", lambda: 90)
    g = graph()
    bwd(g, d=64)
    g.validate()
    with pytest.raises(GraphError, match="backward on SM 90 needs d_qk = d_v = 128, got d_qk=64"):
        expand(g.nodes, g.context, 91900)
    g = graph()
    o, *_ = fwd(g)
    o.set_data_type(dt.BFLOAT16)
    g.validate()
    with pytest.raises(GraphError, match="BFLOAT16 output of FP8 attention needs a Blackwell GPU"):
        expand(g.nodes, g.context, 91900)
    g = graph()
    fwd(g, use_causal_mask_bottom_right=True)
    g.validate()
    with pytest.raises(GraphError, match="BOTTOM_RIGHT masks in FP8 attention need a Blackwell GPU"):
        expand(g.nodes, g.context, 91900)
    monkeypatch.setattr(sdpa_fp8, "device_sm", lambda: 80)
    g = graph()
    fwd(g)
    g.validate()
    with pytest.raises(GraphError, match="needs a Hopper GPU or newer"):
        expand(g.nodes, g.context, 91900)


# -- MXFP8 attention ------------------------------------------------------------------------------

def mx_graph(g: cudnn.pygraph, sf_q: list[int] | None = None, sf_type: Any = E8, reorder: Any = F8_128x4,
             **kw: Any) -> list[Any]:
    b, h, s, d = 2, 4, 256, 128
    q, k, v = qkv(g, b, h, h, s, d)
    sf = {n: g.tensor(name=n, dim=dims, data_type=sf_type, reordering_type=reorder)
          for n, dims in (("sf_q", sf_q or [b, h, 256, 4]), ("sf_k", [b, h, 256, 4]), ("sf_v", [b, h, 8, 128]))}
    out = g.sdpa_mxfp8(q, k, v, sf["sf_q"], sf["sf_k"], sf["sf_v"], **kw)
    for t in out:
        if t is not None:
            t.set_output(True)
    return out


def test_mxfp8_forward_validates_and_prints() -> None:
    g = graph()
    o, stats, amax = mx_graph(g, generate_stats=True, attn_scale=0.1, use_causal_mask=True)
    g.validate()
    assert o.get_dim() == [2, 4, 256, 128] and o.get_data_type() == dt.BFLOAT16
    assert stats.get_dim() == [2, 4, 256, 1] and amax.get_dim() == [1, 1, 1, 1]
    assert json.loads(str(g))["nodes"][0]["tag"] == "SDPA_MXFP8_FWD"
    g = graph()
    o, stats, amax = mx_graph(g, generate_stats=False)
    assert stats is None


def test_mxfp8_forward_checks_the_scale_factors() -> None:
    g = graph()
    with pytest.raises(GraphError, match="generate_stats is required"):
        mx_graph(g)
    for kw, match in (({"sf_type": F}, "descale_q: MX scale factors must be FP8_E8M0, got FLOAT"),
                      ({"reorder": cudnn.tensor_reordering.NONE}, "need reordering_type F8_128x4, got NONE"),
                      ({"sf_q": [2, 4, 256, 3]},
                       r"at least 4 scales along the head dim \(dim 3\), got \[2, 4, 256, 3\]")):
        g = graph()
        mx_graph(g, generate_stats=False, **kw)
        with pytest.raises(GraphError, match=match):
            g.validate()


def test_mxfp8_build_names_the_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    g = graph()
    mx_graph(g, generate_stats=False)
    g.validate()
    monkeypatch.setattr(sdpa_mxfp8, "device_sm", lambda: 90)
    with pytest.raises(GraphError, match=r"needs a Blackwell GPU \(SM 100 or newer\); this is SM 90"):
        expand(g.nodes, g.context, 91900)
    monkeypatch.setattr(sdpa_mxfp8, "device_sm", lambda: 100)
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.21"):
        expand(g.nodes, g.context, 91900)


def test_mxfp8_left_bound_at_or_above_the_diagonal() -> None:
    """The MXFP8 forward leaves left bound <= 0 to cuDNN, as the official; its backward refuses it."""
    g = graph()
    mx_graph(g, generate_stats=True, diagonal_band_left_bound=0, diagonal_band_right_bound=8)
    g.validate()
    with pytest.raises(GraphError, match=r"sdpa_mxfp8_backward 'bwd': left_bound: must be > 0 .* got 0"):
        mx_backward(graph(), name="bwd", left_bound=0, right_bound=8).validate()


def mx_backward(g: cudnn.pygraph, **kw: Any) -> cudnn.pygraph:
    mx_backward_outputs(g, **kw)
    return g


def mx_backward_outputs(g: cudnn.pygraph, **kw: Any) -> list[cudnn.tensor]:
    """An MXFP8 attention backward on [1, 2, 128, 64] inputs in ``g``, its outputs marked."""
    b, h, s, d = 1, 2, 128, 64
    x = {n: g.tensor(name=n, dim=[b, h, s, d], data_type=E4) for n in ("q", "q_T", "k", "k_T", "v", "dO", "dO_T")}
    o16, do16 = (g.tensor(name=n, dim=[b, h, s, d], data_type=dt.BFLOAT16) for n in ("o", "dO16"))
    stats = g.tensor(name="stats", dim=[b, h, s, 1], data_type=F)

    def sf(n: str, dims: list[int]) -> cudnn.tensor:
        return g.tensor(name=n, dim=dims, data_type=E8, reordering_type=F8_128x4)

    along_d, along_s = [b, h, 128, 4], [b, h, 4, 64]
    outs = g.sdpa_mxfp8_backward(x["q"], x["q_T"], x["k"], x["k_T"], x["v"], o16, do16, x["dO"], x["dO_T"], stats,
                                 sf("a", along_d), sf("b", along_s), sf("c", along_d), sf("d", along_s),
                                 sf("e", along_d), sf("f", along_d), sf("g", along_s), **kw)
    for t in outs:
        t.set_output(True)
    return list(outs)


def test_mxfp8_backward_validates_and_prints() -> None:
    g = graph()
    outs = mx_backward_outputs(g, use_causal_mask=True)
    g.validate()
    assert len(outs) == 6 and outs[0].get_dim() == [1, 2, 128, 64] and outs[3].get_dim() == [1, 1, 1, 1]
    assert json.loads(str(g))["nodes"][0]["tag"] == "SDPA_MXFP8_BWD"


# -- block scale quantize / dequantize ---------------------------------------------------------------

def test_block_scale_quantize_infers_y_and_scale() -> None:
    g = cudnn.pygraph()
    x = g.tensor(name="x", dim=[2, 128, 256], data_type=F)
    y, scale = g.block_scale_quantize(x, 32, name="q")
    y.set_data_type(E4).set_output(True)
    scale.set_output(True)
    g.validate()
    assert y.get_dim() == [2, 128, 256] and y.get_stride() == [32768, 256, 1]
    assert scale.get_dim() == [2, 128, 8] and scale.get_data_type() == E8
    assert scale.get_reordering_type() == F8_128x4
    node = json.loads(str(g))["nodes"][0]
    assert node["tag"] == "BLOCK_SCALE_QUANTIZE" and node["block_size"] == 32 and node["outputs"] == {
        "Y": "q::Y", "scale": "q::scale"}


def test_block_scale_quantize_axis_transpose_and_nvfp4() -> None:
    g = cudnn.pygraph(io_data_type=dt.FP4_E2M1)
    x = g.tensor(name="x", dim=[1, 256, 128], data_type=dt.BFLOAT16)
    y, scale = g.block_scale_quantize(x, 16, axis=1, transpose=True)
    y.set_output(True)
    scale.set_output(True)
    g.validate()
    assert y.get_data_type() == dt.FP4_E2M1 and scale.get_data_type() == E4  # NVFP4: E4M3 scales per 16
    assert scale.get_dim() == [1, 16, 128]
    assert y.get_stride()[1] == 1 and scale.get_stride()[1] == 1  # the block axis is packed


@pytest.mark.parametrize(("kw", "match"), [
    ({"block_size": 8}, "block_size: 8 is not supported; the backend takes blocks of 16 or 32"),
    ({"block_size": 32.0}, "block_size: expected an int, got 32.0"),  # a TypeError, as the official's
    ({"axis": 1, "block_size": 32, "dims": [1, 100, 64]},
     r"input dim 1 \(100\) is not a multiple of the block size 32"),
    ({"block_size": 32, "y_type": None}, "the quantized output must be FP8_E4M3, FP8_E5M2, FP4_E2M1"),
    ({"block_size": 32, "scale_type": E4}, "blocks of 32 take FP8_E8M0 scales, got FP8_E4M3"),
    ({"block_size": 32, "dims": [1, 100, 64]}, "F8_128x4 layout is stored in 128 x 4 tiles"),
])
def test_block_scale_quantize_errors(kw: dict[str, Any], match: str) -> None:
    g = cudnn.pygraph()
    x = g.tensor(name="x", dim=kw.get("dims", [1, 128, 256]), data_type=F)
    try:
        y, scale = g.block_scale_quantize(x, kw["block_size"], axis=kw.get("axis"))
    except (GraphError, TypeError) as exc:
        assert match in str(exc)
        return
    if kw.get("y_type", E4) is not None:
        y.set_data_type(kw.get("y_type", E4))
    if "scale_type" in kw:
        scale.set_data_type(kw["scale_type"])
    y.set_output(True)
    scale.set_output(True)
    with pytest.raises(GraphError, match=match):
        g.validate()


def test_block_scale_dequantize_feeds_a_matmul() -> None:
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", dim=[1, 128, 256], data_type=E4)
    b = g.tensor(name="b", dim=[1, 256, 128], stride=[32768, 1, 256], data_type=E4)
    sa = g.tensor(name="sa", dim=[1, 128, 8], data_type=E8, reordering_type=F8_128x4)
    sb = g.tensor(name="sb", dim=[1, 8, 128], stride=[1024, 1, 8], data_type=E8, reordering_type=F8_128x4)
    da = g.block_scale_dequantize(a, sa, [1, 32], name="dq_a")
    c = g.matmul(da, g.block_scale_dequantize(b, sb, [32, 1]), compute_data_type=F)
    c.set_output(True).set_data_type(F)
    g.validate()
    assert da.get_dim() == [1, 128, 256] and da.get_data_type() == F and c.get_dim() == [1, 128, 128]
    node = json.loads(str(g))["nodes"][0]
    assert node["tag"] == "BLOCK_SCALE_DEQUANTIZE" and node["block_size"] == [1, 32]


@pytest.mark.parametrize(("block", "sa_dims", "virtual", "match"), [
    ([1, 64], [1, 128, 8], True, r"block_size: \[1, 64\] is not supported"),
    ([2, 32], [1, 128, 8], True, r"block_size: \[2, 32\] is not supported"),
    ("32", [1, 128, 8], True, "block_size: expected a list of ints, got '32'"),  # a TypeError
    ([1, 32], [1, 128, 4], True, r"descale: dims \[1, 128, 4\] must cover input \[1, 128, 256\]"),
    ([1, 32], [1, 128, 8], False, "the dequantized output must stay virtual"),
])
def test_block_scale_dequantize_errors(block: Any, sa_dims: list[int], virtual: bool, match: str) -> None:
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", dim=[1, 128, 256], data_type=E4)
    sa = g.tensor(name="sa", dim=sa_dims, data_type=E8, reordering_type=F8_128x4)
    try:
        y = g.block_scale_dequantize(a, sa, block)
    except (GraphError, TypeError) as exc:
        assert match.replace("\\", "") in str(exc)
        return
    if not virtual:
        y.set_output(True)
    with pytest.raises(GraphError, match=match):
        g.validate()


def test_block_scale_dequantize_refuses_wide_inputs_and_wrong_scales() -> None:
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", dim=[1, 128, 256], data_type=H)
    g.block_scale_dequantize(a, g.tensor(name="sa", dim=[1, 128, 8], data_type=E8), [1, 32])
    with pytest.raises(GraphError, match="input: must be FP8_E4M3, FP8_E5M2, FP4_E2M1, got HALF"):
        g.validate()
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", dim=[1, 128, 256], data_type=E4)
    g.block_scale_dequantize(a, g.tensor(name="sa", dim=[1, 128, 8], data_type=F), [1, 32])
    with pytest.raises(GraphError, match="descale: blocks of 32 take FP8_E8M0 scales, got FLOAT"):
        g.validate()


# -- FP8 matmul: a composition of existing ops -------------------------------------------------------

def test_fp8_matmul_with_scales_and_amax_validates() -> None:
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", dim=[1, 256, 512], data_type=E4)
    b = g.tensor(name="b", dim=[1, 512, 128], stride=[65536, 1, 512], data_type=E4)
    da, db, sc = (g.tensor(name=n, dim=[1, 1, 1], data_type=F) for n in ("da", "db", "sc"))
    acc = g.mul(g.mul(g.matmul(a, b, compute_data_type=F), da), db)
    c = g.mul(acc, sc)
    amax = g.reduction(acc, cudnn.reduction_mode.AMAX)
    c.set_output(True).set_data_type(E4)
    amax.set_output(True).set_data_type(F).set_dim([1, 1, 1])
    g.validate()
    assert c.get_dim() == [1, 256, 128] and c.get_data_type() == E4 and amax.get_dim() == [1, 1, 1]
