"""Every pygraph op against PyTorch on the GPU, with torch tensors in the variant pack.

Tolerances: fp32 graphs compare at rtol/atol 1e-4..1e-3 (cuDNN may use tf32 for matmul and
conv: those compare at 1e-2 relative); fp16/bf16 at 1e-2..5e-2. Outputs are filled with NaN
before each run, so an output cuDNN did not write fails the comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from support.replay_check import check_replay

import cudnn
from cudnn._lib.cuda import DeviceBuffer

TORCH = {cudnn.data_type.HALF: torch.float16, cudnn.data_type.BFLOAT16: torch.bfloat16,
         cudnn.data_type.FLOAT: torch.float32}
HEURISTICS = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def run(g: cudnn.pygraph, feeds: dict[cudnn.tensor, torch.Tensor], outputs: list[cudnn.tensor]) -> list[torch.Tensor]:
    """Build, allocate NaN-filled outputs with the graph's dims/strides, execute, sync; then the
    same pack replayed must write the executed bits (`replay_check`)."""
    g.build(HEURISTICS)
    outs = []
    for t in outputs:
        dtype = TORCH.get(t.get_data_type(), torch.float32)
        buf = torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda", dtype=dtype).fill_(float("nan"))
        outs.append(buf)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    pack = {**feeds, **dict(zip(outputs, outs))}
    g.execute(pack, ws)
    torch.cuda.synchronize()
    differs = check_replay(g, pack, ws, outs)
    assert differs is None, differs
    return outs


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "output has NaN (unwritten or wrong)"
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


# -- convolutions ---------------------------------------------------------------------------

CONV_CASES = [
    # (io dtype, x shape, w shape, padding, stride, dilation, tolerance)
    (cudnn.data_type.HALF, (8, 64, 56, 56), (32, 64, 3, 3), [1, 1], [1, 1], [1, 1], 5e-3),
    (cudnn.data_type.BFLOAT16, (4, 32, 28, 28), (64, 32, 3, 3), [1, 1], [2, 2], [1, 1], 2e-2),
    (cudnn.data_type.FLOAT, (2, 16, 20, 20), (16, 16, 5, 5), [2, 2], [1, 1], [2, 2], 1e-2),
    (cudnn.data_type.HALF, (2, 32, 16, 16), (64, 8, 3, 3), [1, 1], [1, 1], [1, 1], 5e-3),  # 4 groups
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0].name}-{c[1]}-{c[2]}")
def test_conv_fprop(case: tuple) -> None:  # type: ignore[type-arg]
    dt, xs, ws, pad, stride, dil, tol = case
    torch.manual_seed(0)
    x = torch.randn(xs, device="cuda", dtype=TORCH[dt]).to(memory_format=torch.channels_last)
    w = torch.randn(ws, device="cuda", dtype=TORCH[dt]).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=dt, compute_data_type=cudnn.data_type.FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=pad, stride=stride, dilation=dil).set_output(True)
    (y,) = run(g, {X: x, W: w}, [Y])
    ref = F.conv2d(x.double(), w.double(), padding=pad, stride=stride, dilation=dil, groups=xs[1] // ws[1])
    assert rel_err(y, ref) < tol


def test_conv3d_fprop() -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 16, 8, 12, 12, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last_3d)
    w = torch.randn(32, 16, 3, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last_3d)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1, 1]).set_output(True)
    (y,) = run(g, {X: x, W: w}, [Y])
    assert rel_err(y, F.conv3d(x.double(), w.double(), padding=1)) < 5e-3


@pytest.mark.parametrize("dt", [cudnn.data_type.HALF, cudnn.data_type.FLOAT])
def test_conv_dgrad_and_wgrad_match_autograd(dt: cudnn.data_type) -> None:
    torch.manual_seed(2)
    n, c, k, h = 4, 32, 64, 14
    x = torch.randn(n, c, h, h, device="cuda", dtype=TORCH[dt]).to(memory_format=torch.channels_last)
    w = torch.randn(k, c, 3, 3, device="cuda", dtype=TORCH[dt]).to(memory_format=torch.channels_last)
    dy = torch.randn(n, k, h // 2, h // 2, device="cuda", dtype=TORCH[dt]).to(memory_format=torch.channels_last)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(xr, wr, padding=1, stride=2).backward(dy.double())

    g = cudnn.pygraph(io_data_type=dt, compute_data_type=cudnn.data_type.FLOAT)
    DY, W = g.tensor_like(dy), g.tensor_like(w)
    DX = g.conv_dgrad(DY, W, padding=[1, 1], stride=[2, 2]).set_dim(list(x.shape)).set_output(True)
    (dx,) = run(g, {DY: dy, W: w}, [DX])
    assert rel_err(dx, xr.grad) < 1e-2

    g = cudnn.pygraph(io_data_type=dt, compute_data_type=cudnn.data_type.FLOAT)
    X, DY = g.tensor_like(x), g.tensor_like(dy)
    DW = g.conv_wgrad(X, DY, padding=[1, 1], stride=[2, 2]).set_dim(list(w.shape)).set_output(True)
    (dw,) = run(g, {X: x, DY: dy}, [DW])
    assert rel_err(dw, wr.grad) < 1e-2


def test_fused_conv_bias_relu_resnet_shape() -> None:
    torch.manual_seed(3)
    x = torch.randn(16, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    (y,) = run(g, {X: x, W: w, B: b}, [Y])
    ref = torch.relu(F.conv2d(x.double(), w.double(), padding=1) + b.double())
    assert rel_err(y, ref) < 5e-3


# -- matmul -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dt,tol", [(cudnn.data_type.HALF, 5e-3), (cudnn.data_type.BFLOAT16, 2e-2),
                                    (cudnn.data_type.FLOAT, 1e-2)])
def test_matmul_with_batch_broadcast(dt: cudnn.data_type, tol: float) -> None:
    torch.manual_seed(4)
    a = torch.randn(1, 128, 64, device="cuda", dtype=TORCH[dt])
    b = torch.randn(3, 64, 96, device="cuda", dtype=TORCH[dt])
    g = cudnn.pygraph(io_data_type=dt, compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B).set_output(True)
    (c,) = run(g, {A: a, B: b}, [C])
    assert list(c.shape) == [3, 128, 96]
    assert rel_err(c, a.double() @ b.double()) < tol


def test_fused_matmul_bias_gelu() -> None:
    torch.manual_seed(5)
    a = torch.randn(4, 256, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    A, B, BIAS = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
    Y = g.gelu(g.add(g.matmul(A, B), BIAS)).set_output(True)
    (y,) = run(g, {A: a, B: b, BIAS: bias}, [Y])
    assert rel_err(y, F.gelu(a.double() @ b.double() + bias.double())) < 2e-2


# -- pointwise --------------------------------------------------------------------------------

def _pos(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.rand(shape, device="cuda") * 2 + 0.5


def _any(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, device="cuda")


UNARY: dict[str, tuple[Callable[[tuple[int, ...]], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "abs": (_any, torch.abs), "ceil": (_any, torch.ceil), "cos": (_any, torch.cos), "erf": (_any, torch.erf),
    "exp": (_any, torch.exp), "floor": (_any, torch.floor), "identity": (_any, lambda x: x),
    "log": (_pos, torch.log), "neg": (_any, torch.neg), "reciprocal": (_pos, torch.reciprocal),
    "rsqrt": (_pos, torch.rsqrt), "sin": (_any, torch.sin), "sqrt": (_pos, torch.sqrt),
    "tan": (lambda s: torch.rand(s, device="cuda") - 0.5, torch.tan),
    "tanh": (_any, torch.tanh), "sigmoid": (_any, torch.sigmoid), "elu": (_any, F.elu), "gelu": (_any, F.gelu),
    "gelu_approx_tanh": (_any, lambda x: F.gelu(x, approximate="tanh")), "softplus": (_any, F.softplus),
    "relu": (_any, F.relu), "swish": (_any, F.silu),
}
BINARY: dict[str, tuple[Callable[..., torch.Tensor], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "add": (_any, torch.add), "sub": (_any, torch.sub), "mul": (_any, torch.mul), "div": (_pos, torch.div),
    "add_square": (_any, lambda a, b: a + b * b), "max": (_any, torch.maximum), "min": (_any, torch.minimum),
    "mod": (_pos, torch.fmod), "pow": (_pos, torch.pow), "bias": (_any, torch.add), "scale": (_any, torch.mul),
}
COMPARE = {"cmp_eq": torch.eq, "cmp_neq": torch.ne, "cmp_gt": torch.gt, "cmp_ge": torch.ge,
           "cmp_lt": torch.lt, "cmp_le": torch.le}
BACKWARD = {
    "relu_backward": F.relu, "tanh_backward": torch.tanh, "sigmoid_backward": torch.sigmoid, "elu_backward": F.elu,
    "gelu_backward": F.gelu, "gelu_approx_tanh_backward": lambda x: F.gelu(x, approximate="tanh"),
    "softplus_backward": F.softplus, "swish_backward": F.silu,
}
SHAPE = (8, 256)


def _pointwise_graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_pointwise(op: str) -> None:
    make, ref = UNARY[op]
    x = make(SHAPE)
    g = _pointwise_graph()
    X = g.tensor_like(x)
    Y = getattr(g, op)(X).set_output(True)
    (y,) = run(g, {X: x}, [Y])
    torch.testing.assert_close(y, ref(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_pointwise(op: str) -> None:
    make, ref = BINARY[op]
    a, b = make(SHAPE), make((1, SHAPE[1]))  # b broadcasts over rows
    g = _pointwise_graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    Y = getattr(g, op)(A, B).set_output(True)
    (y,) = run(g, {A: a, B: b}, [Y])
    torch.testing.assert_close(y, ref(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_comparisons_write_zero_or_one(op: str) -> None:
    a = torch.randint(-2, 3, SHAPE, device="cuda").float()
    b = torch.randint(-2, 3, SHAPE, device="cuda").float()
    g = _pointwise_graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    Y = getattr(g, op)(A, B).set_data_type(cudnn.data_type.FLOAT).set_output(True)
    (y,) = run(g, {A: a, B: b}, [Y])
    torch.testing.assert_close(y, COMPARE[op](a, b).float())


@pytest.mark.parametrize("op", sorted(BACKWARD))
def test_activation_backward_matches_autograd(op: str) -> None:
    x = _any(SHAPE).requires_grad_()
    dy = _any(SHAPE)
    BACKWARD[op](x).backward(dy)
    g = _pointwise_graph()
    DY, X = g.tensor_like(dy), g.tensor_like(x.detach())
    DX = getattr(g, op)(DY, X).set_output(True)
    (dx,) = run(g, {DY: dy, X: x.detach()}, [DX])
    torch.testing.assert_close(dx, x.grad, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("variant", ["clip", "leaky", "swish_beta"])
def test_relu_clips_leaky_relu_and_swish_beta(variant: str) -> None:
    x = _any(SHAPE) * 4
    g = _pointwise_graph()
    X = g.tensor_like(x)
    if variant == "clip":
        Y = g.relu(X, lower_clip=-1.0, upper_clip=2.0, negative_slope=0.25)
        # cuDNN's formula (see pygraph.relu's note): the sloped line wins far above upper_clip
        ref = torch.maximum(torch.clamp(x, max=2.0), -1.0 + 0.25 * (x + 1.0))
    elif variant == "leaky":
        Y = g.leaky_relu(X, 0.1)
        ref = F.leaky_relu(x, 0.1)
    else:
        Y = g.swish(X, 2.0, cudnn.data_type.FLOAT)
        ref = x * torch.sigmoid(2.0 * x)
    (y,) = run(g, {X: x}, [Y.set_output(True)])
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)


def test_two_outputs_from_one_input() -> None:
    x = _any(SHAPE)
    g = _pointwise_graph()
    X = g.tensor_like(x)
    A = g.sigmoid(X).set_output(True)
    B = g.exp(X).set_output(True)
    a, b = run(g, {X: x}, [A, B])
    torch.testing.assert_close(a, torch.sigmoid(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b, torch.exp(x), rtol=1e-4, atol=1e-4)


def test_binary_select_and_gen_index() -> None:
    a, b = _any(SHAPE), _any(SHAPE)
    mask = (torch.rand(SHAPE, device="cuda") > 0.5).float()
    g = _pointwise_graph()
    A, B, M = g.tensor_like(a), g.tensor_like(b), g.tensor_like(mask)
    S = g.binary_select(A, B, M).set_output(True)
    idx = g.gen_index(A, axis=1).set_data_type(cudnn.data_type.INT32).set_output(True)
    g.build(HEURISTICS)
    s = torch.full(SHAPE, float("nan"), device="cuda")
    i = torch.full(SHAPE, -1, device="cuda", dtype=torch.int32)
    g.execute({A: a, B: b, M: mask, S: s, idx: i}, torch.empty(g.get_workspace_size(), device="cuda",
                                                             dtype=torch.uint8))
    torch.cuda.synchronize()
    torch.testing.assert_close(s, torch.where(mask != 0, a, b))
    torch.testing.assert_close(i, torch.arange(SHAPE[1], device="cuda", dtype=torch.int32).expand(SHAPE))


def test_scalar_constants_and_pass_by_value_tensors() -> None:
    x = _any(SHAPE)
    g = _pointwise_graph()
    X = g.tensor_like(x)
    s = g.tensor(name="s", dim=[1, 1], stride=[1, 1], data_type=cudnn.data_type.FLOAT, is_pass_by_value=True)
    Y = g.add(g.mul(X, 0.5), s).set_output(True)
    g.build(HEURISTICS)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    for value in (1.5, -3.0):
        y = torch.full(SHAPE, float("nan"), device="cuda")
        g.execute({X: x, s: value, Y: y}, ws)
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 0.5 * x + value)
    y = torch.full(SHAPE, float("nan"), device="cuda")
    g.execute({X: x, s: torch.tensor([[2.0]]), Y: y}, ws)  # a host tensor works too
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 0.5 * x + 2.0)


# -- reductions and structural ops ------------------------------------------------------------

REDUCE = {
    "ADD": lambda x: x.sum(1, keepdim=True), "MUL": lambda x: x.prod(1, keepdim=True),
    "MIN": lambda x: x.amin(1, keepdim=True), "MAX": lambda x: x.amax(1, keepdim=True),
    "AMAX": lambda x: x.abs().amax(1, keepdim=True), "AVG": lambda x: x.mean(1, keepdim=True),
    "NORM1": lambda x: x.abs().sum(1, keepdim=True), "NORM2": lambda x: x.norm(dim=1, keepdim=True),
    "MUL_NO_ZEROS": lambda x: torch.where(x == 0, torch.ones_like(x), x).prod(1, keepdim=True),
}


@pytest.mark.parametrize("mode", sorted(REDUCE))
def test_reduction_modes(mode: str) -> None:
    x = torch.rand(64, 16, device="cuda") + 0.5
    x[0, 0] = 0.0
    g = _pointwise_graph()
    X = g.tensor_like(x)
    Y = g.reduction(X, cudnn.reduction_mode[mode]).set_dim([64, 1]).set_output(True)
    try:
        (y,) = run(g, {X: x}, [Y])
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"cuDNN {cudnn.backend_version_string()} has no engine for a standalone {mode} reduction: {exc}")
    torch.testing.assert_close(y, REDUCE[mode](x), rtol=1e-4, atol=1e-4)


def test_matmul_then_row_sum_reduction_fusion() -> None:
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B).set_output(True)
    R = g.reduction(C, cudnn.reduction_mode.ADD).set_dim([256, 1]).set_data_type(cudnn.data_type.FLOAT)
    R.set_output(True)
    try:
        c, r = run(g, {A: a, B: b}, [C, R])
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"no engine fuses matmul + row reduction here: {exc}")
    ref = a.double() @ b.double()
    assert rel_err(c, ref) < 5e-3 and rel_err(r, ref.sum(1, keepdim=True)) < 5e-3


def test_genstats_after_conv() -> None:
    torch.manual_seed(6)
    x = torch.randn(8, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(32, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
    SUM, SQ = g.genstats(Y)
    SUM.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    SQ.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    try:
        y, s, sq = run(g, {X: x, W: w}, [Y, SUM, SQ])
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"no conv + genstats engine here: {exc}")
    yd = y.double()
    assert rel_err(s.reshape(-1), yd.sum((0, 2, 3))) < 1e-2
    assert rel_err(sq.reshape(-1), (yd * yd).sum((0, 2, 3))) < 1e-2


def test_transpose_and_slice_need_cudnn_9_22() -> None:
    x = _any((4, 8))
    for make in (lambda g, X: g.transpose(X, [1, 0]), lambda g, X: g.slice(X, [slice(0, 2)])):
        g = _pointwise_graph()
        X = g.tensor_like(x)
        Y = make(g, X).set_output(True)
        if cudnn.backend_version() < 92200:
            with pytest.raises(cudnn.FeatureUnavailableError, match="needs cuDNN >= 9.22.0"):
                g.build(HEURISTICS)
        else:
            (y,) = run(g, {X: x}, [Y])
            ref = x.t() if y.shape[0] == 8 else x[0:2]
            torch.testing.assert_close(y, ref)


# -- bad input at execute ---------------------------------------------------------------------

def test_execute_refuses_bad_buffers_before_any_kernel_runs() -> None:
    x = _any(SHAPE)
    g = _pointwise_graph()
    X = g.tensor_like(x, "X")
    Y = g.exp(X, name="e").set_output(True)
    g.build(HEURISTICS)
    y = torch.empty(SHAPE, device="cuda")
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    small = DeviceBuffer(1024)  # a raw cudaMalloc allocation: its size is known to CUDA
    cases = [
        ({X: x.cpu(), Y: y}, "exp 'e': IN_0 tensor 'X'.* must be in GPU memory"),
        ({X: x, Y: torch.empty(4, 256, device="cuda")}, r"OUT_0 tensor 'e::OUT_0'.* needs 8192 bytes"),
        ({X: x.half(), Y: y}, "needs 8192 bytes.*expects FLOAT data, got torch HALF"),
        ({X: x}, "the variant pack lacks .*e::OUT_0"),
        ({X: x, Y: torch.empty(8 * 256 + 4, device="cuda")[1:1 + 8 * 256].view(SHAPE)}, "not 16-byte aligned"),
        ({X: x, Y: small.ptr}, "needs 8192 bytes"),
    ]
    for pack, message in cases:
        with pytest.raises(cudnn.ExecutionInputError, match=message):
            g.execute(pack, ws)
    if g.get_workspace_size():
        with pytest.raises(cudnn.ExecutionInputError, match="workspace"):
            g.execute({X: x, Y: y}, torch.empty(1, device="cuda", dtype=torch.uint8))
    with pytest.warns(cudnn.ExecutionInputWarning, match=r"expects dims \[8, 256\]"):
        g.execute({X: x, Y: y[:4]}, ws)  # a view whose allocation holds the whole output: it runs
    cudnn.set_execute_checks("strict")
    try:
        for pack, message in [({X: x, Y: y[:4]}, r"OUT_0 tensor 'e::OUT_0'.* expects dims \[8, 256\]"),
                              ({X: x, Y: y, 99: y}, "uid 99 is not a uid of this graph")]:
            with pytest.raises(cudnn.ExecutionInputError, match=message):
                g.execute(pack, ws)
    finally:
        cudnn.set_execute_checks("warn")


def _sqrt_abs_built(x: torch.Tensor) -> tuple[cudnn.pygraph, Any, Any, torch.Tensor, torch.Tensor]:
    """sqrt(abs(X)) built for ``x``: the graph, X, Y, an output buffer and a workspace."""
    g = _pointwise_graph()
    X = g.tensor_like(x)
    Y = g.sqrt(g.abs(X)).set_output(True)
    g.build(HEURISTICS)
    y = torch.empty(SHAPE, device="cuda")
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    return g, X, Y, y, ws


def test_repeated_execute_reuses_the_variant_pack() -> None:
    x = _any(SHAPE)
    g, X, Y, y, ws = _sqrt_abs_built(x)
    pack = {X: x, Y: y}
    g.execute(pack, ws)
    runner = g.runner()
    assert len(runner.packs) == 1
    for _ in range(10):
        g.execute(pack, ws)
    assert len(runner.packs) == 1  # one backend pack per binding
    y2 = torch.empty(SHAPE, device="cuda")
    g.execute({X: x, Y: y2}, ws)
    del y2
    torch.cuda.synchronize()
    g.execute(pack, ws)
    assert len(runner.packs) == 2  # y2's binding was packed once; y's is still there
    torch.testing.assert_close(y, torch.sqrt(torch.abs(x)))
    assert math.isfinite(float(y.sum()))


def test_a_tensor_re_pointed_in_place_is_read_again() -> None:
    """The same tensor object given new memory (``set_``) between executes: the new data is read,
    and a new shape is refused; never the old, possibly freed, address."""
    x = _any(SHAPE)
    g, X, Y, y, ws = _sqrt_abs_built(x)
    pack = {X: x, Y: y}
    g.execute(pack, ws)
    other = _any(SHAPE) + 5
    x.set_(other.untyped_storage(), 0, other.shape, other.stride())
    g.execute(pack, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.sqrt(torch.abs(other)))
    y.set_(torch.empty(SHAPE, device="cuda"))  # the output moves too: written at its new address
    g.execute(pack, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.sqrt(torch.abs(other)))
    x.set_(_any((2, 3)))
    with pytest.raises(cudnn.ExecutionInputError, match="dims"):
        g.execute(pack, ws)
