"""CPU tests: fake backends are given small ints as cuDNN handles."""

from __future__ import annotations

from collections.abc import Iterator

import plan_stand_ins
import pytest

from cudnn.backend.handle import note_raw

FAKE_HANDLES = (0x1, 0x1000, 0x1234)  # what the fake backends' tests pass as handle=


@pytest.fixture(autouse=True)
def fake_handles(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the fake handles live ones, as ``cudnn.legacy.cudnnCreate`` registers its handles
    (an int no handle was made for is refused before cuDNN reads it), then forget them. A
    build's release point asks cuDNN for its handle's stream: for a fake handle it does nothing
    (cuDNN would read whatever memory the int points at)."""
    from cudnn._graph.build import pipeline

    real = pipeline.release_point
    monkeypatch.setattr(pipeline, "release_point", lambda handle: None if handle in FAKE_HANDLES else real(handle))
    for address in FAKE_HANDLES:
        note_raw(address, True)
    yield
    for address in FAKE_HANDLES:
        note_raw(address, False)


@pytest.fixture
def fake_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[plan_stand_ins.FakePlan]]:
    """EXECUTION_PLAN stand-ins (plan_stand_ins.py) for the candidates' plans."""
    yield from plan_stand_ins.fake_plans(monkeypatch)
