"""The op methods of ``pygraph``, with the documented signatures.

Each is a function of the graph registered with ``@op`` (see `oplib`). It makes a node, gives it fresh (virtual) output tensors named ``node::PORT``,
and returns them: one tensor, or a list in the documented order. Pointwise methods are
generated from the table in nodes/pointwise.py with real signatures, so ``help()`` and
argument errors read as for hand-written ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._lib.enums import convolution_mode
from .nodes.conv import ConvDgrad, ConvFprop, ConvWgrad
from .nodes.matmul import Matmul
from .nodes.pointwise import REQUIRED, TABLE, Pointwise, Spec
from .nodes.structural import Concatenate, GenStats, Reduction, Reshape, Slice, Transpose
from .oplib import op, register
from .tensor import NOT_SET, Tensor

if TYPE_CHECKING:
    from .graph import pygraph

CROSS_CORRELATION = convolution_mode.CROSS_CORRELATION


# -- convolution ------------------------------------------------------------------------

@op
def conv_fprop(self: pygraph, image: Any, weight: Any, padding: Sequence[int] | None = None,
               stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
               convolution_mode: Any = CROSS_CORRELATION, compute_data_type: Any = NOT_SET,
               name: str = "", *, pre_padding: Sequence[int] | None = None,
               post_padding: Sequence[int] | None = None) -> Tensor:
    """Forward convolution Y = conv(image X, weight W); returns Y."""
    node = ConvFprop(self._name(name), {"X": self._input(image, "conv_fprop", "image"),
                                         "W": self._input(weight, "conv_fprop", "weight")},
                     padding, stride, dilation, convolution_mode, compute_data_type, pre_padding, post_padding)
    return self._add(node, ["Y"])[0]


@op
def conv_dgrad(self: pygraph, loss: Any, filter: Any, padding: Sequence[int] | None = None,  # noqa: A002
               stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
               convolution_mode: Any = CROSS_CORRELATION, compute_data_type: Any = NOT_SET,
               name: str = "", *, pre_padding: Sequence[int] | None = None,
               post_padding: Sequence[int] | None = None) -> Tensor:
    """Gradient of the convolution input from DY (loss) and W (filter); returns DX."""
    node = ConvDgrad(self._name(name), {"DY": self._input(loss, "conv_dgrad", "loss"),
                                        "W": self._input(filter, "conv_dgrad", "filter")},
                     padding, stride, dilation, convolution_mode, compute_data_type, pre_padding, post_padding)
    return self._add(node, ["DX"])[0]


@op
def conv_wgrad(self: pygraph, image: Any, loss: Any, padding: Sequence[int] | None = None,
               stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
               convolution_mode: Any = CROSS_CORRELATION, compute_data_type: Any = NOT_SET,
               name: str = "", *, pre_padding: Sequence[int] | None = None,
               post_padding: Sequence[int] | None = None) -> Tensor:
    """Gradient of the convolution filter from X (image) and DY (loss); returns DW."""
    node = ConvWgrad(self._name(name), {"X": self._input(image, "conv_wgrad", "image"),
                                        "DY": self._input(loss, "conv_wgrad", "loss")},
                     padding, stride, dilation, convolution_mode, compute_data_type, pre_padding, post_padding)
    return self._add(node, ["DW"])[0]

# -- matmul, reduction and structural ops ----------------------------------------------


@op
def matmul(self: pygraph, A: Any, B: Any, compute_data_type: Any = NOT_SET, padding: float = 0.0,  # noqa: N803
           name: str = "") -> Tensor:
    """C = A @ B over the last two dims, batch dims broadcast; returns C."""
    node = Matmul(self._name(name), self._input(A, "matmul", "A"), self._input(B, "matmul", "B"),
                  compute_data_type, padding)
    return self._add(node, ["C"])[0]


@op
def reduction(self: pygraph, input: Any, mode: Any, compute_data_type: Any = NOT_SET, name: str = "",  # noqa: A002
              *, is_deterministic: bool = False) -> Tensor:
    """Reduce X with ``mode`` (a cudnn.reduction_mode) over the dims where Y has size 1."""
    node = Reduction(self._name(name), self._input(input, "reduction", "input"), mode, compute_data_type,
                     is_deterministic)
    return self._add(node, ["Y"])[0]


@op
def reshape(self: pygraph, input: Any, name: str = "") -> Tensor:  # noqa: A002
    """A reshaped view of X; give the result's dims with set_dim()."""
    node = Reshape(self._name(name), self._input(input, "reshape", "input"))
    return self._add(node, ["Y"])[0]


@op
def genstats(self: pygraph, input: Any, compute_data_type: Any = NOT_SET, name: str = "") -> list[Tensor]:  # noqa: A002
    """Per-channel sum and sum of squares of X; returns [SUM, SQ_SUM]."""
    node = GenStats(self._name(name), self._input(input, "genstats", "input"), compute_data_type)
    return self._add(node, ["SUM", "SQ_SUM"])


@op
def transpose(self: pygraph, input: Any, permutation: Sequence[int], compute_data_type: Any = NOT_SET,  # noqa: A002
              name: str = "") -> Tensor:
    """Y[i] = X[permutation[i]] dims (cuDNN >= 9.22)."""
    node = Transpose(self._name(name), self._input(input, "transpose", "input"), permutation,
                     compute_data_type)
    return self._add(node, ["Y"])[0]


@op
def slice(self: pygraph, input: Any, slices: Sequence[slice], compute_data_type: Any = NOT_SET,  # noqa: A002
          name: str = "") -> Tensor:
    """X[slices] with Python slice objects (cuDNN >= 9.22)."""
    node = Slice(self._name(name), self._input(input, "slice", "input"), slices, compute_data_type)
    return self._add(node, ["Y"])[0]


@op
def concatenate(self: pygraph, inputs: Sequence[Any], axis: int, in_place_index: int | None = None,
                compute_data_type: Any = NOT_SET, name: str = "") -> Tensor:
    """The inputs joined along ``axis``."""
    tensors = [self._input(t, "concatenate", f"inputs[{i}]") for i, t in enumerate(inputs)]
    node = Concatenate(self._name(name), tensors, axis, in_place_index, compute_data_type)
    return self._add(node, ["Y"])[0]


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
        tensors = [self._input(a[t], spec.method, t) for t in spec.tensors]
        extra = {n: a[n] for n, _ in spec.attrs + spec.keyword_attrs}
        node = Pointwise(self._name(a["name"]), spec, tensors, extra, a["compute_data_type"])
        return self._add(node, ["OUT_0"])[0]

    method.__name__ = method.__qualname__ = spec.method
    method.__signature__ = signature  # type: ignore[attr-defined]
    ports = ", ".join(spec.tensors)
    method.__doc__ = f"Pointwise {spec.mode.name} of ({ports}); returns the output tensor." + (
        f"\n\n{spec.note}" if spec.note else "")
    return method


for _spec in TABLE.values():
    register(_spec.method, _pointwise_method(_spec))
