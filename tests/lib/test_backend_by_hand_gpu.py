"""The backend by hand: seed 002's conv + bias + ReLU built descriptor by descriptor."""

from __future__ import annotations

import pytest
import torch

import cudnn
from cudnn._lib.enums import cudnnBackendAttributeName_t as A
from cudnn._lib.enums import cudnnBackendAttributeType_t as T
from cudnn._lib.enums import cudnnBackendDescriptorType_t as D
from cudnn.backend import Descriptor
from cudnn.backend import engine as eng
from cudnn.backend import plan as pl


def _tensor(uid: int, dims: list[int], strides: list[int], dtype: cudnn.data_type,
            virtual: bool = False) -> Descriptor:
    return (Descriptor(D.CUDNN_BACKEND_TENSOR_DESCRIPTOR, f"uid{uid}")
            .set(A.CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
            .set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
            .set(A.CUDNN_ATTR_TENSOR_STRIDES, strides)
            .set(A.CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)
            .set(A.CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
            .set(A.CUDNN_ATTR_TENSOR_IS_VIRTUAL, virtual)
            .finalize())


def _nhwc(n: int, c: int, h: int, w: int) -> list[int]:
    return [h * w * c, 1, w * c, c]


def test_handle_and_stream() -> None:
    handle = cudnn.create_handle()
    assert handle.device == torch.cuda.current_device()
    stream = torch.cuda.Stream()
    cudnn.set_stream(handle=handle, stream=stream)
    assert cudnn.get_stream(handle) == stream.cuda_stream
    cudnn.set_stream(handle=handle, stream=0)
    assert cudnn.get_stream(handle) == 0
    cudnn.destroy_handle(handle)
    cudnn.destroy_handle(handle)  # idempotent
    with pytest.raises(cudnn.DescriptorClosedError):
        cudnn.get_stream(handle)


def test_conv_bias_relu_by_hand_matches_torch() -> None:
    torch.manual_seed(0)
    n, c, h, w, k = 4, 32, 16, 16, 64
    x = torch.randn(n, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    wt = torch.randn(k, c, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.float16)
    y = torch.full((n, k, h, w), float("nan"), device="cuda", dtype=torch.float16).to(
        memory_format=torch.channels_last)

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream())
    half, fp32 = cudnn.data_type.HALF, cudnn.data_type.FLOAT
    tx = _tensor(1, [n, c, h, w], _nhwc(n, c, h, w), half)
    tw = _tensor(2, [k, c, 3, 3], _nhwc(k, c, 3, 3), half)
    tb = _tensor(3, [1, k, 1, 1], [k, 1, k, k], half)
    tconv = _tensor(4, [n, k, h, w], _nhwc(n, k, h, w), fp32, virtual=True)
    tadd = _tensor(5, [n, k, h, w], _nhwc(n, k, h, w), fp32, virtual=True)
    ty = _tensor(6, [n, k, h, w], _nhwc(n, k, h, w), half)

    conv = (Descriptor(D.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "conv")
            .set(A.CUDNN_ATTR_CONVOLUTION_COMP_TYPE, fp32)
            .set(A.CUDNN_ATTR_CONVOLUTION_CONV_MODE, cudnn.convolution_mode.CROSS_CORRELATION)
            .set(A.CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2)
            .set(A.CUDNN_ATTR_CONVOLUTION_DILATIONS, [1, 1])
            .set(A.CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, [1, 1])
            .set(A.CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, [1, 1])
            .set(A.CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, [1, 1])
            .finalize())
    conv_op = (Descriptor(D.CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "conv")
               .set(A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tx)
               .set(A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, tw)
               .set(A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, tconv)
               .set(A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
               .set(A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, 1.0, T.CUDNN_TYPE_FLOAT)
               .set(A.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, 0.0, T.CUDNN_TYPE_FLOAT)
               .finalize())

    def pointwise(mode: cudnn.pointwise_mode, xd: Descriptor, yd: Descriptor,
                  bd: Descriptor | None = None) -> Descriptor:
        pw = (Descriptor(D.CUDNN_BACKEND_POINTWISE_DESCRIPTOR, mode.name)
              .set(A.CUDNN_ATTR_POINTWISE_MODE, mode)
              .set(A.CUDNN_ATTR_POINTWISE_MATH_PREC, fp32).finalize())
        op = (Descriptor(D.CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, mode.name)
              .set(A.CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
              .set(A.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, xd)
              .set(A.CUDNN_ATTR_OPERATION_POINTWISE_YDESC, yd))
        if bd is not None:
            op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bd)
        return op.finalize()

    add_op = pointwise(cudnn.pointwise_mode.ADD, tconv, tadd, tb)
    relu_op = pointwise(cudnn.pointwise_mode.RELU_FWD, tadd, ty)

    graph = (Descriptor(D.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "conv_bias_relu")
             .set(A.CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle.ptr, T.CUDNN_TYPE_HANDLE)
             .set(A.CUDNN_ATTR_OPERATIONGRAPH_OPS, [conv_op, add_op, relu_op])
             .finalize())
    assert eng.engine_count(graph) > 0

    heur = (Descriptor(D.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heur")
            .set(A.CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
            .set(A.CUDNN_ATTR_ENGINEHEUR_MODE, cudnn.heur_mode.A)
            .finalize())
    configs = heur.get_array(A.CUDNN_ATTR_ENGINEHEUR_RESULTS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             None, D.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
    assert configs, "heuristics mode A returned no engine config"

    plan = None
    errors = []
    for cfg in configs:
        try:
            plan = (Descriptor(D.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan")
                    .set(A.CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle.ptr, T.CUDNN_TYPE_HANDLE)
                    .set(A.CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg)
                    .finalize())
            break
        except cudnn.CudnnError as exc:
            errors.append(exc)
    assert plan is not None, f"no engine config finalized: {errors}"
    # Reading back: nested descriptors and enum lists.
    engine = eng.config_engine(cfg)
    assert eng.global_index(engine) >= 0
    assert isinstance(eng.behavior_notes(engine), list)
    assert pl.plan_json(plan).startswith("{")

    ws_size = pl.workspace_size(plan)
    workspace = torch.empty(max(ws_size, 1), device="cuda", dtype=torch.uint8)
    pack = (Descriptor(D.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "pack")
            .set(A.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, [1, 2, 3, 6])
            .set(A.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, [x.data_ptr(), wt.data_ptr(), b.data_ptr(), y.data_ptr()],
                 T.CUDNN_TYPE_VOID_PTR)
            .set(A.CUDNN_ATTR_VARIANT_PACK_WORKSPACE, workspace.data_ptr(), T.CUDNN_TYPE_VOID_PTR)
            .finalize())
    pl.execute(handle, plan, pack)
    torch.cuda.synchronize()

    ref = torch.relu(torch.nn.functional.conv2d(x.float(), wt.float(), padding=1) + b.float())
    torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=1e-2)
    for d in (pack, plan, heur, graph):
        d.close()
    handle.close()


def test_helpers_build_the_same_pipeline() -> None:
    """backend.engine / backend.plan helpers on a one-node graph: heuristics -> plan -> run."""
    torch.manual_seed(1)
    handle = cudnn.create_handle()
    a = torch.randn(1000, device="cuda", dtype=torch.float32)
    out = torch.empty_like(a)
    ta = _tensor(10, [1, 1000], [1000, 1], cudnn.data_type.FLOAT)
    to = _tensor(11, [1, 1000], [1000, 1], cudnn.data_type.FLOAT)
    pw = (Descriptor(D.CUDNN_BACKEND_POINTWISE_DESCRIPTOR)
          .set(A.CUDNN_ATTR_POINTWISE_MODE, cudnn.pointwise_mode.TANH_FWD)
          .set(A.CUDNN_ATTR_POINTWISE_MATH_PREC, cudnn.data_type.FLOAT).finalize())
    op = (Descriptor(D.CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "tanh")
          .set(A.CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
          .set(A.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, ta)
          .set(A.CUDNN_ATTR_OPERATION_POINTWISE_YDESC, to).finalize())
    graph = eng.operation_graph(handle, [op], "tanh")
    configs = eng.heuristic_configs(graph, cudnn.heur_mode.A) + eng.heuristic_configs(graph, cudnn.heur_mode.FALLBACK)
    plan = None
    for cfg in configs:
        try:
            plan = pl.execution_plan(handle, cfg, "tanh")
            break
        except cudnn.CudnnError:
            continue
    assert plan is not None
    pack = pl.variant_pack([10, 11], [a.data_ptr(), out.data_ptr()], 0)
    pl.execute(handle, plan, pack)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.reshape(-1), torch.tanh(a), atol=1e-5, rtol=1e-5)
