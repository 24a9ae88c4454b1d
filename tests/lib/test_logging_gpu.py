"""On the GPU: cuDNN's own log lines reach a Python logging handler (cudnn.set_log_level,
before or after libcudnn loads, with no CUDNN_LOGLEVEL_DBG), nothing is printed by default,
and a GPU hidden with CUDA_VISIBLE_DEVICES="" is reported as "no device"."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cudnn

SRC = str(Path(__file__).resolve().parents[2] / "src")

# A conv + ReLU graph built and run on the GPU, checked against PyTorch; `records` collects
# what reaches the `cudnn.libcudnn` logger.
CONV = """
import json, logging, sys
import torch
import cudnn
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))
logging.getLogger("cudnn.libcudnn").addHandler(Keep())
def conv_relu():
    torch.manual_seed(0)
    x = torch.randn(4, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.relu(g.conv_fprop(X, W, padding=[1, 1])).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({X: x, W: w, Y: y}, ws)
    torch.cuda.synchronize()
    ref = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), padding=1))
    return float((y.float() - ref).abs().max())
"""


def _run(code: str, **env_extra: str) -> tuple[dict[str, object], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_LOG")}
    env.update(PYTHONPATH=SRC, CUDNN_PY_PLAN_CACHE="0", **env_extra)
    program = CONV + code + "\nprint(json.dumps(result))\n"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=180,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1]), out.stderr


def test_cudnn_log_lines_reach_a_handler_during_a_build_in_this_process() -> None:
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    handler = Keep()
    logger = logging.getLogger("cudnn.libcudnn")
    logger.addHandler(handler)
    top = logging.getLogger("cudnn")
    level, handlers = top.level, list(top.handlers)
    try:
        cudnn.set_log_level("INFO")
        torch.manual_seed(0)
        a = torch.randn(2, 64, 32, device="cuda", dtype=torch.float16)
        b = torch.randn(2, 32, 48, device="cuda", dtype=torch.float16)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
        A, B = g.tensor_like(a), g.tensor_like(b)
        C = g.matmul(A, B).set_output(True)
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        c = torch.empty(C.get_dim(), device="cuda", dtype=torch.float16)
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        g.execute({A: a, B: b, C: c}, ws)
        torch.cuda.synchronize()
    finally:
        cudnn.set_log_level("OFF")  # cuDNN's mask back to errors only, then the loggers as they were
        logger.removeHandler(handler)
        top.setLevel(level)
        for h in top.handlers[:]:
            if h not in handlers:
                top.removeHandler(h)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)
    text = [r.getMessage() for r in got if r.levelno == logging.INFO]
    assert any("cudnnBackendFinalize()" in m and "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR" in m for m in text)
    assert any("cudnnBackendExecute()" in m for m in text)
    assert all(getattr(r, "cudnn_severity", None) in (0, 1, 2, 3) for r in got)


def test_asked_before_loading_no_env_var() -> None:
    result, stderr = _run("cudnn.set_log_level('INFO')\nerr = conv_relu()\nresult = {'err': err, 'records': records}\n")
    assert result["err"] < 5e-2  # type: ignore[operator]
    messages = [m for lv, m in result["records"]]  # type: ignore[union-attr]
    assert any("cudnnCreate()" in m for m in messages) and any("cudnnBackendExecute()" in m for m in messages)
    assert "I! CuDNN" not in stderr and "i! " not in stderr  # cuDNN's own sink stayed silent


def test_asked_after_loading_no_env_var() -> None:
    result, _ = _run(
        "cudnn.backend_version(); cudnn.create_handle()\n"  # loaded and initialised before asking
        "before = list(records)\n"
        "cudnn.set_log_level('INFO')\nerr = conv_relu()\n"
        "result = {'err': err, 'before': before, 'records': records}\n"
    )
    assert result["before"] == [] and result["err"] < 5e-2  # type: ignore[operator]
    assert any("cudnnBackendExecute()" in m for lv, m in result["records"])  # type: ignore[union-attr]


def test_warning_level_passes_cudnn_errors_only() -> None:
    result, _ = _run(
        "cudnn.set_log_level('WARNING')\nerr = conv_relu()\nok = list(records)\n"
        "from cudnn.backend import Descriptor\n"
        "from cudnn._lib.enums import cudnnBackendAttributeName_t as A, cudnnBackendAttributeType_t as T\n"
        "try:\n"
        "    Descriptor('CUDNN_BACKEND_TENSOR_DESCRIPTOR', 't').set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, [1], T.CUDNN_TYPE_FLOAT)\n"
        "except cudnn.CudnnBadParamError:\n"
        "    pass\n"
        "result = {'err': err, 'ok': ok, 'records': records}\n"
    )
    levels = {lv for lv, _ in result["records"]}  # type: ignore[union-attr]
    assert "INFO" not in levels
    assert any(lv == "ERROR" and "CUDNN_STATUS_BAD_PARAM" in m for lv, m in result["records"])  # type: ignore[union-attr]


def test_nothing_printed_by_default() -> None:
    result, stderr = _run("err = conv_relu()\nresult = {'err': err, 'records': records}\n")
    assert result["err"] < 5e-2 and result["records"] == []  # type: ignore[operator]
    assert stderr == ""


def test_hidden_gpu_is_reported_as_no_device() -> None:
    code = (
        "from cudnn._lib import cuda\n"
        "d = cuda.diagnose()\n"
        "errors = {}\n"
        "for name, fn in [('create_handle', cudnn.create_handle), ('current_device', cuda.current_device)]:\n"
        "    try:\n"
        "        fn(); errors[name] = None\n"
        "    except cudnn.CudaUnavailableError as exc:\n"
        "        errors[name] = [exc.reason, str(exc)]\n"
        "result = {'reason': d.reason, 'detail': d.detail, 'driver': d.driver_version, 'errors': errors}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_LOG")}
    env.update(PYTHONPATH=SRC, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", "import json\nimport cudnn\n" + code + "print(json.dumps(result))"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["reason"] == "no_device" and result["driver"] > 0, result
    assert "found no GPU (CUDA_VISIBLE_DEVICES='')" in result["detail"]
    for name, err in result["errors"].items():
        assert err is not None and err[0] == "no_device", (name, err)


def test_a_build_says_what_it_did_in_one_info_sentence(caplog: pytest.LogCaptureFixture) -> None:
    """At INFO, a build is one sentence of ``cudnn.graph``: the graph, its nodes, the plan chosen
    and where it came from; the graph's JSON is not at INFO."""
    torch.manual_seed(0)
    a = torch.randn(2, 64, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(2, 32, 48, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(name="logged_mm", io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B).set_output(True)
    with caplog.at_level(logging.INFO, logger="cudnn"):
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    said = [r.getMessage() for r in caplog.records if r.name == "cudnn.graph"]
    assert len(said) == 1, said
    assert re.fullmatch(r"graph 'logged_mm' built in [0-9.]+ ms: 1 node \(matmul\), plan \S+ from "
                        r"(heur_mode\.(A|FALLBACK)|cache|autotuned cache)", said[0]), said
    assert not any("{" in r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
    c = torch.empty(C.get_dim(), device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({A: a, B: b, C: c}, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)
