"""Output layouts and data types are inferred as the official frontend infers them, node by node.

The official 1.32 Python graph lowers to its C++ frontend, whose nodes infer what the user left
unset (``infer_properties_node`` in include/cudnn_frontend/node/*.h) and reflect it back. Each
test states the official rule it checks and computes the expected strides from that rule by
hand. Also here: how a slice is lowered on a cuDNN without the SLICE operation (< 9.22), as
the official does it: no operation, the output a window into the input's buffer.
"""

from __future__ import annotations

import gc
import types
from typing import Any

import pytest
from support.fake_backend import Backend, Pack

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.families.rng_nodes import Rng
from cudnn._graph.model.lower import Lowering
from cudnn._graph.model.node import Context
from cudnn._graph.run.runner import Runner
from cudnn._lib import release
from cudnn.backend import attr_label

dt = cudnn.data_type
TRAIN = cudnn.norm_forward_phase.TRAINING


def graph(io: Any = dt.HALF) -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)


def layout(t: cudnn.tensor) -> tuple[list[int], list[int], Any]:
    return t.get_dim(), t.get_stride(), t.get_data_type()


# -- pointwise: the strides of an input of the output's dims -------------------------------------

def test_pointwise_output_takes_the_strides_of_a_view() -> None:
    """test_apply_rope: the rotated halves are written in place into strided views of x, so the
    outputs must have the views' strides (the official copies them from the input of the output's
    dims); packed strides wrote a third of the result to the wrong places."""
    b, t, hs, rope = 8, 64, 128, 32
    g = graph(None)
    view = [t * hs, hs, 1]  # x[..., :16] of a [b, t, hs] tensor
    x1 = g.tensor(name="x1", dim=[b, t, rope // 2], stride=view, data_type=dt.HALF)
    x2 = g.tensor(name="x2", dim=[b, t, rope // 2], stride=view, data_type=dt.HALF)
    cos1 = g.tensor(name="cos1", dim=[1, t, rope // 2], stride=[t * rope, rope, 1], data_type=dt.FLOAT)
    sin1 = g.tensor(name="sin1", dim=[1, t, rope // 2], stride=[t * rope, rope, 1], data_type=dt.FLOAT)
    x1_cos1, x2_sin1 = g.mul(x1, cos1), g.mul(x2, sin1)
    y1 = g.sub(x1_cos1, x2_sin1).set_output(True).set_data_type(dt.HALF)
    g.validate()
    assert layout(x1_cos1) == ([b, t, 16], view, dt.FLOAT)  # virtual: the intermediate type
    assert layout(y1) == ([b, t, 16], view, dt.HALF)


def test_pointwise_output_takes_the_last_input_of_its_dims() -> None:
    """The official node keeps its inputs in a hash map, which (libstdc++, the official wheel's)
    yields IN_2, IN_1, IN_0: of several inputs with the output's dims, the last gives the strides."""
    g = graph()
    a = g.tensor(name="a", dim=[2, 3, 4], stride=[12, 4, 1])
    b = g.tensor(name="b", dim=[2, 3, 4], stride=[1, 2, 6])
    m = g.tensor(name="m", dim=[2, 3, 4], stride=[12, 1, 3], data_type=dt.BOOLEAN)
    two = g.add(a, b).set_output(True)
    three = g.binary_select(a, b, m).set_output(True)
    swapped = g.add(b, a).set_output(True)
    g.validate()
    assert two.get_stride() == [1, 2, 6] and swapped.get_stride() == [12, 4, 1]
    assert three.get_stride() == [12, 1, 3]


def test_pointwise_output_of_new_dims_packs_in_the_first_inputs_order() -> None:
    """No input has the broadcast dims: IN_0's stride order, packed (generate_stride_order_
    preserving_format: equal strides keep dim order, the earlier dim counting as faster)."""
    g = graph()
    col = g.tensor(name="col", dim=[4, 1, 8], stride=[8, 8, 1])  # dims 0 and 1 tie on stride 8
    row = g.tensor(name="row", dim=[1, 3, 1])
    out = g.add(col, row).set_output(True)
    g.validate()
    # order: dim 2 (stride 1), then dim 0, then dim 1 (the tie goes to the earlier dim)
    assert out.get_dim() == [4, 3, 8] and out.get_stride() == [8, 32, 1]
    g = graph()
    nhwc_x = g.tensor(name="x", dim=[2, 1, 4, 4], stride=[16, 1, 4, 1])  # C of size 1 ties with W
    out = g.mul(nhwc_x, g.tensor(name="s", dim=[1, 3, 1, 1])).set_output(True)
    g.validate()
    # strides 16, 1, 4, 1 rank dims 1, 3, 2, 0 from the fastest: C, W, H, N packed
    assert out.get_stride() == [48, 1, 12, 3]


# -- structural nodes ----------------------------------------------------------------------------

def test_slice_keeps_the_input_strides_times_the_step_and_its_type() -> None:
    g = graph(dt.FLOAT)
    x = g.tensor(name="x", dim=[16, 32, 128], data_type=dt.BFLOAT16)  # strides 4096, 128, 1
    y = g.slice(x, [slice(8, None), slice(16, None, 2)]).set_output(True)
    g.validate()
    assert layout(y) == ([8, 8, 128], [4096, 256, 1], dt.BFLOAT16)  # not the graph's FLOAT
    g = graph()
    x = g.tensor(name="x", dim=[4, 4], data_type=dt.HALF)
    g.slice(x, [slice(0, 2)], name="s").set_data_type(dt.FLOAT).set_output(True)
    with pytest.raises(cudnn.GraphError, match="slice 's': Y: data type FLOAT differs from X's HALF"):
        g.validate()


def test_transpose_permutes_the_input_strides_and_keeps_its_type() -> None:
    g = graph(dt.FLOAT)
    x = g.tensor(name="x", dim=[2, 3, 4], data_type=dt.HALF)
    y = g.transpose(x, [0, 2, 1]).set_output(True)
    g.validate()
    assert layout(y) == ([2, 4, 3], [12, 1, 4], dt.HALF)  # X's memory, described transposed
    g = graph()
    g.transpose(g.tensor(name="x", dim=[2, 3]), [1, 0], name="t").set_data_type(dt.FLOAT).set_output(True)
    with pytest.raises(cudnn.GraphError, match="transpose 't': Y: data type FLOAT differs from X's HALF"):
        g.validate()


def test_reduction_output_is_channels_last() -> None:
    """The official's reduction gives Y the NHWC stride order whatever X's layout: dim 1 fastest,
    then the last dims back to dim 2, dim 0 slowest."""
    g = graph()
    x = g.tensor(name="x", dim=[4, 16, 32])
    over_batch = g.reduction(x, cudnn.reduction_mode.ADD).set_dim([1, 16, 32]).set_output(True)
    over_rows = g.reduction(x, cudnn.reduction_mode.MAX).set_dim([4, 16, 1]).set_output(True)
    g.validate()
    assert over_batch.get_stride() == [512, 1, 16]  # dim 1 (16) fastest, then dim 2 (32)
    assert over_rows.get_stride() == [16, 1, 16]
    g = graph()
    y = g.reduction(g.tensor(name="x", dim=[8, 4, 6, 6]), cudnn.reduction_mode.ADD).set_dim([1, 4, 1, 1])
    y.set_output(True)
    g.validate()
    assert y.get_stride() == [4, 1, 4, 4]


def test_reshape_output_is_channels_last_and_logical_keeps_the_type() -> None:
    g = graph()
    x = g.tensor(name="x", dim=[2, 3, 4])
    y = g.reshape(x).set_dim([6, 4]).set_output(True)
    z = g.reshape(x).set_dim([2, 2, 6]).set_output(True)
    g.validate()
    assert y.get_stride() == [4, 1]  # NHWC order of 2 dims: dim 1 fastest
    assert z.get_stride() == [12, 1, 2]  # dim 1, then dim 2, then dim 0
    g = graph(dt.FLOAT)
    logical = g.reshape(g.tensor(name="x", dim=[2, 6], data_type=dt.HALF),
                        reshape_mode=cudnn.reshape_mode.LOGICAL).set_dim([3, 4]).set_output(True)
    g.validate()
    assert logical.get_data_type() == dt.HALF


def test_concatenate_packs_in_the_first_inputs_order() -> None:
    g = graph()
    a = g.tensor(name="a", dim=[2, 3, 4], stride=[12, 1, 3])
    b = g.tensor(name="b", dim=[2, 5, 4], stride=[20, 1, 5])
    y = g.concatenate([a, b], 1).set_output(True)
    g.validate()
    assert y.get_dim() == [2, 8, 4] and y.get_stride() == [32, 1, 8]


def test_genstats_sums_are_channels_last() -> None:
    g = graph()
    total, squares = g.genstats(g.tensor(name="x", dim=[2, 8, 5, 5]))
    total.set_output(True), squares.set_output(True)
    g.validate()
    assert total.get_stride() == squares.get_stride() == [8, 1, 8, 8]


# -- matmul and convolution ------------------------------------------------------------------------

def test_matmul_output_is_row_major_whatever_the_inputs() -> None:
    g = graph()
    a = g.tensor(name="a", dim=[3, 4, 8], stride=[32, 1, 4])  # column major
    b = g.tensor(name="b", dim=[3, 8, 5], stride=[40, 1, 8])
    c = g.matmul(a, b).set_output(True)
    g.validate()
    assert c.get_dim() == [3, 4, 5] and c.get_stride() == [20, 5, 1]


def test_convolutions_are_channels_last() -> None:
    g = graph()
    x = g.tensor(name="x", dim=[2, 8, 10, 10])  # NCHW-packed input
    w = g.tensor(name="w", dim=[16, 8, 3, 3])
    y = g.conv_fprop(x, w, padding=[1, 1]).set_output(True)
    dy = g.tensor(name="dy", dim=[2, 16, 5, 5])
    dx = g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2]).set_output(True)
    dw = g.conv_wgrad(x, g.tensor(name="dy1", dim=[2, 16, 10, 10]), padding=[1, 1]).set_output(True)
    g.validate()
    assert y.get_stride() == [1600, 1, 160, 16]
    # a strided dgrad: the smallest input giving DY, (5 - 1) * 2 + (3 - 1) + 1 - 1 - 1 = 9
    assert dx.get_dim() == [2, 8, 9, 9] and dx.get_stride() == [648, 1, 72, 8]
    assert dw.get_dim() == [16, 8, 3, 3] and dw.get_stride() == [72, 1, 24, 8]


# -- normalizations --------------------------------------------------------------------------------

def test_norm_forward_y_takes_x_strides_and_statistics_its_order() -> None:
    g = graph(dt.BFLOAT16)
    x = g.tensor(name="x", dim=[4, 8, 16], stride=[256, 16, 1])  # rows padded to 256
    scale = g.tensor(name="s", dim=[1, 8, 16], data_type=dt.FLOAT)
    y, mean, inv = g.layernorm(TRAIN, x, scale, g.tensor(name="b", dim=[1, 8, 16], data_type=dt.FLOAT), 1e-5)
    for t in (y, mean, inv):
        t.set_output(True)
    g.validate()
    assert layout(y) == ([4, 8, 16], [256, 16, 1], dt.BFLOAT16)  # X's strides, a padded view's included
    assert layout(mean) == ([4, 1, 1], [1, 1, 1], dt.BFLOAT16)  # the io type, X's order packed


def test_batchnorm_y_takes_x_strides_and_statistics_are_channels_last() -> None:
    g = graph(None)
    x = g.tensor(name="x", dim=[4, 8, 6, 6], data_type=dt.HALF)  # NCHW
    per_channel = [g.tensor(name=n, dim=[1, 8, 1, 1], data_type=dt.FLOAT) for n in ("s", "b", "rm", "rv")]
    out = g.batchnorm(x, *per_channel, 1e-5, 0.1)
    for t in out:
        t.set_output(True)
    g.validate()
    assert out[0].get_stride() == x.get_stride() == [288, 36, 6, 1]
    for t in out[1:]:
        assert layout(t) == ([1, 8, 1, 1], [8, 1, 8, 8], dt.FLOAT)  # no io type: FLOAT


def test_norm_backward_outputs_are_channels_last_adaptive_row_major() -> None:
    """Layer, RMS, instance and batch norm backward give the parameter gradients the NHWC order
    and adaptive layer norm backward row major, as the official. DX takes X's strides: the
    backend refuses a DX shaped otherwise (BAD_PARAM_SHAPE_MISMATCH, on cuDNN 9.19)."""
    g = graph()
    x = g.tensor(name="x", dim=[2, 8, 64])
    scale = g.tensor(name="s", dim=[1, 8, 64], data_type=dt.FLOAT)
    stats = [g.tensor(name=n, dim=[2, 1, 1], data_type=dt.FLOAT) for n in ("m", "v")]
    dx, dscale, dbias = g.layernorm_backward(g.tensor(name="dy", dim=[2, 8, 64]), x, scale, *stats)
    for t in (dx, dscale, dbias):
        t.set_output(True)
    ada_scale = g.tensor(name="as", dim=[2, 1, 64], data_type=dt.FLOAT)
    ada_stats = [g.tensor(name=n, dim=[2, 8, 1], data_type=dt.FLOAT) for n in ("am", "av")]
    ada = g.adalayernorm_backward(g.tensor(name="ady", dim=[2, 8, 64]), x, ada_scale, *ada_stats)
    for t in ada:
        t.set_output(True)
    g.validate()
    assert layout(dx) == ([2, 8, 64], [512, 64, 1], dt.HALF)
    assert layout(dscale) == ([1, 8, 64], [512, 1, 8], dt.HALF)  # the io type, as the official's
    assert ada[0].get_stride() == x.get_stride() and ada[1].get_stride() == [64, 64, 1]


def test_norm_gradient_types_without_an_io_type() -> None:
    """With no io type the official leaves an unset output type unset (and fails); cudnn-py gives
    statistics FLOAT and parameter gradients the parameter's type."""
    g = graph(None)
    x = g.tensor(name="x", dim=[8, 64, 1, 1], data_type=dt.BFLOAT16)
    scale = g.tensor(name="s", dim=[1, 64, 1, 1], data_type=dt.FLOAT)
    inv = g.tensor(name="v", dim=[8, 1, 1, 1], data_type=dt.FLOAT)
    dx, dscale, _ = g.rmsnorm_backward(g.tensor(name="dy", dim=[8, 64, 1, 1], data_type=dt.BFLOAT16), x, scale,
                                       inv, False)
    dx.set_output(True).set_data_type(dt.BFLOAT16)
    dscale.set_output(True)
    g.validate()
    assert layout(dscale) == ([1, 64, 1, 1], [64, 1, 64, 64], dt.FLOAT)
    assert dx.get_stride() == x.get_stride() == [64, 1, 1, 1]


# -- block scale, MoE, RNG ------------------------------------------------------------------------

def test_block_scale_quantize_transposed_packs_the_block_axis() -> None:
    """With transpose, the official sorts X's dims by stride (unit dims first among equal strides,
    else the later dim first), then rotates the block axis to the front: it is packed."""
    g = graph(dt.FLOAT)
    x = g.tensor(name="x", dim=[1, 1, 64, 128])  # strides 8192, 8192, 128, 1
    y, scale = g.block_scale_quantize(x, 32, axis=2, transpose=True)
    y.set_data_type(dt.FP8_E4M3).set_output(True), scale.set_output(True)
    plain, plain_scale = g.block_scale_quantize(x, 32)
    plain.set_data_type(dt.FP8_E4M3).set_output(True), plain_scale.set_output(True)
    g.validate()
    # sorted dims 3, 2, 1, 0; rotated to the axis: 2, 1, 0, 3 from the fastest
    assert y.get_stride() == [64, 64, 1, 64]
    assert scale.get_dim() == [1, 1, 2, 128] and scale.get_stride() == [2, 2, 1, 2]
    # no transpose: Y has X's strides, the scale X's order (3, 2, 0, 1 from the fastest) packed
    assert plain.get_stride() == x.get_stride()
    assert plain_scale.get_dim() == [1, 1, 64, 4] and plain_scale.get_stride() == [256, 256, 4, 1]


def test_moe_weight_gradient_is_column_major_per_expert() -> None:
    g = graph(dt.BFLOAT16)
    dout = g.tensor(name="do", dim=[1, 10, 6])
    token = g.tensor(name="tok", dim=[1, 10, 4])
    offsets = g.tensor(name="fto", dim=[3, 1, 1], data_type=dt.INT32)
    dw = g.moe_grouped_matmul_bwd(dout, token, offsets).set_output(True)
    g.validate()
    assert dw.get_dim() == [3, 4, 6] and dw.get_stride() == [24, 1, 4]


def test_rng_output_is_channels_last_in_the_graphs_type() -> None:
    seed = cudnn.tensor("seed", [1, 1, 1, 1], [1, 1, 1, 1], dt.INT64)
    offset = cudnn.tensor("offset", [1, 1, 1, 1], [1, 1, 1, 1], dt.INT64)
    node = Rng("rng", seed, offset, bernoulli_probability=0.9)
    node.outputs["Y"] = cudnn.tensor("y", [2, 3, 4, 5])
    node.infer(Context(dt.HALF))
    assert layout(node.outputs["Y"]) == ([2, 3, 4, 5], [60, 1, 15, 3], dt.HALF)


# -- a slice on a cuDNN without the SLICE operation -----------------------------------------------

class FakeDesc:
    def __init__(self, kind: str, tensor: Any = None) -> None:
        self.kind, self.tensor = kind, tensor
        self.attrs: dict[str, Any] = {}

    def set(self, attr: Any, value: Any, attr_type: Any = None) -> FakeDesc:
        self.attrs[attr_label(attr).removeprefix("CUDNN_ATTR_OPERATION_")] = value
        return self

    def finalize(self) -> FakeDesc:
        return self


class FakeLowering(Lowering):
    def descriptor(self, desc_type: Any, label: str) -> Any:  # type: ignore[override]
        return FakeDesc(desc_type.name.removeprefix("CUDNN_BACKEND_"))

    def tensor(self, t: Any) -> Any:  # type: ignore[override]
        from cudnn._graph.model.lower import alignment

        return FakeDesc("TENSOR", (t.get_uid(), t.get_dim(), t.get_stride(), t.get_is_virtual(), alignment(t)))


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """build_operation_graph without a device, at ``state["version"]``; the ops in ``state["ops"]``."""
    state: dict[str, Any] = {"version": 91900}
    monkeypatch.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=state["version"]))
    monkeypatch.setattr(pipeline_module, "Lowering", FakeLowering)
    monkeypatch.setattr(pipeline_module, "release_point", lambda handle: None)  # the fake handle reaches no cuDNN

    def operation_graph(handle: int, ops: list[Any], *args: Any, **kw: Any) -> str:
        state["ops"] = ops
        return "OPGRAPH"

    monkeypatch.setattr(pipeline_module.eng, "operation_graph", operation_graph)
    return state


def slice_matmul() -> tuple[cudnn.pygraph, cudnn.tensor, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    """test_int8_bf16_matmul_slice's graph: C = A[8:, 16:, :] @ B[8:, :, 32:]."""
    g = cudnn.pygraph(handle=1)
    a = g.tensor(name="A", dim=[16, 32, 128], data_type=dt.BFLOAT16)
    b = g.tensor(name="B", dim=[16, 128, 64], data_type=dt.BFLOAT16)
    a_slice = g.slice(a, [slice(8, None), slice(16, None), slice(None, None)], name="A_slice")
    b_slice = g.slice(b, [slice(8, None), slice(None, None), slice(32, None)], name="B_slice")
    c = g.matmul(a_slice, b_slice, compute_data_type=dt.FLOAT, name="matmul")
    c.set_output(True).set_data_type(dt.BFLOAT16)
    return g, a, b, c, a_slice


def test_slice_before_9_22_is_a_window_into_the_input(built: dict[str, Any]) -> None:
    g, a, b, _, a_slice = slice_matmul()
    g.validate()
    assert layout(a_slice) == ([8, 16, 128], [4096, 128, 1], dt.BFLOAT16)
    assert a_slice.get_is_virtual()
    g.build_operation_graph()
    (matmul,) = built["ops"]  # no SLICE operation: the matmul reads the windows
    assert matmul.kind == "OPERATION_MATMUL_DESCRIPTOR"
    uid, dims, strides, virtual, align = matmul.attrs["MATMUL_ADESC"].tensor
    assert (uid, dims, strides, virtual) == (a_slice.get_uid(), [8, 16, 128], [4096, 128, 1], False)
    assert uid != a.get_uid() and align == 16  # 69632 bytes in: 16-byte alignment holds
    # A starts (8 * 4096 + 16 * 128) bf16 elements into A; B_slice (8 * 8192 + 32) into B
    assert a_slice.window_of() == (a, 69632)
    assert g.nodes[1].outputs["Y"].window_of() == (b, 131136)
    g.validate()  # a window is what a build made: validate forgets it
    assert a_slice.get_is_virtual() and a_slice.window_of() is None


def test_slice_from_9_22_is_the_slice_operation(built: dict[str, Any]) -> None:
    built["version"] = 92200
    g, _, _, _, a_slice = slice_matmul()
    g.validate()
    g.build_operation_graph()
    kinds = [op.kind for op in built["ops"]]
    assert kinds == ["OPERATION_SLICE_DESCRIPTOR", "OPERATION_SLICE_DESCRIPTOR", "OPERATION_MATMUL_DESCRIPTOR"]
    assert built["ops"][0].attrs["SLICE_START_INDICES"] == [8, 16, 0]
    assert a_slice.window_of() is None and a_slice.get_is_virtual()


def test_window_is_bound_at_the_input_address_plus_the_offset(built: dict[str, Any],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    g, a, b, c, a_slice = slice_matmul()
    g.validate()
    g.build_operation_graph()
    lowered = g._pipeline.lowered()
    backend = Backend()
    backend.install(monkeypatch)
    runner = Runner("graph", Pack(99), 0, lowered.bindings, 1, None, unused=lowered.unused)
    runner.backend_execute = backend.execute
    pointers = {a.get_uid(): 0x7F0000000000, b.get_uid(): 0x7F0000100000, c.get_uid(): 0x7F0000200000}
    uids = tuple(pointers)
    runner.run_pointers(uids, tuple(pointers.values()), 0, 1)
    (executed,) = backend.executed
    b_slice = g.nodes[1].outputs["Y"]
    assert executed == {**pointers, a_slice.get_uid(): 0x7F0000000000 + 69632,
                        b_slice.get_uid(): 0x7F0000100000 + 131136}
    assert [r.uid for r in runner.required] == [a.get_uid(), b.get_uid(), c.get_uid()]  # windows are not given
    del runner  # its packs are released into the recording backend, not a real one
    gc.collect()
    release.drain()


@pytest.mark.parametrize("case", ["intermediate", "graph output"])
def test_slice_before_9_22_refuses_what_a_window_cannot_be(built: dict[str, Any], case: str) -> None:
    g = cudnn.pygraph(handle=1, io_data_type=dt.HALF, compute_data_type=dt.FLOAT)
    x = g.tensor(name="x", dim=[4, 8])
    source = g.relu(x) if case == "intermediate" else x
    y = g.slice(source, [slice(1, 3)], name="s")
    (y if case == "graph output" else g.relu(y)).set_output(True)
    g.validate()
    what = "X is an intermediate" if case == "intermediate" else "Y is a graph output"
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=f"slice 's': SLICE operation \\({what}.*"
                                                                r"needs cuDNN >= 9\.22\.0"):
        g.build_operation_graph()


def test_a_window_alignment_is_that_of_its_offset(built: dict[str, Any]) -> None:
    g = cudnn.pygraph(handle=1, io_data_type=dt.HALF, compute_data_type=dt.FLOAT)
    x = g.tensor(name="x", dim=[4, 8])
    y = g.slice(x, [slice(None), slice(1, 5)], name="s")
    g.relu(y).set_output(True)
    g.validate()
    g.build_operation_graph()
    relu = built["ops"][0]
    assert relu.attrs["POINTWISE_XDESC"].tensor[4] == 2  # one HALF element in: 2-byte aligned


def test_a_slice_of_a_slice_is_a_window_into_the_first_input(built: dict[str, Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    g = cudnn.pygraph(handle=1, io_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    x = g.tensor(name="x", dim=[8, 16])
    inner = g.slice(x, [slice(2, None)], name="inner")  # 2 rows of 16 floats in: 128 bytes
    outer = g.slice(inner, [slice(1, 3), slice(4, None)], name="outer")  # 1 row and 4 floats more: 80
    y = g.relu(outer).set_output(True)
    g.validate()
    assert layout(outer) == ([2, 12], [16, 1], dt.FLOAT)
    g.build_operation_graph()
    assert inner.window_of() == (x, 128) and outer.window_of() == (x, 208)
    lowered = g._pipeline.lowered()
    backend = Backend()
    backend.install(monkeypatch)
    runner = Runner("graph", Pack(99), 0, lowered.bindings, 1, None, unused=lowered.unused)
    runner.backend_execute = backend.execute
    runner.run_pointers((x.get_uid(), y.get_uid()), (0x7F0000000000, 0x7F0000100000), 0, 1)
    (executed,) = backend.executed
    assert executed[outer.get_uid()] == 0x7F0000000000 + 208
    del runner
    gc.collect()
    release.drain()
