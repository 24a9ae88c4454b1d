"""A tensor declared in one graph and used in another: accepted (as the official frontend
does), and what each graph fills in (uids, generated names, inferred data types, dims and
strides) is that graph's own. The first graph that uses a tensor shows its fillings on the
tensor's getters, as a lone graph does; every other graph keeps its own.

No GPU: operation graphs are built with a lowering that records each tensor descriptor, and
executes go to the recording backend of fake_backend.
"""

from __future__ import annotations

import gc
import json
import types
from typing import Any, ClassVar

import pytest
from support.fake_backend import Backend, Pack

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.build.pipeline import Pipeline
from cudnn._graph.model.lower import Lowering
from cudnn._graph.run.runner import Runner

HALF, FLOAT, BF16 = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
DIMS, STRIDES = [1, 4, 8], [32, 8, 1]


class Desc:
    """A backend descriptor that takes any attribute."""

    def set(self, *args: Any) -> Desc:
        return self

    def finalize(self) -> Desc:
        return self


class RecordingLowering(Lowering):
    """Lowers nothing to libcudnn; records each tensor descriptor's (name, uid, type, dims)."""

    made: ClassVar[list[tuple[Any, ...]]] = []

    def descriptor(self, desc_type: Any, label: str) -> Any:  # type: ignore[override]
        return Desc()

    def set(self, desc: Any, attr: Any, value: Any, attr_type: Any = None) -> Any:  # type: ignore[override]
        return desc

    def tensor(self, t: Any) -> Any:  # type: ignore[override]
        self.made.append((t.get_name(), t.get_uid(), t.get_data_type(), tuple(t.get_dim())))
        if t.get_ragged_offset() is not None:
            self.tensor(t.get_ragged_offset())
        return Desc()


@pytest.fixture
def lowered(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[Any, ...]]]:
    """build_operation_graph() without a device; ``lowered[graph name]``: the tensor
    descriptors (name, uid, data type, dims) its latest operation graph was made of."""
    record: dict[str, list[tuple[Any, ...]]] = {}
    monkeypatch.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=92800))
    monkeypatch.setattr(pipeline_module, "Lowering", RecordingLowering)
    monkeypatch.setattr(RecordingLowering, "made", [])
    monkeypatch.setattr(Pipeline, "build_handle_ptr", lambda self: 0)  # no handle: none is used

    def operation_graph(handle: int, ops: list[Any], label: str = "", **kw: Any) -> str:
        record[label] = sorted(dict.fromkeys(RecordingLowering.made), key=lambda d: d[1])
        RecordingLowering.made.clear()
        return "OPGRAPH"

    monkeypatch.setattr(pipeline_module.eng, "operation_graph", operation_graph)
    return record


def uids(g: cudnn.pygraph) -> dict[str, int]:
    """The graph's tensors by name -> uid, from its printed JSON."""
    return {name: t["uid"] for name, t in json.loads(str(g))["tensors"].items()}


def tensors(g: cudnn.pygraph) -> dict[str, dict[str, Any]]:
    return json.loads(str(g))["tensors"]


def graphs(x: Any = None) -> tuple[cudnn.pygraph, cudnn.pygraph, Any]:
    """A: x + p (p with uid 1, io HALF); B: x * q (io FLOAT). ``x`` (declared by A, its data type
    left to the graph) is shared unless given."""
    a = cudnn.pygraph(name="A", io_data_type=HALF, compute_data_type=FLOAT)
    x = a.tensor(DIMS, STRIDES, name="x") if x is None else x
    p = a.tensor(DIMS, STRIDES, data_type=HALF, name="p", uid=1)
    a.add(x, p, name="add").set_output(True)
    b = cudnn.pygraph(name="B", io_data_type=FLOAT, compute_data_type=FLOAT)
    q = b.tensor(DIMS, STRIDES, data_type=FLOAT, name="q")
    b.mul(x, q, name="mul").set_output(True)
    return a, b, x


def alone_b() -> cudnn.pygraph:
    """B with a tensor of its own in x's place."""
    b = cudnn.pygraph(name="B", io_data_type=FLOAT, compute_data_type=FLOAT)
    x = b.tensor(DIMS, STRIDES, name="x")
    q = b.tensor(DIMS, STRIDES, data_type=FLOAT, name="q")
    b.mul(x, q, name="mul").set_output(True)
    return b


def alone_a() -> cudnn.pygraph:
    return graphs(cudnn.pygraph().tensor(DIMS, STRIDES, name="x"))[0]


# -- uids -----------------------------------------------------------------------------------------

def test_building_the_second_graph_leaves_the_first_graphs_uids(lowered: Any) -> None:
    a, b, x = graphs()
    b.build_operation_graph()  # B first: its uid for x must not reach A
    b_uids = uids(b)
    a.build_operation_graph()
    for g, record in ((a, lowered["A"]), (b, lowered["B"])):
        got = [uid for _, uid, _, _ in record]
        assert len(got) == len(set(got)), f"{g.name}: uids collide: {record}"
    assert uids(a) == {"x": 2, "p": 1, "add::OUT_0": 3}  # p keeps the uid the user gave it
    assert uids(b) == b_uids == {"x": 1, "q": 2, "mul::OUT_0": 3}
    a.validate()  # validates again (the shared uid once collided with p's here)
    a.build_operation_graph()
    assert uids(a) == {"x": 2, "p": 1, "add::OUT_0": 3} and uids(b) == b_uids
    assert x.get_uid() == 2  # the tensor shows what its first graph (A) assigned


def test_each_graph_binds_the_shared_tensor_to_its_own_uid(lowered: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, x = graphs()
    a.build_operation_graph()
    b.build_operation_graph()
    backend = Backend()
    backend.install(monkeypatch)
    handle = types.SimpleNamespace(address=1)
    for g in (a, b):
        bindings = Pipeline(g).lowered().bindings
        out = next(t for n in g.nodes for t in n.outputs.values())
        other = next(t for n in g.nodes for p, t in n.inputs.items() if p == "IN_1")
        r = Runner(g.name, Pack(99), 0, bindings, handle, None)
        r.backend_execute = backend.execute
        r.run({x: 0x1000, other: 0x2000, out: 0x3000}, 0, handle)
        names = uids(g)
        want = {names["x"]: 0x1000, names[other.get_name()]: 0x2000, names[f"{g.nodes[0].name}::OUT_0"]: 0x3000}
        assert backend.executed[-1] == want, g.name
    mine = b.query_tensor_attributes_of_uid(uids(b)["x"])
    assert mine.get_data_type() == FLOAT and mine.get_name() == "x"  # B's view of x


def test_a_uid_the_user_gives_is_kept_by_every_graph(lowered: Any) -> None:
    a, b, x = graphs()
    a.build_operation_graph()
    b.build_operation_graph()
    x.set_uid(7)  # after both built: each graph's next build uses it
    for g in (a, b):
        g.validate()
        g.build_operation_graph()
        assert uids(g)["x"] == 7
        assert ("x", 7) in [(name, uid) for name, uid, _, _ in lowered[g.name]]
    assert x.get_uid() == 7


# -- inferred data types, names, dims and strides ---------------------------------------------------

@pytest.mark.parametrize("first", ["A", "B"])
def test_each_graph_infers_the_shared_tensors_data_type(first: str) -> None:
    a, b, x = graphs()
    for g in ((a, b) if first == "A" else (b, a)):
        g.validate()
    assert tensors(a)["x"]["data_type"] == "HALF" and tensors(a)["add::OUT_0"]["data_type"] == "HALF"
    assert tensors(b)["x"]["data_type"] == "FLOAT" and tensors(b)["mul::OUT_0"]["data_type"] == "FLOAT"
    assert x.get_data_type() == HALF  # what its first graph (A) inferred


def test_a_data_type_the_user_sets_reaches_every_graph() -> None:
    a, b, x = graphs()
    a.validate()
    b.validate()
    x.set_data_type(BF16)
    a.validate()
    b.validate()
    assert tensors(a)["x"]["data_type"] == tensors(b)["x"]["data_type"] == "BFLOAT16"


def test_each_graph_names_an_unnamed_shared_tensor() -> None:
    a = cudnn.pygraph(name="A", io_data_type=HALF, compute_data_type=FLOAT)
    x = a.tensor(DIMS, STRIDES)  # unnamed: each graph names it after its own node
    a.relu(x, name="first").set_output(True)
    b = cudnn.pygraph(name="B", io_data_type=HALF, compute_data_type=FLOAT)
    b.sigmoid(x, name="second").set_output(True)
    a.validate()
    b.validate()
    assert "first::IN_0" in tensors(a) and "second::IN_0" in tensors(b)
    assert "first::IN_0" not in tensors(b)
    assert json.loads(str(b))["nodes"][0]["inputs"] == {"IN_0": "second::IN_0"}
    assert x.get_name() == "first::IN_0"


def test_a_scalar_takes_its_rank_from_each_graph() -> None:
    a = cudnn.pygraph(name="A", io_data_type=HALF, compute_data_type=FLOAT)
    s = a.tensor_scalar(2.0, cudnn.scalar_type.RUNTIME_PARAM, name="s")
    a.mul(a.tensor([2, 3, 4, 5], name="x4"), s, name="m").set_output(True)
    b = cudnn.pygraph(name="B", io_data_type=HALF, compute_data_type=FLOAT)
    b.mul(b.tensor([2, 3, 4], name="x3"), s, name="m").set_output(True)
    a.validate()
    b.validate()  # the rank A inferred for s once reached B: "inputs must have the same rank"
    assert tensors(a)["s"]["dim"] == [1, 1, 1, 1] and tensors(b)["s"]["dim"] == [1, 1, 1]
    a.validate()
    assert tensors(a)["s"]["dim"] == [1, 1, 1, 1] and s.get_dim() == [1, 1, 1, 1]


def test_strides_inferred_for_old_dims_are_not_kept() -> None:
    a = cudnn.pygraph(name="A", io_data_type=HALF, compute_data_type=FLOAT)
    x = cudnn.tensor(name="x", dim=[2, 3])  # no strides: each validate infers them
    a.relu(x, name="r").set_output(True)
    a.validate()
    assert x.get_stride() == [3, 1]
    x.set_dim([2, 3, 4])
    b = cudnn.pygraph(name="B", io_data_type=HALF, compute_data_type=FLOAT)
    b.relu(x, name="r").set_output(True)
    b.validate()  # A's strides for the old dims once reached B: "3 dims but 2 strides"
    a.validate()
    assert tensors(a)["x"]["stride"] == tensors(b)["x"]["stride"] == [12, 4, 1]


def test_a_graph_that_is_gone_leaves_nothing_behind() -> None:
    a, _, x = graphs()
    a.validate()
    assert x.get_data_type() == HALF
    del a
    gc.collect()
    c = cudnn.pygraph(name="C", io_data_type=FLOAT, compute_data_type=FLOAT)  # takes x over
    c.relu(x, name="r").set_output(True)
    c.validate()
    assert tensors(c)["x"]["data_type"] == "FLOAT" and x.get_data_type() == FLOAT


# -- the printed graph --------------------------------------------------------------------------------

def test_each_graphs_json_is_the_same_with_or_without_the_other(lowered: Any) -> None:
    a, b, _ = graphs()
    for g in (b, a, b):  # the other graph built before, and after
        g.validate()
        g.build_operation_graph()
    solo_a, solo_b = alone_a(), alone_b()
    for g in (solo_a, solo_b):
        g.validate()
        g.build_operation_graph()
    assert str(a) == str(solo_a)
    assert str(b) == str(solo_b)
    assert lowered["A"] and lowered["B"]


def test_a_shared_ragged_offset_is_each_graphs_own_too(lowered: Any) -> None:
    a, b, x = graphs()
    r = a.tensor([2, 1, 1], data_type=cudnn.data_type.INT32, name="r")
    x.set_ragged_offset(r)
    for g in (b, a):
        g.validate()
        g.build_operation_graph()
        got = [uid for _, uid, _, _ in lowered[g.name]]
        assert "r" in [name for name, *_ in lowered[g.name]] and len(got) == len(set(got)), lowered[g.name]
    assert uids(a) == {"x": 2, "r": 3, "p": 1, "add::OUT_0": 4}  # as if B did not exist
    assert uids(b) == {"x": 1, "r": 2, "q": 3, "mul::OUT_0": 4}
    assert x.get_ragged_offset() is r and x.get_dim() == DIMS and x.get_stride() == STRIDES
    assert json.loads(str(b))["tensors"]["x"]["ragged_offset"] == "r"


def test_an_output_may_share_a_ragged_offset_with_another_graph(lowered: Any) -> None:
    a, b, x = graphs()
    r = a.tensor([2, 1, 1], data_type=cudnn.data_type.INT32, name="r")
    x.set_ragged_offset(r)
    a.validate()  # A is r's home
    out = b.nodes[0].outputs["OUT_0"]
    out.set_ragged_offset(r)  # B's own output, and B's copy of x, read r: as one tensor of B's
    for g in (b, a):
        g.validate()
        g.build_operation_graph()
    assert uids(a) == {"x": 2, "r": 3, "p": 1, "add::OUT_0": 4}
    assert uids(b) == {"x": 1, "r": 2, "q": 3, "mul::OUT_0": 4}
    assert [name for name, *_ in lowered["B"]] == ["x", "r", "q", "mul::OUT_0"]
    assert r.get_uid() == 3 and out.get_ragged_offset().get_uid() == 2  # read through B's copy of r


def test_a_graphs_output_stays_its_own_in_another_graph() -> None:
    a = cudnn.pygraph(name="A", io_data_type=HALF, compute_data_type=FLOAT)
    y = a.relu(a.tensor(DIMS, STRIDES, name="x"), name="r").set_output(True)
    b = cudnn.pygraph(name="B", io_data_type=HALF, compute_data_type=FLOAT)
    with pytest.raises(cudnn.GraphError, match="another graph"):
        b.relu(y, name="r")
