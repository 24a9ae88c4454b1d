"""Layer norm (training: Y, mean, inverse variance) and RMS norm (inference) through
``cudnn.pygraph``, each checked against a float64 PyTorch reference.

Needs: an NVIDIA GPU, PyTorch with CUDA, cuDNN 9 (pip install cudnn-py[cu13] or [cu12]).

    python examples/norms.py

Rows in bf16, fp32 scale and bias (as mixed-precision training keeps them), statistics in fp32.
"""

from __future__ import annotations

import sys

from _needs import check, need_gpu_and_torch, parser


def main(argv: list[str] | None = None) -> int:
    parser(__doc__).parse_args(argv)  # --help answers here, on any machine
    torch = need_gpu_and_torch(__file__)
    import cudnn

    FLOAT, BF16 = cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
    heuristics = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
    torch.manual_seed(0)
    rows, d, eps = 4096, 1024, 1e-5
    x = (2 * torch.randn(rows, d, device="cuda") + 0.5).bfloat16()
    scale = 1 + 0.1 * torch.randn(1, d, device="cuda")
    bias = 0.1 * torch.randn(1, d, device="cuda")
    xd = x.double()
    ok = True

    # layer norm, training: Y and the statistics the backward pass needs
    g = cudnn.pygraph(intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, S, B = g.tensor_like(x, name="x"), g.tensor_like(scale, name="scale"), g.tensor_like(bias, name="bias")
    Y, M, V = g.layernorm(cudnn.norm_forward_phase.TRAINING, X, S, B, eps, name="ln")
    Y.set_output(True)
    M.set_output(True).set_data_type(FLOAT)
    V.set_output(True).set_data_type(FLOAT)
    g.build(heuristics)
    y = torch.empty(rows, d, device="cuda", dtype=torch.bfloat16)
    mean, inv = (torch.empty(rows, 1, device="cuda") for _ in range(2))
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({X: x, S: scale, B: bias, Y: y, M: mean, V: inv}, ws)
    torch.cuda.synchronize()
    ref_mean, ref_var = xd.mean(-1, keepdim=True), xd.var(-1, unbiased=False, keepdim=True)
    ref_y = torch.nn.functional.layer_norm(xd, (d,), scale.double().flatten(), bias.double().flatten(), eps)
    ok &= check("layernorm Y (bf16)", y, ref_y, atol=3e-2, rtol=2e-2)
    ok &= check("layernorm mean", mean, ref_mean, atol=1e-4, rtol=1e-4)
    ok &= check("layernorm inv_variance", inv, (ref_var + eps).rsqrt(), atol=1e-4, rtol=1e-4)

    # RMS norm, inference (transformer-shaped rows)
    x3 = (3 * torch.randn(4, 128, 768, device="cuda") - 0.5).bfloat16()
    w3 = 1 + 0.5 * torch.randn(1, 1, 768, device="cuda")
    x3d = x3.double()

    g = cudnn.pygraph(intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, S = g.tensor_like(x3, name="x"), g.tensor_like(w3, name="scale")
    Y, _ = g.rmsnorm(cudnn.norm_forward_phase.INFERENCE, X, S, epsilon=eps, name="rms")
    Y.set_output(True).set_data_type(BF16)
    g.build(heuristics)
    y3 = torch.empty_like(x3)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({X: x3, S: w3, Y: y3}, ws)
    torch.cuda.synchronize()
    ref_rms = x3d * (x3d.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w3.double()
    ok &= check("rmsnorm (bf16)", y3, ref_rms, atol=3e-2, rtol=2e-2)

    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
