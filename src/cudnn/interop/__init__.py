"""Tensors and streams from PyTorch, CuPy, JAX, Numba or raw ints, through their protocols."""

from .streams import stream_ptr

__all__ = ["stream_ptr"]
