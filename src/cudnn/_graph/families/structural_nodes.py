"""Reduction, reshape, genstats and the structural ops (transpose, slice, concatenate)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import cudnnGenStatsMode_t, reduction_mode, reshape_mode
from ..._lib.status import FeatureUnavailableError
from ...backend.descriptor import Descriptor
from ..model.arguments import as_bool, as_int, as_int_list, optional
from ..model.expander import Expander
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.lower import Lowering, since_type
from ..model.node import Context, Node
from ..model.tensor import NOT_SET, Tensor, nhwc, order_of, packed

SLICE_SINCE = since_type(D.CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR) or 0  # the backend's SLICE operation


def _reduction_mode(value: Any, label: str) -> reduction_mode:
    try:
        mode = value if isinstance(value, reduction_mode) else reduction_mode[getattr(value, "name", value)]
    except (KeyError, TypeError):
        mode = None
    if mode is None or mode == reduction_mode.NOT_SET:
        names = ", ".join(m.name for m in reduction_mode if m != reduction_mode.NOT_SET)
        raise GraphError(f"{label}: mode must be one of cudnn.reduction_mode {names}; got {value!r}")
    return mode


class Reduction(Node):
    """Y = reduce(X) over the dims where Y has size 1 (set Y's dims to choose them); a Y dim
    that divides X's reduces consecutive groups of X's (cuDNN's grouped reduction). Y's strides,
    where unset, are channels last (NHWC order) whatever X's layout, as the official infers."""

    op, tag = "reduction", "REDUCTION"

    def __init__(self, name: str, x: Tensor, mode: Any, compute_data_type: Any,
                 is_deterministic: bool = False, group_offset: Tensor | None = None) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"X": x}
        if group_offset is not None:  # groups of varying size: where each starts (cuDNN >= 9.24)
            self.inputs["GROUP_OFFSET"] = group_offset
        self.mode = _reduction_mode(mode, self.label())
        self.is_deterministic = as_bool(is_deterministic, self.label(), "is_deterministic")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x = self.inputs["X"]
        y = self.outputs["Y"]
        if "GROUP_OFFSET" in self.inputs:  # ragged groups: only the user knows Y's dims
            if not y.get_dim() or len(y.get_dim()) != len(x.get_dim()):
                raise GraphError(f"{self.at('Y')}: with group_offset, call set_dim() on the reduction output "
                                 f"(rank {len(x.get_dim())}, one entry per group on the grouped dim)")
            self.set_output("Y", y, ctx, y.get_dim(), nhwc(y.get_dim()), like=x)
            return
        dims = y.get_dim() or x.get_dim()
        if len(dims) != len(x.get_dim()) or any(d <= 0 or xd % d for d, xd in zip(dims, x.get_dim())):
            raise GraphError(f"{self.at('Y')}: dims {dims} must equal X's {x.get_dim()}, be 1 where reduced, "
                             "or divide X's dim (a reduction over groups, as GQA's head groups)")
        self.set_output("Y", y, ctx, dims, nhwc(dims), like=x)

    def attributes(self) -> dict[str, Any]:
        return {"is_deterministic": self.is_deterministic, "mode": self.mode.name}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        red = lw.descriptor(D.CUDNN_BACKEND_REDUCTION_DESCRIPTOR, self.name)
        red.set(A.CUDNN_ATTR_REDUCTION_OPERATOR, self.mode)
        red.set(A.CUDNN_ATTR_REDUCTION_COMP_TYPE, self.compute_data_type)
        if self.is_deterministic:
            lw.set(red, A.CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, True)
        red.finalize()
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_REDUCTION_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_REDUCTION_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_REDUCTION_DESC, red)
        if "GROUP_OFFSET" in self.inputs:
            lw.set(op, A.CUDNN_ATTR_OPERATION_REDUCTION_GROUP_OFFSET_DESC, lw.tensor(self.inputs["GROUP_OFFSET"]))
        return [op.finalize()]


class Reshape(Node):
    """Y = X viewed with other dims (set Y's dims); the element count must not change. Unset
    strides of Y are channels last (NHWC order), as the official infers; a LOGICAL reshape keeps
    X's data type, a VIEW_ONLY one takes the graph's (as an intermediate or an output)."""

    op, tag = "reshape", "RESHAPE"

    def __init__(self, name: str, x: Tensor, mode: Any = reshape_mode.VIEW_ONLY) -> None:
        super().__init__(name)
        self.inputs = {"X": x}
        try:
            self.mode = reshape_mode[mode] if isinstance(mode, str) else reshape_mode(mode)
        except (KeyError, ValueError, TypeError):
            raise GraphError(f"{self.label()}: reshape_mode must be cudnn.reshape_mode.VIEW_ONLY or LOGICAL, "
                             f"got {mode!r}") from None

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x, y = self.inputs["X"], self.outputs["Y"]
        if not y.get_dim():
            raise GraphError(f"{self.at('Y')}: call set_dim() on the reshape output to give its shape")
        if y.element_count() != x.element_count():
            raise GraphError(f"{self.at('Y')}: dims {y.get_dim()} hold {y.element_count()} elements, "
                             f"X {x.get_dim()} holds {x.element_count()}")
        if self.mode == reshape_mode.LOGICAL:
            if y.get_data_type() == NOT_SET:
                y.set_data_type(x.get_data_type())
            elif y.get_data_type() != x.get_data_type():
                raise GraphError(f"{self.at('Y')}: data type {y.get_data_type().name} differs from X's "
                                 f"{x.get_data_type().name}; a LOGICAL reshape keeps the element type")
        self.set_output("Y", y, ctx, y.get_dim(), nhwc(y.get_dim()), like=x)

    def attributes(self) -> dict[str, Any]:
        y = self.outputs["Y"]
        out: dict[str, Any] = {"dim": y.get_dim(), "stride": y.get_stride()}
        if self.mode != reshape_mode.VIEW_ONLY:  # the default stays out of the JSON (and the graph key)
            out["reshape_mode"] = self.mode.name
        return out

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_RESHAPE_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_RESHAPE_YDESC, lw.tensor(self.outputs["Y"]))
        if self.mode != reshape_mode.VIEW_ONLY:  # the attribute is cuDNN >= 9.22; VIEW_ONLY is the default
            lw.set(op, A.CUDNN_ATTR_OPERATION_RESHAPE_MODE, self.mode, T.CUDNN_TYPE_RESHAPE_MODE)
        return [op.finalize()]


class GenStats(Node):
    """Per-channel SUM and SQ_SUM of X (the statistics step of batch norm)."""

    op, tag = "genstats", "GENSTATS"

    def __init__(self, name: str, x: Tensor, compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"X": x}

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x = self.inputs["X"].get_dim()
        if len(x) < 2:
            raise GraphError(f"{self.at('X')}: genstats needs [N, C, ...] input, got {x}")
        dims = [1, x[1]] + [1] * (len(x) - 2)
        for port in ("SUM", "SQ_SUM"):
            self.set_output(port, self.outputs[port], ctx, dims, nhwc(dims), like=self.inputs["X"])

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_GENSTATS_MODE, cudnnGenStatsMode_t.CUDNN_GENSTATS_SUM_SQSUM)
        op.set(A.CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, self.compute_data_type)
        op.set(A.CUDNN_ATTR_OPERATION_GENSTATS_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, lw.tensor(self.outputs["SUM"]))
        op.set(A.CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, lw.tensor(self.outputs["SQ_SUM"]))
        return [op.finalize()]


class Transpose(Node):
    """Y = X with its dims permuted (Y[i] = X[permutation[i]]); unset strides of Y are X's,
    permuted alike (Y describes X's memory), and Y has X's data type, as the official infers."""

    op, tag = "transpose", "TRANSPOSE"

    def __init__(self, name: str, x: Tensor, permutation: Sequence[int], compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"X": x}
        self.permutation = as_int_list(permutation, self.label(), "permutation")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x, y = self.inputs["X"], self.outputs["Y"]
        dims = x.get_dim()
        if sorted(self.permutation) != list(range(len(dims))):
            raise GraphError(f"{self.label()}: permutation {self.permutation} is not a permutation of "
                             f"{len(dims)} dims")
        same_type(self, x, y)
        strides = x.get_stride()
        self.set_output("Y", y, ctx, [dims[p] for p in self.permutation], [strides[p] for p in self.permutation])

    def attributes(self) -> dict[str, Any]:
        return {"permutation": self.permutation}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_TRANSPOSE_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_TRANSPOSE_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_TRANSPOSE_PERMUTATION, self.permutation)
        return [op.finalize()]


class Slice(Node):
    """Y = X[slices] with Python slice objects (one per leading dim). Y describes X's memory:
    unset strides are X's times the slice steps, and Y has X's data type, as the official
    infers. On a cuDNN without the SLICE operation (< 9.22) no operation is emitted: Y is made a
    window into X's buffer (`Tensor.make_window`), bound at X's address plus the offset of the
    first element it sees, as the official frontend does."""

    op, tag = "slice", "SLICE"

    def __init__(self, name: str, x: Tensor, slices: Sequence[slice], compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"X": x}
        for s in slices:
            if not isinstance(s, slice):
                raise TypeError(f"{self.label()}: slices must be Python slice objects, got {s!r}")
        self.slices = list(slices)
        self.ranges: list[tuple[int, int, int]] = []

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x = self.inputs["X"].get_dim()
        if len(self.slices) > len(x):
            raise GraphError(f"{self.label()}: {len(self.slices)} slices for {len(x)} dims")
        full = self.slices + [slice(None)] * (len(x) - len(self.slices))
        try:
            self.ranges = [s.indices(d) for s, d in zip(full, x)]
        except (TypeError, ValueError) as exc:  # a zero step, a bound that is not an int
            raise GraphError(f"{self.label()}: slices {self.slices} of X {x}: {exc}") from None
        if any(step <= 0 for _, _, step in self.ranges):
            raise GraphError(f"{self.label()}: slice steps must be positive")
        dims = [len(range(*r)) for r in self.ranges]
        if any(d == 0 for d in dims):
            raise GraphError(f"{self.label()}: slices {self.slices} of X {x} select nothing")
        y = self.outputs["Y"]
        same_type(self, self.inputs["X"], y)
        strides = [s * step for s, (_, _, step) in zip(self.inputs["X"].get_stride(), self.ranges)]
        self.set_output("Y", y, ctx, dims, strides)

    def attributes(self) -> dict[str, Any]:
        if not self.ranges:  # not inferred yet: the slices as given (null for an open end)
            return {"slices": [[s.start, s.stop] for s in self.slices], "strides": [s.step or 1 for s in self.slices]}
        return {"slices": [[a, b] for a, b, _ in self.ranges], "strides": [c for _, _, c in self.ranges]}

    def expand(self, ex: Expander) -> list[Node] | None:
        """On a cuDNN without the SLICE operation, make Y a window into X's buffer (the node then
        lowers to nothing; a slice of a slice is a window into the first one's input); refuse what
        a window cannot be: a slice of an intermediate (it has no buffer) or a slice output that is
        a graph output (nothing would write its buffer)."""
        x, y = self.inputs["X"], self.outputs["Y"]
        if ex.version >= SLICE_SINCE or y.window_of() is not None:  # the operation; or made by an earlier build
            return None
        if x.get_is_virtual():
            reason = "X is an intermediate (virtual) tensor, which has no buffer to read in place"
        elif x.get_is_pass_by_value():
            reason = "X is passed by value, which has no device buffer"
        elif not y.get_is_virtual():
            reason = "Y is a graph output, and a slice read in place from X's buffer writes no buffer of its own"
        else:
            source, offset = x.window_of() or (x, 0)
            y.make_window(source, offset + self.byte_offset())
            return None
        raise FeatureUnavailableError(f"{self.label()}: SLICE operation ({reason}; without the operation, a "
                                      "slice is read in place from a buffer the caller gives)", SLICE_SINCE, ex.version)

    def byte_offset(self) -> int:
        """Where Y's first element lies in X's buffer, in bytes."""
        from ...interop.framework_dtypes import bits

        x = self.inputs["X"]
        element = sum(start * s for (start, _, _), s in zip(self.ranges, x.get_stride()))
        offset_bits = element * bits(x.get_data_type())
        if offset_bits % 8:
            raise GraphNotSupportedError(f"{self.label()}: Y starts {element} {x.get_data_type().name} elements into "
                                         "X, inside a byte; a slice read in place needs a whole-byte offset")
        return offset_bits // 8

    def lower(self, lw: Lowering) -> list[Descriptor]:
        if self.outputs["Y"].window_of() is not None:  # read in place (see expand): no operation
            return []
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_SLICE_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_SLICE_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_SLICE_START_INDICES, [a for a, _, _ in self.ranges], T.CUDNN_TYPE_INT64)
        op.set(A.CUDNN_ATTR_OPERATION_SLICE_LIMIT_INDICES, [b for _, b, _ in self.ranges], T.CUDNN_TYPE_INT64)
        op.set(A.CUDNN_ATTR_OPERATION_SLICE_STRIDES, [c for _, _, c in self.ranges], T.CUDNN_TYPE_INT64)
        return [op.finalize()]


class Concatenate(Node):
    """Y = the inputs joined along ``axis``."""

    op, tag = "concatenate", "CONCATENATE"

    def __init__(self, name: str, inputs: Sequence[Tensor], axis: int, in_place_index: int | None,
                 compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        if len(inputs) < 1:
            raise GraphError(f"{self.label()}: needs at least one input")
        self.inputs = {f"IN_{i}": t for i, t in enumerate(inputs)}
        self.axis = as_int(axis, self.label(), "axis")
        self.in_place_index = optional(as_int, in_place_index, self.label(), "in_place_index")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        shapes = [t.get_dim() for t in self.inputs.values()]
        rank = len(shapes[0])
        if not 0 <= self.axis < rank:
            raise GraphError(f"{self.at('axis')}: expected 0 to {rank - 1} (the inputs' rank is {rank}), "
                             f"got {self.axis}")
        count = len(self.inputs)
        if self.in_place_index is not None and not 0 <= self.in_place_index < count:
            raise GraphError(f"{self.at('in_place_index')}: expected an index of the {count} inputs, 0 to "
                             f"{count - 1}, got {self.in_place_index}")
        for port, dims in zip(self.inputs, shapes):
            if len(dims) != rank or any(d != s for i, (d, s) in enumerate(zip(dims, shapes[0])) if i != self.axis):
                raise GraphError(f"{self.at(port)}: dims {dims} must match {shapes[0]} except on axis {self.axis}")
        dims = list(shapes[0])
        dims[self.axis] = sum(s[self.axis] for s in shapes)
        first = self.inputs["IN_0"]
        self.set_output("Y", self.outputs["Y"], ctx, dims, packed(dims, order_of(first.get_stride(), len(dims))),
                        like=first)

    def attributes(self) -> dict[str, Any]:
        return {"axis": self.axis, "in_place_index": self.in_place_index}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_CONCAT_AXIS, self.axis)
        op.set(A.CUDNN_ATTR_OPERATION_CONCAT_INPUT_DESCS, [lw.tensor(t) for t in self.inputs.values()])
        if self.in_place_index is not None:
            op.set(A.CUDNN_ATTR_OPERATION_CONCAT_INPLACE_INDEX, self.in_place_index)
        op.set(A.CUDNN_ATTR_OPERATION_CONCAT_OUTPUT_DESC, lw.tensor(self.outputs["Y"]))
        return [op.finalize()]


def same_type(node: Node, x: Tensor, y: Tensor) -> None:
    """Y takes X's data type where it is unset (a transpose or a slice moves elements, it does not
    convert them); a different one is refused, as the official refuses it."""
    if y.get_data_type() == NOT_SET:
        y.set_data_type(x.get_data_type())
    elif y.get_data_type() != x.get_data_type():
        raise GraphError(f"{node.at('Y')}: data type {y.get_data_type().name} differs from X's "
                         f"{x.get_data_type().name}; {node.op} output and input types must match")
