"""What ``pygraph.serialize`` / ``deserialize`` add to the plan store: the official return
type (a list of byte values, or ``bytes`` on request), the 1.32 flags ``include_kernels`` /
``enforce_precompiled``, and telling a serialized plan from a printed graph's JSON.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..._lib.enums import behavior_note
from ..model.arguments import as_bool
from ..model.graph_errors import SerializationNotSupportedError
from ..text.graph_from_json import rebuild
from . import plan_reuse
from .plan_bytes import PlanRecord

if TYPE_CHECKING:
    from ..build.pipeline import Pipeline
    from ..model.graph_view import GraphView


def serialize(p: Pipeline, as_bytes: bool, include_kernels: bool) -> list[int] | bytes:
    """The selected plan's record, marked with what ``enforce_precompiled`` checks."""
    as_bytes = as_bool(as_bytes, "serialize", "as_bytes")
    include_kernels = as_bool(include_kernels, "serialize", "include_kernels")
    cand = p.plans().require_selected()
    rec = plan_reuse.record(p, cand, False)
    rec.extra["include_kernels"] = include_kernels
    if cand.config is not None:  # notes are known for plans made here (not for restored ones)
        rec.extra["runtime_compiled"] = int(behavior_note.RUNTIME_COMPILATION) in {int(n) for n in cand.behavior_notes}
    data = rec.to_bytes()
    return data if as_bytes else list(data)


def deserialize(p: Pipeline, data: Any, enforce_precompiled: bool) -> Pipeline:
    """Restore a plan record (into ``p``, or the pipeline of the lowering it was built with);
    with ``enforce_precompiled`` refuse one that needs compiling."""
    if not isinstance(data, (bytes, bytearray, str, list, tuple)):
        raise TypeError(f"deserialize: pyobj: expected the bytes or list of ints that serialize() returns, "
                        f"or a graph's JSON str; got {type(data).__name__}")
    if isinstance(data, (list, tuple)):
        if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in data):
            raise TypeError("deserialize: pyobj: a list must hold byte values (ints 0..255), as serialize() returns")
        data = bytes(data)
    if enforce_precompiled:
        rec = PlanRecord.from_bytes(data)
        if not rec.extra.get("include_kernels", True):
            raise SerializationNotSupportedError(f"{p.label}: enforce_precompiled=True, but the plan "
                                                 f"{rec.plan_name!r} was serialized with "
                                                 "include_kernels=False")
        if rec.extra.get("runtime_compiled"):
            raise SerializationNotSupportedError(f"{p.label}: enforce_precompiled=True, but the plan "
                                                 f"{rec.plan_name!r} uses an engine that compiles its "
                                                 "kernels when the plan is made (RUNTIME_COMPILATION)")
    return plan_reuse.deserialize(p, data)


def is_graph_json(text: str) -> bool:
    """Whether ``text`` is a graph's JSON (``str(graph)``) rather than a serialized plan."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(raw, dict) and "nodes" in raw and "format" not in raw


def graph_from_json(graph: GraphView, text: str) -> None:
    """Fill the empty ``graph`` with the graph printed as ``text`` (`text.graph_from_json`)."""
    rebuild(graph, json.loads(text))
