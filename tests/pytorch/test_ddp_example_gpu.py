"""examples/torch_ddp_train.py under torchrun on one and on two GPUs. Both runs train on the same
global batches (each of two processes on half of each), so the two-GPU loss curve follows the
one-GPU curve: the GPT stack's up to rounding, ResNet-50's up to what batch-norm statistics
taken per GPU change. Needs two GPUs; step times are printed, never asserted."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "torch_ddp_train.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    filter(None, [str(ROOT / "src"), str(ROOT / "examples"), os.environ.get("PYTHONPATH")]))}
SMALL = ["--steps", "6", "--layers", "1", "--gpt-batch", "4", "--resnet-batch", "64", "--image", "64"]
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two GPUs")]


def example() -> object:
    """The example as a module (its `compare` reads a run log)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        spec = importlib.util.spec_from_file_location("torch_ddp_train", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return module


def train(log: Path, world: int, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
                          str(EXAMPLE), *SMALL, *args, "--jsonl", str(log)],
                         capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    print(out.stdout)


@pytest.mark.parametrize(("wrap", "models"), [  # the largest relative loss difference allowed, per model
    ("ddp", {"gpt": 1e-3, "resnet": 3e-2}),
    ("fsdp", {"gpt": 1e-3}),
])
def test_two_gpu_loss_curve_follows_one_gpu(tmp_path: Path, wrap: str, models: dict[str, float]) -> None:
    log = tmp_path / "runs.jsonl"
    extra = ["--models", ",".join(models)] + (["--fsdp"] if wrap == "fsdp" else [])
    for world in (1, 2):
        train(log, world, *extra)
    rows = example().compare(str(log))  # type: ignore[attr-defined]
    assert sorted((r["model"], r["world"]) for r in rows) == sorted((m, w) for m in models for w in (1, 2))
    for r in rows:
        assert r["wrap"] == wrap and r["modules"] == "cudnn"
        assert len(r["losses"]) == 6 and all(math.isfinite(v) for v in r["losses"]), r
        if r["world"] == 2:
            assert r["max_rel_dloss"] <= models[r["model"]], (r["model"], r["max_rel_dloss"], r["losses"])
            print(f"{wrap} {r['model']}: two GPUs vs one: largest relative loss difference {r['max_rel_dloss']:.2e}, "
                  f"step {r['median_step_ms']:.1f} ms ({r['scaling']:.2f}x)")
