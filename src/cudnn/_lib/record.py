"""Plain record classes: what ``@dataclass`` gives (field-wise ``==``, ``repr``, ``hash`` for the
frozen ones), for classes that list their fields in ``__slots__`` and set them in ``__init__``.

Defining a dataclass generates and compiles its methods, about half a millisecond a class
(a frozen one twice that); the records a first graph imports cost some 10 ms that way. A
``Record`` subclass costs what a plain class costs. A record whose methods cache values in
its ``__dict__`` (``functools.cached_property``) lists ``"__dict__"`` among its slots.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Record:
    """Base of plain records: fields are the ``__slots__`` (``"__dict__"`` aside), in order.
    ``frozen = True`` makes instances hashable by their fields, as a frozen dataclass is; the
    fields of such a record are not to be reassigned."""

    __slots__ = ()
    fields: ClassVar[tuple[str, ...]] = ()
    frozen: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = tuple(n for n in vars(cls).get("__slots__", ()) if n != "__dict__")
        cls.fields = cls.fields + own
        if not cls.frozen:
            # mutable and compared by value: unhashable, as such a dataclass is
            cls.__hash__ = None  # type: ignore[assignment,method-assign]

    def _field_values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.fields)

    def as_dict(self) -> dict[str, Any]:
        """The fields by name (shallow, unlike ``dataclasses.asdict``)."""
        return {name: getattr(self, name) for name in self.fields}

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (``dataclasses.replace``): every field is an ``__init__`` argument."""
        return type(self)(**{**self.as_dict(), **changes})

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._field_values() == other._field_values()

    def __hash__(self) -> int:
        return hash(self._field_values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.fields)
        return f"{type(self).__qualname__}({shown})"
