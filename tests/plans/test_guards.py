"""Known-wrong engines are set aside before they are built (_graph/plans/known_faults.py)."""

from __future__ import annotations

import pytest

import cudnn
from cudnn._graph.model.expand import expand
from cudnn._graph.plans.candidates import Candidate, PlanSet
from cudnn._graph.plans.known_faults import guard_for

dt = cudnn.data_type
RTC = cudnn.behavior_note.RUNTIME_COMPILATION


def nchw(d: list[int]) -> list[int]:
    n, c, h, w = d
    return [c * h * w, h * w, w, 1]


def nhwc(d: list[int]) -> list[int]:
    n, c, h, w = d
    return [c * h * w, 1, w * c, c]


def conv_graph(x_layout, out_layout=None, act: bool = True) -> list:
    g = cudnn.pygraph(io_data_type=dt.HALF, compute_data_type=dt.FLOAT)
    x = g.tensor(name="x", dim=[2, 8, 5, 7], stride=x_layout([2, 8, 5, 7]))
    w = g.tensor(name="w", dim=[16, 8, 3, 3], stride=x_layout([16, 8, 3, 3]))
    y = g.conv_fprop(x, w, padding=[1, 1])
    if act:
        y = g.relu(y)
    if out_layout is not None:
        y.set_dim([2, 16, 5, 7]).set_stride(out_layout([2, 16, 5, 7]))
    y.set_output(True)
    g.validate()
    return expand(g.nodes, g.context, cudnn.backend_version())[0]


def cand(index: int, notes: list) -> Candidate:
    return Candidate(None, index, {}, [], notes, "A")


def test_nchw_conv_fused_into_an_nhwc_output_refuses_runtime_compiled_engines() -> None:
    guard = guard_for(conv_graph(nchw))  # the output's inferred default is channels-last
    assert guard is not None
    assert "channels-first (NCHW) input" in (guard(cand(7, [RTC])) or "")
    assert guard(cand(0, [])) is None


@pytest.mark.parametrize("x_layout, out_layout, act", [
    (nhwc, None, True),  # channels-last throughout
    (nchw, nchw, True),  # NCHW throughout
    (nchw, None, False),  # a convolution alone
])
def test_other_layouts_are_left_alone(x_layout, out_layout, act) -> None:
    assert guard_for(conv_graph(x_layout, out_layout, act)) is None


def test_a_graph_whose_every_engine_is_refused_says_why() -> None:
    plans = PlanSet("g")
    for c in (cand(7, [RTC]), cand(4, [RTC])):
        c.refused = "known wrong"
        plans.all.append(c)
    assert plans.candidates == []
    err = plans.not_supported(plans.candidates)
    assert isinstance(err, cudnn.cudnnGraphNotSupportedError)
    assert "eng7, eng4" in str(err) and "known wrong" in str(err)


def pointwise_graph(small_op: bool) -> list:
    g = cudnn.pygraph(io_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    a = g.tensor(name="a", dim=[1, 7, 64], stride=[448, 64, 1])
    b = g.tensor(name="b", dim=[1, 7, 1], stride=[7, 1, 1])
    g.mul(a, b).set_output(True)
    if small_op:
        g.elu(b).set_output(True)  # computes at [1, 7, 1], beside an op at [1, 7, 64]
    else:
        g.sub(a, g.elu(g.mul(a, b))).set_output(True)
    g.validate()
    return expand(g.nodes, g.context, cudnn.backend_version())[0]


def test_a_pointwise_op_at_a_broadcast_shape_refuses_every_engine() -> None:
    guard = guard_for(pointwise_graph(small_op=True))
    assert guard is not None and "smaller shape" in (guard(cand(0, [])) or "")
    assert guard_for(pointwise_graph(small_op=False)) is None


def test_fp8_attention_with_philox_dropout_refuses_every_engine() -> None:
    e4 = dt.FP8_E4M3
    g = cudnn.pygraph(io_data_type=e4, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    q, k, v = (g.tensor(name=n, dim=[1, 2, 64, 128], stride=[16384, 8192, 128, 1], data_type=e4) for n in "qkv")
    scales = [g.tensor(name=f"s{i}", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.FLOAT) for i in range(6)]
    seed, offset = (g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.INT64) for n in ("seed", "offset"))
    o, stats, amax_s, amax_o = g.sdpa_fp8(q, k, v, *scales, generate_stats=True, attn_scale=0.125,
                                          dropout=(0.1, seed, offset))
    for t in (o, stats, amax_s, amax_o):
        t.set_output(True)
    g.validate()
    guard = guard_for(expand(g.nodes, g.context, cudnn.backend_version())[0])
    assert guard is not None and "forward engine faulted" in (guard(cand(0, [])) or "")
