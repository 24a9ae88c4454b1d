"""A plan serialized and deserialized into an empty ``pygraph`` runs as the graph it came from:
a slice read in place (a window into its input, on cuDNN before 9.22), attention's workspace
scratch (Stats of an inference graph, ALiBi slopes, the backward's softmax sums) and its band
bounds. Each restored graph runs on the original's buffers (bound by uid) and must write the
same bits as the original; the original is checked against PyTorch first."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudnn

pytestmark = pytest.mark.gpu

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
HALF, FLOAT, BF16 = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16


def workspace(g: cudnn.pygraph) -> torch.Tensor:
    return torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)


def run(g: cudnn.pygraph, pack: dict[Any, torch.Tensor]) -> None:
    g.execute(pack, workspace(g))
    torch.cuda.synchronize()


def restored_run(g: cudnn.pygraph, pack: dict[Any, torch.Tensor], outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run the plan of ``g`` restored into an empty pygraph on ``pack`` (outputs refilled with NaN);
    the outputs it wrote."""
    again = cudnn.pygraph()
    again.deserialize(g.serialize(as_bytes=True))
    assert again.get_workspace_size() == g.get_workspace_size()
    for out in outputs:
        out.fill_(float("nan"))
    run(again, pack)
    return [out.clone() for out in outputs]


def test_a_slice_read_in_place_runs_after_a_round_trip() -> None:
    torch.manual_seed(0)
    a = torch.randn(16, 32, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(16, 128, 64, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    a_slice = g.slice(A, [slice(8, None), slice(16, None), slice(None, None)], name="a_slice")
    b_slice = g.slice(B, [slice(8, None), slice(None, None), slice(32, None)], name="b_slice")
    C = g.matmul(a_slice, b_slice, compute_data_type=FLOAT, name="mm")
    C.set_output(True).set_data_type(BF16)
    g.build(HEUR)
    c = torch.full((8, 16, 32), float("nan"), device="cuda", dtype=torch.bfloat16)
    pack = {A: a, B: b, C: c}
    run(g, pack)
    torch.testing.assert_close(c.float(), a[8:, 16:].float() @ b[8:, :, 32:].float(), atol=5e-2, rtol=2e-2)
    first = c.clone()
    (again,) = restored_run(g, pack, [c])
    assert torch.equal(again, first)


def attention_forward(**kw: Any) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor], torch.Tensor]:
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    o_t, stats_t = g.sdpa(Q, K, V, attn_scale=0.125, use_causal_mask=True, name="attn",
                          implementation=cudnn.attention_implementation.COMPOSITE, **kw)
    o = torch.full_like(q, float("nan"))
    o_t.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack = {Q: q, K: k, V: v, o_t: o}
    if stats_t is not None:
        stats = torch.empty(2, 4, 128, 1, device="cuda", dtype=torch.float32)
        stats_t.set_output(True).set_data_type(FLOAT)
        pack[stats_t] = stats
    return g, pack, o


@pytest.mark.parametrize("kw", [{"is_inference": True, "sliding_window_length": 32},
                                {"generate_stats": True, "use_alibi_mask": True}], ids=["inference_window", "alibi"])
def test_attention_scratch_and_bounds_run_after_a_round_trip(kw: dict[str, Any]) -> None:
    g, pack, o = attention_forward(**kw)
    g.build(HEUR)
    run(g, pack)
    q, k, v = (pack[t].float() for t in list(pack)[:3])
    if "sliding_window_length" in kw:
        row, col = torch.arange(128, device="cuda").view(-1, 1), torch.arange(128, device="cuda").view(1, -1)
        mask = (col <= row) & (col + 32 > row)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)
        torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)
    assert not torch.isnan(o).any()
    first = o.clone()
    (again,) = restored_run(g, pack, [o])
    assert torch.equal(again, first)


def test_attention_backward_scratch_runs_after_a_round_trip() -> None:
    torch.manual_seed(2)
    q, k, v, o, do = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16) for _ in range(5))
    stats = torch.randn(2, 4, 128, 1, device="cuda", dtype=torch.float32).abs() + 4.0
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V, Ot, dO, S = (g.tensor_like(t) for t in (q, k, v, o, do, stats))
    grads = g.sdpa_backward(Q, K, V, Ot, dO, S, attn_scale=0.125, use_causal_mask=True, sliding_window_length=32,
                            name="bwd")
    outs = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    pack = {Q: q, K: k, V: v, Ot: o, dO: do, S: stats}
    for t, buf in zip(grads, outs, strict=True):
        t.set_output(True).set_dim(list(buf.shape)).set_stride(list(buf.stride()))
        pack[t] = buf
    g.build(HEUR)
    run(g, pack)
    assert not any(torch.isnan(buf).any() for buf in outs)
    first = [buf.clone() for buf in outs]
    again = restored_run(g, pack, outs)
    for x, y in zip(again, first, strict=True):  # dQ accumulates in any order: equal up to rounding, not bit for bit
        torch.testing.assert_close(x.float(), y.float(), atol=1e-2 * max(1.0, float(y.abs().max())), rtol=1e-2)
