"""The op methods of ``pygraph``, with the documented signatures.

Each is a function of the graph registered with ``@op`` (see `method_table`). It makes a node, gives it
fresh (virtual) output tensors named ``node::PORT``, and returns them: one tensor, or a list
in the documented order. Pointwise methods are generated from the table in families/pointwise_nodes.py
with real signatures, so ``help()`` and argument errors read as for hand-written ones.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Sequence
from typing import Any

from ..._lib.enums import convolution_mode, data_type
from ..._lib.enums import reshape_mode as reshape_mode_enum
from ..._lib.record import Record
from ..families.conv_nodes import ConvDgrad, ConvFprop, ConvWgrad
from ..families.matmul_nodes import Matmul
from ..families.pointwise_nodes import REQUIRED, TABLE, Pointwise, Spec
from ..families.structural_nodes import Concatenate, GenStats, Reduction, Reshape, Slice, Transpose
from ..model.tensor import NOT_SET, Tensor, constant
from .graph_ops import GraphOps
from .method_table import op, register

CROSS_CORRELATION = convolution_mode.CROSS_CORRELATION
convolution_mode_enum = convolution_mode  # op parameters of the documented name shadow it


def _at(graph: GraphOps, op: str, name: Any) -> str:
    """How messages about an op call name its node: ``conv_fprop 'conv1'`` (or its index)."""
    return f"{op} {graph.node_name(name)!r}"


# -- convolution ------------------------------------------------------------------------

class _ConvArgs(Record):
    """A convolution call's arguments, read in 1.32's or v1.23's positional order."""

    __slots__ = ("padding", "stride", "dilation", "convolution_mode", "compute_data_type", "name", "pre_padding",
                 "post_padding")

    def __init__(self, padding: Any, stride: Any, dilation: Any, convolution_mode: Any, compute_data_type: Any,
                 name: Any, pre_padding: Any, post_padding: Any) -> None:
        self.padding, self.stride, self.dilation, self.convolution_mode = padding, stride, dilation, convolution_mode
        self.compute_data_type, self.name = compute_data_type, name
        self.pre_padding, self.post_padding = pre_padding, post_padding

    def node_args(self) -> tuple[Any, ...]:
        return (self.padding, self.stride, self.dilation, self.convolution_mode, self.compute_data_type,
                self.pre_padding, self.post_padding)


def _is_int_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(hasattr(v, "__index__") and not isinstance(v, bool)
                                                    for v in value)


def _conv_overload(op: str, padding: Any, stride: Any, dilation: Any, convolution_mode: Any,
                   compute_data_type: Any, name: Any, pre_padding: Any, post_padding: Any) -> _ConvArgs:
    """The official second overload, ``(x, w, pre_padding, post_padding, stride, dilation, mode,
    compute_data_type)`` by position: a list where convolution_mode belongs says the call meant it
    (pybind11 tries the ``padding`` overload first and falls through on the same test)."""
    if _is_int_list(convolution_mode) and pre_padding is None and post_padding is None:
        # slots shifted by two: compute_data_type holds the mode (when given by position), name
        # the compute type; a keyword compute_data_type= or name= is told apart by its type
        if isinstance(compute_data_type, convolution_mode_enum):
            mode, compute = compute_data_type, NOT_SET if isinstance(name, str) else name
            name = name if isinstance(name, str) else ""
        else:
            mode, compute = CROSS_CORRELATION, compute_data_type
        return _ConvArgs(None, dilation, convolution_mode, mode, compute, name, padding, stride)
    return _ConvArgs(padding, stride, dilation, convolution_mode, compute_data_type, name, pre_padding, post_padding)


@op
def conv_fprop(self: GraphOps, image: Any, weight: Any, padding: Sequence[int] | None = None,
               stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
               convolution_mode: Any = CROSS_CORRELATION, compute_data_type: Any = NOT_SET,
               name: str = "", *, pre_padding: Sequence[int] | None = None,
               post_padding: Sequence[int] | None = None) -> Tensor:
    """Forward convolution Y = conv(image X, weight W); returns Y."""
    args = _conv_overload("conv_fprop", padding, stride, dilation, convolution_mode, compute_data_type, name,
                          pre_padding, post_padding)
    at = _at(self, "conv_fprop", args.name)
    node = ConvFprop(self.node_name(args.name), {"X": self.input_tensor(image, at, "image"),
                                              "W": self.input_tensor(weight, at, "weight")}, *args.node_args())
    return self.add_node(node, ["Y"])[0]


@op
def conv_dgrad(self: GraphOps, loss: Any, filter: Any, padding: Sequence[int] | None = None,
               stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
               convolution_mode: Any = CROSS_CORRELATION, compute_data_type: Any = NOT_SET,
               name: str = "", *, pre_padding: Sequence[int] | None = None,
               post_padding: Sequence[int] | None = None) -> Tensor:
    """Gradient of the convolution input from DY (loss) and W (filter); returns DX."""
    args = _conv_overload("conv_dgrad", padding, stride, dilation, convolution_mode, compute_data_type, name,
                          pre_padding, post_padding)
    at = _at(self, "conv_dgrad", args.name)
    node = ConvDgrad(self.node_name(args.name), {"DY": self.input_tensor(loss, at, "loss"),
                                             "W": self.input_tensor(filter, at, "filter")}, *args.node_args())
    return self.add_node(node, ["DX"])[0]


@op
def conv_wgrad(self: GraphOps, image: Any, loss: Any, padding: Sequence[int] | None = None,
               stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
               convolution_mode: Any = CROSS_CORRELATION, compute_data_type: Any = NOT_SET,
               name: str = "", *, pre_padding: Sequence[int] | None = None,
               post_padding: Sequence[int] | None = None) -> Tensor:
    """Gradient of the convolution filter from X (image) and DY (loss); returns DW."""
    args = _conv_overload("conv_wgrad", padding, stride, dilation, convolution_mode, compute_data_type, name,
                          pre_padding, post_padding)
    at = _at(self, "conv_wgrad", args.name)
    node = ConvWgrad(self.node_name(args.name), {"X": self.input_tensor(image, at, "image"),
                                             "DY": self.input_tensor(loss, at, "loss")}, *args.node_args())
    return self.add_node(node, ["DW"])[0]

# -- matmul, reduction and structural ops ----------------------------------------------


@op
def matmul(self: GraphOps, A: Any, B: Any, compute_data_type: Any = NOT_SET, padding: float = 0.0,
           name: str = "") -> Tensor:
    """C = A @ B over the last two dims, batch dims broadcast; returns C."""
    at = _at(self, "matmul", name)
    node = Matmul(self.node_name(name), self.input_tensor(A, at, "A"), self.input_tensor(B, at, "B"),
                  compute_data_type, padding)
    return self.add_node(node, ["C"])[0]


@op
def reduction(self: GraphOps, input: Any, mode: Any, compute_data_type: Any = NOT_SET, name: str = "",
              *, group_offset: Any = None, is_deterministic: bool = False) -> Tensor:
    """Reduce X with ``mode`` (a cudnn.reduction_mode) over the dims where Y has size 1.

    ``group_offset`` (cuDNN >= 9.24): an integer tensor of where each group of the grouped dim
    starts, for groups of varying size; give Y's dims with set_dim()."""
    at = _at(self, "reduction", name)
    offsets = None if group_offset is None else self.input_tensor(group_offset, at, "group_offset")
    node = Reduction(self.node_name(name), self.input_tensor(input, at, "input"), mode, compute_data_type,
                     is_deterministic, offsets)
    return self.add_node(node, ["Y"])[0]


@op
def reshape(self: GraphOps, input: Any, name: str = "",
            reshape_mode: Any = reshape_mode_enum.VIEW_ONLY) -> Tensor:
    """A reshaped X; give the result's dims with set_dim(). VIEW_ONLY reinterprets the memory;
    LOGICAL (cuDNN >= 9.22) reshapes in logical (row-major) element order whatever the strides."""
    node = Reshape(self.node_name(name), self.input_tensor(input, _at(self, "reshape", name), "input"), reshape_mode)
    return self.add_node(node, ["Y"])[0]


@op
def genstats(self: GraphOps, input: Any, compute_data_type: Any = NOT_SET, name: str = "") -> list[Tensor]:
    """Per-channel sum and sum of squares of X; returns [SUM, SQ_SUM]."""
    node = GenStats(self.node_name(name), self.input_tensor(input, _at(self, "genstats", name), "input"),
                    compute_data_type)
    return self.add_node(node, ["SUM", "SQ_SUM"])


@op
def transpose(self: GraphOps, input: Any, permutation: Sequence[int], compute_data_type: Any = NOT_SET,
              name: str = "") -> Tensor:
    """Y[i] = X[permutation[i]] dims (cuDNN >= 9.22)."""
    node = Transpose(self.node_name(name), self.input_tensor(input, _at(self, "transpose", name), "input"), permutation,
                     compute_data_type)
    return self.add_node(node, ["Y"])[0]


@op
def slice(self: GraphOps, input: Any, slices: Sequence[builtins.slice] | None = None,  # noqa: A001 - the documented name
          compute_data_type: Any = NOT_SET, name: str = "") -> Tensor:
    """X[slices] with Python slice objects, one per leading dim (none: all of X). cuDNN >= 9.22
    runs its SLICE operation; before, as in the official, the output is a view into X's buffer
    (its strides times the steps) that a later operation reads, so X must be a graph input."""
    if slices is not None and not isinstance(slices, (list, tuple)):
        raise TypeError(f"slice: slices must be a list of Python slice objects, got {slices!r}")
    node = Slice(self.node_name(name), self.input_tensor(input, _at(self, "slice", name), "input"), list(slices or []),
                 compute_data_type)
    return self.add_node(node, ["Y"])[0]


@op
def concatenate(self: GraphOps, inputs: Sequence[Any], axis: int, in_place_index: int | None = None,
                name: str = "", *, compute_data_type: Any = NOT_SET) -> Tensor:
    """The inputs joined along ``axis``."""
    if isinstance(inputs, (Tensor, str, bytes)) or not isinstance(inputs, (list, tuple)):
        raise TypeError(f"concatenate: inputs must be a list of tensors, got {type(inputs).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"concatenate: name must be a str, got {name!r} (compute_data_type is keyword-only)")
    tensors = [self.input_tensor(t, _at(self, "concatenate", name), f"inputs[{i}]") for i, t in enumerate(inputs)]
    node = Concatenate(self.node_name(name), tensors, axis, in_place_index, compute_data_type)
    return self.add_node(node, ["Y"])[0]


@op
def tensor_scalar(self: GraphOps, value: float, scalar_type: Any, name: str = "") -> Tensor:
    """A scalar tensor holding ``value``: FLOAT for a Python float, INT32 for an int (INT64 beyond
    int32), as the official overloads pick. RUNTIME_PARAM passes it by value at each execute;
    COMPILE_TIME_CONST (cuDNN >= 9.22) marks it a constant of the graph. Its rank follows the
    tensors it meets, as for a Python number given to a pointwise op."""
    from ..model.api_enums import scalar_type as scalar_type_enum

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"tensor_scalar: value must be a Python int or float, got {value!r}")
    try:
        kind = scalar_type_enum(scalar_type)
    except (ValueError, TypeError):
        raise TypeError(f"tensor_scalar: scalar_type must be cudnn.scalar_type.RUNTIME_PARAM or "
                        f"COMPILE_TIME_CONST, got {scalar_type!r}") from None
    if not isinstance(name, str):
        raise TypeError(f"tensor_scalar: name must be a str, got {name!r}")
    if kind == scalar_type_enum.COMPILE_TIME_CONST:
        from ..._lib import loader
        from ..._lib.status import FeatureUnavailableError

        version = loader.report().version
        if version < COMPILE_TIME_CONST_SINCE:
            raise FeatureUnavailableError("tensor_scalar(..., COMPILE_TIME_CONST) "
                                          "(CUDNN_ATTR_TENSOR_CONSTANT_VALUE)", COMPILE_TIME_CONST_SINCE, version)
    if isinstance(value, float):
        dtype = data_type.FLOAT
    else:
        dtype = data_type.INT32 if -2**31 <= value < 2**31 else data_type.INT64
    return constant(name, value, kind == scalar_type_enum.COMPILE_TIME_CONST).set_data_type(dtype)


COMPILE_TIME_CONST_SINCE = 92200


def _pointwise_method(spec: Spec) -> Any:
    """A pygraph method for one pointwise table row, with the documented signature."""
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params += [P(t, P.POSITIONAL_OR_KEYWORD) for t in spec.tensors]
    attrs = [P(a, P.POSITIONAL_OR_KEYWORD, default=P.empty if d is REQUIRED else d) for a, d in spec.attrs]
    tail = [P("compute_data_type", P.POSITIONAL_OR_KEYWORD, default=NOT_SET),
            P("name", P.POSITIONAL_OR_KEYWORD, default="")]
    if spec.compute_first:
        params += tail[:1] + attrs + tail[1:]
    else:
        params += attrs + tail
    params += [P(a, P.KEYWORD_ONLY, default=d) for a, d in spec.keyword_attrs]
    signature = inspect.Signature(params, return_annotation=Tensor)

    def method(*args: Any, **kwargs: Any) -> Tensor:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"pygraph.{spec.method}(): {exc}") from None
        bound.apply_defaults()
        a = bound.arguments
        self = a["self"]
        tensors = [self.input_tensor(a[t], _at(self, spec.method, a["name"]), t) for t in spec.tensors]
        extra = {n: a[n] for n, _ in spec.attrs + spec.keyword_attrs}
        node = Pointwise(self.node_name(a["name"]), spec, tensors, extra, a["compute_data_type"])
        return self.add_node(node, ["OUT_0"])[0]

    method.__name__ = method.__qualname__ = spec.method
    method.__signature__ = signature  # type: ignore[attr-defined]
    ports = ", ".join(spec.tensors)
    method.__doc__ = f"Pointwise {spec.mode.name} of ({ports}); returns the output tensor." + (
        f"\n\n{spec.note}" if spec.note else "")
    return method


for _spec in TABLE.values():
    register(_spec.method, _pointwise_method(_spec))
