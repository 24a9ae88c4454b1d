"""``cudnn.wrapper.get_default_handle`` / ``destroy_default_handle``, as the official module has them.

The handle is the one ``cudnn.Graph(handle="auto")`` and graphs built without a handle use:
this thread's handle for the stream's device (`backend.handle.default_handle`), set to the
stream asked for. ``destroy_default_handle`` destroys every handle handed out here; the next
call (or graph) makes a new one.
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any

from ..backend.handle import Handle, default_handle

_handed_out: list[Handle] = []
_lock = threading.Lock()


def get_default_handle(stream: Any = None) -> Handle:
    """This thread's cuDNN handle for the stream's device, set to issue work on ``stream``: a
    torch / CuPy stream object or a raw ``cudaStream_t`` int. Without a stream, torch's current
    stream when torch is in use (as the official helper), else the handle's stream is kept."""
    from ..interop.streams import stream_ptr

    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            stream = torch.cuda.current_stream()
    try:
        raw = None if stream is None else stream_ptr(stream)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"get_default_handle: stream: {exc}") from None
    where = getattr(stream, "device", None)  # torch: .index; CuPy: .id; else the current device
    device = getattr(where, "index", getattr(where, "id", None))
    handle = default_handle(device)
    with _lock:
        if not any(h is handle for h in _handed_out):
            _handed_out.append(handle)
    if raw is not None:
        handle.set_stream(raw)
    return handle


def destroy_default_handle() -> None:
    """Destroy the handles get_default_handle gave out (idempotent); later calls make new ones."""
    with _lock:
        handles, _handed_out[:] = list(_handed_out), []
    for handle in handles:
        handle.close()


atexit.register(destroy_default_handle)
