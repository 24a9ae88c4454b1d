"""The official Python API's signatures: the table test_api_signatures.py checks cudnn-py against.

The target is the union of cudnn-frontend v1.23's positional order and the 1.32.0 wheel's
keyword names (../shared/reference/official-python-api.md, Appendix A and section 7):

- ``params``: the positional parameters in v1.23 order, ``(name, default)``. ``ANY`` as a
  name marks a pybind parameter without a keyword name (positional only: the name is free).
  ``REQUIRED`` is a parameter without a default; ``Either(a, b)`` lists defaults that are all
  right (v1.23's and 1.32's, or None where Python cannot put a required parameter after
  defaulted ones).
- ``keywords``: names 1.32 added or renamed, which must be accepted as keywords (with that
  default); they may stand anywhere after the positional ones.

Attention and low-precision families (sdpa*, fp8, mxfp8) have their own table in
test_sdpa_graph.py. ``PENDING`` lists official names that other work items add; each is
checked as soon as it exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cudnn

ANY = "*"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Either:
    """Any of these defaults is right."""

    options: tuple[Any, ...]

    def __init__(self, *options: Any) -> None:
        object.__setattr__(self, "options", options)


@dataclass
class Sig:
    params: list[tuple[str, Any]]
    keywords: dict[str, Any] = field(default_factory=dict)


DT = cudnn.data_type
NOT_SET = Either(DT.NOT_SET, None)  # v1.23: data_type.NOT_SET; 1.32: None
CD = ("compute_data_type", NOT_SET)
NAME = ("name", "")
LIST = Either([], None)  # a list parameter defaulting to the empty list (None in cudnn-py: the same)


def _conv(first: str, second: str) -> Sig:
    # Second overload (pre_padding, post_padding in place of padding) by position is tested in
    # test_api_signatures; by keyword, these names:
    return Sig([(first, REQUIRED), (second, REQUIRED), ("padding", LIST), ("stride", LIST), ("dilation", LIST),
                ("convolution_mode", cudnn.convolution_mode.CROSS_CORRELATION), CD, NAME],
               {"pre_padding": LIST, "post_padding": LIST})


def _pw(*leading: tuple[str, Any]) -> Sig:
    return Sig([*leading, CD, NAME])


R = REQUIRED
EXEC_OVERRIDES = [("override_uids", None), ("override_shapes", None), ("override_strides", None)]

# -- pygraph methods -------------------------------------------------------------------------------

PYGRAPH: dict[str, Sig] = {
    "__init__": Sig([("name", "test_graph"), ("io_data_type", NOT_SET), ("intermediate_data_type", NOT_SET),
                     ("compute_data_type", NOT_SET), ("handle", None), ("sm_count", None), ("sm_version", None),
                     ("kernel_cache", None), ("device_property", None), ("is_dynamic_shape_enabled", False),
                     ("is_override_shape_enabled", False)]),
    # python/cudnn/__init__.py (v1.23) and the 1.32 class
    "tensor": Sig([("dim", R), ("stride", Either(R, None)), ("data_type", NOT_SET), ("is_virtual", False),
                   ("is_pass_by_value", False), ("ragged_offset", None),
                   ("reordering_type", Either(cudnn.tensor_reordering.NONE, None)), ("name", ""),
                   ("uid", Either(-1, None)), ("ragged_offset_multiplier", 1), ("alignment_value", 1)]),
    "execute": Sig([("tensor_to_device_buffer", Either(R, None)), ("workspace", Either(R, None)), ("handle", None),
                    *EXEC_OVERRIDES], {"tensor_dict": None, "tensor_uids": None}),
    "execute_plan_at_index": Sig([("tensor_to_device_buffer", Either(R, None)), ("workspace", Either(R, None)),
                                  ("index", Either(R, 0)), ("handle", None), *EXEC_OVERRIDES],
                                 {"tensor_dict": None, "tensor_uids": None}),
    # python/pygraph/pygraph.cpp
    "tensor_like": Sig([("input", Either(R, None)), NAME, ("is_virtual", False)], {"template": None}),
    "tensor_scalar": Sig([("value", R), ("scalar_type", R), NAME]),
    "genstats": Sig([("input", R), CD, NAME]),
    "slice": Sig([("input", R), ("slices", LIST), CD, NAME]),
    "conv_fprop": _conv("image", "weight"),
    "conv_wgrad": _conv("image", "loss"),
    "conv_dgrad": _conv("loss", "filter"),
    "matmul": Sig([("A", R), ("B", R), CD, ("padding", 0.0), NAME]),
    "reduction": Sig([("input", R), ("mode", R), CD, NAME], {"group_offset": None}),
    "reshape": Sig([("input", R), NAME, ("reshape_mode", cudnn.reshape_mode.VIEW_ONLY)]),
    "transpose": Sig([("input", R), ("permutation", R), CD, NAME]),
    "concatenate": Sig([("inputs", R), ("axis", R), ("in_place_index", None), NAME]),
    "get_behavior_notes": Sig([]),
    "get_behavior_notes_for_plan_at_index": Sig([(ANY, R)]),
    "deselect_engines": Sig([(ANY, R)]),
    "deselect_numeric_notes": Sig([(ANY, R)]),
    "deselect_behavior_notes": Sig([(ANY, R)]),
    "select_numeric_notes": Sig([(ANY, R)]),
    "select_behavior_notes": Sig([(ANY, R)]),
    "deselect_workspace_greater_than": Sig([(ANY, R)]),
    "validate": Sig([]),
    "key": Sig([]),
    "build_operation_graph": Sig([]),
    "create_execution_plans": Sig([(ANY, R)]),
    "create_execution_plan": Sig([(ANY, R), (ANY, R)]),
    "get_engine_count": Sig([]),
    "get_knobs_for_engine": Sig([(ANY, R)]),
    "check_support": Sig([]),
    "build_plans": Sig([("policy", cudnn.build_plan_policy.HEURISTICS_CHOICE)]),
    "build_plan_at_index": Sig([("index", R)]),
    "build": Sig([(ANY, None)]),  # build(list[heur_mode]) or build()
    "get_execution_plan_count": Sig([]),
    "get_workspace_size": Sig([("handle", None), *EXEC_OVERRIDES]),
    "get_workspace_size_plan_at_index": Sig([("index", R), ("handle", None), *EXEC_OVERRIDES]),
    "query_tensor_attributes_of_uid": Sig([("uid", R)]),
    "get_plan_name_at_index": Sig([("index", R)]),
    "populate_cuda_graph": Sig([(ANY, R)] * 4),
    "update_cuda_graph": Sig([(ANY, R)] * 4),
    "serialize": Sig([], {"as_bytes": False, "include_kernels": True}),
    "deserialize": Sig([("handle_", Either(R, None)), ("pyobj", Either(R, None))], {"enforce_precompiled": False}),
    # python/pygraph/norm.cpp
    "batchnorm": Sig([("input", R), ("scale", R), ("bias", R), ("in_running_mean", R), ("in_running_var", R),
                      ("epsilon", R), ("momentum", R), ("peer_stats", LIST), CD, NAME]),
    "layernorm": Sig([("norm_forward_phase", R), ("input", R), ("scale", R), ("bias", R), ("epsilon", R), CD, NAME]),
    "adalayernorm": Sig([("norm_forward_phase", R), ("input", R), ("scale", R), ("bias", None), ("epsilon", R),
                         CD, NAME]),
    "batchnorm_inference": Sig([("input", R), ("mean", R), ("inv_variance", R), ("scale", R), ("bias", R), CD, NAME]),
    "batchnorm_backward": Sig([("grad", R), ("input", R), ("scale", R), ("mean", R), ("inv_variance", R),
                               ("peer_stats", LIST), CD, NAME]),
    "layernorm_backward": Sig([("grad", R), ("input", R), ("scale", R), ("mean", R), ("inv_variance", R), CD, NAME]),
    "adalayernorm_backward": Sig([("grad", R), ("input", R), ("scale", R), ("mean", R), ("inv_variance", R),
                                  CD, NAME]),
    "rmsnorm": Sig([("norm_forward_phase", R), ("input", R), ("scale", R), ("bias", None), ("epsilon", R), CD, NAME]),
    "rmsnorm_backward": Sig([("grad", R), ("input", R), ("scale", R), ("inv_variance", R), ("has_dbias", R),
                             CD, NAME]),
    "instancenorm": Sig([("norm_forward_phase", R), ("input", R), ("scale", R), ("bias", R), ("epsilon", R),
                         CD, NAME]),
    "instancenorm_backward": Sig([("grad", R), ("input", R), ("scale", R), ("mean", None), ("inv_variance", None),
                                  CD, NAME]),
    # python/pygraph/pointwise.cpp
    **{m: _pw(("input", R)) for m in (
        "sqrt", "tanh", "elu", "gelu", "sigmoid", "softplus", "gelu_approx_tanh", "erf", "identity", "exp", "log",
        "neg", "abs", "ceil", "floor", "rsqrt", "reciprocal", "sin", "cos", "tan", "logical_not")},
    **{m: _pw(("a", R), ("b", R)) for m in ("add", "mul", "sub", "div", "add_square", "logical_and", "logical_or")},
    **{m: _pw(("input0", R), ("input1", R)) for m in ("max", "min", "mod", "pow")},
    **{m: _pw(("loss", R), ("input", R)) for m in (
        "tanh_backward", "sigmoid_backward", "elu_backward", "gelu_backward", "softplus_backward",
        "gelu_approx_tanh_backward")},
    **{m: _pw(("input", R), ("comparison", R)) for m in ("cmp_eq", "cmp_neq", "cmp_gt", "cmp_ge", "cmp_lt", "cmp_le")},
    "bias": _pw(("input", R), ("bias", R)),
    "scale": _pw(("input", R), ("scale", R)),
    "gen_index": _pw(("input", R), ("axis", R)),
    "binary_select": _pw(("input0", R), ("input1", R), ("mask", R)),
    "relu": _pw(("input", R), ("negative_slope", None), ("lower_clip", None), ("upper_clip", None)),
    "relu_backward": _pw(("loss", R), ("input", R), ("negative_slope", None), ("lower_clip", None),
                         ("upper_clip", None)),
    "leaky_relu": _pw(("input", R), ("negative_slope", R)),
    "leaky_relu_backward": _pw(("loss", R), ("input", R), ("negative_slope", R)),
    "swish": _pw(("input", R), ("swish_beta", None)),
    "swish_backward": Sig([("loss", R), ("input", R), CD, ("swish_beta", None), NAME]),
}

# Official pygraph methods that other work items of issue 14 (or other issues) add; checked
# as soon as they exist.
PENDING_PYGRAPH: dict[str, Sig] = {
    "block_scale_quantize": Sig([("input", R), ("block_size", R), ("axis", None), ("transpose", False), CD, NAME]),
    "block_scale_dequantize": Sig([("input", R), ("descale", R), ("block_size", R), ("is_negative_scale", False),
                                   CD, NAME]),
    "moe_grouped_matmul": Sig([("token", R), ("weight", R), ("first_token_offset", R), ("token_index", None),
                               ("token_ks", None), ("mode", cudnn.moe_grouped_matmul_mode.NONE),
                               ("compute_data_type", DT.FLOAT), ("top_k", 0), NAME], {"top_k_scores": None}),
    "moe_grouped_matmul_bwd": Sig([("doutput", R), ("token", R), ("first_token_offset", R),
                                   ("compute_data_type", DT.FLOAT), NAME]),
}

# Where cudnn-py has a default the official API lacks (a convenience, never a different meaning):
# (method, parameter index).
CUDNN_PY_DEFAULTS = {
    ("create_execution_plans", 0),  # (A, FALLBACK), as build() uses
    ("create_execution_plan", 1),  # no knob choices
}

# -- cudnn.tensor (python/properties.cpp: pybind methods without keyword names) --------------------

TENSOR: dict[str, Sig] = {
    "__init__": Sig([]),
    **{m: Sig([]) for m in (
        "get_name", "get_data_type", "get_dim", "get_stride", "get_is_virtual", "get_is_pass_by_value",
        "get_has_compile_time_constant", "get_uid", "get_reordering_type", "get_alignment", "get_vector_count",
        "get_vector_dimension", "get_ragged_offset_multiplier")},
    **{m: Sig([(ANY, R)]) for m in (
        "set_name", "_set_data_type", "set_dim", "set_stride", "set_is_virtual", "set_output",
        "set_is_pass_by_value", "set_uid", "set_reordering_type", "set_alignment", "set_ragged_offset",
        "set_ragged_offset_multiplier")},
    "set_vector_count_and_dimension": Sig([(ANY, R), (ANY, R)]),
    "set_data_type": Sig([("data_type", NOT_SET)]),  # the Python wrapper of __init__.py
}

# -- cudnn.knob, top-level callables, submodules -----------------------------------------------------

KNOB = Sig([("knob_type", cudnn.knob_type.NOT_SET), ("max_value", None), ("min_value", None), ("stride", None)])

TOP_LEVEL: dict[str, Sig] = {
    "backend_version": Sig([]),
    "backend_version_string": Sig([]),
    "get_last_error_string": Sig([]),
    "create_handle": Sig([]),
    "destroy_handle": Sig([(ANY, R)]),
    "get_stream": Sig([(ANY, R)]),
    "set_stream": Sig([("handle", R), ("stream", R)]),
    "create_kernel_cache": Sig([]),
    "graph": Sig([("handle", R), ("name", "cudnn_graph"), ("io_data_type", DT.HALF),
                  ("intermediate_data_type", DT.FLOAT), ("compute_data_type", DT.FLOAT)]),
    "jit": Sig([("heur_modes", cudnn.heur_mode.A)]),  # and **kwargs
    "graph_cache": Sig([("key_fn", R), ("maxsize", 256)]),
    "Graph": Sig([], {"handle": None, "inputs": None, "outputs": None, "heuristics": None,
                      "workspace_alloc": True}),  # keyword-only, and **kwargs for pygraph
    "is_windows": Sig([]),
    "load_cudnn": Sig([]),
}
PENDING_TOP_LEVEL: dict[str, Sig] = {
    "create_device_properties": Sig([(ANY, R)]),
    "causal_conv1d_forward": Sig([(ANY, R)] * 11),
    "causal_conv1d_backward": Sig([(ANY, R)] * 15),
}
# Callables that take **kwargs in the official API too.
VAR_KEYWORD_OK = {"jit", "Graph"}

WRAPPER: dict[str, Sig] = {
    "get_default_handle": Sig([("stream", None)]),
    "destroy_default_handle": Sig([]),
}

DATATYPES: dict[str, Sig] = {
    "is_windows": Sig([]),
    "is_torch_available": Sig([]),
    "is_cutlass_available": Sig([]),
    "_torch_to_cudnn_data_type": Sig([(ANY, R)]),
    "_cudnn_to_torch_data_type": Sig([(ANY, R)]),
    "_library_type": Sig([(ANY, R)]),
    "_is_torch_tensor": Sig([(ANY, R)]),
    "_torch_to_cutlass_data_type": Sig([("data_type", R), ("interpret_uint8_as_fp4x2", False)]),
    "_convert_to_cutlass_data_type": Sig([("data_type", R), ("interpret_uint8_as_fp4x2", False)]),
}
