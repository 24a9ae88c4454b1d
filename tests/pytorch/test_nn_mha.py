"""`cudnn.nn.RoutedMultiheadAttention`, what `convert` makes of ``nn.MultiheadAttention``, gives
torch's module's results for every call: those it sends to attention (compared with torch's
module to 1e-5 on float32 CPU tensors: same math, another order of operations) and those it
leaves to torch's module (identical). On CPU tensors cuDNN's attention is never taken: those
calls run torch's SDPA after `attention_with_fallback`'s warning, which is what is compared
here (tests/pytorch/test_torch_nn_gpu.py has cuDNN run it). Skipped where torch is not installed."""

from __future__ import annotations

import contextlib
import copy
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import cudnn.nn as cnn  # noqa: E402

TOL = {"atol": 1e-5, "rtol": 1e-5}


def pair(batch_first: bool, **kw: object) -> tuple[nn.MultiheadAttention, nn.MultiheadAttention]:
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=batch_first, **kw).eval()  # type: ignore[arg-type]
    routed = copy.deepcopy(ref)
    routed.__class__ = cnn.RoutedMultiheadAttention
    return ref, routed


def qkv(batch_first: bool, sq: int = 6, skv: int = 6) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    shape = (lambda s: (2, s, 16)) if batch_first else (lambda s: (s, 2, 16))
    return torch.randn(shape(sq)), torch.randn(shape(skv)), torch.randn(shape(skv))


def causal(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).triu(1)  # torch's MHA: True is masked out


def padding(dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """A [B, S] key-padding mask: the second sequence's last two keys are padding."""
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    return pad if dtype == torch.bool else torch.zeros(2, 6).masked_fill_(pad, float("-inf"))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["none", "bool", "float", "per_head", "causal_hint"])
@pytest.mark.parametrize("pad", [None, torch.bool, torch.float32], ids=["no_pad", "bool_pad", "float_pad"])
def test_calls_sent_to_sdpa_give_torchs_results(batch_first: bool, mask: str, pad: torch.dtype | None) -> None:
    """Every mask form torch's module takes, with and without a key-padding mask (merged into
    the attention mask as torch merges them, a causal hint included)."""
    ref, routed = pair(batch_first)
    q, k, v = qkv(batch_first)
    kwargs: dict[str, object] = {"need_weights": False}
    if pad is not None:
        kwargs["key_padding_mask"] = padding(pad)
    if mask == "bool":
        kwargs["attn_mask"] = torch.rand(6, 6) > 0.7
    elif mask == "float":
        kwargs["attn_mask"] = torch.randn(6, 6)
    elif mask == "per_head":
        kwargs["attn_mask"] = torch.randn(2 * 4, 6, 6)
    elif mask == "causal_hint":
        kwargs.update(attn_mask=causal(6), is_causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # CPU tensors: torch's SDPA, after a warning
        got, weights = routed(q, k, v, **kwargs)
    attn_mask = kwargs.get("attn_mask")
    # torch's module takes a boolean padding mask with a float attention mask (or the reverse)
    # with a deprecation warning of its own; the routed module merges the two as torch does
    mismatched = pad is not None and isinstance(attn_mask, torch.Tensor) \
        and (pad == torch.bool) != (attn_mask.dtype == torch.bool)
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask") if mismatched \
            else contextlib.nullcontext():
        want, _ = ref(q, k, v, **kwargs)
    assert weights is None
    torch.testing.assert_close(got, want, **TOL)


def test_calls_left_to_torch_are_torchs() -> None:
    ref, routed = pair(True)
    q, k, v = qkv(True)
    for kwargs in ({}, {"key_padding_mask": padding(), "need_weights": True}, {"average_attn_weights": False}):
        got, want = routed(q, k, v, **kwargs), ref(q, k, v, **kwargs)
        torch.testing.assert_close(got, want, atol=0, rtol=0)  # attention weights too (need_weights defaults True)
    with pytest.raises(RuntimeError, match="attn_mask"):  # torch's module says what an is_causal hint needs
        routed(q, k, v, need_weights=False, is_causal=True)
    with pytest.raises(AssertionError, match="key_padded_mask"):  # a padding mask of the wrong shape: torch's says
        routed(q, k, v, key_padding_mask=padding()[:, :5], need_weights=False)
    kdim_ref, kdim = pair(True, kdim=8, vdim=8)
    kq, _, _ = qkv(True)
    kk, kv = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    torch.testing.assert_close(kdim(kq, kk, kv, need_weights=False), kdim_ref(kq, kk, kv, need_weights=False),
                               atol=0, rtol=0)


class Block(nn.Module):
    """Attention as nn.TransformerEncoderLayer calls it (no weights, a causal hint), then an MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
        x = x + self.self_attn(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)[0]
        return x + self.mlp(x)


def test_convert_turns_attention_modules_into_routed_ones_and_routes_the_model() -> None:
    torch.manual_seed(2)
    layer = nn.Sequential(Block(), Block()).train()  # CPU: no norms (cudnn.nn's need a GPU)
    x = torch.randn(2, 6, 16)
    want = layer(x)
    converted = cnn.convert(layer)
    assert [type(b.self_attn) for b in converted] == [cnn.RoutedMultiheadAttention] * 2
    assert converted.state_dict().keys() == layer.state_dict().keys()
    assert type(layer[0].self_attn) is nn.MultiheadAttention  # the original is left as it was
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # CPU tensors: cuDNN does not cover them
        got = converted(x)
    torch.testing.assert_close(got, want, **TOL)
    again = pickle.loads(pickle.dumps(converted))
    assert type(again[1].self_attn) is cnn.RoutedMultiheadAttention
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        torch.testing.assert_close(again(x), want, **TOL)


def test_convert_of_an_attention_module_itself() -> None:
    ref, _ = pair(True)
    converted = cnn.convert(ref)
    assert type(converted) is cnn.RoutedMultiheadAttention
    q, k, v = qkv(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        torch.testing.assert_close(converted(q, k, v, need_weights=False)[0], ref(q, k, v, need_weights=False)[0],
                                   **TOL)
