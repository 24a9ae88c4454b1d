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


def test_one_buffer_for_two_tensors_of_different_shapes_is_refused() -> None:
    g = cudnn.pygraph(io_data_type=F32, compute_data_type=F32)
    A, B = g.tensor([64, 32], name="A"), g.tensor([1, 32], name="B")
    C = g.add(A, B, name="add").set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    a, c = torch.randn(64, 32, device="cuda"), torch.empty(64, 32, device="cuda")
    with pytest.raises(cudnn.ExecutionInputError, match=r"'B'.*expects dims \[1, 32\]"):
        run(g, {A: a, B: a, C: c})


def test_a_buffer_re_pointed_with_data_is_read_at_its_new_address() -> None:
    g, A, B, C = sub_graph()
    p, q = torch.randn(SHAPE, device="cuda"), torch.randn(SHAPE, device="cuda")
    c = torch.empty(SHAPE, device="cuda")
    run(g, {A: p, B: q, C: c})
    fresh = torch.randn(SHAPE, device="cuda")
    p.data = fresh  # same object, new memory
    run(g, {A: p, B: q, C: c})
    torch.testing.assert_close(c, fresh - q, rtol=0, atol=0)
    p.data = torch.randn(2, 8, device="cuda")  # same object, new memory and another shape
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*expects dims \[64, 32\]"):
        run(g, {A: p, B: q, C: c})


def test_a_tensor_freed_and_reallocated_at_its_address_is_checked_again() -> None:
    g, A, B, C = sub_graph()
    q, c = torch.randn(SHAPE, device="cuda"), torch.empty(SHAPE, device="cuda")
    p = torch.randn(SHAPE, device="cuda")
    run(g, {A: p, B: q, C: c})
    address = p.data_ptr()
    del p
    gc.collect()
    p2 = torch.empty(2, 8, 128, device="cuda")  # the caching allocator hands the block out again
    assert p2.data_ptr() == address
    with pytest.raises(cudnn.ExecutionInputError, match=r"'A'.*expects dims \[64, 32\]"):
        run(g, {A: p2, B: q, C: c})
    del p2
    p3 = torch.randn(SHAPE, device="cuda")
    run(g, {A: p3, B: q, C: c})
    torch.testing.assert_close(c, p3 - q, rtol=0, atol=0)
