"""The state of one expansion (`Expander`) and the helpers composite nodes make their parts'
tensors with: `swapped` (a transposed ``Tensor.view``, same uid: K seen as Kᵀ),
`Expander.constant` (a by-value scalar the expansion needs: -inf, 1/(1-p), bounds),
`Expander.virtual` (an intermediate with dims, strides and type set) and workspace
`Scratch`. Nodes are handed an Expander (`node.Node.expand`); `expand` runs one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._lib.enums import data_type
from ..._lib.layout import row_major
from ..._lib.record import Record
from .node_types import Context
from .tensor import Tensor, constant


class Scratch(Record):
    """A non-virtual tensor of an expansion that lives in the workspace, not in a user buffer.

    ``fill`` is copied from the host before every execute (e.g. ALiBi slopes); ``zero`` asks
    for a memset to 0 instead; with neither the memory is left as it is. ``constant``: the
    graph only reads it, so it is written once, in device memory of the plan's Runner, and takes
    no workspace (the unit scale of a norm's affine epilogue)."""

    __slots__ = ("tensor", "fill", "zero", "constant")

    def __init__(self, tensor: Tensor, fill: bytes | None = None, zero: bool = False, constant: bool = False) -> None:
        self.tensor, self.fill, self.zero, self.constant = tensor, fill, zero, constant


def swapped(t: Tensor, i: int = 2, j: int = 3) -> Tensor:
    """``t`` with dims/strides ``i`` and ``j`` exchanged: a transposed view sharing ``t``'s uid
    (the backend binds buffers by uid, so Kᵀ needs no buffer of its own); ``t`` is unchanged."""
    dims, strides = t.get_dim(), t.get_stride()
    dims[i], dims[j] = dims[j], dims[i]
    strides[i], strides[j] = strides[j], strides[i]
    return t.view(dims, strides)


class Expander:
    """State of one expansion: the graph context, the loaded cuDNN version, scratch tensors,
    and the lowerings chosen where a composite has several (see `choose`)."""

    def __init__(self, ctx: Context, version: int, prefer: Any = None) -> None:
        self.ctx = ctx
        self.version = version
        self.prefer = prefer
        self.scratch: list[Scratch] = []
        self.constants: list[Tensor] = []
        self.chosen: list[Any] = []
        self.alternatives: list[Any] = []
        self.trial: Any = None  # an alternative worth trying without being asked (see `choose`)

    def choose(self, default: Any, possible: Sequence[Any], trial: bool = False) -> Any:
        """The lowering a composite with several ``possible`` ones builds: the expansion's
        preference where possible (autotuning expands a graph once per alternative), else
        ``default``. The others are recorded as alternatives the graph could be built with.
        ``trial``: the first other lowering is worth trying without autotuning, once the default
        one is built (`build.trial`); only a graph expanded without a preference offers it."""
        choice = next((c for c in possible if c is self.prefer), default)
        if not any(c is choice for c in self.chosen):
            self.chosen.append(choice)
        for c in possible:
            if c is not choice and not any(c is a for a in self.alternatives):
                self.alternatives.append(c)
                if trial and self.prefer is None and self.trial is None:
                    self.trial = c
        return choice

    def add_scratch(self, tensor: Tensor, fill: bytes | None = None, zero: bool = False,
                    constant: bool = False) -> Tensor:
        """Declare ``tensor`` (non-virtual, dims/strides/dtype set) as scratch: in the workspace,
        or with ``constant`` (only read by the graph, ``fill`` or ``zero`` given) written once."""
        if constant and fill is None and not zero:
            raise ValueError(f"{tensor.get_name()}: constant scratch needs its contents (fill or zero)")
        self.scratch.append(Scratch(tensor, fill, zero, constant))
        return tensor

    def constant(self, value: float, dtype: data_type, name: str, rank: int = 4) -> Tensor:
        """A by-value scalar the graph carries (bound from host memory at execute)."""
        t = constant(name, value).set_dim([1] * rank).set_stride([1] * rank).set_data_type(dtype)
        self.constants.append(t)
        return t

    def virtual(self, name: str, dims: Sequence[int], dtype: data_type,
                strides: Sequence[int] | None = None) -> Tensor:
        """An intermediate of the expansion: virtual, dims/strides/type set."""
        return Tensor(name, dims, strides if strides is not None else row_major(dims), dtype, is_virtual=True)
