"""Framework bools and cuDNN's BOOLEAN across versions (no GPU needed).

BOOLEAN is bit-packed. Before cuDNN 9.25 (which adds BYTE_BOOLEAN) a framework bool is BOOLEAN,
as the official package binds it (its buffer has more bytes than the bits need); from 9.25 it
is BYTE_BOOLEAN.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pytest

import cudnn
from cudnn._lib import loader
from cudnn.interop import framework_dtypes as dtypes

dt = cudnn.data_type


@pytest.fixture
def cudnn_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Set the loaded cuDNN's reported version (the dtype rules read it once, cached)."""
    real = loader.report()

    def set_version(version: int) -> None:
        monkeypatch.setattr(loader, "_report", real.replace(version=version))
        dtypes.pre_byte_booleans.cache_clear()

    yield set_version
    dtypes.pre_byte_booleans.cache_clear()


def test_a_framework_bool_is_boolean_before_9_25(cudnn_version) -> None:
    cudnn_version(91900)
    assert dtypes.pre_byte_booleans()
    assert dtypes.from_name("bool") == dtypes.from_name("torch.bool") == dt.BOOLEAN
    assert dtypes.from_typestr("|b1") == dt.BOOLEAN
    assert dtypes.bits(dt.BOOLEAN) == 1 and dtypes.nbytes(dt.BOOLEAN, 10) == 2  # bit-packed all the same
    assert dtypes.dtype_name(dt.BOOLEAN) == "bool"  # BOOLEAN outputs get framework bool buffers
    g = cudnn.pygraph()
    assert g.tensor_like(np.zeros((2, 3), dtype=bool)).get_data_type() == dt.BOOLEAN


def test_a_framework_bool_is_byte_boolean_from_9_25(cudnn_version) -> None:
    cudnn_version(92500)
    assert not dtypes.pre_byte_booleans()
    assert dtypes.from_name("bool") == dt.BYTE_BOOLEAN
    assert dtypes.bits(dt.BOOLEAN) == 1 and dtypes.nbytes(dt.BOOLEAN, 10) == 2
    with pytest.raises(ValueError, match="BOOLEAN has no framework dtype"):
        dtypes.dtype_name(dt.BOOLEAN)


class _Device:
    """A device buffer as the CUDA array interface describes one (never dereferenced)."""

    def __init__(self, shape: tuple[int, ...], typestr: str, ptr: int) -> None:
        self.ptr, self.shape, self.typestr = ptr, shape, typestr

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": self.typestr, "strides": None,
                "version": 3}


@pytest.mark.parametrize("version", [91900, 92500])
def test_a_framework_bool_buffer_for_a_bit_packed_mask_warns(cudnn_version, monkeypatch, version: int) -> None:
    """The official binds a framework bool (a byte an element) to BOOLEAN, which cuDNN reads and
    writes bit-packed: memory-safe (more bytes than the bits), but its elements are not the
    mask's, so execute says so (an error in strict mode); a packed uint8 buffer is quiet."""
    from support.fake_backend import Backend, Pack

    from cudnn._graph.build.pipeline import make_bindings
    from cudnn._graph.run.runner import Runner

    cudnn_version(version)  # the bool buffer is BOOLEAN before 9.25, BYTE_BOOLEAN from it: a mismatch both ways
    backend = Backend()
    backend.install(monkeypatch)
    g = cudnn.pygraph(io_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    x = g.tensor(name="x", dim=[4, 64], stride=[64, 1])
    m = g.tensor(name="m", dim=[4, 64], stride=[64, 1], data_type=dt.BOOLEAN)
    y = g.binary_select(x, x, m, name="sel").set_output(True)
    g.validate()
    for t, uid in ((x, 1), (m, 2), (y, 3)):
        t.set_uid(uid)
    r = Runner("graph", Pack(99), 0, make_bindings(g.nodes), 1, None)
    r.backend_execute = backend.execute
    xs, ys = _Device((4, 64), "<f4", 0x7F0000000000), _Device((4, 64), "<f4", 0x7F0000100000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r.run({x: xs, m: _Device((32,), "|u1", 0x7F0000200000), y: ys}, None, 1)  # 256 bits packed
    with pytest.warns(cudnn.ExecutionInputWarning, match=r"'m'.*bit-packed BOOLEAN mask .* bool buffer of a "
                                                         r"byte an element"):
        r.run({x: xs, m: _Device((4, 64), "|b1", 0x7F0000300000), y: ys}, None, 1)
    cudnn.set_execute_checks("strict")
    try:
        strict = Runner("graph", Pack(99), 0, make_bindings(g.nodes), 1, None)
        strict.backend_execute = backend.execute
        with pytest.raises(cudnn.ExecutionInputError, match="bool buffer of a byte an element"):
            strict.run({x: xs, m: _Device((4, 64), "|b1", 0x7F0000300000), y: ys}, None, 1)
    finally:
        cudnn.set_execute_checks("warn")
