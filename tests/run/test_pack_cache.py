"""The variant-pack cache binds each buffer to the tensor its key names, whatever the dict order.

No GPU here: the two backend calls a Runner makes (finalizing a variant pack, executing it) are
replaced by recorders, so each test sees exactly which uid -> address binding would reach
cuDNN. Buffers are objects with ``__cuda_array_interface__`` (device memory as CuPy and Numba
describe it), which cudnn-py reads without touching the memory.
"""

from __future__ import annotations

import gc
import itertools
import threading
import time
from typing import Any

import pytest
from support.fake_backend import Backend, Pack
from support.fake_backend import sub_graph as fake_graph

import cudnn
from cudnn._graph.build.pipeline import all_tensors, assign_uids, make_bindings
from cudnn._graph.run.runner import Runner
from cudnn._lib import cuda

SHAPE = (4, 4)
_addresses = itertools.count(0x7F0000000000, 0x10000)


class DeviceArray:
    """A float32 device buffer as the CUDA array interface describes one (never dereferenced)."""

    def __init__(self, shape: tuple[int, ...] = SHAPE, ptr: int | None = None) -> None:
        self.ptr = next(_addresses) if ptr is None else ptr
        self.shape = shape

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": "<f4", "strides": None, "version": 3}


@pytest.fixture
def sub_graph(monkeypatch: pytest.MonkeyPatch) -> tuple[Runner, Backend, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    """C = A - B, its Runner wired to the recording backend."""
    g, A, B, C = fake_graph(SHAPE)
    backend = Backend()
    backend.install(monkeypatch)
    return backend.runner(g), backend, A, B, C


def test_swapped_keys_swap_the_binding(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    runner.run({A: p, B: q, C: c}, None, 1)
    runner.run({B: p, A: q, C: c}, None, 1)  # same values, same order, keys swapped
    runner.run({A: p, B: q, C: c}, None, 1)
    uid = {t.get_name(): t.get_uid() for t in (A, B, C)}
    first = {uid["A"]: p.ptr, uid["B"]: q.ptr, uid["sub::OUT_0"]: c.ptr}
    swapped = {uid["A"]: q.ptr, uid["B"]: p.ptr, uid["sub::OUT_0"]: c.ptr}
    assert backend.executed == [first, swapped, first]


def test_uid_keys_and_tensor_keys_bind_alike(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    runner.run({A.get_uid(): p, B.get_uid(): q, C.get_uid(): c}, None, 1)
    runner.run({B.get_uid(): p, A.get_uid(): q, C.get_uid(): c}, None, 1)
    assert [b[A.get_uid()] for b in backend.executed] == [p.ptr, q.ptr]
    assert [b[B.get_uid()] for b in backend.executed] == [q.ptr, p.ptr]


def test_repeated_calls_reuse_one_pack(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    for _ in range(5):
        runner.run({A: p, B: q, C: c}, None, 1)
    assert len(backend.packs) == 1 and len(backend.executed) == 5


def test_raw_pointers_rebind_when_their_value_changes(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    base = 0x7E0000000000
    runner.run({A: base, B: base + 0x1000, C: base + 0x2000}, None, 1)
    runner.run({A: base + 0x3000, B: base + 0x1000, C: base + 0x2000}, None, 1)
    assert [b[A.get_uid()] for b in backend.executed] == [base, base + 0x3000]


@pytest.fixture
def checks() -> Any:
    """Sets the execute-check mode for one test, restoring the default after it."""
    yield cudnn.set_execute_checks
    cudnn.set_execute_checks("warn")


def add_graph() -> tuple[Runner, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    """C = A + B with A [4, 4] and B [1, 4] (broadcast)."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor([4, 4], name="A"), g.tensor([1, 4], name="B")
    C = g.add(A, B, name="add").set_output(True)
    g.validate()
    assign_uids(all_tensors(g.nodes))
    return Runner("graph", Pack(99), 0, make_bindings(g.nodes), 1, None), A, B, C


def test_one_buffer_for_two_tensors_of_different_shapes(sub_graph: Any, checks: Any) -> None:
    """Memory-safe (B reads the first row of the buffer): a warning by default, an error when strict."""
    _, backend, *_ = sub_graph
    runner, A, B, C = add_graph()
    runner.backend_execute = backend.execute
    a, c = DeviceArray((4, 4)), DeviceArray((4, 4))
    with pytest.warns(cudnn.ExecutionInputWarning, match=r"'B'.*expects dims \[1, 4\]"):
        runner.run({A: a, B: a, C: c}, None, 1)
    assert backend.executed[-1][B.get_uid()] == a.ptr
    checks("strict")
    strict, A, B, C = add_graph()
    with pytest.raises(cudnn.ExecutionInputError, match=r"'B'.*expects dims \[1, 4\]"):
        strict.run({A: a, B: a, C: c}, None, 1)


def test_a_buffer_smaller_than_its_tensor_is_refused_in_every_checked_mode(sub_graph: Any, checks: Any) -> None:
    runner, backend, A, B, C = sub_graph
    for mode in ("warn", "strict"):
        checks(mode)
        with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*needs 64 bytes.*has 32"):
            runner.run({A: DeviceArray((2, 4)), B: DeviceArray(), C: DeviceArray()}, None, 1)
    checks("off")  # no checks at all: the caller vouches for the buffers
    small = DeviceArray((2, 4))
    runner.run({A: small, B: DeviceArray(), C: DeviceArray()}, None, 1)
    assert backend.executed[-1][A.get_uid()] == small.ptr


def test_keys_of_no_tensor_of_the_graph_are_ignored_unless_strict(sub_graph: Any, checks: Any) -> None:
    runner, backend, A, B, C = sub_graph
    other = cudnn.pygraph().tensor([4, 4], name="elsewhere")
    p, q, c = DeviceArray(), DeviceArray(), DeviceArray()
    runner.run({A: p, B: q, C: c, other: DeviceArray(), 999: DeviceArray()}, None, 1)
    assert backend.executed[-1] == {A.get_uid(): p.ptr, B.get_uid(): q.ptr, C.get_uid(): c.ptr}
    checks("strict")
    with pytest.raises(cudnn.ExecutionInputError, match="'elsewhere' is not a tensor of this graph"):
        runner.run({A: p, B: q, C: c, other: DeviceArray()}, None, 1)
    with pytest.raises(cudnn.ExecutionInputError, match="uid 999 is not a uid of this graph"):
        runner.run({A: p, B: q, C: c, 999: DeviceArray()}, None, 1)
    with pytest.raises(ValueError, match="expected one of"):
        checks("loose")


def test_a_missing_tensor_is_refused(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    with pytest.raises(cudnn.ExecutionInputError, match=r"lacks .*'B'"):
        runner.run({A: DeviceArray(), C: DeviceArray()}, None, 1)


def test_a_new_object_at_a_dead_objects_address_is_checked_again(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    q, c = DeviceArray(), DeviceArray()
    p = DeviceArray()
    address = p.ptr
    runner.run({A: p, B: q, C: c}, None, 1)
    del p
    gc.collect()
    too_small = DeviceArray((2, 4), ptr=address)  # the allocator hands the block out again
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*needs 64 bytes"):
        runner.run({A: too_small, B: q, C: c}, None, 1)
    same_shape = DeviceArray(ptr=address)
    runner.run({A: same_shape, B: q, C: c}, None, 1)
    assert len(backend.packs) == 1  # a checked new object at a known address reuses the pack
    assert backend.executed[-1][A.get_uid()] == address


def test_the_identity_level_is_bounded(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    keep = [(DeviceArray(), DeviceArray(), DeviceArray()) for _ in range(100)]
    for p, q, c in keep:
        runner.run({A: p, B: q, C: c}, None, 1)
    assert len(runner.packs) <= 64 and len(backend.executed) == 100


def test_raw_pointers_are_found_by_value(sub_graph: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, backend, A, B, C = sub_graph
    checked: list[int] = []

    def pointer_info(ptr: int) -> None:  # stands in for cudaPointerGetAttributes: memory CUDA cannot describe
        checked.append(ptr)
        raise RuntimeError("unknown memory")

    monkeypatch.setattr(cuda, "pointer_info", pointer_info)
    base = 0x7D0000000000
    for _ in range(3):  # fresh int objects each call, as data_ptr() gives
        runner.run({A: int(str(base)), B: int(str(base + 0x1000)), C: int(str(base + 0x2000))}, None, 1)
    assert checked == [base, base + 0x1000, base + 0x2000]  # checked on the first call only
    assert len(backend.executed) == 3 and len(backend.packs) == 1


def test_scratch_fills_of_one_repeated_unit_become_memsets() -> None:
    """Unit scales (bf16 1.0 = 0x3F80, float 1.0) and byte patterns are written by a memset of
    their unit; other fills (ALiBi slopes) stay host copies."""
    import struct

    from cudnn._graph.run.bindings import ScratchSlot
    from cudnn._lib.cuda import repeated_unit

    assert ScratchSlot(1, 0, 8, b"\x80\x3f" * 4).unit == (2, 0x3F80)
    assert ScratchSlot(1, 0, 12, struct.pack("<f", 1.0) * 3).unit == (4, 0x3F800000)
    assert ScratchSlot(1, 0, 6, b"\x07" * 6).unit == (1, 7)
    assert ScratchSlot(1, 0, 8, zero=True).unit is None
    assert repeated_unit(struct.pack("<4f", 0.5, 0.25, 0.125, 0.0625)) is None
    assert repeated_unit(b"") is None


def test_constant_scratch_is_written_once_outside_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The affine epilogue's unit scale and zero bias (constant scratch) live in device memory of
    the Runner's own, written once with their bytes; every pack binds them there, whatever the
    workspace, and no execute writes them again (no fills)."""
    from cudnn._graph.build.pipeline import Pipeline
    from cudnn._graph.families.norm_nodes import NormLowering

    backend = Backend()
    backend.install(monkeypatch)
    dt = cudnn.data_type
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    X = g.tensor(name="x", dim=[512, 768, 1, 1], stride=[768, 1, 768, 768])
    S, B = (g.tensor(name=n, dim=[1, 768, 1, 1], stride=[768, 1, 768, 768], data_type=dt.FLOAT)
            for n in ("scale", "bias"))
    Y, _, _ = g.layernorm(cudnn.norm_forward_phase.INFERENCE, X, S, B, 1e-5, name="ln")
    Y.set_output(True)
    g.validate()
    lowered = Pipeline(g, NormLowering.AFFINE_EPILOGUE).lowered()
    unit, zero = lowered.slots
    assert (unit.constant, zero.constant, unit.offset, zero.offset) == (True, True, 0, 1536)
    assert lowered.scratch_bytes == 0  # nothing in the workspace
    made: list[tuple[bytes, int | None]] = []

    def filled_buffer(data: bytes, device: int | None = None) -> Any:
        made.append((data, device))
        return Pack(0x7000)

    monkeypatch.setattr(cuda, "filled_buffer", filled_buffer)
    runner = Runner("ln", Pack(99), 0, lowered.bindings, 1, 3, lowered.slots, lowered.scratch_bytes, None,
                    lowered.unused)
    runner.backend_execute = backend.execute
    assert runner.workspace_size == 0
    uids = (X.get_uid(), S.get_uid(), B.get_uid(), Y.get_uid())
    for workspace in (0, 0x9000, 0):
        runner.run_pointers(uids, (0x1000, 0x2000, 0x3000, 0x4000), workspace, 1)
    assert made == [(b"\x80\x3f" * 768 + bytes(1536), 3)]  # bf16 ones, then zeros; on the Runner's device
    assert len(backend.executed) == 3
    for bound in backend.executed:
        assert (bound[unit.uid], bound[zero.uid]) == (0x7000, 0x7000 + 1536)
        assert (bound[X.get_uid()], bound[Y.get_uid()]) == (0x1000, 0x4000)


def test_raw_pointer_calls_bind_in_the_order_given(sub_graph: Any) -> None:
    """run_pointers (the cudnn.ops path): each new set of addresses is one new pack binding
    each uid to the address at its position; the uid order is worked out once per order."""
    runner, backend, A, B, C = sub_graph
    a, b, c = A.get_uid(), B.get_uid(), C.get_uid()
    runner.run_pointers((a, b, c), (0x1000, 0x2000, 0x3000), 0, 1)
    runner.run_pointers((b, a, c), (0x1000, 0x2000, 0x3000), 0, 1)
    runner.run_pointers((a, b, c), (0x5000, 0x2000, 0x3000), 0, 1)
    runner.run_pointers((a, b, c), (0x1000, 0x2000, 0x3000), 0, 1)  # cached: no new pack
    assert backend.executed == [{a: 0x1000, b: 0x2000, c: 0x3000}, {b: 0x1000, a: 0x2000, c: 0x3000},
                                {a: 0x5000, b: 0x2000, c: 0x3000}, {a: 0x1000, b: 0x2000, c: 0x3000}]
    assert len(backend.packs) == 3
    assert backend.layouts == [(a, b, c), (b, a, c)]


def test_raw_pointer_calls_drop_unknown_uids_and_refuse_missing_ones(sub_graph: Any) -> None:
    runner, backend, A, B, C = sub_graph
    a, b, c = A.get_uid(), B.get_uid(), C.get_uid()
    runner.run_pointers((a, 999, b, c), (0x1000, 0x9000, 0x2000, 0x3000), 0, 1)
    assert backend.executed == [{a: 0x1000, b: 0x2000, c: 0x3000}]
    with pytest.raises(cudnn.ExecutionInputError, match=r"lacks.*B"):
        runner.run_pointers((a, c), (0x1000, 0x3000), 0, 1)


def test_raw_pointer_packs_are_bounded_and_destroyed(sub_graph: Any) -> None:
    """Beyond the bound the oldest run_pointers pack is destroyed, and the rest with the Runner;
    what the cache holds is ints and tuples only (nothing the cyclic GC keeps tracking)."""
    fixture_runner, backend, A, B, C = sub_graph
    runner = Runner("graph", Pack(98), 0, list(fixture_runner.by_uid.values()), 1, None)
    runner.backend_execute = backend.execute
    uids = (A.get_uid(), B.get_uid(), C.get_uid())
    for i in range(70):
        runner.run_pointers(uids, (0x1000 * (i + 1), 0x2000, 0x3000), 0, 1)
    assert len(backend.packs) == 70 and backend.destroyed == [1, 2, 3, 4, 5, 6]
    gc.collect()
    gc.collect()  # a tuple is untracked once the tuples in it are: the outer ones at the second pass
    assert not [(k, v) for k, v in runner.packs.by_pointers.items() if gc.is_tracked(k) or gc.is_tracked(v)]
    del runner
    gc.collect()
    assert backend.destroyed == [1, 2, 3, 4, 5, 6]  # the collector only queued the rest
    cudnn.release_pending()
    assert sorted(backend.destroyed) == list(range(1, 71))


def test_a_pack_in_use_is_not_destroyed_by_another_thread(sub_graph: Any) -> None:
    """Threads sharing a plan (cudnn.ops caches graphs per device, not per thread): a pack one
    thread looked up is never destroyed by another thread's eviction before its execute."""
    fixture_runner, backend, A, B, C = sub_graph
    runner = Runner("graph", Pack(97), 0, list(fixture_runner.by_uid.values()), 1, None)
    destroyed: set[int] = set()
    used_after_destroy: list[int] = []
    backend_destroy = backend.destroyed.append

    def destroy(ptr: int) -> None:
        destroyed.add(ptr)
        backend_destroy(ptr)

    def execute(handle: int, plan: int, pack: int) -> int:
        time.sleep(0)  # let another thread run between the lookup and the use
        if pack in destroyed:
            used_after_destroy.append(pack)
        return 0

    runner.packs._destroy = destroy
    runner.backend_execute = execute
    uids = (A.get_uid(), B.get_uid(), C.get_uid())

    def work(t: int) -> None:  # thread 0 hits one entry until it is the oldest; the others bring new ones
        for i in range(300):
            runner.run_pointers(uids, (0x1000 * (1 if t == 0 else t * 1000 + i), 0x2000, 0x3000), 0, 1)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not used_after_destroy and len(runner.packs.by_pointers) == 64
