"""cudnn.Graph on the GPU: seed 000 as written, CuPy-only and JAX-input variants, every naming
rule, both call styles, allocation in torch and CuPy, streams and handles, bad inputs.

Every conv result is compared with torch.nn.functional.conv2d on the same fp16 inputs, with the
seed's tolerances (atol=5e-3, rtol=3e-3: a few fp16 ulps of outputs of size ~20); the one
multi-output graph (layer norm) with a float64 PyTorch reference, tolerances stated there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cudnn
from cudnn._graph.model.graph_errors import ExecutionInputError
from cudnn.backend.handle import default_handle

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"
SUPPORT = HERE.parent / "support"
HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
TOL = {"atol": 5e-3, "rtol": 3e-3}


def nhwc(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.conv2d(x, w, padding=1)


def run_script(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    extra = {} if os.environ.get("CUDNN_PY_TEST_INSTALLED") else \
        {"PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)}
    result = subprocess.run([sys.executable, *args], check=False, capture_output=True, text=True, timeout=600,
                            env={**os.environ, **extra, **env})
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


# -- the seed and its variants ---------------------------------------------------------------

def test_seed000_runs_unmodified() -> None:
    pytest.importorskip("cupy")
    out = run_script([str(SUPPORT / "seed000_notebook.py")]).stdout
    lines = out.splitlines()
    assert [line for line in lines if line.endswith(" call")] == ["First call", "Second call", "Third call"]
    created = [line for line in lines if line.startswith("Creating new graph:")]
    assert len(created) == 2, out  # the first and third calls; the second is a cache hit
    assert "torch.Size([8, 64, 56, 56])" in created[0] and "torch.Size([8, 20, 60, 60])" in created[1]


def test_conv_example_with_cupy_only(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    saved = tmp_path / "cupy_only.npz"
    run_script([str(SUPPORT / "wrapper_cupy_only.py"), str(saved)])
    data = np.load(saved)
    x, w = (torch.from_numpy(data[k]).cuda().to(memory_format=torch.channels_last) for k in ("x", "w"))
    expected = reference(x, w)
    for key in ("y", "y_dict", "y_side"):
        torch.testing.assert_close(torch.from_numpy(data[key]).cuda(), expected, **TOL, msg=key)


def test_conv_example_with_jax_inputs() -> None:
    pytest.importorskip("jax")
    run_script([str(SUPPORT / "wrapper_jax_inputs.py")], XLA_PYTHON_CLIENT_PREALLOCATE="false")


# -- naming rules, each executed ----------------------------------------------------------------

def _build(rule: str, x: torch.Tensor, w: torch.Tensor) -> tuple[cudnn.Graph, list[Any]]:
    """The graph of one naming rule and the call arguments in its io-tuple order."""
    declared = rule in ("set_name", "uids", "tensor_objects")
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        X: Any = graph.tensor(name="X", dim=list(x.shape), stride=list(x.stride())) if declared else x
        W: Any = graph.tensor(name="W", dim=list(w.shape), stride=list(w.stride())) if declared else w
        if rule == "keyword":
            y = graph.conv_fprop(image=X, weight=W, padding=[1, 1], name="conv2d")
        elif rule == "unnamed":
            y = graph.conv_fprop(X, weight=W, padding=[1, 1])
        else:
            y = graph.conv_fprop(X, weight=W, padding=[1, 1], name="conv2d")
        y.set_output(True)
        if rule == "set_name":
            y.set_name("conv_out")
    io = {
        "keyword": (["conv2d::image", "conv2d::weight"], ["conv2d::Y"], [x, w]),
        "positional": (["conv2d::0", "conv2d::weight"], ["conv2d::Y"], [x, w]),
        "unnamed": (["conv_fprop.0::0", "conv_fprop.0::weight"], ["conv_fprop.0::Y"], [x, w]),
        "set_name": (["X", "W"], ["conv_out"], [x, w]),
        "uids": ([W.get_uid(), X.get_uid()] if declared else [], [y.get_uid()], [w, x]),
        "tensor_objects": ([X, W], [y], [x, w]),
        "build_objects": ([w, x], [y], [w, x]),
    }[rule]
    graph.set_io_tuples(io[0], io[1])
    return graph, io[2]


RULES = ["keyword", "positional", "unnamed", "set_name", "uids", "tensor_objects", "build_objects"]


@pytest.mark.parametrize("rule", RULES)
def test_naming_rule_executes(rule: str) -> None:
    torch.manual_seed(0)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph, args = _build(rule, x, w)
    y = graph(*args)
    assert isinstance(y, torch.Tensor) and y.shape == (4, 16, 16, 16)
    torch.testing.assert_close(y, reference(x, w), **TOL)


# -- call styles and allocation -----------------------------------------------------------------

def test_dict_calls_write_given_outputs_and_allocate_missing_ones() -> None:
    torch.manual_seed(1)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT) as graph:
        Y = graph.conv_fprop(image=x, weight=w, padding=[1, 1], name="conv2d")
        Y.set_output(True)
    given = torch.zeros(4, 16, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    buffers = {"conv2d::image": x, "conv2d::weight": w, "conv2d::Y": given}
    assert graph(buffers) is buffers and buffers["conv2d::Y"] is given
    torch.testing.assert_close(given, reference(x, w), **TOL)
    x2, w2 = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    for keys in (("conv2d::image", "conv2d::weight"), (x, w), (graph.pygraph.nodes[0].inputs["X"].get_uid(), w)):
        out = graph({keys[0]: x2, keys[1]: w2})
        torch.testing.assert_close(out["conv2d::Y"], reference(x2, w2), **TOL)


def test_several_outputs_come_back_as_a_tuple_in_order() -> None:
    """Layer norm (TRAINING) has three outputs; the io tuples order them differently from the node.
    Tolerances: Y in fp16 vs a float64 reference 2e-2; float statistics 1e-4 (as test_norm_gpu)."""
    torch.manual_seed(2)
    x = (3 * torch.randn(4, 128, 768, device="cuda") - 0.5).half()
    scale = 1 + 0.5 * torch.randn(1, 1, 768, device="cuda")
    bias = 0.5 * torch.randn(1, 1, 768, device="cuda")
    with cudnn.Graph(intermediate_data_type=FLOAT, compute_data_type=FLOAT, inputs=[x, scale, bias],
                     outputs=["ln::MEAN", "ln::Y", "ln::INV_VARIANCE"]) as graph:
        y, mean, inv = graph.layernorm(cudnn.norm_forward_phase.TRAINING, x, scale, bias, 1e-5, name="ln")
        y.set_output(True).set_data_type(HALF)
        mean.set_output(True)
        inv.set_output(True)
    got_mean, got_y, got_inv = graph(x, scale, bias)
    xd = x.double()
    ref_mean, ref_var = xd.mean(-1, keepdim=True), xd.var(-1, unbiased=False, keepdim=True)
    ref_y = torch.nn.functional.layer_norm(xd, (768,), scale.double().reshape(768), bias.double().reshape(768), 1e-5)
    torch.testing.assert_close(got_y.double(), ref_y, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got_mean.double(), ref_mean, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_inv.double(), (ref_var + 1e-5).rsqrt(), atol=1e-4, rtol=1e-4)


def test_torch_allocation_has_the_graph_layout() -> None:
    torch.manual_seed(3)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=[x, w], outputs=["c::Y"]) as graph:
        Y = graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    with torch.inference_mode():  # the allocation recipe is made here: nothing of the mode sticks to it
        inside = graph(x, w)
    assert inside.is_inference()
    ys = [graph(x, w) for _ in range(4)]
    span = 2 * (1 + sum((d - 1) * s for d, s in zip(Y.get_dim(), Y.get_stride())))
    for y in ys:
        assert type(y) is torch.Tensor and y.device == x.device and y.dtype == torch.float16
        assert list(y.shape) == Y.get_dim() and list(y.stride()) == Y.get_stride()
        assert not y.requires_grad and not y.is_inference() and y.untyped_storage().nbytes() == span
        torch.testing.assert_close(y, reference(x, w), **TOL)
    assert len({y.data_ptr() for y in ys}) == 4  # fresh tensors, never one buffer handed out twice


def test_cupy_allocation() -> None:
    cp = pytest.importorskip("cupy")
    torch.manual_seed(4)
    x_c = cp.random.randn(4, 16, 16, 32).astype(cp.float16).transpose(0, 3, 1, 2)
    w_c = cp.random.randn(16, 3, 3, 32).astype(cp.float16).transpose(0, 3, 1, 2)
    expected = reference(torch.as_tensor(x_c, device="cuda"), torch.as_tensor(w_c, device="cuda"))
    for policy, inputs in (("inputs", (x_c, w_c)), ("cupy", None)):
        with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, output_framework=policy,
                         inputs=["c::0", "c::1"], outputs=["c::Y"]) as graph:
            Y = graph.conv_fprop(x_c, w_c, padding=[1, 1], name="c").set_output(True)
        if inputs is None:  # torch in, CuPy out
            inputs = (torch.as_tensor(x_c, device="cuda"), torch.as_tensor(w_c, device="cuda"))
        y = graph(*inputs)
        assert isinstance(y, cp.ndarray) and y.strides == tuple(2 * s for s in Y.get_stride())
        torch.cuda.synchronize()
        torch.testing.assert_close(torch.as_tensor(y, device="cuda"), expected, **TOL)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::0", "c::1"], outputs=["c::Y"]) as graph:
        graph.conv_fprop(x_c, w_c, padding=[1, 1], name="c").set_output(True)
    y = graph(x_c, w_c)  # "auto" with torch loaded: torch out, as seed 000's CuPy cell compares it
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, expected, **TOL)


def test_the_workspace_is_kept_and_reused() -> None:
    x, w = nhwc(8, 64, 56, 56), nhwc(32, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=[x, w], outputs=["c::Y"]) as graph:
        graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    graph(x, w)
    held = dict(graph._executor._workspaces)
    graph(x, w)
    assert graph._executor._workspaces == held and len(held) == 1
    size, buffer = graph.get_workspace_size(), next(iter(held.values()))
    assert (buffer is None) == (size == 0) and (buffer is None or buffer.numel() == size)


# -- repeated calls: known inputs -------------------------------------------------------------

def test_repeated_calls_give_fresh_outputs_and_read_current_data() -> None:
    torch.manual_seed(11)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    first = graph(x, w)
    second = graph(x, w)  # known inputs: the short path
    assert first.data_ptr() != second.data_ptr()
    assert len(graph._executor.known) == 1
    x.copy_(nhwc(4, 32, 16, 16))  # new data at the same address: no new check needed, new result
    third = graph(x, w)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(third, reference(x, w), **TOL)
    assert not torch.equal(first, third)


def test_an_input_re_pointed_in_place_is_checked_again() -> None:
    torch.manual_seed(12)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    graph(x, w)
    graph(x, w)
    other = nhwc(4, 32, 16, 16)
    x.set_(other.untyped_storage(), 0, other.shape, other.stride())  # same object, new memory
    torch.testing.assert_close(graph(x, w), reference(other, w), **TOL)
    x.set_(nhwc(4, 32, 8, 8))  # same object, new memory and another shape
    with pytest.raises(ExecutionInputError, match="c::0"):
        graph(x, w)


def test_known_inputs_are_forgotten_when_they_die() -> None:
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    graph(x, w)
    x2 = nhwc(4, 32, 16, 16)
    y2 = graph(x2, w)
    assert len(graph._executor.known) == 2
    torch.testing.assert_close(y2, reference(x2, w), **TOL)
    del x2
    assert len(graph._executor.known) == 1


def test_mixed_input_frameworks_take_the_checked_path() -> None:
    cupy = pytest.importorskip("cupy")
    torch.manual_seed(13)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    w_c = cupy.from_dlpack(w)
    for _ in range(2):
        torch.testing.assert_close(graph(x, w_c), reference(x, w), **TOL)
    assert not graph._executor.known


# -- streams and handles -------------------------------------------------------------------------

def _late_input(x: torch.Tensor, stream: torch.cuda.Stream) -> torch.Tensor:
    """A zero tensor that ``stream`` fills with ``x`` only after ~0.1 s of GPU spinning: work
    on any other stream reads zeros (torch's side streams do not wait for the legacy stream)."""
    late = torch.zeros_like(x)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)
        late.copy_(x)
    return late


def _graph_for(x: torch.Tensor, w: torch.Tensor) -> cudnn.Graph:
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT, inputs=["c::0", "c::1"],
                     outputs=["c::Y"]) as graph:
        graph.conv_fprop(x, w, padding=[1, 1], name="c").set_output(True)
    return graph


def test_the_current_torch_stream_is_used() -> None:
    torch.manual_seed(5)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    graph(x, w)  # plans, workspace and packs are ready: the timed part is only the call
    side = torch.cuda.Stream()
    late = _late_input(x, side)
    with torch.cuda.stream(side):
        y = graph(late, w)
        assert cudnn.get_stream(default_handle(x.device.index)) == side.cuda_stream
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, reference(x, w), **TOL)
    graph(x, w)  # back on the default stream: the default handle follows
    assert cudnn.get_stream(default_handle(x.device.index)) == torch.cuda.current_stream().cuda_stream


def test_the_stream_tests_can_fail() -> None:
    """Negative control: on the legacy default stream the graph overtakes the late copy and reads
    zeros, so the stream tests above and below would catch a call on the wrong stream."""
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    legacy = cudnn.create_handle()  # its stream is 0, the legacy default stream
    try:
        graph(x, w, handle=legacy)
        side = torch.cuda.Stream()
        late = _late_input(x, side)
        y = graph(late, w, handle=legacy)
        torch.cuda.synchronize()
        assert y.abs().max().item() == 0.0 and reference(x, w).abs().max().item() > 0
    finally:
        cudnn.destroy_handle(legacy)


def test_an_explicit_handle_keeps_its_stream() -> None:
    torch.manual_seed(6)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    side = torch.cuda.Stream()
    handle = cudnn.create_handle()
    try:
        cudnn.set_stream(handle, side.cuda_stream)
        graph(x, w, handle=handle)
        late = _late_input(x, side)
        y = graph(late, w, handle=handle)  # called from the default stream; runs on the handle's
        assert cudnn.get_stream(handle) == side.cuda_stream
        torch.cuda.current_stream().wait_stream(side)
        torch.testing.assert_close(y, reference(x, w), **TOL)
    finally:
        torch.cuda.synchronize()
        cudnn.destroy_handle(handle)


def test_a_stream_argument_is_used() -> None:
    torch.manual_seed(7)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    side = torch.cuda.Stream()
    late = _late_input(x, side)
    y = graph(late, w, stream=side)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, reference(x, w), **TOL)


# -- bad inputs are refused, naming the input -------------------------------------------------------

@pytest.mark.parametrize(("make", "name"), [
    (lambda x, w: (nhwc(4, 32, 8, 8), w), "c::0"),  # too small for its tensor
    (lambda x, w: (x, w.cpu()), "c::1"),  # a CPU tensor in second place
    (lambda x, w: (x.cpu(), w), "c::0"),  # a CPU tensor in first place
])
def test_bad_inputs_are_refused_naming_them(make: Any, name: str) -> None:
    torch.manual_seed(8)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    with pytest.raises(ExecutionInputError, match=name):
        graph(*make(x, w))
    torch.testing.assert_close(graph(x, w), reference(x, w), **TOL)  # the graph is still fine


@pytest.mark.parametrize(("make", "name"), [
    (lambda x, w: (x.contiguous(), w), "c::0"),  # strides (NCHW instead of channels-last), same bytes
    (lambda x, w: (x, w.float()), "c::1"),  # dtype, a larger buffer
])
def test_memory_safe_mismatches_warn_or_are_refused_when_strict(make: Any, name: str) -> None:
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    with pytest.warns(cudnn.ExecutionInputWarning, match=name):
        graph(*make(x, w))
    cudnn.set_execute_checks("strict")
    try:
        strict = _graph_for(x, w)
        with pytest.raises(ExecutionInputError, match=name):
            strict(*make(x, w))
    finally:
        cudnn.set_execute_checks("warn")


def test_bad_dict_outputs_warn() -> None:
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    graph = _graph_for(x, w)
    wrong = torch.empty(4, 16, 16, 16, device="cuda", dtype=torch.float16)  # NCHW, not channels-last
    with pytest.warns(cudnn.ExecutionInputWarning, match="c::Y"):
        graph({"c::0": x, "c::1": w, "c::Y": wrong})
    with pytest.raises(ExecutionInputError, match=r"c::Y.*needs"):
        graph({"c::0": x, "c::1": w, "c::Y": torch.empty(4, 16, 16, 8, device="cuda", dtype=torch.float16)})


# -- the helpers ---------------------------------------------------------------------------------------

def test_graph_and_jit_helpers() -> None:
    torch.manual_seed(9)
    x, w = nhwc(4, 32, 16, 16), nhwc(16, 32, 3, 3)
    handle = cudnn.create_handle()

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    @cudnn.graph_cache(key_fn=lambda x, w: (tuple(x.shape), tuple(x.stride()), tuple(w.shape)))
    def conv(x: torch.Tensor, w: torch.Tensor) -> tuple[cudnn.pygraph, list[Any]]:
        with cudnn.graph(handle) as (g, _):
            X = g.tensor_like(x)
            W = g.tensor_like(w)
            Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
        return g, [X, W, Y]

    try:
        g, (ux, uw, uy) = conv(x, w)
        assert conv(x, w)[0] is g  # cached
        y = torch.empty(4, 16, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        g.execute({ux: x, uw: w, uy: y}, ws, handle=handle)
        torch.cuda.synchronize()
        torch.testing.assert_close(y, reference(x, w), **TOL)
    finally:
        cudnn.destroy_handle(handle)


def test_autotune_through_the_wrapper_keeps_the_fastest_plan() -> None:
    x, w = nhwc(16, 64, 56, 56), nhwc(64, 64, 3, 3)
    with cudnn.Graph(io_data_type=HALF, compute_data_type=FLOAT,
                     inputs=["conv::image", "conv::weight"], outputs=["conv::Y"]) as graph:
        graph.conv_fprop(image=x, weight=w, padding=[1, 1], name="conv").set_output(True)
    graph(x, w)
    graph(x, w)  # known before autotuning: what is known belongs to the plan of that time
    report = graph.autotune(x, w, repeats=5)
    assert report.best.time_ms == min(r.time_ms for r in report if r.time_ms is not None)
    assert graph._executor._runner is graph.pygraph.runner()
    y = graph(x, w)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, reference(x, w), **TOL)
