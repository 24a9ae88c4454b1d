"""IntEnums built on first use from the plain tables of a generated module.

Creating an IntEnum costs about 10 us a member and the cuDNN headers have some 2,000
members, so building every class when `enums.py` was imported cost about 20 ms, most of it
for enums a program never reads. The generated modules (enums.py, legacy_enums.py) hold
dictionaries instead and hand them to a `LazyEnums`, which is the module's ``__getattr__``
(PEP 562): an enum is built the first time its name is read and then stored in the module,
so later reads are plain attribute lookups and every reader gets the same class.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import IntEnum
from typing import Any

from .api_enum import ApiEnum, CEnum


class LazyEnums:
    """The IntEnums of one generated module: name -> {member: value}, built when first read."""

    def __init__(self, module: str, tables: dict[str, dict[str, int]], docs: dict[str, str],
                 printed_by_name: Iterable[str] = ()) -> None:
        self._module = module
        self._tables = tables
        self._docs = docs
        self._by_name = frozenset(printed_by_name)

    def build(self, name: str) -> Any:
        """The module's ``__getattr__``: build enum ``name``, store it in the module, return it.

        Typed ``Any`` so that type checkers accept ``enums.data_type.HALF`` (they cannot see
        members of a class made at run time)."""
        members = self._tables.get(name)
        if members is None:
            raise AttributeError(f"module {self._module!r} has no attribute {name!r}")
        # the documented API's enums print by name as the official's do ('data_type.HALF'); C enums as ints
        base: type[IntEnum] = ApiEnum if name in self._by_name else CEnum
        enum = base(name, members, module=self._module, qualname=name)  # type: ignore[call-arg,arg-type]
        enum.__doc__ = self._docs.get(name, f"{name} of the cuDNN headers, with the C member names.")
        # Two threads may build the same enum at once; setdefault keeps the first one stored,
        # so `isinstance` and identity checks agree everywhere.
        return vars(sys.modules[self._module]).setdefault(name, enum)

    def dir(self) -> list[str]:
        """The module's ``__dir__``: its own names and every enum, built or not."""
        return sorted(set(vars(sys.modules[self._module])) | set(self._tables))
