"""The low-precision op methods of ``pygraph``: FP8 and MXFP8 attention, block-scale quantize
and dequantize.

Signatures are the official frontend's v1.23 ones (the attention family's keyword names differ
from ``sdpa``'s: ``sliding_window``, ``left_bound``/``right_bound``, ``fn``); arguments are
translated as ``sdpa_ops`` translates them. FP8 matmuls need no op of their own: they are
``matmul`` + ``mul`` by the scales + ``reduction(AMAX)`` (see examples/fp8_linear.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..families.block_scale_nodes import BlockScaleDequantize, BlockScaleQuantize
from ..families.sdpa_common import SdpaOptions
from ..families.sdpa_fp8_nodes import BWD_SCALES, FWD_SCALES, SDPAFP8, SDPAFP8Backward
from ..families.sdpa_mxfp8_nodes import SDPAMXFP8, SDPAMXFP8Backward
from ..model.arguments import as_bool, exact_bool
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.sdpa_enums import diagonal_alignment
from ..model.tensor import NOT_SET, Tensor
from .attention_args import (
    FP8_BOUNDS,
    Maybe,
    bounds,
    callable_arg,
    dropout_backward,
    dropout_forward,
    output_arg,
    positive_or_none,
    scale_arg,
    tensor_arg,
)
from .method_table import op

TOP_LEFT = diagonal_alignment.TOP_LEFT


def _stats_flag(at: str, is_inference: Any, generate_stats: Any) -> bool:
    if (is_inference is None) == (generate_stats is None):
        raise GraphError(f"{at}: give exactly one of is_inference and generate_stats (got is_inference="
                         f"{is_inference!r}, generate_stats={generate_stats!r})")
    if generate_stats is None:
        return not exact_bool(is_inference, at, "is_inference")
    return exact_bool(generate_stats, at, "generate_stats")


def _scales(graph: Any, at: str, given: dict[str, Any], ports: dict[str, str]) -> dict[str, Maybe]:
    """The descale/scale tensors by port; a missing one stays out (validate names it)."""
    return {port: tensor_arg(graph, given[arg], at, arg) for port, arg in ports.items()}


def _add_outputs(graph: Any, node: Any, ports: list[str], users: dict[str, Maybe]) -> list[Tensor]:
    out = graph.add_node(node, ports)  # after every check: a refusal adds nothing
    node.outputs.update((port, t) for port, t in users.items() if t is not None)
    return out


# -- FP8 attention -------------------------------------------------------------------------------

@op
def sdpa_fp8(self: Any, q: Any, k: Any, v: Any, descale_q: Any, descale_k: Any, descale_v: Any, descale_s: Any,
             scale_s: Any, scale_o: Any, is_inference: bool | None = None, attn_scale: Any = None, bias: Any = None,
             use_alibi_mask: bool = False, use_padding_mask: bool = False, seq_len_q: Any = None,
             seq_len_kv: Any = None, use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
             sliding_window: int | None = None, diagonal_alignment: Any = TOP_LEFT, left_bound: int | None = None,
             right_bound: int | None = None, dropout: Any = None, rng_dump: Any = None,
             paged_attention_k_table: Any = None, paged_attention_v_table: Any = None,
             paged_attention_max_seq_len_kv: int | None = None, compute_data_type: Any = NOT_SET, name: str = "",
             fn: Callable[..., Any] | None = None, generate_stats: bool | None = None, score_max: Any = None,
             score_sum_exp: Any = None, sink_token: Any = None) -> list[Maybe]:
    """FP8 attention forward; returns [O, Stats, Amax_S, Amax_O] (Stats None when not generated).

    Q, K, V are FP8_E4M3/E5M2 [b, h, s, d]; each descale_*/scale_* is a FLOAT [1, 1, 1, 1]:
    descale_q/k/v undo the inputs' scaling, scale_s quantizes the softmax P into FP8 (descale_s
    undoes it) and scale_o the output. Amax_S / Amax_O are the largest |P| and |O| before scaling."""
    name = self.node_name(name)
    at = f"sdpa_fp8 {name!r}"
    stats = _stats_flag(at, is_inference, generate_stats)
    align, left, right = bounds(at, use_causal_mask, use_causal_mask_bottom_right, sliding_window,
                                 diagonal_alignment, left_bound, right_bound, FP8_BOUNDS)
    scale_value, scale_tensor = scale_arg(self, attn_scale, at)
    p, dropout_ins = dropout_forward(self, dropout, at)
    if rng_dump is not None:
        raise GraphNotSupportedError(f"{at}: rng_dump is refused with FP8 attention: on cuDNN 9.19 (H200) "
                                     "the FP8 engine faulted (illegal memory access) writing it; drop "
                                     "rng_dump")
    for arg, value in (("score_max", score_max), ("score_sum_exp", score_sum_exp), ("sink_token", sink_token)):
        if value is not None:
            raise GraphNotSupportedError(f"{at}: {arg} is not supported by FP8 attention in cudnn-py")
    opts = SdpaOptions(
        generate_stats=stats, attn_scale_value=scale_value, alibi=as_bool(use_alibi_mask, at, "use_alibi_mask"),
        padding=as_bool(use_padding_mask, at, "use_padding_mask"), alignment=align, left_bound=left,
        right_bound=right, dropout_p=p,
        max_seq_len_kv=positive_or_none(paged_attention_max_seq_len_kv, at, "paged_attention_max_seq_len_kv"),
        score_mod=callable_arg(fn, at, "fn"))
    given = {"descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v, "descale_s": descale_s,
                 "scale_s": scale_s, "scale_o": scale_o}
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        **_scales(self, at, given, FWD_SCALES), "Attn_scale": scale_tensor, "Bias": tensor_arg(self, bias, at, "bias"),
        "SEQ_LEN_Q": tensor_arg(self, seq_len_q, at, "seq_len_q"),
        "SEQ_LEN_KV": tensor_arg(self, seq_len_kv, at, "seq_len_kv"),
        "Page_table_K": tensor_arg(self, paged_attention_k_table, at, "paged_attention_k_table"),
        "Page_table_V": tensor_arg(self, paged_attention_v_table, at, "paged_attention_v_table"), **dropout_ins}
    node = SDPAFP8(name, inputs, opts, compute_data_type)
    ports = ["O", "Stats", "Amax_S", "Amax_O"] if stats else ["O", "Amax_S", "Amax_O"]
    out = _add_outputs(self, node, ports, {})
    return [out[0], out[1], out[2], out[3]] if stats else [out[0], None, out[1], out[2]]


@op
def sdpa_fp8_backward(self: Any, q: Any, k: Any, v: Any, o: Any, dO: Any, stats: Any, descale_q: Any,
                      descale_k: Any, descale_v: Any, descale_o: Any, descale_dO: Any, descale_s: Any,
                      descale_dP: Any, scale_s: Any, scale_dQ: Any, scale_dK: Any, scale_dV: Any, scale_dP: Any,
                      attn_scale: Any = None, use_padding_mask: bool = False, seq_len_q: Any = None,
                      seq_len_kv: Any = None, use_causal_mask: bool = False,
                      use_causal_mask_bottom_right: bool = False, diagonal_alignment: Any = TOP_LEFT,
                      left_bound: int | None = None, right_bound: int | None = None,
                      use_deterministic_algorithm: bool = False, dropout: Any = None,
                      compute_data_type: Any = NOT_SET, name: str = "", sink_token: Any = None,
                      dSink_token: Any = None) -> list[Tensor]:
    """FP8 attention backward; returns [dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV, Amax_dP].

    Repeat the forward's masks and scale; ``stats`` is its Stats. descale_s/scale_s requantize the
    recomputed P, descale_dP/scale_dP the gradient dS; scale_dQ/dK/dV quantize the outputs."""
    name = self.node_name(name)
    at = f"sdpa_fp8_backward {name!r}"
    align, left, right = bounds(at, use_causal_mask, use_causal_mask_bottom_right, None,
                                 diagonal_alignment, left_bound, right_bound, FP8_BOUNDS)
    scale_value, scale_tensor = scale_arg(self, attn_scale, at)
    p, dropout_ins = dropout_backward(self, dropout, at, keep_scale_inverse=True)
    if sink_token is not None or dSink_token is not None:
        raise GraphNotSupportedError(f"{at}: sink_token / dSink_token are not supported by FP8 attention in cudnn-py")
    opts = SdpaOptions(attn_scale_value=scale_value, padding=as_bool(use_padding_mask, at, "use_padding_mask"),
                       alignment=align, left_bound=left, right_bound=right, dropout_p=p,
                       deterministic=as_bool(use_deterministic_algorithm, at, "use_deterministic_algorithm"))
    given = {"descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v, "descale_o": descale_o,
                 "descale_dO": descale_dO, "descale_s": descale_s, "descale_dP": descale_dP, "scale_s": scale_s,
                 "scale_dQ": scale_dQ, "scale_dK": scale_dK, "scale_dV": scale_dV, "scale_dP": scale_dP}
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        "O": self.input_tensor(o, at, "o"), "dO": self.input_tensor(dO, at, "dO"),
        "Stats": self.input_tensor(stats, at, "stats"), **_scales(self, at, given, BWD_SCALES),
        "Attn_scale": scale_tensor, "SEQ_LEN_Q": tensor_arg(self, seq_len_q, at, "seq_len_q"),
        "SEQ_LEN_KV": tensor_arg(self, seq_len_kv, at, "seq_len_kv"), **dropout_ins}
    node = SDPAFP8Backward(name, inputs, opts, compute_data_type)
    return _add_outputs(self, node, ["dQ", "dK", "dV", "Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"], {})


# -- MXFP8 attention ------------------------------------------------------------------------------

@op
def sdpa_mxfp8(self: Any, q: Any, k: Any, v: Any, descale_q: Any, descale_k: Any, descale_v: Any,
               attn_scale: Any = None, use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
               diagonal_alignment: Any = TOP_LEFT, diagonal_band_left_bound: int | None = None,
               diagonal_band_right_bound: int | None = None, compute_data_type: Any = NOT_SET, name: str = "",
               generate_stats: bool | None = None, sink_token: Any = None, unfuse_fma: bool = False) -> list[Maybe]:
    """MXFP8 attention forward (Blackwell, cuDNN >= 9.21); returns [O, Stats, Amax_O].

    descale_q/k/v are FP8_E8M0 block scale factors (F8_128x4 reordering): Q and K scaled along
    the head dim, V along the sequence, 32 elements a block. ``generate_stats`` is required."""
    name = self.node_name(name)
    at = f"sdpa_mxfp8 {name!r}"
    if generate_stats is None:
        raise GraphError(f"{at}: generate_stats is required (True or False)")
    stats = exact_bool(generate_stats, at, "generate_stats")
    align, left, right = bounds(at, use_causal_mask, use_causal_mask_bottom_right, None,
                                 diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)
    scale_value, scale_tensor = scale_arg(self, attn_scale, at)
    opts = SdpaOptions(generate_stats=stats, attn_scale_value=scale_value, alignment=align, left_bound=left,
                       right_bound=right, unfuse_fma=as_bool(unfuse_fma, at, "unfuse_fma"))
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        "Descale_Q": tensor_arg(self, descale_q, at, "descale_q"),
        "Descale_K": tensor_arg(self, descale_k, at, "descale_k"),
        "Descale_V": tensor_arg(self, descale_v, at, "descale_v"), "Attn_scale": scale_tensor,
        "SINK_TOKEN": tensor_arg(self, sink_token, at, "sink_token")}
    node = SDPAMXFP8(name, inputs, opts, compute_data_type)
    out = _add_outputs(self, node, ["O", "Stats", "Amax_O"] if stats else ["O", "Amax_O"], {})
    return [out[0], out[1], out[2]] if stats else [out[0], None, out[1]]


@op
def sdpa_mxfp8_backward(self: Any, q: Any, q_T: Any, k: Any, k_T: Any, v: Any, o_f16: Any, dO_f16: Any, dO: Any,
                        dO_T: Any, stats: Any, descale_q: Any, descale_q_T: Any, descale_k: Any, descale_k_T: Any,
                        descale_v: Any, descale_dO: Any, descale_dO_T: Any, attn_scale: Any = None,
                        use_padding_mask: bool = False, seq_len_q: Any = None, seq_len_kv: Any = None,
                        use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
                        diagonal_alignment: Any = TOP_LEFT, left_bound: int | None = None,
                        right_bound: int | None = None, use_deterministic_algorithm: bool = False,
                        dropout: Any = None, compute_data_type: Any = NOT_SET, name: str = "",
                        sink_token: Any = None, dSink_token: Any = None) -> list[Tensor]:
    """MXFP8 attention backward (Blackwell, cuDNN >= 9.21); returns [dQ, dK, dV, Amax_dQ,
    Amax_dK, Amax_dV]. ``*_T`` are the sequence-major copies with their own scale factors;
    ``o_f16`` / ``dO_f16`` are O and dO in fp16/bf16 (for rowsum(dO * O))."""
    name = self.node_name(name)
    at = f"sdpa_mxfp8_backward {name!r}"
    align, left, right = bounds(at, use_causal_mask, use_causal_mask_bottom_right, None,
                                 diagonal_alignment, left_bound, right_bound, FP8_BOUNDS)
    scale_value, scale_tensor = scale_arg(self, attn_scale, at)
    p, dropout_ins = dropout_backward(self, dropout, at, keep_scale_inverse=True)
    opts = SdpaOptions(attn_scale_value=scale_value, padding=as_bool(use_padding_mask, at, "use_padding_mask"),
                       alignment=align, left_bound=left, right_bound=right, dropout_p=p,
                       deterministic=as_bool(use_deterministic_algorithm, at, "use_deterministic_algorithm"))
    t = {"Q": ("q", q), "Q_T": ("q_T", q_T), "K": ("k", k), "K_T": ("k_T", k_T), "V": ("v", v), "O": ("o_f16", o_f16),
         "dO_f16": ("dO_f16", dO_f16), "dO": ("dO", dO), "dO_T": ("dO_T", dO_T), "Stats": ("stats", stats)}
    inputs: dict[str, Maybe] = {port: self.input_tensor(value, at, arg) for port, (arg, value) in t.items()}
    factors = {"Descale_Q": descale_q, "Descale_Q_T": descale_q_T, "Descale_K": descale_k, "Descale_K_T": descale_k_T,
               "Descale_V": descale_v, "Descale_dO": descale_dO, "Descale_dO_T": descale_dO_T}
    inputs.update({port: tensor_arg(self, value, at, "descale" + port[7:]) for port, value in factors.items()})
    inputs.update({"Attn_scale": scale_tensor, "SEQ_LEN_Q": tensor_arg(self, seq_len_q, at, "seq_len_q"),
                   "SEQ_LEN_KV": tensor_arg(self, seq_len_kv, at, "seq_len_kv"),
                   "SINK_TOKEN": tensor_arg(self, sink_token, at, "sink_token"), **dropout_ins})
    node = SDPAMXFP8Backward(name, inputs, opts, compute_data_type)
    return _add_outputs(self, node, ["dQ", "dK", "dV", "Amax_dQ", "Amax_dK", "Amax_dV"],
                        {"DSINK_TOKEN": output_arg(dSink_token, at, "dSink_token")})


# -- block scaling -------------------------------------------------------------------------------

@op
def block_scale_quantize(self: Any, input: Any, block_size: int,
                         axis: int | None = None,
                         transpose: bool = False, compute_data_type: Any = NOT_SET, name: str = "", *,
                         group_offset: Any = None) -> list[Tensor]:
    """Quantize ``input`` into blocks of ``block_size`` along ``axis`` (the last dim by default);
    returns (Y, scale). Y's type is what you set on it (FP8_E4M3/E5M2, FP4_E2M1) or the graph's
    io_data_type; scales are FP8_E8M0 for blocks of 32, FP8_E4M3 for 16 (NVFP4). ``transpose``
    lays Y and the scales out with the block axis packed. cuDNN >= 9.7. ``group_offset`` (1.32's
    grouped quantization) has no BLOCK_SCALE_QUANTIZE attribute in cuDNN and is refused."""
    name = self.node_name(name)
    at = f"block_scale_quantize {name!r}"
    if group_offset is not None:
        raise GraphNotSupportedError(f"{at}: group_offset (1.32's grouped quantization) has no "
                                     "BLOCK_SCALE_QUANTIZE attribute in the cuDNN backend API; leave it None")
    node = BlockScaleQuantize(name, self.input_tensor(input, at, "input"), block_size, axis, transpose,
                              compute_data_type)
    return self.add_node(node, ["Y", "scale"])


@op
def block_scale_dequantize(self: Any, input: Any, descale: Any,
                           block_size: Any, is_negative_scale: bool = False,
                           compute_data_type: Any = NOT_SET, name: str = "") -> Tensor:
    """Y = input * descale per block (``block_size`` per trailing dim, e.g. [1, 32]); Y is virtual
    and feeds another operation (a matmul). ``is_negative_scale`` needs cuDNN >= 9.13."""
    name = self.node_name(name)
    at = f"block_scale_dequantize {name!r}"
    node = BlockScaleDequantize(name, self.input_tensor(input, at, "input"), self.input_tensor(descale, at, "descale"),
                                block_size, is_negative_scale, compute_data_type)
    return self.add_node(node, ["Y"])[0]
