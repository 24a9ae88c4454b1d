"""Convolution forward, backward data and backward filter (2-D and 3-D, grouped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ..._lib.attributes import A
from ..._lib.enums import convolution_mode
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ...backend.descriptor import Descriptor
from ..model.arguments import as_int_list
from ..model.graph_errors import GraphError
from ..model.lower import Lowering
from ..model.node import Context, Node, number_error
from ..model.tensor import Tensor, nhwc

_MODES = {"CROSS_CORRELATION": convolution_mode.CROSS_CORRELATION,
          "CONVOLUTION": convolution_mode.CONVOLUTION}


def _mode(value: Any, label: str) -> convolution_mode:
    if isinstance(value, convolution_mode):
        return value
    name = getattr(value, "name", value)
    if isinstance(name, str) and name.upper() in _MODES:
        return _MODES[name.upper()]
    raise GraphError(f"{label}: convolution_mode: expected cudnn.convolution_mode.CROSS_CORRELATION or "
                     f"CONVOLUTION, got {value!r}")


class _Conv(Node):
    """Shared attributes of the three convolutions; ports differ per subclass."""

    # (image port, filter port, output port) in the backend's naming.
    x_port: ClassVar[str]
    w_port: ClassVar[str]
    y_port: ClassVar[str]
    op_type: ClassVar[D]
    attrs: ClassVar[tuple[int, int, int, int, int, int]]  # alpha, beta, conv desc, x, w, y

    def __init__(self, name: str, inputs: dict[str, Tensor], padding: Sequence[int] | None,
                 stride: Sequence[int] | None, dilation: Sequence[int] | None, convolution_mode: Any,
                 compute_data_type: Any, pre_padding: Sequence[int] | None,
                 post_padding: Sequence[int] | None) -> None:
        super().__init__(name, compute_data_type)
        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise GraphError(f"{self.label()}: give padding= or pre_padding=/post_padding=, not both")
        if padding is not None:
            self.pre_padding = _ints(self, "padding", padding)
            self.post_padding = list(self.pre_padding)
        else:
            self.pre_padding = _ints(self, "pre_padding", pre_padding)
            self.post_padding = _ints(self, "post_padding", post_padding)
        self.stride = _ints(self, "stride", stride)
        self.dilation = _ints(self, "dilation", dilation)
        self.mode = _mode(convolution_mode, self.label())
        self.inputs = inputs
        for port, t in inputs.items():
            if t.get_value() is not None and not t.get_dim():
                raise number_error(self, port, t)

    def spatial_count(self) -> int:
        ranks = {len(t.get_dim()) for t in self.inputs.values()}
        if len(ranks) > 1:
            detail = ", ".join(f"{p} {t.get_dim()}" for p, t in self.inputs.items())
            raise GraphError(f"{self.label()}: inputs must have the same rank; got {detail}")
        rank = ranks.pop()
        if rank < 3:
            raise GraphError(f"{self.label()}: convolutions take [N, C, spatial...] tensors of rank >= 3, "
                             f"got rank {rank}")
        return rank - 2

    def fill_defaults(self) -> None:
        n = self.spatial_count()
        for attr, default in (("pre_padding", 0), ("post_padding", 0), ("stride", 1), ("dilation", 1)):
            values = getattr(self, attr)
            if not values:
                setattr(self, attr, [default] * n)
            elif len(values) != n:
                raise GraphError(f"{self.label()}: {attr} needs {n} values for {n} spatial dims, got {values}")
        if any(s <= 0 for s in self.stride) or any(d <= 0 for d in self.dilation):
            raise GraphError(f"{self.label()}: stride and dilation must be positive, "
                             f"got {self.stride}, {self.dilation}")

    def output_size(self, size: int, k: int, i: int) -> int:
        span = self.dilation[i] * (k - 1) + 1
        return (size + self.pre_padding[i] + self.post_padding[i] - span) // self.stride[i] + 1

    def forward_dims(self, x: list[int], w: list[int]) -> list[int]:
        """Dims of conv(x, w): [N, K, spatial...]."""
        return [x[0], w[0]] + [self.output_size(x[i + 2], w[i + 2], i) for i in range(len(x) - 2)]

    def gradient_dims(self, port: str, what: str, inferred: list[int], ambiguous: bool = True) -> list[int]:
        """The gradient output's dims: the user's, else ``inferred``, which is only unambiguous
        without striding (a strided convolution maps several input sizes to one output size);
        ``ambiguous=False`` takes ``inferred`` anyway (the official's choice for dgrad)."""
        dims = self.outputs[port].get_dim()
        if dims:
            return dims
        if ambiguous and any(s != 1 for s in self.stride):
            raise GraphError(f"{self.at(port)}: with stride {self.stride} the {what} size is ambiguous; "
                             f"call set_dim() on the {self.op} output")
        return inferred

    def check_gradient(self, x: list[int], w: list[int], dy: list[int]) -> None:
        """The forward convolution of x with w must give DY's dims."""
        expected = self.forward_dims(x, w)
        if expected != list(dy):
            raise GraphError(f"{self.label()}: X {x} convolved with W {w} gives {expected}, but DY is {dy}")

    def check_channels(self, c_in: int, w: list[int], port: str) -> None:
        """Groups = input channels / filter channels; each group has as many output channels."""
        if c_in % w[1]:
            raise GraphError(f"{self.at(port)}: {c_in} input channels are not a multiple of the filter's "
                             f"{w[1]} (groups = channels / filter channels)")
        groups = c_in // w[1]
        if w[0] % groups:
            raise GraphError(f"{self.at(port)}: filter {w} has {w[0]} output channels, not a multiple of the "
                             f"{groups} groups ({c_in} input channels / {w[1]} filter channels)")

    def attributes(self) -> dict[str, Any]:
        return {"dilation": self.dilation, "math_mode": self.mode.name, "post_padding": self.post_padding,
                "pre_padding": self.pre_padding, "stride": self.stride}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        conv = lw.descriptor(D.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, self.name)
        conv.set(A.CUDNN_ATTR_CONVOLUTION_COMP_TYPE, self.compute_data_type)
        conv.set(A.CUDNN_ATTR_CONVOLUTION_CONV_MODE, self.mode)
        conv.set(A.CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, len(self.stride))
        conv.set(A.CUDNN_ATTR_CONVOLUTION_DILATIONS, self.dilation)
        conv.set(A.CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, self.stride)
        conv.set(A.CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, self.pre_padding)
        conv.set(A.CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, self.post_padding)
        conv.finalize()
        alpha, beta, desc, x, w, y = self.attrs
        scalar = lw.scalar_type(self.compute_data_type)
        op = lw.descriptor(self.op_type, self.name)
        op.set(alpha, 1.0, scalar).set(beta, 0.0, scalar).set(desc, conv)
        ports = {**self.inputs, **self.outputs}
        op.set(x, lw.tensor(ports[self.x_port]))
        op.set(w, lw.tensor(ports[self.w_port]))
        op.set(y, lw.tensor(ports[self.y_port]))
        return [op.finalize()]


def _ints(node: Node, what: str, values: Sequence[int] | None) -> list[int]:
    if values is None:
        return []
    out = as_int_list(values, node.label(), what)
    if what.endswith("padding") and any(v < 0 for v in out):
        raise GraphError(f"{node.label()}: {what} must be non-negative, got {out}")
    return out


class ConvFprop(_Conv):
    """Y = conv(X, W)."""

    op, tag = "conv_fprop", "CONV_FPROP"
    x_port, w_port, y_port = "X", "W", "Y"
    op_type = D.CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
    attrs = (A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
             A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
             A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y)

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        self.fill_defaults()
        x, w = self.inputs["X"].get_dim(), self.inputs["W"].get_dim()
        self.check_channels(x[1], w, "W")
        out = self.forward_dims(x, w)
        if any(d <= 0 for d in out):
            raise GraphError(f"{self.label()}: output dims {out} are not positive: the filter {w} is larger "
                             f"than the padded image {x}")
        y = self.outputs["Y"]
        self.set_output("Y", y, ctx, out, nhwc(out), like=self.inputs["X"])


class ConvDgrad(_Conv):
    """DX = conv_transpose(DY, W): the gradient of the convolution input. Unset DX dims are the
    smallest input the forward convolution maps to DY's dims, (DY - 1) * stride + (W - 1) *
    dilation + 1 - paddings, as the official infers them (strided too: set_dim() chooses another)."""

    op, tag = "conv_dgrad", "CONV_DGRAD"
    x_port, w_port, y_port = "DX", "W", "DY"
    op_type = D.CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
    attrs = (A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
             A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
             A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY)

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        dy, w = self.inputs["DY"].get_dim(), self.inputs["W"].get_dim()
        self.fill_defaults()
        inferred = [dy[0], w[1]] + [(dy[i + 2] - 1) * self.stride[i] + self.dilation[i] * (w[i + 2] - 1) + 1
                                    - self.pre_padding[i] - self.post_padding[i] for i in range(len(dy) - 2)]
        dims = self.gradient_dims("DX", "input", inferred, ambiguous=False)
        self.check_channels(dims[1], w, "W")
        self.check_gradient(dims, w, dy)
        self.set_output("DX", self.outputs["DX"], ctx, dims, nhwc(dims), like=self.inputs["DY"])


class ConvWgrad(_Conv):
    """DW: the gradient of the convolution filter."""

    op, tag = "conv_wgrad", "CONV_WGRAD"
    x_port, w_port, y_port = "X", "DW", "DY"
    op_type = D.CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
    attrs = (A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
             A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
             A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, A.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY)

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        x, dy = self.inputs["X"].get_dim(), self.inputs["DY"].get_dim()
        self.fill_defaults()
        inferred = [dy[1], x[1]] + [(x[i + 2] + self.pre_padding[i] + self.post_padding[i] - dy[i + 2])
                                    // self.dilation[i] + 1 for i in range(len(x) - 2)]
        dims = self.gradient_dims("DW", "filter", inferred)
        self.check_channels(x[1], dims, "DW")
        self.check_gradient(x, dims, dy)
        self.set_output("DW", self.outputs["DW"], ctx, dims, nhwc(dims), like=self.inputs["X"])
