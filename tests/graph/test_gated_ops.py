"""rope / rope_backward and the linear-attention families: 1.32's signatures, validation,
inferred outputs, and the refusal at build (through the version gate and the node's lowering,
which raise before any GPU work)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import cudnn
from cudnn._graph.families.gated_nodes import LA_SPECS
from cudnn._graph.model.lower import Lowering

DT = cudnn.data_type
SPECS = Path("/work/shared/reference/official-1.32/op_specs.txt")
T, H, K, V, N = 64, 4, 32, 16, 3


def graph() -> Any:
    return cudnn.pygraph(io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)


def t(g: Any, dims: list[int], name: str, dtype: Any = None) -> Any:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    return g.tensor(dims, strides, dtype, name=name) if dtype is not None else g.tensor(dims, strides, name=name)


def official_specs() -> dict[str, tuple[list[str], list[str], list[str]]]:
    out = {}
    for line in SPECS.read_text().splitlines():
        m = re.match(r"(\w+): in=(\[.*?\]) list_in=\[.*?\] attrs=(\[.*?\]) out=(\[.*?\])", line)
        if m:
            out[m.group(1)] = (ast.literal_eval(m.group(2)), ast.literal_eval(m.group(3)), ast.literal_eval(m.group(4)))
    return out


GATED = [*sorted(LA_SPECS), "rope", "rope_backward"]


def test_every_gated_official_op_is_declared() -> None:
    if not SPECS.exists():
        pytest.skip("the 1.32 reference is not on this machine")
    official = {op for op in official_specs() if op.split("_")[0] in ("gdn", "gdn2", "gdp", "kda", "mamba2", "rope")}
    assert official == set(GATED)


@pytest.mark.parametrize("op", GATED)
def test_positional_order_is_the_official_one(op: str) -> None:
    if not SPECS.exists():
        pytest.skip("the 1.32 reference is not on this machine")
    ins, attrs, _ = official_specs()[op]
    sig = inspect.signature(getattr(cudnn.pygraph, op))
    positional = [p.name for p in sig.parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
    keyword_only = [p.name for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY]
    assert positional == ins + attrs
    assert keyword_only == ["name", "compute_data_type", "out_dims"]


@pytest.mark.parametrize("op", sorted(LA_SPECS))
def test_outputs_are_the_official_ones(op: str) -> None:
    if not SPECS.exists():
        pytest.skip("the 1.32 reference is not on this machine")
    assert [p for p, _ in LA_SPECS[op].outputs] == official_specs()[op][2]


# -- linear attention ------------------------------------------------------------------------------

def la_inputs(g: Any, family: str) -> dict[str, Any]:
    q, k = t(g, [T, H, K], "q"), t(g, [T, H, K], "k")
    v = t(g, [T, H, V], "v")
    gate = t(g, [T, H], "g", DT.FLOAT)
    strength = {"a": t(g, [T, H], "a", DT.FLOAT)} if family == "mamba2" else {"beta": t(g, [T, H], "beta")}
    w = {"w": t(g, [T, H, K], "w")} if family == "gdn2" else {}
    return {"q": q, "k": k, "v": v, "g": gate, **strength, **w, "cu_seqlens": t(g, [N + 1], "cu", DT.INT32)}


def mark(outs: list[Any]) -> None:
    for o in outs:
        if o is not None:
            o.set_output(True)


@pytest.mark.parametrize("family", ["gdn", "gdn2", "kda", "mamba2"])
def test_forward_outputs_and_shapes(family: str) -> None:
    g = graph()
    ins = la_inputs(g, family)
    outs = getattr(g, family)(**ins, output_final_state=True, checkpoint_every_n_tokens=16, name="la")
    assert outs[0].get_name() == "la::O"
    mark(outs)
    g.validate()
    assert outs[0].get_dim() == [T, H, V] and outs[0].get_data_type() == DT.BFLOAT16
    assert outs[1].get_dim() == [N, H, V, K] and outs[1].get_data_type() == DT.FLOAT
    assert outs[2].get_dim() == [T // 16 + N, H, V, K]
    if family == "mamba2":
        assert outs[3] is None  # O_pre only with output_pre_gate and z


def test_optional_outputs_are_none_when_not_asked() -> None:
    g = graph()
    outs = g.gdn(*la_inputs(g, "gdn").values())
    assert outs[0] is not None and outs[1:] == [None, None]


def test_gdp_output_follows_q_rows() -> None:
    g = graph()
    n = 2
    q, k = t(g, [T, H, K], "q"), t(g, [T * n, H, K], "k")
    v, beta = t(g, [T * n, H, V], "v"), t(g, [T * n, H], "beta")
    outs = g.gdp(q, k, v, t(g, [T, H], "g", DT.FLOAT), beta, t(g, [N + 1], "cu", DT.INT32), num_householder=n)
    mark(outs)
    g.validate()
    assert outs[0].get_dim() == [T, H, V]


def test_state_pool_rows_follow_initial_state_with_state_indices() -> None:
    g = graph()
    pool = t(g, [10, H, V, K], "pool", DT.FLOAT)
    idx = t(g, [N], "idx", DT.INT32)
    outs = g.gdn(*la_inputs(g, "gdn").values(), initial_state=pool, state_indices=idx, output_final_state=True)
    mark(outs)
    g.validate()
    assert outs[1].get_dim() == [10, H, V, K]


def test_backward_gradients_follow_their_inputs() -> None:
    g = graph()
    ins = la_inputs(g, "gdn")
    state0 = t(g, [N, H, V, K], "s0", DT.FLOAT)
    outs = g.gdn_bwd(**ins, dO=t(g, [T, H, V], "do"), initial_state=state0)
    names = [p for p, _ in LA_SPECS["gdn_bwd"].outputs]
    assert [o is None for o in outs] == [False] * 5 + [False, True, True]
    mark(outs)
    g.validate()
    by = dict(zip(names, outs))
    assert by["dQ"].get_dim() == [T, H, K] and by["dV"].get_dim() == [T, H, V] and by["dBeta"].get_dim() == [T, H]
    assert by["d_initial_state"].get_dim() == [N, H, V, K] and by["d_initial_state"].get_data_type() == DT.FLOAT


def test_summary_shapes() -> None:
    g = graph()
    ins = la_inputs(g, "kda")
    del ins["q"]
    final, transition = g.kda_summary(**ins, output_transition=True)
    m_ins = la_inputs(g, "mamba2")
    del m_ins["q"]
    m_final, m_transition = g.mamba2_summary(**m_ins, output_transition=True)
    mark([final, transition, m_final, m_transition])
    g.validate()
    assert final.get_dim() == [N, H, V, K] and transition.get_dim() == [N, H, K, K]
    assert m_transition.get_dim() == [N, H]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gate_domain": "exp"}, "gate_domain must be 'log' or 'linear', got 'exp'"),
    ({"gate_domain": "linear", "safe_gate": True}, "gate_domain='linear' cannot be combined with safe_gate=True"),
    ({"allow_neg_eigval": True}, "allow_neg_eigval needs use_beta_sigmoid=True"),
    ({"checkpoint_every_n_tokens": -1}, "checkpoint_every_n_tokens must be >= 0, got -1"),
    ({"overwrite_initial_state": True}, "overwrite_initial_state needs initial_state and output_final_state=True"),
])
def test_forward_attribute_rules(kwargs: dict[str, Any], message: str) -> None:
    g = graph()
    with pytest.raises(ValueError, match=re.escape(f"gdn 'x': {message}")):
        g.gdn(*la_inputs(g, "gdn").values(), name="x", **kwargs)
    assert g.nodes == []


def test_input_rules() -> None:
    g = graph()
    ins = la_inputs(g, "kda")
    with pytest.raises(ValueError, match="a_log and dt_bias are used only with safe_gate=True"):
        g.kda(**ins, a_log=t(g, [H], "alog", DT.FLOAT))
    with pytest.raises(ValueError, match="state_indices selects rows of the initial_state pool"):
        g.kda(**ins, state_indices=t(g, [N], "idx", DT.INT32))
    with pytest.raises(ValueError, match="the z-gate backward needs the forward's pre-gate output O_pre"):
        g.mamba2_bwd(**la_inputs(g, "mamba2"), dO=t(g, [T, H, V], "do"), z=t(g, [T, H, V], "z"))
    with pytest.raises(ValueError, match=r"dt_min 2\.0 must not exceed dt_max 1\.0"):
        g.mamba2(**la_inputs(g, "mamba2"), dt_min=2.0, dt_max=1.0)
    with pytest.raises(TypeError, match=r"gdn\(\): missing a required argument: 'cu_seqlens'"):
        g.gdn(*list(la_inputs(g, "gdn").values())[:5])


def test_validate_checks_ranks_and_cu_seqlens() -> None:
    g = graph()
    ins = la_inputs(g, "gdn")
    ins["q"] = t(g, [1, T, H, K], "q4")
    mark(g.gdn(**ins))
    with pytest.raises(ValueError, match=r"gdn '0': q: expected \[T, H, D\]"):
        g.validate()
    g = graph()
    ins = la_inputs(g, "gdn")
    ins["cu_seqlens"] = t(g, [N + 1], "cu", DT.FLOAT)
    mark(g.gdn(**ins))
    with pytest.raises(ValueError, match="cu_seqlens: expected an INT32/INT64 \\[N \\+ 1\\] vector"):
        g.validate()


@pytest.mark.parametrize("op", sorted(LA_SPECS))
def test_every_linear_attention_op_is_refused_at_build_naming_what_it_needs(op: str) -> None:
    g = graph()
    spec = LA_SPECS[op]
    family = spec.family
    pool = la_inputs(g, family)
    pool.update({"dO": t(g, [T, H, V], "do")})
    ins = {p: pool[p] for p in spec.inputs[:spec.required]}
    outs = getattr(g, op)(**ins, name="la")
    mark(outs)
    g.validate()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError) as info:
        g.nodes[0].lower(Lowering(0, 91900))
    text = str(info.value)
    assert f"{op} 'la': {op} needs the official frontend's Python engines for Blackwell GPUs" in text
    assert "Loaded: cuDNN 9.19.0" in text


# -- rope ------------------------------------------------------------------------------------------

def test_rope_infers_like_its_input_and_checks_freqs() -> None:
    g = graph()
    x, f = t(g, [2, 4, 8, 64], "x"), t(g, [8, 1, 1, 64], "f", DT.FLOAT)
    y = g.rope(x, f, 0.5, 32, name="r")
    dx = g.rope_backward(y, f, name="rb")
    dx.set_output(True)
    g.validate()
    assert y.get_dim() == [2, 4, 8, 64] and y.get_stride() == x.get_stride() and dx.get_name() == "rb::DX"
    assert g.nodes[0].to_json()["output_scale"] == 0.5 and g.nodes[0].to_json()["rope_dim"] == 32
    for dims, bad in (([8, 1, 1, 32], "expected \\[S, 1, 1, D\\]"), ([8, 64], "expected \\[S, 1, 1, D\\]")):
        g2 = graph()
        g2.rope(t(g2, [2, 4, 8, 64], "x"), t(g2, dims, "f", DT.FLOAT)).set_output(True)
        with pytest.raises(ValueError, match=bad):
            g2.validate()
    g3 = graph()
    g3.rope(t(g3, [2, 4, 8, 64], "x"), t(g3, [8, 1, 1, 64], "f", DT.FLOAT), rope_dim=33).set_output(True)
    with pytest.raises(ValueError, match=r"rope_dim must be even and in \(0, D=64\], got 33"):
        g3.validate()


@pytest.mark.parametrize(("op", "since"), [("rope", "9.24.0"), ("rope_backward", "9.25.0")])
def test_rope_is_refused_on_an_older_cudnn_before_any_descriptor(op: str, since: str) -> None:
    g = graph()
    y = getattr(g, op)(t(g, [2, 4, 8, 64], "x"), t(g, [8, 1, 1, 64], "f", DT.FLOAT), name="r")
    y.set_output(True)
    g.validate()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=rf"needs cuDNN >= {since}; the loaded libcudnn is "
                                                               r"9\.19\.0"):
        g.nodes[0].lower(Lowering(0, 91900))


def test_out_dims() -> None:
    g = graph()
    outs = g.gdn(*la_inputs(g, "gdn").values(), output_final_state=True, out_dims={"final_state": [N, H, V, K]})
    assert outs[1].get_dim() == [N, H, V, K]
    with pytest.raises(TypeError, match="out_dims names 'transition', not an output of this call"):
        g.gdn(*la_inputs(g, "gdn").values(), out_dims={"transition": [1]})
