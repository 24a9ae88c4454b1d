"""1.32's graph-object surface on the GPU: a conv+bias+relu and an attention graph,
whose plans(), select_plan(), selected_engine, get_engine_and_knobs_at_index(),
backend_plan_entries() agree with each other and with get_plan_name_at_index; select_plan(i)
then execute matches torch; chaining through build; heuristics= builds; DeviceInfo's facts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import cudnn

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def conv_bias_relu():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = torch.randn(2, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(32, 16, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    b = torch.randn(1, 32, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1], name="conv"), B, name="bias"), name="relu")
    Y.set_output(True)
    y = torch.empty(2, 32, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    ref = torch.relu(F.conv2d(x.float(), w.float(), padding=1) + b.float())
    return g, {X: x, W: w, B: b, Y: y}, y, ref


def attention():  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    out_t, _ = g.sdpa(Q, K, V, generate_stats=False, attn_scale=0.125, use_causal_mask=True, name="attn")
    o = torch.empty_like(q)
    out_t.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.125)
    return g, {Q: q, K: k, V: v, out_t: o}, o, ref


def run(g: cudnn.pygraph, pack: dict, out: torch.Tensor, ref: torch.Tensor) -> None:  # type: ignore[type-arg]
    out.fill_(float("nan"))
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("make", [conv_bias_relu, attention], ids=["conv_bias_relu", "sdpa"])
def test_plan_introspection_agrees_and_select_plan_runs(make) -> None:  # type: ignore[no-untyped-def]
    g, pack, out, ref = make()
    assert g.plans == [] and g.selected_engine is None
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(heuristics=HEUR)
    plans = g.plans
    count = g.get_execution_plan_count()
    assert count == len(plans) > 0 and plans == g.backend_plan_entries()
    for i, entry in enumerate(plans):
        assert entry.cpp_index == i and entry.name == g.get_plan_name_at_index(i)
        engine_id, knobs = g.get_engine_and_knobs_at_index(i)
        assert (engine_id, knobs) == (entry.engine_id, entry.knobs) and engine_id >= 0
        assert g.get_plan_name_at_index(i).startswith(f"eng{engine_id}")
        assert entry.mode in HEUR
    g.check_support()
    ran = 0
    for i in range(count):
        try:
            assert g.select_plan(i) is g
            g.build_plans()
        except cudnn.cudnnGraphNotSupportedError:
            continue  # a candidate that does not build on this GPU: the pin raises, as in 1.32
        assert g.selected_engine is None
        run(g, pack, out, ref)
        ran += 1
        if ran == 3:
            break
    assert ran > 0


@pytest.mark.parametrize("make", [conv_bias_relu, attention], ids=["conv_bias_relu", "sdpa"])
def test_heuristics_keyword_builds_and_chains(make) -> None:  # type: ignore[no-untyped-def]
    g, pack, out, ref = make()
    g.build(heuristics=HEUR)
    run(g, pack, out, ref)
    last = g.get_execution_plan_count() - 1
    # chaining: build a plan by index (it is selected), filter, and run what is selected
    assert g.build_plan_at_index(0).deselect_workspace_greater_than(1 << 40) is g
    run(g, pack, out, ref)
    engine_id, knobs = g.get_engine_and_knobs_at_index(last)
    fresh, pack2, out2, ref2 = make()
    fresh.validate()
    fresh.build_operation_graph()
    assert fresh.create_execution_plan(engine_id, knobs) is fresh  # replay (engine_id, knobs): appended
    index = fresh.get_execution_plan_count() - 1
    assert fresh.get_engine_and_knobs_at_index(index) == (engine_id, knobs)
    try:
        assert fresh.build_plan_at_index(index) is fresh  # built and selected
    except cudnn.cudnnGraphNotSupportedError:
        pytest.skip(f"engine {engine_id} does not build on this GPU")
    run(fresh, pack2, out2, ref2)


def test_build_without_arguments_builds_a_plan() -> None:
    g, pack, out, ref = conv_bias_relu()
    g.build()
    assert g.get_execution_plan_count() > 0
    run(g, pack, out, ref)
    assert [n.node_type for n in g.nodes] == [cudnn.NodeType.CONV_FPROP, cudnn.NodeType.POINTWISE,
                                              cudnn.NodeType.POINTWISE]
    assert {t.name for t in g.get_outputs()} == {"relu::OUT_0"}
    assert len(g.get_inputs()) == 3 and all(g.find_tensor(t.uid) is t for t in g.get_inputs())


def test_device_info_matches_torch() -> None:
    info = cudnn.DeviceInfo(torch.cuda.current_device())
    props = torch.cuda.get_device_properties(info.ordinal)
    assert info.compute_capability == (props.major, props.minor)
    assert info.sm_version == props.major * 10 + props.minor and info.sm_count == props.multi_processor_count
    assert info.device_name == props.name
    assert info.l2_cache_bytes > 0 and info.shared_memory_per_block_optin >= 48 * 1024
    assert info.oversized_shared_memory_per_block >= 0
    assert info.sm_count is info.sm_count  # cached
    with pytest.raises(ValueError, match=r"DeviceInfo: cuda:99 does not exist \(\d+ device\(s\) visible\)"):
        _ = cudnn.DeviceInfo(99).sm_count
