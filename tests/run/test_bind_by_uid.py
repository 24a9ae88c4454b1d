"""What a variant pack binds: keys by uid as the official binds them (another graph's tensor, the
one a graph was deserialized from, binds to this graph's tensor of its uid), the packed buffers of
ragged tensors, and the tensors an attention ``score_mod`` callback uses, which are its graph's.

No GPU: Runners execute on the recording backend of fake_backend, so each test sees the uid ->
address binding that would reach cuDNN. Device buffers are described by the CUDA array
interface (never dereferenced), host buffers are numpy arrays.
"""

from __future__ import annotations

import itertools
import types
import warnings
from typing import Any

import numpy as np
import pytest
from support.fake_backend import Backend, Pack
from support.fake_backend import sub_graph as fake_graph

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.build.pipeline import Pipeline, make_bindings
from cudnn._graph.records.plan_bytes import TensorRecord
from cudnn._graph.run.bindings import Binding, needed_bytes, token_bytes
from cudnn._graph.run.runner import Runner

dt = cudnn.data_type
H, F, I32 = dt.HALF, dt.FLOAT, dt.INT32
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


def lowered(g: cudnn.pygraph) -> list[Binding]:
    """The bindings of ``g`` expanded and lowered for cuDNN 9.19, without a library."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=91900))
        return Pipeline(g).lowered().bindings


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


# -- ragged tensors ----------------------------------------------------------------------------------

B_, HQ, S, D = 2, 8, 64, 64  # batch, heads, the longest sequence, head dim
TOKEN = HQ * D * 2  # one token of a THD half tensor: every head, the head dim


def thd(g: cudnn.pygraph, name: str) -> cudnn.tensor:
    """A [b, h, s, d] half tensor laid out as packed THD, with a ragged offset."""
    t = g.tensor(name=name, dim=[B_, HQ, S, D], stride=[S * HQ * D, D, HQ * D, 1], data_type=H)
    return t.set_ragged_offset(g.tensor(name=f"{name}_offsets", dim=[B_ + 1, 1, 1, 1], data_type=I32))


def ragged_attention() -> tuple[cudnn.pygraph, dict[str, cudnn.tensor]]:
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    q, k, v = thd(g, "Q"), thd(g, "K"), thd(g, "V")
    seq_q = g.tensor(name="seq_q", dim=[B_, 1, 1, 1], data_type=I32)
    seq_kv = g.tensor(name="seq_kv", dim=[B_, 1, 1, 1], data_type=I32)
    o, _ = g.sdpa(q, k, v, is_inference=True, attn_scale=0.125, use_padding_mask=True, seq_len_q=seq_q,
                  seq_len_kv=seq_kv, name="sdpa")
    o.set_output(True).set_dim([B_, HQ, S, D]).set_stride([S * HQ * D, D, HQ * D, 1])
    o.set_ragged_offset(q.get_ragged_offset())
    g.validate()
    return g, {"Q": q, "K": k, "V": v, "O": o, "seq_q": seq_q, "seq_kv": seq_kv}


def ragged_pack(ts: dict[str, cudnn.tensor], tokens: int, typestr: str = "<f2") -> dict[cudnn.tensor, Any]:
    """Packed [tokens, h, d] buffers for Q, K, V and O, with their offsets and sequence lengths."""
    pack: dict[cudnn.tensor, Any] = {ts[n]: DeviceArray((tokens, HQ, D), typestr) for n in ("Q", "K", "V", "O")}
    for n in ("Q", "K", "V"):
        pack[ts[n].get_ragged_offset()] = DeviceArray((B_ + 1, 1, 1, 1), "<i4")
    pack.update({ts["seq_q"]: DeviceArray((B_, 1, 1, 1), "<i4"), ts["seq_kv"]: DeviceArray((B_, 1, 1, 1), "<i4")})
    return pack


def test_token_bytes_is_one_token_of_any_layout() -> None:
    g = cudnn.pygraph()
    assert token_bytes(thd(g, "T")) == TOKEN
    bhsd = g.tensor(dim=[B_, HQ, S, D], stride=[HQ * S * D, S * D, D, 1], data_type=H)
    assert token_bytes(bhsd) == ((HQ - 1) * S * D + D) * 2  # the first token of every head
    bsd = g.tensor(dim=[B_, S, D], stride=[S * D, D, 1], data_type=F)
    assert token_bytes(bsd) == D * 4
    assert needed_bytes(thd(g, "U")) == B_ * S * HQ * D * 2


def test_a_ragged_tensor_takes_a_packed_buffer_of_any_token_count(backend: Backend, checks: Any) -> None:
    """Packed THD buffers of fewer tokens than b x s (the official suite's, e.g. [64, 3, 128] for
    [1, 3, 380, 128]) are bound without a warning, even in strict mode; shapes are not compared."""
    g, ts = ragged_attention()
    bindings = lowered(g)
    assert sorted(b.tensor.get_name() for b in bindings if b.ragged) == ["K", "Q", "V", "sdpa::O"]
    for mode in ("warn", "strict"):
        checks(mode)
        r = runner(backend, bindings)
        pack = ragged_pack(ts, tokens=3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            r.run(pack, None, 1)
        assert backend.executed[-1][ts["Q"].get_uid()] == pack[ts["Q"]].ptr


def test_a_ragged_buffer_without_one_token_is_refused(backend: Backend) -> None:
    g, ts = ragged_attention()
    r = runner(backend, lowered(g))
    pack = ragged_pack(ts, tokens=4)
    pack[ts["K"]] = DeviceArray((1, HQ - 1, D), "<f2")
    with pytest.raises(cudnn.ExecutionInputError,
                       match=rf"K tensor 'K' \(uid \d+\) is ragged \(packed by its offsets\) and needs at least one "
                             rf"token, {TOKEN} bytes .*; the buffer has {TOKEN - D * 2}"):
        r.run(pack, None, 1)


def test_a_ragged_buffer_of_another_data_type_still_warns(backend: Backend) -> None:
    g, ts = ragged_attention()
    r = runner(backend, lowered(g))
    pack = ragged_pack(ts, tokens=4)
    pack[ts["V"]] = DeviceArray((4, HQ, D), "<f4")
    with pytest.warns(cudnn.ExecutionInputWarning, match=r"'V' .*expects HALF data, got .* FLOAT"):
        r.run(pack, None, 1)


def test_a_tensor_without_a_ragged_offset_still_needs_its_whole_extent(backend: Backend) -> None:
    g, A, B, C = fake_graph(SHAPE)
    r = runner(backend, make_bindings(g.nodes))
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A' \(uid 1\) needs 64 bytes"):
        r.run({A: DeviceArray((2, 4)), B: DeviceArray(), C: DeviceArray()}, None, 1)


# -- score_mod: the callback's tensors are its graph's -----------------------------------------------

def arrow_attention(row_bound: cudnn.tensor | None = None) -> tuple[cudnn.pygraph, dict[str, cudnn.tensor]]:
    """Attention whose score_mod reads tensors of the graph: by-value bounds and -inf (host scalars,
    as the official suite's flexible attention declares them) and a device tensor of document ids."""
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor(name="Q", dim=[1, 2, 16, 64], stride=[2048, 1024, 64, 1], data_type=H)
    k = g.tensor(name="K", dim=[1, 2, 16, 64], stride=[2048, 1024, 64, 1], data_type=H)
    v = g.tensor(name="V", dim=[1, 2, 16, 64], stride=[2048, 1024, 64, 1], data_type=H)
    if row_bound is None:
        row_bound = g.tensor(name="row_bound", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                             data_type=I32)
    neg_inf = g.tensor(name="neg_inf_scalar", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                       data_type=F)
    docs = g.tensor(dim=[1, 1, 16, 1], stride=[16, 16, 1, 1], data_type=I32)  # unnamed: the callback names it

    def mask(sub: cudnn.pygraph, score: cudnn.tensor) -> cudnn.tensor:
        row = sub.gen_index(input=score, axis=2)
        row_ok = sub.cmp_lt(input=row, comparison=row_bound, compute_data_type=dt.BOOLEAN)
        doc = sub.scale(input=row, scale=docs, compute_data_type=F, name="row_bcast")
        same = sub.cmp_eq(input=doc, comparison=row, compute_data_type=dt.BOOLEAN)
        keep = sub.logical_and(a=row_ok, b=same, compute_data_type=dt.BOOLEAN)
        return sub.binary_select(input0=score, input1=neg_inf, mask=keep)

    o, _ = g.sdpa(q, k, v, is_inference=True, attn_scale=0.125, score_mod=mask, name="sdpa")
    o.set_output(True)
    return g, {"Q": q, "K": k, "V": v, "O": o, "row_bound": row_bound, "neg_inf": neg_inf, "docs": docs}


def arrow_pack(ts: dict[str, cudnn.tensor]) -> dict[cudnn.tensor, Any]:
    pack: dict[cudnn.tensor, Any] = {ts[n]: DeviceArray((1, 2, 16, 64), "<f2") for n in ("Q", "K", "V", "O")}
    pack[ts["docs"]] = DeviceArray((1, 1, 16, 1), "<i4")
    pack[ts["row_bound"]] = np.full((1, 1, 1, 1), 2, dtype=np.int32)  # host tensors read by value
    pack[ts["neg_inf"]] = np.full((1, 1, 1, 1), -1e9, dtype=np.float32)
    return pack


def test_the_tensors_a_score_mod_uses_bind_to_the_users_objects(backend: Backend) -> None:
    g, ts = arrow_attention()
    g.validate()
    bindings = lowered(g)
    bound = {id(b.tensor) for b in bindings}
    assert {id(ts[n]) for n in ("row_bound", "neg_inf", "docs")} <= bound  # the user's own tensors
    r = runner(backend, bindings)
    pack = arrow_pack(ts)
    r.run(pack, None, 1)
    got = backend.executed[-1]
    assert got[ts["row_bound"].get_uid()] == pack[ts["row_bound"]].ctypes.data  # the host address
    assert got[ts["neg_inf"].get_uid()] == pack[ts["neg_inf"]].ctypes.data
    assert got[ts["docs"].get_uid()] == pack[ts["docs"]].ptr
    assert ts["docs"].get_name() == "row_bcast::IN_1" and ts["docs"].is_filled("name")  # the graph's name for it
    numbers = {**pack, ts["row_bound"]: 2, ts["neg_inf"]: -1e9}  # Python numbers, read by value
    r.run(numbers, None, 1)
    assert set(backend.executed[-1]) == set(got)


def test_a_score_mod_binds_after_validating_again(backend: Backend) -> None:
    g, ts = arrow_attention()
    for _ in range(2):
        g.validate()
        r = runner(backend, lowered(g))
        pack = arrow_pack(ts)
        r.run(pack, None, 1)
        assert backend.executed[-1][ts["row_bound"].get_uid()] == pack[ts["row_bound"]].ctypes.data


def test_a_score_mod_tensor_another_graph_is_home_to_binds_through_the_copy(backend: Backend) -> None:
    first = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    row_bound = first.tensor(name="row_bound", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                             data_type=I32, uid=40)
    x = first.tensor(name="x", dim=[1, 1, 1, 1], data_type=I32)
    first.add(x, row_bound, name="add", compute_data_type=I32).set_output(True).set_data_type(I32)
    first.validate()  # the first graph is the bound's home
    g, ts = arrow_attention(row_bound)
    g.validate()
    bindings = lowered(g)
    mine = next(b for b in bindings if b.user is row_bound)
    assert mine.tensor is not row_bound and mine.uid == 40  # the graph's copy, with the uid the user gave
    r = runner(backend, bindings)
    pack = arrow_pack(ts)
    r.run(pack, None, 1)
    assert backend.executed[-1][40] == pack[row_bound].ctypes.data
    row_bound.set_uid(41)  # what the user sets later reaches the copy at the next validate
    g.validate()
    r = runner(backend, lowered(g))
    r.run(pack, None, 1)
    assert backend.executed[-1][41] == pack[row_bound].ctypes.data


# -- keys by name ------------------------------------------------------------------------------------

def test_tensor_names_are_keys_as_in_the_official(backend: Backend, checks: Any) -> None:
    """A str key names a tensor of the graph; a name two tensors carry is refused as ambiguous;
    an unknown name is ignored (an error in strict mode), as any key of no tensor here."""
    g, A, B, C = fake_graph(SHAPE)
    r = runner(backend, make_bindings(g.nodes))
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    r.run({A.get_name(): p, B: q, C.get_name(): c}, None, 1)
    assert backend.executed[-1] == {A.get_uid(): p.ptr, B.get_uid(): q.ptr, C.get_uid(): c.ptr}
    with pytest.raises(cudnn.ExecutionInputError, match=r"lacks .*'A'.*ignored keys: 'nope' names no tensor"):
        r.run({"nope": p, B: q, C: c}, None, 1)
    checks("strict")
    with pytest.raises(cudnn.ExecutionInputError, match=r"'nope' names no tensor bound by this graph \(known: "):
        runner(backend, make_bindings(g.nodes)).run({"nope": p, A: p, B: q, C: c}, None, 1)
    B.set_name(A.get_name())
    with pytest.raises(cudnn.ExecutionInputError, match=rf"key '{A.get_name()}' is ambiguous: 2 tensors"):
        runner(backend, make_bindings(g.nodes)).run({A.get_name(): p, C: c}, None, 1)
