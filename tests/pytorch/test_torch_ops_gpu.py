"""cudnn.ops on the GPU against the torch ops they replace, forward and backward.

Inputs are made in the test dtype; references run in float64 on those same values (through
the torch op and autograd), so tolerances only cover cuDNN's arithmetic and output rounding:
  conv2d_bias_act Y   fp16 atol 2e-2 rtol 2e-2 | bf16 atol 6e-2 rtol 4e-2
                  dX/dW/dB: the same relative, atol scaled by the largest reference magnitude
  layer/RMS norm  Y, dX as above; dWeight/dBias (sums over rows) atol 3e-2 x magnitude
  batch norm      as layer norm; running statistics atol/rtol 1e-3
  attention       O fp16 2e-2 | bf16 6e-2; dQ/dK/dV twice that, scaled by magnitude (dropout:
                  against the same math with the mask cuDNN drew, read off O for V = I)
Also: torch.compile(fullgraph=True) of each op (forward and backward), CUDA-graph capture and
replay, autocast, channels-last and contiguous inputs, the graph cache's reuse, the eager
path (no dispatcher) against the registered ops, the eager backward's graphs kept on the
forward's (repeated steps, gradients of other layouts, saved-tensor hooks that move or
re-lay out what was saved), and two streams at once.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import cudnn
from cudnn import ops

DTYPES = [torch.float16, torch.bfloat16]
IDS = ["fp16", "bf16"]
TOL = {torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 4e-2)}
DEV = "cuda"


def close(name: str, got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    atol, rtol = TOL[dtype]
    mag = max(1.0, float(ref.abs().max()))
    assert not torch.isnan(got).any(), f"{name}: NaN"
    torch.testing.assert_close(got.double(), ref.double(), atol=atol * scale * mag, rtol=rtol * scale,
                               msg=lambda m: f"{name}: {m}")


def leaves(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_() for t in ts]


def ref_grads(fn, inputs: list[torch.Tensor], dy: torch.Tensor) -> tuple:  # type: ignore[no-untyped-def]
    d = [t.detach().double().requires_grad_() for t in inputs]
    out = fn(*d)
    return (out, *torch.autograd.grad(out, d, dy.double()))


# -- conv2d + bias + act ---------------------------------------------------------------------------

ACT = {"none": lambda z: z, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("act", sorted(ACT))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_conv2d_bias_act(dtype: torch.dtype, act: str, layout: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 32, 28, 28, device=DEV).to(dtype)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(64, 32, 3, 3, device=DEV) / 17).to(dtype)
    b = torch.randn(64, device=DEV).to(dtype)
    xs, ws, bs = leaves(x, w, b)
    y = ops.conv2d_bias_act(xs, ws, bs, 1, 1, 1, 1, act)
    assert y.is_contiguous(memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
    dy = torch.randn_like(y)
    y.backward(dy)
    fn = lambda x_, w_, b_: ACT[act](F.conv2d(x_, w_, b_, 1, 1))
    ref, dx, dw, db = ref_grads(fn, [x, w, b], dy)
    close("Y", y, ref, dtype)
    close("dX", xs.grad, dx, dtype, 2)
    close("dW", ws.grad, dw, dtype, 2)
    close("dBias", bs.grad, db, dtype, 2)


def test_conv2d_bias_act_strided_grouped_no_bias_fp32() -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 16, 15, 17, device=DEV).contiguous(memory_format=torch.channels_last)
    w = torch.randn(32, 8, 3, 3, device=DEV) / 8
    xs, ws = leaves(x, w)
    y = ops.conv2d_bias_act(xs, ws, None, stride=2, padding=1, dilation=1, groups=2, act="relu")
    dy = torch.randn_like(y)
    y.backward(dy)
    ref, dx, dw = ref_grads(lambda x_, w_: F.relu(F.conv2d(x_, w_, None, 2, 1, 1, 2)), [x, w], dy)
    for name, got, want in (("Y", y, ref), ("dX", xs.grad, dx), ("dW", ws.grad, dw)):  # fp32 may use TF32
        torch.testing.assert_close(got.double(), want, atol=2e-2 * max(1.0, float(want.abs().max())), rtol=1e-2,
                                   msg=lambda m, name=name: f"{name}: {m}")


# -- norms -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_layer_norm(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (2 * torch.randn(4, 128, 768, device=DEV) + 0.3).to(dtype)
    w = (1 + 0.3 * torch.randn(768, device=DEV)).to(dtype)
    b = (0.3 * torch.randn(768, device=DEV)).to(dtype)
    xs, ws, bs = leaves(x, w, b)
    y = ops.layer_norm(xs, [768], ws, bs, 1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref, dx, dw, db = ref_grads(lambda x_, w_, b_: F.layer_norm(x_, (768,), w_, b_, 1e-5), [x, w, b], dy)
    close("Y", y, ref, dtype)
    close("dX", xs.grad, dx, dtype, 2)
    close("dWeight", ws.grad, dw, dtype, 2)
    close("dBias", bs.grad, db, dtype, 2)
    with torch.no_grad():  # inference phase: no statistics
        close("Y (inference)", ops.layer_norm(x, [768], w, b, 1e-5), ref, dtype)


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_norm_strided_input_gradient_and_2d_shape(rms: bool) -> None:
    """A transposed input, a transposed and a broadcast gradient, and a normalized shape of two
    dims (the weight 2-D): the graph reads row-major copies, the weight's gradient has its shape."""
    torch.manual_seed(0)
    dtype = torch.bfloat16
    x = (2 * torch.randn(16, 4, 8, 32, device=DEV) + 0.3).to(dtype).transpose(0, 1)  # [4, 16, 8, 32], strided
    w = (1 + 0.3 * torch.randn(8, 32, device=DEV)).to(dtype)
    b = (0.3 * torch.randn(8, 32, device=DEV)).to(dtype)
    assert not x.is_contiguous()
    params = [w] if rms else [w, b]

    def ours(x_, *p):  # type: ignore[no-untyped-def]
        return ops.rms_norm(x_, [8, 32], p[0], 1e-6) if rms else ops.layer_norm(x_, [8, 32], p[0], p[1], 1e-5)

    def theirs(x_, *p):  # type: ignore[no-untyped-def]
        return F.rms_norm(x_, (8, 32), p[0], 1e-6) if rms else F.layer_norm(x_, (8, 32), p[0], p[1], 1e-5)

    for dy in (torch.randn(16, 4, 8, 32, device=DEV).to(dtype).transpose(0, 1),
               torch.ones((), device=DEV, dtype=dtype).expand(4, 16, 8, 32)):
        xs, *ps = leaves(x, *params)
        y = ours(xs, *ps)
        y.backward(dy)
        ref, dx, *dps = ref_grads(theirs, [x, *params], dy)
        close("Y", y, ref, dtype)
        close("dX", xs.grad, dx, dtype, 2)
        for name, p, got, want in zip(("dWeight", "dBias"), params, ps, dps):
            assert got.grad is not None and got.grad.shape == p.shape, name
            close(name, got.grad, want, dtype, 2)
    if not rms:  # the registered op's backward (what torch.compile runs) gives the shapes back too
        xs, *ps = leaves(x, *params)
        y = torch.compile(ours, fullgraph=True)(xs, *ps)
        y.backward(dy)
        for name, p, got, want in zip(("dWeight", "dBias"), params, ps, dps):
            assert got.grad is not None and got.grad.shape == p.shape, name
            close(name + " (compiled)", got.grad, want, dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_rms_norm(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (2 * torch.randn(8, 256, 1024, device=DEV)).to(dtype)
    w = (1 + 0.3 * torch.randn(1024, device=DEV)).to(dtype)
    xs, ws = leaves(x, w)
    y = ops.rms_norm(xs, [1024], ws, 1e-6)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref, dx, dw = ref_grads(lambda x_, w_: F.rms_norm(x_, (1024,), w_, 1e-6), [x, w], dy)
    close("Y", y, ref, dtype)
    close("dX", xs.grad, dx, dtype, 2)
    close("dWeight", ws.grad, dw, dtype, 2)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_batch_norm(dtype: torch.dtype, layout: str) -> None:
    torch.manual_seed(0)
    x = (2 * torch.randn(8, 32, 16, 16, device=DEV) + 0.3).to(dtype)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = 1 + 0.3 * torch.randn(32, device=DEV), 0.3 * torch.randn(32, device=DEV)
    rm, rv = 0.1 * torch.randn(32, device=DEV), 1 + 0.1 * torch.rand(32, device=DEV)
    rm_ref, rv_ref = rm.double().clone(), rv.double().clone()
    xs, ws, bs = leaves(x, w, b)
    y = ops.batch_norm(xs, rm, rv, ws, bs, training=True, momentum=0.1, eps=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref, dx, dw, db = ref_grads(lambda x_, w_, b_: F.batch_norm(x_, rm_ref, rv_ref, w_, b_, True, 0.1, 1e-5),
                                [x, w, b], dy)
    close("Y", y, ref, dtype)
    close("dX", xs.grad, dx, dtype, 2)
    close("dWeight", ws.grad, dw, dtype, 4)
    close("dBias", bs.grad, db, dtype, 4)
    torch.testing.assert_close(rm.double(), rm_ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(rv.double(), rv_ref, atol=1e-3, rtol=1e-3)
    y_eval = ops.batch_norm(x, rm, rv, w, b, training=False, eps=1e-5)
    close("Y (eval)", y_eval, F.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double(), False,
                                           eps=1e-5), dtype)


EVAL_TOL = {torch.float16: 2e-2, torch.bfloat16: 6e-2, torch.float32: 1e-4}


@pytest.mark.parametrize("params", ["f32", "input dtype", "none"])
@pytest.mark.parametrize("shape", [(8, 32, 16, 16), (4, 64, 1, 1), (3, 24, 7, 5)], ids=["c32", "1x1", "c24"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float32], ids=[*IDS, "fp32"])
def test_batch_norm_eval(dtype: torch.dtype, layout: str, shape: tuple[int, ...], params: str) -> None:
    """Eval mode against torch in float64 on the same values: float32 parameters, parameters in
    the input's dtype (a model after .half()), or no weight and bias; the output keeps the
    input's layout; with a gradient wanted, dX / dWeight / dBias as torch's."""
    torch.manual_seed(0)
    c = shape[1]
    x = (2 * torch.randn(shape, device=DEV) + 0.3).to(dtype)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    pdt = torch.float32 if params == "f32" else dtype
    rm, rv = (0.1 * torch.randn(c, device=DEV)).to(pdt), (0.5 + torch.rand(c, device=DEV)).to(pdt)
    w, b = (None, None) if params == "none" else ((1 + 0.3 * torch.randn(c, device=DEV)).to(pdt),
                                                  (0.3 * torch.randn(c, device=DEV)).to(pdt))
    d = [None if t is None else t.double() for t in (x, rm, rv, w, b)]
    ref = F.batch_norm(d[0], d[1], d[2], d[3], d[4], False, 0.1, 1e-3)
    tol = EVAL_TOL[dtype]
    with torch.no_grad():
        y = ops.batch_norm(x, rm, rv, w, b, training=False, eps=1e-3)
    assert y.dtype == dtype and y.shape == x.shape and y.stride() == x.stride()
    torch.testing.assert_close(y.double(), ref, atol=tol * max(1.0, float(ref.abs().max())), rtol=tol)
    if params == "none":
        return
    xs, ws, bs = leaves(x, w, b)
    y = ops.batch_norm(xs, rm, rv, ws, bs, training=False, eps=1e-3)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref, dx, dw, db = ref_grads(lambda x_, w_, b_: F.batch_norm(x_, d[1], d[2], w_, b_, False, 0.1, 1e-3),
                                [x, w, b], dy)
    frozen = x.detach().clone().requires_grad_()  # weight and bias wanting no gradient (a frozen norm)
    ops.batch_norm(frozen, rm, rv, w, b, training=False, eps=1e-3).backward(dy)
    for name, got, want in (("Y", y, ref), ("dX", xs.grad, dx), ("dWeight", ws.grad, dw), ("dBias", bs.grad, db),
                            ("dX, frozen", frozen.grad, dx)):
        scale = 4 if name in ("dWeight", "dBias") else 1
        torch.testing.assert_close(got.double(), want, atol=scale * tol * max(1.0, float(want.abs().max())),
                                   rtol=scale * tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_batch_norm_three_channels_matches_torch_or_is_refused_by_name(training: bool) -> None:
    """Three channels (a norm over RGB input): cuDNN 9.19 on an H200 has no engine for it. The
    call gives torch's result or an OpError naming the op, the argument and the channel count,
    never a raw status or a wrong result."""
    x = torch.randn(2, 3, 5, 7, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    rm, rv = torch.zeros(3, device=DEV), torch.ones(3, device=DEV)
    w, b = torch.randn(3, device=DEV), torch.randn(3, device=DEV)
    try:
        with torch.no_grad():
            got = ops.batch_norm(x, rm, rv, w, b, training=training)
    except ops.OpError as exc:
        assert "cudnn.ops.batch_norm: input:" in str(exc) and "3 channels" in str(exc)
        return
    want = F.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double(), training)
    torch.testing.assert_close(got.double(), want, atol=2e-2, rtol=2e-2)


def test_a_graph_cudnn_refused_is_not_built_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph cache remembers a key cuDNN had no engine for: later calls raise the same
    refusal without building (a fallback to torch would otherwise rebuild on every call)."""
    from cudnn.ops import _runtime as rt

    builds: list[int] = []
    real = rt.pygraph.build

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        builds.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(rt.pygraph, "build", counted)
    x = torch.randn(2, 3, 5, 9, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(3, device=DEV), torch.randn(3, device=DEV)
    messages = []
    for _ in range(3):
        try:
            ops.batch_norm(x, None, None, w, b, True, eps=1.2345e-5)  # an eps no other test uses: a new key
        except ops.OpError as exc:
            messages.append(str(exc))
            continue
        pytest.skip("this cuDNN has a batch-norm engine for 3 channels")
    assert len(builds) == 1 and len(set(messages)) == 1 and "3 channels" in messages[0]


def test_batch_norm_eval_propagates_nan_and_inf_and_reads_statistics_each_call() -> None:
    """A NaN or infinite input element gives what torch gives there, the rest is unchanged; the
    running statistics are read at every call (changed in place, or through .data, between
    calls), never cached."""
    torch.manual_seed(0)
    x = torch.randn(2, 16, 4, 4, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    x[0, 0, 0, 0], x[0, 1, 0, 0], x[1, 2, 3, 3] = float("nan"), float("inf"), -float("inf")
    rm, rv = 0.1 * torch.randn(16, device=DEV), 0.5 + torch.rand(16, device=DEV)
    w, b = torch.randn(16, device=DEV), torch.randn(16, device=DEV)
    for step in range(3):
        with torch.no_grad():
            got = ops.batch_norm(x, rm, rv, w, b, training=False)
            want = F.batch_norm(x.float(), rm, rv, w, b, False).half()
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2, equal_nan=True,
                                   msg=lambda m, step=step: f"call {step}: {m}")
        assert torch.isnan(got[0, 0, 0, 0]) and torch.isinf(got[0, 1, 0, 0]) and torch.isinf(got[1, 2, 3, 3])
        if step == 0:
            rm.mul_(-3).add_(0.5)
        else:
            rv.data.mul_(4)


# -- attention -------------------------------------------------------------------------------------

def _qkv(dtype: torch.dtype, hq: int = 8, hk: int = 8, sq: int = 256, skv: int = 256, d: int = 64) -> tuple:
    g = torch.Generator(device=DEV).manual_seed(0)
    return (torch.randn(2, hq, sq, d, device=DEV, generator=g).to(dtype),
            torch.randn(2, hk, skv, d, device=DEV, generator=g).to(dtype),
            torch.randn(2, hk, skv, d, device=DEV, generator=g).to(dtype))


CASES = {"plain": {}, "causal": {"is_causal": True}, "scale": {"scale": 0.3}, "gqa": {"hk": 2, "enable_gqa": True},
         "float_mask": {"mask": "float"}, "bool_mask": {"mask": "bool"}, "cross": {"skv": 384}}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_scaled_dot_product_attention(dtype: torch.dtype, case: str) -> None:
    opts = dict(CASES[case])
    mask_kind = opts.pop("mask", None)
    shape = {k: opts.pop(k) for k in ("hk", "skv") if k in opts}
    q, k, v = _qkv(dtype, **shape)
    mask = None
    if mask_kind == "float":
        mask = torch.randn(1, 1, q.shape[2], k.shape[2], device=DEV).to(dtype)
    elif mask_kind == "bool":
        mask = torch.rand(q.shape[2], k.shape[2], device=DEV) > 0.3
        mask[:, 0] = True  # every row keeps a key
    qs, ks, vs = leaves(q, k, v)
    o = ops.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, **opts)
    do = torch.randn_like(o)
    o.backward(do)
    fn = lambda q_, k_, v_: F.scaled_dot_product_attention(
        q_, k_, v_, attn_mask=None if mask is None else (mask if mask.dtype == torch.bool else mask.double()), **opts)
    ref, dq, dk, dv = ref_grads(fn, [q, k, v], do)
    close("O", o, ref, dtype)
    close("dQ", qs.grad, dq, dtype, 2)
    close("dK", ks.grad, dk, dtype, 2)
    close("dV", vs.grad, dv, dtype, 2)


@pytest.mark.parametrize("mask_shape", [(1, 4, 128, 128), (2, 1, 128, 128), (128, 128), (2, 1, 1, 128)],
                         ids=["1HSS", "B1SS", "SS", "B11S"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_attention_mask_gradient(dtype: torch.dtype, mask_shape: tuple[int, ...]) -> None:
    """A float attn_mask that requires grad (a learned bias) gets its gradient, summed over what it
    was broadcast along, with those of Q, K, V; against float64 autograd of torch's math. Where
    cuDNN 9.19 has no engine for a reduction, the call says so naming the mask (skipped)."""
    q, k, v = _qkv(dtype, hq=4, hk=4, sq=128, skv=128)
    torch.manual_seed(2)
    mask = torch.randn(mask_shape, device=DEV).to(dtype)
    qs, ks, vs, ms = leaves(q, k, v, mask)
    try:
        o = ops.scaled_dot_product_attention(qs, ks, vs, attn_mask=ms)
        do = torch.randn_like(o)
        o.backward(do)
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"cuDNN has no engine for dBias of a {mask_shape} mask: {str(exc).splitlines()[0]}")
    ref, dq, dk, dv, dm = ref_grads(lambda q_, k_, v_, m_: F.scaled_dot_product_attention(q_, k_, v_, attn_mask=m_),
                                    [q, k, v, mask], do)
    close("O", o, ref, dtype)
    close("dQ", qs.grad, dq, dtype, 2)
    close("dV", vs.grad, dv, dtype, 2)
    assert ms.grad is not None and ms.grad.shape == mask.shape
    close("dMask", ms.grad, dm, dtype, 2)


@pytest.mark.parametrize("shape", [(3, 128, 64), (2, 3, 4, 128, 64)], ids=["3d", "5d"])
def test_scaled_dot_product_attention_of_three_and_five_dimensions(shape: tuple[int, ...]) -> None:
    """[B, S, D] and [A, B, H, S, D] inputs as torch computes them: causal, and with a float
    mask broadcast over the batch dimensions; output and gradients (fp16 tolerances)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device=DEV, dtype=torch.float16) for _ in range(3))
    mask = torch.randn(*shape[:-3][-1:], 1, shape[-2], shape[-2], device=DEV, dtype=torch.float16) \
        if len(shape) > 3 else torch.randn(shape[0], shape[1], shape[1], device=DEV, dtype=torch.float16)
    for opts in ({"is_causal": True}, {"attn_mask": mask}):
        qs, ks, vs = leaves(q, k, v)
        o = ops.scaled_dot_product_attention(qs, ks, vs, **opts)
        assert o.shape == shape
        do = torch.randn_like(o)
        o.backward(do)
        ref_opts = {n: (t.double() if isinstance(t, torch.Tensor) else t) for n, t in opts.items()}
        ref, dq, dk, dv = ref_grads(lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, **ref_opts),
                                    [q, k, v], do)
        close("O", o, ref, torch.float16)
        for name, got, want in (("dQ", qs.grad, dq), ("dK", ks.grad, dk), ("dV", vs.grad, dv)):
            close(name, got, want, torch.float16, 2)


def test_experimental_name_is_the_op() -> None:
    assert cudnn.experimental.scaled_dot_product_attention is ops.scaled_dot_product_attention


# -- attention dropout -----------------------------------------------------------------------------
# With V the identity (S_kv = D), O is the dropped, rescaled probabilities themselves: O = P * keep
# / (1 - p). So one call shows cuDNN's mask (O != 0 where P > 0), and the reference, in float64
# through torch's autograd, is (P * keep / (1 - p)) @ V with that mask: output and all three
# gradients, which the backward can only match by drawing the forward's mask again.

DROP = 0.25


def _eye_qkv(dtype: torch.dtype, hk: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, _ = _qkv(dtype, hq=4, hk=hk, sq=128, skv=64, d=64)
    return q, k, torch.eye(64, device=DEV, dtype=dtype).expand(2, hk, 64, 64).contiguous()


def _check_dropout(o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype,
                   grads: tuple | None = None, do: torch.Tensor | None = None, **opts: object) -> torch.Tensor:
    """Check O (from V = I) against the probabilities and, given ``grads`` for ``do``, the
    gradients; returns the mask cuDNN drew. The kept share is 1 - p within 0.02 (65536 draws:
    0.02 is 13 standard deviations)."""
    eye = torch.eye(64, device=DEV, dtype=torch.float64)
    gqa = q.shape[1] // k.shape[1]
    with torch.no_grad():
        prob = F.scaled_dot_product_attention(q.double(), k.double(), eye.expand(*k.shape[:2], 64, 64),
                                              enable_gqa=gqa > 1, **opts)
    live, keep = prob > 0, o != 0
    assert not (keep & ~live).any(), "O is nonzero where the attention probability is 0"
    kept = float(keep[live].float().mean())
    assert abs(kept - (1 - DROP)) < 0.02, f"kept {kept:.4f} of the live probabilities, expected {1 - DROP}"

    def fn(q_: torch.Tensor, k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        p_ = F.scaled_dot_product_attention(q_, k_, eye.expand(*k_.shape[:2], 64, 64), enable_gqa=gqa > 1, **opts)
        return (p_ * keep / (1 - DROP)) @ v_.repeat_interleave(gqa, 1)

    if grads is None:
        with torch.no_grad():
            close("O", o, fn(q.double(), k.double(), v.double()), dtype)
        return keep
    ref, dq, dk, dv = ref_grads(fn, [q, k, v], do)  # type: ignore[arg-type]
    close("O", o, ref, dtype)
    for name, got, want in zip(("dQ", "dK", "dV"), grads, (dq, dk, dv)):
        close(name, got, want, dtype, 2)
    return keep


DROP_CASES = {"plain": {}, "causal": {"is_causal": True}, "bool_mask": {"mask": True}, "gqa": {"hk": 2}}


@pytest.mark.parametrize("path", ["eager", "compiled"])
@pytest.mark.parametrize("case", sorted(DROP_CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_attention_dropout_forward_and_backward(dtype: torch.dtype, case: str, path: str) -> None:
    """dropout_p > 0 runs cuDNN's Philox dropout: about p of the probabilities dropped, the rest
    scaled by 1 / (1 - p), and the backward's gradients those of the same mask (see above);
    eager and under torch.compile(fullgraph=True)."""
    torch._dynamo.reset()
    opts = dict(DROP_CASES[case])
    q, k, v = _eye_qkv(dtype, opts.pop("hk", 4))
    if opts.pop("mask", False):
        mask = torch.rand(128, 64, device=DEV) > 0.3
        mask[:, 0] = True  # every row keeps a key
        opts["attn_mask"] = mask

    def attend(q_: torch.Tensor, k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        return ops.scaled_dot_product_attention(q_, k_, v_, dropout_p=DROP, enable_gqa=q_.shape[1] != k_.shape[1],
                                                **opts)

    fn = torch.compile(attend, fullgraph=True) if path == "compiled" else attend
    qs, ks, vs = leaves(q, k, v)
    o = fn(qs, ks, vs)
    do = torch.randn_like(o)
    o.backward(do)
    _check_dropout(o.detach(), q, k, v, dtype, (qs.grad, ks.grad, vs.grad), do, **opts)


def test_attention_dropout_follows_torchs_generator_and_redraws_on_cuda_graph_replay() -> None:
    """The mask comes from torch's CUDA generator: torch.manual_seed repeats it, the next call
    draws another. A captured call (no gradient: the inference graph) draws a new mask on each
    replay, each one right (see above)."""
    q, k, v = _eye_qkv(torch.float16)
    attend = lambda: ops.scaled_dot_product_attention(q, k, v, dropout_p=DROP)  # noqa: E731
    torch.manual_seed(7)
    first = attend()
    torch.manual_seed(7)
    assert torch.equal(attend(), first)
    assert not torch.equal(attend(), first)
    _check_dropout(first, q, k, v, torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attend()  # build outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attend()
    masks = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        masks.append(_check_dropout(out.clone(), q, k, v, torch.float16))
    assert not torch.equal(masks[0], masks[1]), "a replay drew the captured mask again"


# -- compile, CUDA graphs, autocast, cache ---------------------------------------------------------

def _step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, lw: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    y = ops.conv2d_bias_act(x, w, b, 1, 1, 1, 1, "relu")
    n = ops.layer_norm(q, [64], lw, None)
    a = ops.scaled_dot_product_attention(n, n, n, is_causal=True)
    return y.float().mean() + a.float().mean() + ops.rms_norm(q, [64], lw, 1e-6).float().mean()


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(2, 16, 16, 16, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    return leaves(x, torch.randn(16, 16, 3, 3, device=DEV, dtype=torch.float16) / 12,
                  torch.randn(16, device=DEV, dtype=torch.float16), torch.ones(64, device=DEV, dtype=torch.float16),
                  torch.randn(2, 4, 128, 64, device=DEV, dtype=torch.float16))


def test_torch_compile_fullgraph_forward_and_backward() -> None:
    torch._dynamo.reset()
    eager_in, comp_in = _inputs(), _inputs()
    ref = _step(*eager_in)
    ref.backward()
    got = torch.compile(_step, fullgraph=True)(*comp_in)
    got.backward()
    torch.testing.assert_close(got, ref, atol=1e-3, rtol=1e-3)
    for a, b in zip(comp_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-2, rtol=1e-2)


def test_cuda_graph_capture_and_replay() -> None:
    x, w, b, lw, q = (t.detach() for t in _inputs())
    static_q = q.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: build the graphs outside capture
        for _ in range(2):
            _step(x, w, b, lw, static_q)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _step(x, w, b, lw, static_q)
    for seed in range(3):
        torch.manual_seed(seed)
        static_q.copy_(torch.randn_like(static_q))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, _step(x, w, b, lw, static_q), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_under_torch_compile_and_cuda_graph_capture(training: bool) -> None:
    """torch.compile(fullgraph=True) of batch norm, forward and backward, as eager (output,
    gradients, running statistics); eval mode also captured into a CUDA graph and replayed
    on new inputs."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(4, 16, 8, 8, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w, b = 1 + 0.2 * torch.randn(16, device=DEV), 0.2 * torch.randn(16, device=DEV)
    rm, rv = 0.1 * torch.randn(16, device=DEV), 0.5 + torch.rand(16, device=DEV)

    def step(x_: torch.Tensor, w_: torch.Tensor, b_: torch.Tensor, rm_: torch.Tensor,
             rv_: torch.Tensor) -> torch.Tensor:
        return ops.batch_norm(x_, rm_, rv_, w_, b_, training).float().square().mean()

    eager_in, comp_in = leaves(x, w, b), leaves(x, w, b)
    eager_stats, comp_stats = (rm.clone(), rv.clone()), (rm.clone(), rv.clone())
    ref = step(*eager_in, *eager_stats)
    ref.backward()
    got = torch.compile(step, fullgraph=True)(*comp_in, *comp_stats)
    got.backward()
    torch.testing.assert_close(got, ref, atol=1e-3, rtol=1e-3)
    for name, a, b_ in zip(("dX", "dWeight", "dBias"), comp_in, eager_in):
        torch.testing.assert_close(a.grad, b_.grad, atol=1e-2, rtol=1e-2, msg=lambda m, name=name: f"{name}: {m}")
    for a, b_ in zip(comp_stats, eager_stats):
        torch.testing.assert_close(a, b_, atol=1e-4, rtol=1e-4)
    if training:
        return
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():  # warm up: build the graph outside capture
        for _ in range(2):
            ops.batch_norm(static_x, rm, rv, w, b, False)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = ops.batch_norm(static_x, rm, rv, w, b, False)
    for seed in range(3):
        torch.manual_seed(seed)
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        want = F.batch_norm(static_x.float(), rm, rv, w, b, False).half()
        torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_autocast_runs_float32_inputs_in_the_autocast_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 16, 16, 16, device=DEV).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(32, 16, 3, 3, device=DEV) / 12, torch.randn(32, device=DEV)
    q = torch.randn(2, 4, 64, 64, device=DEV)
    with torch.autocast("cuda", dtype=dtype):
        y = ops.conv2d_bias_act(x, w, b, 1, 1, 1, 1, "silu")
        o = ops.scaled_dot_product_attention(q, q, q)
        y_ref = F.silu(F.conv2d(x, w, b, 1, 1))
        o_ref = F.scaled_dot_product_attention(q, q, q)
    assert y.dtype == dtype and o.dtype == dtype
    close("Y", y, y_ref.float(), dtype, 2)
    close("O", o, o_ref.float(), dtype, 2)


def test_benchmark_mode_tunes_each_graph_once_and_results_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch.backends.cudnn.benchmark set, each new graph times its candidate plans once
    (the cache counts it) and runs the fastest; results still match torch (conv, batch norm,
    attention, forward and backward), and a second call builds and tunes nothing."""
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    cudnn.ops._runtime.CACHE.clear()
    torch.manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(8, 64, 14, 14, device=DEV, dtype=torch.bfloat16).contiguous(memory_format=cl)
    w = (torch.randn(64, 64, 3, 3, device=DEV, dtype=torch.bfloat16) / 24).contiguous(memory_format=cl)
    bw, bb = torch.rand(64, device=DEV) + 0.5, torch.randn(64, device=DEV)
    q = torch.randn(2, 4, 128, 64, device=DEV, dtype=torch.bfloat16)

    def step(x_: torch.Tensor, w_: torch.Tensor, bw_: torch.Tensor, bb_: torch.Tensor, q_: torch.Tensor,
             cudnn_ops: bool) -> torch.Tensor:
        if cudnn_ops:
            y = ops.batch_norm(ops.conv2d_bias_act(x_, w_, None, 1, 1, 1, 1, "none"), None, None, bw_, bb_, True)
            a = ops.scaled_dot_product_attention(q_, q_, q_, is_causal=True)
        else:
            y = F.batch_norm(F.conv2d(x_, w_, None, 1, 1), None, None, bw_, bb_, True)
            a = F.scaled_dot_product_attention(q_, q_, q_, is_causal=True)
        return y.float().square().mean() + a.float().square().mean()

    cache = cudnn.ops._runtime.CACHE
    for round_ in range(2):
        tuned, built = cache.tuned, cache.builds
        ours = leaves(x, w, bw, bb, q)
        loss = step(*ours, True)
        loss.backward()
        if round_ == 0:
            assert cache.tuned - tuned == cache.builds - built >= 6  # conv, bn, sdpa; each backward
        else:
            assert cache.builds == built and cache.tuned == tuned
    d = [t.detach().double().requires_grad_() for t in (x, w, bw, bb, q)]
    ref = step(*d, False)
    ref.backward()
    close("loss", loss, ref, torch.bfloat16)
    for name, got, want in zip(("dX", "dW", "dGamma", "dBeta", "dQ"), ours, d):
        close(name, got.grad, want.grad, torch.bfloat16, 2)


def test_graph_cache_reuses_built_graphs() -> None:
    q = _qkv(torch.float16)[0]
    ops.scaled_dot_product_attention(q, q, q)
    before = ops.CACHE.builds
    for _ in range(3):
        ops.scaled_dot_product_attention(q, q, q)
    assert ops.CACHE.builds == before
    ops.scaled_dot_product_attention(q[:, :, :128], q[:, :, :128], q[:, :, :128])
    assert ops.CACHE.builds == before + 1  # a new shape builds once


# -- the eager path (no dispatcher) against the registered op ----------------------------------------

def test_eager_path_matches_the_registered_op() -> None:
    """The op functions run their kernels directly in eager mode; the registered ops (what
    torch.compile and tensor subclasses use) run the same graphs: equal outputs, bit for bit."""
    torch.manual_seed(0)
    x = torch.randn(2, 16, 12, 12, device=DEV, dtype=torch.float16)
    w, b = torch.randn(32, 16, 3, 3, device=DEV, dtype=torch.float16) / 12, torch.randn(32, device=DEV,
                                                                                         dtype=torch.float16)
    t, lw, lb = (torch.randn(64, 256, device=DEV, dtype=torch.bfloat16), torch.randn(256, device=DEV,
                 dtype=torch.bfloat16), torch.randn(256, device=DEV, dtype=torch.bfloat16))
    q = _qkv(torch.float16, sq=128, skv=128)[0]
    with torch.no_grad():
        for xl in (x, x.contiguous(memory_format=torch.channels_last)):
            got = ops.conv2d_bias_act(xl, w, b, 1, 1, 1, 1, "silu")
            want = torch.ops.cudnn.conv2d_bias_act(xl, w, b, [1, 1], [1, 1], [1, 1], 1, "silu", False)[0]
            assert got.stride() == want.stride() and torch.equal(got, want)
        for training in (False, True):
            got = ops.layer_norm(t, [256], lw, lb, 1e-5, training=training)
            assert torch.equal(got, torch.ops.cudnn.layer_norm(t, [256], lw, lb, 1e-5, False, training)[0])
        assert torch.equal(ops.rms_norm(t, [256], None, 1e-6),
                           torch.ops.cudnn.layer_norm(t, [256], None, None, 1e-6, True, False)[0])
        got = ops.scaled_dot_product_attention(q, q, q, is_causal=True)
        assert torch.equal(got, torch.ops.cudnn.sdpa(q, q, q, None, True, 1 / 8, False)[0])


def test_batch_norm_eager_paths_match_the_registered_op() -> None:
    """Batch norm's eager paths (no grad: statistics to scratch; running statistics; no
    weight; NCHW) give the registered op's output bit for bit, and torch's within tolerance."""
    torch.manual_seed(0)
    x = (2 * torch.randn(4, 24, 10, 10, device=DEV) + 0.3).to(torch.float16)
    w, b = 1 + 0.3 * torch.randn(24, device=DEV), 0.3 * torch.randn(24, device=DEV)
    with torch.no_grad():
        for xl in (x, x.contiguous(memory_format=torch.channels_last)):
            for weight, bias in ((w, b), (None, None)):
                got = ops.batch_norm(xl, None, None, weight, bias, True)
                want = torch.ops.cudnn.batch_norm(xl, weight, bias, None, None, True, 0.1, 1e-5)[0]
                assert got.stride() == want.stride() and torch.equal(got, want)
                close("Y", got, F.batch_norm(xl.double(), None, None, None if weight is None else weight.double(),
                                             None if bias is None else bias.double(), True), torch.float16)
            rm, rv = torch.zeros(24, device=DEV), torch.ones(24, device=DEV)
            rm_ref, rv_ref = rm.double().clone(), rv.double().clone()
            got = ops.batch_norm(xl, rm, rv, w, b, True, 0.1)
            F.batch_norm(xl.double(), rm_ref, rv_ref, w.double(), b.double(), True, 0.1)
            torch.testing.assert_close(rm.double(), rm_ref, atol=1e-3, rtol=1e-3)
            torch.testing.assert_close(rv.double(), rv_ref, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("shape", [(8, 64, 28, 28), (32, 256, 14, 14), (16, 2048, 7, 7), (2, 24, 5, 5)])
def test_batch_norm_running_statistics_in_place(shape: tuple[int, ...]) -> None:
    """The eager path lets cuDNN's graph write the next running statistics over the old ones
    (float32 buffers). Over five steps they equal, bit for bit, what the registered op writes to
    memory of its own, and torch's update within tolerance; float16 buffers (copied back) too."""
    torch.manual_seed(0)
    c = shape[1]
    rm, rv = 0.1 * torch.randn(c, device=DEV), 1 + 0.1 * torch.rand(c, device=DEV)
    rm_op, rv_op = rm.clone(), rv.clone()
    rm_ref, rv_ref = rm.double(), rv.double()
    rm_half, rv_half = rm.half(), rv.half()
    w, b = 1 + 0.3 * torch.randn(c, device=DEV), 0.3 * torch.randn(c, device=DEV)
    for _ in range(5):
        x = (2 * torch.randn(*shape, device=DEV) + 0.3).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            y = ops.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
            ops.batch_norm(x, rm_half, rv_half, w, b, True, 0.1, 1e-5)
        y_op, _m, _v, nrm, nrv = torch.ops.cudnn.batch_norm(x, w, b, rm_op, rv_op, True, 0.1, 1e-5)
        rm_op, rv_op = nrm, nrv
        F.batch_norm(x.double(), rm_ref, rv_ref, w.double(), b.double(), True, 0.1, 1e-5)
        assert torch.equal(y, y_op)
        assert torch.equal(rm, rm_op) and torch.equal(rv, rv_op)
    torch.testing.assert_close(rm.double(), rm_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(rv.double(), rv_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(rm_half.double(), rm_ref, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(rv_half.double(), rv_ref, atol=2e-3, rtol=2e-3)


def test_eager_backward_for_some_inputs_only() -> None:
    """Only the gradients asked for are computed (no dgrad for an input without grad); they
    match the float64 reference."""
    torch.manual_seed(0)
    dtype = torch.float16
    x = torch.randn(2, 16, 12, 12, device=DEV).to(dtype).contiguous(memory_format=torch.channels_last)
    w, b = (torch.randn(32, 16, 3, 3, device=DEV) / 12).to(dtype), torch.randn(32, device=DEV).to(dtype)
    ws, bs = leaves(w, b)
    y = ops.conv2d_bias_act(x, ws, bs, 1, 1, 1, 1, "relu")
    dy = torch.randn_like(y)
    y.backward(dy)
    ref, dw, db = ref_grads(lambda w_, b_: F.relu(F.conv2d(x.double(), w_, b_, 1, 1)), [w, b], dy)
    close("Y", y, ref, dtype)
    close("dW", ws.grad, dw, dtype, 2)
    close("dBias", bs.grad, db, dtype, 2)
    q, k, v = _qkv(dtype)
    qs = q.detach().clone().requires_grad_()
    o = ops.scaled_dot_product_attention(qs, k, v)
    do = torch.randn_like(o)
    o.backward(do)
    ref, dq = ref_grads(lambda q_: F.scaled_dot_product_attention(q_, k.double(), v.double()), [q], do)
    close("O", o, ref, dtype)
    close("dQ", qs.grad, dq, dtype, 2)


def test_eager_checks_are_part_of_the_cache_key() -> None:
    """Arguments are checked when their key is first built; a call that differs only in what
    the checks look at (a dtype, a flag) misses and is refused, never run on a built graph."""
    q, k, v = _qkv(torch.float16, hk=2)
    with torch.no_grad():
        ops.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        with pytest.raises(ops.OpError, match="enable_gqa"):
            ops.scaled_dot_product_attention(q, k, v)
        x = torch.randn(2, 16, 8, 8, device=DEV, dtype=torch.float16)
        w, b = torch.randn(16, 16, 3, 3, device=DEV, dtype=torch.float16), torch.randn(16, device=DEV,
                                                                                      dtype=torch.float16)
        ops.conv2d_bias_act(x, w, b, 1, 1, 1, 1, "relu")
        with pytest.raises(ops.OpError, match="bias"):
            ops.conv2d_bias_act(x, w, b.float(), 1, 1, 1, 1, "relu")
        with pytest.raises(ops.OpError, match="stride"):
            ops.conv2d_bias_act(x, w, b, (1, 1, 1), 1, 1, 1, "relu")
        t = torch.randn(8, 64, device=DEV, dtype=torch.float16)
        ops.layer_norm(t, [64], torch.ones(64, device=DEV, dtype=torch.float16))
        with pytest.raises(ops.OpError, match="weight"):
            ops.layer_norm(t, [64], torch.ones(63, device=DEV, dtype=torch.float16))
    ts = t.clone().requires_grad_()
    y = ops.layer_norm(ts, [64], None, None, training=False)
    with pytest.raises(RuntimeError, match="training=False"):
        y.sum().backward()


def _kept_case(name: str) -> tuple:  # type: ignore[type-arg]
    """(the op on leaves, its float64 reference, inputs, a gradient of another layout than the
    output's) for the backward-graph test below."""
    torch.manual_seed(0)
    h = torch.float16
    if name == "conv":
        x = torch.randn(2, 16, 12, 12, device=DEV).to(h).contiguous(memory_format=torch.channels_last)
        w, b = (torch.randn(32, 16, 3, 3, device=DEV) / 12).to(h), torch.randn(32, device=DEV).to(h)
        return (lambda x_, w_, b_: ops.conv2d_bias_act(x_, w_, b_, 1, 1, 1, 1, "gelu"),
                lambda x_, w_, b_: F.gelu(F.conv2d(x_, w_, b_, 1, 1)), [x, w, b], lambda y: y.contiguous())
    if name in ("layer_norm", "rms_norm"):
        t = (2 * torch.randn(64, 256, device=DEV) + 0.3).to(h)
        lw, lb = (1 + 0.3 * torch.randn(256, device=DEV)).to(h), (0.3 * torch.randn(256, device=DEV)).to(h)
        if name == "rms_norm":
            return (lambda t_, w_: ops.rms_norm(t_, [256], w_, 1e-6), lambda t_, w_: F.rms_norm(t_, (256,), w_, 1e-6),
                    [t, lw], lambda y: y.t().contiguous().t())
        return (lambda t_, w_, b_: ops.layer_norm(t_, [256], w_, b_),
                lambda t_, w_, b_: F.layer_norm(t_, (256,), w_, b_), [t, lw, lb], lambda y: y.t().contiguous().t())
    if name == "batch_norm":
        x = (2 * torch.randn(4, 24, 10, 10, device=DEV) + 0.3).to(h).contiguous(memory_format=torch.channels_last)
        w, b = 1 + 0.3 * torch.randn(24, device=DEV), 0.3 * torch.randn(24, device=DEV)
        return (lambda x_, w_, b_: ops.batch_norm(x_, None, None, w_, b_, True),
                lambda x_, w_, b_: F.batch_norm(x_, None, None, w_, b_, True), [x, w, b], lambda y: y.contiguous())
    q, k, v = _qkv(h, sq=128, skv=128)
    return (lambda q_, k_, v_: ops.scaled_dot_product_attention(q_, k_, v_, is_causal=True),
            lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, is_causal=True), [q, k, v],
            lambda y: y.contiguous())


@pytest.mark.parametrize("name", ["conv", "layer_norm", "rms_norm", "batch_norm", "sdpa"])
def test_eager_backward_graphs_are_kept_on_the_forward(name: str) -> None:
    """The eager backward finds its graphs on the forward's after the first call: repeated
    steps build nothing and match the float64 reference every time, and a gradient of another
    layout (found by its layout, not the first one's) is right too."""
    fn, ref_fn, inputs, other_layout = _kept_case(name)
    dy = torch.randn_like(fn(*inputs))
    builds = None
    for step, grad in enumerate((dy, dy, other_layout(dy), other_layout(dy), dy)):
        assert torch.equal(grad, dy)
        xs = leaves(*inputs)
        y = fn(*xs)
        y.backward(grad)
        ref, *grads = ref_grads(ref_fn, inputs, dy)
        close(f"step {step}: Y", y, ref, torch.float16)
        for i, (got, want) in enumerate(zip([t.grad for t in xs], grads, strict=True)):
            close(f"step {step}: d{i}", got, want, torch.float16, 4)
        if step == 1:
            builds = ops.CACHE.builds
    assert ops.CACHE.builds - builds <= 3  # the other layout's graphs, once (none where dY is copied)


def test_ops_on_two_streams_at_once() -> None:
    """Layer norm (a plan with a workspace) on two streams whose executes overlap (each behind
    a sleep on its own stream, enqueued alternately): torch's result on each, the handle
    following torch's current stream and each workspace taken on the stream it runs on."""
    torch.manual_seed(0)
    xs = [torch.randn(256, 1024, device=DEV, dtype=torch.bfloat16) for _ in range(6)]
    w, b = torch.randn(1024, device=DEV, dtype=torch.bfloat16), torch.randn(1024, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        ops.layer_norm(xs[0], [1024], w, b)  # built once, outside the streams
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        ys = []
        for i, x in enumerate(xs):
            with torch.cuda.stream(streams[i % 2]):
                torch.cuda._sleep(200_000)
                ys.append(ops.layer_norm(x, [1024], w, b))
        torch.cuda.synchronize()
    for x, y in zip(xs, ys, strict=True):
        close("Y", y, F.layer_norm(x.double(), (1024,), w.double(), b.double()), torch.bfloat16)


def _hooks(kind: str):  # type: ignore[no-untyped-def]
    """Saved-tensor hooks that give the saved tensors back elsewhere: on the host and back
    (``save_on_cpu``), or as contiguous copies (an NHWC input comes back NCHW, attention's O
    in BSHD memory comes back BHSD)."""
    if kind == "save_on_cpu":
        return torch.autograd.graph.save_on_cpu()
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t.contiguous(), lambda t: t)


@pytest.mark.parametrize("hooks", ["save_on_cpu", "contiguous"])
@pytest.mark.parametrize("name", ["conv", "layer_norm", "rms_norm", "batch_norm", "sdpa"])
def test_eager_backward_with_saved_tensors_hooks(name: str, hooks: str) -> None:
    """A backward after one without hooks (its graphs kept on the forward's graph) reads the
    saved tensors, the statistics' block among them, where and as the hooks give them back:
    other addresses, other layouts. Both steps match the float64 reference."""
    fn, ref_fn, inputs, _ = _kept_case(name)
    dy = torch.randn_like(fn(*inputs))
    ref, *grads = ref_grads(ref_fn, inputs, dy)
    for hooked in (False, True):
        xs = leaves(*inputs)
        if hooked:
            with _hooks(hooks):
                y = fn(*xs)
        else:
            y = fn(*xs)
        y.backward(dy)
        close(f"hooks {hooked}: Y", y, ref, torch.float16)
        for i, (got, want) in enumerate(zip([t.grad for t in xs], grads, strict=True)):
            close(f"hooks {hooked}: d{i}", got, want, torch.float16, 4)
