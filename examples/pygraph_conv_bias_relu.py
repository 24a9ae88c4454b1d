"""conv + bias + ReLU as one fused cuDNN graph through ``cudnn.pygraph``, checked against PyTorch.

Needs: an NVIDIA GPU, PyTorch with CUDA, cuDNN 9 (pip install cudnn-py[cu13] or [cu12]).

    python examples/pygraph_conv_bias_relu.py [--picture graph.svg]

Declares the graph (fp16 NHWC in and out, fp32 inside), validates it and draws it with
``--picture`` (no GPU, PyTorch or cuDNN needed up to here), builds it with the heuristics,
shows the candidate plans, runs it on PyTorch tensors.
"""

from __future__ import annotations

import sys
from typing import Any

from _needs import check, need_gpu_and_torch, parser


def declare(n: int, c: int, h: int, k: int) -> tuple[Any, dict[str, Any]]:
    """The graph and its tensors: X [n, c, h, h] and W [k, c, 3, 3] fp16 NHWC, B [1, k, 1, 1]."""
    import cudnn

    g = cudnn.pygraph(name="conv_bias_relu", io_data_type=cudnn.data_type.HALF,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=[n, c, h, h], stride=[h * h * c, 1, h * c, c])
    W = g.tensor(name="W", dim=[k, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    B = g.tensor(name="B", dim=[1, k, 1, 1], stride=[k, 1, 1, 1])
    conv = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv")
    Y = g.relu(g.bias(conv, B, name="bias"), name="relu").set_output(True).set_name("Y")
    return g, {"X": X, "W": W, "B": B, "Y": Y}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--picture", help="also draw the graph into this .svg or .dot file (no GPU needed)")
    args = ap.parse_args(argv)
    n, c, h, k = 8, 64, 56, 32
    g, t = declare(n, c, h, k)
    g.validate()
    if args.picture:
        print("picture:", g.save_picture(args.picture))

    torch = need_gpu_and_torch(__file__)
    import cudnn

    torch.manual_seed(0)
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).half().to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.float16)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    print(g.describe_plans())

    Y = t["Y"]
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({t["X"]: x, t["W"]: w, t["B"]: b, Y: y}, workspace)
    torch.cuda.synchronize()

    reference = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), padding=1) + b.float())
    return 0 if check("Y", y, reference, atol=2e-2, rtol=1e-2) else 1


if __name__ == "__main__":
    sys.exit(main())
