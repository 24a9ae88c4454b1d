"""Executing a built plan: from a variant pack of tensors to one ``cudnnBackendExecute``.

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

Scratch tensors of composite nodes live in the first ``scratch_bytes`` of the workspace; the
plan's own workspace follows. Their host-side initial values are copied before each execute.

A pack executed `REPLAY_AFTER` times has its execute captured into a CUDA graph, and later
calls launch that graph on the handle's stream (`cudnn.backend.replay`): the same kernels on
the same addresses for much less host time. Packs that read host buffers by value are never
captured, and a stream being captured by the user always gets a real execute.

The first call with a set of buffers checks them (`set_execute_checks`): what is unsafe is
refused (too small for what the tensor addresses, on another device or the host, misaligned,
missing); a shape, stride or dtype that differs from the tensor's but stays inside the buffer
gives one `ExecutionInputWarning` per tensor ("warn", the default) or an error ("strict");
keys that are not tensors of the graph are ignored. "off" skips the checks. A ragged tensor's
buffer is packed by offsets on the device: it must hold one token, and its shape is not compared.

Keys bind as the official binds them: an int is a uid, a str a tensor's name, a tensor of this
graph binds to its buffer, and another graph's tensor (the graph this one was deserialized from)
to the tensor of this graph with its uid.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..._lib import capi, cuda, release
from ..._lib.enums import data_type
from ..._lib.errors import raise_status
from ..._lib.host import HostScalar
from ..._lib.record import Record
from ...backend import plan as backend_plan
from ...backend.handle import as_handle_ptr, closed_error, get_stream, unknown_handle_error
from ...backend.handle import is_live as is_live_handle
from ...backend.replay import Replay, capture
from ..model.graph_errors import ExecutionInputError, ExecutionInputWarning
from ..model.tensor import Tensor

_BY_IDENTITY = 16  # sets of buffer objects remembered per plan
_BY_BINDING = 64  # backend variant packs kept per plan
SCRATCH_ALIGNMENT = 256
_POINTERS = {int, type(None)}  # a pack of raw addresses (the workspace may be None)
_BY_VALUE = (int, float, bool)  # buffers compared by value on an identity hit (their ids can be reused)
REPLAY_AFTER = 2  # executes of a pack after which it is captured for replay (see backend.replay)
CHECK_MODES = ("strict", "warn", "off")
_checks = [os.environ.get("CUDNN_PY_EXECUTE_CHECKS", "warn")]


def set_execute_checks(mode: str) -> None:
    """How the first call with a set of buffers checks them: "warn" (default; refuse what is
    unsafe, warn once per tensor on a memory-safe shape/stride/dtype mismatch), "strict"
    (refuse mismatches too) or "off" (no checks). ``$CUDNN_PY_EXECUTE_CHECKS`` sets the start value."""
    if mode not in CHECK_MODES:
        raise ValueError(f"set_execute_checks: expected one of {CHECK_MODES}, got {mode!r}")
    _checks[0] = mode


def execute_checks() -> str:
    """The current execute-check mode (see `set_execute_checks`)."""
    mode = _checks[0]
    if mode not in CHECK_MODES:
        raise ValueError(f"$CUDNN_PY_EXECUTE_CHECKS: expected one of {CHECK_MODES}, got {mode!r}")
    return mode


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
        from ...interop.dtypes import torch_dtype

        try:
            return torch_dtype(self.tensor.get_data_type())
        except ValueError:
            return None

    @functools.cached_property
    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, int]]]:
        """(dims, strides, the dims and strides of the non-unit axes) as built."""
        dims, strides = tuple(self.tensor.get_dim()), tuple(self.tensor.get_stride())
        return dims, strides, _squeezed(dims, strides)


class ScratchSlot(Record):
    """A scratch tensor's place in the workspace, and what to write there before each execute:
    ``fill``'s host bytes, a memset to 0 (``zero``), or nothing."""

    __slots__ = ("uid", "offset", "nbytes", "fill", "zero", "__dict__")  # __dict__: cached properties
    frozen = True

    def __init__(self, uid: int, offset: int, nbytes: int, fill: bytes | None = None, zero: bool = False) -> None:
        self.uid, self.offset, self.nbytes, self.fill, self.zero = uid, offset, nbytes, fill, zero

    @functools.cached_property
    def unit(self) -> tuple[int, int] | None:
        """(size, value) when ``fill`` repeats one 1-, 2- or 4-byte unit (unit scales, constant
        biases): written by a memset, which CUDA graphs capture, instead of a host copy."""
        return None if self.fill is None else cuda.repeated_unit(self.fill)


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


class _NoTensor:
    """Stands for ``torch.Tensor`` while torch is not imported (nothing is an instance)."""


def tensor_type() -> Any:
    """``torch.Tensor`` once torch is imported, else a class nothing is an instance of."""
    torch = sys.modules.get("torch")
    return torch.Tensor if torch is not None else _NoTensor


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


_NO_LAST: tuple[Any, ...] = ((), None, None)  # no identity key is ()
# a run_pointers pack: (pack address, (address, slot) of scratch fills, executes so far, replay)
PointerEntry = tuple[int, tuple[tuple[int, ScratchSlot], ...], int, "Replay | Literal[False] | None"]


class PackCache:
    """The prepared backend variant packs of one plan (see the module docstring); bounded."""

    __slots__ = ("identity", "by_binding", "last", "by_pointers", "lock", "_destroy", "__weakref__")

    def __init__(self) -> None:
        self.identity: OrderedDict[tuple[Any, ...], _Seen] = OrderedDict()
        # the identity key of the latest hit, its entry and its _Seen (whose weak references clear it)
        self.last: tuple[Any, ...] = _NO_LAST
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
                owner.last = _NO_LAST

    return evict


class _Layout:
    """What every pack for one order of given uids shares: the given positions the graph reads
    (None: all), the backend uid layout, the graph constants' addresses and owners, and whether
    its packs may be replayed (none of the given tensors is passed by value: a host buffer's
    contents would be read once, at the capture), and the windows' (position of the source among
    the given pointers, byte offset)."""

    __slots__ = ("picks", "pack", "constants", "keep", "replayable", "windows")

    def __init__(self, picks: tuple[int, ...] | None, pack: Any, constants: list[int], keep: list[Any],
                 replayable: bool, windows: Sequence[tuple[int, int]] = ()) -> None:
        self.picks = picks
        self.pack = pack
        self.constants = constants
        self.keep = keep
        self.replayable = replayable
        self.windows = windows


class Runner:
    """Runs one execution plan; made when the plan is first executed, used by every execute()."""

    __slots__ = ("label", "plan", "plan_ptr", "plan_workspace", "scratch_bytes", "slots", "device",
                 "default_handle", "by_uid", "by_tensor", "unused_tensors", "unused_uids", "required", "packs",
                 "identity", "tensor", "data_ptr", "key_of", "backend_execute", "capture", "candidate", "warned",
                 "layouts", "replays", "windows")

    def __init__(self, label: str, plan: Any, plan_workspace: int, bindings: list[Binding], default_handle: Any,
                 device: int | None, slots: Sequence[ScratchSlot] = (), scratch_bytes: int = 0,
                 candidate: Any = None, unused: Sequence[Binding] = (), replays: bool = True) -> None:
        self.label = label
        self.plan = plan
        self.plan_ptr = plan.ptr
        self.plan_workspace = plan_workspace
        self.scratch_bytes = scratch_bytes
        self.slots = tuple(slots)
        self.device = device
        self.default_handle = default_handle  # a Handle, or an int cudnnHandle_t
        # slices read in place (Tensor.window_of): bound at their source's address plus an offset,
        # not from the variant pack, where the caller may still name them
        window = {b.uid: w for b in bindings if (w := b.tensor.window_of()) is not None}
        self.windows = [(uid, source.get_uid(), offset) for uid, (source, offset) in window.items()]
        unused = [*unused, *(b for b in bindings if b.uid in window)]
        bindings = [b for b in bindings if b.uid not in window]
        self.by_uid = {b.uid: b for b in bindings}
        self.by_tensor = {id(t): b for b in bindings for t in (b.tensor, b.user) if t is not None}
        # tensors of the graph the plan does not read (an attention option the lowering folds
        # away): accepted in the variant pack and not given to cuDNN
        self.unused_tensors = {id(t) for b in unused for t in (b.tensor, b.user) if t is not None}
        self.unused_uids = {b.uid for b in unused}
        self.required = [b for b in bindings if b.constant is None]
        self.packs = PackCache()
        self.identity = self.packs.identity  # the identity level: the hot path is one get on it
        self.tensor = tensor_type()  # torch.Tensor once torch is loaded (set again by prepare)
        self.data_ptr: Any = None  # torch.Tensor.data_ptr once a torch tensor was given
        self.key_of: KeyBuilder | None = None  # torch_key(n) while the latest call's n buffers were torch tensors
        self.backend_execute = capi.graph.cudnnBackendExecute
        self.capture = capture  # a pack's execute into a CUDA graph, once it has run REPLAY_AFTER times
        self.candidate = candidate  # the plan's Candidate (what the pipeline selected)
        self.warned: set[int] = set()  # uids a mismatch warning was given for
        self.layouts: dict[tuple[int, ...], _Layout] = {}  # per order of given uids
        # False: no pack of this plan is captured (an engine whose captured execute is known to
        # write other bits than its execute, see Node.replayable)
        self.replays = replays

    @property
    def workspace_size(self) -> int:
        """Bytes the caller's workspace must have: scratch, then the plan's own."""
        return self.scratch_bytes + self.plan_workspace if self.plan_workspace else self.scratch_bytes

    # -- the hot path -----------------------------------------------------------------------

    def run(self, variant_pack: Mapping[Any, Any], workspace: Any, handle: Any) -> None:
        """Execute on the buffers of ``variant_pack`` (tensor or uid -> buffer) and ``workspace``:
        the objects of an earlier call, at the addresses they had, find their pack by identity;
        anything else is checked first (`prepare`)."""
        key_of = self.key_of
        if key_of is not None:
            try:
                key = key_of(variant_pack, workspace, self.data_ptr)
            except (TypeError, ValueError, AttributeError):  # other buffers than the latest call's torch tensors
                key = self.identity_key(variant_pack, workspace)
        else:
            key = self.identity_key(variant_pack, workspace)
        packs = self.packs
        last = packs.last
        if key == last[0]:
            entry = last[1]  # the objects of the latest call, at the addresses they had
        else:
            seen = self.identity.get(key)
            if seen is not None:
                entry = seen.entry  # objects of an earlier call, at the addresses they had: no check, no new pack
                packs.last = (key, entry, seen)
            else:
                entry = packs.lookup_by_value(variant_pack, workspace, self.tensor) or \
                    self.prepare(variant_pack, workspace)
        self.execute(entry, self.default_handle if handle is None else handle)

    def identity_key(self, variant_pack: Mapping[Any, Any], workspace: Any) -> tuple[Any, ...]:
        """`identity_key` for this call; notes whether the next one can use `torch_key`."""
        tensor = self.tensor
        fast = self.data_ptr is not None and torch_only(variant_pack, workspace, tensor)
        self.key_of = torch_key(len(variant_pack)) if fast else None
        return identity_key(variant_pack, workspace, tensor)

    def run_pointers(self, uids: tuple[int, ...], pointers: tuple[int, ...], workspace: int, handle: Any,
                     stream: int | None = None) -> None:
        """Execute on device addresses bound to ``uids`` as given, without `run`'s buffer checks:
        for integrations that allocate every buffer for this graph's exact dims, strides and
        types (``cudnn.ops``). Packs are found by ``(uids, pointers, workspace)``, so changing
        addresses (an allocator handing out other blocks) cost one backend pack each, once.
        ``stream``: the handle's stream, when the caller has just set it (a replay then need
        not ask cuDNN for it)."""
        packs = self.packs
        key = (uids, pointers, workspace)
        with packs.lock:  # another thread's eviction destroys a pack at once: not between lookup and use
            entry = packs.by_pointers.get(key)
            if entry is None:
                entry = self._pointer_entry(uids, pointers, workspace)
            pack, fills, uses, replay = entry
            h = self._launch(pack, fills, replay, self.default_handle if handle is None else handle, stream)
            if h and replay is None:  # executed: counted (in a new tuple, see PackCache) until captured
                uses += 1
                packs.by_pointers[key] = (pack, fills, uses, self._capture(pack, h) if uses >= REPLAY_AFTER else None)

    def _pointer_entry(self, uids: tuple[int, ...], pointers: tuple[int, ...],
                       workspace: int) -> PointerEntry:
        layout = self._layout(uids)
        if self.workspace_size and not workspace:
            raise ExecutionInputError(f"{self.label}: the plan needs a workspace of {self.workspace_size} bytes")
        given = list(pointers) if layout.picks is None else [pointers[i] for i in layout.picks]
        ptrs, plan_ws, fills = self._pack_pointers(layout, given, workspace)
        replay: Literal[False] | None = None if layout.replayable else False
        entry = (layout.pack.make(ptrs, plan_ws), fills, 0, replay)
        self.packs.store_pointers((uids, pointers, workspace), entry)
        return entry

    def _pack_pointers(self, layout: _Layout, given: list[int], workspace: int) -> tuple[
            list[int], int, tuple[tuple[int, ScratchSlot], ...]]:
        """The pointers of a pack in ``layout``'s uid order (the given ones, the graph's constants,
        its scratch slots in ``workspace``), the plan's workspace pointer and the scratch to fill."""
        ptrs = given + layout.constants + [given[k] + offset for k, offset in layout.windows]
        fills: tuple[tuple[int, ScratchSlot], ...] = ()
        if self.slots:
            ptrs += [workspace + slot.offset for slot in self.slots]
            fills = tuple((workspace + slot.offset, slot) for slot in self.slots if slot.fill is not None or slot.zero)
        return ptrs, (workspace + self.scratch_bytes if self.plan_workspace else 0), fills

    def _layout(self, uids: tuple[int, ...]) -> _Layout:
        """What every pack for ``uids`` shares, worked out (and checked) once: which of the given
        uids the graph reads, its constants, its scratch slots, the uid array cuDNN is given."""
        layout = self.layouts.get(uids)
        if layout is not None:
            return layout
        picks = [i for i, u in enumerate(uids) if u in self.by_uid]  # unused tensors are not given
        given = {uids[i] for i in picks}
        missing = [b.label for b in self.required if b.uid not in given]
        if missing:
            raise ExecutionInputError(f"{self.label}: the variant pack lacks " + "; ".join(missing))
        constants = [b for b in self.by_uid.values() if b.constant is not None and b.uid not in given]
        position = {uids[i]: k for k, i in enumerate(picks)}  # a window's source is required, so given
        windows = [(position[source], offset) for _, source, offset in self.windows]
        order = [uids[i] for i in picks] + [b.uid for b in constants] + [uid for uid, _, _ in self.windows] + \
            [slot.uid for slot in self.slots]
        layout = _Layout(None if len(picks) == len(uids) else tuple(picks), backend_plan.PackLayout(order, self.label),
                         [b.constant.ptr for b in constants],  # type: ignore[union-attr]
                         [b.constant for b in constants],
                         self.replays and not any(self.by_uid[uids[i]].tensor.get_is_pass_by_value() for i in picks),
                         windows)
        self.layouts[uids] = layout
        return layout

    def execute(self, entry: Entry, handle: Any) -> None:
        """Run ``entry`` on ``handle`` (a Handle or an int), see `_launch`; an execute counts
        towards the capture."""
        h = self._launch(entry.pack_ptr, entry.fills, entry.replay, handle)
        if h and entry.replay is None:
            entry.uses += 1
            if entry.uses >= REPLAY_AFTER:
                entry.replay = self._capture(entry.pack_ptr, h)

    def _launch(self, pack: int, fills: tuple[tuple[int, ScratchSlot], ...], replay: Replay | Literal[False] | None,
                handle: Any, stream: int | None = None) -> int:
        """Write the scratch ``fills``, then run the pack at address ``pack`` on ``handle`` (whose
        stream is ``stream`` where the caller knows it): ``replay``'s graph when it launches,
        else one ``cudnnBackendExecute``. Returns the handle's address after an execute, 0
        after a replay."""
        if type(handle) is int:
            if not is_live_handle(handle):  # a destroyed or made-up address: cuDNN would read it
                raise unknown_handle_error(handle)
            h = handle
        else:
            try:
                h = handle.address
            except AttributeError:
                h = as_handle_ptr(handle)  # a clear TypeError for anything else
        if fills:
            self._fill(fills, h)
        if replay and replay.launch(h, stream):
            return 0
        status = self.backend_execute(h, self.plan_ptr, pack)
        if status:
            self.failed(status, handle)
        return h

    def _capture(self, pack: int, handle: int) -> Replay | Literal[False] | None:
        """The replay of ``pack``'s execute (`backend.replay.capture`): False where it cannot be
        captured, None to try again at the next execute."""
        return self.capture(self.plan_ptr, pack, handle, self.device, self.label)

    def failed(self, status: int, handle: Any) -> None:
        """Raise for a failed ``cudnnBackendExecute``."""
        if getattr(handle, "closed", False):
            raise handle_closed_error()
        raise_status(status, f"{self.label}: executing the plan")

    def _fill(self, fills: tuple[tuple[int, ScratchSlot], ...], handle: int) -> None:
        stream = get_stream(handle)
        for address, slot in fills:
            if slot.fill is None:
                cuda.memset_async(address, 0, slot.nbytes, stream)
            elif (unit := slot.unit) is not None and address % unit[0] == 0:
                cuda.memset_units_async(address, unit[0], unit[1], len(slot.fill) // unit[0], stream)
            else:
                cuda.copy_host_to_device_async(address, slot.fill, stream)

    # -- the first call with a set of buffers ------------------------------------------------

    def prepare(self, variant_pack: Mapping[Any, Any], workspace: Any) -> Entry:
        """Check every buffer, find or make the backend pack for this binding, and remember
        these objects for the next call."""
        mode = execute_checks()
        self.tensor = tensor_type()  # torch may have been imported since: its tensors' addresses join the key
        self.data_ptr = None if self.tensor is _NoTensor else self.tensor.data_ptr
        uids: list[int] = []
        ptrs: list[Any] = []
        scalars: dict[int, HostScalar] = {}
        seen: set[int] = set()
        ignored: list[str] = []  # keys of no tensor of this graph, named if something is missing
        # the plan's engine replays faithfully, and no host buffer is read by value (Python
        # numbers are part of the key)
        replayable = self.replays
        for binding, value, foreign in self._bindings(variant_pack, mode, ignored):
            if binding.uid in seen:
                if foreign:  # a key of this graph binds the uid: another graph's tensor with that uid is ignored
                    self._unknown(f"variant pack key {foreign}, of another graph, has the uid of {binding.label}, "
                                  "which a key of this graph binds", mode, ignored)
                    continue
                raise ExecutionInputError(f"{self.label}: {binding.label} is given twice in the variant pack")
            seen.add(binding.uid)
            ptr = self._pointer(binding, value, mode)
            uids.append(binding.uid)
            if isinstance(ptr, HostScalar):
                scalars[binding.uid] = ptr
                ptrs.append(("value", ptr.dtype, ptr.value))  # the binding key holds the value, not its buffer
            else:
                ptrs.append(ptr)
                replayable = replayable and not binding.tensor.get_is_pass_by_value()
        missing = [b.label for b in self.required if b.uid not in seen]
        if missing:
            also = f" (ignored keys: {'; '.join(ignored)})" if ignored else ""
            raise ExecutionInputError(f"{self.label}: the variant pack lacks " + "; ".join(missing) + also)
        workspace_ptr = self._workspace_pointer(workspace, mode)
        key = (tuple(uids), tuple(ptrs), workspace_ptr)
        entry = self.packs.bound(key)
        if entry is None:
            entry = self._make_entry(uids, ptrs, scalars, workspace_ptr, replayable)
            self.packs.store(key, entry)
        self.packs.remember(variant_pack, workspace, entry, self.tensor)
        return entry

    def _make_entry(self, uids: list[int], ptrs: list[Any], scalars: dict[int, HostScalar],
                    workspace_ptr: int, replayable: bool) -> Entry:
        """A finalized backend pack: the user's buffers, graph constants, scratch in the workspace."""
        layout = self._layout(tuple(uids))
        given = [scalars[u].ptr if isinstance(p, tuple) else p for u, p in zip(uids, ptrs)]
        pointers, plan_ws, fills = self._pack_pointers(layout, given, workspace_ptr)
        return Entry(layout.pack.make_owned(pointers, plan_ws), [*scalars.values(), *layout.keep], fills, replayable)

    def _bindings(self, variant_pack: Mapping[Any, Any], mode: str,
                  ignored: list[str]) -> list[tuple[Binding, Any, str]]:
        """(binding, buffer, '' or the label of another graph's tensor bound by its uid) of each key
        that names a tensor of this graph, keys of this graph's tensors first (they win a uid over
        another graph's tensor); keys to ignore are noted in ``ignored``."""
        own: list[tuple[Binding, Any, str]] = []
        foreign: list[tuple[Binding, Any, str]] = []
        for key, value in variant_pack.items():
            if key is None:
                continue
            binding = self._binding(key, mode, ignored)
            if binding is not None:
                own.append((binding, value, ""))
            elif isinstance(key, Tensor) and (binding := self._foreign(key, mode, ignored)) is not None:
                foreign.append((binding, value, f"{key.label()} (uid {key.get_uid()})"))
        return own + foreign

    def _binding(self, key: Any, mode: str, ignored: list[str]) -> Binding | None:
        """The binding a variant-pack key of this graph names (a tensor, an int uid or a tensor's
        name); None for a tensor of no binding here (see `_foreign`) or a key to ignore (noted in
        ``ignored``)."""
        if isinstance(key, Tensor):
            return self.by_tensor.get(id(key))
        if isinstance(key, int) and not isinstance(key, bool):
            binding = self.by_uid.get(key)
            if binding is None and key not in self.unused_uids:
                self._unknown(f"variant pack key uid {key} is not a uid of this graph (known: "
                              f"{sorted(self.by_uid)})", mode, ignored)
            return binding
        if isinstance(key, str):  # a tensor's name, as the official takes it
            named = [b for b in self.by_uid.values() if b.tensor.get_name() == key]
            if len(named) > 1:
                raise ExecutionInputError(f"{self.label}: variant pack key {key!r} is ambiguous: "
                                          f"{len(named)} tensors of this graph have that name; key them by tensor "
                                          "or uid")
            if not named:
                self._unknown(f"variant pack key {key!r} names no tensor bound by this graph (known: "
                              f"{sorted(b.tensor.get_name() for b in self.by_uid.values())})", mode, ignored)
            return named[0] if named else None
        raise ExecutionInputError(f"{self.label}: variant pack keys must be cudnn.tensor objects, int uids or "
                                  f"tensor names, got {type(key).__name__}")

    def _foreign(self, key: Tensor, mode: str, ignored: list[str]) -> Binding | None:
        """The binding of a tensor key that is none of this graph's bound tensors: another
        graph's tensor (the one this graph was deserialized from, say) binds by its uid, as the
        official binds every key; None for one to ignore (noted in ``ignored``)."""
        if id(key) in self.unused_tensors:
            return None
        if key.get_is_virtual():
            self._unknown(f"variant pack key {key.label()} is an intermediate (virtual) tensor", mode, ignored)
            return None
        uid = key.get_uid() if key.has_uid() else None
        binding = None if uid is None else self.by_uid.get(uid)
        if binding is None and (uid is None or uid not in self.unused_uids):
            has = "has no uid" if uid is None else f"has uid {uid}, which is no uid of this graph (known: " \
                                                   f"{sorted(self.by_uid)})"
            self._unknown(f"variant pack key {key.label()} is not a tensor of this graph and {has}", mode, ignored)
        return binding

    def _unknown(self, what: str, mode: str, ignored: list[str]) -> None:
        """A key the graph has no buffer for: an error in strict mode, else ignored (as cuDNN would)
        and noted in ``ignored``."""
        if mode == "strict":
            raise ExecutionInputError(f"{self.label}: {what}")
        logging.getLogger("cudnn.execute").debug("%s: %s; ignored", self.label, what)
        ignored.append(what.removeprefix("variant pack key "))

    def _pointer(self, b: Binding, value: Any, mode: str) -> int | HostScalar:
        """The checked device address of ``value`` for ``b`` (a HostScalar for a Python number)."""
        t = b.tensor
        if t.get_is_pass_by_value():
            if isinstance(value, (int, float, bool)):
                return HostScalar(value, t.get_data_type())
            if mode == "off":
                return self._describe(b, value).ptr
            info = self._describe(b, value)
            if info.device_type not in ("cpu", "cuda_host"):
                raise ExecutionInputError(f"{self.label}: {b.label} is passed by value and needs a host "
                                          f"tensor or a Python number, got memory on {info.device_type}")
            self._check_layout(b, info, mode)
            return info.ptr
        if type(value) is int:
            if mode != "off":
                self._check_raw_pointer(b.label, value, b.needed)
            return value
        if type(value) is self.tensor and (ptr := self._exact_torch_pointer(b, value)) is not None:
            return ptr
        info = self._describe(b, value)
        if mode == "off":
            return info.ptr
        if info.device_type not in ("cuda", "cuda_managed"):
            raise ExecutionInputError(f"{self.label}: {b.label} must be in GPU memory, got a "
                                      f"{info.framework} tensor on {info.device_type}")
        if self.device is not None and info.device_id != self.device:
            raise ExecutionInputError(f"{self.label}: {b.label} is on cuda:{info.device_id} but the graph was "
                                      f"built for cuda:{self.device}")
        self._check_layout(b, info, mode)
        if info.ptr % t.get_alignment():
            raise ExecutionInputError(f"{self.label}: {b.label} starts at {info.ptr:#x}, which is not "
                                      f"{t.get_alignment()}-byte aligned")
        return info.ptr

    def _exact_torch_pointer(self, b: Binding, t: Any) -> int | None:
        """The address of a torch tensor that is exactly what ``b`` declares (dtype, dims, strides),
        on this graph's GPU and aligned: its own storage then holds everything the descriptor
        addresses, so nothing more is read. None: the general check decides (and explains)."""
        dims, strides, _ = b.layout
        try:
            if t.dtype is not b.torch_dtype or t.shape != dims or t.stride() != strides or not t.is_cuda \
                    or t.is_neg():
                return None
        except (RuntimeError, AttributeError):  # no strides (sparse), or not torch's own tensor API
            return None
        if self.device is not None and t.get_device() != self.device:
            return None
        ptr: int = t.data_ptr()
        return ptr if ptr % b.tensor.get_alignment() == 0 else None

    def _torch_workspace_pointer(self, t: Any, need: int) -> int | None:
        """The address of a torch workspace on this graph's GPU holding ``need`` bytes from its
        first element; None: the general check decides (and explains)."""
        try:
            if not t.is_cuda or (self.device is not None and t.get_device() != self.device):
                return None
            have = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
        except (RuntimeError, NotImplementedError, AttributeError):
            return None
        ptr: int = t.data_ptr()
        return ptr if have >= need else None

    def _describe(self, b: Binding, value: Any) -> Any:
        try:
            return _interop().describe(value)
        except (TypeError, ValueError, BufferError) as exc:
            raise ExecutionInputError(f"{self.label}: {b.label}: {exc}") from None

    def _check_layout(self, b: Binding, info: Any, mode: str) -> None:
        """Refuse a buffer smaller than what the tensor addresses; a memory-safe mismatch of
        dtype, dims or strides warns once per tensor (an error in strict mode). A ragged
        tensor's buffer is packed (its shape is not the declared one, its extent depends on
        offsets on the device): it must hold one token, and only its dtype is compared."""
        t = b.tensor
        needed = b.needed
        have = info.extent_bytes if info.extent_bytes is not None else info.needed_bytes
        if t.get_data_type() == data_type.BOOLEAN:  # bit-packed masks: any bytes, enough of them
            if have < needed:
                raise ExecutionInputError(f"{self.label}: {b.label} is a bit-packed BOOLEAN mask of "
                                          f"{t.element_count()} elements needing {needed} bytes; the buffer has {have}")
            if info.dtype in (data_type.BOOLEAN, data_type.BYTE_BOOLEAN):  # a framework bool (see interop.dtypes)
                self._mismatch(b, mode, f"is a bit-packed BOOLEAN mask (8 elements a byte), got a {info.framework} "
                                        "bool buffer of a byte an element: its elements are not the mask's "
                                        "(pack it, or on cuDNN >= 9.25 declare BYTE_BOOLEAN)")
            return
        mismatch = ""
        dims, strides, squeezed = b.layout
        if info.dtype != t.get_data_type():
            mismatch = f"expects {t.get_data_type().name} data, got {info.framework} {info.dtype.name}"
        elif not b.ragged and (info.shape != dims or info.strides != strides) and \
                _squeezed(info.shape, info.strides) != squeezed:
            mismatch = (f"expects dims {list(dims)} strides {list(strides)}, got a buffer with shape "
                        f"{list(info.shape)} strides {list(info.strides)}")
        if have < needed and b.ragged:
            raise ExecutionInputError(f"{self.label}: {b.label} is ragged (packed by its offsets) and needs at "
                                      f"least one token, {needed} bytes for dims {list(dims)} strides "
                                      f"{list(strides)}; the buffer has {have}")
        if have < needed:
            detail = f" ({mismatch})" if mismatch else ""
            raise ExecutionInputError(f"{self.label}: {b.label} needs {needed} bytes for dims {list(dims)} strides "
                                      f"{list(strides)}; the buffer has {have}{detail}")
        if mismatch:
            self._mismatch(b, mode, mismatch)

    def _mismatch(self, b: Binding, mode: str, mismatch: str) -> None:
        """A memory-safe mismatch: an error in strict mode, else a warning once per tensor."""
        if mode == "strict":
            raise ExecutionInputError(f"{self.label}: {b.label} {mismatch}")
        if b.uid not in self.warned:
            self.warned.add(b.uid)
            warnings.warn(f"{self.label}: {b.label} {mismatch}; cuDNN reads it as declared (it stays inside "
                          "the buffer)", ExecutionInputWarning, stacklevel=6)

    def _check_raw_pointer(self, label: str, ptr: int, needed: int) -> None:
        if ptr <= 0:
            raise ExecutionInputError(f"{self.label}: {label}: pointer {ptr} is not a device address")
        try:
            where = cuda.pointer_info(ptr)
        except Exception:  # noqa: BLE001 - cuda-bindings' own error types
            return  # memory CUDA cannot describe (e.g. from a foreign allocator): trust the caller
        if not where.is_device:
            raise ExecutionInputError(f"{self.label}: {label}: {ptr:#x} is not GPU memory")
        if self.device is not None and where.device != self.device:
            raise ExecutionInputError(f"{self.label}: {label}: {ptr:#x} is on cuda:{where.device}, the graph "
                                      f"on cuda:{self.device}")
        if where.size and where.end < ptr + needed:
            raise ExecutionInputError(f"{self.label}: {label} needs {needed} bytes at {ptr:#x}; its allocation "
                                      f"ends {where.end - ptr} bytes after it")

    def _workspace_pointer(self, workspace: Any, mode: str) -> int:
        need = self.workspace_size
        if workspace is None:
            if need:
                raise ExecutionInputError(f"{self.label}: the plan needs a workspace of {need} bytes; got None")
            return 0
        if type(workspace) is int:
            if need and mode != "off":
                self._check_raw_pointer("workspace", workspace, need)
            return workspace
        if type(workspace) is self.tensor and (ptr := self._torch_workspace_pointer(workspace, need)) is not None:
            return ptr
        try:
            info = _interop().describe(workspace)
        except (TypeError, ValueError, BufferError) as exc:
            raise ExecutionInputError(f"{self.label}: workspace: {exc}") from None
        size = info.extent_bytes if info.extent_bytes is not None else info.needed_bytes
        if size < need:
            raise ExecutionInputError(f"{self.label}: the workspace has {size} bytes; the plan needs {need}")
        if need and info.device_type not in ("cuda", "cuda_managed"):
            raise ExecutionInputError(f"{self.label}: the workspace must be GPU memory, got {info.device_type}")
        return info.ptr


def workspace_capacity(workspace: Any) -> int | None:
    """Bytes a workspace buffer holds, or None where that cannot be known (a raw pointer into
    memory CUDA does not describe)."""
    if type(workspace) is int:
        try:
            where = cuda.pointer_info(workspace)
        except Exception:  # noqa: BLE001 - memory CUDA cannot describe (a foreign allocator): size unknown
            return None
        return where.end - workspace if where.size else None
    from ...interop import tensors as interop

    info = interop.describe(workspace)
    return info.extent_bytes if info.extent_bytes is not None else info.needed_bytes


@functools.cache
def _interop() -> Any:
    """cudnn.interop.tensors, imported on the first check (not when cudnn is imported)."""
    from ...interop import tensors

    return tensors


def handle_closed_error() -> Exception:
    return closed_error()  # destroyed, or inherited across fork()


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
    from ...interop.tensors import nbytes

    span = sum((d - 1) * s for d, s in zip(dims, t.get_stride())) + 1
    return nbytes(t.get_data_type(), span)


def _squeezed(dims: Any, strides: Any) -> list[tuple[int, int]]:
    return [(int(d), int(s)) for d, s in zip(dims, strides) if d != 1]
