"""Handles and descriptors of the classic API as opaque Python values.

``cudnnCreateTensorDescriptor()`` returns an `Opaque` that knows its C type and whether it
was destroyed, so passing a filter descriptor where a tensor descriptor is due, or a
descriptor after ``cudnnDestroy...``, is a Python exception instead of undefined behaviour
in C. As in C, nothing is freed for you: call the matching ``cudnnDestroy...``.
"""

from __future__ import annotations

import threading
import weakref

from .._lib.status import DescriptorClosedError
from ..backend.handle import note_raw

_HANDLE = "cudnnHandle_t"  # raw ints of these may also be given to the graph API


class Opaque:
    """A cuDNN handle or descriptor: the C pointer and its C type name."""

    __slots__ = ("__weakref__", "_destroyed", "_value", "ctype")

    def __init__(self, ctype: str, value: int) -> None:
        self.ctype = ctype
        self._value = int(value)
        self._destroyed = False

    @property
    def value(self) -> int:
        """The C pointer; raises DescriptorClosedError once destroyed."""
        if self._destroyed:
            raise DescriptorClosedError(f"this {self.ctype} ({self._value:#x}) was destroyed")
        return self._value

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    @property
    def _as_parameter_(self) -> int:  # lets raw ctypes calls take it too
        return self.value

    @property
    def destroyed(self) -> bool:
        """Whether the object was destroyed (its cudnnDestroy* function was called)."""
        return self._destroyed

    def __repr__(self) -> str:
        state = ", destroyed" if self._destroyed else ""
        return f"<{self.ctype} {self._value:#x}{state}>"


class _Null:
    """Explicit NULL for a handle or descriptor parameter (None is refused where one is required)."""

    _instance: _Null | None = None

    def __new__(cls) -> _Null:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()

# Live objects by (C type, pointer): a descriptor handed back by a getter
# (cudnnGetRNNDescriptor_v8's dropoutDesc) is the object the caller created.
_live: weakref.WeakValueDictionary[tuple[str, int], Opaque] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def adopt(ctype: str, value: int) -> Opaque:
    """The live object for a pointer cuDNN returned, created if new."""
    key = (ctype, int(value))
    with _lock:
        obj = _live.get(key)
        if obj is None:
            obj = _live[key] = Opaque(ctype, value)
            if ctype == _HANDLE:
                note_raw(key[1], True)
        return obj


def mark_destroyed(obj: Opaque | None, ctype: str, value: int) -> None:
    """After a successful cudnnDestroy...: the object (or the one registered for the pointer)."""
    with _lock:
        registered = _live.pop((ctype, int(value)), None)
    if ctype == _HANDLE:
        note_raw(int(value), False)
    for target in (obj, registered):
        if target is not None:
            target._destroyed = True
