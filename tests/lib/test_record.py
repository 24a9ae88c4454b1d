"""`_lib.record.Record`: the plain records that replace dataclasses on a first graph's import path
compare, hash, print and copy as the dataclasses did; and the first graph's import defines none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn._graph.model.node import Context
from cudnn._graph.model.tensor import Tensor
from cudnn._graph.plans.candidates import Filters
from cudnn._graph.run.bindings import Binding, ScratchSlot
from cudnn._lib.cuda import PointerInfo
from cudnn._lib.record import Record

SRC = str(Path(__file__).resolve().parents[2] / "src")


class _Point(Record):
    __slots__ = ("x", "y")
    frozen = True

    def __init__(self, x: int, y: int = 0) -> None:
        self.x, self.y = x, y


class _Point3(_Point):
    __slots__ = ("z",)

    def __init__(self, x: int, y: int = 0, z: int = 0) -> None:
        super().__init__(x, y)
        self.z = z


def test_fields_equality_hash_and_repr_follow_the_slots() -> None:
    assert _Point.fields == ("x", "y") and _Point3.fields == ("x", "y", "z")
    assert _Point(1, 2) == _Point(1, 2) and _Point(1, 2) != _Point(2, 1)
    assert hash(_Point(1, 2)) == hash(_Point(1, 2))
    assert _Point(1, 2) != _Point3(1, 2)  # another class is never equal, as with dataclasses
    assert repr(_Point3(1, 2, 3)) == "_Point3(x=1, y=2, z=3)"
    assert _Point(1, 2) != (1, 2)


def test_a_mutable_record_is_unhashable_and_compares_by_value() -> None:
    assert Filters() == Filters() and Filters(max_workspace=1) != Filters()
    with pytest.raises(TypeError, match="unhashable"):
        hash(Filters())
    assert Filters().numeric_select is not Filters().numeric_select  # no shared default set


def test_replace_copies_with_changes() -> None:
    p = PointerInfo(0, True, 16, 32)
    q = p.replace(size=64)
    assert (q.device, q.is_device, q.base, q.size, q.end) == (0, True, 16, 64, 80)
    assert p.size == 32 and hash(p) == hash(PointerInfo(0, True, 16, 32))
    with pytest.raises(TypeError):
        p.replace(colour=1)


def test_records_with_cached_properties_keep_their_cache() -> None:
    slot = ScratchSlot(1, 0, 8, b"\x80\x3f" * 4)
    assert slot.unit == (2, 0x3F80) and slot == ScratchSlot(1, 0, 8, b"\x80\x3f" * 4)
    b = Binding(1, Tensor("X").set_dim([2, 3]).set_stride([3, 1]), "conv_fprop 'c'", "X")
    assert b.label.startswith("conv_fprop 'c': X tensor") and b.ragged is False
    assert "ragged" in vars(b)  # cached in the instance's __dict__


def test_context_prints_like_the_graph_context() -> None:
    assert repr(Context()).startswith("Context(io_data_type=data_type.NOT_SET")


def test_declaring_a_first_graph_defines_no_dataclass() -> None:
    code = (
        "import dataclasses, json, sys\n"
        "made = []\n"
        "real = dataclasses._process_class\n"
        "dataclasses._process_class = lambda cls, *a, **k: (made.append(cls.__module__ + '.' + cls.__qualname__),"
        " real(cls, *a, **k))[1]\n"
        "import cudnn\n"
        "dt = cudnn.data_type\n"
        "g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)\n"
        "X = g.tensor(dim=[8, 64, 56, 56], stride=[64 * 56 * 56, 1, 64 * 56, 64])\n"
        "W = g.tensor(dim=[64, 64, 3, 3], stride=[64 * 9, 1, 64 * 3, 64])\n"
        "B = g.tensor(dim=[1, 64, 1, 1], stride=[64, 1, 1, 1])\n"
        "g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)\n"
        "g.validate()\n"
        "print(json.dumps([m for m in made if m.startswith('cudnn')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []
