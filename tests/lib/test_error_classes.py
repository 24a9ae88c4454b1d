"""The official package's exception classes, without a GPU.

Callers written for the official catch ``cudnn.cudnnGraphNotSupportedError`` to skip or fall back
when a valid graph is not supported here, expect a ``RuntimeError`` (or ``ValueError``, by cause)
for an invalid graph and a ``TypeError`` for an argument of the wrong type. cudnn-py's own classes
stay what they were, so their ``except`` clauses keep working too.
"""

from __future__ import annotations

import json
import pickle
import types
from typing import Any

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.model.lower import Lowering
from cudnn._graph.records.plan_bytes import FORMAT, FORMAT_VERSION, PlanRecord
from cudnn._lib import loader
from cudnn._lib.status import exception_class, raise_status

dt = cudnn.data_type
HALF, FLOAT = dt.HALF, dt.FLOAT
NOT_SUPPORTED = cudnn.cudnnGraphNotSupportedError


def graph(**kw: Any) -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT, intermediate_data_type=FLOAT, **kw)


def packed(dims: list[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(dims):
        strides.insert(0, acc)
        acc *= d
    return strides


# -- the hierarchy ----------------------------------------------------------------------------------

def test_an_invalid_graph_error_is_a_runtime_error_and_still_a_value_error() -> None:
    for cls in (cudnn.GraphError, cudnn.SerializationError):
        assert issubclass(cls, RuntimeError) and issubclass(cls, ValueError), cls
    assert issubclass(cudnn.GraphStateError, RuntimeError)  # the official's "Call build() first"
    assert issubclass(cudnn.ExecutionInputError, ValueError)  # the official's INVALID_VARIANT_PACK
    assert not issubclass(cudnn.GraphError, TypeError)  # argument-type errors stay TypeErrors


def test_every_not_supported_class_is_the_officials() -> None:
    assert cudnn.CudnnNotSupportedError is NOT_SUPPORTED  # cudnn-py's earlier name for it
    for cls in (cudnn.FeatureUnavailableError, cudnn.GraphNotSupportedError,
                cudnn.SerializationNotSupportedError, cudnn.GraphNotImplementedError):
        assert issubclass(cls, NOT_SUPPORTED), cls
    assert issubclass(cudnn.GraphNotSupportedError, cudnn.GraphError)  # as these refusals were before
    assert issubclass(cudnn.SerializationNotSupportedError, cudnn.SerializationError)
    assert issubclass(cudnn.GraphNotImplementedError, NotImplementedError)


@pytest.mark.parametrize("status", [3000, 3001, 3007])
def test_a_not_supported_status_raises_the_officials_class(status: int) -> None:
    assert exception_class(status) is NOT_SUPPORTED
    with pytest.raises(NOT_SUPPORTED, match="finalizing"):
        raise_status(status, "finalizing")


def test_the_officials_class_is_raised_with_a_message_alone() -> None:
    err = NOT_SUPPORTED("no engine for this graph")  # as the official's own code raises it
    assert str(err) == "no engine for this graph" and err.status == 3000
    assert err.status_name == "CUDNN_STATUS_NOT_SUPPORTED" and err.message == "no engine for this graph"
    with_status = NOT_SUPPORTED(3002, "conv", "cuDNN's reason")
    assert str(with_status) == "conv: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002): cuDNN's reason"


def test_combined_classes_keep_their_detail_and_pickle() -> None:
    err = cudnn.GraphNotSupportedError("sdpa 'a': head dim 12 is not supported")
    assert str(err) == "sdpa 'a': head dim 12 is not supported" and err.status == 3000
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cudnn.GraphNotSupportedError and str(back) == str(err)
    gone = cudnn.FeatureUnavailableError("op", 92200, 91900)
    assert "needs cuDNN >= 9.22.0; the loaded libcudnn is 9.19.0" in str(gone) and gone.needed == 92200


def test_the_official_order_of_except_clauses_skips() -> None:
    """The official suite's pattern: its not-supported clause first, any other failure after."""
    def outcome(exc: BaseException) -> str:
        try:
            raise exc
        except NOT_SUPPORTED:
            return "skip"
        except Exception:  # noqa: BLE001 - the pattern under test
            return "fail"
    assert outcome(cudnn.GraphNotSupportedError("x")) == "skip"
    assert outcome(cudnn.FeatureUnavailableError("x", 92200, 91900)) == "skip"
    assert outcome(cudnn.GraphError("x")) == "fail"


# -- invalid graphs: RuntimeError (and the cudnn-py class) ---------------------------------------

def _matmul_inner_mismatch() -> None:
    g = graph()
    a = g.tensor(name="a", dim=[1, 16, 32], stride=[512, 32, 1])
    b = g.tensor(name="b", dim=[1, 64, 8], stride=[512, 8, 1])
    g.matmul(a, b).set_output(True)
    g.validate()


def _pointwise_not_broadcastable() -> None:
    g = graph()
    a = g.tensor(name="a", dim=[1, 16, 32], stride=[512, 32, 1])
    b = g.tensor(name="b", dim=[1, 15, 32], stride=[480, 32, 1])
    g.add(a, b).set_output(True)
    g.validate()


def _conv_channel_mismatch() -> None:
    g = graph()
    x = g.tensor(name="x", dim=[8, 64, 16, 16], stride=[64 * 256, 1, 64 * 16, 64])
    w = g.tensor(name="w", dim=[32, 24, 3, 3], stride=[24 * 9, 1, 24 * 3, 24])
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True)
    g.validate()


def _unused_tensor() -> None:
    g = graph()
    x = g.tensor(name="x", dim=[2, 3], stride=[3, 1])
    g.relu(x)  # neither consumed nor an output
    g.validate()


def _duplicate_node_name() -> None:
    g = graph()
    x = g.tensor(name="x", dim=[2, 3], stride=[3, 1])
    g.relu(x, name="r").set_output(True)
    g.relu(x, name="r")


def _sdpa_head_dims_differ() -> None:
    g = graph()
    q = g.tensor(name="q", dim=[1, 2, 64, 64], stride=packed([1, 2, 64, 64]))
    k = g.tensor(name="k", dim=[1, 2, 64, 32], stride=packed([1, 2, 64, 32]))
    o, _ = g.sdpa(q, k, q, generate_stats=False, attn_scale=0.125)
    o.set_output(True)
    g.validate()


@pytest.mark.parametrize("make", [_matmul_inner_mismatch, _pointwise_not_broadcastable, _conv_channel_mismatch,
                                  _unused_tensor, _duplicate_node_name, _sdpa_head_dims_differ])
def test_an_invalid_graph_raises_a_runtime_error(make: Any) -> None:
    with pytest.raises(RuntimeError) as info:
        make()
    assert isinstance(info.value, cudnn.GraphError) and isinstance(info.value, ValueError)
    assert not isinstance(info.value, NOT_SUPPORTED)  # invalid is not "not supported": callers fail, not skip


def test_a_wrong_argument_type_stays_a_type_error() -> None:
    with pytest.raises(TypeError):
        cudnn.pygraph(sm_count="all")


# -- valid but not supported here: cudnnGraphNotSupportedError -------------------------------------

def sdpa_graph(d: int = 64, s_q: int = 64, s_kv: int = 64, h_k: int = 2, bias: Any = None,
               **kw: Any) -> cudnn.pygraph:
    g = graph()
    q = g.tensor(name="q", dim=[1, 4, s_q, d], stride=packed([1, 4, s_q, d]))
    k = g.tensor(name="k", dim=[1, h_k, s_kv, d], stride=packed([1, h_k, s_kv, d]))
    v = g.tensor(name="v", dim=[1, h_k, s_kv, d], stride=packed([1, h_k, s_kv, d]))
    if bias is not None:
        bias = g.tensor(name="bias", dim=[1, 1, s_q, s_kv], stride=packed([1, 1, s_q, s_kv]), data_type=bias)
    o, _ = g.sdpa(q, k, v, generate_stats=False, attn_scale=0.125, bias=bias, **kw)
    o.set_output(True)
    return g


@pytest.mark.parametrize("kw, why", [
    ({"d": 12}, "head dim d_qk=12 is not supported"),
    ({"h_k": 3}, "must be a multiple"),
    ({"bias": dt.BOOLEAN}, "a BOOLEAN bias is not supported"),
    ({"use_alibi_mask": True}, "ALiBi needs a causal mask"),
    ({"s_q": 128, "s_kv": 64, "use_causal_mask_bottom_right": True}, "BOTTOM_RIGHT causal mask needs s_q <= s_kv"),
    ({"use_causal_mask_bottom_right": True, "bias": HALF}, "BOTTOM_RIGHT causal mask .* cannot be combined with bias"),
], ids=["head_dim", "gqa_heads", "boolean_bias", "alibi_without_causal", "bottom_right_s_q", "bottom_right_bias"])
def test_attention_the_official_does_not_support_skips_at_validate(kw: dict[str, Any], why: str) -> None:
    """Each is the official's GRAPH_NOT_SUPPORTED (sdpa_support_surface.h, _sdpa_validate.py)."""
    g = sdpa_graph(**kw)
    with pytest.raises(NOT_SUPPORTED, match=why) as info:
        g.validate()
    assert isinstance(info.value, cudnn.GraphError)  # and what it was before


def test_a_guard_against_known_wrong_results_is_not_supported() -> None:
    """s_q = 1 with rng_dump: the decode engines were seen leaving elements unwritten."""
    g = sdpa_graph(s_q=1, rng_dump=None)
    g2 = graph()
    q = g2.tensor(name="q", dim=[1, 2, 1, 64], stride=packed([1, 2, 1, 64]))
    k = g2.tensor(name="k", dim=[1, 2, 64, 64], stride=packed([1, 2, 64, 64]))
    dump = g2.tensor(name="dump", dim=[1, 2, 1, 64], stride=packed([1, 2, 1, 64]), data_type=FLOAT)
    seed = g2.tensor(name="seed", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.INT64)
    offset = g2.tensor(name="offset", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.INT64)
    o, _ = g2.sdpa(q, k, k, generate_stats=False, attn_scale=0.125, dropout=(0.1, seed, offset), rng_dump=dump)
    o.set_output(True)
    g.validate()  # without rng_dump, s_q = 1 is fine
    with pytest.raises(NOT_SUPPORTED, match="rng_dump: not supported with s_q = 1"):
        g2.validate()


def test_fp8_attention_on_a_broken_cudnn_is_not_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "report", lambda: types.SimpleNamespace(version=91000))
    g = cudnn.pygraph(io_data_type=dt.FP8_E4M3, compute_data_type=FLOAT, intermediate_data_type=FLOAT)
    dims = [1, 2, 64, 64]
    q, k, v = (g.tensor(name=n, dim=dims, stride=packed(dims)) for n in "qkv")
    one = {"dim": [1, 1, 1, 1], "stride": [1, 1, 1, 1], "data_type": FLOAT}
    scales = [g.tensor(name=n, **one) for n in ("dq", "dk", "dv", "ds", "ss", "so")]
    o, _, amax_s, amax_o = g.sdpa_fp8(q, k, v, *scales, generate_stats=False, attn_scale=0.125)
    for t in (o, amax_s, amax_o):
        t.set_output(True)
    with pytest.raises(NOT_SUPPORTED, match=r"broken in cuDNN 9\.10\.0"):
        g.validate()


# -- the pipeline, cuDNN stood in for ---------------------------------------------------------------

class FakeDesc:
    def set(self, *args: Any) -> FakeDesc:
        return self

    def finalize(self) -> FakeDesc:
        return self


class FakeLowering(Lowering):
    def descriptor(self, desc_type: Any, label: str) -> Any:  # type: ignore[override]
        return FakeDesc()

    def tensor(self, t: Any) -> Any:  # type: ignore[override]
        return FakeDesc()


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """build_operation_graph with no device and no call to cuDNN (the handle is a fake one): the
    loaded version settable."""
    state: dict[str, Any] = {"version": 92800}
    monkeypatch.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=state["version"]))
    monkeypatch.setattr(pipeline_module, "Lowering", FakeLowering)
    monkeypatch.setattr(pipeline_module.eng, "operation_graph", lambda *args, **kw: "OPGRAPH")
    return state


def relu_graph(**kw: Any) -> cudnn.pygraph:
    g = graph(handle=1, **kw)  # a raw handle: no default handle (and no device) is needed
    g.relu(g.tensor(name="x", dim=[2, 3, 4], stride=[12, 4, 1]), name="r").set_output(True)
    g.validate()
    return g


def test_a_version_gate_is_not_supported(fake_backend: dict[str, Any]) -> None:
    fake_backend["version"] = 92000
    g = relu_graph(is_override_shape_enabled=True)
    with pytest.raises(NOT_SUPPORTED, match=r"needs cuDNN >= 9\.21\.0; the loaded libcudnn is 9\.20\.0") as info:
        g.build_operation_graph()
    assert isinstance(info.value, cudnn.FeatureUnavailableError)


@pytest.mark.parametrize("status", [2000, 3000, 4000])
def test_heuristics_that_fail_are_not_supported(fake_backend: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                 status: int) -> None:
    """The official's HEURISTIC_QUERY_FAILED: whatever cuDNN's status, the graph is not supported."""
    def heuristics(*args: Any, **kw: Any) -> Any:
        raise exception_class(status)(status, "graph 'g': heuristics mode A", "cuDNN's reason")

    monkeypatch.setattr(pipeline_module.eng, "heuristics", heuristics)
    g = relu_graph()
    g.build_operation_graph()
    with pytest.raises(NOT_SUPPORTED, match="heuristics mode A") as info:
        g.create_execution_plans([cudnn.heur_mode.A])
    assert info.value.status == status


def test_a_graph_every_engine_is_refused_for_is_not_supported() -> None:
    from cudnn._graph.plans.candidates import Candidate, PlanSet

    plans = PlanSet("g")
    c = Candidate(None, 7, {}, [], [cudnn.behavior_note.RUNTIME_COMPILATION], "A")
    c.refused = "known wrong"
    plans.all.append(c)
    with pytest.raises(NOT_SUPPORTED, match="known to compute this graph wrongly"):
        raise plans.not_supported(plans.candidates)


def test_a_plan_of_another_format_version_is_not_supported() -> None:
    """The official's UNSUPPORTED_GRAPH_FORMAT (a graph JSON of another version)."""
    data = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION + 1}).encode()
    with pytest.raises(NOT_SUPPORTED, match=f"format {FORMAT_VERSION + 1} is not {FORMAT_VERSION}") as info:
        PlanRecord.from_bytes(data)
    assert isinstance(info.value, cudnn.SerializationError) and isinstance(info.value, ValueError)
    with pytest.raises(RuntimeError, match="invalid JSON") as damaged:  # damaged data: an error, not a skip
        PlanRecord.from_bytes(b"{not json")
    assert isinstance(damaged.value, cudnn.SerializationError) and not isinstance(damaged.value, NOT_SUPPORTED)
