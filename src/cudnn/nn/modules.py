"""Modules whose forward is a `cudnn.ops` call. Each subclasses the torch module it replaces
(``isinstance`` checks, ``reset_parameters``, ``extra_repr`` and state-dict keys carry over)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..ops.conv import conv_padding
from .sdpa import attention_with_fallback

ACTS = ("none", "relu", "gelu", "silu")


class Conv2dBiasAct(nn.Conv2d):
    """``act(conv2d(x) + bias)`` as one fused cuDNN graph; parameters, state dict and padding
    options as ``nn.Conv2d`` (a ``padding_mode`` other than "zeros" pads with ``F.pad`` first,
    as torch's module does)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: str | int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, act: str = "none") -> None:
        if act not in ACTS:
            raise ops.OpError(f"cudnn.nn.Conv2dBiasAct: act: expected one of {ACTS}, got {act!r}")
        if padding_mode in ACTS:
            raise ops.OpError(f"cudnn.nn.Conv2dBiasAct: padding_mode: got {padding_mode!r}, an activation; the "
                              f"arguments follow nn.Conv2d's order, so give the activation as act={padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device=device, dtype=dtype)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """conv(x) + bias, then the activation, in one cuDNN graph (cudnn.ops.conv2d_bias_act)."""
        if self.padding_mode == "zeros":
            return ops.conv2d_bias_act(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                                       self.groups, self.act)
        (ph, pw), (left, right, top, bottom) = conv_padding("conv2d_bias_act", self.padding, self.weight,
                                                            self.stride, self.dilation)
        x = F.pad(x, (pw + left, pw + right, ph + top, ph + bottom), mode=self.padding_mode)
        return ops.conv2d_bias_act(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups, self.act)

    def extra_repr(self) -> str:
        """The torch Conv2d description with the activation."""
        return f"{super().extra_repr()}, act={self.act!r}"


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` through cuDNN's layer-norm graphs (training saves the statistics for
    cuDNN's backward)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Layer norm of x over normalized_shape through cudnn.ops.layer_norm."""
        return ops.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` through cuDNN's RMS-norm graphs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """RMS norm of x over normalized_shape through cudnn.ops.rms_norm."""
        return ops.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class MultiheadAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` (batch_first or not, same parameters and state dict) whose
    attention is `cudnn.ops.scaled_dot_product_attention` (dropout in training, as torch's, and a
    key-padding mask merged into the attention mask, as torch merges them). Supported: equal
    embed dims for q, k and v (packed in_proj_weight), no bias_k / bias_v / add_zero_attn, and
    no attention weights returned (``need_weights=False``); the rest raises naming the argument."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = False,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, None]:
        """The attention output and None (no weights), as nn.MultiheadAttention with need_weights=False."""
        where = "cudnn.nn.MultiheadAttention"
        if need_weights:
            raise ops.OpError(f"{where}: need_weights: attention weights are not computed by cuDNN's fused "
                              "attention; pass need_weights=False")
        if not _packed(self):
            raise ops.OpError(f"{where}: kdim/vdim, add_bias_kv and add_zero_attn are not supported")
        if not _batched_or_not(query, key, value):
            raise ops.OpError(f"{where}: query/key/value: expected three 3-D (batched) or three 2-D (unbatched) "
                              f"tensors, got shapes {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        if key_padding_mask is not None:
            _check_padding_mask(where, key_padding_mask, key, self.batch_first)
        causal = is_causal and attn_mask is None
        return _attend(self, query, key, value, attn_mask, causal, self.dropout if self.training else 0.0,
                       ops.scaled_dot_product_attention, key_padding_mask), None


class RoutedMultiheadAttention(nn.MultiheadAttention):
    """What `convert` puts in place of an ``nn.MultiheadAttention`` (same parameters, state dict
    and call signature, torch's defaults included). A call with ``need_weights=False`` runs its
    projections and cuDNN's attention (dropout in training, a key-padding mask merged into the
    attention mask), or torch's SDPA after a warning naming why for a call cuDNN does not cover
    (`sdpa.attention_with_fallback`); any other call (attention weights wanted, kdim / vdim,
    bias_k / bias_v, add_zero_attn) is torch's module unchanged."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As ``nn.MultiheadAttention.forward``; see the class for which calls reach SDPA."""
        if (need_weights or not _packed(self) or query.is_nested
                or not _batched_or_not(query, key, value)
                or (is_causal and attn_mask is None)  # torch's module says what it needs
                or (key_padding_mask is not None and not _padding_mask_fits(key_padding_mask, key, self.batch_first))):
            return super().forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                                   average_attn_weights, is_causal)
        if is_causal and key_padding_mask is None:  # torch's module: the mask is a hint, and SDPA applies
            attn_mask, causal = None, True          # causality itself (with a padding mask, the two merge)
        else:
            causal = False
        return _attend(self, query, key, value, attn_mask, causal, self.dropout if self.training else 0.0,
                       attention_with_fallback, key_padding_mask), None


def _packed(m: nn.MultiheadAttention) -> bool:
    """One packed in-projection for q, k and v, and nothing added to k and v."""
    return m.kdim == m.vdim == m.embed_dim and m.in_proj_weight is not None and m.bias_k is None \
        and not m.add_zero_attn


def _batched_or_not(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Three 3-D tensors (batched) or three 2-D ones (unbatched), as torch's module takes them."""
    return query.dim() == key.dim() == value.dim() and query.dim() in (2, 3)


def _padding_mask_fits(mask: torch.Tensor, key: torch.Tensor, batch_first: bool) -> bool:
    """A key-padding mask of the shape torch's module takes: [B, S] for a batched key, [S] for
    an unbatched one, boolean or floating point."""
    if key.dim() == 2:
        expected: tuple[int, ...] = (key.shape[0],)
    else:
        expected = (key.shape[0], key.shape[1]) if batch_first else (key.shape[1], key.shape[0])
    return isinstance(mask, torch.Tensor) and tuple(mask.shape) == expected \
        and (mask.dtype == torch.bool or mask.is_floating_point())


def _check_padding_mask(where: str, mask: torch.Tensor, key: torch.Tensor, batch_first: bool) -> None:
    if not _padding_mask_fits(mask, key, batch_first):
        want = "[S]" if key.dim() == 2 else "[B, S]"
        got = f"shape {tuple(mask.shape)}, dtype {str(mask.dtype).removeprefix('torch.')}" \
            if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ops.OpError(f"{where}: key_padding_mask: expected a boolean or float {want} tensor (the key's "
                          f"batch and sequence), got {got}")


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask as torch's module reads it, as an additive one: a boolean mask's True is -inf."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    return mask.to(dtype)


def _attend(m: nn.MultiheadAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            attn_mask: torch.Tensor | None, is_causal: bool, dropout_p: float,
            attention: Any, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``m``'s computation (packed in-projection, heads, ``attention`` as SDPA, out-projection)
    for the calls both modules above send to SDPA; torch's mask conventions are turned into
    SDPA's (a [B * H, L, S] mask to [B, H, L, S]; a boolean mask's True means "masked out"; a
    key-padding mask is added to the attention mask as a [B, 1, 1, S] one, as torch merges them)."""
    shared = query is key and key is value  # self-attention: one GEMM for the three projections
    unbatched = query.dim() == 2  # [L, E]: one sequence, whatever batch_first says
    if unbatched or not m.batch_first:
        to_batch_first = (lambda t: t.unsqueeze(0)) if unbatched else (lambda t: t.transpose(0, 1))
        query = to_batch_first(query)
        key, value = (query, query) if shared else (to_batch_first(key), to_batch_first(value))
    b, sq, e = query.shape
    h, d = m.num_heads, e // m.num_heads
    w, bias = m.in_proj_weight, m.in_proj_bias
    if shared:
        q, k, v = F.linear(query, w, bias).view(b, sq, 3, h, d).permute(2, 0, 3, 1, 4)
    else:
        bq, bk, bv = (None, None, None) if bias is None else bias.chunk(3)
        wq, wk, wv = w.chunk(3)
        q = F.linear(query, wq, bq).view(b, sq, h, d).transpose(1, 2)
        k = F.linear(key, wk, bk).view(b, key.shape[1], h, d).transpose(1, 2)
        v = F.linear(value, wv, bv).view(b, value.shape[1], h, d).transpose(1, 2)
    if attn_mask is not None and attn_mask.dim() == 3:
        attn_mask = attn_mask.view(b, h, *attn_mask.shape[1:])
    if key_padding_mask is not None:
        padding = _additive(key_padding_mask, q.dtype).view(b, 1, 1, key.shape[1])
        if is_causal:  # SDPA takes a mask or causality, not both: the causal mask joins the padding
            attn_mask = torch.ones(sq, key.shape[1], dtype=torch.bool, device=q.device).triu(1)
            is_causal = False
        attn_mask = padding if attn_mask is None else _additive(attn_mask, q.dtype) + padding
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask
    kwargs = {"dropout_p": dropout_p} if dropout_p else {}
    o = attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kwargs)
    o = F.linear(o.transpose(1, 2).reshape(b, sq, e), m.out_proj.weight, m.out_proj.bias)
    if unbatched:
        return o.squeeze(0)
    return o if m.batch_first else o.transpose(0, 1)
