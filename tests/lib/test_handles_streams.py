"""Stream coercion and handle argument checking (no GPU needed)."""

from __future__ import annotations

import ctypes

import pytest

from cudnn.backend.handle import as_handle_ptr
from cudnn.interop.streams import stream_ptr


class _Protocol:
    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, 0x1234)


class _TorchLike:
    cuda_stream = 0x55


class _CupyLike:
    ptr = 0x66


class _NumbaLike:
    handle = ctypes.c_void_p(0x77)


@pytest.mark.parametrize(
    ("stream", "expected"),
    [(None, 0), (0, 0), (0xABC, 0xABC), (_Protocol(), 0x1234), (_TorchLike(), 0x55),
     (_CupyLike(), 0x66), (_NumbaLike(), 0x77), (ctypes.c_void_p(0x88), 0x88), (ctypes.c_void_p(), 0)],
)
def test_stream_forms(stream: object, expected: int) -> None:
    assert stream_ptr(stream) == expected


@pytest.mark.parametrize("bad", ["stream", 1.5, True, -1, object()])
def test_bad_streams_are_refused(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        stream_ptr(bad)


def test_handle_arguments() -> None:
    assert as_handle_ptr(0x1000) == 0x1000
    with pytest.raises(ValueError, match="cannot be 0"):
        as_handle_ptr(0)
    with pytest.raises(TypeError, match="expected a cudnn handle"):
        as_handle_ptr("handle")  # type: ignore[arg-type]
