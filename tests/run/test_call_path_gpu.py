"""The short call paths on the GPU: cudnn.Graph with known inputs and outputs landing at
changing addresses, pygraph.execute with one dict mutated between calls.

Each result is compared with torch.nn.functional.conv2d on the same fp16 inputs (atol=5e-3,
rtol=3e-3, as test_wrapper_gpu: a few fp16 ulps of outputs of size ~20). A pack bound to a
stale address would leave the new output unwritten (torch.empty) and fail the comparison.
"""

from __future__ import annotations

import pytest
import torch

import cudnn

pytestmark = pytest.mark.gpu
HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
TOL = {"atol": 5e-3, "rtol": 3e-3}


def nhwc(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)


def test_outputs_at_changing_addresses_are_each_written() -> None:
    """Outputs kept alive push the next one to a new block; dropped ones hand theirs back: the
    call that reuses a block and the one that does not alternate, each with its own pack."""
    torch.manual_seed(21)
    x, w = nhwc(2, 16, 8, 8), nhwc(16, 16, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::0", "c::1"], outputs=["c::Y"]) as graph:
        graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    addresses = set()
    for step in range(8):
        x.copy_(nhwc(2, 16, 8, 8))  # new data at the same address: the inputs stay known
        y = graph(x, w)
        addresses.add(y.data_ptr())
        torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), **TOL)
        if step % 2:
            kept.append((y, torch.nn.functional.conv2d(x, w, padding=1)))
    assert len(addresses) > 1  # the test saw outputs at more than one address
    for y, ref in kept:  # later calls wrote nothing into outputs handed out before
        torch.testing.assert_close(y, ref, **TOL)


def test_one_dict_mutated_between_executes() -> None:
    torch.manual_seed(22)
    x, w = nhwc(2, 16, 8, 8), nhwc(16, 16, 3, 3)
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    pack = {X: x, W: w, Y: torch.empty_like(torch.nn.functional.conv2d(x, w, padding=1))}
    outputs = []
    for _ in range(3):
        pack[X] = nhwc(2, 16, 8, 8)  # a new input object each call, in the same dict
        pack[Y] = y = torch.empty_like(pack[Y])  # and a new output
        g.execute(pack, ws)
        g.execute(pack, ws)  # the same objects again: the identity path
        outputs.append((y, torch.nn.functional.conv2d(pack[X], w, padding=1)))
    torch.cuda.synchronize()
    for y, ref in outputs:
        torch.testing.assert_close(y, ref, **TOL)
