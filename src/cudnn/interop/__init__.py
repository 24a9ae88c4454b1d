"""Tensors and streams from PyTorch, CuPy, JAX, Numba or raw ints, through their protocols."""

from .streams import stream_ptr
from .tensors import (
    TensorInfo,
    current_stream,
    data_ptr,
    data_type_of,
    describe,
    empty_like_framework,
    is_tensor_like,
    itemsize,
    torch_dtype,
)

__all__ = [
    "TensorInfo",
    "current_stream",
    "data_ptr",
    "data_type_of",
    "describe",
    "empty_like_framework",
    "is_tensor_like",
    "itemsize",
    "stream_ptr",
    "torch_dtype",
]
