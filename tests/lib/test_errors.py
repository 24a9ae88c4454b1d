"""Status codes become exceptions with the status, its name, cuDNN's message and our context."""

from __future__ import annotations

import gc

import pytest

import cudnn
from cudnn._lib import cuda
from cudnn._lib.enums import cudnnBackendAttributeName_t as A
from cudnn._lib.enums import cudnnBackendAttributeType_t as T
from cudnn._lib.enums import cudnnStatus_t as S
from cudnn._lib.status import exception_class, raise_status, status_name
from cudnn.backend import Descriptor

no_gpu = pytest.mark.skipif(cuda.device_count() > 0, reason="checks the behaviour without a GPU")


@pytest.mark.parametrize("status", list(S))
def test_every_status_maps_to_its_category(status: S) -> None:
    if status == S.CUDNN_STATUS_SUCCESS:
        assert status_name(status) == "CUDNN_STATUS_SUCCESS"
        return
    cls = exception_class(status)
    expected = {
        1: cudnn.CudnnInitError,
        2: cudnn.CudnnBadParamError,
        3: cudnn.CudnnNotSupportedError,
        4: cudnn.CudnnInternalError,
        5: cudnn.CudnnExecutionError,
    }[int(status) // 1000]
    assert cls is expected
    with pytest.raises(expected) as info:
        raise_status(status, "doing something")
    err = info.value
    assert err.status == int(status)
    assert err.status_name == status_name(status)
    assert str(err).startswith(f"doing something: {err.status_name} ({int(status)})")


def test_graph_not_supported_is_a_not_supported_error() -> None:
    assert issubclass(cudnn.cudnnGraphNotSupportedError, cudnn.CudnnNotSupportedError)
    assert issubclass(cudnn.CudnnBadParamError, ValueError)
    assert status_name(123456) == "CUDNN_STATUS_UNKNOWN_123456"


def test_wrong_attribute_type_is_reported_by_cudnn_with_context() -> None:
    desc = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR", "conv2d::X")
    with pytest.raises(cudnn.CudnnBadParamError) as info:
        desc.set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, [1, 2], T.CUDNN_TYPE_FLOAT)
    err = info.value
    assert err.status == S.CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE
    assert err.context == "conv2d::X: setting TENSOR descriptor (CUDNN_ATTR_TENSOR_DIMENSIONS)"
    assert "attrType" in err.message  # cuDNN's own last-error text


def test_python_values_of_the_wrong_kind_are_refused_before_cudnn() -> None:
    desc = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR", "t")
    with pytest.raises(TypeError, match="CUDNN_ATTR_TENSOR_DIMENSIONS.*expected int values, got str"):
        desc.set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, ["a"], T.CUDNN_TYPE_INT64)
    with pytest.raises(TypeError, match="expected Descriptor values"):
        desc.set(A.CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, [3], T.CUDNN_TYPE_BACKEND_DESCRIPTOR)
    with pytest.raises(TypeError, match="cannot infer"):
        desc.set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, [object()])


@no_gpu
def test_handle_without_gpu_says_why() -> None:
    with pytest.raises(cudnn.CudnnInitError) as info:
        cudnn.create_handle()
    err = info.value
    assert err.status_name == "CUDNN_STATUS_NOT_INITIALIZED"
    assert "creating a cuDNN handle" in str(err)
    assert "no usable CUDA GPU" in err.hint


@no_gpu
def test_finalize_without_gpu_is_a_clear_error() -> None:
    desc = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR", "relu.0")
    desc.set(A.CUDNN_ATTR_POINTWISE_MODE, cudnn.pointwise_mode.RELU_FWD)
    desc.set(A.CUDNN_ATTR_POINTWISE_MATH_PREC, cudnn.data_type.FLOAT)
    with pytest.raises(cudnn.CudnnError) as info:
        desc.finalize()
    assert str(info.value).startswith("relu.0: finalizing POINTWISE descriptor: CUDNN_STATUS_")
    assert not desc.finalized
    gc.collect()
