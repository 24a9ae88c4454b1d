"""The official 1.32 norm and MoE torch ops on the GPU against PyTorch float32 references.

Inputs are made in the test dtype (fp16, bf16); references run in float32 on those same values
(through torch's ops and autograd). Tolerances: outputs atol/rtol 2e-2; gradients atol/rtol
5e-2, atol scaled by the largest reference magnitude (dWeight and dBias sum over rows).
Ops: ``cudnn::rmsnorm`` / ``rmsnorm_bwd`` / ``layernorm`` / ``layernorm_bwd`` directly and
through autograd, the public ``cudnn.ops.norm.rms_norm`` / ``layer_norm`` (official signatures,
and the older rms_norm call form), torch.compile(fullgraph=True) of each, and
``cudnn::moe_grouped_matmul`` (mode "none") against a loop of per-expert matmuls.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudnn
from cudnn.ops import norm

DTYPES = [torch.float16, torch.bfloat16]
IDS = ["fp16", "bf16"]
DEV = "cuda"
ROWS, HIDDEN = 96, 768


def close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    mag = max(1.0, float(ref.abs().max()))
    assert not torch.isnan(got).any(), f"{name}: NaN"
    torch.testing.assert_close(got.float(), ref.float(), atol=tol * mag, rtol=tol, msg=lambda m: f"{name}: {m}")


def data(dtype: torch.dtype, param_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    p = param_dtype or dtype
    x = (2 * torch.randn(ROWS, HIDDEN, 1, 1, device=DEV) + 0.3).to(dtype)
    w = (1 + 0.3 * torch.randn(1, HIDDEN, 1, 1, device=DEV)).to(p)
    b = (0.3 * torch.randn(1, HIDDEN, 1, 1, device=DEV)).to(p)
    dy = torch.randn(ROWS, HIDDEN, 1, 1, device=DEV).to(dtype)
    return x, w, b, dy


def rms_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = F.rms_norm(x.float().reshape(ROWS, HIDDEN), (HIDDEN,), w.float().reshape(HIDDEN), eps)
    return (y if b is None else y + b.float().reshape(HIDDEN)).reshape(x.shape)


def ln_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x.float().reshape(ROWS, HIDDEN), (HIDDEN,), w.float().reshape(HIDDEN),
                        b.float().reshape(HIDDEN), eps).reshape(x.shape)


def grads(fn: Any, inputs: list[torch.Tensor], dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    leaves = [t.detach().float().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return (out, *torch.autograd.grad(out, leaves, dy.float()))


# -- the torch ops ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_rmsnorm_forward_and_backward(dtype: torch.dtype, bias: bool) -> None:
    x, w, b, dy = data(dtype)
    bb = b if bias else None
    y, inv = torch.ops.cudnn.rmsnorm(x, w, 1e-5, bb)
    close("Y", y, rms_ref(x, w, bb, 1e-5), 2e-2)
    assert inv.shape == (ROWS, 1, 1, 1) and inv.dtype == torch.float32
    ref_inv = torch.rsqrt(x.float().pow(2).mean(1, keepdim=True) + 1e-5)
    close("inv_var", inv, ref_inv, 2e-2)
    dx, dw, db = torch.ops.cudnn.rmsnorm_bwd(dy, x, w, inv, bias)
    ins = [x, w] + ([b] if bias else [])
    _, rdx, rdw, *rdb = grads(lambda *t: rms_ref(t[0], t[1], t[2] if bias else None, 1e-5), ins, dy)
    close("dX", dx, rdx, 5e-2)
    close("dScale", dw, rdw, 5e-2)
    assert dw.dtype == dtype and dw.shape == w.shape
    if bias:
        close("dBias", db, rdb[0], 5e-2)
    else:
        assert db.numel() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_layernorm_forward_and_backward(dtype: torch.dtype) -> None:
    x, w, b, dy = data(dtype, torch.float32)
    y, mean, inv = torch.ops.cudnn.layernorm(x, w, b, 1e-5)
    close("Y", y, ln_ref(x, w, b, 1e-5), 2e-2)
    xf = x.float()
    close("mean", mean, xf.mean(1, keepdim=True), 2e-2)
    close("inv_var", inv, torch.rsqrt(xf.var(1, unbiased=False, keepdim=True) + 1e-5), 2e-2)
    dx, dw, db = torch.ops.cudnn.layernorm_bwd(dy, x, w, mean, inv)
    _, rdx, rdw, rdb = grads(lambda *t: ln_ref(*t, 1e-5), [x, w, b], dy)
    close("dX", dx, rdx, 5e-2)
    close("dScale", dw, rdw, 5e-2)
    close("dBias", db, rdb, 5e-2)
    assert dw.dtype == db.dtype == torch.float32 and dw.shape == db.shape == (1, HIDDEN, 1, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_ops_autograd(dtype: torch.dtype) -> None:
    x, w, b, dy = data(dtype)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y, _inv = torch.ops.cudnn.rmsnorm(*leaves[:2], 1e-5, leaves[2])
    y.backward(dy)
    _, *ref = grads(lambda *t: rms_ref(*t, 1e-5), [x, w, b], dy)
    for name, got, r in zip(("dX", "dScale", "dBias"), (t.grad for t in leaves), ref):
        close(name, got, r, 5e-2)
    x, w, b, dy = data(dtype, torch.float32)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y, _mean, _inv = torch.ops.cudnn.layernorm(*leaves, 1e-5)
    y.backward(dy)
    _, *ref = grads(lambda *t: ln_ref(*t, 1e-5), [x, w, b], dy)
    for name, got, r in zip(("dX", "dScale", "dBias"), (t.grad for t in leaves), ref):
        close(name, got, r, 5e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_ops_under_torch_compile_fullgraph(dtype: torch.dtype) -> None:
    x, w, _b, dy = data(dtype)
    _, _, bf, _ = data(dtype, torch.float32)
    wf = w.float()

    def f(x_: torch.Tensor, w_: torch.Tensor, wf_: torch.Tensor, bf_: torch.Tensor) -> torch.Tensor:
        y, _inv = torch.ops.cudnn.rmsnorm(x_, w_, 1e-5)
        z, _mean, _inv2 = torch.ops.cudnn.layernorm(y, wf_, bf_, 1e-5)
        return z

    torch._dynamo.reset()
    leaves = [t.clone().requires_grad_() for t in (x, w, wf, bf)]
    out = torch.compile(f, fullgraph=True)(*leaves)
    out.backward(dy)

    def ref(x_: torch.Tensor, w_: torch.Tensor, wf_: torch.Tensor, bf_: torch.Tensor) -> torch.Tensor:
        return ln_ref(rms_ref(x_, w_, None, 1e-5).to(dtype).float(), wf_, bf_, 1e-5)

    rout, *rgrads = grads(ref, [x, w, wf, bf], dy)
    close("compiled Y", out, rout, 2e-2)
    for name, t, r in zip(("dX", "dScale(rms)", "dScale(ln)", "dBias(ln)"), leaves, rgrads):
        close(f"compiled {name}", t.grad, r, 5e-2)


# -- the public functions --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_public_rms_norm_and_layer_norm(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    x = (2 * torch.randn(4, 24, HIDDEN, device=DEV) + 0.3).to(dtype)
    w = (1 + 0.3 * torch.randn(HIDDEN, device=DEV)).to(dtype)
    b = (0.3 * torch.randn(HIDDEN, device=DEV)).to(dtype)
    dy = torch.randn_like(x)
    ref_rms = F.rms_norm(x.float(), (HIDDEN,), w.float(), 1e-5)
    close("rms_norm", norm.rms_norm(x, w), ref_rms, 2e-2)
    close("rms_norm + bias", norm.rms_norm(x, w, b, 1e-5), ref_rms + b.float(), 2e-2)
    close("rms_norm (older form)", norm.rms_norm(x, [HIDDEN], w, 1e-5), ref_rms, 2e-2)
    close("layer_norm", norm.layer_norm(x, (HIDDEN,), w, b, 1e-5),
          F.layer_norm(x.float(), (HIDDEN,), w.float(), b.float(), 1e-5), 2e-2)
    for fn, ref_fn in ((lambda *t: norm.rms_norm(*t, eps=1e-5), lambda *t: F.rms_norm(t[0], (HIDDEN,), t[1], 1e-5)),
                       (lambda *t: norm.layer_norm(t[0], HIDDEN, t[1], None),
                        lambda *t: F.layer_norm(t[0], (HIDDEN,), t[1], None, 1e-5))):
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        fn(xl, wl).backward(dy)
        _, rdx, rdw = grads(ref_fn, [x, w], dy)
        close("dX", xl.grad, rdx, 5e-2)
        close("dWeight", wl.grad, rdw, 5e-2)
    compiled = torch.compile(lambda t, w_, b_: norm.layer_norm(t, (HIDDEN,), w_, b_) + norm.rms_norm(t, w_),
                             fullgraph=True)
    close("compiled public", compiled(x, w, b),
          F.layer_norm(x.float(), (HIDDEN,), w.float(), b.float(), 1e-5) + ref_rms, 2e-2)


# -- cudnn::moe_grouped_matmul ---------------------------------------------------------------------

E, K, N = 4, 64, 96


@pytest.mark.skipif(cudnn.backend_version() < 91500, reason="MoE grouped matmul needs cuDNN >= 9.15")
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_moe_grouped_matmul_op_against_per_expert_matmuls(dtype: torch.dtype) -> None:
    from cudnn.gemm.ops import moe_grouped_matmul

    torch.manual_seed(2)
    counts = [5, 3, 11, 9]
    starts = [0, 5, 8, 19]
    rows = sum(counts)
    token = torch.randn(1, rows, K, device=DEV).to(dtype)
    w = (torch.randn(E, N, K, device=DEV) / K**0.5).to(dtype).transpose(1, 2)  # [E, K, N], column-major inner
    fto = torch.tensor(starts, dtype=torch.int32, device=DEV).reshape(E, 1, 1)
    ref = torch.empty(1, rows, N, device=DEV)
    for e in range(E):
        lo, hi = starts[e], starts[e] + counts[e]
        ref[0, lo:hi] = token[0, lo:hi].float() @ w[e].float()
    y = torch.ops.cudnn.moe_grouped_matmul(token, w, fto, None, None, "none", 1)
    assert y.shape == (1, rows, N) and y.dtype == dtype
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(moe_grouped_matmul(token, w, fto), y, atol=0, rtol=0)  # eager path, same graph
    torch._dynamo.reset()
    compiled = torch.compile(lambda t, w_, o: moe_grouped_matmul(t, w_, o), fullgraph=True)
    torch.testing.assert_close(compiled(token, w, fto).float(), ref, atol=2e-2, rtol=2e-2)
