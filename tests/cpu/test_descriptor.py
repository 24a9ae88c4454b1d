"""Descriptor lifetime: created once, destroyed once, children outlive their parents."""

from __future__ import annotations

import gc
import weakref

import pytest

import cudnn
from cudnn._lib import marshal
from cudnn._lib.enums import cudnnBackendAttributeName_t as A
from cudnn._lib.enums import cudnnBackendAttributeType_t as T
from cudnn.backend import Descriptor, Fraction
from cudnn.backend.descriptor import live_count


def _tensor(label: str = "t") -> Descriptor:
    return (Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR", label)
            .set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, [2, 3])
            .set(A.CUDNN_ATTR_TENSOR_STRIDES, [3, 1])
            .set(A.CUDNN_ATTR_TENSOR_DATA_TYPE, cudnn.data_type.HALF)
            .set(A.CUDNN_ATTR_TENSOR_UNIQUE_ID, 7)
            .set(A.CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
            .set(A.CUDNN_ATTR_TENSOR_IS_VIRTUAL, False))


def test_close_is_idempotent_and_use_after_close_raises() -> None:
    d = _tensor("x")
    assert d.ptr
    d.close()
    d.close()
    assert d.closed
    with pytest.raises(cudnn.DescriptorClosedError, match="x: TENSOR descriptor was used after close"):
        d.set(A.CUDNN_ATTR_TENSOR_UNIQUE_ID, 1)
    with pytest.raises(cudnn.DescriptorClosedError):
        d.finalize()


def test_context_manager_closes() -> None:
    with _tensor() as d:
        assert not d.closed
    assert d.closed


def test_garbage_collection_destroys_once() -> None:
    before = live_count()
    d = _tensor()
    assert live_count() == before + 1 and not d.destroyed
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None
    assert live_count() == before


def test_parent_keeps_child_alive_and_defers_its_close() -> None:
    x, y = _tensor("x"), _tensor("y")
    op = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR", "relu")
    op.set(A.CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x).set(A.CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
    x.close()  # the user is done with it, but the operation still holds it
    assert x.closed and not x.destroyed
    with pytest.raises(cudnn.DescriptorClosedError):
        x.ptr  # noqa: B018
    before = live_count()
    y_ref = weakref.ref(y)
    del x, y
    gc.collect()
    assert live_count() == before and y_ref() is not None  # both held by op
    op.close()
    gc.collect()
    assert live_count() == before - 3  # op, then the children it released
    assert y_ref() is None


def test_set_infers_attribute_types_from_values() -> None:
    """cuDNN refuses an attribute set with the wrong type (reading back needs a GPU), so each
    set below that succeeds was given the type cuDNN expects."""
    d = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    with pytest.raises(cudnn.CudnnBadParamError, match="CUDNN_ATTR_POINTWISE_MODE"):
        d.set(A.CUDNN_ATTR_POINTWISE_MODE, int(cudnn.pointwise_mode.ADD))  # a plain int is INT64
    with pytest.raises(cudnn.CudnnBadParamError, match="CUDNN_ATTR_POINTWISE_AXIS"):
        d.set(A.CUDNN_ATTR_POINTWISE_AXIS, 2.0)  # a float is DOUBLE
    assert d.set(A.CUDNN_ATTR_POINTWISE_MODE, cudnn.pointwise_mode.ADD) is d  # public enum -> POINTWISE_MODE
    d.set(A.CUDNN_ATTR_POINTWISE_MATH_PREC, cudnn.data_type.FLOAT)  # -> DATA_TYPE
    d.set(A.CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, 0.25)  # float -> DOUBLE
    d.set(A.CUDNN_ATTR_POINTWISE_AXIS, 2)  # int -> INT64
    d.set("CUDNN_ATTR_POINTWISE_SWISH_BETA", 1.0, "CUDNN_TYPE_DOUBLE")  # names work too
    with pytest.raises(TypeError, match="cannot infer an attribute type for object"):
        d.set(A.CUDNN_ATTR_POINTWISE_AXIS, object())


def test_fraction_values() -> None:
    array, count = marshal.pack([Fraction(2, 1), (3, 4)], T.CUDNN_TYPE_FRACTION)  # what set() hands cuDNN
    assert count == 2 and [(f.numerator, f.denominator) for f in array] == [(2, 1), (3, 4)]
    d = Descriptor("CUDNN_BACKEND_RESAMPLE_DESCRIPTOR")
    assert d.set(A.CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, [Fraction(2, 1), (3, 1)], T.CUDNN_TYPE_FRACTION) is d
    with pytest.raises(TypeError, match=r"\(CUDNN_ATTR_RESAMPLE_WINDOW_DIMS\) as CUDNN_TYPE_FRACTION"):
        d.set(A.CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, [(2, 1, 5)], T.CUDNN_TYPE_FRACTION)
    assert repr(Fraction(2, 1)) == "Fraction(2, 1)"


def test_repr_names_type_label_and_state() -> None:
    d = _tensor("conv::X")
    assert repr(d) == "<Descriptor CUDNN_BACKEND_TENSOR_DESCRIPTOR 'conv::X' open>"
    d.close()
    assert repr(d).endswith("closed>")


def test_getting_a_descriptor_attribute_needs_its_type() -> None:
    d = _tensor()
    with pytest.raises(TypeError, match="descriptor_type"):
        d.get_array(A.CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, 1)
