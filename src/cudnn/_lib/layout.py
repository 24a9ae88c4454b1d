"""Packed strides: the layout arithmetic the graph and the tensor readers share."""

from __future__ import annotations

from collections.abc import Sequence


def row_major(dims: Sequence[int]) -> list[int]:
    """Packed strides (in elements) of ``dims``, last dim fastest."""
    strides, acc = [0] * len(dims), 1
    for i in range(len(dims) - 1, -1, -1):
        strides[i] = acc
        acc *= max(int(dims[i]), 1)
    return strides
