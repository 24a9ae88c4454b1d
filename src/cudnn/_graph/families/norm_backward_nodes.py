"""Normalization backward nodes (one NORM_BACKWARD operation each) and BN finalize.

Backward nodes take DY, X, SCALE and the statistics the TRAINING forward saved, and give
DX, DSCALE and (except rmsnorm_backward without bias) DBIAS. BN finalize turns per-channel
sums (genstats) into batch-norm statistics, running statistics and an equivalent
scale/bias: the statistics half of the backend's conv + batch norm fusions.
"""

from __future__ import annotations

from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import cudnnBnFinalizeStatsMode_t, data_type, norm_mode
from ...backend.descriptor import Descriptor
from ..model.graph_errors import GraphError
from ..model.lower import Lowering
from ..model.node import Context
from ..model.tensor import NOT_SET, Tensor, nhwc, packed, row_major_order
from .norm_nodes import FORWARD, Kind, NormNode

BACKWARD: dict[str, Kind] = {
    "layernorm_backward": Kind("layernorm_backward", "LAYER_NORM_BPROP", norm_mode.LAYER_NORM, "feature",
                               ("MEAN", "INV_VARIANCE")),
    "rmsnorm_backward": Kind("rmsnorm_backward", "RMS_NORM_BPROP", norm_mode.RMS_NORM, "feature",
                             ("INV_VARIANCE",)),
    "instancenorm_backward": Kind("instancenorm_backward", "INSTANCE_NORM_BPROP", norm_mode.INSTANCE_NORM,
                                  "instance", ("MEAN", "INV_VARIANCE")),
    "adalayernorm_backward": Kind("adalayernorm_backward", "ADA_LAYER_NORM_BPROP", norm_mode.ADA_LAYER_NORM,
                                  "sample", ("MEAN", "INV_VARIANCE"), FORWARD["adalayernorm"].since,
                                  FORWARD["adalayernorm"].since_reason),
    "batchnorm_backward": Kind("batchnorm_backward", "DBN", norm_mode.BATCH_NORM, "batch",
                               ("MEAN", "INV_VARIANCE")),
}

_BWD_ATTR = {
    "DY": A.CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC,
    "X": A.CUDNN_ATTR_OPERATION_NORM_BWD_XDESC,
    "SCALE": A.CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC,
    "MEAN": A.CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC,
    "INV_VARIANCE": A.CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
    "EPSILON": A.CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC,
    "DX": A.CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,
    "DSCALE": A.CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
    "DBIAS": A.CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC,
}


class NormBackward(NormNode):
    """DX, DSCALE, DBIAS of a norm from DY, X, SCALE and the saved MEAN / INV_VARIANCE.

    Unset layouts: DX (and DY left open) X's strides, as the backend requires of DX
    (NORM_BACKWARD refuses another shape: BAD_PARAM_SHAPE_MISMATCH); DSCALE/DBIAS channels
    last, row major for adaptive layer norm, as the official infers them."""

    def __init__(self, name: str, kind: Kind, inputs: dict[str, Tensor | None], compute_data_type: Any,
                 has_dbias: bool = True) -> None:
        super().__init__(name, kind, inputs, compute_data_type)
        self.has_dbias = has_dbias
        # instance norm's backward engine, captured, wrote other bits than its execute in every
        # dtype (H100, cuDNN 9.19; tests/support/replay_check.py): it is never replayed
        self.replayable = kind.mode != norm_mode.INSTANCE_NORM

    def output_ports(self) -> list[str]:
        return ["DX", "DSCALE"] + (["DBIAS"] if self.has_dbias else [])

    def infer(self, ctx: Context) -> None:
        dy, x = self.inputs["DY"], self.inputs["X"]
        if not dy.get_dim() and x.get_dim():  # DY left open: X's dims and strides
            dy.set_dim(x.get_dim())
            if not dy.get_stride():
                dy.set_stride(x.get_stride())
        for port in self.kind.stats:  # statistics left open take the shape the rules give
            t = self.inputs.get(port)
            if t is not None and not t.get_dim() and x.get_dim() and self.inputs["SCALE"].get_dim():
                dims = self.stats_dims(x.get_dim(), self.inputs["SCALE"])
                t.set_dim(dims).set_stride(self.stats_strides(dims))
        dims = self.prepare_inputs(ctx)
        self.check_dims("DY", dims, "the dims of X")
        stats = self.stats_dims(dims, self.inputs["SCALE"])
        for port in self.kind.stats:
            self.check_dims(port, stats, f"the statistics the forward saved for X {dims}")
        self.like_x("DX", self.outputs["DX"], ctx)  # X's strides: cuDNN needs DX shaped as X
        scale = self.inputs["SCALE"]
        sdims = scale.get_dim()
        for port in ("DSCALE", "DBIAS"):
            t = self.outputs.get(port)
            if t is None:
                continue
            self.official_type(t, ctx, scale.get_data_type())  # no io type: the parameter's type
            self.set_output(port, t, ctx, sdims, self.layout(sdims))

    def layout(self, dims: list[int]) -> list[int]:
        """The official's strides for a backward output (and an open DY): row major for adaptive
        layer norm, channels last (NHWC order) for the others."""
        return packed(dims, row_major_order(len(dims))) if self.kind.layout == "sample" else nhwc(dims)

    def attributes(self) -> dict[str, Any]:
        return self.peer_json() if self.kind.mode == norm_mode.BATCH_NORM else self.norm_json()

    def lower(self, lw: Lowering) -> list[Descriptor]:
        return self.emit(lw, D.CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, _BWD_ATTR,
                         {A.CUDNN_ATTR_OPERATION_NORM_BWD_MODE: self.kind.mode},
                         A.CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS)


BN_FINALIZE = Kind("bn_finalize", "BN_FINALIZE", norm_mode.BATCH_NORM, "batch", ())

_FINALIZE_ATTR = {
    "SUM": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC,
    "SQ_SUM": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC,
    "SCALE": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC,
    "BIAS": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC,
    "EPSILON": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC,
    "ACCUM_COUNT": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC,
    "PREV_RUNNING_MEAN": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC,
    "PREV_RUNNING_VAR": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC,
    "MOMENTUM": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC,
    "EQ_SCALE": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC,
    "EQ_BIAS": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC,
    "MEAN": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC,
    "INV_VARIANCE": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC,
    "NEXT_RUNNING_MEAN": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC,
    "NEXT_RUNNING_VAR": A.CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC,
}


class BNFinalize(NormNode):
    """Batch-norm statistics from per-channel SUM and SQ_SUM over ACCUM_COUNT elements.

    Outputs EQ_SCALE and EQ_BIAS (y = x * EQ_SCALE + EQ_BIAS is the normalization), the saved
    MEAN and INV_VARIANCE, and with running statistics their momentum update. cuDNN requires
    SUM and SQ_SUM alike (dims, strides, type), the accumulation count and the exponential
    average factor (MOMENTUM) even without running statistics. The header calls the op "a
    buffer op between the two fusions" (conv + genstats, then the apply); NVIDIA's samples
    build it as a graph of its own, with SUM and SQ_SUM as its inputs."""

    def __init__(self, name: str, inputs: dict[str, Tensor | None], compute_data_type: Any) -> None:
        super().__init__(name, BN_FINALIZE, inputs, compute_data_type)

    def output_ports(self) -> list[str]:
        ports = ["EQ_SCALE", "EQ_BIAS", "MEAN", "INV_VARIANCE"]
        return ports + (["NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"] if "PREV_RUNNING_MEAN" in self.inputs else [])

    def infer(self, ctx: Context) -> None:
        sums = self.inputs["SUM"]
        if not sums.get_dim():
            raise GraphError(f"{self.at('SUM')} tensor {sums.label()} has no dims; give the [1, C, 1, 1] "
                             "per-channel sums (genstats)")
        rank = len(sums.get_dim())
        count = self.inputs["ACCUM_COUNT"]
        if not count.get_dim():
            count.set_dim([1] * rank).set_stride([1] * rank)
        if count.get_data_type() == NOT_SET:
            count.set_data_type(data_type.INT64)
        dims = self.prepare_inputs(ctx, main="SUM")
        want = [1, dims[1]] + [1] * (rank - 2)
        for port in ("SUM", "SQ_SUM", "SCALE", "BIAS", "PREV_RUNNING_MEAN", "PREV_RUNNING_VAR"):
            self.check_dims(port, want, "one value per channel")
        sq = self.inputs["SQ_SUM"]
        if (sq.get_stride(), sq.get_data_type()) != (sums.get_stride(), sums.get_data_type()):
            raise GraphError(f"{self.at('SQ_SUM')} tensor {sq.label()} has strides {sq.get_stride()} and type "
                             f"{sq.get_data_type().name}, SUM {sums.label()} {sums.get_stride()} and "
                             f"{sums.get_data_type().name}; cuDNN needs the two alike")
        if count.element_count() != 1:
            raise GraphError(f"{self.at('ACCUM_COUNT')} tensor {count.label()} must be a scalar (the number of "
                             f"elements summed per channel), got dims {count.get_dim()}")
        for port in self.outputs:
            prev = self.inputs.get(port.replace("NEXT_", "PREV_"))
            dtype = prev.get_data_type() if port.startswith("NEXT_") and prev is not None else data_type.FLOAT
            t = self.outputs[port]
            self.official_type(t, ctx, dtype)
            self.set_output(port, t, ctx, want, nhwc(want))

    def lower(self, lw: Lowering) -> list[Descriptor]:
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE,
               cudnnBnFinalizeStatsMode_t.CUDNN_BN_FINALIZE_STATISTICS_TRAINING)
        op.set(A.CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, self.compute_data_type)
        for port, t in {**self.inputs, **self.outputs}.items():
            op.set(_FINALIZE_ATTR[port], lw.tensor(t))
        return [op.finalize()]
