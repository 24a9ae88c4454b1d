"""A keyword a callable does not take is refused by name, with the closest one it takes.

``relu(nmae=...)``, ``pygraph(io_dtype=...)`` and ``g.tensor(dims=...)`` all raise the same
``TypeError`` (the class Python and the official's pybind11 raise):
``pygraph.tensor(): 'dims' is not an argument of pygraph.tensor; did you mean 'dim'? (its
arguments: ...)``. Op methods check their keywords as they adapt positional arguments
(`method_table.adapt`); the other public methods are wrapped once, by `name_unknown_keywords` on
their class, and look at the keywords only when Python has refused the call.

``pygraph.execute``, the hot path, is left out: the wrapper's extra frame, or a ``**unknown``
catch-all (an empty dict per call, and calls CPython no longer specializes), would add host time
to every call. There, Python's own TypeError names the keyword, without a suggestion.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def unknown_keyword(name: str, keyword: str, valid: Iterable[str]) -> TypeError:
    """The error for a keyword ``name`` does not take, naming the closest valid one."""
    import difflib

    valid = list(valid)
    close = difflib.get_close_matches(keyword, valid, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return TypeError(f"{name}(): {keyword!r} is not an argument of {name}{hint} "
                     f"(its arguments: {', '.join(valid)})")


def keyword_names(fn: Callable[..., Any]) -> list[str] | None:
    """The names ``fn`` takes by keyword, ``self`` aside; None when it takes any (``**kwargs``)."""
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def named(name: str, fn: F) -> F:
    """``fn`` refusing an unknown keyword by name (`unknown_keyword`). The keywords are looked at
    only after Python refused the call: a call with the right keywords costs one more frame, and
    ``fn``'s signature is read then, not at import."""
    if fn.__code__.co_flags & inspect.CO_VARKEYWORDS:  # it takes any keyword
        return fn

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError:
            valid = keyword_names(fn) or []
            for key in kwargs:
                if key not in valid:  # Python refused the call before running fn
                    raise unknown_keyword(name, key, valid) from None
            raise

    return checked  # type: ignore[return-value]


def name_unknown_keywords(cls: C, name: str, skip: Iterable[str] = (), only: Iterable[str] | None = None) -> C:
    """Make ``cls``'s constructor (published as ``name``) and public methods (``name.method``)
    refuse an unknown keyword by name (`named`): those in ``only`` when given, less ``skip``."""
    left_out, chosen = set(skip), None if only is None else set(only)
    for attr, value in list(vars(cls).items()):
        public = not attr.startswith("_") or attr == "__init__"
        if not inspect.isfunction(value) or attr in left_out or not (public if chosen is None else attr in chosen):
            continue
        setattr(cls, attr, named(name if attr == "__init__" else f"{name}.{attr}", value))
    return cls
