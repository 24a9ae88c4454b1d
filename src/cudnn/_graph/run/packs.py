"""The prepared backend variant packs of one plan (`PackCache`) and the keys that find them.

Every backend variant pack of a plan lives in its Runner's `PackCache`, at two levels:

- by **binding**: (uids, pointers, workspace pointer) -> the finalized pack. That key is
  exactly what the backend is told, so an entry can never give a buffer to the wrong tensor.
  New buffer objects at known addresses (framework allocators reuse blocks) are checked,
  then find their pack here.
- by **identity**: the dict's keys, the id of each value followed by its current address when
  it is a torch tensor, the workspace's id and address -> an entry of the first level. A call
  with the same objects under the same keys builds that tuple (without a loop when they are
  torch tensors) and compares it with the previous call's, else makes one dict lookup. Entries hold
  weak references and vanish when a buffer object dies, so an id is never taken for a newer
  object's. A tensor re-pointed in place (``set_``, a growing ``resize_``, ``.data =``) has
  another address, so it misses and takes the checked path; raw int pointers and numbers are
  keyed by value (an int's id can be reused).
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal

from ..._lib import release
from ...backend import plan as backend_plan
from ...backend.replay import Replay
from .bindings import ScratchSlot

_BY_IDENTITY = 16  # sets of buffer objects remembered per plan
_BY_BINDING = 64  # backend variant packs kept per plan
_POINTERS = {int, type(None)}  # a pack of raw addresses (the workspace may be None)
_BY_VALUE = (int, float, bool)  # buffers compared by value on an identity hit (their ids can be reused)


class Entry:
    """A finalized backend variant pack, the host scalars it points at, scratch to fill, and its
    execute captured for replay once it has run `REPLAY_AFTER` times."""

    __slots__ = ("pack", "pack_ptr", "keep", "fills", "uses", "replay")

    def __init__(self, pack: Any, keep: list[Any], fills: tuple[tuple[int, ScratchSlot], ...],
                 replayable: bool = True) -> None:
        self.pack = pack
        self.pack_ptr = pack.ptr
        self.keep = keep
        self.fills = fills  # (device address, slot) of scratch written before each execute
        self.uses = 0  # executes so far, counted until the capture
        self.replay: Replay | Literal[False] | None = None if replayable else False  # None: not yet captured


class _Seen:
    """An identity-level entry: the pack, and weak references that drop it when a buffer dies."""

    __slots__ = ("entry", "refs")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.refs: list[Any] = []


class NoTensor:
    """Stands for ``torch.Tensor`` while torch is not imported (nothing is an instance)."""


def tensor_type() -> Any:
    """``torch.Tensor`` once torch is imported, else a class nothing is an instance of."""
    torch = sys.modules.get("torch")
    return torch.Tensor if torch is not None else NoTensor


def identity_key(variant_pack: Mapping[Any, Any], workspace: Any, tensor: Any) -> tuple[Any, ...]:
    """The identity-level key: the dict's keys, the id of each buffer object followed by its
    current address when it is a torch tensor (a tensor can be re-pointed in place by ``set_``,
    a growing ``resize_`` or ``.data =``; a moved one misses), then the workspace's id and its
    address (None for a workspace that is not a torch tensor)."""
    key = [*variant_pack]
    for value in variant_pack.values():
        key.append(id(value))
        if isinstance(value, tensor):
            key.append(value.data_ptr())
    key.append(id(workspace))
    key.append(workspace.data_ptr() if isinstance(workspace, tensor) else None)
    return tuple(key)


def torch_only(variant_pack: Mapping[Any, Any], workspace: Any, tensor: Any) -> bool:
    """Whether every buffer is a ``tensor`` (torch.Tensor) and the workspace one or None: then
    `torch_key` builds the identity key."""
    return all(isinstance(v, tensor) for v in variant_pack.values()) and (
        workspace is None or isinstance(workspace, tensor))


KeyBuilder = Callable[[Mapping[Any, Any], Any, Callable[[Any], int]], tuple[Any, ...]]


@functools.cache
def torch_key(size: int) -> KeyBuilder:
    """``key(variant_pack, workspace, data_ptr)``: `identity_key` of a pack of ``size`` torch
    tensors and a torch (or None) workspace, as straight-line code (unpacking, no loop: this is
    the per-call cost of an execute). A pack of another size raises ValueError, a buffer that is
    not a torch tensor TypeError (the caller then builds the key with `identity_key`)."""
    keys = "".join(f"k{i}, " for i in range(size))
    values = "".join(f"v{i}, " for i in range(size))
    pairs = "".join(f"id(v{i}), ptr(v{i}), " for i in range(size))
    source = (f"def key(pack, ws, ptr):\n"
              f"    [{keys}] = pack\n"
              f"    [{values}] = pack.values()\n"
              f"    return ({keys}{pairs}id(ws), None if ws is None else ptr(ws))\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<identity key of {size} torch tensors>", "exec"), namespace)  # our own text
    builder: KeyBuilder = namespace["key"]
    return builder


NO_LAST: tuple[Any, ...] = ((), None, None)  # no identity key is ()
# a run_pointers pack: (pack address, (address, slot) of scratch fills, executes so far, replay)
PointerEntry = tuple[int, tuple[tuple[int, ScratchSlot], ...], int, "Replay | Literal[False] | None"]


class PackCache:
    """The prepared backend variant packs of one plan (see the module docstring); bounded."""

    __slots__ = ("identity", "by_binding", "last", "by_pointers", "lock", "_destroy", "__weakref__")

    def __init__(self) -> None:
        self.identity: OrderedDict[tuple[Any, ...], _Seen] = OrderedDict()
        # the identity key of the latest hit, its entry and its _Seen (whose weak references clear it)
        self.last: tuple[Any, ...] = NO_LAST
        self.by_binding: OrderedDict[tuple[Any, ...], Entry] = OrderedDict()  # read directly by hot paths
        # run_pointers' packs: (uids, pointers, workspace) -> (pack address, scratch fills, executes
        # so far, replay: None until captured, then a Replay or False). Only ints and tuples until
        # a capture, which the cyclic GC stops tracking: in training every call brings new
        # addresses, and an object per pack living a few steps would be promoted to the oldest
        # generation and make full collections frequent. The packs are destroyed here.
        self.by_pointers: OrderedDict[tuple[Any, ...], PointerEntry] = OrderedDict()
        self.lock = threading.Lock()  # held from a by_pointers lookup to the execute of what it found
        self._destroy = backend_plan.destroy_pack
        weakref.finalize(self, release.later, _destroy_packs, self.by_pointers, self._destroy)

    def lookup_by_value(self, variant_pack: Mapping[Any, Any], workspace: Any, tensor: Any) -> Entry | None:
        """After an identity miss: packs holding raw pointers or numbers are found by their values
        (new int objects every call, often at the same addresses: allocators reuse blocks)."""
        values = (*variant_pack.values(), workspace)
        kinds = set(map(type, values))
        if kinds.isdisjoint(_BY_VALUE):
            return None
        seen = self.identity.get(_value_key(variant_pack, values, kinds, tensor))
        return None if seen is None else seen.entry

    def remember(self, variant_pack: Mapping[Any, Any], workspace: Any, entry: Entry, tensor: Any) -> None:
        """Make ``entry`` the identity-level answer for these objects while they all live."""
        values = (*variant_pack.values(), workspace)
        kinds = set(map(type, values))
        if not kinds.isdisjoint(_BY_VALUE):
            key = _value_key(variant_pack, values, kinds, tensor)
        else:
            key = identity_key(variant_pack, workspace, tensor)
        seen = _Seen(entry)
        evict = _evictor(self, key)
        try:
            seen.refs = [weakref.ref(v, evict) for v in values if v is not None and type(v) not in _BY_VALUE]
        except TypeError:
            return  # an object without weak references: checked on every call
        self.identity[key] = seen
        while len(self.identity) > _BY_IDENTITY:
            self.identity.popitem(last=False)

    def bound(self, key: tuple[Any, ...]) -> Entry | None:
        """The entry for a binding key ``(uids, pointers, workspace pointer)``, or None."""
        return self.by_binding.get(key)

    def store(self, key: tuple[Any, ...], entry: Entry) -> None:
        self.by_binding[key] = entry
        while len(self.by_binding) > _BY_BINDING:
            self.by_binding.popitem(last=False)

    def store_pointers(self, key: tuple[Any, ...], entry: PointerEntry) -> None:
        """Keep a run_pointers pack (its address and fills); the oldest beyond the bound is destroyed."""
        packs = self.by_pointers
        packs[key] = entry
        while len(packs) > _BY_BINDING:
            self._destroy(packs.popitem(last=False)[1][0])

    def __len__(self) -> int:
        return len(self.by_binding) + len(self.by_pointers)


def _destroy_packs(packs: OrderedDict[tuple[Any, ...], PointerEntry],
                   destroy: Callable[[int], None]) -> None:
    """A collected PackCache's release (run by `release.drain`): destroy the run_pointers packs
    it still holds."""
    for address, *_ in packs.values():
        destroy(address)
    packs.clear()


def _value_key(variant_pack: Mapping[Any, Any], values: tuple[Any, ...], kinds: set[type],
               tensor: Any) -> tuple[Any, ...]:
    """The identity key with numbers (raw pointers, by-value scalars) by value, tagged apart from ids,
    and torch tensors by id and address. A pack of raw pointers only (the common case of framework
    integrations) is keyed by them as they are."""
    if kinds <= _POINTERS:
        return (*variant_pack, "pointers", *values)
    key: list[Any] = [*variant_pack, "values"]
    for v in values:
        if type(v) in _BY_VALUE:
            key.append((type(v), v))
        else:
            key.append(id(v))
            if isinstance(v, tensor):
                key.append(v.data_ptr())
    return tuple(key)


def _evictor(cache: PackCache, key: tuple[Any, ...]) -> Callable[[Any], None]:
    """A weak-reference callback dropping ``key`` from the identity level (the cache held weakly)."""
    ref = weakref.ref(cache)

    def evict(_: Any) -> None:
        owner = ref()
        if owner is not None:
            owner.identity.pop(key, None)
            if owner.last[0] == key:
                owner.last = NO_LAST

    return evict
