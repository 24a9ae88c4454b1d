"""MoE grouped matmul graphs on CPU: shape inference, validation errors, JSON round trip, and
the version gates of the backend descriptors."""

from __future__ import annotations

import json

import pytest

import cudnn
from cudnn._graph.families.moe_nodes import MoeGroupedMatmulBackward
from cudnn._graph.model.lower import Lowering

HALF, INT32 = cudnn.data_type.HALF, cudnn.data_type.INT32
MODE = cudnn.moe_grouped_matmul_mode
E, M, K, N = 4, 64, 32, 48


def _graph() -> tuple[cudnn.pygraph, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    g = cudnn.pygraph(io_data_type=HALF)
    token = g.tensor([1, M, K], name="token")
    weight = g.tensor([E, K, N], stride=[K * N, 1, K], name="weight")
    fto = g.tensor([E, 1, 1], name="fto")
    return g, token, weight, fto


def test_none_mode_infers_output_and_int32_offsets() -> None:
    g, token, weight, fto = _graph()
    out = g.moe_grouped_matmul(token, weight, fto, name="moe")
    out.set_output(True)
    g.validate()
    assert out.get_dim() == [1, M, N] and out.get_stride() == [M * N, N, 1]
    assert out.get_data_type() == HALF and fto.get_data_type() == INT32


def test_gather_takes_its_rows_from_token_index() -> None:
    g, token, weight, fto = _graph()
    index = g.tensor([1, 96, 1], name="index")
    out = g.moe_grouped_matmul(token, weight, fto, index, mode=MODE.GATHER, name="gather")
    out.set_output(True)
    g.validate()
    assert out.get_dim() == [1, 96, N] and index.get_data_type() == INT32


def test_scatter_keeps_token_rows_and_records_top_k() -> None:
    g, token, weight, fto = _graph()
    index, ks = g.tensor([1, M, 1], name="index"), g.tensor([1, M, 1], name="ks")
    out = g.moe_grouped_matmul(token, weight, fto, index, ks, MODE.SCATTER, top_k=2, name="scatter")
    out.set_output(True)
    g.validate()
    assert out.get_dim() == [1, M, N]
    node = json.loads(str(g))["nodes"][0]
    assert (node["tag"], node["mode"], node["top_k"]) == ("MOE_GROUPED_MATMUL", "SCATTER", 2)


def test_mode_by_name_or_value() -> None:
    for mode in ("gather", 2, MODE.GATHER):  # 2: the official value of GATHER
        g, token, weight, fto = _graph()
        g.moe_grouped_matmul(token, weight, fto, g.tensor([1, 8, 1]), mode=mode).set_output(True)
        g.validate()


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "combine"}, "mode must be a cudnn.moe_grouped_matmul_mode"),
    ({"mode": 7}, "mode must be a cudnn.moe_grouped_matmul_mode"),
    ({"mode": MODE.GATHER}, "token_index: GATHER mode needs it, got None"),
    ({"mode": MODE.SCATTER, "token_index": "idx", "top_k": 2}, "token_ks: SCATTER mode needs it"),
    ({"mode": MODE.SCATTER, "token_index": "idx", "token_ks": "idx"}, "SCATTER mode needs top_k >= 1"),
    ({"token_index": "idx"}, "token_index: only GATHER and SCATTER mode reads it, and this node's mode is NONE"),
    ({"top_k": -1}, "top_k must be an int >= 0"),
])
def test_bad_calls_are_refused_naming_the_node(kwargs: dict, match: str) -> None:
    g, token, weight, fto = _graph()
    kwargs = {k: (g.tensor([1, M, 1]) if v == "idx" else v) for k, v in kwargs.items()}
    with pytest.raises(cudnn.GraphError, match=match) as info:
        g.moe_grouped_matmul(token, weight, fto, name="bad", **kwargs)
    assert "moe_grouped_matmul 'bad'" in str(info.value)


@pytest.mark.parametrize("dims, match", [
    ({"weight": [E, K + 1, N]}, r"weight: K=33 of weight \[4, 33, 48\] does not match K=32"),
    ({"weight": [E + 1, K, N]}, "have 5 experts but first_token_offset has 4"),
    ({"fto": [E, 2, 1]}, r"first_token_offset: expected dims \[E, 1, 1\]"),
    ({"token": [2, M, K]}, r"token: expected dims \[1, M, K\]"),
    ({"token": [M, K]}, "token: expected 3 dims"),
])
def test_shapes_are_checked_at_validate(dims: dict, match: str) -> None:
    g = cudnn.pygraph(io_data_type=HALF)
    shapes = {"token": [1, M, K], "weight": [E, K, N], "fto": [E, 1, 1], **dims}
    out = g.moe_grouped_matmul(*(g.tensor(shapes[p]) for p in ("token", "weight", "fto")), name="m")
    out.set_output(True)
    with pytest.raises(cudnn.GraphError, match=match):
        g.validate()


def test_offsets_must_be_int32() -> None:
    g, token, weight, _ = _graph()
    fto = g.tensor([E, 1, 1], data_type=cudnn.data_type.FLOAT)
    g.moe_grouped_matmul(token, weight, fto, name="m").set_output(True)
    with pytest.raises(cudnn.GraphError, match="first_token_offset: expected an INT32 tensor, got FLOAT"):
        g.validate()


def test_top_k_scores_of_1_32_is_refused_not_ignored() -> None:
    g, token, weight, fto = _graph()
    with pytest.raises(NotImplementedError, match="top_k_scores"):
        g.moe_grouped_matmul(token, weight, fto, top_k_scores=g.tensor([1, M, 1]))


def test_graph_json_round_trip() -> None:
    g, token, weight, fto = _graph()
    index = g.tensor([1, 80, 1], name="index")
    g.moe_grouped_matmul(token, weight, fto, index, mode=MODE.GATHER, name="gather").set_output(True)
    dout = g.tensor([1, M, N], name="dout")
    g.moe_grouped_matmul_bwd(dout, token, fto, name="dw").set_output(True)
    g.validate()
    again = cudnn.pygraph()
    again.deserialize(str(g))
    again.validate()
    assert json.loads(str(again))["nodes"] == json.loads(str(g))["nodes"]


def test_backward_infers_dweight() -> None:
    g, token, _, fto = _graph()
    dout = g.tensor([1, M, N], name="dout")
    dw = g.moe_grouped_matmul_bwd(dout, token, fto, name="dw")
    dw.set_output(True)
    g.validate()
    assert dw.get_dim() == [E, K, N]
    bad = g.tensor([1, M + 1, N], name="dout2")
    g.moe_grouped_matmul_bwd(bad, token, fto, name="dw2").set_output(True)
    with pytest.raises(cudnn.GraphError, match="doutput: M=65 rows but token has M=64"):
        g.validate()


@pytest.mark.parametrize("version, node", [(91400, "fwd"), (92100, "bwd")])
def test_older_cudnn_is_refused_with_the_version_needed(version: int, node: str) -> None:
    """Lowering on a libcudnn older than the op (9.15 forward, 9.22 backward) names both versions
    before any descriptor is made."""
    g, token, weight, fto = _graph()
    if node == "fwd":
        out = g.moe_grouped_matmul(token, weight, fto, name="m")
        needed = "9.15.0"
    else:
        out = g.moe_grouped_matmul_bwd(g.tensor([1, M, N]), token, fto, name="m")
        needed = "9.22.0"
    out.set_output(True)
    g.validate()
    lw = Lowering(0, version)
    with pytest.raises(cudnn.FeatureUnavailableError,
                       match=rf"needs cuDNN >= {needed}; the loaded libcudnn is {version // 10000}\.{version // 100 % 100}"):
        g.nodes[0].lower(lw)
    assert isinstance(g.nodes[0], MoeGroupedMatmulBackward) == (node == "bwd")


def test_gather_is_refused_where_its_kernel_faults() -> None:
    """On cuDNN 9.19 the GATHER kernel faults on the GPU (seen on an H200); lowering refuses it."""
    g, token, weight, fto = _graph()
    g.moe_grouped_matmul(token, weight, fto, g.tensor([1, 8, 1]), mode=MODE.GATHER, name="g").set_output(True)
    g.validate()
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"GATHER mode .*the loaded libcudnn is 9\.19\.0"):
        g.nodes[0].lower(Lowering(0, 91900))
