"""Expansion: composite nodes replaced by primitive ones before lowering.

Runs after inference and before uids are assigned. A composite node (attention, a norm with
fused pointwise work) returns the nodes that replace it; their intermediates are virtual
tensors, and scratch tensors the user does not pass live in the graph-reserved prefix of the
workspace. Lowering only ever sees primitive nodes; the printed graph shows the user's.

Helpers for composites: `View` (another description of a tensor's memory, same uid: K seen as
Kᵀ), `Expander.constant` (a by-value scalar the expansion needs: -inf, 1/(1-p), bounds) and
`Expander.virtual` (an intermediate with dims, strides and type set).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._lib.enums import data_type
from .node import Context, Node, row_major
from .tensor import Tensor


@dataclass
class Scratch:
    """A non-virtual tensor of an expansion that lives in the workspace, not in a user buffer.

    ``fill`` is copied from the host before every execute (e.g. ALiBi slopes); ``zero`` asks
    for a memset to 0 instead; with neither the memory is left as it is."""

    tensor: Tensor
    fill: bytes | None = None
    zero: bool = False


# Tensor's slots other than its identity (uid): what a View copies from its base.
_COPIED = tuple(s for s in Tensor.__slots__ if s not in ("_uid", "_uid_assigned", "__weakref__"))


class View(Tensor):
    """Another description (dims, strides) of the memory of ``base``, sharing its uid.

    The backend binds buffers by uid, so a view needs no buffer of its own: Kᵀ for attention's
    first matmul is K with dims and strides 2<->3 swapped. Reading or assigning the view's uid
    reads or assigns the base's, whichever of the two the pipeline meets first; the user's
    tensor object itself is never changed."""

    __slots__ = ("base",)

    def __init__(self, base: Tensor, dims: Sequence[int], strides: Sequence[int], name: str | None = None) -> None:
        # Tensor.__init__ would reset the (shared) uid; copy the attributes instead.
        self.base = base.base if isinstance(base, View) else base
        for slot in _COPIED:
            if hasattr(base, slot):
                object.__setattr__(self, slot, getattr(base, slot))
        self._dim, self._stride = [int(d) for d in dims], [int(s) for s in strides]
        if name is not None:
            self._name = name

    @property  # type: ignore[override]
    def _uid(self) -> int:
        return self.base._uid

    @_uid.setter
    def _uid(self, value: int) -> None:
        self.base._uid = value

    @property  # type: ignore[override]
    def _uid_assigned(self) -> bool:
        return self.base._uid_assigned

    @_uid_assigned.setter
    def _uid_assigned(self, value: bool) -> None:
        self.base._uid_assigned = value


def swapped(t: Tensor, i: int = 2, j: int = 3) -> View:
    """``t`` with dims/strides ``i`` and ``j`` exchanged (a transposed view, same uid)."""
    dims, strides = t.get_dim(), t.get_stride()
    dims[i], dims[j] = dims[j], dims[i]
    strides[i], strides[j] = strides[j], strides[i]
    return View(t, dims, strides)


class Expander:
    """State of one expansion: the graph context, the loaded cuDNN version, scratch tensors."""

    def __init__(self, ctx: Context, version: int) -> None:
        self.ctx = ctx
        self.version = version
        self.scratch: list[Scratch] = []
        self.constants: list[Tensor] = []

    def add_scratch(self, tensor: Tensor, fill: bytes | None = None, zero: bool = False) -> Tensor:
        """Declare ``tensor`` (non-virtual, dims/strides/dtype set) as workspace-backed scratch."""
        self.scratch.append(Scratch(tensor, fill, zero))
        return tensor

    def constant(self, value: float | int, dtype: data_type, name: str, rank: int = 4) -> Tensor:
        """A by-value scalar the graph carries (bound from host memory at execute)."""
        t = Tensor(name, [1] * rank, [1] * rank, dtype, is_virtual=False, is_pass_by_value=True)
        t._value = value  # what graph-made constants carry (pygraph._input does the same)
        self.constants.append(t)
        return t

    def virtual(self, name: str, dims: Sequence[int], dtype: data_type,
                strides: Sequence[int] | None = None) -> Tensor:
        """An intermediate of the expansion: virtual, dims/strides/type set."""
        return Tensor(name, dims, strides if strides is not None else row_major(dims), dtype, is_virtual=True)


def expand(nodes: list[Node], ctx: Context, version: int) -> tuple[list[Node], list[Scratch]]:
    """The primitive nodes that compute ``nodes`` (composites expanded, recursively), and the
    scratch tensors the expansion needs."""
    ex = Expander(ctx, version)
    out: list[Node] = []

    def visit(node: Node) -> None:
        parts = node.expand(ex)
        if parts is None:
            out.append(node)
            return
        for part in parts:
            visit(part)

    for node in nodes:
        visit(node)
    return out, ex.scratch


def inferred(node: Node, ctx: Context, outputs: dict[str, Tensor]) -> Node:
    """``node`` with ``outputs`` attached and its ``infer`` run: how composites make parts."""
    node.outputs.update(outputs)
    node.infer(ctx)
    return node


def attrs_of(**kw: Any) -> dict[str, Any]:
    """Keyword arguments without the None ones (optional pointwise attributes)."""
    return {k: v for k, v in kw.items() if v is not None}
