"""Normalization graphs on the GPU against PyTorch: every op and phase in fp16, bf16 and fp32,
backward passes against autograd (float64 references), and norm + pointwise fusions.

Inputs are quantized to the test dtype first and the reference runs in float64 on those same
values, so the tolerances only cover cuDNN's arithmetic and the output rounding:
  Y / DX   fp16 atol 2e-2 rtol 2e-2 | bf16 atol 1e-1 rtol 4e-2 | fp32 atol 2e-4 rtol 2e-4
           (bf16 has 8 mantissa bits: one ulp of a value near 4 is 0.03; DX sums more terms)
  float statistics (MEAN, INV_VARIANCE, running stats): atol 1e-4 rtol 1e-4
  DSCALE / DBIAS (fp32 sums over hundreds of rows): atol 2e-3 rtol 2e-3 (x4 when stored in x's dtype)
Outputs are filled with NaN before executing, so an output cuDNN did not write fails. BOOLEAN
outputs are bit-packed by cuDNN (8 elements a byte, least significant bit first, in memory
order): their buffers are ceil(numel / 8) uint8 bytes filled with 0x7F, unpacked to compare.
A graph is skipped as unsupported only when heuristics report NOT_SUPPORTED or no plan
finalizes (the backend's answer; the reason is printed); cases the official frontend's own
tests or NVIDIA's samples run (fp16/bf16 layer, RMS and instance norm, fp16 NHWC batch norm
fusions, zero-centered gamma, BN finalize) must build.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from support.replay_check import check_replay

import cudnn

dt = cudnn.data_type
TRAIN, INFER = cudnn.norm_forward_phase.TRAINING, cudnn.norm_forward_phase.INFERENCE
CUDNN = {torch.float16: dt.HALF, torch.bfloat16: dt.BFLOAT16, torch.float32: dt.FLOAT}
TORCH = {v: k for k, v in CUDNN.items()}
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
IDS = ["fp16", "bf16", "fp32"]
TOL = {torch.float16: (2e-2, 2e-2), torch.bfloat16: (1e-1, 4e-2), torch.float32: (2e-4, 2e-4)}
STATS_TOL = (1e-4, 1e-4)
PARAM_GRAD_TOL = (2e-3, 2e-3)
EPS = 1e-5
HEURISTICS = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


# -- helpers ---------------------------------------------------------------------------------------

def new_graph() -> cudnn.pygraph:
    return cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)


def tensor(g: cudnn.pygraph, name: str, t: torch.Tensor) -> cudnn.tensor:
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=CUDNN[t.dtype])


def build(g: cudnn.pygraph, must_support: bool) -> None:
    """Build; skip when the backend has no engine for the graph (unless it must have one)."""
    g.validate()
    g.build_operation_graph()
    refused = []
    for mode in HEURISTICS:
        try:
            g.create_execution_plans([mode])
        except cudnn.CudnnNotSupportedError as exc:  # bad-parameter errors are ours: they fail the test
            refused.append(f"heuristics {mode.name}: {exc.status_name}")
    try:
        g.check_support()
        g.build_plans()
    except cudnn.cudnnGraphNotSupportedError as exc:
        if must_support:
            raise
        pytest.skip(f"cuDNN {cudnn.backend_version_string()} reports no engine for this graph "
                    f"({'; '.join(refused) or 'no refusal by heuristics'}): {exc}")


def poisoned(t: cudnn.tensor) -> torch.Tensor:
    """An output buffer with the graph's dims and strides, filled so unwritten values show;
    for a BOOLEAN output, its ceil(numel / 8) bit-packed bytes."""
    if t.get_data_type() == dt.BOOLEAN:
        return torch.full((math.ceil(math.prod(t.get_dim()) / 8),), 0x7F, dtype=torch.uint8, device="cuda")
    buf = torch.empty_strided(t.get_dim(), t.get_stride(), dtype=TORCH[t.get_data_type()], device="cuda")
    return buf.fill_(float("nan"))


def unpack_bits(packed: torch.Tensor, t: cudnn.tensor) -> torch.Tensor:
    """A BOOLEAN output as a bool tensor of its dims: bit i (least significant first) of the
    buffer is the element at memory offset i under the tensor's strides."""
    bits = (packed.unsqueeze(-1) >> torch.arange(8, device=packed.device, dtype=torch.uint8)) & 1
    return bits.reshape(-1)[:math.prod(t.get_dim())].bool().as_strided(t.get_dim(), t.get_stride())


def run(g: cudnn.pygraph, feeds: dict[cudnn.tensor, torch.Tensor], outs: Sequence[cudnn.tensor | None],
        must_support: bool = False) -> list[torch.Tensor]:
    """Build, execute with NaN-poisoned outputs, return them in the order given."""
    build(g, must_support)
    bufs = [poisoned(t) for t in outs if t is not None]
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    pack = {**feeds, **dict(zip([t for t in outs if t is not None], bufs))}
    g.execute(pack, ws)
    torch.cuda.synchronize()
    differs = check_replay(g, pack, ws, bufs)  # the replayed pack writes the executed bits
    assert differs is None, differs
    return bufs


def close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: tuple[float, float]) -> None:
    assert not torch.isnan(got).any(), f"{name}: NaN in the output (not written, or wrong)"
    torch.testing.assert_close(got.double(), ref.double().reshape(got.shape), atol=tol[0], rtol=tol[1],
                               msg=lambda m: f"{name}: {m}")


def grads(fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], dy: torch.Tensor) -> tuple:
    """Autograd in float64 of fn(*inputs) against the upstream gradient dy."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, dy.double())


def check_backward(g: cudnn.pygraph, feeds: dict[cudnn.tensor, torch.Tensor], outs: Sequence[cudnn.tensor | None],
                   ref: Sequence[torch.Tensor], dtype: torch.dtype, must_support: bool = False,
                   param_tol: tuple[float, float] = PARAM_GRAD_TOL) -> None:
    """Run a backward graph and compare DX, DSCALE (and DBIAS when produced) with autograd."""
    got = run(g, feeds, [t.set_output(True) for t in outs if t is not None], must_support)
    for name, out, want, tol in zip(("DX", "DSCALE", "DBIAS"), got, ref, (TOL[dtype], param_tol, param_tol)):
        close(name, out, want, tol)


def backward_graph(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor | None, inv: torch.Tensor) -> tuple:
    """A graph with the inputs of a backward norm (DY random), their feeds, and DY itself."""
    named = {"dy": torch.randn_like(x), "x": x, "scale": w, "mean": mean, "inv": inv}
    g = new_graph()
    ts = {k: tensor(g, k, v) for k, v in named.items() if v is not None}
    return g, [ts.get(k) for k in named], {ts[k]: v for k, v in named.items() if v is not None}, named["dy"]


def layer_stats(x: torch.Tensor, dims: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and 1 / sqrt(biased variance + eps) in float64, kept dims."""
    xd = x.double()
    mean = xd.mean(dim=tuple(dims), keepdim=True)
    var = xd.var(dim=tuple(dims), unbiased=False, keepdim=True)
    return mean, (var + EPS).rsqrt()


def rms(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    d = x.shape[-1]
    y = F.rms_norm(x, (d,), w.reshape(d), EPS) if hasattr(F, "rms_norm") else \
        x * (x.pow(2).mean(-1, keepdim=True) + EPS).rsqrt() * w.reshape(d)
    return y if b is None else y + b.reshape(d)


def transformer_inputs(dtype: torch.dtype, shape: tuple[int, ...] = (4, 128, 768)) -> tuple:
    torch.manual_seed(0)
    d = shape[-1]
    x = (3 * torch.randn(shape, device="cuda") - 0.5).to(dtype)
    w = (1 + 0.5 * torch.randn(1, 1, d, device="cuda")).reshape([1] * (len(shape) - 1) + [d])
    b = 0.5 * torch.randn_like(w)
    return x, w.float(), b.float()


def nhwc_inputs(dtype: torch.dtype, param_dtype: torch.dtype = torch.float32,
                shape: tuple[int, int, int, int] = (8, 32, 16, 16)) -> tuple:
    torch.manual_seed(0)
    c = shape[1]
    x = (2 * torch.randn(shape, device="cuda") + 0.3).to(dtype).to(memory_format=torch.channels_last)
    w = (1 + 0.5 * torch.randn(1, c, 1, 1, device="cuda")).to(param_dtype).to(memory_format=torch.channels_last)
    b = (0.5 * torch.randn(1, c, 1, 1, device="cuda")).to(param_dtype).to(memory_format=torch.channels_last)
    return x, w, b


def must(dtype: torch.dtype) -> bool:
    """The official frontend's tests run these norms in fp16 and bf16."""
    return dtype in (torch.float16, torch.bfloat16)


# -- layer norm ------------------------------------------------------------------------------------

@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_layernorm_forward(dtype: torch.dtype, phase: cudnn.norm_forward_phase) -> None:
    x, w, b = transformer_inputs(dtype)
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, M, V = g.layernorm(phase, X, S, B, EPS, name="ln")
    Y.set_output(True).set_data_type(CUDNN[dtype])
    outs = [Y] + ([M.set_output(True), V.set_output(True)] if phase == TRAIN else [])
    got = run(g, {X: x, S: w, B: b}, outs, must(dtype))
    d = x.shape[-1]
    ref = F.layer_norm(x.double(), (d,), w.double().reshape(d), b.double().reshape(d), EPS)
    close("Y", got[0], ref, TOL[dtype])
    if phase == TRAIN:
        mean, inv = layer_stats(x, [-1])
        close("MEAN", got[1], mean, STATS_TOL)
        close("INV_VARIANCE", got[2], inv, STATS_TOL)


@pytest.mark.parametrize("shape", [(512, 1024), (4, 128, 1024), (512, 1024, 1, 1)], ids=["2d", "3d", "4d"])
def test_layernorm_any_rank(shape: tuple[int, ...]) -> None:
    """X of any rank normalized over its trailing axes; 2-D and 3-D get the [rows, hidden, 1, 1]
    view, the 4-D one is that form already."""
    x, w, b = transformer_inputs(torch.bfloat16, shape[:2] if len(shape) == 4 else shape)
    x = x.reshape(shape)
    pshape = [1, 1024, 1, 1] if len(shape) == 4 else w.shape
    w, b = w.reshape(pshape), b.reshape(pshape)
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, M, V = g.layernorm(TRAIN, X, S, B, EPS)
    y, mean, inv = run(g, {X: x, S: w, B: b}, [Y.set_output(True), M.set_output(True), V.set_output(True)],
                       must_support=True)
    x2 = x.reshape(-1, 1024).double()
    close("Y", y, F.layer_norm(x2, (1024,), w.double().reshape(-1), b.double().reshape(-1), EPS),
          TOL[torch.bfloat16])
    m_ref, inv_ref = layer_stats(x2, [-1])
    close("MEAN", mean, m_ref, STATS_TOL)
    close("INV_VARIANCE", inv, inv_ref, STATS_TOL)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_layernorm_backward(dtype: torch.dtype) -> None:
    x, w, b = transformer_inputs(dtype)
    mean, inv = (t.float() for t in layer_stats(x, [-1]))
    g, (DY, X, S, M, V), feeds, dy = backward_graph(x, w, mean, inv)
    outs = g.layernorm_backward(DY, X, S, M, V, name="dln")
    d = x.shape[-1]
    ref = grads(lambda x_, w_, b_: F.layer_norm(x_, (d,), w_.reshape(d), b_.reshape(d), EPS), [x, w, b], dy)
    check_backward(g, feeds, outs, ref, dtype, must(dtype))


@pytest.mark.parametrize("shape", [(4, 1024, 128), (4096, 128)], ids=["3d", "2d"])
@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
def test_layernorm_zero_centered_gamma(phase: cudnn.norm_forward_phase, shape: tuple[int, ...]) -> None:
    """NVIDIA's zero-centered-gamma sample (fp16 X, fp32 gamma; needs cuDNN >= 9.7): the norm
    scales by gamma + 1, added in a pointwise op fused before it."""
    if cudnn.backend_version() < 90700:
        pytest.skip("zero-centered gamma needs cuDNN >= 9.7 (NVIDIA's sample)")
    x, w, b = transformer_inputs(torch.float16, shape)
    gamma = w - 1  # the stored parameter; the norm scales by gamma + 1
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "gamma", gamma), tensor(g, "bias", b)
    Y, M, V = g.layernorm(phase, X, S, B, EPS, zero_centered_gamma=True)
    outs = [Y.set_output(True)] + ([M.set_output(True), V.set_output(True)] if phase == TRAIN else [])
    got = run(g, {X: x, S: gamma, B: b}, outs, must_support=True)
    d = x.shape[-1]
    close("Y", got[0], F.layer_norm(x.double(), (d,), w.double().reshape(d), b.double().reshape(d), EPS),
          TOL[torch.float16])
    if phase == TRAIN:
        mean, inv = layer_stats(x, [-1])
        close("MEAN", got[1], mean, STATS_TOL)
        close("INV_VARIANCE", got[2], inv, STATS_TOL)


def test_layernorm_backward_zero_centered_gamma() -> None:
    if cudnn.backend_version() < 90700:
        pytest.skip("zero-centered gamma needs cuDNN >= 9.7 (NVIDIA's sample)")
    x, w, b = transformer_inputs(torch.float16, (4, 1024, 128))
    mean, inv = (t.float() for t in layer_stats(x, [-1]))
    g, (DY, X, S, M, V), feeds, dy = backward_graph(x, w - 1, mean, inv)
    outs = g.layernorm_backward(DY, X, S, M, V, zero_centered_gamma=True)
    d = x.shape[-1]
    ref = grads(lambda x_, w_, b_: F.layer_norm(x_, (d,), w_.reshape(d), b_.reshape(d), EPS), [x, w, b], dy)
    check_backward(g, feeds, outs, ref, torch.float16, must_support=True)


# -- fp32 SCALE/BIAS with a 16-bit X: unit-scale norm + fused affine ("affine_epilogue") --------------

def affine_inputs(dtype: torch.dtype, shape: tuple[int, ...]) -> tuple:
    """X in ``dtype``; fp32 SCALE/BIAS with values bf16/fp16 cannot hold (the point of the mix)."""
    torch.manual_seed(1)
    d = shape[-1]
    x = (1.5 * torch.randn(shape, device="cuda") + 0.3).to(dtype)
    w = 1 + 0.3 * torch.randn([1] * (len(shape) - 1) + [d], device="cuda")
    return x, w, 0.2 * torch.randn_like(w)


def keeps_fp32_params(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    """Mean error at most 1.2x that of rounding the float64 result to got's type: the affine
    step ran on the fp32 parameters (rounding them to bf16 first measured 1.39x on an H200)."""
    ideal = (ref.to(got.dtype).double() - ref).abs().mean().item()
    err = (got.double() - ref.reshape(got.shape)).abs().mean().item()
    assert err <= 1.2 * ideal, f"{name}: mean error {err:.3g} > 1.2x the output rounding {ideal:.3g}"


@pytest.mark.parametrize("lowering", ["auto", "affine_epilogue", "norm"])
@pytest.mark.parametrize("shape", [(4, 128, 768), (512, 4096)], ids=["4x128x768", "512x4096"])
@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_layernorm_fp32_affine(dtype: torch.dtype, phase: cudnn.norm_forward_phase, shape: tuple[int, ...],
                               lowering: str) -> None:
    """A 16-bit X with fp32 SCALE/BIAS in the default lowering ("auto": the single norm, as the
    official builds it), the affine epilogue and the single norm forced, each against float64."""
    x, w, b = affine_inputs(dtype, shape)
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, M, V = g.layernorm(phase, X, S, B, EPS, name="ln", lowering=lowering)
    outs = [Y.set_output(True)] + ([M.set_output(True), V.set_output(True)] if phase == TRAIN else [])
    got = run(g, {X: x, S: w, B: b}, outs, must_support=True)
    d = shape[-1]
    ref = F.layer_norm(x.double(), (d,), w.double().reshape(d), b.double().reshape(d), EPS)
    close("Y", got[0], ref, TOL[dtype])
    keeps_fp32_params("Y", got[0], ref)
    if phase == TRAIN:
        mean, inv = layer_stats(x, [-1])
        close("MEAN", got[1], mean, STATS_TOL)
        close("INV_VARIANCE", got[2], inv, STATS_TOL)


@pytest.mark.parametrize("lowering", ["auto", "norm"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
def test_rmsnorm_fp32_affine(phase: cudnn.norm_forward_phase, with_bias: bool, lowering: str) -> None:
    x, w, b = affine_inputs(torch.bfloat16, (512, 4096))
    g = new_graph()
    X, S = tensor(g, "x", x), tensor(g, "scale", w)
    B = tensor(g, "bias", b) if with_bias else None
    Y, V = g.rmsnorm(phase, X, S, B, EPS, name="rms", lowering=lowering)
    outs = [Y.set_output(True)] + ([V.set_output(True)] if phase == TRAIN else [])
    feeds = {X: x, S: w, **({B: b} if B is not None else {})}
    got = run(g, feeds, outs, must_support=True)
    xd = x.double()
    inv = (xd.pow(2).mean(-1, keepdim=True) + EPS).rsqrt()
    ref = xd * inv * w.double() + (b.double() if with_bias else 0)
    close("Y", got[0], ref, TOL[torch.bfloat16])
    keeps_fp32_params("Y", got[0], ref)
    if phase == TRAIN:
        close("INV_VARIANCE", got[1], inv, STATS_TOL)


def _lowering_of(g: cudnn.pygraph) -> str:
    """The lowering of the selected plan, as its serialized record names it."""
    return json.loads(g.serialize(as_bytes=True))["extra"].get("lowering", "")


def test_layernorm_fp32_affine_autotune_times_both_lowerings(tmp_path: Path) -> None:
    """The default builds the single norm; autotune times it and the affine epilogue, keeps the
    faster, and the plan cache hands that choice to the next graph of the same structure."""
    cache = cudnn.plan_cache
    old_dir = cache.directory
    cache.directory = tmp_path
    cache.clear(disk=False)
    try:
        x, w, b = affine_inputs(torch.bfloat16, (2048, 4096))

        def layer_norm_graph() -> tuple[cudnn.pygraph, dict[cudnn.tensor, torch.Tensor], list[torch.Tensor]]:
            g = new_graph()
            X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
            Y, M, V = g.layernorm(TRAIN, X, S, B, EPS, name="ln")
            outs = [t.set_output(True) for t in (Y, M, V)]
            g.validate()  # the outputs' shapes and types, for their buffers
            bufs = [poisoned(t) for t in outs]
            return g, {X: x, S: w, B: b, **dict(zip(outs, bufs))}, bufs

        g, pack, bufs = layer_norm_graph()
        build(g, must_support=True)
        assert _lowering_of(g) == "NORM"  # the default, as the official builds it
        ws = torch.empty(1 << 22, device="cuda", dtype=torch.uint8)
        report = g.autotune(pack, ws, warmup=1, repeats=3)
        print(report)
        timed = {r.lowering for r in report if r.time_ms is not None}
        assert timed == {"AFFINE_EPILOGUE", "NORM"}, str(report)
        assert _lowering_of(g) == report.best.lowering
        ref = F.layer_norm(x.double(), (4096,), w.double().reshape(-1), b.double().reshape(-1), EPS)
        mean, inv = layer_stats(x, [-1])
        hits = cache.hits
        for graph, feeds, outs in ((g, pack, bufs), layer_norm_graph()):
            if graph is not g:  # a new graph of the same structure: the tuned plan, from the cache
                graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
                assert cache.hits == hits + 1 and _lowering_of(graph) == report.best.lowering
            for buf in outs:
                buf.fill_(float("nan"))
            graph.execute(feeds, ws)
            torch.cuda.synchronize()
            close("Y", outs[0], ref, TOL[torch.bfloat16])
            close("MEAN", outs[1], mean, STATS_TOL)
            close("INV_VARIANCE", outs[2], inv, STATS_TOL)
    finally:
        cache.directory = old_dir


def _decisions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lowering trial" in r.getMessage()]


@pytest.mark.parametrize("caller", ["sized", "execute"])
def test_layernorm_fp32_affine_lowering_trial(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                              caller: str) -> None:
    """A default build runs the single norm. After `TRIAL_AFTER` executes the affine epilogue is
    built on the trial thread, then both plans run alternately, timed on the executes themselves;
    every output through the switch matches float64, the trial decides, and the plan cache hands
    the lowering it kept to the next build of the same graph. ``sized``: each execute is given a
    workspace of its Runner's own size, as cudnn.ops gives it; ``execute``: ``g.execute`` with a
    workspace of ``get_workspace_size()`` bytes, as the samples do."""
    from cudnn._graph.build.trial import TRIAL_AFTER

    cache = cudnn.plan_cache
    old_dir = cache.directory
    cache.directory = tmp_path
    cache.clear(disk=False)
    cudnn.set_lowering_trials(True)
    try:
        x, w, b = affine_inputs(torch.bfloat16, (2048, 4096))

        def layer_norm_graph() -> tuple[cudnn.pygraph, dict[cudnn.tensor, torch.Tensor], list[torch.Tensor]]:
            g = new_graph()
            X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
            outs = [t.set_output(True) for t in g.layernorm(TRAIN, X, S, B, EPS, name="ln")]
            g.validate()
            bufs = [poisoned(t) for t in outs]
            return g, {X: x, S: w, B: b, **dict(zip(outs, bufs))}, bufs

        ref = F.layer_norm(x.double(), (4096,), w.double().reshape(-1), b.double().reshape(-1), EPS)
        mean, inv = layer_stats(x, [-1])
        g, pack, bufs = layer_norm_graph()
        build(g, must_support=True)
        assert _lowering_of(g) == "NORM" and g.lowering_trial_pending()
        ran = set()
        deadline = time.monotonic() + 60  # the other plan compiles its kernel on the trial thread
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        with caplog.at_level(logging.INFO, logger="cudnn.graph"):
            calls = 0
            while g.lowering_trial_pending() and time.monotonic() < deadline:
                for buf in bufs:
                    buf.fill_(float("nan"))
                if caller == "sized":
                    runner = g.runner(sized=True)
                    ran.add(id(runner))
                    runner.run(pack, torch.empty(max(runner.workspace_size, 1), device="cuda", dtype=torch.uint8),
                               None)
                else:
                    g.execute(pack, ws)
                torch.cuda.synchronize()
                close("Y", bufs[0], ref, TOL[torch.bfloat16])
                close("MEAN", bufs[1], mean, STATS_TOL)
                close("INV_VARIANCE", bufs[2], inv, STATS_TOL)
                calls += 1
        said = _decisions(caplog)
        print(calls, g.get_workspace_size(), said)
        assert not g.lowering_trial_pending(), f"no decision after {calls} executes: {said}"
        assert calls > TRIAL_AFTER and said, said
        if caller == "sized":
            assert len(ran) == 2, said  # both lowerings' plans ran
        if " ended, " in said[-1]:  # only where the other plan outgrew the reserve: the default stays
            assert caller == "execute" and "bytes of workspace" in said[-1], said
            return
        kept = "AFFINE_EPILOGUE" if said[-1].endswith("AFFINE_EPILOGUE kept") else "NORM"
        if caller == "execute":  # it ran through g.execute, so it fits every caller: g now reports it
            assert _lowering_of(g) == kept
        hits = cache.hits
        g2, pack2, bufs2 = layer_norm_graph()
        g2.build(HEURISTICS)
        assert cache.hits == hits + 1 and _lowering_of(g2) == kept and not g2.lowering_trial_pending()
        assert any(r.status == "selected" and r.source == "autotuned cache" for r in g2.describe_plans())
        ws = torch.empty(max(g2.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        g2.execute(pack2, ws)
        torch.cuda.synchronize()
        close("Y", bufs2[0], ref, TOL[torch.bfloat16])
    finally:
        cudnn.set_lowering_trials(None)
        cache.directory = old_dir


def test_ops_layer_norm_through_a_lowering_trial(caplog: pytest.LogCaptureFixture) -> None:
    """``cudnn.ops.layer_norm`` of a bf16 X with float32 weight and bias: each call's output
    matches float64 while its graph's trial builds, times and switches lowerings."""
    from cudnn.ops import _runtime as rt

    cudnn.set_lowering_trials(True)
    rt.CACHE.clear()
    try:
        x, w, b = affine_inputs(torch.bfloat16, (1024, 2048))
        w, b = w.reshape(-1), b.reshape(-1)
        ref = F.layer_norm(x.double(), (2048,), w.double(), b.double(), EPS)
        pending = cudnn.lowering_trials_pending()
        close("Y", cudnn.ops.layer_norm(x, (2048,), w, b, EPS), ref, TOL[torch.bfloat16])
        assert cudnn.lowering_trials_pending() == pending + 1, "the op's graph started no lowering trial"
        deadline = time.monotonic() + 60
        with caplog.at_level(logging.INFO, logger="cudnn.graph"):
            calls = 0
            while not _decisions(caplog) and time.monotonic() < deadline:
                y = cudnn.ops.layer_norm(x, (2048,), w, b, EPS)
                torch.cuda.synchronize()
                close("Y", y, ref, TOL[torch.bfloat16])
                calls += 1
            for _ in range(5):  # after the decision: the lowering kept
                close("Y", cudnn.ops.layer_norm(x, (2048,), w, b, EPS), ref, TOL[torch.bfloat16])
        said = _decisions(caplog)
        print(calls, said)
        assert said and said[-1].endswith(" kept"), f"no decision after {calls} calls: {said}"
    finally:
        cudnn.set_lowering_trials(None)
        rt.CACHE.clear()


def test_layernorm_fp32_affine_replays_in_a_cuda_graph() -> None:
    """The unit scale and zero bias the lowering reads are constant scratch, written once
    outside the workspace: replays of a captured execute still match after the workspace was
    overwritten."""
    x, w, b = affine_inputs(torch.bfloat16, (512, 4096))
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, _, _ = g.layernorm(INFER, X, S, B, EPS, name="ln", lowering="affine_epilogue")
    Y.set_output(True)
    build(g, must_support=True)
    y = torch.full_like(x, float("nan"))
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    pack = {X: x, S: w, B: b, Y: y}
    stream = torch.cuda.Stream()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=stream.cuda_stream)
    with torch.cuda.stream(stream):
        g.execute(pack, ws, handle=handle)  # the first call checks and binds the buffers
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph, stream=stream):
            g.execute(pack, ws, handle=handle)
    ref = F.layer_norm(x.double(), (4096,), w.double().reshape(-1), b.double().reshape(-1), EPS)
    for _ in range(2):
        ws.fill_(0x7F)  # scratch garbage the replay must overwrite
        y.fill_(float("nan"))
        cuda_graph.replay()
        torch.cuda.synchronize()
        close("Y", y, ref, TOL[torch.bfloat16])
    cudnn.destroy_handle(handle)


# -- RMS norm --------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_rmsnorm_forward(dtype: torch.dtype, phase: cudnn.norm_forward_phase, with_bias: bool) -> None:
    x, w, b = transformer_inputs(dtype)
    g = new_graph()
    X, S = tensor(g, "x", x), tensor(g, "scale", w)
    B = tensor(g, "bias", b) if with_bias else None
    Y, V = g.rmsnorm(phase, X, S, B, EPS, name="rms")
    Y.set_output(True).set_data_type(CUDNN[dtype])
    outs = [Y] + ([V.set_output(True)] if phase == TRAIN else [])
    feeds = {X: x, S: w, **({B: b} if B is not None else {})}
    got = run(g, feeds, outs, must(dtype) and not with_bias)
    close("Y", got[0], rms(x.double(), w.double(), b.double() if with_bias else None), TOL[dtype])
    if phase == TRAIN:
        close("INV_VARIANCE", got[1], (x.double().pow(2).mean(-1, keepdim=True) + EPS).rsqrt(), STATS_TOL)


@pytest.mark.parametrize("has_dbias", [False, True], ids=["no-dbias", "dbias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_rmsnorm_backward(dtype: torch.dtype, has_dbias: bool) -> None:
    x, w, b = transformer_inputs(dtype)
    inv = (x.double().pow(2).mean(-1, keepdim=True) + EPS).rsqrt().float()
    g, (DY, X, S, _, V), feeds, dy = backward_graph(x, w, None, inv)
    outs = g.rmsnorm_backward(DY, X, S, V, has_dbias)
    assert (outs[2] is None) != has_dbias
    check_backward(g, feeds, outs, grads(rms, [x, w, b], dy), dtype, must(dtype) and not has_dbias)


# -- instance norm ---------------------------------------------------------------------------------

def param_grad_tol(dtype: torch.dtype) -> tuple[float, float]:
    """DSCALE/DBIAS stored in a 16-bit type: sums near 16 round to 1/64 (fp16) or 1/8 (bf16)."""
    return {torch.float16: (5e-2, 1e-2), torch.bfloat16: (2.5e-1, 2e-2)}.get(dtype, PARAM_GRAD_TOL)


@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_instancenorm_forward(dtype: torch.dtype, phase: cudnn.norm_forward_phase) -> None:
    x, w, b = nhwc_inputs(dtype, dtype)  # parameters in x's type, as the official frontend's tests
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, M, V = g.instancenorm(phase, X, S, B, EPS)
    outs = [Y.set_output(True)] + ([M.set_output(True), V.set_output(True)] if phase == TRAIN else [])
    got = run(g, {X: x, S: w, B: b}, outs, must(dtype))
    c = x.shape[1]
    ref = F.instance_norm(x.double(), weight=w.double().reshape(c), bias=b.double().reshape(c), eps=EPS)
    close("Y", got[0], ref, TOL[dtype])
    if phase == TRAIN:
        mean, inv = layer_stats(x, [2, 3])
        close("MEAN", got[1], mean, STATS_TOL)
        close("INV_VARIANCE", got[2], inv, STATS_TOL)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_instancenorm_backward(dtype: torch.dtype) -> None:
    x, w, b = nhwc_inputs(dtype, dtype)
    mean, inv = (t.float().contiguous(memory_format=torch.channels_last) for t in layer_stats(x, [2, 3]))
    g, (DY, X, S, M, V), feeds, dy = backward_graph(x, w, mean, inv)
    outs = g.instancenorm_backward(DY, X, S, M, V)
    c = x.shape[1]
    ref = grads(lambda x_, w_, b_: F.instance_norm(x_, weight=w_.reshape(c), bias=b_.reshape(c), eps=EPS),
                [x, w, b], dy)
    check_backward(g, feeds, outs, ref, dtype, must(dtype), param_grad_tol(dtype))


# -- adaptive layer norm ---------------------------------------------------------------------------

def adaln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) * (var + EPS).rsqrt() * w + b


def adaln_inputs(dtype: torch.dtype) -> tuple:
    torch.manual_seed(0)
    x = (2 * torch.randn(4, 256, 128, device="cuda") + 0.2).to(dtype)
    w = 1 + 0.5 * torch.randn(4, 1, 128, device="cuda")
    return x, w, 0.5 * torch.randn_like(w)


@pytest.mark.parametrize("phase", [TRAIN, INFER], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_adalayernorm_forward(dtype: torch.dtype, phase: cudnn.norm_forward_phase) -> None:
    if cudnn.backend_version() < 90900:
        pytest.skip("adaptive layer norm needs cuDNN >= 9.9")
    x, w, b = adaln_inputs(dtype)
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, M, V = g.adalayernorm(phase, X, S, B, epsilon=EPS)
    outs = [Y.set_output(True)] + ([M.set_output(True), V.set_output(True)] if phase == TRAIN else [])
    got = run(g, {X: x, S: w, B: b}, outs)
    close("Y", got[0], adaln(x.double(), w.double(), b.double()), TOL[dtype])
    if phase == TRAIN:
        mean, inv = layer_stats(x, [-1])
        close("MEAN", got[1], mean, STATS_TOL)
        close("INV_VARIANCE", got[2], inv, STATS_TOL)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_adalayernorm_backward(dtype: torch.dtype) -> None:
    if cudnn.backend_version() < 90900:
        pytest.skip("adaptive layer norm needs cuDNN >= 9.9")
    x, w, b = adaln_inputs(dtype)
    mean, inv = (t.float() for t in layer_stats(x, [-1]))
    g, (DY, X, S, M, V), feeds, dy = backward_graph(x, w, mean, inv)
    outs = g.adalayernorm_backward(DY, X, S, M, V)
    check_backward(g, feeds, outs, grads(adaln, [x, w, b], dy), dtype)


# -- batch norm ------------------------------------------------------------------------------------

def bn_graph(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, running: bool) -> tuple:
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    RM = tensor(g, "running_mean", w) if running else None
    RV = tensor(g, "running_var", w) if running else None
    out = g.batchnorm(X, S, B, RM, RV, EPS, 0.1 if running else None, name="bn")
    return g, (X, S, B, RM, RV), out


def check_running_var(got: torch.Tensor, rv0: torch.Tensor, x: torch.Tensor) -> None:
    """PyTorch updates the running variance with the unbiased batch variance; say which one
    cuDNN used when it differs."""
    xd = x.double()
    unbiased = 0.9 * rv0.double().reshape(-1) + 0.1 * xd.var(dim=(0, 2, 3), unbiased=True)
    biased = 0.9 * rv0.double().reshape(-1) + 0.1 * xd.var(dim=(0, 2, 3), unbiased=False)
    # the two differ by 0.1 * var / (count - 1), about 2e-4 here: compare tighter than that
    ok = torch.allclose(got.double().reshape(-1), unbiased, atol=1e-5, rtol=1e-5)
    assert ok, ("NEXT_RUNNING_VAR differs from PyTorch's unbiased update; matches the biased one: "
                f"{torch.allclose(got.double().reshape(-1), biased, atol=1e-5, rtol=1e-5)}")


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_batchnorm_training(dtype: torch.dtype) -> None:
    x, w, b = nhwc_inputs(dtype)
    rm0 = (0.1 * torch.randn_like(w)).contiguous(memory_format=torch.channels_last)
    rv0 = (1 + 0.1 * torch.rand_like(w)).contiguous(memory_format=torch.channels_last)
    g, (X, S, B, RM, RV), out = bn_graph(x, w, b, running=True)
    out[0].set_data_type(CUDNN[dtype])
    for t in out:
        t.set_output(True)
    y, mean, inv, nrm, nrv = run(g, {X: x, S: w, B: b, RM: rm0, RV: rv0}, out)
    c = x.shape[1]
    rm_ref, rv_ref = rm0.double().reshape(c).clone(), rv0.double().reshape(c).clone()
    ref = F.batch_norm(x.double(), rm_ref, rv_ref, w.double().reshape(c), b.double().reshape(c), training=True,
                       momentum=0.1, eps=EPS)
    close("Y", y, ref, TOL[dtype])
    m_ref, inv_ref = layer_stats(x, [0, 2, 3])
    close("MEAN", mean, m_ref, STATS_TOL)
    close("INV_VARIANCE", inv, inv_ref, STATS_TOL)
    close("NEXT_RUNNING_MEAN", nrm, rm_ref, STATS_TOL)
    check_running_var(nrv, rv0, x)


def test_batchnorm_training_without_running_statistics() -> None:
    x, w, b = nhwc_inputs(torch.float16)
    g, (X, S, B, _, _), out = bn_graph(x, w, b, running=False)
    assert out[3] is None and out[4] is None
    y, _, inv = run(g, {X: x, S: w, B: b}, [t.set_output(True) for t in out[:3]])
    c = x.shape[1]
    close("Y", y, F.batch_norm(x.double(), None, None, w.double().reshape(c), b.double().reshape(c), True,
                               eps=EPS), TOL[torch.float16])
    close("INV_VARIANCE", inv, layer_stats(x, [0, 2, 3])[1], STATS_TOL)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_batchnorm_inference(dtype: torch.dtype) -> None:
    x, w, b = nhwc_inputs(dtype)
    mean = (0.3 + 0.1 * torch.randn_like(w)).contiguous(memory_format=torch.channels_last)
    inv = (0.5 + torch.rand_like(w)).contiguous(memory_format=torch.channels_last)
    g = new_graph()
    X, M, V, S, B = (tensor(g, n, t) for n, t in (("x", x), ("mean", mean), ("inv", inv), ("s", w), ("b", b)))
    Y = g.batchnorm_inference(X, M, V, S, B).set_output(True)
    (y,) = run(g, {X: x, M: mean, V: inv, S: w, B: b}, [Y])
    ref = (x.double() - mean.double()) * inv.double() * w.double() + b.double()
    close("Y", y, ref, TOL[dtype])


def bn_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, inv = layer_stats(x, [0, 2, 3])
    return (mean.float().contiguous(memory_format=torch.channels_last),
            inv.float().contiguous(memory_format=torch.channels_last))


def bn_train(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = x.shape[1]
    return F.batch_norm(x, None, None, w.reshape(c), b.reshape(c), training=True, eps=EPS)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_batchnorm_backward(dtype: torch.dtype) -> None:
    x, w, b = nhwc_inputs(dtype)
    g, (DY, X, S, M, V), feeds, dy = backward_graph(x, w, *bn_stats(x))
    outs = g.batchnorm_backward(DY, X, S, M, V)
    check_backward(g, feeds, outs, grads(bn_train, [x, w, b], dy), dtype)


def test_genstats() -> None:
    """Per-channel sums alone (cuDNN usually fuses genstats with a convolution: skipped when no
    engine runs it alone)."""
    x, _, _ = nhwc_inputs(torch.float16)
    g = new_graph()
    X = tensor(g, "x", x)
    total, squares = (t.set_output(True).set_data_type(dt.FLOAT) for t in g.genstats(X))
    got = run(g, {X: x}, [total, squares])
    xd = x.double()
    close("SUM", got[0], xd.sum(dim=(0, 2, 3), keepdim=True), (1e-2, 1e-5))
    close("SQ_SUM", got[1], xd.pow(2).sum(dim=(0, 2, 3), keepdim=True), (1e-1, 1e-5))


def test_bn_finalize() -> None:
    """bn_finalize as a graph of its own, the per-channel sums its inputs: the header's "buffer
    op between the two fusions" and NVIDIA's "BN Finalize Graph" sample."""
    x, w, b = nhwc_inputs(torch.float16)
    n, _, h, wd = x.shape
    xd = x.double()
    sums = [t.float().contiguous(memory_format=torch.channels_last)
            for t in (xd.sum(dim=(0, 2, 3), keepdim=True), xd.pow(2).sum(dim=(0, 2, 3), keepdim=True))]
    named = {"sum": sums[0], "sq_sum": sums[1], "s": w, "b": b, "rm": torch.zeros_like(w), "rv": torch.ones_like(w)}
    g = new_graph()
    T = {k: tensor(g, k, v) for k, v in named.items()}
    out = g.bn_finalize(T["sum"], T["sq_sum"], T["s"], T["b"], EPS, n * h * wd, T["rm"], T["rv"], 0.1)
    eq_scale, eq_bias, mean, inv, nrm, nrv = run(g, {T[k]: v for k, v in named.items()},
                                                 [t.set_output(True) for t in out], must_support=True)
    m_ref, inv_ref = layer_stats(x, [0, 2, 3])
    close("MEAN", mean, m_ref, STATS_TOL)
    close("INV_VARIANCE", inv, inv_ref, (1e-3, 1e-3))  # E[x^2] - E[x]^2 in fp32
    close("EQ_SCALE", eq_scale, w.double() * inv_ref, (1e-3, 1e-3))
    close("EQ_BIAS", eq_bias, b.double() - m_ref * w.double() * inv_ref, (1e-3, 1e-3))
    close("NEXT_RUNNING_MEAN", nrm, 0.1 * m_ref, STATS_TOL)
    check_running_var(nrv, named["rv"], x)


# -- fusions ---------------------------------------------------------------------------------------

def test_layernorm_then_residual_add() -> None:
    x, w, b = transformer_inputs(torch.bfloat16)
    r = torch.randn_like(x)
    g = new_graph()
    X, S, B, R = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b), tensor(g, "residual", r)
    Y, _, _ = g.layernorm(INFER, X, S, B, EPS)
    OUT = g.add(Y, R).set_output(True).set_data_type(dt.BFLOAT16)
    (out,) = run(g, {X: x, S: w, B: b, R: r}, [OUT])
    d = x.shape[-1]
    ref = F.layer_norm(x.double(), (d,), w.double().reshape(d), b.double().reshape(d), EPS) + r.double()
    close("Y + residual", out, ref, TOL[torch.bfloat16])


def test_layernorm_clamped_relu_with_bitmask() -> None:
    """The official frontend's LayerNorm + clamped ReLU + bitmask sample (cuDNN >= 9.13), fp32."""
    x, w, b = transformer_inputs(torch.float32, (4096, 128))
    g = new_graph()
    X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
    Y, M, V = g.layernorm(TRAIN, X, S, B, EPS)
    R = g.relu(Y, lower_clip=0.0, upper_clip=6.0).set_output(True).set_data_type(dt.FLOAT)
    lower = g.cmp_gt(R, 0.0).set_data_type(dt.BOOLEAN)
    upper = g.cmp_lt(R, 6.0).set_data_type(dt.BOOLEAN)
    mask = g.logical_and(lower, upper, compute_data_type=dt.BOOLEAN)
    mask.set_output(True).set_data_type(dt.BOOLEAN)
    r, packed, _, _ = run(g, {X: x, S: w, B: b}, [R, mask, M.set_output(True), V.set_output(True)])
    ln = F.layer_norm(x.double(), (128,), w.double().reshape(-1), b.double().reshape(-1), EPS)
    close("ReLU(Y)", r, ln.clamp(0, 6), TOL[torch.float32])
    bits = unpack_bits(packed, mask)
    edge = (ln.abs() < 1e-4) | ((ln - 6).abs() < 1e-4)  # where rounding may flip a bit
    assert torch.equal(bits[~edge], ((ln > 0) & (ln < 6))[~edge]), "bitmask wrong or not written"


def running_start(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros_like(w), torch.ones_like(w)


def test_batchnorm_relu_with_bitmask() -> None:
    """The official frontend's BN + ReLU + mask test (NHWC fp16, running statistics)."""
    x, w, b = nhwc_inputs(torch.float16, shape=(4, 16, 56, 56))
    rm0, rv0 = running_start(w)
    zeros = torch.zeros_like(x)
    g, (X, S, B, RM, RV), out = bn_graph(x, w, b, running=True)
    Y = g.relu(out[0]).set_output(True).set_data_type(dt.HALF)
    Z = tensor(g, "zeros", zeros)
    mask = g.cmp_gt(Y, Z).set_output(True).set_data_type(dt.BOOLEAN)
    for t in out[1:]:
        t.set_output(True)
    y, packed, *_ = run(g, {X: x, S: w, B: b, RM: rm0, RV: rv0, Z: zeros}, [Y, mask, *out[1:]],
                        must_support=True)
    ref = torch.relu(bn_train(x.double(), w.double(), b.double()))
    close("ReLU(BN(x))", y, ref, TOL[torch.float16])
    assert torch.equal(unpack_bits(packed, mask), y > 0), "mask wrong or not written"


def test_unpack_bits_follows_memory_order() -> None:
    """Bit i of byte j is the element at memory offset 8j + i, whatever the logical order."""
    t = new_graph().tensor(name="m", dim=[1, 3, 2, 2], stride=[12, 1, 6, 3], data_type=dt.BOOLEAN)
    packed = torch.tensor([0b10000001, 0b1010], dtype=torch.uint8, device="cuda")
    bits = unpack_bits(packed, t)
    set_at = {(c, h, w) for c in range(3) for h in range(2) for w in range(2) if bits[0, c, h, w]}
    assert set_at == {(0, 0, 0), (1, 1, 0), (0, 1, 1), (2, 1, 1)}  # offsets 0, 7, 9, 11


def test_batchnorm_add_relu() -> None:
    x, w, b = nhwc_inputs(torch.float16, shape=(4, 16, 56, 56))
    rm0, rv0 = running_start(w)
    z = torch.randn_like(x)
    g, (X, S, B, RM, RV), out = bn_graph(x, w, b, running=True)
    Z = tensor(g, "residual", z)
    Y = g.relu(g.add(out[0], Z)).set_output(True).set_data_type(dt.HALF)
    for t in out[1:]:
        t.set_output(True)
    y, *_ = run(g, {X: x, S: w, B: b, RM: rm0, RV: rv0, Z: z}, [Y, *out[1:]])
    close("ReLU(BN(x) + z)", y, torch.relu(bn_train(x.double(), w.double(), b.double()) + z.double()),
          TOL[torch.float16])


def test_batchnorm_inference_drelu_dbn() -> None:
    """BN inference -> ReLU backward -> BN backward in one graph, as NVIDIA's "BN_inference DRelu
    DBN Graph" sample: NHWC fp16 X and DY [4, 32, 16, 16], fp32 per-channel tensors, the
    ReLU-backward output (virtual, the DBN's DY) stored as HALF. batchnorm_inference lowers
    to the norm op here."""
    x, w, b = nhwc_inputs(torch.float16, shape=(4, 32, 16, 16))
    dy = torch.randn_like(x)
    mean, inv = bn_stats(x)
    g = new_graph()
    X, DY, S, B, M, V = (tensor(g, n, t) for n, t in (("x", x), ("dy", dy), ("s", w), ("b", b),
                                                        ("mean", mean), ("inv", inv)))
    Y = g.batchnorm_inference(X, M, V, S, B)
    drelu = g.relu_backward(DY, Y).set_data_type(dt.HALF)
    DX, DS, DB = g.batchnorm_backward(drelu, X, S, M, V)
    DX.set_output(True).set_data_type(dt.HALF)
    got = run(g, {X: x, DY: dy, S: w, B: b, M: mean, V: inv}, [DX, DS.set_output(True), DB.set_output(True)],
              must_support=True)
    y_ref = bn_train(x.double(), w.double(), b.double())
    ref = grads(bn_train, [x, w, b], dy.double() * (y_ref > 0))
    close("DX", got[0], ref[0], TOL[torch.float16])
    close("DSCALE", got[1], ref[1], (2e-2, 2e-3))
    close("DBIAS", got[2], ref[2], (2e-2, 2e-3))


def test_unwritten_output_would_fail() -> None:
    """The NaN poison is what catches an output cuDNN never wrote."""
    with pytest.raises(AssertionError, match="NaN"):
        close("Y", torch.full((2,), float("nan"), device="cuda"), torch.zeros(2, device="cuda"), (1, 1))


def test_float_epsilon_and_tensor_epsilon_agree() -> None:
    x, w, b = transformer_inputs(torch.float16, (256, 512))
    results = []
    for as_tensor in (False, True):
        g = new_graph()
        X, S, B = tensor(g, "x", x), tensor(g, "scale", w), tensor(g, "bias", b)
        eps: Any = EPS
        feeds = {X: x, S: w, B: b}
        if as_tensor:
            host = torch.full((1, 1), EPS, dtype=torch.float32)
            eps = g.tensor(name="eps", dim=[1, 1], stride=[1, 1], data_type=dt.FLOAT, is_pass_by_value=True)
            feeds[eps] = host
        Y, _, _ = g.layernorm(INFER, X, S, B, eps)
        results += run(g, feeds, [Y.set_output(True)], must_support=True)
    assert torch.equal(results[0], results[1])
