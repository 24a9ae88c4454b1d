"""CUDA streams given as ints or as framework stream objects -> a raw ``cudaStream_t`` int."""

from __future__ import annotations

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
