"""An FP8 linear layer with cudnn.Graph: y = (x @ wᵀ) * descale_x * descale_w, stored in bf16,
with the amax of the result for the next step's scale (delayed scaling, as FP8 training does).

x and w are quantized to E4M3 with per-tensor scales (descale = amax / 448); the graph is one
FP8 GEMM whose epilogue applies the scales and reduces the amax. The result is checked against
torch._scaled_mm and against the float32 product of the dequantized inputs.

Needs: an NVIDIA GPU with FP8 (Ada, Hopper or newer: SM 8.9+), PyTorch with CUDA, cuDNN 9.

    python examples/fp8_linear.py                   # tokens 4096, 4096 -> 4096 features
    python examples/fp8_linear.py --tokens 512 --fin 1024 --fout 2048
"""

from __future__ import annotations

import argparse
import sys

from _needs import need_gpu_and_torch, need_torch, parser, positive_int


def arguments() -> argparse.ArgumentParser:
    """The command line: the layer's sizes."""
    ap = parser(__doc__)
    ap.add_argument("--tokens", type=positive_int, default=4096, help="rows of x (default 4096)")
    ap.add_argument("--fin", type=positive_int, default=4096, help="input features (default 4096)")
    ap.add_argument("--fout", type=positive_int, default=4096, help="output features (default 4096)")
    return ap


if __name__ == "__main__":
    ARGS = arguments().parse_args()  # --help and a mistyped option answer before PyTorch is looked for

torch = need_torch(__file__)  # without PyTorch: one line naming it, exit status 1

import cudnn  # noqa: E402

FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
FLOAT = cudnn.data_type.FLOAT


def quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(t / descale in E4M3, descale as a [1, 1, 1] float32 tensor)."""
    descale = t.abs().max().float() / FP8_MAX
    return (t / descale).to(FP8), descale.reshape(1, 1, 1)


def fp8_linear(x8: torch.Tensor, w8: torch.Tensor, descale_x: torch.Tensor, descale_w: torch.Tensor
               ) -> cudnn.Graph:
    """The graph of one FP8 linear layer: inputs x8 [1, tokens, fin], w8ᵀ [1, fin, fout] (column-major)."""
    with cudnn.Graph(intermediate_data_type=FLOAT, compute_data_type=FLOAT, inputs=["x", "wT", "dx", "dw"],
                     outputs=["y", "amax"]) as graph:
        x = graph.tensor(name="x", dim=list(x8.shape), stride=list(x8.stride()), data_type=cudnn.data_type.FP8_E4M3)
        wt = w8.transpose(1, 2)
        w = graph.tensor(name="wT", dim=list(wt.shape), stride=list(wt.stride()), data_type=cudnn.data_type.FP8_E4M3)
        dx = graph.tensor(name="dx", dim=[1, 1, 1], data_type=FLOAT)
        dw = graph.tensor(name="dw", dim=[1, 1, 1], data_type=FLOAT)
        acc = graph.matmul(x, w, compute_data_type=FLOAT, name="gemm")
        y = graph.mul(graph.mul(acc, dx, name="descale_x"), dw, name="descale_w")
        amax = graph.reduction(y, cudnn.reduction_mode.AMAX, name="amax_y")
        y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_name("y")
        amax.set_output(True).set_dim([1, 1, 1]).set_data_type(FLOAT).set_name("amax")
    return graph


def main(args: argparse.Namespace) -> None:
    need_gpu_and_torch(__file__)
    if torch.cuda.get_device_capability() < (8, 9):
        major, minor = torch.cuda.get_device_capability()
        sys.exit(f"fp8_linear.py needs an NVIDIA GPU with FP8 (SM 8.9 or newer); this one is SM {major}.{minor}")
    torch.manual_seed(0)
    x = torch.randn(1, args.tokens, args.fin, device="cuda")
    w = torch.randn(1, args.fout, args.fin, device="cuda") / args.fin ** 0.5
    x8, dx = quantize(x)
    w8, dw = quantize(w)
    graph = fp8_linear(x8, w8, dx, dw)
    y, amax = graph(x8, w8.transpose(1, 2), dx, dw)
    want = torch._scaled_mm(x8[0], w8[0].t(), scale_a=dx.reshape(()), scale_b=dw.reshape(()),
                            out_dtype=torch.bfloat16)
    exact = (x8.float() * dx) @ (w8.float() * dw).transpose(1, 2)
    err_mm = ((y[0].float() - want.float()).abs().max() / want.float().abs().max()).item()
    err_f32 = ((y.float() - exact).norm() / exact.norm()).item()
    print(f"y {tuple(y.shape)} {y.dtype}; amax {amax.item():.4f} (torch: {exact.abs().max().item():.4f})")
    print(f"max |y - torch._scaled_mm| / max|y| = {err_mm:.2e}; relative RMS error vs float32 = {err_f32:.2e}")
    ok = err_mm < 2e-2 and err_f32 < 1e-2 and abs(amax.item() - exact.abs().max().item()) <= 1e-2 * amax.item()
    print("OK" if ok else "MISMATCH")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main(ARGS)
