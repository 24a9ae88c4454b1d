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
test_sdpa_graph.py. ``PENDING`` lists official names cudnn-py does not have yet; each is
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


class _AnyDefault:
    def __repr__(self) -> str:
        return "ANY_DEFAULT"


ANY_DEFAULT: Any = _AnyDefault()  # a parameter whose default is not compared (required or not)


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
                     ("is_override_shape_enabled", False), ("cuda_graph_retention", None)],
                    {"is_cuda_graph_replay_expected": False}),
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
    # 1.32's names (v1.23's pybind methods had none)
    "deselect_engines": Sig([("engine_names", R)]),
    "deselect_numeric_notes": Sig([("notes", R)]),
    "deselect_behavior_notes": Sig([("notes", R)]),
    "select_numeric_notes": Sig([("notes", R)]),
    "select_behavior_notes": Sig([("notes", R)]),
    "deselect_workspace_greater_than": Sig([("workspace_limit", R)]),
    "validate": Sig([]),
    "key": Sig([]),
    "build_operation_graph": Sig([]),
    # 1.32: heuristics defaults to None, (A, FALLBACK)
    "create_execution_plans": Sig([("heuristics", Either(R, None))], {"heur_modes": None}),
    "create_execution_plan": Sig([("engine_id", R), ("knobs", Either(R, None))]),
    "get_engine_count": Sig([]),
    "get_knobs_for_engine": Sig([(ANY, R)]),
    "check_support": Sig([]),
    "build_plans": Sig([("policy", cudnn.build_plan_policy.HEURISTICS_CHOICE)], {"ctx": None}),
    "build_plan_at_index": Sig([("index", R)]),
    "build": Sig([("heuristics", None), ("ctx", None)], {"heur_modes": None}),  # build(list[heur_mode]) or build()
    "get_execution_plan_count": Sig([]),
    "get_workspace_size": Sig([("handle", None), *EXEC_OVERRIDES]),
    "get_workspace_size_plan_at_index": Sig([("index", R), ("handle", None), *EXEC_OVERRIDES]),
    "query_tensor_attributes_of_uid": Sig([("uid", R)]),
    "get_plan_name_at_index": Sig([("index", R)]),
    "populate_cuda_graph": Sig([(ANY, R)] * 4),
    "update_cuda_graph": Sig([(ANY, R)] * 4),
    "serialize": Sig([], {"as_bytes": False, "include_kernels": True}),
    # 1.32's plan introspection and graph inspection (the class of _pygraph.py)
    "select_plan": Sig([("index", R)]),
    "backend_plan_entries": Sig([]),
    "get_engine_and_knobs_at_index": Sig([("index", R)]),
    "get_cuda_graph_retention": Sig([]),
    "find_tensor": Sig([("name_or_uid", R)]),
    "get_node": Sig([("name", R)]),
    "get_inputs": Sig([]),
    "get_outputs": Sig([]),
    "inspect": Sig([]),
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

# Official pygraph methods cudnn-py does not have yet; checked as soon as they exist.
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

# Ops of 1.32 that need a newer cuDNN than cudnn-py targets or the official's Python engines (rope:
# cuDNN 9.24; the linear-attention families: Blackwell / cuTile engines), added by the op work
# items: 1.32 declares them ``(*args, name='', compute_data_type=None, out_dims=None, **kwargs)``
# with the positional order of op_specs.txt; checked as soon as they exist.
# The positional order of each (op_specs.txt: tensor inputs, list inputs, attributes); their
# defaults are not compared (ANY_DEFAULT): 1.32 has none to compare with.
_OP_132_ORDER: dict[str, tuple[str, ...]] = {
    "rope": ('input', 'freqs', 'output_scale', 'rope_dim'),
    "rope_backward": ('dY', 'freqs', 'output_scale', 'rope_dim'),
    "gdn": (
        'q', 'k', 'v', 'g', 'beta', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'state_indices',
        'scale', 'output_final_state', 'use_qk_l2norm', 'checkpoint_every_n_tokens', 'use_beta_sigmoid',
        'allow_neg_eigval', 'safe_gate', 'gate_domain', 'batch_invariant', 'overwrite_initial_state'),
    "gdn_bwd": (
        'q', 'k', 'v', 'g', 'beta', 'cu_seqlens', 'dO', 'state_checkpoints', 'initial_state', 'd_final_state',
        'a_log', 'dt_bias', 'scale', 'use_qk_l2norm', 'checkpoint_every_n_tokens', 'use_beta_sigmoid',
        'allow_neg_eigval', 'safe_gate', 'gate_domain', 'batch_invariant', 'overwrite_initial_state'),
    "gdn_summary": (
        'k', 'v', 'g', 'beta', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'output_transition',
        'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate', 'gate_domain', 'batch_invariant'),
    "gdn_summary_bwd": (
        'q', 'k', 'g', 'beta', 'cu_seqlens', 'dO', 'd_final_state', 'a_log', 'dt_bias', 'output_transition',
        'scale', 'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate', 'gate_domain',
        'batch_invariant'),
    "gdn2": (
        'q', 'k', 'v', 'g', 'beta', 'w', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'state_indices',
        'scale', 'output_final_state', 'use_qk_l2norm', 'checkpoint_every_n_tokens', 'use_beta_sigmoid',
        'allow_neg_eigval', 'beta_guard', 'safe_gate', 'gate_domain', 'gate_lower_bound', 'batch_invariant',
        'overwrite_initial_state'),
    "gdn2_bwd": (
        'q', 'k', 'v', 'g', 'beta', 'w', 'cu_seqlens', 'dO', 'state_checkpoints', 'initial_state',
        'd_final_state', 'a_log', 'dt_bias', 'scale', 'use_qk_l2norm', 'checkpoint_every_n_tokens',
        'use_beta_sigmoid', 'allow_neg_eigval', 'beta_guard', 'safe_gate', 'gate_domain', 'gate_lower_bound',
        'batch_invariant', 'overwrite_initial_state'),
    "gdn2_summary": (
        'k', 'v', 'g', 'beta', 'w', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'output_transition',
        'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'beta_guard', 'safe_gate', 'gate_domain',
        'gate_lower_bound', 'batch_invariant'),
    "gdn2_summary_bwd": (
        'q', 'k', 'g', 'beta', 'cu_seqlens', 'dO', 'd_final_state', 'a_log', 'dt_bias', 'output_transition',
        'scale', 'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'beta_guard', 'safe_gate',
        'gate_domain', 'gate_lower_bound', 'batch_invariant'),
    "kda": (
        'q', 'k', 'v', 'g', 'beta', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'state_indices',
        'scale', 'output_final_state', 'use_qk_l2norm', 'checkpoint_every_n_tokens', 'use_beta_sigmoid',
        'allow_neg_eigval', 'safe_gate', 'gate_domain', 'gate_lower_bound', 'batch_invariant',
        'overwrite_initial_state'),
    "kda_bwd": (
        'q', 'k', 'v', 'g', 'beta', 'cu_seqlens', 'dO', 'state_checkpoints', 'initial_state', 'd_final_state',
        'a_log', 'dt_bias', 'scale', 'use_qk_l2norm', 'checkpoint_every_n_tokens', 'use_beta_sigmoid',
        'allow_neg_eigval', 'safe_gate', 'gate_domain', 'gate_lower_bound', 'batch_invariant',
        'overwrite_initial_state'),
    "kda_summary": (
        'k', 'v', 'g', 'beta', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'output_transition',
        'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate', 'gate_domain',
        'gate_lower_bound', 'batch_invariant'),
    "kda_summary_bwd": (
        'q', 'k', 'g', 'beta', 'cu_seqlens', 'dO', 'd_final_state', 'a_log', 'dt_bias', 'output_transition',
        'scale', 'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate', 'gate_domain',
        'gate_lower_bound', 'batch_invariant'),
    "gdp": (
        'q', 'k', 'v', 'g', 'beta', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'state_indices',
        'num_householder', 'scale', 'output_final_state', 'use_qk_l2norm', 'checkpoint_every_n_tokens',
        'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate', 'gate_domain', 'batch_invariant',
        'overwrite_initial_state'),
    "gdp_bwd": (
        'q', 'k', 'v', 'g', 'beta', 'cu_seqlens', 'dO', 'state_checkpoints', 'initial_state', 'd_final_state',
        'a_log', 'dt_bias', 'num_householder', 'scale', 'use_qk_l2norm', 'checkpoint_every_n_tokens',
        'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate', 'gate_domain', 'batch_invariant',
        'overwrite_initial_state'),
    "gdp_summary": (
        'k', 'v', 'g', 'beta', 'cu_seqlens', 'initial_state', 'a_log', 'dt_bias', 'num_householder',
        'output_transition', 'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate',
        'gate_domain', 'batch_invariant'),
    "gdp_summary_bwd": (
        'q', 'k', 'g', 'beta', 'cu_seqlens', 'dO', 'd_final_state', 'a_log', 'dt_bias', 'num_householder',
        'output_transition', 'scale', 'use_qk_l2norm', 'use_beta_sigmoid', 'allow_neg_eigval', 'safe_gate',
        'gate_domain', 'batch_invariant'),
    "mamba2": (
        'q', 'k', 'v', 'g', 'a', 'cu_seqlens', 'initial_state', 'dt_bias', 'd', 'z', 'state_indices',
        'output_final_state', 'checkpoint_every_n_tokens', 'dt_softplus', 'dt_min', 'dt_max',
        'output_pre_gate', 'batch_invariant', 'overwrite_initial_state'),
    "mamba2_bwd": (
        'q', 'k', 'v', 'g', 'a', 'cu_seqlens', 'dO', 'state_checkpoints', 'initial_state', 'd_final_state',
        'dt_bias', 'd', 'z', 'O_pre', 'checkpoint_every_n_tokens', 'dt_softplus', 'dt_min', 'dt_max',
        'batch_invariant', 'overwrite_initial_state'),
    "mamba2_summary": (
        'k', 'v', 'g', 'a', 'cu_seqlens', 'initial_state', 'dt_bias', 'output_transition', 'dt_softplus',
        'dt_min', 'dt_max', 'batch_invariant'),
    "mamba2_summary_bwd": (
        'q', 'k', 'g', 'a', 'cu_seqlens', 'dO', 'd_final_state', 'dt_bias', 'output_transition',
        'dt_softplus', 'dt_min', 'dt_max', 'batch_invariant'),
}
PENDING_PYGRAPH.update({op: Sig([(arg, ANY_DEFAULT) for arg in order], {"name": "", "compute_data_type": NOT_SET})
                        for op, order in _OP_132_ORDER.items()})

# Every member of 1.32's pygraph (pygraph_members.tsv of the 1.32.0 wheel, read with inspect).
OFFICIAL_PYGRAPH_MEMBERS = frozenset({
    "__init__", "abs", "adalayernorm", "adalayernorm_backward", "add", "add_square", "backend_plan_entries",
    "batchnorm", "batchnorm_backward", "batchnorm_inference", "bias", "binary_select",
    "block_scale_dequantize", "block_scale_quantize", "build", "build_operation_graph", "build_plan_at_index",
    "build_plans", "ceil", "check_support", "cmp_eq", "cmp_ge", "cmp_gt", "cmp_le", "cmp_lt", "cmp_neq",
    "concatenate", "context", "conv_dgrad", "conv_fprop", "conv_wgrad", "cos", "create_execution_plan",
    "create_execution_plans", "deselect_behavior_notes", "deselect_engines", "deselect_numeric_notes",
    "deselect_workspace_greater_than", "deserialize", "div", "elu", "elu_backward", "erf", "execute",
    "execute_plan_at_index", "exp", "find_tensor", "floor", "gdn", "gdn2", "gdn2_bwd", "gdn2_summary",
    "gdn2_summary_bwd", "gdn_bwd", "gdn_summary", "gdn_summary_bwd", "gdp", "gdp_bwd", "gdp_summary",
    "gdp_summary_bwd", "gelu", "gelu_approx_tanh", "gelu_approx_tanh_backward", "gelu_backward", "gen_index",
    "genstats", "get_behavior_notes", "get_behavior_notes_for_plan_at_index", "get_cuda_graph_retention",
    "get_engine_and_knobs_at_index", "get_execution_plan_count", "get_inputs", "get_node", "get_outputs",
    "get_plan_name_at_index", "get_workspace_size", "get_workspace_size_plan_at_index", "identity", "inspect",
    "instancenorm", "instancenorm_backward", "kda", "kda_bwd", "kda_summary", "kda_summary_bwd", "key",
    "layernorm", "layernorm_backward", "leaky_relu", "leaky_relu_backward", "log", "logical_and",
    "logical_not", "logical_or", "mamba2", "mamba2_bwd", "mamba2_summary", "mamba2_summary_bwd", "matmul",
    "max", "min", "mod", "moe_grouped_matmul", "moe_grouped_matmul_bwd", "mul", "neg", "nodes", "plans",
    "populate_cuda_graph", "pow", "reciprocal", "reduction", "relu", "relu_backward", "reshape", "rmsnorm",
    "rmsnorm_backward", "rope", "rope_backward", "rsqrt", "scale", "sdpa", "sdpa_backward", "sdpa_fp8",
    "sdpa_fp8_backward", "sdpa_mxfp8", "sdpa_mxfp8_backward", "select_behavior_notes", "select_numeric_notes",
    "select_plan", "selected_engine", "serialize", "sigmoid", "sigmoid_backward", "sin", "slice", "softplus",
    "softplus_backward", "sqrt", "sub", "swish", "swish_backward", "tan", "tanh", "tanh_backward", "tensor",
    "tensor_like", "tensor_scalar", "tensors", "transpose", "update_cuda_graph", "validate"
})

# Where cudnn-py has a default the official API lacks (a convenience, never a different meaning):
# (method, parameter index).
CUDNN_PY_DEFAULTS: set[tuple[str, int]] = set()

# pygraph members that are properties in 1.32 (read as attributes, not called).
PYGRAPH_PROPERTIES = {"context", "nodes", "plans", "selected_engine", "tensors"}

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
    # 1.32 (graph_types.Tensor)
    "set_alignment_value": Sig([("value", R)]),
    "validate": Sig([]),
}

# 1.32's plain attributes of cudnn.Tensor (graph_types.Tensor's dataclass fields), less ``owner``
# (the official's weak reference to the graph that registered the tensor: cudnn-py's tensors
# may be shared by graphs and name none).
TENSOR_ATTRIBUTES = {"name", "data_type", "dim", "stride", "is_virtual", "is_pass_by_value", "pass_by_value", "uid",
                     "uid_assigned", "dim_assigned", "stride_assigned", "reordering_type", "ragged_offset",
                     "ragged_offset_multiplier", "alignment_value", "scalar_type"}

# cudnn.Node (nodes.Node): its methods besides the constructor. The constructor differs on
# purpose: cudnn-py's nodes are built by the op calls (Node is the base of one class per op,
# each with its own constructor), not from a NodeType.
NODE: dict[str, Sig] = {"infer_properties": Sig([("context", R)]), "validate": Sig([])}
NODE_ATTRIBUTES = {"name", "node_type", "compute_data_type", "inputs", "outputs", "params"}

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
                  ("intermediate_data_type", DT.FLOAT), ("compute_data_type", DT.FLOAT)]),  # and **graph_kwargs
    "sdpa_capabilities": Sig([]),
    "DeviceInfo": Sig([("ordinal", R)]),
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
VAR_KEYWORD_OK = {"jit", "Graph", "graph"}

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
