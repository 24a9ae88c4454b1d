"""Device properties on the GPU: serialize the GPU's properties, build a plan from that JSON in
another process (handle-less, and with no visible GPU at all where the backend allows it),
serialize the plan, then execute it here and compare with PyTorch (fp32 conv, rtol/atol 1e-3,
TF32 allowed by cuDNN: 1e-2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import cudnn

pytestmark = pytest.mark.skipif(cudnn.backend_version() < 90800, reason="DEVICEPROP needs cuDNN >= 9.8")

N, C, H, W, K = 2, 16, 8, 8, 32

BUILD = textwrap.dedent("""
    import sys, cudnn
    props = cudnn.create_device_properties(open(sys.argv[1]).read())
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, device_property=props)
    N, C, H, W, K = {dims}
    x = g.tensor(name="X", dim=[N, C, H, W], stride=[C * H * W, 1, C * W, C], uid=1)
    w = g.tensor(name="W", dim=[K, C, 3, 3], stride=[C * 9, 1, C * 3, C], uid=2)
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y.set_output(True).set_uid(3)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    open(sys.argv[2], "wb").write(g.serialize(as_bytes=True))
    print("built", g.get_plan_name_at_index(0) if hasattr(g, "get_plan_name_at_index") else "")
""").format(dims=(N, C, H, W, K))


@pytest.fixture(scope="module")
def props_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    props = cudnn.create_device_properties(torch.cuda.current_device())
    text = props.serialize()
    assert json.loads(text), "DEVICEPROP JSON is an object"
    again = cudnn.create_device_properties(text)
    assert again.serialize() == text, "JSON -> properties -> JSON is the identity"
    major, minor = torch.cuda.get_device_capability()
    assert again.sm_version == major * 10 + minor
    path = tmp_path_factory.mktemp("devprop") / "props.json"
    path.write_text(text)
    out = os.environ.get("OUT")
    if out:
        Path(out, "deviceprop.json").write_text(text)
    return path


def _build_elsewhere(props: Path, plan: Path, hide_gpu: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if hide_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env["CUDNN_PY_PLAN_CACHE"] = "0"
    return subprocess.run([sys.executable, "-c", BUILD, str(props), str(plan)], env=env, capture_output=True,
                          text=True, timeout=180)


def _run_plan(plan: bytes) -> None:
    x = torch.randn(N, C, H, W, device="cuda").to(memory_format=torch.channels_last)
    w = torch.randn(K, C, 3, 3, device="cuda").to(memory_format=torch.channels_last)
    ref = F.conv2d(x, w, padding=1)
    handle = cudnn.create_handle()
    try:
        cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
        g = cudnn.pygraph()
        g.deserialize(handle, plan)
        y = torch.full_like(ref, float("nan")).contiguous(memory_format=torch.channels_last)
        ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
        g.execute({1: x, 2: w, 3: y}, ws, handle=handle)
        torch.cuda.synchronize()
    finally:
        cudnn.destroy_handle(handle)
    torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)


def test_handle_less_build_in_another_process_runs_here(props_json: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.bin"
    done = _build_elsewhere(props_json, plan, hide_gpu=False)
    assert done.returncode == 0, done.stderr[-3000:]
    _run_plan(plan.read_bytes())


def test_build_with_no_visible_gpu(props_json: Path, tmp_path: Path) -> None:
    """Where the backend allows it, a plan built with CUDA_VISIBLE_DEVICES="" runs here;
    where it refuses, the test reports cuDNN's refusal (skip with its message)."""
    plan = tmp_path / "plan.bin"
    done = _build_elsewhere(props_json, plan, hide_gpu=True)
    if done.returncode != 0:
        pytest.skip("the backend refused a build with no visible GPU: " + done.stderr.strip().splitlines()[-1][-600:])
    _run_plan(plan.read_bytes())


def test_wrong_architecture_is_refused(props_json: Path) -> None:
    """Properties of another SM make heuristics answer for that SM: building a plan for it here
    either fails or yields a plan this GPU refuses; the properties are not ignored."""
    data = json.loads(props_json.read_text())
    if "deviceVer" not in data:
        pytest.skip(f"the DEVICEPROP JSON has no deviceVer: {sorted(data)}")
    data["deviceVer"] = data["deviceVer"] - 100 if data["deviceVer"] >= 900 else data["deviceVer"] + 100
    props = cudnn.create_device_properties(json.dumps(data, separators=(",", ":")))
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT,
                      device_property=props)
    x = g.tensor(name="X", dim=[N, C, H, W], stride=[C * H * W, 1, C * W, C])
    w = g.tensor(name="W", dim=[K, C, 3, 3], stride=[C * 9, 1, C * 3, C])
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True)
    assert g.sm_version == data["deviceVer"] // 10
    try:
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    except cudnn.CudnnError:
        return  # refused at build
    with pytest.raises((cudnn.SerializationError, cudnn.CudnnError)):
        _run_plan(bytes(g.serialize()))
