"""Attention nodes rebuilt from a graph's JSON (``pygraph.deserialize(str(graph))``).

``SDPA_FWD`` and ``SDPA_BWD`` nodes (the two the official frontend deserializes) are rebuilt
through ``pygraph.sdpa`` / ``sdpa_backward`` from every attribute the node prints: scale,
masks and their diagonal band (alignment, left and right bounds), dropout, paging, ragged
maxima, lowering, and the user-made outputs (rng_dump, score_max / score_sum_exp, dBias,
dSink_token). A ``score_mod`` callable has no JSON form: such a node is refused by name,
never rebuilt without it.
"""

from __future__ import annotations

from typing import Any

from ..model.graph_errors import SerializationError, SerializationNotSupportedError
from ..model.sdpa_enums import attention_implementation, diagonal_alignment
from ..model.tensor import Tensor
from .graph_from_json import Build, register


def _flag(node: dict[str, Any], key: str) -> bool:
    value = node.get(key, False)
    if not isinstance(value, bool):
        raise SerializationError(f"'{key}' must be true or false, got {value!r}")
    return value


def _int(node: dict[str, Any], key: str) -> int | None:
    value = node.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise SerializationError(f"'{key}' must be an int or null, got {value!r}")
    return value


def _number(node: dict[str, Any], key: str) -> float | None:
    value = node.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SerializationError(f"'{key}' must be a number or null, got {value!r}")
    return None if value is None else float(value)


def _member(enum_type: Any, node: dict[str, Any], key: str, default: str) -> Any:
    name = node.get(key, default)
    if name not in enum_type.__members__:
        raise SerializationError(f"'{key}' must be one of {list(enum_type.__members__)}, got {name!r}")
    return enum_type[name]


def _required(ins: dict[str, Tensor], port: str) -> Tensor:
    t = ins.get(port)
    if t is None:
        raise SerializationError(f"input {port} is missing")
    return t


def _no_callables(node: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if _flag(node, key):
            raise SerializationNotSupportedError(f"the node has a {key} callable, which a graph's JSON cannot hold; "
                                                 "build this attention node in code")


def _outputs(node: dict[str, Any], args: dict[str, str]) -> dict[str, Tensor]:
    """Tensors for the outputs the caller makes (port -> argument): named as printed; their
    attributes are applied with the node's other outputs."""
    printed = node["outputs"]
    return {arg: Tensor(printed[port]) for port, arg in args.items() if port in printed}


def _common(b: Build, node: dict[str, Any], ins: dict[str, Tensor], backward: bool) -> dict[str, Any]:
    """The arguments sdpa and sdpa_backward share, from the printed attributes and inputs."""
    p = _number(node, "dropout_probability")
    dropout: tuple[Any, ...] | None = None
    if p is not None:
        dropout = (p, _required(ins, "Seed"), _required(ins, "Offset"))
    elif "Dropout_mask" in ins:
        mask, scale = ins["Dropout_mask"], _required(ins, "Dropout_scale")
        # the fp16/bf16 backward checks a scale inverse but leaves it out of the graph (sdpa_ops)
        dropout = (mask, scale, ins.get("Dropout_scale_inv", scale)) if backward else (mask, scale)
    scale_tensor = ins.get("Attn_scale")
    return {
        "attn_scale": scale_tensor if scale_tensor is not None else _number(node, "attn_scale_value"),
        "bias": ins.get("Bias"), "use_alibi_mask": _flag(node, "alibi_mask"),
        "use_padding_mask": _flag(node, "padding_mask"), "seq_len_q": ins.get("SEQ_LEN_Q"),
        "seq_len_kv": ins.get("SEQ_LEN_KV"),
        "diagonal_alignment": _member(diagonal_alignment, node, "diagonal_alignment", "TOP_LEFT"),
        "diagonal_band_left_bound": _int(node, "left_bound"), "diagonal_band_right_bound": _int(node, "right_bound"),
        "dropout": dropout, "sink_token": ins.get("SINK_TOKEN"),
        "max_total_seq_len_q": _int(node, "max_total_seq_len_q"),
        "max_total_seq_len_kv": _int(node, "max_total_seq_len_kv"),
        "compute_data_type": b.dtype(node.get("compute_data_type"), "compute_data_type"), "name": node["name"]}


@register("SDPA_FWD")
def _sdpa(b: Build, node: dict[str, Any]) -> None:
    _no_callables(node, ("score_mod",))
    ins = b.inputs(node)
    b.graph.sdpa(
        _required(ins, "Q"), _required(ins, "K"), _required(ins, "V"), generate_stats=_flag(node, "generate_stats"),
        block_mask=ins.get("Block_mask"), paged_attention_k_table=ins.get("Page_table_K"),
        paged_attention_v_table=ins.get("Page_table_V"), paged_attention_max_seq_len_kv=_int(node, "max_seq_len_kv"),
        implementation=_member(attention_implementation, node, "implementation", "AUTO"),
        unfuse_fma=_flag(node, "unfuse_fma"), stats_use_log2=_flag(node, "stats_use_log2"),
        **_outputs(node, {"RNG_DUMP": "rng_dump", "Max": "score_max", "Sum_exp": "score_sum_exp"}),
        **_common(b, node, ins, backward=False))


@register("SDPA_BWD")
def _sdpa_backward(b: Build, node: dict[str, Any]) -> None:
    _no_callables(node, ("score_mod", "score_mod_bprop"))
    ins = b.inputs(node)
    b.graph.sdpa_backward(
        *(_required(ins, port) for port in ("Q", "K", "V", "O", "dO", "Stats")),
        use_deterministic_algorithm=_flag(node, "is_deterministic_algorithm"),
        **_outputs(node, {"dBias": "dBias", "RNG_DUMP": "rng_dump", "DSINK_TOKEN": "dSink_token"}),
        **_common(b, node, ins, backward=True))
