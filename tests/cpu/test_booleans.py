"""Framework bools and cuDNN's BOOLEAN across versions (no GPU needed).

Before cuDNN 9.25 (which adds BYTE_BOOLEAN) BOOLEAN is addressed a byte an element and a
framework bool is BOOLEAN, as the official package binds it; from 9.25 a framework bool is
BYTE_BOOLEAN and BOOLEAN is bit-packed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

import cudnn
from cudnn._lib import loader
from cudnn._lib.errors import FeatureUnavailableError
from cudnn.graph.lower import Lowering
from cudnn.interop import dtypes

dt = cudnn.data_type


@pytest.fixture
def cudnn_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Set the loaded cuDNN's reported version (the dtype rules read it once, cached)."""
    real = loader.report()

    def set_version(version: int) -> None:
        monkeypatch.setattr(loader, "_report", dataclasses.replace(real, version=version))
        dtypes.byte_booleans.cache_clear()

    yield set_version
    dtypes.byte_booleans.cache_clear()


def test_a_framework_bool_is_boolean_a_byte_an_element_before_9_25(cudnn_version) -> None:
    cudnn_version(91900)
    assert dtypes.byte_booleans()
    assert dtypes.from_name("bool") == dtypes.from_name("torch.bool") == dt.BOOLEAN
    assert dtypes.from_typestr("|b1") == dt.BOOLEAN
    assert dtypes.bits(dt.BOOLEAN) == 8 and dtypes.nbytes(dt.BOOLEAN, 10) == 10
    assert dtypes.dtype_name(dt.BOOLEAN) == "bool"  # buffers for BOOLEAN outputs are framework bools
    g = cudnn.pygraph()
    assert g.tensor_like(np.zeros((2, 3), dtype=bool)).get_data_type() == dt.BOOLEAN


def test_a_framework_bool_is_byte_boolean_from_9_25(cudnn_version) -> None:
    cudnn_version(92500)
    assert not dtypes.byte_booleans()
    assert dtypes.from_name("bool") == dt.BYTE_BOOLEAN
    assert dtypes.bits(dt.BOOLEAN) == 1 and dtypes.nbytes(dt.BOOLEAN, 10) == 2  # bit-packed
    with pytest.raises(ValueError, match="BOOLEAN has no framework dtype"):
        dtypes.dtype_name(dt.BOOLEAN)


@pytest.mark.parametrize("virtual, refused", [(False, True), (True, False)])
def test_logical_ops_on_boolean_graph_tensors_need_9_22(cudnn_version, virtual: bool, refused: bool) -> None:
    """cmp + logical_and with BOOLEAN graph tensors computed wrong results on 9.19: refused
    there as not supported; the same ops on masks inside the graph (attention's) are not."""
    cudnn_version(91900)
    g = cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    x = g.tensor(name="x", dim=[4, 8], data_type=dt.HALF)
    t = g.tensor(name="t", dim=[4, 8], data_type=dt.FLOAT)
    b = g.tensor(name="b", dim=[4, 8], data_type=dt.FLOAT if virtual else dt.BOOLEAN)
    cmp = g.cmp_gt(x, t, name="cmp").set_data_type(dt.BOOLEAN)
    if virtual:
        b = g.cmp_gt(b, t, name="cmp_b").set_data_type(dt.BOOLEAN)
    out = g.logical_and(cmp, b, name="and0", compute_data_type=dt.BOOLEAN)
    if virtual:
        out = g.binary_select(x, x, out, name="select")
    out.set_output(True).set_data_type(dt.HALF if virtual else dt.BOOLEAN)
    g.validate()
    node = next(n for n in g.nodes if n.name == "and0")
    if refused:
        with pytest.raises(FeatureUnavailableError, match=r"and0.*LOGICAL_AND with a BOOLEAN graph input or "
                                                          r"output.*needs cuDNN >= 9.22") as info:
            node.lower(Lowering(0, 91900))
        assert isinstance(info.value, cudnn.cudnnGraphNotSupportedError)
    else:
        try:  # past the guard (making the descriptors may fail here without a GPU)
            node.lower(Lowering(0, 91900))
        except FeatureUnavailableError:
            raise
        except Exception:  # noqa: BLE001, S110 - what libcudnn says without a GPU is not this test's
            pass
