"""Block-scaled quantization: BLOCK_SCALE_QUANTIZE and BLOCK_SCALE_DEQUANTIZE (cuDNN >= 9.7).

Quantize turns X into a narrow Y (FP8 or FP4) plus one scale per block of ``block_size``
consecutive elements along ``axis`` (the last dim by default): MX formats take blocks of 32
with FP8_E8M0 scales, NVFP4 blocks of 16 with FP8_E4M3 scales. Dequantize multiplies a narrow
X by its scales (``block_size`` per dim, e.g. [1, 32]) into a virtual higher-precision Y that
only a following operation (a matmul) reads. What the backend attributes carry is only X, Y,
the scale, the math precision and the block size: axis and transpose decide the layouts the
frontend infers, as in the official frontend. For inputs of up to 3 dims the backend takes the
scales only in the F8_128x4 tiled layout (128 x 4 tiles of 512 bytes), which quantize infers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._lib import enums
from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type, tensor_reordering
from ..._lib.status import FeatureUnavailableError
from ...backend.descriptor import Descriptor
from ..model.arguments import as_bool, as_int, as_int_list, optional
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.lower import Lowering
from ..model.node import Context, Node
from ..model.tensor import NOT_SET, Tensor, order_of, packed

BLOCK_SCALE_SINCE = 90700
NEG_SCALE_SINCE = enums.SINCE["cudnnBackendAttributeName_t"]["CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE"]
NARROW_TYPES = (data_type.FP8_E4M3, data_type.FP8_E5M2, data_type.FP4_E2M1)
# block size -> the scale types that go with it (MX: 32 with E8M0; NVFP4: 16 with E4M3)
SCALE_TYPES = {32: (data_type.FP8_E8M0,), 16: (data_type.FP8_E4M3, data_type.FP8_E8M0)}
WIDE_TYPES = (data_type.FLOAT, data_type.HALF, data_type.BFLOAT16)
SWIZZLED_RANK = 3  # inputs of up to 3 dims need their scales in the F8_128x4 layout (seen on cuDNN 9.19)


def require_version(label: str, what: str, since: int) -> None:
    """Refuse at validate when the loaded cuDNN predates ``since`` (no library: decided at build)."""
    from .sdpa_common import loaded_version

    version = loaded_version()
    if version is not None and version < since:
        raise FeatureUnavailableError(f"{label}: {what}", since, version)


def require_type(label: str, dt: data_type) -> None:
    """Refuse a data type (FP4, E8M0) the loaded cuDNN does not know."""
    since = enums.SINCE.get("cudnnDataType_t", {}).get(f"CUDNN_DATA_{dt.name}")
    if since:
        require_version(label, f"data type {dt.name}", since)


def check_swizzled(node: Node, port: str, t: Tensor, axis: int) -> None:
    """A scale in the F8_128x4 layout is stored in tiles of 128 scaled rows x 4 scales (``axis``:
    the dim of the blocks): smaller dims would make the backend address past the tensor's extent."""
    dims = t.get_dim()
    if t.get_reordering_type() != tensor_reordering.F8_128x4 or len(dims) < 2:
        return
    other = len(dims) - 2 if axis == len(dims) - 1 else len(dims) - 1
    if dims[axis] % 4 or dims[other] % 128:
        raise GraphError(f"{node.at(port)}: a scale in the F8_128x4 layout is stored in 128 x 4 tiles: dim {other} "
                         f"must be a multiple of 128 and dim {axis} (the blocks) of 4, got {dims} "
                         "(pad the scaled tensor)")


def transposed_order(dims: Sequence[int], strides: Sequence[int], axis: int | None) -> list[int]:
    """The stride order the official gives the outputs of a transposing quantize: X's dims from
    the fastest, unit dims first among equal strides and otherwise the later dim first (what the
    official's sort makes of its comparator), then rotated so that ``axis``, when one was given,
    is the fastest (the blocks are packed)."""
    fastest = sorted(range(len(dims)), key=lambda i: (strides[i], dims[i] != 1, -i))
    if axis is not None:
        k = fastest.index(axis % len(dims))
        fastest = fastest[k:] + fastest[:k]
    order = [0] * len(dims)
    for rank, i in enumerate(fastest):
        order[i] = rank
    return order


def _names(types: Sequence[data_type]) -> str:
    return ", ".join(t.name for t in types)


class BlockScaleQuantize(Node):
    """X -> (Y, scale): Y = X / scale rounded to a narrow type; one scale per block along ``axis``.
    Unset strides are the official's: Y has X's, the scale X's stride order; with ``transpose``
    both are packed in `transposed_order`."""

    op, tag = "block_scale_quantize", "BLOCK_SCALE_QUANTIZE"

    def __init__(self, name: str, x: Tensor, block_size: Any, axis: Any, transpose: Any,
                 compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"X": x}
        block_size = as_int(block_size, self.label(), "block_size")
        if block_size not in SCALE_TYPES:
            raise GraphNotSupportedError(f"{self.at('block_size')}: {block_size} is not supported; the backend takes "
                                         f"blocks of {' or '.join(str(b) for b in sorted(SCALE_TYPES))}")
        self.block_size, self.axis = block_size, optional(as_int, axis, self.label(), "axis")
        self.transpose = as_bool(transpose, self.label(), "transpose")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        require_version(self.label(), "BLOCK_SCALE_QUANTIZE", BLOCK_SCALE_SINCE)
        x, y, scale = self.inputs["X"], self.outputs["Y"], self.outputs["scale"]
        dims, strides = x.get_dim(), x.get_stride()
        if x.get_data_type() not in WIDE_TYPES:
            raise GraphError(f"{self.at('input')}: must be {_names(WIDE_TYPES)}, got {x.get_data_type().name}")
        axis = len(dims) - 1 if self.axis is None else self.axis
        if not -len(dims) <= axis < len(dims):
            raise GraphError(f"{self.at('axis')}: {self.axis} is out of range for {len(dims)}-D input {dims}")
        axis %= len(dims)
        if dims[axis] % self.block_size:
            raise GraphError(f"{self.at('block_size')}: input dim {axis} ({dims[axis]}) is not a multiple of the "
                             f"block size {self.block_size} (input {dims})")
        order = transposed_order(dims, strides, self.axis) if self.transpose else None
        y_strides = packed(dims, order) if order is not None else strides
        if y.get_data_type() == NOT_SET and ctx.io_data_type in NARROW_TYPES:
            y.set_data_type(ctx.io_data_type)
        if y.get_data_type() not in NARROW_TYPES:
            got = "unset" if y.get_data_type() == NOT_SET else y.get_data_type().name
            raise GraphError(f"{self.at('Y')}: the quantized output must be {_names(NARROW_TYPES)} "
                             f"(set_data_type on Y), got {got}")
        require_type(self.label(), y.get_data_type())
        self.set_output("Y", y, ctx, dims, y_strides)
        s_dims = list(dims)
        s_dims[axis] //= self.block_size
        allowed = SCALE_TYPES[self.block_size]
        if scale.get_data_type() == NOT_SET:
            scale.set_data_type(allowed[0])
        if scale.get_data_type() not in allowed:
            raise GraphError(f"{self.at('scale')}: blocks of {self.block_size} take {_names(allowed)} scales, "
                             f"got {scale.get_data_type().name}")
        require_type(self.label(), scale.get_data_type())
        if len(dims) <= SWIZZLED_RANK and scale.get_reordering_type() == tensor_reordering.NONE:
            scale.set_reordering_type(tensor_reordering.F8_128x4)  # the only scale layout the backend takes there
        self.set_output("scale", scale, ctx, s_dims, packed(s_dims, order if order is not None else order_of(strides)))
        check_swizzled(self, "scale", scale, axis)

    def attributes(self) -> dict[str, Any]:
        return {"axis": self.axis, "block_size": self.block_size, "transpose": self.transpose}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC, lw.tensor(self.outputs["scale"]))
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC, self.compute_data_type)
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE, [self.block_size], T.CUDNN_TYPE_INT32)
        return [op.finalize()]


class BlockScaleDequantize(Node):
    """(X, scale) -> Y = X * scale per block; Y is virtual (it feeds another operation)."""

    op, tag = "block_scale_dequantize", "BLOCK_SCALE_DEQUANTIZE"

    def __init__(self, name: str, x: Tensor, scale: Tensor, block_size: Any, is_negative_scale: Any,
                 compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {"X": x, "scale": scale}
        if isinstance(block_size, int) and not isinstance(block_size, bool):
            block_size = [block_size]
        block_size = as_int_list(block_size, self.label(), "block_size")
        if not block_size or min(block_size) < 1:
            raise GraphError(f"{self.at('block_size')}: must be a list of positive ints (e.g. [1, 32]), "
                             f"got {block_size!r}")
        if max(block_size) not in SCALE_TYPES or sorted(block_size)[:-1] != [1] * (len(block_size) - 1):
            raise GraphNotSupportedError(f"{self.at('block_size')}: {list(block_size)} is not supported; "
                                         "blocks run along one dim with "
                                         f"{' or '.join(str(b) for b in sorted(SCALE_TYPES))} elements (e.g. "
                                         "[1, 32]), every other entry 1")
        self.block_size = block_size
        self.is_negative_scale = as_bool(is_negative_scale, self.label(), "is_negative_scale")

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        require_version(self.label(), "BLOCK_SCALE_DEQUANTIZE", BLOCK_SCALE_SINCE)
        if self.is_negative_scale:
            require_version(self.label(), "is_negative_scale (BLOCK_SCALE_DEQUANTIZE_NEG_SCALE)", NEG_SCALE_SINCE)
        x, scale, y = self.inputs["X"], self.inputs["scale"], self.outputs["Y"]
        dims = x.get_dim()
        if x.get_data_type() not in NARROW_TYPES:
            raise GraphError(f"{self.at('input')}: must be {_names(NARROW_TYPES)}, got {x.get_data_type().name}")
        require_type(self.label(), x.get_data_type())
        if len(self.block_size) > len(dims):
            raise GraphError(f"{self.at('block_size')}: {self.block_size} has more entries than input {dims} "
                             "has dims")
        allowed = SCALE_TYPES[max(self.block_size)]
        if scale.get_data_type() not in allowed:
            raise GraphError(f"{self.at('descale')}: blocks of {max(self.block_size)} take {_names(allowed)} "
                             f"scales, got {scale.get_data_type().name}")
        require_type(self.label(), scale.get_data_type())
        s_dims = scale.get_dim()
        blocks = [1] * (len(dims) - len(self.block_size)) + self.block_size
        need = [-(-d // b) for d, b in zip(dims, blocks)]
        if len(s_dims) != len(dims) or any(s < n for s, n in zip(s_dims, need)):
            raise GraphError(f"{self.at('descale')}: dims {s_dims} must cover input {dims} in blocks of "
                             f"{blocks}: at least {need} (padded scale layouts may be larger)")
        check_swizzled(self, "descale", scale, blocks.index(max(blocks)))
        if not y.get_is_virtual():
            raise GraphError(f"{self.at('Y')}: the dequantized output must stay virtual: it feeds another "
                             "operation of the graph (a matmul), the backend does not write it out")
        self.set_output("Y", y, ctx, dims, x.get_stride())

    def attributes(self) -> dict[str, Any]:
        return {"block_size": self.block_size, "is_negative_scale": self.is_negative_scale}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC, lw.tensor(self.inputs["X"]))
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC, lw.tensor(self.inputs["scale"]))
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC, self.compute_data_type)
        op.set(A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE, self.block_size, T.CUDNN_TYPE_INT32)
        if self.is_negative_scale:
            lw.set(op, A.CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE, True)
        return [op.finalize()]
