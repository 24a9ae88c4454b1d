"""Descriptor lifetime: created once, destroyed once, children outlive their parents."""

from __future__ import annotations

import gc
import weakref

import pytest

import cudnn
from cudnn._lib import marshal, release
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


def test_garbage_collection_queues_the_destroy_and_a_release_point_runs_it_once() -> None:
    """The collector's finalizer makes no cuDNN call (it may run anywhere, inside a capture or
    another library's call): the destroy waits for cudnn-py's next release point."""
    gc.collect()  # what earlier tests left behind is released first, so only ``d`` counts
    cudnn.release_pending()
    before = live_count()
    d = _tensor()
    assert live_count() == before + 1 and not d.destroyed
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None
    assert live_count() == before + 1 and release.pending() >= 1
    assert cudnn.release_pending() >= 1
    assert live_count() == before and release.pending() == 0
    assert cudnn.release_pending() == 0


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
    cudnn.release_pending()
    assert live_count() == before and y_ref() is not None  # both held by op
    op.close()  # on purpose: destroyed now, with the closed child it held
    assert live_count() == before - 2
    gc.collect()
    cudnn.release_pending()  # y, collected with op's hold on it
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


def test_plain_values_and_their_refusals_take_the_same_types() -> None:
    """Ints, bools, enums and descriptors are set without the general conversion; anything it
    does not take (a mixed list, an int out of range, a type given that the values do not
    imply) still gets the general path's checks and messages."""
    d = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR", "pw")
    from cudnn._lib import enums

    d.set(A.CUDNN_ATTR_POINTWISE_MODE, enums.cudnnPointwiseMode_t.CUDNN_POINTWISE_ADD)  # a C enum: POINTWISE_MODE
    d.set(A.CUDNN_ATTR_POINTWISE_MODE, cudnn.pointwise_mode.ADD, T.CUDNN_TYPE_POINTWISE_MODE)  # the type it implies
    with pytest.raises(cudnn.CudnnBadParamError, match="CUDNN_ATTR_POINTWISE_MODE"):
        d.set(A.CUDNN_ATTR_POINTWISE_MODE, cudnn.pointwise_mode.ADD, T.CUDNN_TYPE_INT64)  # told INT64: set as such
    with pytest.raises(TypeError, match=r"pw: setting POINTWISE descriptor \(CUDNN_ATTR_POINTWISE_AXIS\) as "
                                        r"CUDNN_TYPE_INT64: 1180591620717411303424 is out of the range of a 64-bit int"):
        d.set(A.CUDNN_ATTR_POINTWISE_AXIS, 2**70)  # ctypes would have wrapped it silently
    with pytest.raises(TypeError, match="as CUDNN_TYPE_INT32: .*out of the range of a 32-bit int"):
        d.set(A.CUDNN_ATTR_POINTWISE_AXIS, 2**40, T.CUDNN_TYPE_INT32)
    with pytest.raises(TypeError, match="expected int values, got bool"):
        d.set(A.CUDNN_ATTR_POINTWISE_AXIS, [1, True])  # mixed kinds: checked one by one
    t = _tensor()
    with pytest.raises(cudnn.CudnnBadParamError, match="CUDNN_ATTR_TENSOR_UNIQUE_ID"):
        t.set(A.CUDNN_ATTR_TENSOR_UNIQUE_ID, True)  # a bool is BOOLEAN, not INT64
    t.set(A.CUDNN_ATTR_TENSOR_IS_VIRTUAL, True)
    t.set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, (4, 5))  # a tuple as a list


def test_setting_an_enum_builds_no_other_enum() -> None:
    """The attribute type of an enum value is found by its class's name: setting one enum
    attribute leaves the rest of the generated enums unbuilt (they cost time at first use)."""
    code = ("import cudnn\n"
            "from cudnn._lib import enums\n"
            "from cudnn.backend import Descriptor\n"
            "from cudnn._lib.enums import cudnnBackendAttributeName_t as A\n"
            "d = Descriptor('CUDNN_BACKEND_POINTWISE_DESCRIPTOR')\n"
            "d.set(A.CUDNN_ATTR_POINTWISE_MODE, cudnn.pointwise_mode.ADD)\n"
            "d.set(A.CUDNN_ATTR_POINTWISE_MATH_PREC, cudnn.data_type.FLOAT)\n"
            "print(sorted(n for n in ('cudnnResampleMode_t', 'cudnnBackendNormMode_t', 'cudnnSignalMode_t',"
            " 'cudnnPointwiseMode_t') if n in vars(enums)))\n")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("attr_type, values", [(T.CUDNN_TYPE_INT64, [1, 2, 3, 4, 5, 6, 7]),
                                               (T.CUDNN_TYPE_DOUBLE, [0.5] * 11),
                                               (T.CUDNN_TYPE_BACKEND_DESCRIPTOR, [0x10, 0x20, 0x30])])
def test_packing_an_attribute_leaves_no_garbage_for_the_collector(attr_type: T, values: list) -> None:
    """ctypes keeps the array types it makes only weakly, and each is a reference cycle; the
    types marshal packs with are kept, so setting an attribute leaves nothing for the collector
    (a build sets hundreds) and the same type serves every later attribute of that length."""
    first, _ = marshal.pack(values, attr_type)
    del first
    gc.collect()
    gc.disable()
    try:
        array, count = marshal.pack(values, attr_type)
        assert count == len(values) and list(array) == values
        assert type(array) is marshal.array_type(type(array)._type_, len(values))
        del array
        assert gc.collect() == 0
    finally:
        gc.enable()
