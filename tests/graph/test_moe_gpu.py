"""MoE grouped matmul on the GPU against a PyTorch loop of per-expert matmuls (fp32 math on the
fp16/bf16 inputs; tolerance rtol/atol 2e-2 for fp16, 5e-2 for bf16). Outputs start as NaN so
rows cuDNN did not write fail the comparison."""

from __future__ import annotations

import pytest
import torch

import cudnn

pytestmark = pytest.mark.skipif(cudnn.backend_version() < 91500, reason="MoE grouped matmul needs cuDNN >= 9.15")

MODE = cudnn.moe_grouped_matmul_mode
DT = {torch.float16: cudnn.data_type.HALF, torch.bfloat16: cudnn.data_type.BFLOAT16}
TOL = {torch.float16: 2e-2, torch.bfloat16: 5e-2}
E, T, TOPK, K, N = 4, 24, 2, 64, 96


def routing(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """Each of T tokens picks TOPK distinct experts; rows grouped by expert: (token id, k slot,
    expert) per row, and the first row of each expert."""
    g = torch.Generator().manual_seed(seed)
    picks = torch.stack([torch.randperm(E, generator=g)[:TOPK] for _ in range(T)])  # [T, TOPK]
    rows = sorted(((int(picks[t, k]), t, k) for t in range(T) for k in range(TOPK)))
    expert = torch.tensor([r[0] for r in rows])
    token = torch.tensor([r[1] for r in rows], dtype=torch.int32)
    slot = torch.tensor([r[2] for r in rows], dtype=torch.int32)
    counts = torch.bincount(expert, minlength=E)
    starts = [0] + torch.cumsum(counts, 0)[:-1].tolist()
    return token, slot, expert, starts


def graph_run(dtype: torch.dtype, mode: MODE, token: torch.Tensor, weight: torch.Tensor, fto: torch.Tensor,
              index: torch.Tensor | None, ks: torch.Tensor | None, rows_out: int, top_k: int = 0) -> torch.Tensor:
    g = cudnn.pygraph(io_data_type=DT[dtype], compute_data_type=cudnn.data_type.FLOAT)
    t_tok = g.tensor_like(token)
    t_w = g.tensor_like(weight)
    t_fto = g.tensor_like(fto)
    t_idx = None if index is None else g.tensor_like(index)
    t_ks = None if ks is None else g.tensor_like(ks)
    out = g.moe_grouped_matmul(t_tok, t_w, t_fto, t_idx, t_ks, mode, top_k=top_k, name="moe")
    out.set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    assert out.get_dim() == [1, rows_out, N]
    y = torch.full((1, rows_out, N), float("nan"), dtype=dtype, device="cuda")
    pack = {t_tok: token, t_w: weight, t_fto: fto, out: y}
    if t_idx is not None:
        pack[t_idx] = index
    if t_ks is not None:
        pack[t_ks] = ks
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    g.execute(pack, ws)
    torch.cuda.synchronize()
    return y


def weights(dtype: torch.dtype) -> torch.Tensor:
    """[E, K, N] with column-major inner dims (the layout of NVIDIA's samples: w.transpose(1, 2))."""
    return (torch.randn(E, N, K, device="cuda") / K**0.5).to(dtype).transpose(1, 2)


def offsets(starts: list[int]) -> torch.Tensor:
    return torch.tensor(starts, dtype=torch.int32, device="cuda").reshape(E, 1, 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_none_mode(dtype: torch.dtype) -> None:
    _, _, expert, starts = routing()
    rows = len(expert)
    token = torch.randn(1, rows, K, device="cuda").to(dtype)
    w = weights(dtype)
    y = graph_run(dtype, MODE.NONE, token, w, offsets(starts), None, None, rows)
    ref = torch.empty(1, rows, N, device="cuda")
    for e in range(E):
        sel = (expert == e).nonzero().flatten().cuda()
        ref[0, sel] = token[0, sel].float() @ w[e].float()
    torch.testing.assert_close(y.float(), ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gather_mode(dtype: torch.dtype) -> None:
    """Row i of the output is token[token_index[i]] times its expert's weight. On cuDNN <= 9.19
    the GATHER kernel faults (illegal memory access on an H200), so the graph is refused at build."""
    tok_id, _, expert, starts = routing(1)
    if cudnn.backend_version() <= 91900:
        g = cudnn.pygraph(io_data_type=DT[dtype])
        g.moe_grouped_matmul(g.tensor([1, T, K]), g.tensor([E, K, N]), g.tensor([E, 1, 1]), g.tensor([1, 8, 1]),
                             mode=MODE.GATHER).set_output(True)
        with pytest.raises(cudnn.FeatureUnavailableError, match="GATHER mode"):
            g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return
    token = torch.randn(1, T, K, device="cuda").to(dtype)
    w = weights(dtype)
    index = tok_id.reshape(1, -1, 1).cuda()
    y = graph_run(dtype, MODE.GATHER, token, w, offsets(starts), index, None, len(expert))
    ref = torch.stack([token[0, int(tok_id[i])].float() @ w[int(expert[i])].float() for i in range(len(expert))])
    torch.testing.assert_close(y[0].float(), ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_scatter_mode(dtype: torch.dtype) -> None:
    """Grouped row i goes to the (token, k) row of the output: token_index[i] * top_k + token_ks[i]."""
    tok_id, slot, expert, starts = routing(2)
    rows = len(expert)
    token = torch.randn(1, rows, K, device="cuda").to(dtype)
    w = weights(dtype)
    index, ks = tok_id.reshape(1, -1, 1).cuda(), slot.reshape(1, -1, 1).cuda()
    try:
        y = graph_run(dtype, MODE.SCATTER, token, w, offsets(starts), index, ks, rows, top_k=TOPK)
    except cudnn.cudnnGraphNotSupportedError as exc:  # cuDNN 9.19 on an H200: no engine config
        pytest.skip(f"cuDNN {cudnn.backend_version_string()} refuses SCATTER here: {exc}")
    products = torch.stack([token[0, i].float() @ w[int(expert[i])].float() for i in range(rows)])
    layouts = {"token*top_k+k": tok_id.long() * TOPK + slot.long(), "k*T+token": slot.long() * T + tok_id.long()}
    errors = {}
    for name, dest in layouts.items():
        ref = torch.full((rows, N), float("nan"), device="cuda")
        ref[dest.cuda()] = products
        errors[name] = float((y[0].float() - ref).abs().nan_to_num(float("inf")).max())
    assert errors["token*top_k+k"] <= TOL[dtype] * 4, f"max |error| per output layout: {errors}"


def test_experimental_helper_matches_the_graph() -> None:
    from cudnn.experimental import moe_grouped_matmul

    _, _, expert, starts = routing(3)
    rows = len(expert)
    token = torch.randn(1, rows, K, device="cuda", dtype=torch.float16)
    w = weights(torch.float16)
    fto = offsets(starts)
    y = moe_grouped_matmul(token, w, fto, mode="none", top_k=TOPK)
    ref = graph_run(torch.float16, MODE.NONE, token, w, fto, None, None, rows)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)
    with pytest.raises(cudnn.GraphError, match="mode 'gather' needs it"):
        moe_grouped_matmul(token, w, fto, mode="gather")


def test_backward_is_gated_below_9_22() -> None:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF)
    dw = g.moe_grouped_matmul_bwd(g.tensor([1, 32, N]), g.tensor([1, 32, K]), g.tensor([E, 1, 1]), name="dw")
    dw.set_output(True)
    if cudnn.backend_version() >= 92200:
        pytest.skip("cuDNN >= 9.22 has the backward op")
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.22\.0; the loaded libcudnn is 9\."):
        g.build([cudnn.heur_mode.A])
