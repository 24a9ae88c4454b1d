"""The base of every enum of the documented Python API, so that each prints as the official's do.

The official package's enums (pybind11 native enums: Python ``enum.Enum`` whose ``__repr__`` is
``Enum.__str__``) give ``data_type.HALF`` for ``str``, ``repr`` and ``format``, so f-strings and
the pytest ids built from them read ``diagonal_alignment_TOP_LEFT``. cudnn-py's stay IntEnums
(lowering is ``int(member)``, and code may compare them with ints) and print the same; a format
spec the official refuses, being numeric (``f"{x:d}"``, ``f"{x:03d}"``), formats the value.
"""

from __future__ import annotations

from enum import Enum, EnumMeta, IntEnum
from typing import TYPE_CHECKING, Any


class _NamedMembers(EnumMeta):
    """An enum class whose unknown member names are refused naming the closest valid ones."""

    if not TYPE_CHECKING:  # a checker knows the members and reports any other name
        def __getattr__(cls, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            try:
                return cls._member_map_[name]
            except KeyError:
                raise AttributeError(unknown_member(cls, name)) from None

    def __getitem__(cls, name: str) -> Any:
        try:
            return cls._member_map_[name]
        except KeyError:
            raise KeyError(unknown_member(cls, name)) from None


def unknown_member(cls: EnumMeta, name: object) -> str:
    """'data_type has no member 'HALFF'; did you mean HALF?', or the list of the members."""
    import difflib

    names = list(cls.__members__)
    head = f"{cls.__name__} has no member {name!r}"
    close = difflib.get_close_matches(str(name).upper(), names, n=3, cutoff=0.6) if isinstance(name, str) else []
    if close:
        return f"{head}; did you mean {' or '.join(close)}?"
    shown = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
    return f"{head}; its members: {shown}"


class CEnum(IntEnum, metaclass=_NamedMembers):
    """An IntEnum of the C headers: an unknown member name raises naming the closest valid ones."""


class ApiEnum(CEnum):
    """An IntEnum that prints by name: ``str``, ``repr`` and ``format`` give 'data_type.HALF'."""

    def __str__(self) -> str:
        return Enum.__str__(self)

    def __repr__(self) -> str:
        return Enum.__str__(self)

    def __format__(self, spec: str) -> str:
        """A spec that formats text formats the name, as the official's; any other (d, x, +) the value."""
        try:
            return format(Enum.__str__(self), spec)
        except ValueError:
            return int.__format__(int(self), spec)
