"""What ``pygraph.describe_plans()`` shows, and the progress line of long autotuning.

The report lists the candidate plans in the order ``get_plan_name_at_index`` counts them:
engine, knob choices, behaviour and numerical notes, the heuristic that proposed it, the
workspace once built, whether it was built, failed or selected, and after ``autotune`` the
measured median time. It prints as a text table and shows as an HTML table in Jupyter.
"""

from __future__ import annotations

import html
import sys
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._lib.enums import behavior_note, knob_type, numerical_note

if TYPE_CHECKING:
    from ..plans.candidates import Candidate
    from .pipeline import Pipeline

# The last autotuning table of each plan set (the pipeline's plans, weakly held).
_TUNED: weakref.WeakKeyDictionary[Any, Sequence[Any]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class PlanRow:
    """One candidate plan (``index`` None: a plan of another lowering, timed by autotune)."""

    index: int | None
    name: str
    engine: int | None  # the engine's global index; None for a plan restored from a cache
    knobs: dict[str, int]
    behavior_notes: list[str]
    numerical_notes: list[str]
    source: str  # the heuristic mode that proposed it, "manual", "cache" or "autotuned cache"
    workspace: int | None  # bytes, known once the plan is built
    status: str  # "selected", "built", "not built", or "failed: STATUS"
    time_ms: float | None = None  # median time measured by autotune
    lowering: str = ""  # the composite lowering (attention: unified or composite) where timed

    def cells(self) -> list[str]:
        """The row as the table's text cells."""
        return [
            "-" if self.index is None else str(self.index),
            (f"[{self.lowering}] " if self.lowering else "") + self.name,
            "-" if self.engine is None else str(self.engine),
            ", ".join(f"{k}={v}" for k, v in self.knobs.items()) or "-",
            ", ".join(self.behavior_notes + self.numerical_notes) or "-",
            "?" if self.workspace is None else _bytes(self.workspace),
            "" if self.time_ms is None else f"{self.time_ms * 1e3:.2f} us",
            self.status,
        ]


HEADERS = ["#", "plan", "engine", "knobs", "notes", "workspace", "median", "status"]


@dataclass
class PlanReport:
    """The candidate plans of a graph; ``str()`` is a table, ``_repr_html_`` one for Jupyter."""

    label: str
    rows: list[PlanRow]
    filtered_out: int = 0  # candidates the note / engine / workspace filters removed
    tuned: bool = False
    notes: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[PlanRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> PlanRow:
        return self.rows[i]

    def _footer(self) -> list[str]:
        out = list(self.notes)
        if self.filtered_out:
            out.append(f"{self.filtered_out} more filtered out (note, engine or workspace filters)")
        if not self.tuned:
            out.append("no times: autotune(variant_pack) measures every plan")
        return out

    def __str__(self) -> str:
        table = [HEADERS] + [r.cells() for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(HEADERS))]
        lines = [f"{self.label}: {len(self.rows)} candidate plan{'s' if len(self.rows) != 1 else ''}"]
        lines.extend("  ".join(c.ljust(w) if i in (1, 3, 4, 7) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in table)
        return "\n".join(lines + self._footer())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
        body = []
        for r in self.rows:
            style = ' style="font-weight:bold"' if r.status == "selected" else ""
            body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(c)}</td>" for c in r.cells()) + "</tr>")
        foot = "".join(f"<p>{html.escape(line)}</p>" for line in self._footer())
        return (f"<div><p><b>{html.escape(self.label)}</b>: {len(self.rows)} candidate plans</p>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{foot}</div>")


def remember(p: Pipeline, report: Sequence[Any]) -> None:
    """Keep the autotuning table of ``p``'s plans for `describe` (the graph's ``autotune`` calls it)."""
    _TUNED[p.plans()] = report


def describe(p: Pipeline, report: Sequence[Any] | None = None) -> PlanReport:
    """The report of ``p``'s candidate plans; times from ``report`` (an autotune table), or from
    the last autotuning of these plans."""
    plans = p.plans()
    if report is None:
        report = _TUNED.get(plans)
    lowering = ""
    name_of = getattr(p, "lowering_name", None)
    if callable(name_of):
        lowering = str(name_of() or "")
    times: dict[str, Any] = {}
    others: list[Any] = []
    for r in report or ():
        r_low = getattr(r, "lowering", "")
        if not r_low or not lowering or r_low == lowering:
            times[r.name] = r
        else:
            others.append(r)
    selected = plans.selected
    rows = []
    cands = plans.candidates
    for i, c in enumerate(cands):
        tuned = times.get(c.name)
        rows.append(_row(i, c, c is selected, tuned.time_ms if tuned is not None else None,
                         lowering if others else ""))
    rows.extend(PlanRow(None, r.name, None, {}, [], [], "autotune", r.workspace or None,
                        "timed" if r.time_ms is not None else f"failed: {r.error}", r.time_ms, r.lowering)
                for r in others)
    return PlanReport(p.label, rows, len(plans.all) - len(cands), report is not None)


def _row(index: int, c: Candidate, selected: bool, time_ms: float | None, lowering: str) -> PlanRow:
    if c.error is not None:
        status = f"failed: {getattr(c.error, 'status_name', type(c.error).__name__)}"
    elif selected and c.plan is not None:
        status = "selected"
    else:
        status = "built" if c.plan is not None else "not built"
    return PlanRow(index, c.name, c.engine_index if c.config is not None else None,
                   {_enum_name(knob_type, k): v for k, v in sorted(c.knobs.items())},
                   [_enum_name(behavior_note, n) for n in c.behavior_notes],
                   [_enum_name(numerical_note, n) for n in c.numerical_notes],
                   c.source, c.workspace, status, time_ms, lowering)


def _enum_name(kind: Any, value: Any) -> str:
    try:
        return str(kind(int(value)).name)
    except ValueError:
        return str(int(value))


def _bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


# -- progress ---------------------------------------------------------------------------------

class Progress:
    """A progress line for work over many plans: tqdm's bar when tqdm is installed, else one
    rewritten line on stderr. ``enabled`` None shows it only once the work has run for
    ``delay`` seconds (short runs print nothing); True always; False never."""

    def __init__(self, label: str, enabled: bool | None = None, delay: float = 1.0, use_tqdm: bool = True) -> None:
        self.label, self.enabled, self.delay = label, enabled, delay
        self.began = time.perf_counter()
        self._tqdm: Any = None
        self._bar: Any = None
        self._plain = False
        if use_tqdm and enabled is not False:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            self._tqdm = tqdm

    def step(self, i: int, n: int, name: str) -> None:
        """Plan ``i`` of ``n`` (0-based), called ``name``, is about to run."""
        if self.enabled is None and time.perf_counter() - self.began > self.delay:
            self.enabled = True
        if not self.enabled:
            return
        if self._tqdm is not None:
            if self._bar is None:
                self._bar = self._tqdm(total=n, desc=self.label, unit="plan", file=sys.stderr, leave=False)
            if self._bar.total != n:
                self._bar.reset(total=n)
            self._bar.n = i
            self._bar.set_postfix_str(name[:40], refresh=True)
        else:
            self._plain = True
            print(f"\r{self.label}: plan {i + 1}/{n} {name[:40]:40s}", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        """End the line (or close the bar)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._plain:
            print(file=sys.stderr, flush=True)
            self._plain = False
