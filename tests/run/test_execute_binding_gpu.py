"""execute binds each buffer to the tensor its key names: swapped keys, re-pointed and
re-allocated buffers either run correctly or are refused, never with a stale binding."""

from __future__ import annotations

import gc

import pytest
import torch

import cudnn

SHAPE = (64, 32)
F32 = cudnn.data_type.FLOAT


def sub_graph() -> tuple[cudnn.pygraph, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    g = cudnn.pygraph(io_data_type=F32, compute_data_type=F32)
    A, B = g.tensor(list(SHAPE), name="A"), g.tensor(list(SHAPE), name="B")
    C = g.sub(A, B, name="sub").set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, A, B, C


def run(g: cudnn.pygraph, pack: dict) -> None:
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()


def test_swapped_keys_compute_with_the_new_binding() -> None:
    g, A, B, C = sub_graph()
    p, q = torch.randn(SHAPE, device="cuda"), torch.randn(SHAPE, device="cuda")
    c = torch.empty(SHAPE, device="cuda")
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({A: p, B: q, C: c}, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, p - q, rtol=0, atol=0)
    g.execute({B: p, A: q, C: c}, ws)  # the same objects in the same order, keys swapped
    torch.cuda.synchronize()
    torch.testing.assert_close(c, q - p, rtol=0, atol=0)
    g.execute({A.get_uid(): p, B.get_uid(): q, C.get_uid(): c}, ws)
    g.execute({B.get_uid(): q, A.get_uid(): p, C.get_uid(): c}, ws)  # uid keys, another order
    torch.cuda.synchronize()
    torch.testing.assert_close(c, p - q, rtol=0, atol=0)


def test_wrapper_dict_calls_with_swapped_keys() -> None:
    p, q = torch.randn(SHAPE, device="cuda"), torch.randn(SHAPE, device="cuda")
    with cudnn.Graph(io_data_type=F32, compute_data_type=F32) as graph:
        graph.sub(p, q, name="sub").set_output(True)
    c = torch.empty(SHAPE, device="cuda")
    graph({"sub::0": p, "sub::1": q, "sub::OUT_0": c})
    torch.cuda.synchronize()
    torch.testing.assert_close(c, p - q, rtol=0, atol=0)
    graph({"sub::0": q, "sub::1": p, "sub::OUT_0": c})
    torch.cuda.synchronize()
    torch.testing.assert_close(c, q - p, rtol=0, atol=0)


@pytest.fixture
def checks():
    yield cudnn.set_execute_checks
    cudnn.set_execute_checks("warn")


def add_graph() -> tuple[cudnn.pygraph, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    g = cudnn.pygraph(io_data_type=F32, compute_data_type=F32)
    A, B = g.tensor([64, 32], name="A"), g.tensor([1, 32], name="B")
    C = g.add(A, B, name="add").set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, A, B, C


def test_one_buffer_for_two_tensors_of_different_shapes(checks) -> None:
    """Memory-safe: runs as the official frontend does (B reads the buffer's first row), with a
    warning; strict mode refuses it."""
    g, A, B, C = add_graph()
    a, c = torch.randn(64, 32, device="cuda"), torch.empty(64, 32, device="cuda")
    with pytest.warns(cudnn.ExecutionInputWarning, match=r"'B'.*expects dims \[1, 32\]"):
        run(g, {A: a, B: a, C: c})
    torch.testing.assert_close(c, a + a[:1], rtol=0, atol=0)
    checks("strict")
    g, A, B, C = add_graph()
    with pytest.raises(cudnn.ExecutionInputError, match=r"'B'.*expects dims \[1, 32\]"):
        run(g, {A: a, B: a, C: c})


def test_a_view_into_a_larger_buffer_and_extra_keys_run(checks) -> None:
    g, A, B, C = add_graph()
    big = torch.randn(128, 32, device="cuda")
    a = big[:64]  # a view: the allocation is larger than the tensor
    b = torch.randn(1, 32, device="cuda")
    c_storage = torch.empty(64 * 32 + 100, device="cuda")
    c = c_storage[: 64 * 32]  # declared [64, 32], given flat: same bytes, another shape
    stranger = cudnn.pygraph().tensor([4], name="stranger")
    with pytest.warns(cudnn.ExecutionInputWarning, match="'add::OUT_0'"):
        run(g, {A: a, B: b, C: c, stranger: torch.empty(4, device="cuda"), 4242: b})
    torch.testing.assert_close(c.view(64, 32), a + b, rtol=0, atol=0)
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*needs 8192 bytes"):
        run(g, {A: big[100:], B: b, C: c})  # 28 rows left: too small, refused in every checked mode


def test_a_bool_mask_declared_boolean_is_read_bit_packed() -> None:
    """NVIDIA's samples declare torch.bool masks as BOOLEAN: a byte tensor large enough is accepted."""
    x = torch.randn(8, 64, device="cuda")
    mask_bits = torch.randint(0, 256, (8, 8), device="cuda", dtype=torch.uint8)  # 64 bits per row
    g = cudnn.pygraph(io_data_type=F32, compute_data_type=F32)
    X = g.tensor([8, 64], name="X")
    M = g.tensor([8, 64], name="M", data_type=cudnn.data_type.BOOLEAN)
    Y = g.binary_select(X, g.mul(X, 0.0), M, name="sel").set_output(True)
    try:
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    except cudnn.CudnnNotSupportedError as exc:
        pytest.skip(f"cuDNN has no engine for a BOOLEAN-mask select here: {exc}")
    y = torch.empty(8, 64, device="cuda")
    run(g, {X: x, M: mask_bits.view(torch.bool), Y: y})
    bits = torch.stack([(mask_bits >> i) & 1 for i in range(8)], dim=-1).reshape(8, 64).bool()
    torch.testing.assert_close(y, torch.where(bits, x, torch.zeros_like(x)), rtol=0, atol=0)


def test_a_buffer_re_pointed_with_data_is_read_at_its_new_address() -> None:
    g, A, B, C = sub_graph()
    p, q = torch.randn(SHAPE, device="cuda"), torch.randn(SHAPE, device="cuda")
    c = torch.empty(SHAPE, device="cuda")
    run(g, {A: p, B: q, C: c})
    fresh = torch.randn(SHAPE, device="cuda")
    p.data = fresh  # same object, new memory
    run(g, {A: p, B: q, C: c})
    torch.testing.assert_close(c, fresh - q, rtol=0, atol=0)
    p.data = torch.randn(2, 8, device="cuda")  # same object, new memory, too small for A
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*needs 8192 bytes"):
        run(g, {A: p, B: q, C: c})


def test_a_tensor_freed_and_reallocated_at_its_address_is_checked_again() -> None:
    g, A, B, C = sub_graph()
    q, c = torch.randn(SHAPE, device="cuda"), torch.empty(SHAPE, device="cuda")
    p = torch.randn(SHAPE, device="cuda")
    run(g, {A: p, B: q, C: c})
    address = p.data_ptr()
    del p
    gc.collect()
    p2 = torch.empty(2, 8, 64, device="cuda")  # the caching allocator hands the block out again, smaller
    if p2.data_ptr() != address:
        pytest.skip("the caching allocator gave another block this time (depends on what ran before)")
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*needs 8192 bytes"):
        run(g, {A: p2, B: q, C: c})
    del p2
    p3 = torch.randn(SHAPE, device="cuda")
    run(g, {A: p3, B: q, C: c})
    torch.testing.assert_close(c, p3 - q, rtol=0, atol=0)


def test_run_pointers_binds_addresses_by_uid_and_refuses_a_missing_one() -> None:
    g, A, B, C = sub_graph()
    runner = g.runner()
    p, q, c = torch.randn(SHAPE, device="cuda"), torch.randn(SHAPE, device="cuda"), torch.empty(SHAPE, device="cuda")
    uids = (A.get_uid(), B.get_uid(), C.get_uid())
    runner.run_pointers(uids, (p.data_ptr(), q.data_ptr(), c.data_ptr()), 0, None)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, p - q, rtol=0, atol=0)
    runner.run_pointers(uids, (q.data_ptr(), p.data_ptr(), c.data_ptr()), 0, None)  # other addresses
    torch.cuda.synchronize()
    torch.testing.assert_close(c, q - p, rtol=0, atol=0)
    with pytest.raises(cudnn.ExecutionInputError, match="lacks"):
        runner.run_pointers(uids[:2], (p.data_ptr(), q.data_ptr()), 0, None)
