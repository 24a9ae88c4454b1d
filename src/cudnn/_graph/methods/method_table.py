"""The op methods of ``pygraph``: plain functions of the graph, registered by name.

Each op module (``ops``, ``norm_ops``, ``sdpa_ops``) defines its methods as functions whose
first parameter is the graph and registers them with ``@op``; ``pygraph`` binds every
registered function as a method. ``cudnn.Graph`` offers exactly these names in its block.
An op builds its node through the graph's op-builder protocol: ``input_tensor`` (a tensor from
a cudnn.tensor, a framework tensor or a number), ``node_name`` and ``add_node``.

The op families a first graph rarely needs (norms, attention and its low-precision variants,
mixture of experts, rope and linear attention) are imported when one of their methods is first
read: until then ``pygraph`` holds a placeholder under each of their names (`FAMILIES`), so
``dir``, ``hasattr`` and ``inspect.signature`` see every method as before.

Every method is bound through `adapt`, which reads the call both ways the official API has
mapped positional arguments: v1.23's order (the functions' own signatures) and 1.32's (tensor
inputs first, then attributes, `ORDER_132`). Where only one reading fits the arguments' types,
that one is used; where both fit and differ, the call is refused as ambiguous. An unknown
keyword is refused naming the closest valid argument.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..._lib.enums import data_type
from ..._lib.record import Record
from ...interop.framework_dtypes import from_string
from ..model.keywords import unknown_keyword

F = TypeVar("F", bound=Callable[..., Any])

OPS: dict[str, Callable[..., Any]] = {}

# The op modules imported on first use (module of this package -> the methods it registers).
# Importing `attention_methods` imports `lowp_methods` too. A method added to one of these modules is added here.
FAMILIES: dict[str, tuple[str, ...]] = {
    "norm_methods": ("layernorm", "rmsnorm", "instancenorm", "adalayernorm", "layernorm_backward", "rmsnorm_backward",
                 "instancenorm_backward", "adalayernorm_backward", "batchnorm", "batchnorm_inference",
                 "batchnorm_backward", "bn_finalize"),
    "attention_methods": ("sdpa", "sdpa_backward", "scaled_dot_product_flash_attention",
                 "scaled_dot_product_flash_attention_backward"),
    "lowp_methods": ("sdpa_fp8", "sdpa_fp8_backward", "sdpa_mxfp8", "sdpa_mxfp8_backward", "block_scale_quantize",
                 "block_scale_dequantize"),
    "moe_methods": ("moe_grouped_matmul", "moe_grouped_matmul_bwd"),
    "gated_methods": ("rope", "rope_backward",  # and the linear-attention families, four methods each
                  *(f"{family}{suffix}" for family in ("gdn", "gdn2", "gdp", "kda", "mamba2")
                    for suffix in ("", "_bwd", "_summary", "_summary_bwd"))),
}
_FAMILY_OF = {name: module for module, names in FAMILIES.items() for name in names}
_bound: list[type] = []  # the class the methods are bound on (pygraph), once `bind` was called


class _Deferred:
    """The placeholder of an op method whose module is not imported yet: the first read imports
    it (once: the import system keeps it), and its registrations replace the placeholders."""

    def __init__(self, name: str, module: str) -> None:
        self.name = name
        self.module = module

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        importlib.import_module(f".{self.module}", __package__)
        method = OPS.get(self.name)
        if method is None:  # FAMILIES names a method its module does not register
            raise RuntimeError(f"pygraph op {self.name!r}: cudnn.graph.{self.module} does not register it")
        return method.__get__(obj, owner)


def bind(cls: type) -> None:
    """Bind every registered op method on ``cls``, a placeholder for each method of a family not
    imported yet, and from now on each method as it is registered."""
    _bound.append(cls)
    for name, module in _FAMILY_OF.items():
        setattr(cls, name, _Deferred(name, module))
    for name, method in OPS.items():
        setattr(cls, name, method)


def is_op(name: str) -> bool:
    """Whether ``name`` is an op method of ``pygraph``, its family imported yet or not."""
    return name in OPS or name in _FAMILY_OF


def load_all() -> None:
    """Import every op family (what needs every op registered: a graph rebuilt from its JSON)."""
    for module in FAMILIES:
        importlib.import_module(f".{module}", __package__)


def op(fn: F) -> F:
    """Register ``fn`` as the ``pygraph`` method of the same name."""
    return register(fn.__name__, fn)


def register(name: str, fn: F) -> F:
    """Register ``fn`` as the ``pygraph`` method ``name`` (aliases, generated methods); returns
    ``fn`` itself, the method bound on ``pygraph`` is ``adapt(name, fn)``."""
    known = OPS.get(name)
    if known is not None and getattr(known, "__wrapped__", known) is not fn:
        raise RuntimeError(f"pygraph op {name!r} is registered twice")
    alias_of = next((m for m in OPS.values() if getattr(m, "__wrapped__", None) is fn), None)
    method = OPS[name] = alias_of or adapt(name, fn)  # an alias is the same method object
    for cls in _bound:
        setattr(cls, name, method)
    return fn


# -- 1.32's positional order -----------------------------------------------------------------

class Order(Record):
    """1.32's positional order of one op (op_specs.txt: tensor inputs, then attributes), and
    the rules that make a reading of a call incoherent (two arguments that exclude each other,
    two that come only as a pair)."""

    __slots__ = ("names", "exclusive", "paired")
    frozen = True

    def __init__(self, names: tuple[str, ...], exclusive: tuple[tuple[str, str], ...] = (),
                 paired: tuple[tuple[str, str], ...] = ()) -> None:
        self.names, self.exclusive, self.paired = names, exclusive, paired


_NORM_FWD = Order(("input", "scale", "bias", "epsilon", "norm_forward_phase"))
_CONV_RULES = {"exclusive": (("padding", "pre_padding"), ("padding", "post_padding")),
               "paired": (("pre_padding", "post_padding"),)}
_RELU_TAIL = ("negative_slope", "lower_clip", "upper_clip", "name", "compute_data_type")

# Only the ops whose 1.32 order differs from v1.23's; the others read the same either way.
ORDER_132: dict[str, Order] = {
    "layernorm": _NORM_FWD, "rmsnorm": _NORM_FWD, "instancenorm": _NORM_FWD, "adalayernorm": _NORM_FWD,
    "reduction": Order(("input", "group_offset", "mode")),
    "block_scale_quantize": Order(("input", "group_offset", "block_size", "axis", "transpose")),
    "moe_grouped_matmul": Order(("token", "weight", "first_token_offset", "token_index", "token_ks", "mode",
                                 "top_k")),
    "conv_fprop": Order(("image", "weight", "padding", "pre_padding", "post_padding", "stride", "dilation",
                         "convolution_mode"), **_CONV_RULES),
    "conv_dgrad": Order(("loss", "filter", "padding", "pre_padding", "post_padding", "stride", "dilation",
                         "convolution_mode"), **_CONV_RULES),
    "conv_wgrad": Order(("image", "loss", "padding", "pre_padding", "post_padding", "stride", "dilation",
                         "convolution_mode"), **_CONV_RULES),
    "reshape": Order(("input", "reshape_mode")),
    # 1.32's hand-written pointwise builders put name before compute_data_type
    "relu": Order(("input", *_RELU_TAIL)),
    "relu_backward": Order(("loss", "input", *_RELU_TAIL)),
    "leaky_relu": Order(("input", "negative_slope", "name", "compute_data_type")),
    "leaky_relu_backward": Order(("loss", "input", "negative_slope", "name", "compute_data_type")),
    "swish": Order(("input", "swish_beta", "name", "compute_data_type")),
    "swish_backward": Order(("loss", "input", "swish_beta", "name", "compute_data_type")),
    "gen_index": Order(("input", "axis", "name", "compute_data_type")),
}


# -- what kind of value a parameter takes, by its name ----------------------------------------

def _is_tensor(v: Any) -> bool:
    """A cudnn.tensor or a framework tensor: not a number, string, list, enum or None."""
    return v is not None and not isinstance(v, (numbers.Number, str, bytes, list, tuple, dict, enum.Enum))


def _tensor_or_none(v: Any) -> bool:
    return v is None or _is_tensor(v)


def _number_or_tensor(v: Any) -> bool:
    return v is None or _is_tensor(v) or _number(v)


def _int_list(v: Any) -> bool:
    return v is None or (isinstance(v, (list, tuple)) and all(
        hasattr(x, "__index__") and not isinstance(x, enum.Enum) for x in v))


def _plain_int(v: Any) -> bool:
    return v is None or (isinstance(v, numbers.Integral) and not isinstance(v, (bool, enum.Enum)))


def _enum(v: Any) -> bool:
    return isinstance(v, enum.Enum)


def _phase(v: Any) -> bool:
    return isinstance(v, enum.Enum) or v in ("TRAINING", "INFERENCE")


def _dtype(v: Any) -> bool:
    """A cudnn.data_type or a data type's name ("fp16", `as_data_type`'s rule for strings)."""
    return v is None or isinstance(v, data_type) or (isinstance(v, str) and from_string(v) is not data_type.NOT_SET)


def _number(v: Any) -> bool:
    return v is None or (isinstance(v, numbers.Real) and not isinstance(v, (bool, enum.Enum)))


_TENSORS = ("input", "scale", "bias", "grad", "image", "weight", "loss", "filter", "group_offset", "token",
            "first_token_offset", "token_index", "token_ks")
KINDS: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys(_TENSORS, _tensor_or_none),
    **dict.fromkeys(("epsilon", "momentum"), _number_or_tensor),
    **dict.fromkeys(("padding", "pre_padding", "post_padding", "stride", "dilation"), _int_list),
    **dict.fromkeys(("mode", "convolution_mode", "reshape_mode"), _enum),
    **dict.fromkeys(("negative_slope", "lower_clip", "upper_clip", "swish_beta"), _number),
    "norm_forward_phase": _phase, "compute_data_type": _dtype, "name": lambda v: isinstance(v, str),
    "block_size": lambda v: v is not None and (_plain_int(v) or _int_list(v)), "axis": _plain_int, "top_k": _plain_int,
    "transpose": lambda v: v is None or isinstance(v, bool),
}


def _fits(mapping: Mapping[str, Any], rules: Order, params: Mapping[str, inspect.Parameter]) -> bool:
    for name, value in mapping.items():
        if name not in params:
            return False
        kind = KINDS.get(name)
        if kind is not None and not kind(value):
            return False

    def set_(n: str) -> bool:
        v = mapping.get(n)
        return v is not None and v != []

    if any(set_(a) and set_(b) for a, b in rules.exclusive):
        return False
    return not any(set_(a) != set_(b) for a, b in rules.paired)


def _show(mapping: Mapping[str, Any], names: list[str]) -> str:
    return ", ".join(f"{n}={mapping[n]!r}" for n in names)


def _reading(op_name: str, order: Order, ours: list[str], params: Mapping[str, inspect.Parameter],
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The 1.32 reading of ``args`` as keywords when it is the one that fits; None to read them in
    v1.23's order; TypeError when both fit and differ."""
    if len(args) > len(order.names):
        return None
    alt = dict(zip(order.names, args))
    if any(n in kwargs for n in alt):
        return None  # 1.32 would say 'multiple values'; v1.23's reading gives its own error
    if not _fits({**kwargs, **alt}, order, params):
        return None
    old = dict(zip(ours, args)) if len(args) <= len(ours) else None
    if old is None or not _fits({**kwargs, **old}, order, params):
        return alt
    if all(a == b for a, b in zip(order.names, ours[:len(args)])):
        return None
    first = next(i for i, (a, b) in enumerate(zip(order.names, ours)) if a != b)
    raise TypeError(
        f"{op_name}(): positional argument {first + 1} onwards can be read two ways: as "
        f"{_show(old, ours[first:len(args)])} (v1.23's order) or as {_show(alt, list(order.names[first:len(args)]))} "
        "(1.32's order); pass them by keyword")


# -- the method every op is bound as -----------------------------------------------------------

def adapt(op_name: str, fn: F) -> F:
    """``fn`` as the ``pygraph`` method ``op_name``: unknown keywords refused by name, and
    positional arguments read in 1.32's order where only that reading fits (`ORDER_132`)."""
    signature = inspect.signature(fn)
    params = dict(list(signature.parameters.items())[1:])  # without self
    open_keywords = any(p.kind is p.VAR_KEYWORD for p in params.values())
    valid = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    ours = [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    order = ORDER_132.get(op_name)
    common = 0
    if order is not None:
        while common < min(len(ours), len(order.names)) and ours[common] == order.names[common]:
            common += 1

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not open_keywords:
            for key in kwargs:
                if key not in params:
                    raise unknown_keyword(op_name, key, valid)
        if order is not None and len(args) > common:
            alt = _reading(op_name, order, ours, params, args, kwargs)
            if alt is not None:
                return fn(self, **alt, **kwargs)
        return fn(self, *args, **kwargs)

    return method  # type: ignore[return-value]
