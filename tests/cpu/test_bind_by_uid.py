"""What a variant pack binds: keys by uid as the official binds them (another graph's tensor, the
one a graph was deserialized from, binds to this graph's tensor of its uid).

No GPU: Runners execute on the recording backend of fake_backend, so each test sees the uid ->
address binding that would reach cuDNN. Device buffers are described by the CUDA array
interface (never dereferenced).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fake_backend import Backend, Pack
from fake_backend import sub_graph as fake_graph

import cudnn
from cudnn.graph import pipeline as pipeline_module
from cudnn.graph.execute import Binding, Runner
from cudnn.graph.pipeline import make_bindings
from cudnn.graph.serialize import TensorRecord

dt = cudnn.data_type
F = dt.FLOAT
SHAPE = (4, 4)
_addresses = itertools.count(0x7F0000000000, 0x100000)


class DeviceArray:
    """A device buffer as the CUDA array interface describes one (never dereferenced)."""

    def __init__(self, shape: tuple[int, ...] = SHAPE, typestr: str = "<f4") -> None:
        self.ptr = next(_addresses)
        self.shape, self.typestr = shape, typestr

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": self.typestr, "strides": None,
                "version": 3}


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Backend:
    b = Backend()
    b.install(monkeypatch)
    return b


@pytest.fixture
def checks() -> Any:
    yield cudnn.set_execute_checks
    cudnn.set_execute_checks("warn")


def runner(backend: Backend, bindings: list[Binding]) -> Runner:
    r = Runner("graph", Pack(99), 0, bindings, 1, None)
    r.backend_execute = backend.execute
    return r


def deserialized(g: cudnn.pygraph) -> list[Binding]:
    """``g``'s bindings as a graph deserialized from it has them: tensors of its own, made from
    the plan record, with the uids ``g`` gave."""
    return [Binding(b.uid, TensorRecord(b.uid, b.tensor.get_name(), b.tensor.get_dim(), b.tensor.get_stride(),
                                        b.tensor.get_data_type().name, b.tensor.get_is_pass_by_value(),
                                        b.tensor.get_value(), b.node, b.port).tensor(), b.node, b.port)
            for b in make_bindings(g.nodes)]


# -- keys by uid -------------------------------------------------------------------------------------

def test_the_original_graphs_tensors_bind_a_deserialized_graph_by_uid(backend: Backend) -> None:
    g, A, B, C = fake_graph(SHAPE)
    r = runner(backend, deserialized(g))
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    r.run({A: p, B: q, C: c}, None, 1)
    r.run({A: q, B.get_uid(): p, C: c}, None, 1)  # tensors and ints mixed, as the official takes them
    assert backend.executed == [{A.get_uid(): p.ptr, B.get_uid(): q.ptr, C.get_uid(): c.ptr},
                                {A.get_uid(): q.ptr, B.get_uid(): p.ptr, C.get_uid(): c.ptr}]


def test_a_tensor_whose_uid_is_not_the_graphs_is_named(backend: Backend, checks: Any) -> None:
    g, A, B, C = fake_graph(SHAPE)
    r = runner(backend, deserialized(g))
    stranger = cudnn.pygraph().tensor(list(SHAPE), name="stranger", uid=77)
    with pytest.raises(cudnn.ExecutionInputError,
                       match=r"lacks .*'A' \(uid 1\).*ignored keys: 'stranger' is not a tensor of this graph and "
                             r"has uid 77, which is no uid of this graph"):
        r.run({stranger: DeviceArray(), B: DeviceArray(), C: DeviceArray()}, None, 1)
    r.run({stranger: DeviceArray(), A: DeviceArray(), B: DeviceArray(), C: DeviceArray()}, None, 1)  # ignored
    checks("strict")
    strict = runner(backend, deserialized(g))
    with pytest.raises(cudnn.ExecutionInputError, match=r"'stranger' is not a tensor of this graph and has uid 77"):
        strict.run({stranger: DeviceArray(), A: DeviceArray(), B: DeviceArray(), C: DeviceArray()}, None, 1)
    unnumbered = cudnn.pygraph().tensor(list(SHAPE), name="unnumbered")
    with pytest.raises(cudnn.ExecutionInputError, match=r"'unnumbered' is not a tensor of this graph and has no uid"):
        strict.run({unnumbered: DeviceArray(), A: DeviceArray(), B: DeviceArray(), C: DeviceArray()}, None, 1)


def test_this_graphs_own_tensor_wins_its_uid_over_another_graphs(backend: Backend) -> None:
    """A pack made for several graphs: another graph's tensor with the uid of one this graph's key
    binds is ignored (no 'given twice'), whatever the order of the keys."""
    g, A, B, C = fake_graph(SHAPE)
    _other, X, Y, Z = fake_graph(SHAPE)
    assert (X.get_uid(), Y.get_uid(), Z.get_uid()) == (A.get_uid(), B.get_uid(), C.get_uid())
    r = runner(backend, make_bindings(g.nodes))
    p, q, c, x = DeviceArray(), DeviceArray(), DeviceArray(), DeviceArray()
    r.run({X: x, A: p, B: q, C: c}, None, 1)
    assert backend.executed[-1] == {A.get_uid(): p.ptr, B.get_uid(): q.ptr, C.get_uid(): c.ptr}
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A' \(uid 1\) is given twice"):
        r.run({A.get_uid(): p, A: q, B: q, C: c}, None, 1)  # two keys of this graph for one tensor


def test_an_intermediate_of_another_graph_is_not_bound_by_its_uid(backend: Backend, checks: Any) -> None:
    g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    A, B = g.tensor(list(SHAPE), name="A"), g.tensor(list(SHAPE), name="B")
    mid = g.sub(A, B, name="sub")
    g.relu(mid, name="relu").set_output(True)
    g.validate()
    pipeline_module.assign_uids(pipeline_module.all_tensors(g.nodes))
    checks("strict")
    r = runner(backend, deserialized(g))
    with pytest.raises(cudnn.ExecutionInputError, match=r"'sub::OUT_0' is an intermediate \(virtual\) tensor"):
        r.run({mid: DeviceArray(), A: DeviceArray()}, None, 1)
