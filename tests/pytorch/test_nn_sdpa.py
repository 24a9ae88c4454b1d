"""`cudnn.nn.sdpa_kernel` and the attention routing of `cudnn.nn.convert`, on CPU tensors:
cuDNN takes CUDA tensors only, so every routed call is one it does not cover. That shows the
routing without a GPU: strict, the call raises `cudnn.ops.OpError` naming the argument; with
fallback, torch's SDPA runs (same result as outside) after one warning per reason. Also: the
mode ends with its scope (an exception included), other torch calls pass through, models
without SDPA call sites are not routed (nn.MultiheadAttention's call is inside a function the
mode sees whole, until convert makes the module a RoutedMultiheadAttention), and a routed model
still pickles. Skipped where torch
is not installed.

No `from __future__ import annotations` here: torch.fx keeps a traced forward's annotations,
and a GraphModule whose annotations are strings does not pickle (a torch limitation)."""

import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import cudnn.nn as cnn  # noqa: E402
from cudnn import ops  # noqa: E402
from cudnn.nn import sdpa as sdpa_module  # noqa: E402


def qkv(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 4, 16, 8, generator=g).bfloat16() for _ in range(3))  # type: ignore[return-value]


def modes() -> int:
    return torch._C._len_torch_function_stack()


class Attend(nn.Module):
    """A block calling torch's SDPA itself (causal), between two projections."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.proj(x).view(x.shape[0], x.shape[1], 3, 2, 4).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(x.shape[0], x.shape[1], 8))


class Fails(Attend):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        super().forward(x)
        raise KeyError("after the attention")


@pytest.fixture(autouse=True)
def fresh_warnings() -> None:
    sdpa_module._warned.clear()


def test_strict_context_raises_naming_the_argument() -> None:
    q, k, v = qkv()
    with cnn.sdpa_kernel(), pytest.raises(ops.OpError, match=r"scaled_dot_product_attention: query: .*CUDA"):
        F.scaled_dot_product_attention(q, k, v)
    assert modes() == 0


def test_fallback_runs_torch_with_one_warning_per_reason() -> None:
    q, k, v = qkv()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with cnn.sdpa_kernel(fallback=True):
        with pytest.warns(RuntimeWarning, match=r"runs in torch, not cuDNN.*query: expected a CUDA tensor"):
            got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same reason again: no second warning
            again = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            summed = torch.add(q, k)  # other torch calls pass through unchanged
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    torch.testing.assert_close(again, ref, rtol=0, atol=0)
    torch.testing.assert_close(summed, q + k, rtol=0, atol=0)
    assert modes() == 0


def test_context_is_a_decorator_and_ends_with_its_scope() -> None:
    q, k, v = qkv()

    @cnn.sdpa_kernel()
    def attend() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

    with pytest.raises(ops.OpError):
        attend()
    assert modes() == 0
    F.scaled_dot_product_attention(q, k, v)  # outside: torch's, no error


def test_convert_routes_a_model_with_sdpa_call_sites() -> None:
    torch.manual_seed(0)
    model = Attend().eval()
    x = torch.randn(2, 16, 8)
    ref = model(x)
    converted = cnn.convert(model)
    with pytest.warns(RuntimeWarning, match="runs in torch, not cuDNN"):
        got = converted(x)
    torch.testing.assert_close(got, ref)
    assert modes() == 0
    assert pickle.loads(pickle.dumps(converted))(x).shape == ref.shape  # the hooks pickle


class SelfAttention(nn.Module):
    """nn.MultiheadAttention without attention weights: its SDPA call happens inside
    F.multi_head_attention_forward, which the mode sees whole."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


def test_torchs_multihead_attention_is_not_a_call_site_and_convert_makes_it_one() -> None:
    model = SelfAttention().train()
    x = torch.randn(2, 5, 8)
    with cnn.sdpa_kernel(), warnings.catch_warnings():  # strict, yet nothing raises: torch's SDPA runs
        warnings.simplefilter("error")
        ref = model(x)
    converted = cnn.convert(model)
    assert type(converted.mha) is cnn.RoutedMultiheadAttention
    assert not getattr(converted, sdpa_module._ROUTED, False)  # the module asks cuDNN itself: no mode needed
    with pytest.warns(RuntimeWarning, match="runs in torch, not cuDNN"):  # CPU tensors: not covered
        got = converted(x)
    torch.testing.assert_close(got, ref)


def test_convert_with_attention_false_leaves_multihead_attention_as_it_is() -> None:
    assert type(cnn.convert(SelfAttention(), attention=False).mha) is nn.MultiheadAttention


def test_convert_leaves_models_without_attention_and_obeys_attention_false() -> None:
    plain = cnn.convert(nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval())
    assert not getattr(plain, sdpa_module._ROUTED, False)
    unrouted = cnn.convert(Attend().eval(), attention=False)
    assert not getattr(unrouted, sdpa_module._ROUTED, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unrouted(torch.randn(2, 16, 8))
    forced = cnn.convert(nn.Sequential(nn.Linear(8, 8)).eval(), attention=True)
    assert getattr(forced, sdpa_module._ROUTED)


def test_a_forward_that_raises_closes_its_mode() -> None:
    converted = cnn.convert(Fails().eval(), attention=True)
    with pytest.warns(RuntimeWarning), pytest.raises(KeyError, match="after the attention"):
        converted(torch.randn(2, 16, 8))
    assert modes() == 0
