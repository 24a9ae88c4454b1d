"""1.32's op arguments on the GPU: sdpa's kv_mask and attn_scale_prefolded against a PyTorch
float32 reference (fp16/bf16: atol 2e-2), the 1.32 positional order executing like v1.23's,
and rope where the loaded cuDNN has it (>= 9.24)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import cudnn

pytestmark = pytest.mark.gpu
DT = cudnn.data_type
TORCH_DT = {DT.HALF: torch.float16, DT.BFLOAT16: torch.bfloat16}
TOL = {"atol": 2e-2, "rtol": 2e-2}


def run(g: Any, binds: dict[Any, torch.Tensor]) -> None:
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({t: x.data_ptr() for t, x in binds.items()}, ws.data_ptr())
    torch.cuda.synchronize()


def like(g: Any, x: torch.Tensor, name: str, dtype: Any) -> Any:
    return g.tensor(name=name, dim=list(x.shape), stride=list(x.stride()), data_type=dtype)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
              add: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) * scale
    if add is not None:
        s = s + add
    stats = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.softmax(s, dim=-1) @ v.float(), stats


@pytest.mark.parametrize("io", [DT.HALF, DT.BFLOAT16])
@pytest.mark.parametrize("mask_kind", ["inf", "finite"])
def test_sdpa_kv_mask(io: Any, mask_kind: str) -> None:
    torch.manual_seed(0)
    b, h, s, d = 2, 4, 128, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=TORCH_DT[io]) for _ in range(3))
    keep = torch.rand(b, 1, 1, s, device="cuda") > 0.3
    keep[..., 0] = True  # no query with every key masked
    masked = -math.inf if mask_kind == "inf" else -1e9  # the models' finite fold works the same
    mask, mdt = torch.where(keep, 0.0, masked).float().contiguous(), DT.FLOAT
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    Q, K, V = like(g, q, "q", io), like(g, k, "k", io), like(g, v, "v", io)
    M = like(g, mask, "mask", mdt)
    scale = 1.0 / math.sqrt(d)
    O, S = g.sdpa(  # noqa: E741 - the documented port names
        Q, K, V, generate_stats=True, attn_scale=scale, kv_mask=M)
    O.set_output(True)
    S.set_output(True)
    o = torch.empty(b, h, s, d, device="cuda", dtype=TORCH_DT[io])
    st = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    run(g, {Q: q, K: k, V: v, M: mask, O: o, S: st})
    ref_o, ref_s = reference(q, k, v, scale, torch.where(keep, 0.0, -math.inf))
    torch.testing.assert_close(o.float(), ref_o, **TOL)
    torch.testing.assert_close(st, ref_s, **TOL)


@pytest.mark.parametrize("io", [DT.HALF, DT.BFLOAT16])
def test_sdpa_attn_scale_prefolded(io: Any) -> None:
    torch.manual_seed(1)
    b, h, s, d = 2, 4, 128, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda") for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    q_folded = (q * scale * math.log2(math.e)).to(TORCH_DT[io])
    k, v = k.to(TORCH_DT[io]), v.to(TORCH_DT[io])
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    Q, K, V = like(g, q_folded, "q", io), like(g, k, "k", io), like(g, v, "v", io)
    O, S = g.sdpa(  # noqa: E741 - the documented port names
        Q, K, V, generate_stats=True, attn_scale_prefolded=True)
    O.set_output(True)
    S.set_output(True)
    o = torch.empty(b, h, s, d, device="cuda", dtype=TORCH_DT[io])
    st = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    run(g, {Q: q_folded, K: k, V: v, O: o, S: st})
    ref_o, ref_s = reference(q.to(TORCH_DT[io]), k, v, scale, None)
    torch.testing.assert_close(o.float(), ref_o, **TOL)
    torch.testing.assert_close(st, ref_s, **TOL)


def test_layernorm_in_132_order() -> None:
    torch.manual_seed(2)
    x = torch.randn(64, 256, 1, 1, device="cuda", dtype=torch.float16)
    w = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.float16)
    bias = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=DT.HALF, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X, W, B = like(g, x, "x", DT.HALF), like(g, w, "w", DT.HALF), like(g, bias, "b", DT.HALF)
    Y, _, _ = g.layernorm(X, W, B, 1e-5, cudnn.norm_forward_phase.INFERENCE)
    Y.set_output(True)
    y = torch.empty_like(x)
    run(g, {X: x, W: w, B: bias, Y: y})
    ref = torch.nn.functional.layer_norm(x.float().view(64, 256), [256], w.float().view(256),
                                         bias.float().view(256), 1e-5).view(64, 256, 1, 1)
    torch.testing.assert_close(y.float(), ref, **TOL)


def test_conv_fprop_in_132_order() -> None:
    torch.manual_seed(3)
    x = torch.randn(2, 16, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(32, 16, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=DT.HALF, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X, W = like(g, x, "x", DT.HALF), like(g, w, "w", DT.HALF)
    Y = g.conv_fprop(X, W, None, [1, 1], [1, 1], [2, 2], [1, 1], cudnn.convolution_mode.CROSS_CORRELATION)
    Y.set_output(True)
    g.validate()
    y = torch.empty(Y.get_dim(), device="cuda", dtype=torch.float16).as_strided(Y.get_dim(), Y.get_stride())
    run(g, {X: x, W: w, Y: y})
    ref = torch.nn.functional.conv2d(x.float(), w.float(), stride=2, padding=1)
    torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=1e-2)


def test_rope_where_the_loaded_cudnn_has_it() -> None:
    b, h, s, d = 2, 4, 32, 64
    x = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device="cuda").float() / d))
    angles = torch.outer(torch.arange(s, device="cuda").float(), inv)
    freqs = torch.cat([angles, angles], dim=-1).view(s, 1, 1, d).contiguous()
    g = cudnn.pygraph(io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X, F = like(g, x, "x", DT.BFLOAT16), like(g, freqs, "f", DT.FLOAT)
    Y = g.rope(X, F)
    Y.set_output(True)
    if cudnn.backend_version() < 92400:
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"needs cuDNN >= 9\.24\.0"):
            g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return
    y = torch.empty_like(x)
    run(g, {X: x, F: freqs, Y: y})
    cos, sin = freqs.view(1, 1, s, d).cos(), freqs.view(1, 1, s, d).sin()
    xf = x.float()
    rotate_half = torch.cat([-xf[..., d // 2:], xf[..., : d // 2]], dim=-1)
    ref = xf * cos + rotate_half * sin  # the half-split convention; cuDNN's headers do not name one
    torch.testing.assert_close(y.float(), ref, **TOL)
