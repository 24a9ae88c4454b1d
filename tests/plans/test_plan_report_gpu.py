"""describe_plans() on the GPU: the table agrees with the plan queries of the graph, carries the
autotune times, and autotuning shows progress when asked. The graph's output is checked against
PyTorch (fp16 conv + bias + ReLU, atol 2e-2, rtol 1e-2: a few fp16 ulps of outputs of size ~10)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn.functional as F

import cudnn

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
pytestmark = pytest.mark.gpu


def conv_bias_relu():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    n, c, h, k = 8, 64, 32, 64
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).half().to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    g.validate()  # Y's dims and strides are inferred here
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    ref = torch.relu(F.conv2d(x.float(), w.float(), padding=1) + b.float())
    return g, {X: x, W: w, B: b, Y: y}, y, ref


def run_and_check(g: cudnn.pygraph, pack: dict, y: torch.Tensor, ref: torch.Tensor) -> None:
    y.fill_(float("nan"))
    g.execute(pack, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8))
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=1e-2)


def test_the_report_agrees_with_the_plan_queries() -> None:
    g, pack, y, ref = conv_bias_relu()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    before = g.describe_plans()
    assert len(before) == g.get_execution_plan_count() > 0
    assert all(r.status == "not built" and r.workspace is None for r in before)
    g.build_plans(cudnn.build_plan_policy.ALL)
    report = g.describe_plans()
    assert [r.name for r in report] == [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    built = [r for r in report if r.status in ("built", "selected")]
    assert built and [r.status for r in report].count("selected") == 1
    for r in built:
        assert r.workspace == g.get_workspace_size_plan_at_index(r.index)
        assert isinstance(r.engine, int) and r.name.startswith(f"eng{r.engine}")
        notes = {n.name for n in g.get_behavior_notes_for_plan_at_index(r.index)}
        assert set(r.behavior_notes) == notes
    for r in report:
        assert r.status in ("built", "selected") or r.status.startswith("failed: ")
    text = str(report)
    assert all(r.name in text for r in report) and "no times" in text
    ET.fromstring(report._repr_html_())
    run_and_check(g, pack, y, ref)


def test_autotune_times_appear_in_the_report_and_progress_shows_when_asked(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    g, pack, y, ref = conv_bias_relu()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    table = g.autotune(pack, warmup=1, repeats=3, progress=True)
    assert "autotuning" in capsys.readouterr().err  # tqdm's bar or the plain line
    report = g.describe_plans()
    timed = {r.name: r.time_ms for r in table if r.time_ms is not None}
    assert timed and {r.name: r.time_ms for r in report if r.time_ms is not None} == timed
    selected = [r for r in report if r.status == "selected"]
    assert len(selected) == 1 and selected[0].name == table.best.name
    assert "no times" not in str(report) and "us" in str(report)
    run_and_check(g, pack, y, ref)
    quiet = g.autotune(pack, warmup=0, repeats=1, progress=False)
    assert quiet and capsys.readouterr().err == ""
