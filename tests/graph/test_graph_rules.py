"""Graph rules that hold for every node: a tensor has one writer, and a tensor the graph
reads as an input is not also written by it, outputs the caller passes in (attention's score_max,
score_sum_exp, rng_dump, dBias, dSink_token) included; and integer attributes out of range are
refused at the call or at validate(), naming the node and the argument, not in a node the user
never made."""

from __future__ import annotations

from typing import Any

import pytest

import cudnn

dt = cudnn.data_type
H, F, I32 = dt.HALF, dt.FLOAT, dt.INT32


def graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def qkv(g: cudnn.pygraph) -> tuple[cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    """Unnamed: each node of a test gets its own, named after its port."""
    return (g.tensor(dim=[2, 8, 64, 64], data_type=H), g.tensor(dim=[2, 2, 96, 64], data_type=H),
            g.tensor(dim=[2, 2, 96, 64], data_type=H))


def stats(g: cudnn.pygraph, name: str) -> cudnn.tensor:
    return g.tensor(name=name, dim=[2, 8, 64, 1], data_type=F)


def fwd(g: cudnn.pygraph, name: str, **kw: Any) -> None:
    o, s = g.sdpa(*qkv(g), generate_stats=True, name=name, **kw)
    o.set_output(True)
    s.set_output(True)


def bwd(g: cudnn.pygraph, name: str, **kw: Any) -> None:
    q, k, v = qkv(g)
    o, do = (g.tensor(name=n, dim=[2, 8, 64, 64], data_type=H) for n in ("O", "dO"))
    for t in g.sdpa_backward(q, k, v, o, do, stats(g, "Stats"), name=name, **kw):
        t.set_output(True)


def refused(match: str) -> Any:
    return pytest.raises(cudnn.GraphError, match=match)


# -- 1. outputs the caller passes in follow the graph's rules ---------------------------------------------

def test_one_tensor_for_score_max_and_score_sum_exp_is_refused() -> None:
    g = graph()
    m = stats(g, "m")
    fwd(g, "attn", score_max=m, score_sum_exp=m)
    with refused(r"sdpa 'attn': score_max and score_sum_exp are one tensor 'm'; each output needs a tensor of its own"):
        g.validate()


def test_two_nodes_writing_one_tensor_is_refused() -> None:
    g = graph()
    m = stats(g, "m")
    fwd(g, "first", score_max=m, score_sum_exp=stats(g, "e1"))
    fwd(g, "second", score_max=m, score_sum_exp=stats(g, "e2"))
    with refused(r"sdpa 'second': score_max tensor 'm' is already written by sdpa 'first': score_max; "
                 r"a tensor has one writer"):
        g.validate()


def test_writing_an_output_of_another_node_is_refused() -> None:
    g = graph()
    y = g.relu(stats(g, "x"), name="act")
    y.set_output(True)
    fwd(g, "attn", score_max=y, score_sum_exp=stats(g, "e"))
    with refused(r"sdpa 'attn': score_max tensor 'act::OUT_0' is already written by relu 'act': OUT_0"):
        g.validate()


def test_writing_a_tensor_read_earlier_as_a_graph_input_is_refused() -> None:
    g = graph()
    x = stats(g, "x")
    g.relu(x, name="act").set_output(True)
    fwd(g, "attn", score_max=x, score_sum_exp=stats(g, "e"))
    with refused(r"sdpa 'attn': score_max tensor 'x' is read earlier by relu 'act': IN_0 as a graph input; "
                 r"the graph cannot also write it"):
        g.validate()


def test_bias_given_as_dbias_is_refused() -> None:
    g = graph()
    b = g.tensor(name="b", dim=[1, 8, 64, 96], data_type=H)
    bwd(g, "bwd", bias=b, dBias=b)
    with refused(r"sdpa_backward 'bwd': dBias tensor 'b' is also its input bias; an output cannot be one of its "
                 r"node's inputs"):
        g.validate()


def test_rng_dump_and_dsink_token_follow_the_rules() -> None:
    g = graph()
    seed, off = (g.tensor(name=n, dim=[1, 1, 1, 1], data_type=dt.INT64) for n in ("seed", "offset"))
    dump = g.tensor(name="dump", dim=[2, 8, 64, 96], data_type=F)
    fwd(g, "a", dropout=(0.1, seed, off), rng_dump=dump)
    fwd(g, "b", dropout=(0.1, seed, off), rng_dump=dump)
    with refused(r"sdpa 'b': rng_dump tensor 'dump' is already written by sdpa 'a': rng_dump"):
        g.validate()
    g = graph()
    sink = g.tensor(name="sink", dim=[1, 8, 1, 1], data_type=F)
    bwd(g, "bwd", sink_token=sink, dSink_token=sink)
    with refused(r"sdpa_backward 'bwd': dSink_token tensor 'sink' is also its input sink_token"):
        g.validate()


def test_outputs_the_caller_passes_in_still_validate_and_feed_later_nodes() -> None:
    g = graph()
    m, e = stats(g, "m"), stats(g, "e")
    fwd(g, "attn", score_max=m, score_sum_exp=e)
    g.relu(m, name="after").set_output(True)  # read after it is written: ordinary data flow
    g.validate()
    b, db = g.tensor(name="b", dim=[1, 8, 64, 96], data_type=H), g.tensor(name="db", dim=[1, 8, 64, 96], data_type=H)
    g = graph()
    bwd(g, "bwd", bias=b, dBias=db)
    g.validate()


# -- 2. attention's integer attributes ---------------------------------------------------------------------

def paged(g: cudnn.pygraph, **kw: Any) -> None:
    q = g.tensor(name="Q", dim=[2, 8, 64, 64], data_type=H)
    k, v = (g.tensor(name=n, dim=[6, 2, 32, 64], data_type=H) for n in ("K", "V"))
    tables = {f"paged_attention_{n}_table": g.tensor(dim=[2, 1, 3, 1], data_type=I32) for n in ("k", "v")}
    lens = {n: g.tensor(dim=[2, 1, 1, 1], data_type=I32) for n in ("seq_len_q", "seq_len_kv")}
    o, _ = g.sdpa(q, k, v, is_inference=True, use_padding_mask=True, name="attn", **lens, **tables, **kw)
    o.set_output(True)


@pytest.mark.parametrize("value", [0, -5])
def test_paged_attention_max_seq_len_kv_must_be_positive(value: int) -> None:
    with refused(rf"sdpa 'attn': paged_attention_max_seq_len_kv: expected a positive int, got {value}"):
        paged(graph(), paged_attention_max_seq_len_kv=value)
    paged(graph(), paged_attention_max_seq_len_kv=96)  # a positive one is accepted


@pytest.mark.parametrize("arg", ["max_total_seq_len_q", "max_total_seq_len_kv"])
def test_max_total_seq_len_must_be_positive(arg: str) -> None:
    g = graph()
    with refused(rf"sdpa 'attn': {arg}: expected a positive int, got -5"):
        g.sdpa(*qkv(g), is_inference=True, name="attn", **{arg: -5})
    with refused(rf"sdpa_backward 'bwd': {arg}: expected a positive int, got 0"):
        bwd(graph(), "bwd", **{arg: 0})


def test_fp8_paged_attention_max_seq_len_kv_must_be_positive() -> None:
    g = graph()
    q, k, v = (g.tensor(name=n, dim=[2, 8, 64, 64], data_type=dt.FP8_E4M3) for n in ("Q", "K", "V"))
    scales = [g.tensor(dim=[1, 1, 1, 1], data_type=F) for _ in range(6)]
    with refused(r"sdpa_fp8 'attn': paged_attention_max_seq_len_kv: expected a positive int, got 0"):
        g.sdpa_fp8(q, k, v, *scales, is_inference=True, name="attn", paged_attention_max_seq_len_kv=0)


# -- 3. concatenate's in_place_index and axis ---------------------------------------------------------------

def cat(in_place_index: int | None = None, axis: int = 1) -> cudnn.pygraph:
    g = graph()
    a, b = g.tensor(name="a", dim=[2, 3, 4], data_type=H), g.tensor(name="b", dim=[2, 5, 4], data_type=H)
    g.concatenate([a, b], axis, in_place_index=in_place_index, name="cat").set_output(True)
    return g


@pytest.mark.parametrize("index", [7, 2, -1])
def test_concatenate_in_place_index_out_of_range_is_refused(index: int) -> None:
    g = cat(index)
    with refused(rf"concatenate 'cat': in_place_index: expected an index of the 2 inputs, 0 to 1, got {index}"):
        g.validate()


def test_concatenate_in_range_in_place_index_and_axis() -> None:
    for index in (None, 0, 1):
        cat(index).validate()
    for axis in (3, -1):
        with refused(rf"concatenate 'cat': axis: expected 0 to 2 \(the inputs' rank is 3\), got {axis}"):
            cat(axis=axis).validate()
