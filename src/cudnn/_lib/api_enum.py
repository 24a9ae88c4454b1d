"""The base of every enum of the documented Python API, so that each prints as the official's do.

The official package's enums (pybind11 native enums: Python ``enum.Enum`` whose ``__repr__`` is
``Enum.__str__``) give ``data_type.HALF`` for ``str``, ``repr`` and ``format``, so f-strings and
the pytest ids built from them read ``diagonal_alignment_TOP_LEFT``. cudnn-py's stay IntEnums
(lowering is ``int(member)``, and code may compare them with ints) and print the same; a format
spec the official refuses, being numeric (``f"{x:d}"``, ``f"{x:03d}"``), formats the value.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class ApiEnum(IntEnum):
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
