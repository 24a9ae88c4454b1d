"""The backend's attribute names as plain ints, for the code that sets and reads them.

``enums.cudnnBackendAttributeName_t`` is an IntEnum of some 400 members: building it takes
longer than the rest of a first graph's enums together, and every descriptor the lowering
makes names its attributes. ``A.CUDNN_ATTR_TENSOR_DIMENSIONS`` here is the same value read from
the header table (an int, which the backend takes as is); `name` gives an attribute's member
name for messages, and `attribute_id` accepts what `Descriptor.set` and `get` are given (an
int, a member of the enum, or a member name), so the enum is built only for a caller who
reads it.
"""

from __future__ import annotations

import operator
from types import SimpleNamespace
from typing import Any

from .enums import C_ENUMS

ENUM = "cudnnBackendAttributeName_t"
_TABLE: dict[str, int] = C_ENUMS[ENUM]

A: Any = SimpleNamespace(**_TABLE)  # A.CUDNN_ATTR_...: the member's value, a plain int

_NAMES: dict[int, str] = {}  # value -> the first member name with it, as the enum names its members
for _name, _value in _TABLE.items():
    _NAMES.setdefault(_value, _name)
VALUES = frozenset(_NAMES)  # every attribute the headers have


def name(attr: int) -> str | None:
    """The member name of attribute ``attr`` (None if the headers have no such attribute)."""
    return _NAMES.get(int(attr))


def attribute_id(attr: Any) -> int:
    """The int value of an attribute given as an int, a member of the enum or a member name;
    ValueError for a name or value the headers do not have (TypeError for anything else)."""
    if type(attr) is int:
        value = attr
    elif isinstance(attr, str):
        found = _TABLE.get(attr)
        if found is None:
            raise ValueError(f"unknown {ENUM} name {attr!r}")
        return found
    else:
        try:
            value = operator.index(attr)  # a member of the enum, or another integer type (numpy's)
        except TypeError:
            raise TypeError(f"an attribute is an int, a {ENUM} member or a member name, "
                            f"got {type(attr).__name__}") from None
    if value not in VALUES:
        raise ValueError(f"{value} is not a valid {ENUM}")
    return value
