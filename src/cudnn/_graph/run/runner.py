"""Running one built plan (`Runner`): from a variant pack of buffers to one ``cudnnBackendExecute``.

A call with the buffer objects of an earlier call finds its backend pack by identity (see
`packs`): per-call work is a dict walk and one backend call. Anything else is checked first
(`checks`), then bound: keys bind as the official binds them: an int is a uid, a str a tensor's
name, a tensor of this graph binds to its buffer, and another graph's tensor (the graph this
one was deserialized from) to the tensor of this graph with its uid. Keys that are not tensors
of the graph are ignored. `run_pointers` binds raw addresses unchecked, for integrations that
allocate every buffer as the graph declares it.

Scratch tensors of composite nodes live in the first ``scratch_bytes`` of the workspace; the
plan's own workspace follows. Their host-side initial values are copied before each execute.
Constant scratch (only read by the graph) lives in device memory of the Runner's own instead,
written once.

A pack executed `REPLAY_AFTER` times has its execute captured into a CUDA graph, and later
calls launch that graph on the handle's stream (`cudnn.backend.replay`): the same kernels on
the same addresses for much less host time. Packs that read host buffers by value are never
captured, and a stream being captured by the user always gets a real execute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..._lib import capi, cuda
from ..._lib.host import HostScalar
from ..._lib.status import raise_status
from ...backend import plan as backend_plan
from ...backend.handle import as_handle_ptr, closed_error, get_stream, unknown_handle_error
from ...backend.handle import is_live as is_live_handle
from ...backend.replay import Replay, capture
from ..model.graph_errors import ExecutionInputError
from ..model.tensor import Tensor
from .bindings import Binding, ScratchSlot
from .checks import BufferChecks, execute_checks
from .packs import (
    Entry,
    KeyBuilder,
    NoTensor,
    PackCache,
    PointerEntry,
    identity_key,
    tensor_type,
    torch_key,
    torch_only,
)

REPLAY_AFTER = 2  # executes of a pack after which it is captured for replay (see backend.replay)


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
                 "identity", "prepared", "tensor", "data_ptr", "key_of", "backend_execute", "capture", "candidate",
                 "checks", "layouts", "replays", "windows", "probe", "constant_bytes", "constant_memory")

    def __init__(self, label: str, plan: Any, plan_workspace: int, bindings: list[Binding], default_handle: Any,
                 device: int | None, slots: Sequence[ScratchSlot] = (), scratch_bytes: int = 0,
                 candidate: Any = None, unused: Sequence[Binding] = (), replays: bool = True) -> None:
        self.label = label
        self.plan = plan
        self.plan_ptr = plan.ptr
        self.plan_workspace = plan_workspace
        self.scratch_bytes = scratch_bytes
        self.slots = tuple(slots)
        # constant scratch (`ScratchSlot.constant`): device memory of this Runner's own, written
        # once, when its first pack is made (`_constant_memory`)
        self.constant_bytes = max((s.offset + s.nbytes for s in self.slots if s.constant), default=0)
        self.constant_memory: cuda.DeviceBuffer | None = None
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
        # prepared(key): the pack made for a binding key (uids, pointers, workspace pointer), or None;
        # the binding level's own dict.get, so a caller's lookup costs no more than reading it
        self.prepared: Callable[[tuple[Any, ...]], Entry | None] = self.packs.by_binding.get
        self.tensor = tensor_type()  # torch.Tensor once torch is loaded (set again by prepare)
        self.data_ptr: Any = None  # torch.Tensor.data_ptr once a torch tensor was given
        self.key_of: KeyBuilder | None = None  # torch_key(n) while the latest call's n buffers were torch tensors
        self.backend_execute = capi.graph.cudnnBackendExecute
        self.capture = capture  # a pack's execute into a CUDA graph, once it has run REPLAY_AFTER times
        self.candidate = candidate  # the plan's Candidate (what the pipeline selected)
        self.layouts: dict[tuple[int, ...], _Layout] = {}  # per order of given uids
        # False: no pack of this plan is captured (an engine whose captured execute is known to
        # write other bits than its execute, see Node.replayable)
        self.replays = replays
        self.checks = BufferChecks(label, device, self.workspace_size)  # the first call's buffer checks
        # what times the next launch (a lowering trial's `Sample`: started(handle, stream) before
        # it, ended() after); None almost always
        self.probe: Any = None

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
            held = self._constant_memory() if self.constant_bytes else 0
            ptrs += [(held if slot.constant else workspace) + slot.offset for slot in self.slots]
            fills = tuple((workspace + slot.offset, slot) for slot in self.slots
                          if not slot.constant and (slot.fill is not None or slot.zero))
        return ptrs, (workspace + self.scratch_bytes if self.plan_workspace else 0), fills

    def _constant_memory(self) -> int:
        """The address of the constant scratch: the slots' fills (zeros elsewhere), written on
        first use on the Runner's device (`cuda.filled_buffer`), freed with the Runner."""
        memory = self.constant_memory
        if memory is None:
            data = bytearray(self.constant_bytes)
            for slot in self.slots:
                if slot.constant and slot.fill is not None:
                    data[slot.offset:slot.offset + len(slot.fill)] = slot.fill
            memory = self.constant_memory = cuda.filled_buffer(bytes(data), self.device)
        return memory.ptr

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
        if self.probe is not None:
            return self._launch_timed(pack, fills, replay, handle, stream)
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

    def _launch_timed(self, pack: int, fills: tuple[tuple[int, ScratchSlot], ...],
                      replay: Replay | Literal[False] | None, handle: Any, stream: int | None) -> int:
        """`_launch` between the probe's marks; the probe times this launch alone."""
        probe, self.probe = self.probe, None
        probe.started(handle, stream)
        try:
            return self._launch(pack, fills, replay, handle, stream)
        finally:
            probe.ended()

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
        self.data_ptr = None if self.tensor is NoTensor else self.tensor.data_ptr
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
            ptr = self.checks.pointer(binding, value, mode, self.tensor)
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
        workspace_ptr = self.checks.workspace_pointer(workspace, mode, self.tensor)
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


def handle_closed_error() -> Exception:
    """The error for a handle that can no longer run anything."""
    return closed_error()  # destroyed, or inherited across fork()
