"""The attention op methods of ``pygraph``: ``sdpa``, ``sdpa_backward`` and their long aliases.

Signatures are the official frontend's v1.23 ones (positional order, names, defaults); the
keywords the 1.32 wheel added (``max_total_seq_len_q/kv``, ``cu_seq_len_q/kv``,
``stats_use_log2``) are keyword-only, which accepts code written for either version. The
argument translation is the official binding's: ``is_inference`` / ``generate_stats`` (exactly
one), causal flags -> alignment and right bound 0, ``sliding_window_length`` -> left bound, a
float ``attn_scale`` -> a by-value constant, and the ``dropout`` tuple forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..families.sdpa_backward_nodes import SDPABackward
from ..families.sdpa_common import SdpaOptions
from ..families.sdpa_nodes import SDPA
from ..model.arguments import as_bool, exact_bool
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.tensor import NOT_SET, Tensor
from .attention_args import (
    AUTO,
    LN2,
    TOP_LEFT,
    Maybe,
    bounds,
    callable_arg,
    check_softmax_precision,
    dropout_backward,
    dropout_forward,
    implementation_arg,
    kv_mask_arg,
    output_arg,
    positive_or_none,
    prefolded,
    scale_arg,
    tensor_arg,
    with_kv_mask,
)
from .method_table import op, register

# -- the methods ---------------------------------------------------------------------------------


@op
def sdpa(self: Any, q: Any, k: Any, v: Any, is_inference: bool | None = None, attn_scale: Any = None,
         bias: Any = None, block_mask: Any = None, use_alibi_mask: bool = False, use_padding_mask: bool = False,
         seq_len_q: Any = None, seq_len_kv: Any = None, use_causal_mask: bool = False,
         use_causal_mask_bottom_right: bool = False, sliding_window_length: int | None = None,
         diagonal_alignment: Any = TOP_LEFT, diagonal_band_left_bound: int | None = None,
         diagonal_band_right_bound: int | None = None, dropout: Any = None, rng_dump: Any = None,
         paged_attention_k_table: Any = None, paged_attention_v_table: Any = None,
         paged_attention_max_seq_len_kv: int | None = None, compute_data_type: Any = NOT_SET, name: str = "",
         score_mod: Callable[..., Any] | None = None, generate_stats: bool | None = None,
         implementation: Any = AUTO, score_max: Any = None, score_sum_exp: Any = None, sink_token: Any = None,
         unfuse_fma: bool = False, *, max_total_seq_len_q: int | None = None,
         max_total_seq_len_kv: int | None = None, cu_seq_len_q: Any = None, cu_seq_len_kv: Any = None,
         stats_use_log2: bool = False, softmax_precision: Any = None, attn_scale_prefolded: Any = False,
         kv_mask: Any = None) -> list[Maybe]:
    """Scaled dot-product attention forward; returns [O, Stats] (Stats None when not generated).

    Q [b, h_q, s_q, d_qk], K [b, h_k, s_kv, d_qk], V [b, h_v, s_kv, d_v] in HALF or BFLOAT16;
    O is [b, h_q, s_q, d_v] in Q's layout order, Stats [b, h_q, s_q, 1] FLOAT (log-sum-exp).
    Give exactly one of ``is_inference`` and ``generate_stats``.

    1.32's Python-side arguments: ``softmax_precision`` FLOAT (what cuDNN computes; HALF is
    refused); ``attn_scale_prefolded=True``: Q already carries attn_scale * log2(e), so no
    attn_scale is given and the scores are scaled by ln(2); ``kv_mask`` [1|B, 1, 1, S_kv]: an
    additive per-key vector of a float type (0 keeps a key, -inf masks it for every query),
    added to the scaled scores; a byte mask (BOOLEAN/INT8/UINT8) is refused: cuDNN's
    attention engines here compile no byte-mask input."""
    name = self.node_name(name)
    at = f"sdpa {name!r}"
    check_softmax_precision(softmax_precision, at)
    if prefolded(attn_scale_prefolded, at):
        if attn_scale is not None:
            raise GraphError(f"{at}: attn_scale_prefolded=True: leave attn_scale unset (got {attn_scale!r}); Q "
                             "already carries attn_scale * log2(e)")
        attn_scale = LN2
    if kv_mask is not None:
        score_mod = with_kv_mask(callable_arg(score_mod, at, "score_mod"), kv_mask_arg(self, kv_mask, k, at))
    if (is_inference is None) == (generate_stats is None):
        raise GraphError(f"{at}: give exactly one of is_inference and generate_stats (got is_inference="
                         f"{is_inference!r}, generate_stats={generate_stats!r})")
    stats = not exact_bool(is_inference, at, "is_inference") if generate_stats is None \
        else exact_bool(generate_stats, at, "generate_stats")
    if cu_seq_len_q is not None or cu_seq_len_kv is not None:
        raise GraphNotSupportedError(f"{at}: cu_seq_len_q / cu_seq_len_kv need the SDPA_FWD CU_SEQ_LEN "
                                     "attributes (cuDNN >= 9.24), which cudnn-py does not build; use "
                                     "seq_len_q/kv with ragged offsets")
    align, left, right = bounds(at, use_causal_mask, use_causal_mask_bottom_right, sliding_window_length,
                                 diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)
    scale_value, scale_tensor = scale_arg(self, attn_scale, at)
    p, dropout_ins = dropout_forward(self, dropout, at)
    if rng_dump is not None and p is None:
        raise GraphError(f"{at}: rng_dump is only used with dropout=(probability, seed, offset)")
    opts = SdpaOptions(
        generate_stats=stats, attn_scale_value=scale_value, alibi=as_bool(use_alibi_mask, at, "use_alibi_mask"),
        padding=as_bool(use_padding_mask, at, "use_padding_mask"), alignment=align, left_bound=left,
        right_bound=right, dropout_p=p,
        max_seq_len_kv=positive_or_none(paged_attention_max_seq_len_kv, at, "paged_attention_max_seq_len_kv"),
        max_total_seq_len_q=positive_or_none(max_total_seq_len_q, at, "max_total_seq_len_q"),
        max_total_seq_len_kv=positive_or_none(max_total_seq_len_kv, at, "max_total_seq_len_kv"),
        score_mod=callable_arg(score_mod, at, "score_mod"), implementation=implementation_arg(implementation, at),
        unfuse_fma=as_bool(unfuse_fma, at, "unfuse_fma"), stats_use_log2=as_bool(stats_use_log2, at, "stats_use_log2"))
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        "Attn_scale": scale_tensor, "Bias": tensor_arg(self, bias, at, "bias"),
        "Block_mask": tensor_arg(self, block_mask, at, "block_mask"),
        "SEQ_LEN_Q": tensor_arg(self, seq_len_q, at, "seq_len_q"),
        "SEQ_LEN_KV": tensor_arg(self, seq_len_kv, at, "seq_len_kv"),
        "Page_table_K": tensor_arg(self, paged_attention_k_table, at, "paged_attention_k_table"),
        "Page_table_V": tensor_arg(self, paged_attention_v_table, at, "paged_attention_v_table"),
        "SINK_TOKEN": tensor_arg(self, sink_token, at, "sink_token"), **dropout_ins}
    node = SDPA(name, inputs, opts, compute_data_type)
    if opts.stats_use_log2:
        raise GraphNotSupportedError(f"{at}: stats_use_log2 needs the SOFTMAX operation's STATS_LOG2 attribute "
                                     "(cuDNN >= 9.27), which cudnn-py does not build")
    users = {port: output_arg(t, at, arg) for port, t, arg in (
        ("RNG_DUMP", rng_dump, "rng_dump"), ("Max", score_max, "score_max"),
        ("Sum_exp", score_sum_exp, "score_sum_exp"))}
    out = self.add_node(node, ["O", "Stats"] if stats else ["O"])  # after every check: a refusal adds nothing
    node.outputs.update((port, t) for port, t in users.items() if t is not None)
    return [out[0], out[1] if stats else None]


@op
def sdpa_backward(self: Any, q: Any, k: Any, v: Any, o: Any, dO: Any, stats: Any, attn_scale: Any = None,
                  bias: Any = None, dBias: Any = None, use_alibi_mask: bool = False,
                  use_padding_mask: bool = False, seq_len_q: Any = None, seq_len_kv: Any = None,
                  max_total_seq_len_q: int | None = None, max_total_seq_len_kv: int | None = None,
                  use_causal_mask: bool = False, use_causal_mask_bottom_right: bool = False,
                  sliding_window_length: int | None = None, diagonal_alignment: Any = TOP_LEFT,
                  diagonal_band_left_bound: int | None = None, diagonal_band_right_bound: int | None = None,
                  dropout: Any = None, rng_dump: Any = None, use_deterministic_algorithm: bool = False,
                  compute_data_type: Any = NOT_SET, name: str = "", score_mod: Callable[..., Any] | None = None,
                  score_mod_bprop: Callable[..., Any] | None = None, sink_token: Any = None,
                  dSink_token: Any = None, *, softmax_precision: Any = None,
                  attn_scale_prefolded: Any = False) -> list[Tensor]:
    """Scaled dot-product attention backward; returns [dQ, dK, dV] shaped like Q, K, V.

    Repeat the forward's options (scale, bias, masks, dropout); ``stats`` is the forward's
    Stats. ``dBias`` and ``dSink_token`` are output tensors the caller makes. With
    ``dropout=(mask, scale, scale_inverse)`` the gradient is formed with the scale alone, so
    scale_inverse is checked but not part of the graph (see families/sdpa_backward_nodes.py)."""
    name = self.node_name(name)
    at = f"sdpa_backward {name!r}"
    if softmax_precision is not None or prefolded(attn_scale_prefolded, at):
        raise GraphError(f"{at}: softmax_precision and attn_scale_prefolded describe the forward's softmax; "
                         "leave them unset on the backward (give the forward's attn_scale instead)")
    align, left, right = bounds(at, use_causal_mask, use_causal_mask_bottom_right, sliding_window_length,
                                 diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)
    scale_value, scale_tensor = scale_arg(self, attn_scale, at)
    p, dropout_ins = dropout_backward(self, dropout, at)
    if rng_dump is not None and p is None:
        raise GraphError(f"{at}: rng_dump is only used with dropout=(probability, seed, offset)")
    opts = SdpaOptions(
        attn_scale_value=scale_value, alibi=as_bool(use_alibi_mask, at, "use_alibi_mask"),
        padding=as_bool(use_padding_mask, at, "use_padding_mask"), alignment=align, left_bound=left,
        right_bound=right, dropout_p=p,
        max_total_seq_len_q=positive_or_none(max_total_seq_len_q, at, "max_total_seq_len_q"),
        max_total_seq_len_kv=positive_or_none(max_total_seq_len_kv, at, "max_total_seq_len_kv"),
        score_mod=callable_arg(score_mod, at, "score_mod"),
        score_mod_bprop=callable_arg(score_mod_bprop, at, "score_mod_bprop"),
        deterministic=as_bool(use_deterministic_algorithm, at, "use_deterministic_algorithm"))
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        "O": self.input_tensor(o, at, "o"), "dO": self.input_tensor(dO, at, "dO"),
        "Stats": self.input_tensor(stats, at, "stats"),
        "Attn_scale": scale_tensor, "Bias": tensor_arg(self, bias, at, "bias"),
        "SEQ_LEN_Q": tensor_arg(self, seq_len_q, at, "seq_len_q"),
        "SEQ_LEN_KV": tensor_arg(self, seq_len_kv, at, "seq_len_kv"),
        "SINK_TOKEN": tensor_arg(self, sink_token, at, "sink_token"), **dropout_ins}
    node = SDPABackward(name, inputs, opts, compute_data_type)
    users = {port: output_arg(t, at, arg) for port, t, arg in (
        ("dBias", dBias, "dBias"), ("RNG_DUMP", rng_dump, "rng_dump"), ("DSINK_TOKEN", dSink_token, "dSink_token"))}
    out = self.add_node(node, ["dQ", "dK", "dV"])  # after every check: a refusal adds nothing
    node.outputs.update((port, t) for port, t in users.items() if t is not None)
    return out


register("scaled_dot_product_flash_attention", sdpa)
register("scaled_dot_product_flash_attention_backward", sdpa_backward)

# the low-precision family (imported with this one, as before); the rebuilders of attention nodes from graph JSON
from ..text import sdpa_from_json as sdpa_json  # noqa: E402, F401
from . import lowp_methods  # noqa: E402, F401
