"""CUDA streams given as ints or as framework stream objects -> a raw ``cudaStream_t`` int."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stream_ptr(stream: Any) -> int:
    """The ``cudaStream_t`` of ``stream``.

    Accepts None (the legacy default stream, 0), an int, anything with the
    ``__cuda_stream__`` protocol (cuda.core, CuPy, PyTorch), a ``torch.cuda.Stream``
    (``.cuda_stream``), a CuPy stream (``.ptr``), a Numba stream (``.handle``) or a
    ctypes pointer.
    """
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("a CUDA stream cannot be a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"a CUDA stream handle cannot be negative, got {stream}")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        return int(value[1] if isinstance(value, tuple) else value)
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    handle = getattr(stream, "handle", None)
    if handle is not None:
        value = getattr(handle, "value", handle)
        if isinstance(value, int) or value is None:
            return int(value or 0)
    value = getattr(stream, "value", None)  # ctypes.c_void_p
    if isinstance(value, int) or (value is None and type(stream).__module__ == "ctypes"):
        return int(value or 0)
    raise TypeError(
        f"cannot use {type(stream).__module__}.{type(stream).__qualname__} as a CUDA stream: "
        "give an int, a torch/cupy/numba/cuda.core stream, or an object with __cuda_stream__"
    )


def set_stream(handle: Any, stream: Any) -> None:
    """``cudnn.set_stream``: make ``handle`` (a Handle or an int) issue its work on ``stream``
    (anything `stream_ptr` takes)."""
    from ..backend.handle import set_stream as set_raw_stream

    set_raw_stream(handle, stream_ptr(stream))


# -- a framework's current stream -------------------------------------------------------------

def _torch_getter() -> Callable[[int], int]:
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch.compile's code calls
    if raw is not None:
        return raw
    return lambda index: int(torch.cuda.current_stream(index).cuda_stream)


def _cupy_getter() -> Callable[[int], int]:
    import cupy

    def current(index: int) -> int:
        try:
            return int(cupy.cuda.get_current_stream(index).ptr)
        except TypeError:  # CuPy without the device argument
            with cupy.cuda.Device(index):
                return int(cupy.cuda.get_current_stream().ptr)

    return current


_GETTERS: dict[str, Callable[[], Callable[[int], int]]] = {"torch": _torch_getter, "cupy": _cupy_getter}


def stream_getter(framework: str) -> Callable[[int], int]:
    """``get(device_index) -> cudaStream_t``: ``framework``'s current stream on a device
    (torch and CuPy; 0, the legacy default stream, for frameworks without one)."""
    make = _GETTERS.get(framework)
    return make() if make is not None else _default_stream


def _default_stream(index: int) -> int:
    return 0
