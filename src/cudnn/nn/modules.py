"""Modules whose forward is a `cudnn.ops` call. Each subclasses the torch module it replaces
(``isinstance`` checks, ``reset_parameters``, ``extra_repr`` and state-dict keys carry over)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops

ACTS = ("none", "relu", "gelu", "silu")


class Conv2dBiasAct(nn.Conv2d):
    """``act(conv2d(x) + bias)`` as one fused cuDNN graph; parameters and state dict as
    ``nn.Conv2d`` (``weight``, ``bias``). Zero padding only."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True, act: str = "none",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        if act not in ACTS:
            raise ops.OpError(f"cudnn.nn.Conv2dBiasAct: act: expected one of {ACTS}, got {act!r}")
        if isinstance(padding, str):
            raise ops.OpError(f"cudnn.nn.Conv2dBiasAct: padding: expected ints, got {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         device=device, dtype=dtype)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """conv(x) + bias, then the activation, in one cuDNN graph (cudnn.ops.conv2d_bias_act)."""
        return ops.conv2d_bias_act(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                                   self.groups, self.act)

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
    attention is `cudnn.ops.scaled_dot_product_attention`. Supported: equal embed dims for q, k
    and v (packed in_proj_weight), no bias_k / bias_v / add_zero_attn, dropout 0, and no
    attention weights returned (``need_weights=False``); the rest raises naming the argument."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = False,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, None]:
        """The attention output and None (no weights), as nn.MultiheadAttention with need_weights=False."""
        where = "cudnn.nn.MultiheadAttention"
        if need_weights:
            raise ops.OpError(f"{where}: need_weights: attention weights are not computed by cuDNN's fused "
                              "attention; pass need_weights=False")
        if not self._qkv_same_embed_dim or self.bias_k is not None or self.add_zero_attn:
            raise ops.OpError(f"{where}: kdim/vdim, add_bias_kv and add_zero_attn are not supported")
        if self.dropout and self.training:
            raise ops.OpError(f"{where}: dropout: only 0.0 is supported in training, got {self.dropout}")
        if key_padding_mask is not None:
            raise ops.OpError(f"{where}: key_padding_mask: not supported; fold it into attn_mask")
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        b, sq, e = query.shape
        h, d = self.num_heads, e // self.num_heads
        w, bias = self.in_proj_weight, self.in_proj_bias
        bq, bk, bv = (None, None, None) if bias is None else bias.chunk(3)
        wq, wk, wv = w.chunk(3)
        q = F.linear(query, wq, bq).view(b, sq, h, d).transpose(1, 2)
        k = F.linear(key, wk, bk).view(b, key.shape[1], h, d).transpose(1, 2)
        v = F.linear(value, wv, bv).view(b, value.shape[1], h, d).transpose(1, 2)
        if attn_mask is not None and attn_mask.dim() == 3:  # [B * H, S_q, S_kv] as torch takes it
            attn_mask = attn_mask.view(b, h, *attn_mask.shape[1:])
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = ~attn_mask  # torch's MHA: True means "not allowed"; SDPA: True means "keep"
        o = ops.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                             is_causal=is_causal and attn_mask is None)
        o = F.linear(o.transpose(1, 2).reshape(b, sq, e), self.out_proj.weight, self.out_proj.bias)
        return (o if self.batch_first else o.transpose(0, 1)), None
