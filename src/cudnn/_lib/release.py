"""Releasing CUDA and cuDNN objects at points cudnn-py chooses, never inside a finalizer.

A ``weakref.finalize`` callback runs wherever the garbage collector (or a reference count
reaching zero) happens to run: in the Python prologue of another library's call, between the
begin and the end of a stream capture, while the interrupted code holds a lock. A CUDA or cuDNN
call made there can deadlock or break the call it interrupts. cuda-bindings, for one, resolves
its driver symbols on its first call while holding a non-reentrant lock, and that resolution
runs Python code (``os.getenv``); a collection there whose finalizer called back into
cuda-bindings waited for that lock for ever.

So an owner's finalizer only queues its release (``weakref.finalize(obj, later, destroy,
*args)``): no C call, nothing that can block. `drain` performs the queue where cudnn-py knows it
is safe: before it captures a pack, when it creates a handle, when it lowers a graph to build
it (unless the handle's stream is being captured), on ``cudnn.release_pending()`` and at
interpreter exit. ``close()`` of an owner releases at once through `now`: a call made on purpose.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

_queue: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()  # append/popleft are atomic
_exiting = [False]
_log = logging.getLogger("cudnn")


def later(release: Callable[..., Any], *args: Any) -> None:
    """For finalizers: queue ``release(*args)`` for the next `drain` (after interpreter exit
    began, run it at once: no other call is left to interrupt)."""
    if _exiting[0]:
        _run(release, args)
    else:
        _queue.append((release, args))


def drain() -> int:
    """Run every queued release, in the order queued (including those queued meanwhile); the
    number run. Call only where no capture of this thread is open and no lock is held that a
    release could need."""
    done = 0
    while _queue:
        try:
            release, args = _queue.popleft()
        except IndexError:  # another thread took the last one
            break
        _run(release, args)
        done += 1
    return done


def release_pending() -> int:
    """``cudnn.release_pending()``: release now the CUDA and cuDNN objects (plans, packs,
    handles, captured executes, device buffers) whose Python owners were collected, rather than
    at cudnn-py's next build, capture or handle; how many. Not inside a CUDA-graph capture."""
    return drain()


def pending() -> int:
    """How many releases are queued (objects unreachable but not yet released)."""
    return len(_queue)


def now(finalizer: weakref.finalize) -> None:
    """An owner's explicit ``close()``: run the release its finalizer would queue, here and now,
    once (a finalizer already run or detached does nothing)."""
    info = finalizer.detach()
    if info is None:
        return
    _, callback, args, _ = info
    if callback is later:
        release, *rest = args
        _run(release, tuple(rest))
    else:
        _run(callback, tuple(args))


def _run(release: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        release(*args)
    except Exception:  # noqa: BLE001 - one failed release must not stop the others (nor the caller)
        _log.debug("releasing %s failed", getattr(release, "__qualname__", release), exc_info=True)


def _at_exit() -> None:
    _exiting[0] = True
    drain()


atexit.register(_at_exit)
