"""cudnn.nn modules on the GPU against the torch modules they replace (same state dict),
cudnn.nn.convert on torchvision's ResNet-50 (random weights, eval, fp16) against torch, and
torch's SDPA routed to cuDNN by cudnn.nn.sdpa_kernel and by convert (a model's own SDPA call,
and nn.TransformerEncoderLayer's nn.MultiheadAttention).

Tolerances: module outputs and gradients as tests/pytorch/test_torch_ops_gpu.py (fp16 2e-2, scaled
by the largest reference magnitude); ResNet-50 logits: max |difference| <= 2e-2 x max |logit|
(fifty fp16 layers; batch norm folded into the conv weights in float32 before rounding);
attention in bf16: 2e-2 of the largest reference value, against torch's SDPA in float32.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import cudnn.nn as cnn
from cudnn import ops
from cudnn.ops import _runtime as rt

DEV = "cuda"
H = torch.float16


def _close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float = 2e-2) -> None:
    mag = max(1.0, float(ref.abs().max()))
    torch.testing.assert_close(got.float(), ref.float(), atol=tol * mag, rtol=tol, msg=lambda m: f"{name}: {m}")


@pytest.fixture
def attention_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The keyword arguments of each cudnn.ops.scaled_dot_product_attention call the test
    makes (the op runs as usual): which calls reached cuDNN's attention, and with what."""
    calls: list[dict[str, object]] = []
    attention = ops.scaled_dot_product_attention

    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(kwargs)
        return attention(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ops, "scaled_dot_product_attention", counted)
    return calls


def _pair(ours: nn.Module, theirs: nn.Module) -> tuple[nn.Module, nn.Module]:
    ours.load_state_dict(theirs.state_dict())
    return ours.to(DEV, H), theirs.to(DEV, H)


@pytest.mark.parametrize("kind", ["conv", "layernorm", "rmsnorm", "mha"])
def test_module_matches_torch_forward_and_backward(kind: str) -> None:
    torch.manual_seed(0)
    if kind == "conv":
        ours, theirs = _pair(cnn.Conv2dBiasAct(16, 32, 3, padding=1, act="relu"), nn.Conv2d(16, 32, 3, padding=1))
        x = torch.randn(4, 16, 20, 20, device=DEV, dtype=H).contiguous(memory_format=torch.channels_last)
        ref_fn = lambda t: torch.relu(theirs(t))
    elif kind == "layernorm":
        ours, theirs = _pair(cnn.LayerNorm(256), nn.LayerNorm(256))
        x, ref_fn = torch.randn(4, 64, 256, device=DEV, dtype=H), theirs
    elif kind == "rmsnorm":
        ours, theirs = _pair(cnn.RMSNorm(256, eps=1e-6), nn.RMSNorm(256, eps=1e-6))
        x, ref_fn = torch.randn(4, 64, 256, device=DEV, dtype=H), theirs
    else:
        ours, theirs = _pair(cnn.MultiheadAttention(256, 4, batch_first=True),
                             nn.MultiheadAttention(256, 4, batch_first=True))
        x = torch.randn(2, 128, 256, device=DEV, dtype=H)
        mask = nn.Transformer.generate_square_subsequent_mask(128, device=DEV, dtype=H)
        y = ours(x, x, x, need_weights=False, attn_mask=mask)[0]
        ref = theirs(x, x, x, need_weights=False, attn_mask=mask)[0]
        _close("MHA out (mask)", y, ref)
        ours_causal = ours(x, x, x, need_weights=False, is_causal=True, attn_mask=mask)[0]
        _close("MHA out (is_causal)", ours_causal, ref)
        return
    _same_forward_and_backward(ours, theirs, ref_fn, x)


def _same_forward_and_backward(ours: nn.Module, theirs: nn.Module, ref_fn: Callable[[torch.Tensor], torch.Tensor],
                               x: torch.Tensor) -> torch.Tensor:
    """ours(x) against ref_fn(x) (theirs inside), then dX and each parameter's gradient; the reference output."""
    xs, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, ref = ours(xs), ref_fn(xr)
    assert y.shape == ref.shape
    _close("Y", y, ref)
    dy = torch.randn_like(ref)
    y.backward(dy)
    ref.backward(dy)
    _close("dX", xs.grad, xr.grad)
    for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        _close(f"d{n}", p.grad, q.grad, 5e-2)
    return ref.detach()


@pytest.mark.parametrize(("kernel", "dilation", "padding", "mode"), [
    (3, 2, "same", "zeros"), (4, 1, "same", "zeros"), (4, 3, "same", "zeros"), (3, 1, "valid", "zeros"),
    (3, 1, 1, "reflect"), (3, 1, 1, "replicate"), (3, 1, (1, 2), "circular"), (4, 1, "same", "reflect")])
def test_conv_module_takes_every_padding_of_nn_conv2d(kernel: int, dilation: int, padding: object,
                                                     mode: str) -> None:
    """padding "same" (an odd total pads the right / bottom by one more, as torch), "valid",
    ints, and padding_mode reflect / replicate / circular: output and gradients as nn.Conv2d."""
    torch.manual_seed(0)
    ours, theirs = _pair(cnn.Conv2dBiasAct(8, 16, kernel, 1, padding, dilation, padding_mode=mode, act="relu"),
                         nn.Conv2d(8, 16, kernel, 1, padding, dilation, padding_mode=mode))
    x = torch.randn(2, 8, 13, 11, device=DEV, dtype=H).contiguous(memory_format=torch.channels_last)
    ref = _same_forward_and_backward(ours, theirs, lambda t: torch.relu(theirs(t)), x)
    if mode == "zeros":  # the functional op takes torch's padding strings too
        y2 = ops.conv2d_bias_act(x, ours.weight, ours.bias, 1, padding, dilation, 1, "relu")
        _close("Y (functional)", y2, ref)


def test_convert_folds_convs_with_padding_strings_and_modes() -> None:
    """Conv2d(padding="same", padding_mode="reflect") -> BatchNorm2d -> ReLU folds like any other
    chain, and the folded model computes what torch's does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 4, padding="same", padding_mode="reflect"), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 8, 3, padding="valid", dilation=2), nn.BatchNorm2d(8))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    model = model.to(DEV, H).eval()
    x = torch.randn(2, 8, 17, 15, device=DEV, dtype=H).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = model(x)
        converted = cnn.convert(model)
        got = converted(x)
    assert sum(isinstance(m, cnn.Conv2dBiasAct) for m in converted.modules()) == 2
    _close("Y", got, ref)


def test_convert_resnet50_fp16_eval_matches_torch() -> None:
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = tv.models.resnet50(weights=None)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):  # statistics that make the folding matter
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.0)
                m.bias.uniform_(-0.1, 0.1)
    model = model.eval().to(DEV, H).to(memory_format=torch.channels_last)
    converted = cnn.convert(model)
    n_fused = sum(isinstance(m, cnn.Conv2dBiasAct) for m in converted.modules())
    assert n_fused == 53 and not any(isinstance(m, nn.BatchNorm2d) for m in converted.modules())
    x = torch.randn(8, 3, 224, 224, device=DEV, dtype=H).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        ref, got = model(x), converted(x)
    err = float((got.float() - ref.float()).abs().max())
    assert err <= 2e-2 * float(ref.float().abs().max()), f"max |diff| {err}, max |logit| {float(ref.abs().max())}"


class _Attend(nn.Module):
    """Projections around a causal torch SDPA call, as a GPT block writes it."""

    def __init__(self, d: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


def test_sdpa_kernel_runs_torch_sdpa_through_cudnn_forward_and_backward() -> None:
    """Inside the context torch's SDPA gives exactly cudnn.ops' result (the same graph), and
    forward and gradients match torch's own attention (bf16: 2e-2 of the largest value)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 256, 64, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(2, 4, 256, 64, device=DEV, dtype=torch.bfloat16)
    with cnn.sdpa_kernel():
        o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    grads = torch.autograd.grad(o, (q, k, v), do)
    with torch.no_grad():
        torch.testing.assert_close(o, ops.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=0)
    ref = nn.functional.scaled_dot_product_attention(*(t.float() for t in (q, k, v)), is_causal=True)
    ref_grads = torch.autograd.grad(ref, (q, k, v), do.float())
    _close("O", o, ref)
    for name, g, r in zip("QKV", grads, ref_grads):
        _close(f"d{name}", g, r)


def test_sdpa_kernel_fallback_runs_torch_for_what_cudnn_does_not_cover() -> None:
    q = torch.randn(1, 2, 64, 32, device=DEV)  # float32 outside autocast: cuDNN's attention takes 16-bit
    with cnn.sdpa_kernel(fallback=True), pytest.warns(RuntimeWarning, match="query: expected dtype"):
        got = nn.functional.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(got, nn.functional.scaled_dot_product_attention(q, q, q), rtol=0, atol=0)
    with cnn.sdpa_kernel(), pytest.raises(ops.OpError, match="dtype"):
        nn.functional.scaled_dot_product_attention(q, q, q)


def test_convert_routes_attention_call_sites_to_cudnn() -> None:
    torch.manual_seed(0)
    model = _Attend().to(DEV, torch.bfloat16).eval()
    x = torch.randn(2, 128, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        converted = cnn.convert(model)
        built = rt.CACHE.builds
        got = converted(x)
    assert rt.CACHE.builds == built + 1  # the attention graph: cuDNN ran the call
    _close("block out", got, ref)


def test_convert_sends_a_transformer_layers_attention_to_cudnn(attention_calls: list[dict[str, object]]) -> None:
    """nn.TransformerEncoderLayer in training calls its nn.MultiheadAttention without weights:
    after convert that call runs cuDNN's attention graph (forward and backward), its layer norms
    cudnn.nn's; output and input gradient match the torch layer (bf16: 2e-2 of the largest)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
    layer = layer.to(DEV, torch.bfloat16).train()
    x = torch.randn(2, 128, 256, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    mask = nn.Transformer.generate_square_subsequent_mask(128, device=DEV, dtype=torch.bfloat16)
    ref = layer(x, src_mask=mask, is_causal=True)
    (ref_dx,) = torch.autograd.grad(ref.float().square().sum(), x)
    converted = cnn.convert(layer)
    assert type(converted.self_attn) is cnn.RoutedMultiheadAttention
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to torch's SDPA
        got = converted(x, src_mask=mask, is_causal=True)
    (dx,) = torch.autograd.grad(got.float().square().sum(), x)
    assert [bool(kw.get("is_causal")) for kw in attention_calls] == [True]  # cuDNN's causal attention ran it
    _close("layer out", got, ref)
    _close("dx", dx, ref_dx)


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
def test_attention_modules_take_unbatched_and_sequence_first_inputs(batch_first: bool,
                                                                   attention_calls: list[dict[str, object]]) -> None:
    """nn.MultiheadAttention's unbatched [L, E] inputs and batch_first=False [L, B, E] inputs, as
    torch's module computes them (self-attention through the one packed projection, and cross
    attention), through cudnn.nn.MultiheadAttention and through convert's routed module, whose
    calls reach cuDNN's attention."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(128, 4, batch_first=batch_first).to(DEV, H)
    ours = cnn.MultiheadAttention(128, 4, batch_first=batch_first).to(DEV, H)
    ours.load_state_dict(theirs.state_dict())
    routed = cnn.convert(copy.deepcopy(theirs))
    assert type(routed) is cnn.RoutedMultiheadAttention
    batched = (3, 64, 128) if batch_first else (64, 3, 128)
    for shape in [(64, 128), batched]:
        x, kv = torch.randn(shape, device=DEV, dtype=H), torch.randn(shape, device=DEV, dtype=H)
        for name, (q, k, v) in (("self", (x, x, x)), ("cross", (x, kv, kv))):
            ref = theirs(q, k, v, need_weights=False)[0]
            with torch.no_grad():
                _close(f"{name} {shape}", ours(q, k, v)[0], ref)
                _close(f"{name} {shape} routed", routed(q, k, v, need_weights=False)[0], ref)
    assert len(attention_calls) == 8


@pytest.mark.parametrize("padding", [torch.bool, torch.float16], ids=["bool", "float"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
def test_attention_modules_take_a_key_padding_mask(batch_first: bool, padding: torch.dtype,
                                                   attention_calls: list[dict[str, object]]) -> None:
    """A key-padding mask, alone and with a causal attention mask (torch merges the two), as
    torch's module computes it, output and input gradients: cudnn.nn.MultiheadAttention and
    convert's routed module both send the call to cuDNN's attention."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(128, 4, batch_first=batch_first).to(DEV, H)
    ours = cnn.MultiheadAttention(128, 4, batch_first=batch_first).to(DEV, H)
    ours.load_state_dict(theirs.state_dict())
    routed = cnn.convert(copy.deepcopy(theirs))
    pad = torch.zeros(3, 64, dtype=torch.bool, device=DEV)
    pad[1, 40:], pad[2, 10:] = True, True  # padded keys at the end of two of the sequences
    mask = pad if padding == torch.bool else torch.zeros(3, 64, device=DEV, dtype=H).masked_fill_(pad, float("-inf"))
    causal = nn.Transformer.generate_square_subsequent_mask(64, device=DEV, dtype=H)
    x = torch.randn((3, 64, 128) if batch_first else (64, 3, 128), device=DEV, dtype=H)
    for extra in ({}, {"attn_mask": causal}, {"attn_mask": causal, "is_causal": True}):
        xs = [x.clone().requires_grad_() for _ in range(3)]
        ref = theirs(xs[0], xs[0], xs[0], key_padding_mask=mask, need_weights=False, **extra)[0]
        (ref_dx,) = torch.autograd.grad(ref.float().square().sum(), xs[0])
        for name, module, xi in (("ours", ours, xs[1]), ("routed", routed, xs[2])):
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # no fallback to torch's SDPA
                got = module(xi, xi, xi, key_padding_mask=mask, need_weights=False, **extra)[0]
            (dx,) = torch.autograd.grad(got.float().square().sum(), xi)
            _close(f"{name} {sorted(extra)}", got, ref)
            _close(f"{name} {sorted(extra)} dx", dx, ref_dx)
    with torch.no_grad():  # cudnn.nn's module also takes is_causal without a mask (torch's wants one)
        ref = theirs(x, x, x, key_padding_mask=mask, need_weights=False, attn_mask=causal)[0]
        _close("ours is_causal only", ours(x, x, x, key_padding_mask=mask, need_weights=False, is_causal=True)[0],
               ref)
    assert len(attention_calls) == 7


def test_attention_modules_apply_dropout_in_training_through_cudnn(attention_calls: list[dict[str, object]]) -> None:
    """With dropout set, a training call passes it to cuDNN's attention (no fallback to torch):
    two calls differ and the gradients are finite; in eval mode the call runs without dropout and
    matches torch's module.
    (tests/pytorch/test_torch_ops_gpu.py checks the dropout itself against torch.)"""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(128, 4, dropout=0.2, batch_first=True).to(DEV, H)
    ours = cnn.MultiheadAttention(128, 4, dropout=0.2, batch_first=True).to(DEV, H)
    ours.load_state_dict(theirs.state_dict())
    routed = cnn.convert(copy.deepcopy(theirs).train())
    x = torch.randn(2, 64, 128, device=DEV, dtype=H, requires_grad=True)
    for module in (ours.train(), routed):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            a, b = module(x, x, x, need_weights=False)[0], module(x, x, x, need_weights=False)[0]
        assert not torch.equal(a, b)
        (dx,) = torch.autograd.grad(a.float().sum(), x)
        assert torch.isfinite(dx).all()
        module.eval()
        with torch.no_grad():
            _close("eval", module(x, x, x, need_weights=False)[0], theirs.eval()(x, x, x, need_weights=False)[0])
    assert [kw.get("dropout_p", 0.0) for kw in attention_calls] == [0.2, 0.2, 0.0, 0.2, 0.2, 0.0]
