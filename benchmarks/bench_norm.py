"""Normalization graphs against PyTorch: GPU time and GB/s against the GPU's memory bandwidth,
and for bf16 layer norm inference at 16384 x 4096 the time of every candidate plan.

    PYTHONPATH=src python benchmarks/bench_norm.py              # everything, in one run
    PYTHONPATH=src python benchmarks/bench_norm.py --quick      # fewer repeats and shapes
    PYTHONPATH=src python benchmarks/bench_norm.py --only layernorm,rmsnorm --no-plans

1. The device: peak DRAM bandwidth (memory clock x bus width, or --peak-gbps) and what a
   device-to-device copy reaches (the practical ceiling).
2. Forward (inference and training) and backward of layer, RMS, batch and instance norm at
   transformer sizes (16384x4096 and 8192x8192, bf16/fp16) and a CNN size (32x256x56x56 fp16
   channels-last): cudnn-py's default plan against PyTorch (F.layer_norm / native_layer_norm,
   F.rms_norm / _fused_rms_norm, F.batch_norm, F.instance_norm; backward through autograd).
   Like with like: layer/RMS norm scale and bias in the input's dtype, as PyTorch takes them;
   batch norm's in fp32 (PyTorch's mixed-precision batch norm); instance norm's in the input's.
   Extra rows per layer/RMS norm give fp32 scale/bias with the bf16 input, inference and
   training: the default ([default]: built as the single norm, then its lowering trial, run
   until it decides, which the row's plan column names), the affine-epilogue lowering
   (lowering="affine_epilogue": a unit-scale norm with the fp32 affine step in fused pointwise
   ops, _graph/families/norm_nodes.py; what autotuning picks) and the single norm operation
   (lowering="norm", as the official builds it: cuDNN 9.19 has only its generic engine eng1 for
   that mix). PyTorch
   refuses fp32 weights with a bf16 input, so its row is F.layer_norm with them cast to bf16
   (the cast outside the timed call).
   GB/s = bytes every kernel must move (inputs read once, outputs written once) / time.
3. Every candidate plan of bf16 layer norm inference 16384x4096, scale/bias in bf16 and in
   fp32: heuristics A and FALLBACK candidates plus every engine's default configuration, each
   timed, so the slow and the fast engines show by name (on an H200 with 9.19: bf16 gives eng4
   by default at 1.06x PyTorch, eng6 and eng5 at 1.35x, which graph.autotune() picks; fp32
   as the single norm gives eng1 alone at 0.33x; fp32 in the affine-epilogue lowering one
   engine, eng5). The layout of X (2-D, 3-D, 4-D) made no difference there.

Layer norm of bf16 X 16384x4096 with fp32 scale/bias, every lowering tried (H200, cuDNN 9.19,
inference | training; PyTorch F.layer_norm with the weights in bf16: 103.7 to 104.7 us, error 2x
ideal; PyTorch refuses fp32 weights with a bf16 input, and computing the same result in float32
takes it 469 us (F.layer_norm(x.float(), ...).bfloat16(); under autocast, float32 out, 375 us);
errors against float64, "ideal" = rounding it to bf16):
  single NORM_FORWARD with fp32 scale/bias ("norm")    310 | 310 us (eng1 alone), error ideal
  scale/bias in bf16 (not equivalent: a lower bound)   77 | 77 us best plan (default plan 98),
                                                       error 1.39x ideal
  scale/bias cast in the graph (pointwise into SCALE)  refused: NOT_SUPPORTED_GRAPH_PATTERN
  unit bf16 scale, zero bias, then fused * w + b       124 | 124 us (one engine), error ideal;
    the same with a float or bf16 Yhat                 same; a unit scale in fp32: no engine; made
                                                       in the graph: NOT_SUPPORTED_GRAPH_PATTERN;
                                                       one element with stride 0: BAD_PARAM
    the same, * w only (cost of the bias add)           91 | 91 us
    the same, knob LOAD_SIZE=3 (not offered by the     107 | 107 us (other SPLIT_COLS / TILE_ROWS
    heuristics; by hand: create_execution_plan)        values 0.55 to 2 ms)
    as cudnn-py built it ("affine_epilogue": scratch   128 | 127 us (section 2; the unit scale
    filled and cleared in the workspace per execute)   and zero bias are now constant scratch,
                                                       written once: section 2 has today's figure)
  separate cast graph to bf16 + the all-bf16 norm      101 | 101 us (cast 2.3 us), error 1.39x
                                                       ideal; two executes per call: not built
  two graphs, unit-scale norm to a tmp, then * w + b   176 (bf16 tmp, 1.36x ideal), 345 (fp32 tmp)
  other views of X (2-D, 3-D, 4-D)                     one canonical view: the same engines
  RMS norm: fp32 weights 291 us, bf16 weights 74 us; its affine epilogue (unit scale, * w) 78.5 us vs
  PyTorch 81.8 us. fp32 X and weights: 142 us best plan vs PyTorch 180 us.

Known and not pursued: instance norm forward reaches ~7% of peak bandwidth in cudnn-py and
PyTorch alike, and cudnn-py's instance norm backward is ~0.71x PyTorch (H200, cuDNN 9.19).

Timing: CUDA events around 20 back-to-back calls, after a GPU sleep that lets the CPU queue
them all (so host overhead is not measured), rotating between input/output buffer sets that
together exceed the L2 cache; the median of the repeats. Never asserts on time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from _timing import settle

import cudnn

dt = cudnn.data_type
TRAIN, INFER = cudnn.norm_forward_phase.TRAINING, cudnn.norm_forward_phase.INFERENCE
HEURISTICS = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
EPS = 1e-5
CALLS = 20


# -- the device --------------------------------------------------------------------------------------

def _attr(name: str) -> int | None:
    try:
        from cuda.bindings import runtime as rt

        err, value = rt.cudaDeviceGetAttribute(getattr(rt.cudaDeviceAttr, name), torch.cuda.current_device())
        return int(value) if int(err) == 0 and value else None
    except Exception:  # noqa: BLE001 - no cuda-bindings or no such attribute: use the fallbacks
        return None


_KNOWN_GBPS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 NVL": 3900.0, "H100 PCIe": 2000.0, "H100": 3350.0,
               "A100-SXM4-80GB": 2039.0, "A100": 1555.0, "B200": 8000.0, "L40S": 864.0}


def peak_gbps(override: float | None) -> tuple[float, str]:
    if override:
        return override, "--peak-gbps"
    clock_khz, bus_bits = _attr("cudaDevAttrMemoryClockRate"), _attr("cudaDevAttrGlobalMemoryBusWidth")
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9, f"memory clock {clock_khz / 1e3:.0f} MHz x {bus_bits}-bit bus"
    name = torch.cuda.get_device_name()
    for key, gbps in _KNOWN_GBPS.items():
        if key in name:
            return gbps, f"table entry for {key}"
    return float("nan"), "unknown (give --peak-gbps)"


def gpu_hz() -> float:
    khz = _attr("cudaDevAttrClockRate")
    return khz * 1e3 if khz else 2e9


def l2_bytes() -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20))


# -- timing ------------------------------------------------------------------------------------------

def gpu_us(fns: list[Callable[[], Any]], repeats: int) -> float:
    """Median GPU microseconds per call of fns[i % len(fns)], CALLS calls per sample."""
    for i in range(3 * len(fns)):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(CALLS):
        fns[i % len(fns)]()
    host_s = time.perf_counter() - t0  # an upper bound of the time the CPU needs to queue CALLS calls
    torch.cuda.synchronize()
    sleep_cycles = int(min(max(3 * host_s * gpu_hz(), 1e6), 4e9))
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        for i in range(CALLS):
            fns[i % len(fns)]()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(samples)


def copy_gbps(repeats: int) -> float:
    n = 1 << 28  # 512 MiB of bf16 each way
    a = [torch.empty(n, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    b = [torch.empty_like(t) for t in a]
    us = gpu_us([lambda i=i: b[i].copy_(a[i]) for i in range(2)], repeats)
    return 2 * n * 2 / (us * 1e-6) / 1e9


def buffer_sets(bytes_per_set: int) -> int:
    """How many input/output sets to rotate through so that together they exceed L2 (x3)."""
    return max(2, min(6, math.ceil(3 * l2_bytes() / max(bytes_per_set, 1)) + 1))


# -- cudnn-py graphs --------------------------------------------------------------------------------

TORCH = {dt.HALF: torch.float16, dt.BFLOAT16: torch.bfloat16, dt.FLOAT: torch.float32}


def new_graph() -> cudnn.pygraph:
    return cudnn.pygraph(intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)


def plan_name(g: cudnn.pygraph) -> str:
    """The selected plan's engine name (from the graph's plan report)."""
    return next((row.name for row in g.describe_plans() if row.status == "selected"), "?")


def runners(g: cudnn.pygraph, inputs: dict[cudnn.tensor, str], outs: list[cudnn.tensor],
            sets: list[dict[str, torch.Tensor]]) -> tuple[list[Callable[[], None]], str]:
    """Build g (the default plan) and return one execute closure per buffer set, and the plan
    the executes run: the built one, or where the graph tried another lowering (fp32 scale/bias
    with a 16-bit X), the plan it kept, after executes until the trial decided (`settle`)."""
    g.build(HEURISTICS)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    fns = []
    for s in sets:
        pack: dict[cudnn.tensor, torch.Tensor] = {t: s[key] for t, key in inputs.items()}
        for t in outs:
            pack[t] = torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda",
                                          dtype=TORCH[t.get_data_type()])
        fns.append(lambda pack=pack: g.execute(pack, ws))
    plan = plan_name(g)
    if g.lowering_trial_pending():
        calls, seconds, settled = settle(fns[0])
        running = g.runner().candidate
        plan += (f" -> {running.name if running is not None else '?'} (lowering trial "
                 f"{'decided' if settled else 'undecided'} after {calls} executes, {seconds:.1f} s)")
    return fns, plan


def feature_graph(op: str, phase: Any, s: dict[str, torch.Tensor], backward: bool, lowering: str = "auto"
                  ) -> tuple:
    """layernorm / rmsnorm (forward or backward) over the last dim, X as the user has it."""
    g = new_graph()
    X, S = g.tensor_like(s["x"], name="x"), g.tensor_like(s["w"], name="scale")
    inputs = {X: "x", S: "w"}
    if backward:
        DY, V = g.tensor_like(s["dy"], name="dy"), g.tensor_like(s["inv"], name="inv")
        inputs.update({DY: "dy", V: "inv"})
        if op == "layernorm":
            M = g.tensor_like(s["mean"], name="mean")
            inputs[M] = "mean"
            outs = g.layernorm_backward(DY, X, S, M, V)
        else:
            outs = g.rmsnorm_backward(DY, X, S, V, has_dbias=False)
    elif op == "layernorm":
        B = g.tensor_like(s["b"], name="bias")
        inputs[B] = "b"
        outs = g.layernorm(phase, X, S, B, EPS, lowering=lowering)
    else:
        outs = g.rmsnorm(phase, X, S, epsilon=EPS, lowering=lowering)
    return g, inputs, [t.set_output(True) for t in outs if t is not None]


def channel_graph(op: str, phase: Any, s: dict[str, torch.Tensor], backward: bool) -> tuple:
    """batchnorm / instancenorm of NHWC X (forward or backward)."""
    g = new_graph()
    X, S = g.tensor_like(s["x"], name="x"), g.tensor_like(s["w"], name="scale")
    inputs = {X: "x", S: "w"}
    if backward:
        DY, M, V = (g.tensor_like(s[k], name=k) for k in ("dy", "mean", "inv"))
        inputs.update({DY: "dy", M: "mean", V: "inv"})
        outs = getattr(g, f"{op}_backward")(DY, X, S, M, V)
    else:
        B = g.tensor_like(s["b"], name="bias")
        inputs[B] = "b"
        if op == "instancenorm":
            outs = g.instancenorm(phase, X, S, B, EPS)
        elif phase == TRAIN:
            RM, RV = g.tensor_like(s["rm"], name="rm"), g.tensor_like(s["rv"], name="rv")
            inputs.update({RM: "rm", RV: "rv"})
            outs = g.batchnorm(X, S, B, RM, RV, EPS, 0.1)
        else:
            M, V = g.tensor_like(s["mean"], name="mean"), g.tensor_like(s["inv"], name="inv")
            inputs.update({M: "mean", V: "inv"})
            outs = [g.batchnorm_inference(X, M, V, S, B)]
    return g, inputs, [t.set_output(True) for t in outs if t is not None]


# -- the cases --------------------------------------------------------------------------------------

@dataclass
class Case:
    op: str  # layernorm, rmsnorm, batchnorm, instancenorm
    mode: str  # inference, training, backward
    shape: tuple[int, ...]
    dtype: torch.dtype
    fp32_params: bool = False  # layer/RMS norm: fp32 scale/bias whatever the input's dtype
    lowering: str = "auto"  # layer/RMS norm forward: cudnn-py's lowering ("auto", "norm", "affine_epilogue")

    @property
    def label(self) -> str:
        name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[self.dtype]
        layout = " NHWC" if self.channels else ""
        extra = " fp32 scale*" if self.fp32_params else ""
        if self.fp32_params or self.lowering != "auto":
            extra += " [default]" if self.lowering == "auto" else f" [{self.lowering}]"
        return f"{self.op} {self.mode} {'x'.join(map(str, self.shape))} {name}{layout}{extra}"

    @property
    def channels(self) -> bool:
        return self.op in ("batchnorm", "instancenorm")

    @property
    def param_dtype(self) -> torch.dtype:
        """Scale/bias as PyTorch takes them (batch norm: fp32), unless fp32 is asked for."""
        return torch.float32 if self.fp32_params or self.op == "batchnorm" else self.dtype

    def moved_bytes(self) -> int:
        """Bytes any kernel must move: the big tensors read or written once, plus the small ones."""
        n = math.prod(self.shape)
        big = (3 if self.mode == "backward" else 2) * n * (torch.finfo(self.dtype).bits // 8)
        params = self.shape[1] if self.channels else self.shape[-1]
        stats = {"batchnorm": params, "instancenorm": self.shape[0] * params}.get(self.op, self.shape[0])
        pbytes = torch.finfo(self.param_dtype).bits // 8
        return big + pbytes * 3 * params + 4 * (2 * stats if self.mode != "inference" else 0)

    def make_set(self) -> dict[str, torch.Tensor]:
        x = torch.randn(self.shape, device="cuda", dtype=self.dtype)
        pdt = self.param_dtype
        if self.channels:
            x = x.to(memory_format=torch.channels_last)
            c = self.shape[1]
            cl = torch.channels_last
            w = (1 + 0.1 * torch.randn(1, c, 1, 1, device="cuda")).to(pdt).to(memory_format=cl)
            stat = [1, c, 1, 1] if self.op == "batchnorm" else [self.shape[0], c, 1, 1]
            s = {"x": x, "w": w, "b": torch.zeros_like(w),
                 "rm": torch.zeros(1, c, 1, 1, device="cuda").to(memory_format=cl),
                 "rv": torch.ones(1, c, 1, 1, device="cuda").to(memory_format=cl),
                 "mean": torch.zeros(stat, device="cuda").to(memory_format=cl),
                 "inv": torch.ones(stat, device="cuda").to(memory_format=cl)}
        else:
            rows, d = self.shape
            w = (1 + 0.1 * torch.randn(1, d, device="cuda")).to(pdt)
            s = {"x": x, "w": w, "b": torch.zeros_like(w), "mean": torch.zeros(rows, 1, device="cuda"),
                 "inv": torch.ones(rows, 1, device="cuda")}
        if self.mode == "backward":
            s["dy"] = torch.randn_like(x)
        return s

    def cudnn_fns(self, sets: list[dict[str, torch.Tensor]]) -> tuple[list[Callable[[], None]], str]:
        phase = TRAIN if self.mode == "training" else INFER
        if self.channels:
            g, inputs, outs = channel_graph(self.op, phase, sets[0], self.mode == "backward")
        else:
            g, inputs, outs = feature_graph(self.op, phase, sets[0], self.mode == "backward", self.lowering)
        return runners(g, inputs, outs, sets)

    def torch_fns(self, sets: list[dict[str, torch.Tensor]]) -> tuple[list[Callable[[], Any]], str]:
        made = [self._torch_backward(s) if self.mode == "backward" else self._torch_forward(s) for s in sets]
        return [fn for fn, _ in made], made[0][1]

    def _torch_forward(self, s: dict[str, torch.Tensor]) -> tuple[Callable[[], Any], str]:
        x = s["x"]
        if self.op in ("layernorm", "rmsnorm"):
            d = x.shape[-1]
            w, b = s["w"].reshape(d).to(x.dtype), s["b"].reshape(d).to(x.dtype)
            if self.op == "layernorm" and self.mode == "training":
                return lambda: torch.ops.aten.native_layer_norm(x, [d], w, b, EPS), "aten.native_layer_norm"
            if self.op == "layernorm":
                return lambda: F.layer_norm(x, (d,), w, b, EPS), "F.layer_norm"
            fused = getattr(torch.ops.aten, "_fused_rms_norm", None)
            if self.mode == "training" and fused is not None:
                try:
                    fused(x, [d], w, EPS)
                    return lambda: fused(x, [d], w, EPS), "aten._fused_rms_norm"
                except Exception:  # noqa: BLE001 - this torch lacks the fused op: F.rms_norm below
                    pass
            return lambda: F.rms_norm(x, (d,), w, EPS), "F.rms_norm"
        c = x.shape[1]
        w, b = s["w"].reshape(c), s["b"].reshape(c)
        if self.op == "instancenorm":
            return lambda: F.instance_norm(x, weight=w, bias=b, eps=EPS), "F.instance_norm"
        rm, rv, training = s["rm"].reshape(c).clone(), s["rv"].reshape(c).clone(), self.mode == "training"
        return (lambda: F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1, eps=EPS)), "F.batch_norm"

    def _torch_backward(self, s: dict[str, torch.Tensor]) -> tuple[Callable[[], Any], str]:
        x = s["x"].detach().requires_grad_()
        dim = x.shape[-1] if self.op in ("layernorm", "rmsnorm") else x.shape[1]
        pdt = x.dtype if self.op in ("layernorm", "rmsnorm") else s["w"].dtype
        w = s["w"].reshape(dim).to(pdt).detach().requires_grad_()
        b = s["b"].reshape(dim).to(pdt).detach().requires_grad_()
        if self.op == "layernorm":
            y = F.layer_norm(x, (dim,), w, b, EPS)
        elif self.op == "rmsnorm":
            y = F.rms_norm(x, (dim,), w, EPS)
        elif self.op == "batchnorm":
            y = F.batch_norm(x, None, None, w, b, training=True, eps=EPS)
        else:
            y = F.instance_norm(x, weight=w, bias=b, eps=EPS)
        leaves = [x, w] + ([b] if self.op != "rmsnorm" else [])
        dy = s["dy"]
        return (lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)), "autograd"


def same_numerics(op: str, s: dict[str, torch.Tensor]) -> Callable[[], Any]:
    """PyTorch computing what cudnn-py does with fp32 scale/bias and a half-precision input: the
    norm in float32 (as autocast runs it), the result rounded to the input's dtype."""
    x = s["x"]
    d = x.shape[-1]
    w, b = s["w"].reshape(d).float(), s["b"].reshape(d).float()
    if op == "layernorm":
        return lambda: F.layer_norm(x.float(), (d,), w, b, EPS).to(x.dtype)
    return lambda: F.rms_norm(x.float(), (d,), w, EPS).to(x.dtype)


def cases(quick: bool, only: set[str] | None) -> list[Case]:
    bf16, fp16 = torch.bfloat16, torch.float16
    transformer = [((16384, 4096), bf16), ((8192, 8192), bf16), ((16384, 4096), fp16)]
    out = []
    for op in ("layernorm", "rmsnorm"):
        for mode in ("inference", "training"):
            out += [Case(op, mode, shape, d) for shape, d in (transformer[:1] if quick else transformer)]
        for mode in ("inference", "training"):
            out += [Case(op, mode, (16384, 4096), bf16, fp32_params=True, lowering=lw)
                    for lw in ("auto", "affine_epilogue", "norm")]
        out.append(Case(op, "backward", (16384, 4096), bf16))
        out.append(Case(op, "backward", (16384, 4096), bf16, fp32_params=True))  # mixed-precision training
    for op in ("batchnorm", "instancenorm"):
        out += [Case(op, mode, (32, 256, 56, 56), fp16) for mode in ("inference", "training", "backward")]
    return [c for c in out if only is None or c.op in only]


def bench_cases(args: argparse.Namespace, peak: float) -> None:
    print("\n2. cudnn-py default plan vs PyTorch (median GPU us per call; GB/s = bytes moved / time)")
    print(f"  {'case':48s} {'cudnn-py us':>11s} {'GB/s':>6s} {'%peak':>5s}  {'torch us':>9s} {'GB/s':>6s} "
          f"{'%peak':>5s} {'speedup':>7s}  torch op | cudnn plan")
    for case in cases(args.quick, args.only):
        moved = case.moved_bytes()
        sets = [case.make_set() for _ in range(buffer_sets(moved))]
        try:
            c_fns, plan = case.cudnn_fns(sets)
            c_us = gpu_us(c_fns, args.repeats)
        except Exception as exc:  # noqa: BLE001 - a case the backend refuses is reported, not fatal
            c_fns, c_us = [], float("nan")
            plan = f"cudnn-py failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        t_fns, what = case.torch_fns(sets)
        t_us = gpu_us(t_fns, args.repeats)
        gbs = [moved / (us * 1e-6) / 1e9 for us in (c_us, t_us)]
        print(f"  {case.label:48s} {c_us:11.1f} {gbs[0]:6.0f} {100 * gbs[0] / peak:4.0f}%  {t_us:9.1f} "
              f"{gbs[1]:6.0f} {100 * gbs[1] / peak:4.0f}% {t_us / c_us:6.2f}x  {what} | {plan}")
        if case.fp32_params and case.lowering == "affine_epilogue":
            same_us = gpu_us([same_numerics(case.op, s) for s in sets], args.repeats)
            print(f"  {'  PyTorch with the same numerics (in float32)':48s} {'':11s} {'':6s} {'':5s}  {same_us:9.1f} "
                  f"{'':6s} {'':5s} {same_us / c_us:6.2f}x  F.{case.op.replace('norm', '_norm')}(x.float(), "
                  f"fp32 weights).to(x.dtype)")
        del sets, c_fns, t_fns
        torch.cuda.empty_cache()
    print("  * fp32 scale/bias with a bf16 input: the single norm [norm] gets only eng1, cuDNN 9.19's generic "
          "engine;\n    [affine_epilogue] splits off the fp32 affine step (_graph/families/norm_nodes.py); "
          "[default] builds\n    [norm], then tries [affine_epilogue] on its executes and keeps the faster. PyTorch "
          "runs with the\n    weights cast to bf16 (it refuses fp32 weights with a bf16 input), and in float32 (the "
          "same numerics) on the\n    line below. Instance norm: forward ~7% of peak for both, backward ~0.71x PyTorch "
          "on an H200\n    (noted, not pursued).")


# -- every plan of layer norm inference 16384 x 4096 bf16 ----------------------------------------------

ROWS, HIDDEN = 16384, 4096
PARAM_DTYPES = [  # (label, scale/bias dtype, cudnn-py lowering)
    ("bf16 scale/bias (the input's dtype, as F.layer_norm takes them)", torch.bfloat16, "auto"),
    ("fp32 scale/bias, the single norm (lowering='norm')", torch.float32, "norm"),
    ("fp32 scale/bias, lowering='affine_epilogue' (unit-scale norm + fused fp32 affine)", torch.float32,
     "affine_epilogue"),
]


def plans_graph(pdt: torch.dtype, s: dict[str, torch.Tensor], lowering: str = "auto") -> tuple:
    """Layer norm inference over HIDDEN of 2-D X, scale/bias in ``pdt``."""
    g = new_graph()
    w, b = s["w"].to(pdt), s["b"].to(pdt)
    X = g.tensor_like(s["x"], name="x")
    S, B = g.tensor_like(w, name="scale"), g.tensor_like(b, name="bias")
    Y, _, _ = g.layernorm(INFER, X, S, B, EPS, name="ln", lowering=lowering)
    return g, X, S, B, Y.set_output(True), w, b


def bench_plans(args: argparse.Namespace, peak: float) -> None:
    moved = 2 * ROWS * HIDDEN * 2 + 2 * 4 * HIDDEN
    sets = []
    for _ in range(buffer_sets(moved)):
        x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
        w = 1 + 0.1 * torch.randn(1, HIDDEN, device="cuda")
        sets.append({"x": x, "w": w, "b": 0.1 * torch.randn_like(w), "y": torch.empty_like(x)})
    s0 = sets[0]
    ref = F.layer_norm(s0["x"].float(), (HIDDEN,), s0["w"].reshape(-1), s0["b"].reshape(-1), EPS)
    wt, bt = s0["w"].reshape(-1).bfloat16(), s0["b"].reshape(-1).bfloat16()
    t_fns = [lambda s=s: F.layer_norm(s["x"], (HIDDEN,), wt, bt, EPS) for s in sets]
    t_us = gpu_us(t_fns, args.repeats)
    print(f"\n3. every plan of layernorm inference {ROWS}x{HIDDEN} bf16; PyTorch F.layer_norm: {t_us:.1f} us "
          f"({moved / (t_us * 1e-6) / 1e9:.0f} GB/s)")
    for label, pdt, lowering in PARAM_DTYPES:
        print(f"\n  2-D x, {label}")
        try:
            g, X, S, B, Y, w, b = plans_graph(pdt, s0, lowering)
            g.validate()
            g.build_operation_graph()
            for mode in HEURISTICS:
                try:
                    g.create_execution_plans([mode])
                except cudnn.CudnnError as exc:
                    print(f"    heuristics {mode.name}: {exc.status_name}")
            sources = {row.name: row.source for row in g.describe_plans()}
            g.build_plans(cudnn.build_plan_policy.ALL)
        except Exception as exc:  # noqa: BLE001 - reported
            print(f"    refused: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        packs = [{X: s["x"], S: w, B: b, Y: s["y"]} for s in sets]
        time_plans(g, packs, sets, ref, sources, moved, peak, t_us, args.repeats)


def time_plans(g: cudnn.pygraph, packs: list[dict], sets: list[dict], ref: torch.Tensor, sources: dict[str, str],
               moved: int, peak: float, torch_us: float, repeats: int) -> None:
    print(f"    {'#':>3s} {'plan':44s} {'from':9s} {'workspace':>10s} {'us':>8s} {'GB/s':>6s} {'%peak':>5s} "
          f"{'vs torch':>8s}  correct")
    default_seen = False
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        try:
            need = g.get_workspace_size_plan_at_index(i)
        except cudnn.CudnnError as exc:
            print(f"    {i:3d} {name:44s} {sources.get(name, '?'):9s} not built: {exc.status_name}")
            continue
        ws = torch.empty(max(need, 1), device="cuda", dtype=torch.uint8)
        for s in sets:
            s["y"].fill_(float("nan"))
        us = gpu_us([lambda p=p, i=i, ws=ws: g.execute_plan_at_index(p, ws, i) for p in packs], repeats)
        ok = torch.allclose(sets[0]["y"].float(), ref, atol=0.1, rtol=0.05)
        gbs = moved / (us * 1e-6) / 1e9
        mark = "" if default_seen else "   <- default (the first plan that builds)"
        default_seen = True
        print(f"    {i:3d} {name:44s} {sources.get(name, '?'):9s} {need:10d} {us:8.1f} {gbs:6.0f} "
              f"{100 * gbs / peak:4.0f}% {torch_us / us:7.2f}x  {'yes' if ok else 'NO'}{mark}")
    offered = {n.split("_")[0] for n in sources}
    for e in range(min(g.get_engine_count(), 64)):
        if f"eng{e}" in offered:
            continue
        try:
            g.create_execution_plan(e, {})
            ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
            for s in sets:
                s["y"].fill_(float("nan"))
            us = gpu_us([lambda p=p, ws=ws: g.execute(p, ws) for p in packs], repeats)
            ok = torch.allclose(sets[0]["y"].float(), ref, atol=0.1, rtol=0.05)
            gbs = moved / (us * 1e-6) / 1e9
            print(f"      eng{e} (not offered by heuristics; default knobs) {us:8.1f} us {gbs:6.0f} GB/s "
                  f"{100 * gbs / peak:4.0f}% {torch_us / us:7.2f}x  {'yes' if ok else 'NO'}")
        except Exception as exc:  # noqa: BLE001 - reported
            print(f"      eng{e} (not offered by heuristics; default knobs): "
                  f"{getattr(exc, 'status_name', type(exc).__name__)}")


# -- main -------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repeats")
    ap.add_argument("--only", type=lambda s: set(s.split(",")), default=None,
                    help="comma-separated ops: layernorm,rmsnorm,batchnorm,instancenorm")
    ap.add_argument("--no-plans", action="store_true", help="skip the per-plan sweep (section 3)")
    ap.add_argument("--plans-only", action="store_true", help="only the per-plan sweep")
    ap.add_argument("--peak-gbps", type=float, default=None, help="the GPU's DRAM bandwidth, GB/s")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    args.repeats = args.repeats or (7 if args.quick else 25)
    plan_cache = getattr(cudnn, "plan_cache", None)
    if plan_cache is not None:
        plan_cache.enabled = False  # measure the heuristics' choice, not a plan cached earlier
    cudnn.set_stream(handle=cudnn.backend.default_handle(), stream=torch.cuda.current_stream())
    peak, source = peak_gbps(args.peak_gbps)
    props = torch.cuda.get_device_properties(0)
    print(f"1. {torch.cuda.get_device_name()}  ({props.multi_processor_count} SMs, L2 {l2_bytes() >> 20} MiB)  "
          f"cuDNN {cudnn.backend_version_string()}  torch {torch.__version__}")
    print(f"   peak DRAM bandwidth {peak:.0f} GB/s ({source}); device-to-device copy reaches "
          f"{copy_gbps(args.repeats):.0f} GB/s")
    if not args.plans_only:
        bench_cases(args, peak)
    if not args.no_plans:
        bench_plans(args, peak)


if __name__ == "__main__":
    main()
