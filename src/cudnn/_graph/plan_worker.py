"""A worker process of ``build_plans(ALL)`` (`build.workers` starts it): the graph of the
request rebuilt from its printed JSON, then, for each plan asked for, cuDNN's JSON of that plan
finalized from its engine and knob choices.

It rebuilds the graph as users declare one, through ``pygraph``, so it sits above it; the pool
that starts it (`build.workers`) names it by module and never imports it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import IO, Any

from .._lib import cuda
from .._lib.status import CudnnError
from ..backend import engine as eng
from ..backend import plan as backend_plan
from .build.pipeline import Pipeline
from .build.workers import identity
from .plans.candidates import Candidate
from .pygraph import pygraph


class Server:
    """In a worker: the graph of the request, rebuilt; finalizes plans of it by engine and knobs."""

    def __init__(self, request: dict[str, Any]) -> None:
        cuda.set_device(int(request["device"]))
        g: pygraph = pygraph()
        g.deserialize(request["graph"])
        g.validate()
        self.graph, self.pipeline = g, Pipeline(g)
        self.identity = identity(self.pipeline)

    def build(self, engine_index: int, knobs: Sequence[tuple[int, int]]) -> str | None:
        """cuDNN's JSON of the plan of engine ``engine_index`` with ``knobs``; None if it did not build."""
        p = self.pipeline
        c: Candidate | None = None
        try:
            e = eng.engine(p.op_graph(), int(engine_index), self.graph.sm_count, p.label)
            try:
                c = Candidate(eng.engine_config(e, {int(k): int(v) for k, v in knobs}, p.label), source="worker")
            except BaseException:
                e.close()
                raise
            return backend_plan.plan_json(c.build(p.build_handle_ptr(), p.label))
        except CudnnError:
            return None  # the caller builds it itself and raises or keeps cuDNN's error there
        finally:
            if c is not None:
                if c.plan is not None:
                    c.plan.close()
                assert c.config is not None
                c.config.close()


def serve(requests: IO[str], answers: IO[str]) -> None:
    """A worker's loop: the graph request, then a plan per item line, until its input ends."""

    def answer(message: Any) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    line = requests.readline()
    if not line:
        return
    try:
        server = Server(json.loads(line))
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which builds the plans itself
        answer({"failed": f"{type(exc).__name__}: {exc}"})
        return
    answer({"identity": server.identity})
    for line in requests:
        engine_index, knobs = json.loads(line)["item"]
        answer({"plan": server.build(engine_index, knobs)})


def main() -> int:
    """``python -m cudnn._graph.plan_worker``: serve requests on stdin, answers on stdout. What
    else the process prints (cuDNN's or CUDA's messages) goes to stderr, not among the answers."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
