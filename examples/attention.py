"""Scaled dot-product attention, forward and backward, through ``cudnn.pygraph``, checked
against PyTorch's ``scaled_dot_product_attention`` and its autograd.

Needs: an NVIDIA GPU (cuDNN's fused attention: Ampere or newer), PyTorch with CUDA, cuDNN 9
(pip install cudnn-py[cu13] or [cu12]).

    python examples/attention.py [--causal/--no-causal]

bf16 Q, K, V in [batch, heads, seq, head_dim]; the forward graph also writes the softmax
statistics (fp32) that the backward graph reads. Compared with PyTorch in float32.
"""

from __future__ import annotations

import argparse
import sys

from _needs import check, need_gpu_and_torch, parser


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True, help="causal mask (default on)")
    args = ap.parse_args(argv)
    torch = need_gpu_and_torch(__file__)
    import cudnn

    FLOAT, BF16 = cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
    heuristics = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
    b, h, s, d = 2, 8, 512, 64
    scale = d ** -0.5
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    d_o = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

    fwd = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = fwd.tensor_like(q, name="q"), fwd.tensor_like(k, name="k"), fwd.tensor_like(v, name="v")
    O, Stats = fwd.sdpa(Q, K, V, generate_stats=True, attn_scale=scale, use_causal_mask=args.causal, name="attn")
    O.set_output(True)
    Stats.set_output(True).set_data_type(FLOAT)
    fwd.build(heuristics)
    o = torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    stats = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    ws = torch.empty(fwd.get_workspace_size(), device="cuda", dtype=torch.uint8)
    fwd.execute({Q: q, K: k, V: v, O: o, Stats: stats}, ws)

    bwd = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    names = ("q", "k", "v", "o", "dO", "stats")
    ts = [bwd.tensor_like(t, name=n) for n, t in zip(names, (q, k, v, o, d_o, stats))]
    dQ, dK, dV = bwd.sdpa_backward(*ts, attn_scale=scale, use_causal_mask=args.causal, name="attn_bwd")
    grads = {n: torch.empty_like(t) for n, t in (("dQ", q), ("dK", k), ("dV", v))}
    for t, n in ((dQ, "dQ"), (dK, "dK"), (dV, "dV")):
        t.set_output(True).set_dim(list(grads[n].shape)).set_stride(list(grads[n].stride()))
    bwd.build(heuristics)
    ws = torch.empty(bwd.get_workspace_size(), device="cuda", dtype=torch.uint8)
    pack = dict(zip(ts, (q, k, v, o, d_o, stats)))
    pack.update({dQ: grads["dQ"], dK: grads["dK"], dV: grads["dV"]})
    bwd.execute(pack, ws)
    torch.cuda.synchronize()

    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=args.causal, scale=scale)
    ref.backward(d_o.float())
    ok = check("O", o, ref.detach(), atol=2e-2, rtol=2e-2)
    for name, t in (("dQ", qf), ("dK", kf), ("dV", vf)):
        ok &= check(name, grads[name], t.grad, atol=5e-2, rtol=5e-2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
