"""Attention graphs printed (``str(graph)``) and deserialized into an empty ``pygraph``, without a
GPU: every attribute of sdpa and sdpa_backward comes back (the diagonal band first: alignment,
left and right bounds, sliding window), the rebuilt graph prints the same JSON, and a node
whose score_mod callable the JSON cannot hold is refused by name."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

import cudnn
from cudnn._graph.families.sdpa_common import SdpaOptions

dt = cudnn.data_type
H, F, I32, I64, U8 = dt.HALF, dt.FLOAT, dt.INT32, dt.INT64, dt.UINT8
B, HQ, HK, SQ, SKV, D = 2, 4, 2, 64, 96, 64
BR = cudnn.diagonal_alignment.BOTTOM_RIGHT
impl = cudnn.attention_implementation


def graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def t(g: cudnn.pygraph, name: str, dim: list[int], dtype: Any = H, **kw: Any) -> cudnn.tensor:
    return g.tensor(name=name, dim=dim, data_type=dtype, **kw)


def qkv(g: cudnn.pygraph) -> tuple[cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    return t(g, "Q", [B, HQ, SQ, D]), t(g, "K", [B, HK, SKV, D]), t(g, "V", [B, HK, SKV, D])


def lengths(g: cudnn.pygraph) -> dict[str, Any]:
    return {"use_padding_mask": True, "seq_len_q": t(g, "seq_q", [B, 1, 1, 1], I32),
            "seq_len_kv": t(g, "seq_kv", [B, 1, 1, 1], I32)}


def philox(g: cudnn.pygraph, p: float = 0.1) -> tuple[Any, ...]:
    return p, t(g, "seed", [1, 1, 1, 1], I64), t(g, "offset", [1, 1, 1, 1], I64)


def ragged(g: cudnn.pygraph, q: cudnn.tensor, k: cudnn.tensor, v: cudnn.tensor) -> None:
    for x in (q, k, v):
        x.set_ragged_offset(t(g, f"{x.get_name()}_offsets", [B + 1, 1, 1, 1], I32))


FORWARD: dict[str, Callable[[cudnn.pygraph], dict[str, Any]]] = {
    "sliding_window": lambda g: {"use_causal_mask": True, "sliding_window_length": 16, "attn_scale": 0.125},
    "band_top_left": lambda g: {"diagonal_band_left_bound": 8, "diagonal_band_right_bound": 4},
    "band_bottom_right": lambda g: {"diagonal_alignment": BR, "diagonal_band_left_bound": 24,
                                    "diagonal_band_right_bound": 0},
    "band_above_the_diagonal": lambda g: {"diagonal_band_left_bound": 0, "diagonal_band_right_bound": 32},
    "window_only_bottom_right": lambda g: {"diagonal_alignment": BR, "diagonal_band_left_bound": 8},
    "alibi_bias_padding": lambda g: {"use_alibi_mask": True, "use_causal_mask": True,
                                     "bias": t(g, "bias", [1, HQ, SQ, SKV]), **lengths(g)},
    "philox_rng_dump_scale_tensor": lambda g: {
        "dropout": philox(g), "rng_dump": t(g, "rng_dump", [B, HQ, SQ, SKV], F),
        "attn_scale": t(g, "scale", [1, 1, 1, 1], F, is_pass_by_value=True)},
    "dropout_mask": lambda g: {"dropout": (t(g, "mask", [B, HQ, SQ, SKV]), t(g, "dscale", [1, 1, 1, 1], F))},
    "max_sum_sink_unfused": lambda g: {
        "generate_stats": False, "score_max": t(g, "max", [B, HQ, SQ, 1], F),
        "score_sum_exp": t(g, "sum_exp", [B, HQ, SQ, 1], F), "sink_token": t(g, "sink", [1, HQ, 1, 1], F),
        "unfuse_fma": True, "implementation": impl.COMPOSITE, "compute_data_type": F},
    "block_mask_unified": lambda g: {"block_mask": t(g, "blocks", [B, HQ, 1, 1], U8), "implementation": impl.UNIFIED},
}


def forward(g: cudnn.pygraph, kw: dict[str, Any]) -> None:
    q, k, v = qkv(g)
    kw = {"generate_stats": True, **kw}
    o, stats = g.sdpa(q, k, v, name="attn", **kw)
    o.set_output(True)
    if stats is not None:
        stats.set_output(True)


def paged(g: cudnn.pygraph) -> None:
    q = t(g, "Q", [B, HQ, SQ, D])
    k, v = (t(g, n, [6, HK, 32, D]) for n in ("K_cache", "V_cache"))
    tables = {n: t(g, n, [B, 1, 3, 1], I32) for n in ("paged_attention_k_table", "paged_attention_v_table")}
    o, _ = g.sdpa(q, k, v, is_inference=True, name="attn", paged_attention_max_seq_len_kv=SKV, use_causal_mask=True,
                  sliding_window_length=32, **tables, **lengths(g))
    o.set_output(True)


def packed(g: cudnn.pygraph) -> None:
    q, k, v = qkv(g)
    ragged(g, q, k, v)
    o, stats = g.sdpa(q, k, v, generate_stats=True, name="attn", max_total_seq_len_q=100, max_total_seq_len_kv=150,
                      diagonal_alignment=BR, diagonal_band_right_bound=0, diagonal_band_left_bound=12, **lengths(g))
    o.set_output(True).set_ragged_offset(t(g, "O_offsets", [B + 1, 1, 1, 1], I32))
    stats.set_output(True)


def backward(g: cudnn.pygraph, **kw: Any) -> None:
    q, k, v = (t(g, n, [B, HQ, SQ, D]) for n in ("Q", "K", "V"))
    if kw.pop("packed", False):
        ragged(g, q, k, v)
    o, do = t(g, "O", [B, HQ, SQ, D]), t(g, "dO", [B, HQ, SQ, D])
    stats = t(g, "Stats", [B, HQ, SQ, 1], F)
    for x in g.sdpa_backward(q, k, v, o, do, stats, name="bwd", **kw):
        x.set_output(True)
    for port in ("dBias", "RNG_DUMP", "DSINK_TOKEN"):
        if port in g.nodes[0].outputs:
            g.nodes[0].outputs[port].set_output(True)


BACKWARD: dict[str, Callable[[cudnn.pygraph], None]] = {
    "sliding_window_deterministic": lambda g: backward(g, use_causal_mask=True, sliding_window_length=8,
                                                       use_deterministic_algorithm=True, attn_scale=0.125),
    "band_bottom_right": lambda g: backward(g, diagonal_alignment=BR, diagonal_band_left_bound=16,
                                            diagonal_band_right_bound=2),
    "bias_dbias_philox": lambda g: backward(g, bias=t(g, "bias", [1, HQ, SQ, SQ]), dBias=t(g, "dbias", [1, HQ, SQ, SQ]),
                                            dropout=philox(g, 0.25), rng_dump=t(g, "rng", [B, HQ, SQ, SQ], F)),
    "dropout_mask": lambda g: backward(g, dropout=(t(g, "mask", [B, HQ, SQ, SQ]), t(g, "dscale", [1, 1, 1, 1], F),
                                                   t(g, "dscale_inv", [1, 1, 1, 1], F))),
    "sink": lambda g: backward(g, sink_token=t(g, "sink", [1, HQ, 1, 1], F),
                               dSink_token=t(g, "dsink", [1, HQ, 1, 1], F), use_causal_mask=True),
    "alibi_padding": lambda g: backward(g, use_alibi_mask=True, use_causal_mask=True, **lengths(g)),
    "ragged": lambda g: backward(g, packed=True, max_total_seq_len_q=100, max_total_seq_len_kv=100, **lengths(g)),
}


def forward_of(make: Callable[[cudnn.pygraph], dict[str, Any]]) -> Callable[[cudnn.pygraph], None]:
    return lambda g: forward(g, make(g))


GRAPHS: dict[str, Callable[[cudnn.pygraph], None]] = {
    **{f"sdpa_{name}": forward_of(make) for name, make in FORWARD.items()},
    "sdpa_paged": paged, "sdpa_ragged": packed, **{f"sdpa_backward_{name}": make for name, make in BACKWARD.items()}}


def round_trip(make: Callable[[cudnn.pygraph], None]) -> tuple[cudnn.pygraph, cudnn.pygraph]:
    g = graph()
    make(g)
    g.validate()
    again = cudnn.pygraph()
    again.deserialize(str(g))
    again.validate()
    return g, again


@pytest.mark.parametrize("name", list(GRAPHS))
def test_every_attention_attribute_survives_the_graph_json(name: str) -> None:
    g, again = round_trip(GRAPHS[name])
    (node,), (rebuilt,) = g.nodes, again.nodes
    assert type(rebuilt) is type(node) and rebuilt.name == node.name
    assert rebuilt.opts == node.opts  # the window (alignment, left and right bounds) and every other option
    assert {p: x.get_name() for p, x in rebuilt.inputs.items()} == {p: x.get_name() for p, x in node.inputs.items()}
    assert {p: x.get_name() for p, x in rebuilt.outputs.items()} == {p: x.get_name() for p, x in node.outputs.items()}
    assert rebuilt.compute_data_type == node.compute_data_type
    assert json.loads(str(again)) == json.loads(str(g))


def test_the_cases_set_every_option_the_json_can_hold() -> None:
    """Each SdpaOptions field differs from its default in some case above, so each is checked;
    the callables have no JSON form (refused, below) and stats_use_log2 is refused by sdpa itself."""
    defaults = SdpaOptions()
    seen = set()
    for make in GRAPHS.values():
        g = graph()
        make(g)
        opts = g.nodes[0].opts
        seen |= {f.name for f in dataclasses.fields(SdpaOptions) if getattr(opts, f.name) != getattr(defaults, f.name)}
    assert {f.name for f in dataclasses.fields(SdpaOptions)} - seen == {"score_mod", "score_mod_bprop",
                                                                       "stats_use_log2"}


def test_the_window_survives_as_printed() -> None:
    _, again = round_trip(GRAPHS["sdpa_band_bottom_right"])
    (node,) = json.loads(str(again))["nodes"]
    assert (node["diagonal_alignment"], node["left_bound"], node["right_bound"]) == ("BOTTOM_RIGHT", 24, 0)
    _, again = round_trip(GRAPHS["sdpa_backward_sliding_window_deterministic"])
    opts = again.nodes[0].opts
    assert (opts.alignment, opts.left_bound, opts.right_bound, opts.deterministic) == (
        cudnn.diagonal_alignment.TOP_LEFT, 8, 0, True)


@pytest.mark.parametrize("op", ["sdpa", "sdpa_backward"])
def test_a_score_mod_is_refused_not_dropped(op: str) -> None:
    g = graph()
    if op == "sdpa":
        forward(g, {"score_mod": lambda sub, s: sub.mul(s, 2.0)})
    else:
        backward(g, score_mod=lambda sub, s: sub.mul(s, 2.0))
    g.validate()
    with pytest.raises(cudnn.SerializationNotSupportedError, match=r"deserialize: node 0 .*has a score_mod callable, "
                                                                     "which a graph's JSON cannot hold"):
        cudnn.pygraph().deserialize(str(g))
