"""What a buffer bound to a plan must look like: a `Binding` per non-virtual tensor of the built
graph, a `ScratchSlot` per scratch tensor carved from the workspace, and the bytes a tensor's
dims and strides reach.

Scratch tensors of composite nodes live in the first ``scratch_bytes`` of the workspace; the
plan's own workspace follows, `SCRATCH_ALIGNMENT`-aligned. Their host-side initial values are
copied (or memset) before each execute.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..._lib import cuda
from ..._lib.host import HostScalar
from ..._lib.record import Record
from ..model.tensor import Tensor

SCRATCH_ALIGNMENT = 256


class Binding(Record):
    """A non-virtual tensor of the built graph: what a buffer for it must look like. ``node`` and
    ``port`` name it in messages (``conv_fprop 'conv2d'``, ``X``); ``constant`` is a graph-carried
    by-value constant; ``user`` the user's tensor, where ``tensor`` is the graph's copy of one
    that graphs share."""

    __slots__ = ("uid", "tensor", "node", "port", "constant", "user", "__dict__")  # __dict__: cached properties

    def __init__(self, uid: int, tensor: Tensor, node: str, port: str, constant: HostScalar | None = None,
                 user: Tensor | None = None) -> None:
        self.uid, self.tensor, self.node, self.port, self.constant, self.user = uid, tensor, node, port, constant, user

    @property
    def label(self) -> str:
        return f"{self.node}: {self.port} tensor {self.tensor.label()} (uid {self.uid})"

    @functools.cached_property
    def ragged(self) -> bool:
        """Whether the tensor has a ragged offset: its buffer is packed, laid out by offsets only
        the device holds, so neither its extent nor its shape follows from dims and strides."""
        return self.tensor.get_ragged_offset() is not None

    @functools.cached_property
    def needed(self) -> int:
        """Bytes a buffer must hold, as built (read once, not per buffer): what the dims and
        strides reach, or for a ragged tensor one token (`token_bytes`)."""
        return token_bytes(self.tensor) if self.ragged else needed_bytes(self.tensor)

    @functools.cached_property
    def torch_dtype(self) -> Any:
        """The torch dtype of the declared data type (None where torch has none); read only once
        a torch tensor is given, so torch is imported already."""
        from ...interop.framework_dtypes import torch_dtype  # here: read only once torch is in use

        try:
            return torch_dtype(self.tensor.get_data_type())
        except ValueError:
            return None

    @functools.cached_property
    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, int]]]:
        """(dims, strides, the dims and strides of the non-unit axes) as built."""
        dims, strides = tuple(self.tensor.get_dim()), tuple(self.tensor.get_stride())
        return dims, strides, squeezed(dims, strides)


class ScratchSlot(Record):
    """A scratch tensor's place in the workspace, and what to write there before each execute:
    ``fill``'s host bytes, a memset to 0 (``zero``), or nothing. A ``constant`` slot (the graph
    only reads it) is at ``offset`` in the Runner's own constant memory instead, written once."""

    __slots__ = ("uid", "offset", "nbytes", "fill", "zero", "constant", "__dict__")  # __dict__: cached properties
    frozen = True

    def __init__(self, uid: int, offset: int, nbytes: int, fill: bytes | None = None, zero: bool = False,
                 constant: bool = False) -> None:
        self.uid, self.offset, self.nbytes, self.fill, self.zero = uid, offset, nbytes, fill, zero
        self.constant = constant

    @functools.cached_property
    def unit(self) -> tuple[int, int] | None:
        """(size, value) when ``fill`` repeats one 1-, 2- or 4-byte unit (unit scales, constant
        biases): written by a memset, which CUDA graphs capture, instead of a host copy."""
        return None if self.fill is None else cuda.repeated_unit(self.fill)


def workspace_capacity(workspace: Any) -> int | None:
    """Bytes a workspace buffer holds, or None where that cannot be known (a raw pointer into
    memory CUDA does not describe)."""
    if type(workspace) is int:
        try:
            where = cuda.pointer_info(workspace)
        except Exception:  # noqa: BLE001 - memory CUDA cannot describe (a foreign allocator): size unknown
            return None
        return where.end - workspace if where.size else None
    from ...interop import tensors as interop  # here: not imported with cudnn

    info = interop.describe(workspace)
    return info.extent_bytes if info.extent_bytes is not None else info.needed_bytes


def needed_bytes(t: Tensor) -> int:
    """Bytes the tensor's dims and strides reach (sub-byte types count packed bits)."""
    return _reach(t, t.get_dim())


def token_bytes(t: Tensor) -> int:
    """Bytes one token of a ragged tensor reaches: its dims with the batch axis (the first) and
    the token axis (second from last, the sequence of [b, h, s, d] or [b, s, d]) taken as 1. A
    ragged tensor's batches start at offsets read on the device, each with as many tokens as its
    sequence length there; one token is all a packed buffer is sure to hold."""
    dims = t.get_dim()
    return _reach(t, [1 if axis in (0, len(dims) - 2) else d for axis, d in enumerate(dims)])


def _reach(t: Tensor, dims: Sequence[int]) -> int:
    """Bytes ``dims`` reach with ``t``'s strides and data type."""
    from ...interop.tensors import nbytes  # here: not imported with cudnn

    span = sum((d - 1) * s for d, s in zip(dims, t.get_stride())) + 1
    return nbytes(t.get_data_type(), span)


def squeezed(dims: Any, strides: Any) -> list[tuple[int, int]]:
    """The (dim, stride) pairs of the axes longer than 1: what two layouts of the same elements share."""
    return [(int(d), int(s)) for d, s in zip(dims, strides) if d != 1]
