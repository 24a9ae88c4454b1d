"""The high-level ``cudnn.Graph``: build inside a ``with`` block, then call the graph like a function.

Needs: an NVIDIA GPU, PyTorch with CUDA, cuDNN 9 (pip install cudnn-py[cu13] or [cu12]).

    python examples/graph_wrapper.py

A matmul + bias + GELU block (fp16 in and out, fp32 inside). Ops take framework tensors; the
inputs are named ``node::port`` (``bias::1``: the op's second positional argument), the output by
``set_name``; leaving the block validates and builds; calling
the graph allocates the output on PyTorch's current stream. Checked against PyTorch.
"""

from __future__ import annotations

import sys

from _needs import check, need_gpu_and_torch, parser


def main(argv: list[str] | None = None) -> int:
    parser(__doc__).parse_args(argv)  # --help answers here, on any machine
    torch = need_gpu_and_torch(__file__)
    import cudnn

    torch.manual_seed(0)
    a = torch.randn(4, 256, 512, device="cuda", dtype=torch.float16)
    wt = (torch.randn(4, 512, 1024, device="cuda") / 512 ** 0.5).half()
    bias = torch.randn(1, 1, 1024, device="cuda", dtype=torch.float16)

    with cudnn.Graph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                     compute_data_type=cudnn.data_type.FLOAT,
                     inputs=["mm::A", "mm::B", "bias::1"], outputs=["Y"]) as graph:
        h = graph.matmul(name="mm", A=a, B=wt)
        h = graph.bias(h, bias, name="bias")
        graph.gelu(h, name="gelu").set_output(True).set_name("Y")

    y = graph(a, wt, bias)
    again = graph(a, wt, bias)  # the same inputs: one dictionary lookup and one cuDNN call
    torch.cuda.synchronize()
    reference = torch.nn.functional.gelu(a.float() @ wt.float() + bias.float())
    ok = check("gelu(A @ B + bias)", y, reference, atol=2e-2, rtol=1e-2)
    ok &= bool(torch.equal(y, again))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
