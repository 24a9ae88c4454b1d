"""Logging: cuDNN's own log reaches Python handlers through cudnnSetCallback, switched at run
time by cudnn.set_log_level; nothing is printed to stderr by default."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.libcudnn_marks import needs_libcudnn

import cudnn
from cudnn import log
from cudnn._lib.capi import SEV_ERROR_EN, SEV_INFO_EN, SEV_WARNING_EN

SRC = str(Path(__file__).resolve().parents[2] / "src")


# Run in a fresh interpreter (the callback and the logger levels are process-wide): records of
# `cudnn.libcudnn` are collected by a handler; `bad_set()` makes cuDNN fail one call (an error
# log line) and `create()` makes one successful call (info log lines). No GPU is needed.
PRELUDE = """
import json, logging, sys
import cudnn
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage(), getattr(record, "cudnn_severity", None)))
logging.getLogger("cudnn.libcudnn").addHandler(Keep())
from cudnn.backend import Descriptor
from cudnn._lib.enums import cudnnBackendAttributeName_t as A, cudnnBackendAttributeType_t as T
def create():
    return Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR", "t")
def bad_set():
    try:
        create().set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, [1, 2], T.CUDNN_TYPE_FLOAT)
    except cudnn.CudnnBadParamError:
        pass
def take():
    out = list(records); records.clear(); return out
"""


def _run(code: str) -> tuple[dict[str, object], str]:
    program = PRELUDE + code + "\nprint(json.dumps(result))\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_LOG")}
    env["PYTHONPATH"] = SRC
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1]), out.stderr


def test_level_names_numbers_and_refusals() -> None:
    assert log._as_level("info") == logging.INFO and log._as_level(" Warning ") == logging.WARNING
    assert log._as_level(logging.DEBUG) == logging.DEBUG
    assert log._as_level("OFF") == log._as_level(None) == log.OFF
    with pytest.raises(ValueError, match=r"unknown level 'loud'; expected one of \['CRITICAL', 'DEBUG'"):
        cudnn.set_log_level("loud")
    with pytest.raises(TypeError, match="got bool"):
        cudnn.set_log_level(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        cudnn.set_log_level(-5)


def test_levels_map_to_cudnn_severity_masks() -> None:
    info, warning, error = (log.severity_mask(v) for v in (logging.INFO, logging.WARNING, logging.ERROR))
    assert info & (SEV_INFO_EN | SEV_WARNING_EN | SEV_ERROR_EN) == SEV_INFO_EN | SEV_WARNING_EN | SEV_ERROR_EN
    assert warning & SEV_WARNING_EN and not warning & SEV_INFO_EN
    assert error & SEV_ERROR_EN and not error & (SEV_WARNING_EN | SEV_INFO_EN)
    assert log.severity_mask(logging.DEBUG) == info
    assert log.severity_mask(log.OFF) & SEV_ERROR_EN  # cuDNN turns a zero mask into this one anyway
    assert log.SEVERITY_LEVELS == {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}


def test_set_log_level_is_exported_lazily() -> None:
    assert "set_log_level" in dir(cudnn) and cudnn.set_log_level is log.set_log_level
    assert log.get_logger("build").name == "cudnn.build" and log.get_logger().name == "cudnn"


@needs_libcudnn
def test_cudnn_log_reaches_a_python_handler_when_asked_before_loading() -> None:
    result, stderr = _run(
        "cudnn.set_log_level('INFO')\n"  # libcudnn is not loaded yet: registered when it loads
        "create(); bad_set()\n"
        "got = take()\n"
        "from cudnn._lib import capi\n"
        "result = {'records': got, 'callback': capi.get_log_callback()}\n"
    )
    records = result["records"]
    assert isinstance(records, list)
    infos = [m for lv, m, _ in records if lv == "INFO"]
    errors = [(m, sev) for lv, m, sev in records if lv == "ERROR"]
    assert any("function cudnnBackendCreateDescriptor() called" in m for m in infos)
    assert any("CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE" in m and sev == 1 for m, sev in errors)
    assert all("\n" in m for _, m, _ in records)  # every line of cuDNN's message, not only the first
    status, mask, fptr = result["callback"]  # type: ignore[misc]
    assert status == 0 and fptr != 0 and mask & SEV_INFO_EN
    # the handler it added (no logging was configured) shows what was asked for on stderr
    assert "cudnn.libcudnn INFO: CuDNN" in stderr and "cudnn.libcudnn ERROR: CuDNN" in stderr


@needs_libcudnn
def test_level_switches_at_run_time_after_loading() -> None:
    result, stderr = _run(
        "logging.basicConfig(level=logging.CRITICAL)\n"  # the program's own logging: no handler is added
        "cudnn.backend_version()\n"  # loaded first
        "create(); bad_set(); before = take()\n"
        "cudnn.set_log_level(logging.ERROR); create(); bad_set(); error = take()\n"
        "cudnn.set_log_level('INFO'); create(); info = take()\n"
        "sys.stderr.write('--off--\\n'); sys.stderr.flush()\n"
        "cudnn.set_log_level('OFF'); create(); bad_set(); off = take()\n"
        "result = {'before': before, 'error': error, 'info': info, 'off': off}\n"
    )
    assert result["before"] == []  # nothing asked: no callback, nothing routed
    assert [lv for lv, _, _ in result["error"]] == ["ERROR"]  # type: ignore[union-attr]
    assert result["info"] and {lv for lv, _, _ in result["info"]} == {"INFO"}  # type: ignore[union-attr]
    assert result["off"] == []
    assert "ERROR:cudnn.libcudnn:CuDNN" in stderr.split("--off--")[0]  # basicConfig's root handler showed it
    assert stderr.split("--off--")[1].strip() == ""  # OFF drops cuDNN's errors too (no fallback to its sink)


@needs_libcudnn
def test_nothing_on_stderr_by_default() -> None:
    result, stderr = _run(
        "g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)\n"
        "x = g.tensor(name='X', dim=[8, 64, 16, 16], stride=[64 * 256, 1, 64 * 16, 64])\n"
        "w = g.tensor(name='W', dim=[32, 64, 3, 3], stride=[576, 1, 192, 64])\n"
        "g.conv_fprop(x, w, padding=[1, 1], name='conv').set_output(True)\n"
        "g.validate(); text = str(g)\n"
        "create(); bad_set()\n"  # a failing cuDNN call: an exception, not a printed line
        "result = {'records': take(), 'graph': len(text)}\n"
    )
    assert result["records"] == [] and result["graph"]
    assert stderr == ""


def test_the_official_frontend_log_switches_write_each_graph_as_one_json_line(tmp_path) -> None:
    """CUDNN_FRONTEND_LOG_INFO=1 with CUDNN_FRONTEND_LOG_FILE: each validated graph is one line
    of JSON there (what tools written for the official parse); unset, nothing is written."""
    import json
    import os
    import subprocess
    import sys

    code = ("import cudnn\n"
            "g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)\n"
            "x = g.tensor(name='x', dim=[2, 3], stride=[3, 1])\n"
            "g.relu(x, name='r').set_output(True)\n"
            "g.validate()\n")
    log = tmp_path / "fe.log"
    env = {**os.environ, "CUDNN_FRONTEND_LOG_INFO": "1", "CUDNN_FRONTEND_LOG_FILE": str(log)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    lines = [json.loads(line) for line in log.read_text().splitlines() if '"context"' in line]
    assert len(lines) == 1 and lines[0]["nodes"][0]["tag"] == "POINTWISE" and "x" in lines[0]["tensors"]
    off = tmp_path / "off.log"
    env = {**os.environ, "CUDNN_FRONTEND_LOG_INFO": "0", "CUDNN_FRONTEND_LOG_FILE": str(off)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert not off.exists()


def test_info_says_what_happened_and_the_json_is_debug(caplog: pytest.LogCaptureFixture) -> None:
    """With INFO on (as ``logging.basicConfig(level=logging.INFO)`` sets it), validating a graph
    writes no JSON; at DEBUG its JSON is one record of ``cudnn.graph``."""
    g = cudnn.pygraph(name="small", io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(name="x", dim=[2, 3], stride=[3, 1])
    g.relu(x, name="r").set_output(True)
    with caplog.at_level(logging.INFO, logger="cudnn"):
        g.validate()
    assert not any("{" in r.getMessage() for r in caplog.records), caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="cudnn"):
        g.validate()
    graphs = [json.loads(r.getMessage()) for r in caplog.records if r.name == "cudnn.graph" and r.levelno == logging.DEBUG
              and r.getMessage().startswith("{")]
    assert len(graphs) == 1 and graphs[0]["context"]["name"] == "small" and "x" in graphs[0]["tensors"]
