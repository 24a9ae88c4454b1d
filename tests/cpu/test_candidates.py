"""Engine-config candidates read what their config says of itself only when asked: heuristics
offer dozens of configs per graph and a build looks at one or two of them."""

from __future__ import annotations

import pytest

import cudnn
from cudnn.graph.plans import Candidate, Filters


class _Unreadable:
    """Stands for an engine config that must not be read: any backend read of it fails."""


def test_filters_read_a_candidate_only_for_what_they_check() -> None:
    c = Candidate(_Unreadable(), source="A")  # type: ignore[arg-type]
    assert Filters().keeps(c)  # no filter set: nothing read
    for name, value in (("numeric_deselect", {int(cudnn.numerical_note.TENSOR_CORE)}),
                        ("behavior_select", {int(cudnn.behavior_note.RUNTIME_COMPILATION)}),
                        ("engines_deselect", {"eng3"})):
        f = Filters()
        setattr(f, name, value)
        with pytest.raises(AttributeError):  # this filter needs the config's notes or engine
            f.keeps(c)


def test_values_given_are_not_read_again() -> None:
    c = Candidate(_Unreadable(), 12, {3: 1, 2: 0}, [cudnn.numerical_note.TENSOR_CORE], [], "A")  # type: ignore[arg-type]
    assert c.name == "eng12_k2=0_k3=1"
    f = Filters(numeric_select={int(cudnn.numerical_note.TENSOR_CORE)}, engines_deselect={"eng12_k2=0_k3=2"})
    assert f.keeps(c)
    f.engines_deselect.add("eng12_k2=0_k3=1")
    assert not f.keeps(c)
    restored = Candidate(None, source="cache", restored_name="eng7_k1=2")
    assert (restored.name, restored.engine_index, restored.knobs, restored.behavior_notes) == ("eng7_k1=2", -1, {}, [])
