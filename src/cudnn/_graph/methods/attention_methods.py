"""The attention op methods of ``pygraph``: ``sdpa``, ``sdpa_backward`` and their long aliases.

Signatures are the official frontend's v1.23 ones (positional order, names, defaults); the
keywords the 1.32 wheel added (``max_total_seq_len_q/kv``, ``cu_seq_len_q/kv``,
``stats_use_log2``) are keyword-only, which accepts code written for either version. The
argument translation is the official binding's: ``is_inference`` / ``generate_stats`` (exactly
one), causal flags -> alignment and right bound 0, ``sliding_window_length`` -> left bound, a
float ``attn_scale`` -> a by-value constant, and the ``dropout`` tuple forms.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

from ..._lib.enums import data_type
from ..families.sdpa import SDPA
from ..families.sdpa_backward import SDPABackward
from ..families.sdpa_common import SdpaOptions
from ..model.arguments import as_bool, as_float, as_int, exact_bool, optional
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.sdpa_enums import attention_implementation, diagonal_alignment
from ..model.tensor import NOT_SET, Tensor
from .method_table import op, register

Maybe = Tensor | None
TOP_LEFT = diagonal_alignment.TOP_LEFT
AUTO = attention_implementation.AUTO


# -- argument translation ------------------------------------------------------------------------

def _positive_or_none(value: Any, at: str, arg: str) -> int | None:
    """A size (a sequence length): refused here when not positive, before a node made from it
    (a paged cache load, a workspace size) fails far from the call."""
    n = optional(as_int, value, at, arg)
    if n is not None and n <= 0:
        raise GraphError(f"{at}: {arg}: expected a positive int, got {n}")
    return n


SDPA_BOUNDS = ("sliding_window_length", "diagonal_band_left_bound", "diagonal_band_right_bound")
FP8_BOUNDS = ("sliding_window", "left_bound", "right_bound")  # sdpa_fp8's names, and the FP8 / MXFP8 backward's


def _bounds(at: str, causal: bool, causal_br: bool, window: Any, alignment: Any, left: Any, right: Any,
            names: tuple[str, str, str] = SDPA_BOUNDS) -> tuple[diagonal_alignment, int | None, int | None]:
    """(alignment, left bound, right bound) from the causal flags, window and explicit bounds;
    ``names``: the op's names of the window and the bounds."""
    causal = as_bool(causal, at, "use_causal_mask")
    causal_br = as_bool(causal_br, at, "use_causal_mask_bottom_right")
    try:
        align = diagonal_alignment(alignment)
    except ValueError:
        raise TypeError(f"{at}: diagonal_alignment must be a cudnn.diagonal_alignment, got {alignment!r}") from None
    window_arg, left_arg, right_arg = names
    window = optional(as_int, window, at, window_arg)
    left = optional(as_int, left, at, left_arg)
    right = optional(as_int, right, at, right_arg)
    if causal and causal_br:
        raise GraphError(f"{at}: use_causal_mask and use_causal_mask_bottom_right cannot both be True")
    if (causal or causal_br) and right is not None:
        flag = "use_causal_mask" if causal else "use_causal_mask_bottom_right"
        raise GraphError(f"{at}: {flag} sets the right bound to 0; do not also give {right_arg} (got {right})")
    if window is not None and left is not None:
        raise GraphError(f"{at}: {window_arg} sets the left bound; do not also give {left_arg} (got {left})")
    if causal:
        align, right = diagonal_alignment.TOP_LEFT, 0
    elif causal_br:
        align, right = diagonal_alignment.BOTTOM_RIGHT, 0
    if window is not None:
        left = window
    return align, left, right


def _scale(graph: Any, attn_scale: Any, at: str) -> tuple[float | None, Maybe]:
    if attn_scale is None:
        return None, None
    if isinstance(attn_scale, float) or (isinstance(attn_scale, int) and not isinstance(attn_scale, bool)):
        return float(attn_scale), None
    return None, graph.input_tensor(attn_scale, at, "attn_scale")


def _callable(fn: Any, at: str, arg: str) -> Callable[..., Any] | None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{at}: {arg} must be a callable f(graph, score) -> tensor, got {type(fn).__name__}")
    return fn


def _tensor(graph: Any, value: Any, at: str, arg: str) -> Maybe:
    return None if value is None else graph.input_tensor(value, at, arg)


def _output(value: Any, at: str, arg: str) -> Maybe:
    """A user-made output tensor (rng_dump, score_max, dBias, ...)."""
    if value is None:
        return None
    if not isinstance(value, Tensor):
        raise TypeError(f"{at}: {arg} must be a cudnn.tensor made with graph.tensor(...), got {type(value).__name__}")
    return value


def _probability(value: Any, at: str) -> float:
    p = as_float(value, at, "dropout probability")
    if not 0.0 <= p < 1.0:
        raise GraphError(f"{at}: dropout probability must be in [0, 1), got {p} "
                         "(p = 1 would drop every element)")
    return p


def _dropout_forward(graph: Any, dropout: Any, at: str) -> tuple[float | None, dict[str, Maybe]]:
    if dropout is None:
        return None, {}
    if not isinstance(dropout, (tuple, list)) or len(dropout) not in (2, 3):
        raise GraphError(f"{at}: dropout must be (probability, seed, offset) or (mask, scale), got {dropout!r}")
    if len(dropout) == 3:
        p = _probability(dropout[0], at)
        return p, {"Seed": graph.input_tensor(dropout[1], at, "dropout seed"),
                   "Offset": graph.input_tensor(dropout[2], at, "dropout offset")}
    if isinstance(dropout[0], (int, float)):
        raise GraphError(f"{at}: dropout with a probability needs (probability, seed, offset); a 2-tuple is "
                         "(mask, scale)")
    return None, {"Dropout_mask": graph.input_tensor(dropout[0], at, "dropout mask"),
                  "Dropout_scale": graph.input_tensor(dropout[1], at, "dropout scale")}


def _dropout_backward(graph: Any, dropout: Any, at: str,
                      keep_scale_inverse: bool = False) -> tuple[float | None, dict[str, Maybe]]:
    """(p, seed, offset) or (mask, scale, scale_inverse); the scale inverse is bound only where the
    backward graph uses it (``keep_scale_inverse``: the FP8 one)."""
    if dropout is None:
        return None, {}
    if not isinstance(dropout, (tuple, list)) or len(dropout) != 3:
        raise GraphError(f"{at}: dropout must be (probability, seed, offset) or (mask, scale, scale_inverse), "
                         f"got {dropout!r}")
    if isinstance(dropout[0], (int, float)) and not isinstance(dropout[0], bool):
        p = _probability(dropout[0], at)
        return p, {"Seed": graph.input_tensor(dropout[1], at, "dropout seed"),
                   "Offset": graph.input_tensor(dropout[2], at, "dropout offset")}
    # the fp16/bf16 backward graph forms the gradient with the scale alone (nodes/sdpa_backward.py):
    # there scale_inverse is checked but left out, and a buffer given for it at execute is a key of
    # no graph tensor, which execute ignores
    if not keep_scale_inverse:
        graph.input_tensor(dropout[2], at, "dropout scale_inverse")
    ports = {"Dropout_mask": graph.input_tensor(dropout[0], at, "dropout mask"),
             "Dropout_scale": graph.input_tensor(dropout[1], at, "dropout scale")}
    if keep_scale_inverse:
        ports["Dropout_scale_inv"] = graph.input_tensor(dropout[2], at, "dropout scale_inverse")
    return None, ports


def _implementation(value: Any, at: str) -> attention_implementation:
    try:
        return attention_implementation(value)
    except ValueError:
        raise TypeError(f"{at}: implementation must be a cudnn.attention_implementation, got {value!r}") from None


# -- 1.32's Python-side arguments of sdpa ---------------------------------------------------------

LN2 = math.log(2.0)  # the scale of scores from a Q prefolded with attn_scale * log2(e)
_BYTE_MASKS = (data_type.BOOLEAN, data_type.INT8, data_type.UINT8)


def _softmax_precision(value: Any, at: str) -> None:
    if value is None or value == data_type.FLOAT:
        return
    if value == data_type.HALF:
        raise GraphNotSupportedError(f"{at}: softmax_precision=HALF (an fp16 softmax accumulator) is served only "
                                     "by the official frontend's Python engines for compute capability 10.7; "
                                     "cuDNN's attention computes the softmax in FLOAT (softmax_precision=FLOAT)")
    raise GraphError(f"{at}: softmax_precision must be cudnn.data_type.FLOAT or HALF, got {value!r}")


def _prefolded(value: Any, at: str) -> bool:
    if value is None or (isinstance(value, (bool, int)) and not isinstance(value, enum.Enum) and value in (0, 1)):
        return bool(value)
    if type(value).__name__ == "bool_":  # a numpy bool
        return bool(value)
    raise TypeError(f"{at}: attn_scale_prefolded must be a bool, got {value!r}")


def _kv_mask(graph: Any, value: Any, k: Any, at: str) -> Tensor:
    """The kv_mask tensor, its dims checked against K's where both are known."""
    mask = graph.input_tensor(value, at, "kv_mask")
    dims = mask.get_dim()
    kdims = k.get_dim() if isinstance(k, Tensor) else list(getattr(k, "shape", []))
    if dims and kdims and len(kdims) == 4 and (
            len(dims) != 4 or dims[1:3] != [1, 1] or dims[3] != kdims[2] or dims[0] not in (1, kdims[0])):
        raise GraphError(f"{at}: kv_mask dims {dims} must be [1|B, 1, 1, S_kv] = [1|{kdims[0]}, 1, 1, {kdims[2]}]")
    dtype = mask.get_data_type()
    if dtype == data_type.NOT_SET:
        raise GraphError(f"{at}: kv_mask has no data type: give an additive float vector (0 keeps a key, -inf "
                         "masks it)")
    if dtype in _BYTE_MASKS:
        raise GraphNotSupportedError(
            f"{at}: a {dtype.name} kv_mask is not served: cuDNN's attention engines compile no byte-mask input "
            "(the official frontend serves kv_mask only with its Blackwell Python engines). Give an additive "
            "float kv_mask instead: 0.0 where a key is kept, -inf where it is masked, e.g. "
            "torch.where(keep, 0.0, float('-inf'))")
    return mask


def _with_kv_mask(user: Callable[..., Any] | None, mask: Tensor) -> Callable[..., Any]:
    """A score_mod adding the per-key vector ``mask`` to the scaled scores after the user's score_mod."""
    def apply(sub: Any, score: Tensor) -> Tensor:
        if user is not None:
            score = user(sub, score)
        return sub.add(score, mask, name="kv_mask_add")
    return apply


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
    _softmax_precision(softmax_precision, at)
    if _prefolded(attn_scale_prefolded, at):
        if attn_scale is not None:
            raise GraphError(f"{at}: attn_scale_prefolded=True: leave attn_scale unset (got {attn_scale!r}); Q "
                             "already carries attn_scale * log2(e)")
        attn_scale = LN2
    if kv_mask is not None:
        score_mod = _with_kv_mask(_callable(score_mod, at, "score_mod"), _kv_mask(self, kv_mask, k, at))
    if (is_inference is None) == (generate_stats is None):
        raise GraphError(f"{at}: give exactly one of is_inference and generate_stats (got is_inference="
                         f"{is_inference!r}, generate_stats={generate_stats!r})")
    stats = not exact_bool(is_inference, at, "is_inference") if generate_stats is None \
        else exact_bool(generate_stats, at, "generate_stats")
    if cu_seq_len_q is not None or cu_seq_len_kv is not None:
        raise GraphNotSupportedError(f"{at}: cu_seq_len_q / cu_seq_len_kv need the SDPA_FWD CU_SEQ_LEN "
                                     "attributes (cuDNN >= 9.24), which cudnn-py does not build; use "
                                     "seq_len_q/kv with ragged offsets")
    align, left, right = _bounds(at, use_causal_mask, use_causal_mask_bottom_right, sliding_window_length,
                                 diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)
    scale_value, scale_tensor = _scale(self, attn_scale, at)
    p, dropout_ins = _dropout_forward(self, dropout, at)
    if rng_dump is not None and p is None:
        raise GraphError(f"{at}: rng_dump is only used with dropout=(probability, seed, offset)")
    opts = SdpaOptions(
        generate_stats=stats, attn_scale_value=scale_value, alibi=as_bool(use_alibi_mask, at, "use_alibi_mask"),
        padding=as_bool(use_padding_mask, at, "use_padding_mask"), alignment=align, left_bound=left,
        right_bound=right, dropout_p=p,
        max_seq_len_kv=_positive_or_none(paged_attention_max_seq_len_kv, at, "paged_attention_max_seq_len_kv"),
        max_total_seq_len_q=_positive_or_none(max_total_seq_len_q, at, "max_total_seq_len_q"),
        max_total_seq_len_kv=_positive_or_none(max_total_seq_len_kv, at, "max_total_seq_len_kv"),
        score_mod=_callable(score_mod, at, "score_mod"), implementation=_implementation(implementation, at),
        unfuse_fma=as_bool(unfuse_fma, at, "unfuse_fma"), stats_use_log2=as_bool(stats_use_log2, at, "stats_use_log2"))
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        "Attn_scale": scale_tensor, "Bias": _tensor(self, bias, at, "bias"),
        "Block_mask": _tensor(self, block_mask, at, "block_mask"),
        "SEQ_LEN_Q": _tensor(self, seq_len_q, at, "seq_len_q"),
        "SEQ_LEN_KV": _tensor(self, seq_len_kv, at, "seq_len_kv"),
        "Page_table_K": _tensor(self, paged_attention_k_table, at, "paged_attention_k_table"),
        "Page_table_V": _tensor(self, paged_attention_v_table, at, "paged_attention_v_table"),
        "SINK_TOKEN": _tensor(self, sink_token, at, "sink_token"), **dropout_ins}
    node = SDPA(name, inputs, opts, compute_data_type)
    if opts.stats_use_log2:
        raise GraphNotSupportedError(f"{at}: stats_use_log2 needs the SOFTMAX operation's STATS_LOG2 attribute "
                                     "(cuDNN >= 9.27), which cudnn-py does not build")
    users = {port: _output(t, at, arg) for port, t, arg in (
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
    scale_inverse is checked but not part of the graph (see nodes/sdpa_backward.py)."""
    name = self.node_name(name)
    at = f"sdpa_backward {name!r}"
    if softmax_precision is not None or _prefolded(attn_scale_prefolded, at):
        raise GraphError(f"{at}: softmax_precision and attn_scale_prefolded describe the forward's softmax; "
                         "leave them unset on the backward (give the forward's attn_scale instead)")
    align, left, right = _bounds(at, use_causal_mask, use_causal_mask_bottom_right, sliding_window_length,
                                 diagonal_alignment, diagonal_band_left_bound, diagonal_band_right_bound)
    scale_value, scale_tensor = _scale(self, attn_scale, at)
    p, dropout_ins = _dropout_backward(self, dropout, at)
    if rng_dump is not None and p is None:
        raise GraphError(f"{at}: rng_dump is only used with dropout=(probability, seed, offset)")
    opts = SdpaOptions(
        attn_scale_value=scale_value, alibi=as_bool(use_alibi_mask, at, "use_alibi_mask"),
        padding=as_bool(use_padding_mask, at, "use_padding_mask"), alignment=align, left_bound=left,
        right_bound=right, dropout_p=p,
        max_total_seq_len_q=_positive_or_none(max_total_seq_len_q, at, "max_total_seq_len_q"),
        max_total_seq_len_kv=_positive_or_none(max_total_seq_len_kv, at, "max_total_seq_len_kv"),
        score_mod=_callable(score_mod, at, "score_mod"),
        score_mod_bprop=_callable(score_mod_bprop, at, "score_mod_bprop"),
        deterministic=as_bool(use_deterministic_algorithm, at, "use_deterministic_algorithm"))
    inputs: dict[str, Maybe] = {
        "Q": self.input_tensor(q, at, "q"), "K": self.input_tensor(k, at, "k"), "V": self.input_tensor(v, at, "v"),
        "O": self.input_tensor(o, at, "o"), "dO": self.input_tensor(dO, at, "dO"),
        "Stats": self.input_tensor(stats, at, "stats"),
        "Attn_scale": scale_tensor, "Bias": _tensor(self, bias, at, "bias"),
        "SEQ_LEN_Q": _tensor(self, seq_len_q, at, "seq_len_q"),
        "SEQ_LEN_KV": _tensor(self, seq_len_kv, at, "seq_len_kv"),
        "SINK_TOKEN": _tensor(self, sink_token, at, "sink_token"), **dropout_ins}
    node = SDPABackward(name, inputs, opts, compute_data_type)
    users = {port: _output(t, at, arg) for port, t, arg in (
        ("dBias", dBias, "dBias"), ("RNG_DUMP", rng_dump, "rng_dump"), ("DSINK_TOKEN", dSink_token, "dSink_token"))}
    out = self.add_node(node, ["dQ", "dK", "dV"])  # after every check: a refusal adds nothing
    node.outputs.update((port, t) for port, t in users.items() if t is not None)
    return out


register("scaled_dot_product_flash_attention", sdpa)
register("scaled_dot_product_flash_attention_backward", sdpa_backward)

# the low-precision family, which uses the helpers above; the rebuilders of attention nodes from graph JSON
from ..text import sdpa_from_json as sdpa_json  # noqa: E402, F401
from . import lowp_methods as lowp_ops
