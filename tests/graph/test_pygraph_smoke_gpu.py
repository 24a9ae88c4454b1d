"""pygraph end to end on the GPU with raw device pointers: build, execute, compare."""

from __future__ import annotations

import torch

import cudnn


def test_conv_bias_relu_with_raw_pointers() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=list(x.shape), stride=list(x.stride()), data_type=cudnn.data_type.HALF)
    W = g.tensor(name="W", dim=list(w.shape), stride=list(w.stride()), data_type=cudnn.data_type.HALF)
    B = g.tensor(name="B", dim=list(b.shape), stride=list(b.stride()), data_type=cudnn.data_type.HALF)
    conv = g.conv_fprop(X, W, padding=[1, 1])
    Y = g.relu(g.bias(conv, B))
    Y.set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty(Y.get_dim(), device="cuda", dtype=torch.float16).as_strided(Y.get_dim(), Y.get_stride())
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({X: x.data_ptr(), W: w.data_ptr(), B: b.data_ptr(), Y: y.data_ptr()}, ws.data_ptr())
    torch.cuda.synchronize()
    ref = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), padding=1) + b.float())
    torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=1e-2)


def test_matmul_and_scalar_constant() -> None:
    torch.manual_seed(1)
    a = torch.randn(2, 64, 32, device="cuda", dtype=torch.float16)
    bm = torch.randn(2, 32, 48, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    A = g.tensor(name="A", dim=list(a.shape), stride=list(a.stride()))
    Bt = g.tensor(name="B", dim=list(bm.shape), stride=list(bm.stride()))
    C = g.mul(g.matmul(A, Bt), 0.5)
    C.set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    c = torch.empty(C.get_dim(), device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({A: a.data_ptr(), Bt: bm.data_ptr(), C: c.data_ptr()}, ws.data_ptr())
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), 0.5 * (a.float() @ bm.float()), atol=5e-2, rtol=1e-2)
