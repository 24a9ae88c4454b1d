"""Arguments of op calls and tensor setters, converted as the official bindings convert them.

What the official signature declares a parameter as decides what it takes (pybind11's type
casters, include/pybind11/cast.h; the 1.32 wheel's Python layer reads ``None`` as not given):

- ``bool``: True or False; None is False; a number or a numpy / framework scalar by its truth
  value (pybind11 takes any type that defines ``__bool__``); a str, a list, a tensor is refused.
- ``int``: an int (a bool too) or anything with ``__index__`` (numpy ints); a float or a str is
  refused, never truncated. A user's IntEnum is an int (``uid=Uid.Q``).
- ``float``: a float, an int, or anything with ``__float__`` / ``__index__``; a str is refused.
- a list of ints: any sequence but a str, of ints as above.
- ``optional``: None is "not given".

What is refused raises ``TypeError``, as the official does, naming the op, the argument, what
was expected and what was given. One thing more is refused than the official refuses: one of
cudnn's own enums where a number or a flag is expected (a shifted positional argument,
``swish(x, data_type.FLOAT)``, which the official reads by its value: a silent wrong result).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Set
from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")
Converter = Callable[[Any], Any]  # the value, converted; raises _Refused


class _Refused(Exception):
    """The value is not of the declared type (the helpers turn it into the TypeError)."""


def _cudnn_enum(value: Any) -> bool:
    """A member of one of cudnn's own enums (data_type, heur_mode, ...), never a number here."""
    return isinstance(value, Enum) and type(value).__module__.partition(".")[0] == "cudnn"


def _refuse(at: str, arg: str, expected: str, value: Any) -> TypeError:
    got = f"{value!r} (a cudnn enum; check the argument order)" if _cudnn_enum(value) else repr(value)
    return TypeError(f"{at + ': ' if at else ''}{arg}: expected {expected}, got {got}")


def _bool(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if _cudnn_enum(value) or not hasattr(type(value), "__bool__"):
        raise _Refused
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - what pybind11 refuses: a __bool__ that raises (a tensor of many elements)
        raise _Refused from None


def _int(value: Any) -> int:
    if type(value) is int:  # the common case; bool and enum members are other types
        return value
    if _cudnn_enum(value) or not hasattr(type(value), "__index__"):
        raise _Refused
    try:
        return operator.index(value)
    except TypeError:  # numpy's bool has an __index__ that refuses
        raise _Refused from None


def _float(value: Any) -> float:
    if _cudnn_enum(value) or not (hasattr(type(value), "__float__") or hasattr(type(value), "__index__")):
        raise _Refused
    try:
        return float(value) if hasattr(type(value), "__float__") else float(operator.index(value))
    except (TypeError, ValueError, OverflowError):
        raise _Refused from None


def _int_list(value: Any) -> list[int]:
    if type(value) is list or type(value) is tuple:
        ints = list(value)
        if all(type(v) is int for v in ints):  # the common case, as `_int` checks each
            return ints
    if isinstance(value, (str, bytes, Mapping, Set)) or not hasattr(value, "__iter__"):
        raise _Refused
    return [_int(v) for v in value]


# declared type -> (what the message says is expected, converter)
KINDS: dict[str, tuple[str, Converter]] = {
    "bool": ("True or False", _bool),
    "int": ("an int", _int),
    "float": ("a float", _float),
    "int list": ("a list of ints", _int_list),
}


def convert(kind: str, value: Any, at: str, arg: str) -> Any:
    """``value`` as the official converts an argument declared ``kind`` (a key of KINDS);
    ``at`` names the op ("conv_fprop 'c1'"), ``arg`` the argument."""
    expected, conv = KINDS[kind]
    try:
        return conv(value)
    except _Refused:
        raise _refuse(at, arg, expected, value) from None


def as_bool(value: Any, at: str, arg: str) -> bool:
    """A ``bool`` parameter: None is False (see the module docstring)."""
    return bool(convert("bool", value, at, arg))


def as_int(value: Any, at: str, arg: str) -> int:
    """An ``int`` parameter: floats and strs are refused, never truncated."""
    return int(convert("int", value, at, arg))


def as_float(value: Any, at: str, arg: str) -> float:
    """A ``float`` parameter: ints are fine."""
    return float(convert("float", value, at, arg))


def as_int_list(value: Any, at: str, arg: str) -> list[int]:
    """A list-of-ints parameter (``std::vector<int64_t>``): any sequence of ints (a new list)."""
    return convert("int list", value, at, arg)


def optional(conv: Callable[[Any, str, str], T], value: Any, at: str, arg: str) -> T | None:
    """An optional parameter (``std::optional<T>``, or ``object`` defaulting to None): None is
    not given; anything else goes through ``conv`` (as_int, as_float, ...)."""
    return None if value is None else conv(value, at, arg)


def exact_bool(value: Any, at: str, arg: str) -> bool:
    """A flag the official checks itself to be a Python bool (sdpa's ``is_inference`` and
    ``generate_stats``: ``py::isinstance<py::bool_>``); nothing is converted."""
    if not isinstance(value, bool):
        raise _refuse(at, arg, "True or False", value)
    return value


def _member_hint(value: Any, kind: type[Enum]) -> str:
    """'; did you mean cudnn.heur_mode.A?' for a str that names a member of ``kind`` (in any case)."""
    if isinstance(value, str):
        member = next((m for m in kind.__members__ if m.lower() == value.strip().lower()), None)
        if member is not None:
            return f"; did you mean cudnn.{kind.__name__}.{member}?"
    return ""


def as_enum(value: Any, kind: type[Enum], at: str, arg: str) -> Any:
    """One of cudnn's enums (``build_plan_policy``, ...): a member, or the int of one (what
    ``kind(value)`` takes); anything else is refused naming the members."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        members = ", ".join(f"cudnn.{kind.__name__}.{m}" for m in kind.__members__)
        raise TypeError(f"{at}: {arg}: expected one of {members}; got {value!r}{_member_hint(value, kind)}") from None


def as_enum_list(value: Any, kind: type[Enum], at: str, arg: str) -> list[Any]:
    """A list of one of cudnn's enums (``std::vector<heur_mode>``): a list, tuple or other
    iterable of its members. A bare member, a str or a number is refused, as pybind11 refuses
    them, and so is an element that is no member (the message names it and its position)."""
    name = f"cudnn.{kind.__name__}"
    if isinstance(value, (str, bytes, Mapping, Enum)) or not hasattr(value, "__iter__"):
        one = "; one mode goes in a list too: [" + f"{name}.{value.name}]" if isinstance(value, kind) else ""
        raise TypeError(f"{at}: {arg}: expected a list of {name}, got {value!r}{one}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            members = ", ".join(kind.__members__)
            raise TypeError(f"{at}: {arg}[{i}]: expected a {name} ({members}), got {item!r}"
                            f"{_member_hint(item, kind)}")
    return items


def check_variant_pack(value: Any, at: str, arg: str, hint: str = "") -> None:
    """A variant pack: a dict of cudnn.tensor (or uid, or name) -> buffer; ``hint`` ends the message."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{at}: {arg}: expected a dict of cudnn.tensor (or uid, or name) -> buffer, "
                        f"got {type(value).__name__}{hint}")


def check_handle_type(value: Any, at: str) -> None:
    """A handle argument's type: None, a cudnn handle, or a raw int (whether it is live is the
    caller's to check where it uses it)."""
    from ...backend.handle import Handle

    if value is not None and (isinstance(value, bool) or not isinstance(value, (Handle, int))):
        raise TypeError(f"{at}: handle: expected a cudnn handle (from cudnn.create_handle()) or None, "
                        f"got {type(value).__name__}")
