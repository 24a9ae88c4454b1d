"""The execute hot path: a repeated call with the same buffers is found by identity (no check,
no new pack), and a torch tensor re-pointed in place (same object, new address) is not.

No GPU and no torch here: the backend calls are recorders (fake_backend), and
``torch`` is a stand-in module whose ``Tensor`` has what the hot path reads (``data_ptr``)
and what the checks read (``__cuda_array_interface__``).
"""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import pytest
from support.fake_backend import Backend, sub_graph

import cudnn
from cudnn._graph.run.packs import identity_key, torch_key
from cudnn._graph.run.runner import Runner
from cudnn._lib import cuda
from cudnn._lib.layout import row_major
from cudnn.interop import tensors as interop_tensors

SHAPE = (4, 4)
_addresses = itertools.count(0x7C0000000000, 0x10000)


class Tensor:
    """A float32 device tensor whose memory can be swapped in place, as torch's ``set_`` does."""

    def __init__(self, shape: tuple[int, ...] = SHAPE) -> None:
        self.ptr, self.shape = next(_addresses), shape

    def data_ptr(self) -> int:
        return self.ptr

    def set_(self, shape: tuple[int, ...]) -> None:
        self.ptr, self.shape = next(_addresses), shape

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": "<f4", "strides": None, "version": 3}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> tuple[Runner, list[dict[int, int]], list[int], Any]:
    """C = A - B with recording backend calls; ``torch`` stands in while the test runs."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=Tensor))
    g, A, B, C = sub_graph(SHAPE)
    backend = Backend()
    backend.install(monkeypatch)
    prepared: list[int] = []
    prepare = Runner.prepare

    def counted(self: Runner, *args: Any) -> Any:
        prepared.append(1)
        return prepare(self, *args)

    monkeypatch.setattr(Runner, "prepare", counted)
    return backend.runner(g), backend.executed, prepared, (A, B, C)


def test_the_same_buffers_are_found_by_identity(runner: Any) -> None:
    r, executed, prepared, (A, B, C) = runner
    a, b, c, ws = Tensor(), Tensor(), Tensor(), Tensor((64,))
    pack = {A: a, B: b, C: c}
    for _ in range(3):
        r.run(pack, ws, 1)
    assert len(prepared) == 1 and len(executed) == 3
    assert identity_key(pack, ws, Tensor) in r.identity  # the key run() builds inline is identity_key's
    pack[C] = fresh = Tensor()  # the same dict, another output: checked and bound
    r.run(pack, ws, 1)
    assert len(prepared) == 2 and executed[-1][C.get_uid()] == fresh.ptr


def test_a_tensor_re_pointed_in_place_is_checked_and_bound_again(runner: Any) -> None:
    r, executed, prepared, (A, B, C) = runner
    a, b, c = Tensor(), Tensor(), Tensor()
    pack = {A: a, B: b, C: c}
    r.run(pack, None, 1)
    a.set_(SHAPE)  # same object, new memory
    r.run(pack, None, 1)
    assert len(prepared) == 2 and executed[-1][A.get_uid()] == a.ptr
    c.set_((2, 4))  # the output moves to memory too small for it
    with pytest.raises(cudnn.ExecutionInputError, match=r"sub::OUT_0.*needs 64 bytes.*has 32"):
        r.run(pack, None, 1)
    assert executed[-1][C.get_uid()] != c.ptr  # nothing ran on the small buffer


def test_a_re_pointed_workspace_is_bound_again(runner: Any) -> None:
    r, _, prepared, (A, B, C) = runner
    pack, ws = {A: Tensor(), B: Tensor(), C: Tensor()}, Tensor((64,))
    r.run(pack, ws, 1)
    r.run(pack, ws, 1)
    ws.set_((64,))
    r.run(pack, ws, 1)
    assert len(prepared) == 2


def test_a_view_at_the_same_address_is_checked(runner: Any) -> None:
    """Another object at a remembered address (a view of the same memory) is not taken for it."""
    r, _, _, (A, B, C) = runner
    a, b, c = Tensor(), Tensor(), Tensor()
    r.run({A: a, B: b, C: c}, None, 1)
    view = Tensor((2, 4))
    view.ptr = a.ptr
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*needs 64 bytes.*has 32"):
        r.run({A: view, B: b, C: c}, None, 1)


class TorchTensor(Tensor):
    """The stand-in with what the exact-buffer path reads of torch's own tensor API."""

    dtype = "torch.float32 stand-in"
    is_cuda = True

    def __init__(self, shape: tuple[int, ...] = SHAPE, strides: tuple[int, ...] | None = None) -> None:
        super().__init__(shape)
        self.strides = strides

    def stride(self) -> tuple[int, ...]:
        return self.strides or tuple(row_major(self.shape))

    def is_neg(self) -> bool:
        return False

    def get_device(self) -> int:
        return 0

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {**super().__cuda_array_interface__, "strides": tuple(4 * s for s in self.stride())}


def test_an_exact_torch_tensor_needs_only_its_address(runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch tensor with the declared dtype, dims and strides, aligned, is bound by its address
    alone; a misaligned one or one with other strides takes the full check (which refuses or
    explains)."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=TorchTensor, float32=TorchTensor.dtype))
    r, executed, _, (A, B, C) = runner
    interop = interop_tensors
    described: list[Any] = []
    describe = interop.describe
    monkeypatch.setattr(interop, "describe", lambda v: described.append(v) or describe(v))
    a, b, c = TorchTensor(), TorchTensor(), TorchTensor()
    r.run({A: a, B: b, C: c}, None, 1)
    assert described == [] and executed[-1] == {A.get_uid(): a.ptr, B.get_uid(): b.ptr, C.get_uid(): c.ptr}
    transposed = TorchTensor(SHAPE, (1, 4))  # same bytes, other strides: checked, and warned about
    with pytest.warns(cudnn.ExecutionInputWarning, match=r"'A'.*expects dims \[4, 4\] strides \[4, 1\]"):
        r.run({A: transposed, B: b, C: c}, None, 1)
    assert described == [transposed]
    misaligned = TorchTensor()
    misaligned.ptr += 2
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*not 16-byte aligned"):
        r.run({A: misaligned, B: b, C: c}, None, 1)


def test_the_straight_line_key_sees_every_change(runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once every buffer was a torch tensor, run() builds the identity key without a loop: it is
    identity_key's tuple, and a re-pointed tensor, a replaced value, a raw pointer in place of a
    tensor, or another workspace each still reach the check and the pack of their own."""
    r, executed, prepared, (A, B, C) = runner
    monkeypatch.setattr(cuda, "pointer_info", lambda ptr: types.SimpleNamespace(
        is_device=True, device=0, size=0, end=0))
    a, b, c, ws = Tensor(), Tensor(), Tensor(), Tensor((64,))
    pack = {A: a, B: b, C: c}
    for _ in range(4):
        r.run(pack, ws, 1)
    assert (r.key_of is not None) and len(prepared) == 1 and len(executed) == 4
    assert identity_key(pack, ws, Tensor) in r.identity

    def bound() -> dict[int, int]:
        return {A.get_uid(): pack[A] if type(pack[A]) is int else pack[A].ptr, B.get_uid(): pack[B].ptr,
                C.get_uid(): pack[C].ptr}

    a.set_(SHAPE)  # re-pointed in place
    r.run(pack, ws, 1)
    assert len(prepared) == 2 and executed[-1] == bound()
    pack[B] = Tensor()  # another object in the same dict
    r.run(pack, ws, 1)
    assert len(prepared) == 3 and executed[-1] == bound()
    pack[A] = a.ptr  # a raw pointer where a tensor was: the key falls back to the loop
    r.run(pack, ws, 1)
    assert not (r.key_of is not None) and executed[-1] == bound()
    pack[A] = a
    r.run(pack, ws, 1)  # all tensors again: the loop notes it, the next call has no loop
    assert (r.key_of is not None)
    ws.set_((64,))  # the workspace re-pointed
    before = len(prepared)
    r.run(pack, ws, 1)
    assert len(prepared) == before + 1
    r.run(pack, None, 1)  # no workspace: None is part of the key
    r.run(pack, None, 1)
    assert len(prepared) == before + 2 and (r.key_of is not None) and identity_key(pack, None, Tensor) in r.identity
    assert len(executed) == 11


def test_the_latest_call_is_forgotten_when_a_buffer_dies(runner: Any) -> None:
    """The remembered latest call holds weak references only: when one of its buffers dies it is
    dropped with the identity entry, so a new object (even at the same id and address) is checked."""
    r, executed, prepared, (A, B, C) = runner
    c = Tensor()
    address = c.ptr
    pack = {A: Tensor(), B: Tensor(), C: c}
    for _ in range(3):
        r.run(pack, None, 1)
    assert r.packs.last[1] is not None and len(prepared) == 1
    del c, pack[C]  # the output's last reference
    assert r.packs.last[1] is None and len(r.identity) == 0
    small = Tensor((2, 4))
    small.ptr = address  # the allocator hands the same block out again, for a smaller tensor
    pack[C] = small
    with pytest.raises(cudnn.ExecutionInputError, match=r"sub::OUT_0.*needs 64 bytes.*has 32"):
        r.run(pack, None, 1)
    pack[C] = Tensor()
    pack[99] = Tensor()  # one more key (not of this graph, ignored): another size, checked
    r.run(pack, None, 1)
    r.run(pack, None, 1)
    assert len(prepared) == 3 and executed[-1][C.get_uid()] == pack[C].ptr and r.key_of is torch_key(4)
