"""Pointwise ops, table-driven from the backend's pointwise modes.

Each row of TABLE is one documented pygraph method: its backend mode, its tensor
parameters in positional order, and its attribute parameters. `Pointwise` is the one node
class behind all of them; `graph.pygraph` turns each row into a method with a real
signature.
"""

from __future__ import annotations

import struct
from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type, pointwise_mode
from ..._lib.record import Record
from ...backend.descriptor import Descriptor
from ..model.arguments import as_float, as_int
from ..model.graph_errors import GraphError
from ..model.lower import Lowering, backend_layout
from ..model.node import Context, Node, broadcast
from ..model.tensor import NOT_SET, Tensor, order_of, packed

REQUIRED = object()  # marks an attribute parameter without a default

# attribute parameter -> (JSON key, backend attribute, attribute type)
_ATTRS: dict[str, tuple[str, A, T]] = {
    "negative_slope": ("relu_lower_clip_slope", A.CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, T.CUDNN_TYPE_DOUBLE),
    "lower_clip": ("relu_lower_clip", A.CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, T.CUDNN_TYPE_DOUBLE),
    "upper_clip": ("relu_upper_clip", A.CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, T.CUDNN_TYPE_DOUBLE),
    "swish_beta": ("swish_beta", A.CUDNN_ATTR_POINTWISE_SWISH_BETA, T.CUDNN_TYPE_DOUBLE),
    "elu_alpha": ("elu_alpha", A.CUDNN_ATTR_POINTWISE_ELU_ALPHA, T.CUDNN_TYPE_DOUBLE),
    "softplus_beta": ("softplus_beta", A.CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA, T.CUDNN_TYPE_DOUBLE),
    "axis": ("axis", A.CUDNN_ATTR_POINTWISE_AXIS, T.CUDNN_TYPE_INT64),
}
_JSON_KEYS = sorted({key for key, _, _ in _ATTRS.values()})


class Spec(Record):
    """One pointwise method of the documented API: its backend ``mode``, its ``tensors``
    (parameter names in positional order -> IN_0, IN_1, IN_2), ``attrs`` after them
    ((parameter, default or REQUIRED)), ``compute_first`` (swish_backward: compute_data_type
    comes before the attributes), keyword-only ``keyword_attrs`` beyond the documented API, and
    a ``note`` added to the method's docstring."""

    __slots__ = ("method", "mode", "tensors", "attrs", "compute_first", "keyword_attrs", "note")
    frozen = True

    def __init__(self, method: str, mode: pointwise_mode, tensors: tuple[str, ...],
                 attrs: tuple[tuple[str, Any], ...] = (), compute_first: bool = False,
                 keyword_attrs: tuple[tuple[str, Any], ...] = (), note: str = "") -> None:
        self.method, self.mode, self.tensors, self.attrs = method, mode, tensors, attrs
        self.compute_first, self.keyword_attrs, self.note = compute_first, keyword_attrs, note

    @property
    def backward(self) -> bool:
        return self.mode.name.endswith("_BWD")


P: type[pointwise_mode] = pointwise_mode
_RELU = (("negative_slope", None), ("lower_clip", None), ("upper_clip", None))
_RELU_NOTE = ("With negative_slope and upper_clip both set, cuDNN computes max(min(x, upper_clip), "
              "lower_clip + negative_slope * (x - lower_clip)) (seen on 9.19): far above upper_clip the "
              "sloped line wins over the clip.")


def _specs() -> list[Spec]:
    rows: list[Spec] = []
    for method, mode in [("add", P.ADD), ("sub", P.SUB), ("mul", P.MUL), ("div", P.DIV),
                         ("add_square", P.ADD_SQUARE), ("logical_and", P.LOGICAL_AND),
                         ("logical_or", P.LOGICAL_OR)]:
        rows.append(Spec(method, mode, ("a", "b")))
    for method, mode in [("max", P.MAX), ("min", P.MIN), ("mod", P.MOD), ("pow", P.POW)]:
        rows.append(Spec(method, mode, ("input0", "input1")))
    rows.extend(Spec(f"cmp_{suffix.lower()}", P[f"CMP_{suffix}"], ("input", "comparison"))
                for suffix in ("EQ", "NEQ", "GT", "GE", "LT", "LE"))
    rows.append(Spec("bias", P.ADD, ("input", "bias")))
    rows.append(Spec("scale", P.MUL, ("input", "scale")))
    rows.append(Spec("binary_select", P.BINARY_SELECT, ("input0", "input1", "mask")))
    rows.extend(Spec(method, P[method.upper()], ("input",))
                for method in ("abs", "ceil", "cos", "erf", "exp", "floor", "identity", "log", "logical_not",
                               "neg", "reciprocal", "rsqrt", "sin", "sqrt", "tan"))
    activations = {"tanh": "TANH", "sigmoid": "SIGMOID", "elu": "ELU", "gelu": "GELU",
                   "gelu_approx_tanh": "GELU_APPROX_TANH", "softplus": "SOFTPLUS"}
    extras = {"elu": (("elu_alpha", None),), "softplus": (("softplus_beta", None),)}
    for method, name in activations.items():
        kw = extras.get(method, ())
        rows.append(Spec(method, P[f"{name}_FWD"], ("input",), keyword_attrs=kw))
        rows.append(Spec(f"{method}_backward", P[f"{name}_BWD"], ("loss", "input"), keyword_attrs=kw))
    rows.append(Spec("relu", P.RELU_FWD, ("input",), _RELU, note=_RELU_NOTE))
    rows.append(Spec("relu_backward", P.RELU_BWD, ("loss", "input"), _RELU))
    rows.append(Spec("leaky_relu", P.RELU_FWD, ("input",), (("negative_slope", REQUIRED),)))
    rows.append(Spec("leaky_relu_backward", P.RELU_BWD, ("loss", "input"), (("negative_slope", REQUIRED),)))
    rows.append(Spec("swish", P.SWISH_FWD, ("input",), (("swish_beta", None),)))
    rows.append(Spec("swish_backward", P.SWISH_BWD, ("loss", "input"), (("swish_beta", None),), compute_first=True))
    rows.append(Spec("gen_index", P.GEN_INDEX, ("input",), (("axis", REQUIRED),)))
    return rows


TABLE: dict[str, Spec] = {s.method: s for s in _specs()}


def float_bits(value: float) -> str:
    """The JSON spelling of a float attribute: its float32 bit pattern in hex (0.1 -> '3DCCCCCD')."""
    return struct.pack(">f", value).hex().upper()


class Pointwise(Node):
    """One pointwise operation; ``spec`` says which."""

    op, tag = "pointwise", "POINTWISE"

    def __init__(self, name: str, spec: Spec, tensors: list[Tensor], attrs: dict[str, Any],
                 compute_data_type: Any) -> None:
        self.name, self.spec = name, spec
        self.op = spec.method  # instance label: errors say "relu 'x'" rather than "pointwise"
        self.attrs: dict[str, Any] = {}
        self._set_attrs(attrs)  # first: a swapped (attribute, compute type) pair is named by the attribute
        super().__init__(name, compute_data_type)
        self.inputs = {f"IN_{i}": t for i, t in enumerate(tensors)}

    def _set_attrs(self, attrs: dict[str, Any]) -> None:
        for param, value in attrs.items():
            if value is None:
                continue
            # the official types: gen_index's axis an int, every other attribute a float (an enum
            # is refused: g.swish(x, data_type.FLOAT) would read a slope of 0.0)
            self.attrs[param] = (as_int if param == "axis" else as_float)(value, self.label(), param)

    def infer(self, ctx: Context) -> None:
        shaped = {p: t.get_dim() for p, t in self.inputs.items() if not _is_open_scalar(t)}
        if not shaped:
            raise GraphError(f"{self.label()}: at least one input must be a tensor, not only Python numbers")
        for t in self.inputs.values():
            if _is_open_scalar(t):
                rank = len(next(iter(shaped.values())) or [1])
                t.set_dim([1] * rank).set_stride([1] * rank)
                if t.get_data_type() == NOT_SET:
                    t.set_data_type(data_type.DOUBLE if self.compute_data_type == data_type.DOUBLE else data_type.FLOAT)
        super().infer(ctx)
        dims = broadcast(self, {p: t.get_dim() for p, t in self.inputs.items()})
        main = self.inputs["IN_1" if self.spec.backward else "IN_0"]
        if "axis" in self.attrs and not 0 <= self.attrs["axis"] < len(dims):
            raise GraphError(f"{self.label()}: axis {self.attrs['axis']} is out of range for {len(dims)} dims")
        out = self.outputs["OUT_0"]
        self.set_output("OUT_0", out, ctx, dims, self.output_strides(out.get_dim() or dims), like=main)

    def output_strides(self, dims: list[int]) -> list[int]:
        """The official's strides for an output of ``dims``: those of an input of the same dims, a
        view's included (an output written in place into a strided view has the view's layout),
        the last such input where several are (the official node keeps its inputs in a hash map,
        which yields IN_2, IN_1, IN_0); else IN_0's stride order, packed. (The official infers the
        latter for a virtual output only and refuses a graph output; cudnn-py infers it for both.)"""
        for t in reversed(self.inputs.values()):
            if t.get_dim() == dims:
                return t.get_stride()
        return packed(dims, order_of(self.inputs["IN_0"].get_stride(), len(dims)))

    def attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(_JSON_KEYS)
        for param, value in self.attrs.items():
            key = _ATTRS[param][0]
            out[key] = value if param == "axis" else float_bits(value)
        out["mode"] = self.spec.mode.name
        return out

    def lower(self, lw: Lowering) -> list[Descriptor]:
        pw = lw.descriptor(D.CUDNN_BACKEND_POINTWISE_DESCRIPTOR, self.name)
        pw.set(A.CUDNN_ATTR_POINTWISE_MODE, self.spec.mode)
        pw.set(A.CUDNN_ATTR_POINTWISE_MATH_PREC, self.compute_data_type)
        for param, value in self.attrs.items():
            _, attr, attr_type = _ATTRS[param]
            if param == "axis":  # counted in the backend's dims, which may have gained leading ones
                value += len(backend_layout(self.outputs["OUT_0"].get_dim(), self.outputs["OUT_0"].get_stride())[0]) \
                    - len(self.outputs["OUT_0"].get_dim())
            pw.set(attr, value, attr_type)
        pw.finalize()
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
        ins, out = list(self.inputs.values()), lw.tensor(self.outputs["OUT_0"])
        if self.spec.backward:  # (loss, input) -> DY, X ; output DX
            op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, lw.tensor(ins[0]))
            op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, lw.tensor(ins[1]))
            op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, out)
        else:
            ports = (A.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, A.CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                     A.CUDNN_ATTR_OPERATION_POINTWISE_TDESC)
            for attr, t in zip(ports, ins):
                op.set(attr, lw.tensor(t))
            op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_YDESC, out)
        return [op.finalize()]


def _is_open_scalar(t: Tensor) -> bool:
    """A constant made from a Python number whose rank is taken from the other inputs."""
    return t.get_value() is not None and not t.get_dim()
