"""The argument translation of the attention op methods (``sdpa``, ``sdpa_backward``, and the
low-precision ``sdpa_fp8`` / ``sdpa_mxfp8`` families): the official binding's rules for causal
flags and bounds, ``attn_scale``, the ``dropout`` tuple forms, ``kv_mask`` and the output
tensors a call passes in."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

from ..._lib.enums import data_type
from ..model.arguments import as_bool, as_float, as_int, optional
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.sdpa_enums import attention_implementation, diagonal_alignment
from ..model.tensor import Tensor

Maybe = Tensor | None
TOP_LEFT = diagonal_alignment.TOP_LEFT
AUTO = attention_implementation.AUTO


# -- argument translation ------------------------------------------------------------------------

def positive_or_none(value: Any, at: str, arg: str) -> int | None:
    """A size (a sequence length): refused here when not positive, before a node made from it
    (a paged cache load, a workspace size) fails far from the call."""
    n = optional(as_int, value, at, arg)
    if n is not None and n <= 0:
        raise GraphError(f"{at}: {arg}: expected a positive int, got {n}")
    return n


SDPA_BOUNDS = ("sliding_window_length", "diagonal_band_left_bound", "diagonal_band_right_bound")
FP8_BOUNDS = ("sliding_window", "left_bound", "right_bound")  # sdpa_fp8's names, and the FP8 / MXFP8 backward's


def bounds(at: str, causal: bool, causal_br: bool, window: Any, alignment: Any, left: Any, right: Any,
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


def scale_arg(graph: Any, attn_scale: Any, at: str) -> tuple[float | None, Maybe]:
    if attn_scale is None:
        return None, None
    if isinstance(attn_scale, float) or (isinstance(attn_scale, int) and not isinstance(attn_scale, bool)):
        return float(attn_scale), None
    return None, graph.input_tensor(attn_scale, at, "attn_scale")


def callable_arg(fn: Any, at: str, arg: str) -> Callable[..., Any] | None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{at}: {arg} must be a callable f(graph, score) -> tensor, got {type(fn).__name__}")
    return fn


def tensor_arg(graph: Any, value: Any, at: str, arg: str) -> Maybe:
    return None if value is None else graph.input_tensor(value, at, arg)


def output_arg(value: Any, at: str, arg: str) -> Maybe:
    """A user-made output tensor (rng_dump, score_max, dBias, ...)."""
    if value is None:
        return None
    if not isinstance(value, Tensor):
        raise TypeError(f"{at}: {arg} must be a cudnn.tensor made with graph.tensor(...), got {type(value).__name__}")
    return value


def probability(value: Any, at: str) -> float:
    p = as_float(value, at, "dropout probability")
    if not 0.0 <= p < 1.0:
        raise GraphError(f"{at}: dropout probability must be in [0, 1), got {p} "
                         "(p = 1 would drop every element)")
    return p


def dropout_forward(graph: Any, dropout: Any, at: str) -> tuple[float | None, dict[str, Maybe]]:
    if dropout is None:
        return None, {}
    if not isinstance(dropout, (tuple, list)) or len(dropout) not in (2, 3):
        raise GraphError(f"{at}: dropout must be (probability, seed, offset) or (mask, scale), got {dropout!r}")
    if len(dropout) == 3:
        p = probability(dropout[0], at)
        return p, {"Seed": graph.input_tensor(dropout[1], at, "dropout seed"),
                   "Offset": graph.input_tensor(dropout[2], at, "dropout offset")}
    if isinstance(dropout[0], (int, float)):
        raise GraphError(f"{at}: dropout with a probability needs (probability, seed, offset); a 2-tuple is "
                         "(mask, scale)")
    return None, {"Dropout_mask": graph.input_tensor(dropout[0], at, "dropout mask"),
                  "Dropout_scale": graph.input_tensor(dropout[1], at, "dropout scale")}


def dropout_backward(graph: Any, dropout: Any, at: str,
                      keep_scale_inverse: bool = False) -> tuple[float | None, dict[str, Maybe]]:
    """(p, seed, offset) or (mask, scale, scale_inverse); the scale inverse is bound only where the
    backward graph uses it (``keep_scale_inverse``: the FP8 one)."""
    if dropout is None:
        return None, {}
    if not isinstance(dropout, (tuple, list)) or len(dropout) != 3:
        raise GraphError(f"{at}: dropout must be (probability, seed, offset) or (mask, scale, scale_inverse), "
                         f"got {dropout!r}")
    if isinstance(dropout[0], (int, float)) and not isinstance(dropout[0], bool):
        p = probability(dropout[0], at)
        return p, {"Seed": graph.input_tensor(dropout[1], at, "dropout seed"),
                   "Offset": graph.input_tensor(dropout[2], at, "dropout offset")}
    # the fp16/bf16 backward graph forms the gradient with the scale alone (families/sdpa_backward_nodes.py):
    # there scale_inverse is checked but left out, and a buffer given for it at execute is a key of
    # no graph tensor, which execute ignores
    if not keep_scale_inverse:
        graph.input_tensor(dropout[2], at, "dropout scale_inverse")
    ports = {"Dropout_mask": graph.input_tensor(dropout[0], at, "dropout mask"),
             "Dropout_scale": graph.input_tensor(dropout[1], at, "dropout scale")}
    if keep_scale_inverse:
        ports["Dropout_scale_inv"] = graph.input_tensor(dropout[2], at, "dropout scale_inverse")
    return None, ports


def implementation_arg(value: Any, at: str) -> attention_implementation:
    try:
        return attention_implementation(value)
    except ValueError:
        raise TypeError(f"{at}: implementation must be a cudnn.attention_implementation, got {value!r}") from None


# -- 1.32's Python-side arguments of sdpa ---------------------------------------------------------

LN2 = math.log(2.0)  # the scale of scores from a Q prefolded with attn_scale * log2(e)
_BYTE_MASKS = (data_type.BOOLEAN, data_type.INT8, data_type.UINT8)


def check_softmax_precision(value: Any, at: str) -> None:
    if value is None or value == data_type.FLOAT:
        return
    if value == data_type.HALF:
        raise GraphNotSupportedError(f"{at}: softmax_precision=HALF (an fp16 softmax accumulator) is served only "
                                     "by the official frontend's Python engines for compute capability 10.7; "
                                     "cuDNN's attention computes the softmax in FLOAT (softmax_precision=FLOAT)")
    raise GraphError(f"{at}: softmax_precision must be cudnn.data_type.FLOAT or HALF, got {value!r}")


def prefolded(value: Any, at: str) -> bool:
    if value is None or (isinstance(value, (bool, int)) and not isinstance(value, enum.Enum) and value in (0, 1)):
        return bool(value)
    if type(value).__name__ == "bool_":  # a numpy bool
        return bool(value)
    raise TypeError(f"{at}: attn_scale_prefolded must be a bool, got {value!r}")


def kv_mask_arg(graph: Any, value: Any, k: Any, at: str) -> Tensor:
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


def with_kv_mask(user: Callable[..., Any] | None, mask: Tensor) -> Callable[..., Any]:
    """A score_mod adding the per-key vector ``mask`` to the scaled scores after the user's score_mod."""
    def apply(sub: Any, score: Tensor) -> Tensor:
        if user is not None:
            score = user(sub, score)
        return sub.add(score, mask, name="kv_mask_add")
    return apply
