"""Seed 001 (the pygraph notebook) on the GPU.

Its code runs unmodified up to the execute cell, which hands cuDNN an output buffer of
[8, 32, 3, 3] for a graph whose output is [8, 32, 56, 56]: cudnn-py refuses that before
any kernel runs (cuDNN would write 1.6 MB into a 4.6 KB buffer). With the one allocation
corrected, the same code matches PyTorch.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

import cudnn

NOTEBOOK = Path(__file__).resolve().parents[1] / "support" / "seed001_notebook.py"


def test_seed001_verbatim_builds_prints_and_refuses_the_undersized_output(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(cudnn.ExecutionInputError, match=r"expects dims \[8, 32, 56, 56\].*shape \[8, 32, 3, 3\]"):
        runpy.run_path(str(NOTEBOOK), run_name="seed001")
    printed = capsys.readouterr().out
    assert '"tag": "CONV_FPROP"' in printed and '"dim": [8,32,56,56]' in printed
    assert f"cudnn.backend_version(): {cudnn.backend_version()}" in printed


def test_seed001_with_a_full_size_output_matches_pytorch(tmp_path: Path) -> None:
    code = NOTEBOOK.read_text().replace("8, 32, 3, 3, requires_grad", "8, 32, 56, 56, requires_grad")
    code = code.replace("print(Y_gpu)", "RESULT = (X_gpu, W_gpu, Y_gpu)")
    script = tmp_path / "seed001_fixed.py"
    script.write_text(code)
    ns = runpy.run_path(str(script), run_name="seed001_fixed")
    x, w, y = ns["RESULT"]
    torch.cuda.synchronize()
    ref = torch.nn.functional.conv2d(x.float(), w.float(), padding=1)
    torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=1e-2)
