"""The graph's JSON text, in the layout of the documented output.

Keys sorted, four-space indent, and arrays of integers kept on one line (``[8,64,56,56]``)
so that dims and strides stay readable; other arrays get one element per line.
"""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(value: Any, indent: int = 4) -> str:
    """Pretty JSON (the graph print)."""
    return _dump(value, indent, 0)


def compact(value: Any) -> str:
    """One-line JSON with sorted keys and no spaces (the tensor repr)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_default)


def _default(value: Any) -> Any:
    name = getattr(value, "name", None)
    if name is not None:
        return name
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _scalar(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(str(value))
    return json.dumps(value, default=_default)


def _dump(value: Any, indent: int, level: int) -> str:
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {_dump(v, indent, level + 1)}" for k, v in sorted(value.items())]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        if isinstance(value[0], int) and not isinstance(value[0], bool):
            return "[" + ",".join(_scalar(v) for v in value) + "]"
        items = [f"{inner}{_dump(v, indent, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return _scalar(value)
