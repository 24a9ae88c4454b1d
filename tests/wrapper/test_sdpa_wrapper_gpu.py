"""Attention through ``cudnn.Graph``: ``graph.sdpa`` / ``graph.sdpa_backward`` recorded in the
with-block on torch tensors, called positionally (io tuples of named ports) and with dicts keyed
by named ports (``attn::q``, ``attn::O``, ``attn::Stats``, ``bwd::dQ``, ...).

Each result is compared with the float32 reference of test_sdpa_gpu on the same fp16 inputs, with
its tolerances: O atol 2e-2 rtol 2e-2, Stats 2e-3 / 2e-3, dQ/dK/dV rtol 4e-2 and atol 4e-2 times
the largest reference gradient magnitude (at least 1). A call the library cannot lower raises a
GraphError naming the node when the block ends.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_sdpa_gpu import STATS_TOL, TOL, Case, assert_close, inputs, reference_f

import cudnn

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
CASE = Case(b=2, hq=4, hk=2, hv=2, sq=128, skv=192, causal=True)  # GQA, causal, s_q != s_kv


def graph_args() -> dict[str, object]:
    return {"io_data_type": HALF, "intermediate_data_type": FLOAT, "compute_data_type": FLOAT}


def test_forward_positional_call_with_named_ports() -> None:
    x = inputs(CASE)
    with cudnn.Graph(**graph_args(), inputs=["attn::0", "attn::1", "attn::2"],
                     outputs=["attn::O", "attn::Stats"]) as graph:
        o, stats = graph.sdpa(x.q, x.k, x.v, generate_stats=True, attn_scale=CASE.scale, use_causal_mask=True,
                              name="attn")
        o.set_output(True)
        stats.set_output(True).set_data_type(FLOAT)
    got_o, got_stats = graph(x.q, x.k, x.v)
    want_o, want_stats = reference_f(CASE, x, x.q.float(), x.k.float(), x.v.float(), None)
    assert got_o.shape == want_o.shape and got_o.dtype == torch.float16
    assert_close("O", got_o, want_o, *TOL[torch.float16])
    assert_close("Stats", got_stats, want_stats, *STATS_TOL)


def test_forward_and_backward_dict_calls_with_keyword_ports() -> None:
    x = inputs(CASE)
    with cudnn.Graph(**graph_args()) as fwd:
        o, stats = fwd.sdpa(q=x.q, k=x.k, v=x.v, is_inference=False, attn_scale=CASE.scale, use_causal_mask=True,
                            name="attn")
        o.set_output(True)
        stats.set_output(True).set_data_type(FLOAT)
    out = fwd({"attn::q": x.q, "attn::k": x.k, "attn::v": x.v})
    qf, kf, vf = (t.float().requires_grad_(True) for t in (x.q, x.k, x.v))
    want_o, want_stats = reference_f(CASE, x, qf, kf, vf, None)
    assert_close("attn::O", out["attn::O"], want_o, *TOL[torch.float16])
    assert_close("attn::Stats", out["attn::Stats"], want_stats, *STATS_TOL)

    d_o = torch.randn(want_o.shape, generator=torch.Generator(device="cuda").manual_seed(3),
                      device="cuda").to(torch.float16)
    want_o.backward(d_o.float())
    with cudnn.Graph(**graph_args()) as bwd:
        grads = bwd.sdpa_backward(q=x.q, k=x.k, v=x.v, o=out["attn::O"], dO=d_o, stats=out["attn::Stats"],
                                  attn_scale=CASE.scale, use_causal_mask=True, name="bwd")
        for t in grads:
            t.set_output(True)
    got = bwd({"bwd::q": x.q, "bwd::k": x.k, "bwd::v": x.v, "bwd::o": out["attn::O"], "bwd::dO": d_o,
               "bwd::stats": out["attn::Stats"]})
    atol, rtol = TOL[torch.float16]
    atol = 2 * atol * max(1.0, *(float(t.grad.abs().max()) for t in (qf, kf, vf)))
    for name, want in (("bwd::dQ", qf.grad), ("bwd::dK", kf.grad), ("bwd::dV", vf.grad)):
        assert got[name].shape == want.shape, name
        assert_close(name, got[name], want, atol, 2 * rtol)


def test_a_call_the_lowering_cannot_express_raises_naming_the_node() -> None:
    x = inputs(CASE)
    with pytest.raises(cudnn.GraphError, match="attn.*implementation"), cudnn.Graph(**graph_args()) as graph:
        o, _ = graph.sdpa(x.q, x.k, x.v, is_inference=True, attn_scale=1.0 / math.sqrt(CASE.dqk),
                          use_causal_mask=True, implementation=cudnn.attention_implementation.UNIFIED, name="attn")
        o.set_output(True)
