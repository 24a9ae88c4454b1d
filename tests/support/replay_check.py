"""Replay against execute, bit for bit: a pack replayed from its captured CUDA graph must write
exactly what ``cudnnBackendExecute`` of that pack writes.

`check_replay` runs the pack twice with replays off (two real executes). Where those agree bit
for bit (the engine is deterministic), it turns replays on, executes once more (the capture) and
once more again (the replay), and compares. A later execute that differs without a replay, or
again after a replay that differed, shows the engine nondeterministic after all (two executes of
an engine with atomics can agree by chance): no one answer to hold the replay to. Outputs are
poisoned with NaN before every run, so an output a replay does not write is caught. Used by the
fuzzer and the suite's run() helpers; ``launches()`` counts what was really replayed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

import cudnn
from cudnn.backend import replay

_launched = [0]
_original_launch = replay.Replay.launch


def _counted_launch(self: replay.Replay, handle: int, stream: int | None = None) -> bool:
    done = _original_launch(self, handle, stream)
    _launched[0] += bool(done)
    return done


replay.Replay.launch = _counted_launch  # type: ignore[method-assign]


def launches() -> int:
    """Replays launched so far in this process (by any test)."""
    return _launched[0]


def _poison(outs: Sequence[torch.Tensor]) -> None:
    for o in outs:
        if o.is_floating_point():
            o.fill_(float("nan"))
        else:
            o.fill_(-1 if o.dtype.is_signed else 0xAB)


def _snapshot(g: Any, pack: Mapping[Any, Any], ws: Any, outs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    _poison(outs)
    g.execute(pack, ws)
    torch.cuda.synchronize()
    return [o.clone() for o in outs]


def _same_bits(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return all(torch.equal(x.flatten().view(torch.uint8), y.flatten().view(torch.uint8)) for x, y in zip(a, b))


def _differences(want: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> str:
    parts = []
    for i, (w, g) in enumerate(zip(want, got)):
        differ = w.flatten().view(torch.uint8) != g.flatten().view(torch.uint8)
        if differ.any():
            gap = (w.double() - g.double()).abs().nan_to_num(float("inf")).max().item()
            size = w.double().abs().nan_to_num(0).max().item()
            parts.append(f"output {i} {list(w.shape)} {w.dtype}: {int(differ.sum())} bytes differ, "
                         f"largest difference {gap:.3g} (|executed| up to {size:.3g})")
    return "; ".join(parts)


def check_replay(g: Any, pack: Mapping[Any, Any], ws: Any, outs: Sequence[torch.Tensor]) -> str | None:
    """None when the pack's replay writes the bits its executes write (or its executes differ
    from each other, so there is no one answer to hold it to); else what differed. The
    outputs hold the last run's result afterwards (a replay's where the bits agreed). The pack
    must not read what it writes."""
    was = cudnn.execute_replay()
    try:
        cudnn.set_execute_replay(False)
        first = _snapshot(g, pack, ws, outs)
        second = _snapshot(g, pack, ws, outs)
        if not _same_bits(first, second):
            return None  # a nondeterministic engine (atomics): compared with tolerances elsewhere
        cudnn.set_execute_replay(True, always=True)  # the snapshot's poisoning is queued just before
        before = launches()
        for _ in range(3):  # counted executes, the capture, then replays
            got = _snapshot(g, pack, ws, outs)
            if _same_bits(first, got):
                continue
            if launches() == before:
                return None  # a plain execute differs: nondeterministic after all (two agreed by chance)
            cudnn.set_execute_replay(False)
            if not _same_bits(first, _snapshot(g, pack, ws, outs)):
                return None  # so does an execute after the replay: nondeterministic, as above
            return f"the replayed result differs from the executed one in its bits: {_differences(first, got)}"
        return None
    finally:
        cudnn.set_execute_replay(was, always=False)
