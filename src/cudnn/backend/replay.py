"""Replaying a plan's execute: the kernels cuDNN launches for one variant pack, captured once
into a CUDA graph and launched from it afterwards.

``cudnnBackendExecute`` spends several microseconds of host time per call working out, from
the plan and the pack, which kernels to launch with which arguments. For one pack that answer
never changes, so a pack executed again and again (the same buffers every training step or
inference call) is captured once, on a private stream through a private handle, and later
calls launch the captured graph on the caller's stream: the same kernels on the same
addresses, in the same stream order, for a fraction of the host time.

What keeps a replay equal to the execute it stands for:

- it is launched on the stream the caller's handle is bound to at that call (read from cuDNN
  each time, however the stream was set);
- never on a stream being captured: a user's CUDA-graph capture records a real execute;
- packs that point at host memory (pass-by-value tensors given as host buffers, which a graph
  would read once, at capture) are never captured;
- a capture that cuDNN's execute does not allow (an engine that synchronizes or copies from
  pageable memory) fails quietly, and that pack is executed as before from then on, as is one
  whose graph fails to launch;
- no other Python thread runs while a capture is open: it holds the GIL, since cuDNN shares
  state between handles and another thread's cuDNN call inside the capture window fails. A
  call another thread began before the capture opened, or makes without the GIL, is not held
  back; ``CUDNN_PY_EXECUTE_REPLAY=0`` rules that out where threads share the GPU that way;
- none is made while cuDNN's log callback receives warnings or info (``cudnn.set_log_level``
  at WARNING or below): that callback takes the GIL, which a capture holds. With errors only
  (the level cudnn-py leaves after logging is switched off) captures go on;
- it holds kernels and memsets only (`cuda.REPLAYABLE_NODES`): a captured execute with a copy,
  a host callback, an event or an allocation in it is not replayed, and that pack is executed,
  as are the packs of an engine whose replay was seen to differ (``Node.replayable``).

A Replay that becomes unreachable is not destroyed by its finalizer, which runs wherever the
garbage collector does (inside another library's call, between a capture's begin and end): it
is queued (`cudnn._lib.release`) and destroyed at the next capture, build or handle creation.

A replay saves host time, which counts only while the GPU waits for the host. On the GPU,
behind queued work, a launch of the captured graph takes longer than cuDNN's own launch of the
same kernels, which follow the work before them back to back. So a pack is replayed when its
stream has finished the work queued on it before (``cuStreamQuery``: the GPU is waiting for the
host) and executed with ``cudnnBackendExecute`` while earlier work is still queued (the host
is ahead), as the official frontend always executes. Asking costs host time too (a capture
check, then the query), so once a pack's stream is found busy its next `BUSY_EXECUTES` calls
are executed without asking: a host that is ahead stays ahead for a while, and one that falls
behind is replayed again within that many calls. ``set_execute_replay(True, always=True)`` or
``CUDNN_PY_EXECUTE_REPLAY=always`` replays behind queued work too, without asking.

Launches of one graph run one after another even on two streams (CUDA orders them), where
two executes of one pack could overlap; both would write the same buffers. The Runner decides
which packs are captured (see `cudnn._graph.run.runner`); ``set_execute_replay(False)`` or
``CUDNN_PY_EXECUTE_REPLAY=0`` turns replays off.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Literal

from .._lib import capi, cuda, kernel_launch, marshal, release
from .handle import Handle, forked

_ENV = "CUDNN_PY_EXECUTE_REPLAY"
_setting = os.environ.get(_ENV, "1").strip().lower()
_enabled = [_setting not in ("0", "false", "off", "no")]
_always = [_setting == "always"]  # replay behind work still queued on the stream too
_direct = [_setting == "direct"]  # replay by launching the captured kernels themselves (kernel_launch)
MAX_GRAPHS = 512  # captured executes kept at once by default (each holds device memory)
BUSY_EXECUTES = 8  # after a pack's stream was found busy, its next calls executed without asking
_max_graphs = [MAX_GRAPHS]
_live: weakref.WeakSet[Replay] = weakref.WeakSet()  # every Replay alive, for the bound
_log = logging.getLogger("cudnn.execute")
_ERRORS_ONLY = capi.SEV_FATAL_EN | capi.SEV_ERROR_EN  # the least a registered log callback receives
_launch_graph: Any = None  # cuGraphLaunch, cuStreamIsCapturing and cuStreamQuery, bound at the first capture
_is_capturing: Any = None
_stream_busy: Any = None


def set_execute_replay(enabled: bool, *, max_graphs: int | None = None, always: bool | None = None,
                       direct: bool | None = None) -> None:
    """Whether a variant pack executed repeatedly is replayed from a captured CUDA graph (the
    default; ``$CUDNN_PY_EXECUTE_REPLAY=0`` starts with it off). Off, every execute calls
    ``cudnnBackendExecute``, including those of packs captured earlier.

    ``max_graphs``: how many captured executes the process keeps at once (512 at first). Each
    holds device memory (256 KiB on an H200 with CUDA 13); once that many are alive, further
    packs are executed until some are freed with their plans or packs.

    ``always``: by default (False) a captured pack is replayed only when its stream has no
    earlier work left to run, where the GPU waits for the host and the replay's shorter host
    time counts; behind queued work it is executed, back to back with that work on the GPU. True
    replays it behind queued work too (``$CUDNN_PY_EXECUTE_REPLAY=always`` starts so): less host
    time per call, a little more GPU time per launch.

    ``direct`` (experimental; False by default, ``$CUDNN_PY_EXECUTE_REPLAY=direct`` starts so): a
    captured pack is replayed by launching its kernels and memsets one by one, as read from the
    captured graph (`cudnn._lib.kernel_launch`), idle stream or not: cuDNN's own launches, not
    worked out again; packs whose graph cannot be read back exactly launch the graph as before.
    Packs captured before it was set keep the way they were captured with."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_execute_replay: expected True or False, got {enabled!r}")
    if max_graphs is not None and (isinstance(max_graphs, bool) or not isinstance(max_graphs, int)
                                   or max_graphs < 0):
        raise ValueError(f"set_execute_replay: max_graphs: expected an int >= 0, got {max_graphs!r}")
    for name, value in (("always", always), ("direct", direct)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"set_execute_replay: {name}: expected True or False, got {value!r}")
    _enabled[0] = enabled
    if max_graphs is not None:
        _max_graphs[0] = max_graphs
    if always is not None:
        _always[0] = always
    if direct is not None:
        _direct[0] = direct


def execute_replay() -> bool:
    """Whether executes are replayed from captured CUDA graphs (see `set_execute_replay`)."""
    return _enabled[0]


class Replay:
    """One pack's execute, captured: ``launch(handle)`` issues it on that handle's stream."""

    __slots__ = ("executable", "launches", "unasked", "__weakref__")

    def __init__(self, executable: int, launches: kernel_launch.Launches | None = None) -> None:
        self.executable = executable
        self.launches = launches  # its kernels to launch one by one (``direct`` replays), where readable
        self.unasked = 0  # launches left to decline without asking (the stream was busy)
        weakref.finalize(self, release.later, _destroy, executable)
        _live.add(self)

    def launch(self, handle: int, stream: int | None = None) -> bool:
        """Launch on ``handle``'s current stream (``stream``, when the caller has just set it);
        False when the caller must execute instead: replays are off, the stream is being
        captured, earlier work is still queued on it (unless replays are ``always``; and for
        `BUSY_EXECUTES` calls after that was found), or the launch failed (then always)."""
        if not (self.executable and _enabled[0]):
            return False
        if self.launches is not None and _direct[0]:
            return self._launch_kernels(handle, stream)
        unasked = self.unasked
        if unasked > 0:  # the stream was busy a moment ago: executing needs no capture check
            self.unasked = unasked - 1  # (threads racing here at worst ask a call early)
            return False
        if stream is None:
            stream = marshal.handle_stream(handle)
            if stream < 0:
                return False  # a handle cuDNN refuses: its execute says why
        if stream > 1 and _is_capturing(stream)[1]:  # 0 and 1 are the legacy stream, never captured
            return False
        if not _always[0] and _stream_busy(stream)[0]:  # work still queued (or an error the execute reports)
            self.unasked = BUSY_EXECUTES
            return False
        if _launch_graph(self.executable, stream)[0]:
            _log.debug("launching a captured execute failed; executing that pack from now on")
            self.executable = 0
            return False
        return True

    def _launch_kernels(self, handle: int, stream: int | None) -> bool:
        """A ``direct`` replay: the captured kernels launched on the stream, busy or not (False
        under a capture, where the caller executes, or where a launch failed: then the graph is
        launched from now on)."""
        if stream is None:
            stream = marshal.handle_stream(handle)
            if stream < 0:
                return False
        if stream > 1 and _is_capturing(stream)[1]:
            return False
        if self.launches.launch(stream):  # type: ignore[union-attr]
            return True
        _log.debug("launching a captured execute's kernels failed; that pack is executed this time and its "
                   "graph launched from now on")
        self.launches = None
        return False


def _destroy(executable: int) -> None:
    """A dead Replay's release (run by `release.drain`)."""
    if executable and not forked():  # a forked child's inherited CUDA objects are not its own
        cuda.destroy_graph_exec(executable)


class _Capturer:
    """A device's private stream and handle, on which packs are captured (one at a time)."""

    def __init__(self, device: int) -> None:
        previous = cuda.current_device()
        cuda.set_device(device)
        try:
            self.stream = cuda.create_stream()
            self.handle = Handle(device)
            self.handle.set_stream(self.stream)
        finally:
            cuda.set_device(previous)
        self.device = device


_capturers: dict[int, _Capturer] = {}
_lock = threading.Lock()  # a capturer's handle serves one capture at a time


def capture(plan: int, pack: int, handle: int, device: int | None, label: str = "") -> Replay | Literal[False] | None:
    """The execute of the backend pack at address ``pack`` on the plan at ``plan`` captured into
    a CUDA graph on ``device`` (the current one when None), for launches on ``handle``'s streams.
    False where it cannot be (cuDNN's execute of this plan is not capturable); None for "not
    now": replays are off, ``max_graphs`` are alive, ``handle``'s stream is being captured (a
    capture of ours would start inside the user's), or cuDNN's log callback takes warnings.
    The pack and plan must outlive the Replay."""
    if not _enabled[0] or len(_live) >= _max_graphs[0]:
        return None
    status, mask, callback = capi.get_log_callback()
    if status or (callback and mask & ~_ERRORS_ONLY):  # see the module's docstring
        return None
    global _launch_graph, _is_capturing, _stream_busy
    if _launch_graph is None:
        _launch_graph, _is_capturing, _stream_busy = cuda.graph_calls()
    stream = marshal.handle_stream(handle)
    if stream < 0 or (stream > 1 and _is_capturing(stream)[1]):
        return None
    cuda.release_unless_capturing(stream)  # dead replays among them: free before holding another
    execute = capi.execute_holding_gil()
    with _lock:
        try:
            current = cuda.current_device()
            where = current if device is None else device
            capturer = _capturers.get(where)
            if capturer is None or capturer.handle.closed:
                capturer = _capturers[where] = _Capturer(where)
            if where != current:
                cuda.set_device(where)
            try:
                executable, launches = cuda.capture_graph(
                    capturer.stream, lambda: execute(capturer.handle.address, plan, pack),
                    kernel_launch.from_graph if _direct[0] else None)
            finally:
                if where != current:
                    cuda.set_device(current)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the pack on cudnnBackendExecute
            _log.debug("%s: capturing an execute failed (%s); the pack is executed as before", label, exc)
            return False
    if not executable:
        _log.debug("%s: cuDNN's execute of this plan cannot be captured; executing it as before", label)
        return False
    return Replay(executable, launches)
