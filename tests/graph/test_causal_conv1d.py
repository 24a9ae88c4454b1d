"""causal_conv1d_forward / backward on CPU: the official positional-only signatures, argument
checks (refused before cuDNN is called), the 9.22 gate, and the C binding against the header."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

import cudnn
from cudnn import causal_conv1d_capi as cc
from cudnn._lib import api_subquadratic

DT = cudnn.data_type
FWD = [0, 0x1000, 0x2000, 0x3000, 0x4000, 2, 8, 16, 4, int(DT.HALF), 0]
BWD = [0, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 2, 8, 16, 4, int(DT.HALF), int(DT.FLOAT), 1]


@pytest.mark.parametrize("fn, count", [(cudnn.causal_conv1d_forward, 11), (cudnn.causal_conv1d_backward, 15)])
def test_positional_only_like_the_official_binding(fn, count: int) -> None:
    params = list(inspect.signature(fn).parameters.values())
    assert len(params) == count
    assert all(p.kind == inspect.Parameter.POSITIONAL_ONLY and p.default is inspect.Parameter.empty for p in params)
    with pytest.raises(TypeError):
        fn(stream=0)


def _forward(**changes: object) -> list[object]:
    names = ["stream", "x_ptr", "weight_ptr", "bias_ptr", "out_ptr", "batch", "dim", "seq_len", "kernel_size",
             "data_type", "activation"]
    return [changes.get(n, v) for n, v in zip(names, FWD)]


@pytest.mark.parametrize("changes, error, match", [
    ({"x_ptr": 0}, ValueError, "x_ptr: expected a device address, got 0x0"),
    ({"bias_ptr": 0}, ValueError, r"bias_ptr: .*cuDNN requires a bias buffer"),
    ({"out_ptr": 1.0}, TypeError, "out_ptr: expected an int, got float"),
    ({"batch": True}, TypeError, "batch: expected an int, got bool"),
    ({"seq_len": 0}, ValueError, "seq_len: expected 1 <= seq_len"),
    ({"kernel_size": 9}, ValueError, "kernel_size: cuDNN supports 2-8, 16, 32, 64, 128 and 256, got 9"),
    ({"data_type": int(DT.INT8)}, ValueError, "data_type: expected one of DOUBLE, FLOAT, HALF, BFLOAT16"),
    ({"activation": 2}, ValueError, r"activation: expected 0 \(IDENTITY\) or 1 \(SILU\), got 2"),
    ({"stream": -1}, ValueError, "stream: expected a cudaStream_t"),
    ({"batch": 2**16, "dim": 2**16}, ValueError, r"batch \* dim \* seq_len = .* more than int32 indexing allows"),
])
def test_forward_arguments_are_checked_before_cudnn(changes: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=f"causal_conv1d_forward: {match}"):
        cudnn.causal_conv1d_forward(*_forward(**changes))


def test_backward_needs_float_gradients_for_half_data_and_double_for_double() -> None:
    args = list(BWD)
    args[13] = int(DT.HALF)
    with pytest.raises(ValueError, match="causal_conv1d_backward: dw_data_type: expected one of FLOAT .*got HALF"):
        cudnn.causal_conv1d_backward(*args)
    args[12], args[13] = int(DT.DOUBLE), int(DT.FLOAT)
    with pytest.raises(ValueError, match="dw_data_type: expected one of DOUBLE"):
        cudnn.causal_conv1d_backward(*args)
    args[7] = 0
    with pytest.raises(ValueError, match="dbias_ptr: expected a device address"):
        cudnn.causal_conv1d_backward(*args)


def test_below_9_22_the_call_is_refused_with_both_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn._lib import loader

    class Loaded:
        version = 91900

    monkeypatch.setattr(loader, "report", lambda: Loaded())
    with pytest.raises(cudnn.FeatureUnavailableError,
                       match=r"causal_conv1d_forward \(cudnnCausalConv1dForward\).*needs cuDNN >= 9\.22\.0; "
                             r"the loaded libcudnn is 9\.19\.0"):
        cudnn.causal_conv1d_forward(*FWD)
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.22\.0; the loaded libcudnn is 9\.19\.0"):
        cudnn.causal_conv1d_backward(*BWD)


def test_the_binding_matches_the_header() -> None:
    """The table in _lib/api_subquadratic.py is what tools/cheader.py reads from the header."""
    nvidia_cudnn = pytest.importorskip("nvidia.cudnn")
    header = Path(nvidia_cudnn.__path__[0]) / "include" / api_subquadratic.HEADER
    if not header.exists():
        pytest.skip(f"{header.name} is not installed (cuDNN < 9.22 headers)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    try:
        import cheader
    finally:
        sys.path.pop(0)
    text = header.read_text()
    parsed = {f.name: (f.restype, tuple((p.ctype, p.name) for p in f.params), f.since, f.deprecated)
              for f in cheader.parse_functions(text, header.name)}
    for name, entry in api_subquadratic.FUNCTIONS.items():
        assert parsed[name] == entry, name
    enums = {e.name: {m.name: m.value for m in e.members} for e in cheader.parse_enums(text, header.name, {})}
    assert enums == api_subquadratic.ENUMS


def test_the_c_functions_bind_with_ctypes_signatures() -> None:
    from cudnn._lib import capi

    api = capi.subquadratic
    assert "cudnnCausalConv1dForward" in api and "cudnnCausalConv1dBackward" in api
    ret, params = api.signature("cudnnCausalConv1dBackward")
    assert ret == "cudnnStatus_t" and len(params) == 15
    assert cc.KERNEL_SIZES == {2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256}
