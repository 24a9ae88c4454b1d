"""Compiled kernels across processes, on the GPU: a dynamic-shape conv + bias + ReLU graph built
from the disk cache in a new process uses its stored kernels; a user's kernel cache saved in one
process and loaded in another serves a build there; damaged and foreign kernel files make the
build compile instead (logged once), never fail it or run a wrong kernel. Every output is
compared with PyTorch (fp16 conv: atol 2e-1 rtol 2e-2 against an fp32 reference on the same
fp16 inputs; bf16 attention: atol 5e-2 rtol 2e-2). Each phase runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _conv(dynamic: bool, kernel_cache=None):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F

    import cudnn

    dt = cudnn.data_type
    torch.manual_seed(0)
    x = torch.randn(8, 64, 28, 28, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT,
                      is_dynamic_shape_enabled=dynamic, kernel_cache=kernel_cache)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    y = torch.full((8, 64, 28, 28), float("nan"), device="cuda", dtype=torch.float16).to(
        memory_format=torch.channels_last)
    ref = F.relu(F.conv2d(x.float(), w.float(), padding=1) + b.float())
    return g, {X: x, W: w, B: b, Y: y}, y, ref, (2e-1, 2e-2)


def _sdpa():  # type: ignore[no-untyped-def]
    import torch.nn.functional as F

    import cudnn

    dt = cudnn.data_type
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    O, _ = g.sdpa(Q, K, V, generate_stats=False, attn_scale=0.125, use_causal_mask=True)
    O.set_output(True).set_dim([2, 4, 256, 64]).set_stride([4 * 256 * 64, 256 * 64, 64, 1])
    o = torch.full((2, 4, 256, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.125)
    return g, {Q: q, K: k, V: v, O: o}, o, ref, (5e-2, 2e-2)


def _run(g, pack, out, ref, tol) -> float:  # type: ignore[no-untyped-def]
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()
    assert torch.allclose(out.float(), ref, atol=tol[0], rtol=tol[1]), (out.float() - ref).abs().max().item()
    return (out.float() - ref).abs().max().item()


def child(phase: str, folder: str) -> None:
    """One phase in this fresh process; prints a JSON line of what the caches did."""
    import logging

    import cudnn

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    heur = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
    out: dict[str, object] = {}
    if phase in ("write", "read"):
        for name, make in (("conv_dynamic", lambda: _conv(True)), ("conv_static", lambda: _conv(False)),
                           ("sdpa", _sdpa)):
            before = (cudnn.plan_cache.disk_hits, cudnn.plan_cache.kernel_hits)
            g, pack, y, ref, tol = make()
            g.build(heur)
            _run(g, pack, y, ref, tol)
            out[name] = [cudnn.plan_cache.disk_hits - before[0], cudnn.plan_cache.kernel_hits - before[1]]
    elif phase == "save":
        kc = cudnn.create_kernel_cache()
        g, pack, y, ref, tol = _conv(False, kc)
        g.build(heur)
        _run(g, pack, y, ref, tol)
        kc.save(Path(folder) / "user.kc")
        out["saved"] = (Path(folder) / "user.kc").stat().st_size
    elif phase == "load":
        kc = cudnn.create_kernel_cache().load(Path(folder) / "user.kc")
        g, pack, y, ref, tol = _conv(False, kc)
        g.build(heur)
        out["maxerr"] = _run(g, pack, y, ref, tol)
    print(json.dumps(out))


def spawn(phase: str, folder: Path) -> tuple[dict, str]:  # type: ignore[type-arg]
    env = {**os.environ, "CUDNN_PY_CACHE_DIR": str(folder / "cache"), "PYTHONPATH": SRC}
    proc = subprocess.run([sys.executable, __file__, phase, str(folder)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.gpu
def test_disk_cache_restores_kernels_in_a_new_process(tmp_path: Path) -> None:
    first, _ = spawn("write", tmp_path)
    assert first == {"conv_dynamic": [0, 0], "conv_static": [0, 0], "sdpa": [0, 0]}
    kernels = list((tmp_path / "cache" / "kernels").glob("*.json"))
    assert len(kernels) == 1, kernels  # only the dynamic-shape graph has a kernel cache (cuDNN fills no other)
    second, _ = spawn("read", tmp_path)
    assert second == {"conv_dynamic": [1, 1], "conv_static": [1, 0], "sdpa": [1, 0]}

    # damaged kernels: the build compiles (plan rebuilt), logs once, and writes them again
    kernels[0].write_bytes(kernels[0].read_bytes()[:1000])
    third, log = spawn("read", tmp_path)
    assert third == {"conv_dynamic": [0, 0], "conv_static": [1, 0], "sdpa": [1, 0]}
    assert log.count("kernel cache: ignoring") == 1, log
    fourth, _ = spawn("read", tmp_path)
    assert fourth["conv_dynamic"] == [1, 1]

    # kernels from another GPU: refused by the marker, never handed to cuDNN
    data = json.loads(kernels[0].read_text())
    data["device_name"] = "Some Other GPU"
    kernels[0].write_text(json.dumps(data))
    fifth, log = spawn("read", tmp_path)
    assert fifth["conv_dynamic"] == [0, 0]
    assert "Some Other GPU" in log

    # a cuDNN-level damage inside a well-formed file: cuDNN refuses it, the build compiles
    data = json.loads(kernels[0].read_text())
    data["kernels"] = data["kernels"][: len(data["kernels"]) // 2]
    kernels[0].write_text(json.dumps(data))
    sixth, log = spawn("read", tmp_path)
    assert sixth["conv_dynamic"] == [0, 0]
    assert "refused the stored kernels" in log or "did not accept" in log, log


@pytest.mark.gpu
def test_user_kernel_cache_save_and_load_across_processes(tmp_path: Path) -> None:
    saved, _ = spawn("save", tmp_path)
    assert saved["saved"] > 0
    loaded, _ = spawn("load", tmp_path)
    assert loaded["maxerr"] >= 0


@pytest.mark.gpu
def test_read_only_cache_directory_still_builds(tmp_path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    (tmp_path / "cache").mkdir()
    os.chmod(tmp_path / "cache", 0o500)
    try:
        first, _ = spawn("write", tmp_path)
        assert first["conv_dynamic"] == [0, 0]
    finally:
        os.chmod(tmp_path / "cache", 0o700)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
