"""Arguments are converted as the official bindings convert them.

The types are the official 1.32.0 wheel's declared ones (its compiled module's signatures, read
with ``inspect``; sdpa's bounds and lengths are declared ``object`` and checked to be ints by the
binding). pybind11's casters decide what each takes: a ``bool`` takes None as False and a number
by its truth value but refuses a str; an ``int`` refuses a float or a str (never truncated); a
``float`` takes an int; a list of ints refuses a float element; an optional parameter takes None
as not given. What is refused is a ``TypeError`` naming the op, the argument and the value.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

import cudnn
from cudnn._graph.model.arguments import KINDS, as_bool, as_float, as_int, as_int_list, convert, optional

dt = cudnn.data_type
H, F, I32, E4, E8 = dt.HALF, dt.FLOAT, dt.INT32, dt.FP8_E4M3, dt.FP8_E8M0

# -- the official declared types (1.32.0's backend_graph signatures) -------------------------------

SDPA_INTS = {"sliding_window_length": "int?", "diagonal_band_left_bound": "int?",
             "diagonal_band_right_bound": "int?", "paged_attention_max_seq_len_kv": "int?",
             "max_total_seq_len_q": "int?", "max_total_seq_len_kv": "int?"}
DECLARED: dict[str, dict[str, str]] = {
    "sdpa": {"use_alibi_mask": "bool", "use_padding_mask": "bool", "use_causal_mask": "bool",
             "use_causal_mask_bottom_right": "bool", "unfuse_fma": "bool", "stats_use_log2": "bool", **SDPA_INTS},
    "sdpa_backward": {"use_alibi_mask": "bool", "use_padding_mask": "bool", "use_causal_mask": "bool",
                      "use_causal_mask_bottom_right": "bool", "use_deterministic_algorithm": "bool",
                      **{k: v for k, v in SDPA_INTS.items() if k != "paged_attention_max_seq_len_kv"}},
    "sdpa_fp8": {"use_alibi_mask": "bool", "use_padding_mask": "bool", "use_causal_mask": "bool",
                 "use_causal_mask_bottom_right": "bool", "unfuse_fma": "bool", "stats_use_log2": "bool",
                 "sliding_window": "int?", "left_bound": "int?", "right_bound": "int?",
                 "paged_attention_max_seq_len_kv": "int?"},
    "sdpa_fp8_backward": {"use_padding_mask": "bool", "use_causal_mask": "bool",
                          "use_causal_mask_bottom_right": "bool", "use_deterministic_algorithm": "bool",
                          "left_bound": "int?", "right_bound": "int?"},
    "sdpa_mxfp8": {"use_causal_mask": "bool", "use_causal_mask_bottom_right": "bool", "unfuse_fma": "bool",
                   "use_padding_mask": "bool", "diagonal_band_left_bound": "int?",
                   "diagonal_band_right_bound": "int?"},
    "sdpa_mxfp8_backward": {"use_padding_mask": "bool", "use_causal_mask": "bool",
                            "use_causal_mask_bottom_right": "bool", "use_deterministic_algorithm": "bool",
                            "left_bound": "int?", "right_bound": "int?"},
    "block_scale_dequantize": {"block_size": "int list", "is_negative_scale": "bool"},
    "block_scale_quantize": {"block_size": "int", "axis": "int?", "transpose": "bool"},
    "rmsnorm_backward": {"has_dbias": "bool"},
    "concatenate": {"axis": "int", "in_place_index": "int?"},
    "conv_fprop": {"padding": "int list", "stride": "int list", "dilation": "int list"},
    "conv_dgrad": {"padding": "int list", "stride": "int list", "dilation": "int list"},
    "conv_wgrad": {"padding": "int list", "stride": "int list", "dilation": "int list"},
    "transpose": {"permutation": "int list"},
    "gen_index": {"axis": "int"},
    "moe_grouped_matmul": {"top_k": "int"},
    "matmul": {"padding": "float"},
    "leaky_relu": {"negative_slope": "float"},
    "leaky_relu_backward": {"negative_slope": "float"},
    "relu": {"negative_slope": "float?", "lower_clip": "float?", "upper_clip": "float?"},
    "relu_backward": {"negative_slope": "float?", "lower_clip": "float?", "upper_clip": "float?"},
    "swish": {"swish_beta": "float?"},
    "swish_backward": {"swish_beta": "float?"},
}
# cudnn.tensor's setters (positional only) and pygraph's own parameters
TENSOR_SETTERS = {"set_output": "bool", "set_is_virtual": "bool", "set_is_pass_by_value": "bool",
                  "set_dim": "int list", "set_stride": "int list", "set_uid": "int", "set_alignment": "int",
                  "set_ragged_offset_multiplier": "int"}
PYGRAPH = {"is_dynamic_shape_enabled": "bool", "is_override_shape_enabled": "bool", "sm_count": "int?",
           "sm_version": "int?"}
PYGRAPH_TENSOR = {"is_virtual": "bool", "is_pass_by_value": "bool", "dim": "int list", "stride": "int list",
                  "uid": "int", "alignment_value": "int", "ragged_offset_multiplier": "int"}


# -- a valid call of each op: (positional tensors, keywords) for a fresh graph ------------------------

def graph() -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)


def t(g: cudnn.pygraph, dims: list[int], dtype: Any = H, **kw: Any) -> cudnn.tensor:
    return g.tensor(dim=dims, data_type=dtype, **kw)


def _qkv(g: cudnn.pygraph, dtype: Any = H) -> list[cudnn.tensor]:
    return [t(g, [1, 2, 64, 64], dtype) for _ in range(3)]


def _scales(g: cudnn.pygraph, n: int, dtype: Any = F) -> list[cudnn.tensor]:
    return [t(g, [1, 1, 1, 1], dtype) for _ in range(n)]


def _stats(g: cudnn.pygraph) -> cudnn.tensor:
    return t(g, [1, 2, 64, 1], F)


Call = Callable[[cudnn.pygraph], tuple[list[Any], dict[str, Any]]]
CALLS: dict[str, Call] = {
    "sdpa": lambda g: (_qkv(g), {"generate_stats": True}),
    "sdpa_backward": lambda g: ([*_qkv(g), *_qkv(g)[:2], _stats(g)], {}),
    "sdpa_fp8": lambda g: ([*_qkv(g, E4), *_scales(g, 6)], {"generate_stats": True}),
    "sdpa_fp8_backward": lambda g: ([*_qkv(g, E4), *_qkv(g, E4)[:2], _stats(g), *_scales(g, 12)], {}),
    "sdpa_mxfp8": lambda g: ([*_qkv(g, E4), *_scales(g, 3, E8)], {"generate_stats": True}),
    "sdpa_mxfp8_backward": lambda g: ([*(t(g, [1, 2, 64, 64], E4) for _ in range(9)), _stats(g),
                                       *_scales(g, 7, E8)], {}),
    "block_scale_quantize": lambda g: ([t(g, [1, 128, 256], F), 32], {}),
    "block_scale_dequantize": lambda g: ([t(g, [1, 128, 256], E4), t(g, [1, 128, 8], E8), [1, 32]], {}),
    "rmsnorm_backward": lambda g: ([t(g, [8, 64]), t(g, [8, 64]), t(g, [1, 64]), t(g, [8, 1], F), True], {}),
    "concatenate": lambda g: ([[t(g, [2, 3]), t(g, [2, 5])], 1], {}),
    "conv_fprop": lambda g: ([t(g, [1, 4, 8, 8]), t(g, [4, 4, 3, 3])], {"padding": [1, 1]}),
    "conv_dgrad": lambda g: ([t(g, [1, 4, 8, 8]), t(g, [4, 4, 3, 3])], {"padding": [1, 1]}),
    "conv_wgrad": lambda g: ([t(g, [1, 4, 8, 8]), t(g, [1, 4, 8, 8])], {"padding": [1, 1]}),
    "transpose": lambda g: ([t(g, [2, 3]), [1, 0]], {}),
    "gen_index": lambda g: ([t(g, [2, 3]), 0], {}),
    "moe_grouped_matmul": lambda g: ([t(g, [1, 64, 32]), t(g, [4, 32, 16]), t(g, [4, 1, 1], I32)], {}),
    "matmul": lambda g: ([t(g, [1, 8, 16]), t(g, [1, 16, 4])], {}),
    "leaky_relu": lambda g: ([t(g, [4, 4]), 0.5], {}),
    "leaky_relu_backward": lambda g: ([t(g, [4, 4]), t(g, [4, 4]), 0.5], {}),
    "relu": lambda g: ([t(g, [4, 4])], {}),
    "relu_backward": lambda g: ([t(g, [4, 4]), t(g, [4, 4])], {}),
    "swish": lambda g: ([t(g, [4, 4])], {}),
    "swish_backward": lambda g: ([t(g, [4, 4]), t(g, [4, 4])], {}),
}
# where a parameter is one of the positional arguments CALLS gives, its index there
POSITIONAL = {("block_scale_quantize", "block_size"): 1, ("block_scale_dequantize", "block_size"): 2,
              ("rmsnorm_backward", "has_dbias"): 4, ("concatenate", "axis"): 1, ("transpose", "permutation"): 1,
              ("gen_index", "axis"): 1, ("leaky_relu", "negative_slope"): 1,
              ("leaky_relu_backward", "negative_slope"): 2}
# a valid value of each int parameter, where 1 is not one
GOOD_INT: dict[tuple[str, str], Any] = {("block_scale_quantize", "block_size"): 32,
                                        ("block_scale_dequantize", "block_size"): [1, 32],
                                        ("block_scale_quantize", "axis"): 2, ("concatenate", "axis"): 1,
                                        ("transpose", "permutation"): [1, 0], ("gen_index", "axis"): 0}


def cases(*kinds: str) -> list[Any]:
    """(op, parameter) of the declared types ``kinds``; a parameter cudnn-py's op lacks (work on
    the 1.32 API elsewhere) is skipped, saying so."""
    out = []
    for op, params in DECLARED.items():
        names = inspect.signature(getattr(cudnn.pygraph, op)).parameters
        for param, kind in params.items():
            if kind in kinds:
                marks = [] if param in names else [pytest.mark.skip(reason=f"cudnn-py's {op} has no {param} yet")]
                out.append(pytest.param(op, param, id=f"{op}-{param}", marks=marks))
    return out


def call(op: str, param: str | None = None, value: Any = None) -> cudnn.pygraph:
    """A fresh graph with one call of ``op``, ``param`` given ``value``."""
    g = graph()
    args, kw = CALLS[op](g)
    if (op, param) in POSITIONAL:
        args[POSITIONAL[op, param]] = value
    elif param is not None:
        kw[param] = value
    getattr(g, op)(*args, **kw)
    return g


def nodes(g: cudnn.pygraph) -> list[Any]:
    return g.to_json()["nodes"]


# -- bool ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "param"), cases("bool"))
def test_none_is_false_for_every_bool_parameter(op: str, param: str) -> None:
    assert nodes(call(op, param, None)) == nodes(call(op, param, False))


@pytest.mark.parametrize(("op", "param"), cases("bool"))
def test_a_str_for_a_bool_is_a_type_error(op: str, param: str) -> None:
    with pytest.raises(TypeError, match=rf"^{op} '0': {param}: expected True or False, got 'yes'$"):
        call(op, param, "yes")


def test_bool_flags_of_the_attention_ops_reach_the_node() -> None:
    """The 1,455 failures of the official suite: use_alibi_mask / use_padding_mask given as None."""
    g = graph()
    g.sdpa(*_qkv(g), generate_stats=True, use_alibi_mask=None, use_padding_mask=None, use_causal_mask=1)
    (node,) = nodes(g)
    assert node["alibi_mask"] is False and node["padding_mask"] is False and node["right_bound"] == 0


def test_tensor_setters_convert_bools_as_the_official() -> None:
    g = graph()
    x = t(g, [2, 2])
    assert x.set_output(None).get_is_virtual() is True  # set_output(None) is set_output(False)
    assert x.set_output(1).get_is_virtual() is False
    assert x.set_is_virtual(None).get_is_virtual() is False
    assert x.set_is_pass_by_value(0).get_is_pass_by_value() is False
    with pytest.raises(TypeError, match=r"^set_output: is_output: expected True or False, got 'yes'$"):
        x.set_output("yes")
    with pytest.raises(TypeError, match=r"set_is_virtual: is_virtual: expected True or False, got \[True\]"):
        x.set_is_virtual([True])
    with pytest.raises(TypeError, match="set_is_pass_by_value: is_pass_by_value: expected True or False"):
        x.set_is_pass_by_value(x)  # a tensor has no truth value in pybind11's sense


def test_pygraph_and_its_tensors_convert_bools_and_ints() -> None:
    g = cudnn.pygraph(is_dynamic_shape_enabled=None, is_override_shape_enabled=None, sm_count=None, sm_version=None)
    assert g.is_dynamic_shape_enabled is False and g.is_override_shape_enabled is False
    x = g.tensor(dim=[2, 3], is_virtual=None, is_pass_by_value=None, uid=None, stride=None)
    assert not x.get_is_virtual() and not x.get_is_pass_by_value() and x.get_stride() == [3, 1]
    assert g.tensor_like(x, is_virtual=None).get_is_virtual() is False
    for param, kind in PYGRAPH.items():
        with pytest.raises(TypeError, match=rf"^pygraph: {param}: expected"):
            cudnn.pygraph(**{param: "yes"})
        if kind != "bool":
            with pytest.raises(TypeError, match=rf"^pygraph: {param}: expected an int, got 9.0$"):
                cudnn.pygraph(**{param: 9.0})
    bad = {"bool": "yes", "int": 1.5, "int list": [2, 1.5]}
    for param, kind in PYGRAPH_TENSOR.items():
        kw: dict[str, Any] = {"dim": [2, 3], param: bad[kind]}
        with pytest.raises(TypeError, match=rf"^pygraph.tensor\('x'\): {param}: expected"):
            g.tensor(name="x", **kw)


# -- int and lists of ints ---------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "param"), cases("int", "int?", "int list"))
@pytest.mark.parametrize("bad", [1.5, "1"])
def test_a_float_or_str_for_an_int_is_a_type_error(op: str, param: str, bad: Any) -> None:
    kind = DECLARED[op][param]
    value, expected = ([2, bad], "a list of ints") if kind == "int list" else (bad, "an int")
    message = re.escape(f"{op} '0': {param}: expected {expected}, got {value!r}")
    with pytest.raises(TypeError, match=f"^{message}$"):
        call(op, param, value)


@pytest.mark.parametrize(("op", "param"), cases("int", "int?", "int list"))
def test_ints_by_index_and_optional_ints_by_none(op: str, param: str) -> None:
    import numpy as np

    good = GOOD_INT.get((op, param), [1, 1] if DECLARED[op][param] == "int list" else 1)
    as_numpy = [np.int64(v) for v in good] if isinstance(good, list) else np.int32(good)
    assert nodes(call(op, param, as_numpy)) == nodes(call(op, param, good))
    if DECLARED[op][param] == "int?":
        assert nodes(call(op, param, None)) == nodes(call(op)), "None is not given"


def test_conv_padding_of_floats_is_refused_not_truncated() -> None:
    g = graph()
    x, w = t(g, [1, 4, 8, 8]), t(g, [4, 4, 3, 3])
    with pytest.raises(TypeError, match=r"^conv_fprop 'c': padding: expected a list of ints, got \[1.5, 1.5\]$"):
        g.conv_fprop(x, w, padding=[1.5, 1.5], name="c")
    with pytest.raises(TypeError, match=r"pre_padding: expected a list of ints, got \['1', '1'\]"):
        g.conv_fprop(x, w, pre_padding=["1", "1"], post_padding=[1, 1], name="c")
    assert g.nodes == []
    g.conv_fprop(x, w, padding=(1, 1), stride=[True, 1], name="c")  # a tuple, and a bool is an int
    assert g.nodes[0].pre_padding == [1, 1] and g.nodes[0].stride == [1, 1]


def test_tensor_setters_refuse_floats_and_strs_for_ints() -> None:
    g = graph()
    x = t(g, [2, 3])
    bad = {"int": 16.0, "int list": [2, 3.0], "bool": "yes"}
    for setter, kind in TENSOR_SETTERS.items():
        with pytest.raises(TypeError, match=r"expected (an int|a list of ints|True or False), got"):
            getattr(x, setter)(bad[kind])
        with pytest.raises(TypeError):
            getattr(x, setter)("7")
    with pytest.raises(TypeError, match=r"set_vector_count_and_dimension: vector_dimension: expected an int"):
        x.set_vector_count_and_dimension(1, -1.0)
    assert x.get_dim() == [2, 3] and x.get_stride() == [3, 1]
    assert x.set_dim((4, 5)).set_stride([5, True]).get_stride() == [5, 1]
    assert x.set_uid(True).get_uid() == 1 and x.set_alignment(32).get_alignment() == 32
    assert x.set_ragged_offset(None).get_ragged_offset() is None  # an optional tensor: None is none


# -- float ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "param"), cases("float", "float?"))
def test_an_int_for_a_float_is_fine(op: str, param: str) -> None:
    assert nodes(call(op, param, 2)) == nodes(call(op, param, 2.0))


@pytest.mark.parametrize(("op", "param"), cases("float", "float?"))
def test_a_str_for_a_float_is_a_type_error(op: str, param: str) -> None:
    with pytest.raises(TypeError, match=rf"^{op} '0': {param}: expected a float, got '2.0'$"):
        call(op, param, "2.0")


def test_attention_takes_an_int_scale_and_probability() -> None:
    def sdpa(**kw: Any) -> list[Any]:
        g = graph()
        seed, offset = t(g, [1, 1, 1, 1], dt.INT64), t(g, [1, 1, 1, 1], dt.INT64)
        g.sdpa(*_qkv(g), generate_stats=True, dropout=(kw.pop("p"), seed, offset), **kw)
        return nodes(g)

    assert sdpa(attn_scale=1, p=0) == sdpa(attn_scale=1.0, p=0.0)
    with pytest.raises(TypeError, match=r"dropout probability: expected a float, got '0\.1'"):
        sdpa(p="0.1")


# -- the helpers themselves --------------------------------------------------------------------------

class _Truthy:
    def __bool__(self) -> bool:
        return True


class _Ambiguous:  # as a framework tensor of several elements
    def __bool__(self) -> bool:
        raise ValueError("ambiguous")


def test_the_conversion_table() -> None:
    import numpy as np

    assert set(KINDS) == {"bool", "int", "float", "int list"}
    accepted = {
        "bool": [(True, True), (None, False), (0, False), (2, True), (0.0, False), (np.bool_(True), True),
                 (np.int64(0), False), (_Truthy(), True)],
        "int": [(3, 3), (True, 1), (np.int64(-2), -2), (np.uint8(7), 7)],
        "float": [(2, 2.0), (1.5, 1.5), (True, 1.0), (np.float32(0.5), 0.5), (np.int16(3), 3.0)],
        "int list": [([1, 2], [1, 2]), ((3,), [3]), (np.array([4, 5]), [4, 5]), (range(2), [0, 1]), ([], [])],
    }
    refused = {
        "bool": ["yes", "", [True], {}, object(), _Ambiguous(), dt.FLOAT],
        "int": [1.5, "1", None, np.float64(2.0), [1], np.bool_(True), dt.FLOAT],
        "float": ["1.5", None, [1.0], object(), dt.FLOAT],
        "int list": [[1.5], "12", 3, None, [1, "2"], {1: 2}, {1, 2}, [dt.FLOAT]],
    }
    for kind, pairs in accepted.items():
        for value, want in pairs:
            got = convert(kind, value, "op 'n'", "arg")
            assert got == want and type(got) is type(want), (kind, value)
        for value in refused[kind]:
            with pytest.raises(TypeError, match=r"^op 'n': arg: expected "):
                convert(kind, value, "op 'n'", "arg")
    with pytest.raises(TypeError, match=r"got <?data_type.FLOAT.*\(a cudnn enum; check the argument order\)"):
        as_float(dt.FLOAT, "swish 's'", "swish_beta")
    assert as_bool(None, "", "x") is False and as_int(7, "", "x") == 7 and as_int_list((1,), "", "x") == [1]

    class Uid(enum.IntEnum):  # a user's own IntEnum is a number, as in the official (uid=Uid.Q)
        Q = 3

    class Plain(enum.Enum):
        Q = 3

    got = as_int(Uid.Q, "", "uid")
    assert got == 3 and type(got) is int
    with pytest.raises(TypeError, match=r"^uid: expected an int, got <Plain.Q: 3>$"):
        as_int(Plain.Q, "", "uid")
    assert optional(as_int, None, "", "x") is None and optional(as_float, 3, "", "x") == 3.0
    with pytest.raises(TypeError, match=r"^uid: expected an int, got 'a'$"):
        as_int("a", "", "uid")  # no op to name: the argument alone
