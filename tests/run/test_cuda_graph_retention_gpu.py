"""``pygraph(cuda_graph_retention=...)`` on the GPU: a graph asking for either mode builds, runs
and matches PyTorch on any cuDNN (below 9.28 the attribute is not set: a cuDNN without it would
refuse the plan), directly and from its serialized plan; from 9.28 the built and the restored
plans report the mode asked for."""

from __future__ import annotations

import pytest
import torch

import cudnn
from cudnn.backend import plan as backend_plan

pytestmark = pytest.mark.gpu

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
MODES = [cudnn.cuda_graph_retention.NONE, cudnn.cuda_graph_retention.PER_GRAPH]


def matmul_relu(retention: cudnn.cuda_graph_retention) -> tuple[cudnn.pygraph, dict, torch.Tensor, torch.Tensor]:  # type: ignore[type-arg]
    torch.manual_seed(0)
    a = torch.randn(4, 64, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(4, 32, 48, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT,
                      cuda_graph_retention=retention)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.relu(g.matmul(A, B, name="mm"), name="relu").set_output(True).set_data_type(HALF)
    c = torch.full((4, 64, 48), float("nan"), device="cuda", dtype=torch.float16)
    return g, {A: a, B: b, C: c}, c, torch.relu(a.float() @ b.float())


def run(g: cudnn.pygraph, pack: dict, c: torch.Tensor, ref: torch.Tensor) -> None:  # type: ignore[type-arg]
    c.fill_(float("nan"))
    g.execute(pack, torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8))
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("retention", MODES, ids=lambda m: m.name)
def test_a_graph_with_a_retention_builds_and_runs(retention: cudnn.cuda_graph_retention) -> None:
    g, pack, c, ref = matmul_relu(retention)
    g.build(HEUR)
    run(g, pack, c, ref)
    assert g.get_cuda_graph_retention() is retention
    again = cudnn.pygraph(cuda_graph_retention=retention)
    again.deserialize(g.serialize(as_bytes=True))
    run(again, pack, c, ref)
    if cudnn.backend_version() >= 92800:  # the mode in effect, read back from the finalized plan
        plan = g._pipeline.plans().require_selected().plan
        assert backend_plan.cuda_graph_retention(plan) == int(retention)
        restored = again._pipeline.plans().require_selected().plan
        assert backend_plan.cuda_graph_retention(restored) == int(retention)
