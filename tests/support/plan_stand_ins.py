"""Stand-ins for EXECUTION_PLAN descriptors in the CPU tests of building plans on several threads
and in worker processes (test_parallel_build.py, test_plan_workers.py): a plan whose finalize
sleeps (the GIL is released, as ctypes releases it around cudnnBackendFinalize) and fails for
chosen engines with the exception cuDNN's status would raise. The `fake_plans` fixture
(conftest.py) makes `backend_plan.plan_descriptor` give them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar, cast

from cudnn._graph.plans.candidates import Candidate
from cudnn._lib.status import exception_class
from cudnn.backend import plan as backend_plan

FAILING = {3, 7, 8}  # engines whose plans do not finalize
NOT_SUPPORTED = 3000


class FakePlan:
    """An EXECUTION_PLAN stand-in: records the thread that finalized it and whether it is open."""

    made: ClassVar[list[FakePlan]] = []

    def __init__(self, engine: int, label: str) -> None:
        self.engine, self.label = engine, label
        self.thread: int | None = None
        self.closed = False
        self.finalized = False
        FakePlan.made.append(self)

    def finalize(self) -> FakePlan:
        self.thread = threading.get_ident()
        time.sleep(0.002 * (11 - self.engine % 11))  # later engines finish first on several threads
        if self.engine in FAILING:
            raise exception_class(NOT_SUPPORTED)(NOT_SUPPORTED, f"{self.label}: finalizing EXECUTION_PLAN descriptor",
                                                 f"engine {self.engine} refuses")
        self.finalized = True
        return self

    def close(self) -> None:
        self.closed = True


def fake_plans(monkeypatch: Any) -> Iterator[list[FakePlan]]:
    """Plans of `FakePlan`; a plan's workspace is its engine index times 256."""
    FakePlan.made = []

    def make(handle: int, config: object, label: str, kernel_cache: object = None,
             device_property: object = None, retention: object = None) -> FakePlan:
        assert threading.current_thread() is threading.main_thread()  # attributes are set on the caller's thread
        return FakePlan(int(config), label)  # type: ignore[call-overload]

    monkeypatch.setattr(backend_plan, "plan_descriptor", make)
    monkeypatch.setattr(backend_plan, "workspace_size", lambda plan: plan.engine * 256)
    yield FakePlan.made


def candidates(n: int = 12) -> list[Candidate]:
    # config: the engine index (the fake plan reads it); engine, knobs and notes given, so none is read
    return [Candidate(i, i, {1: i % 3}, [], [], "A") for i in range(n)]  # type: ignore[arg-type]


def plan_of(c: Candidate) -> FakePlan:
    return cast(FakePlan, c.plan)


def outcome(cands: list[Candidate]) -> list[tuple[str, int | None, str, str]]:
    return [(c.name, c.workspace, type(c.error).__name__ if c.error else "", str(c.error) if c.error else "")
            for c in cands]
