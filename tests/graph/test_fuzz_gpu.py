"""Differential fuzzing on the GPU: random executable graphs run by cuDNN, compared with PyTorch
in float64.

Families: fused conv chains (conv_fprop [+ bias] [+ activation], grouped sometimes), matmul with
epilogues (bias, activation, scale, batch broadcast), pointwise DAGs with broadcasting and several
outputs, pointwise + reduction, and norms (layer / RMS, training and inference); fp32, fp16 and
bf16 io; NCHW and NHWC; odd sizes. Graph ``i`` is drawn from structure seed ``base + i % S``
(``S`` distinct structures, ``CUDNN_PY_GPU_FUZZ_STRUCTURES``, default 300: building, mostly kernel
compilation, dominates the run, and a repeated structure is served by the plan cache), built as a
new graph, then executed on two draws of inputs (data seed ``i``) into NaN-filled outputs; the
last draw's pack is then replayed from its captured CUDA graph and must write the bits its
executes wrote (`replay_check`; the summary counts the replays).

Inputs are rounded to the io type first and the reference runs in float64 on those same values.
An output is wrong when ``||out - ref|| / max(||ref||, 1e-3 sqrt(n))`` exceeds its tolerance:
  fp32: 1e-2 for conv / matmul (cuDNN may use TF32), 1e-4 otherwise | fp16: 5e-3 | bf16: 2e-2
  (float statistics and reductions written as FLOAT: 1e-3).
A configuration the backend refuses must raise a cudnn exception (counted by reason); any other
exception, NaN in an output, or a wrong value is a defect and prints its seeds. Replay one graph:
``CUDNN_PY_GPU_FUZZ_REPLAY=<structure seed>:<data seed> pytest -s tests/graph/test_fuzz_gpu.py``.

Profiles: ``CUDNN_PY_GPU_FUZZ`` graphs (default 1,000), ``CUDNN_PY_GPU_FUZZ_SEED`` base seed
(default 0), ``CUDNN_PY_GPU_FUZZ_SECONDS`` time box (default 150: the summary says when it cut
the run short), ``CUDNN_PY_GPU_FUZZ_STRUCTURES``, ``CUDNN_PY_GPU_FUZZ_VARIETY`` shape pools (``small`` default; ``wide`` draws
sizes freely, so most graphs compile new kernels). The summary line starts ``reliability: fuzz``.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from support.replay_check import check_replay, launches

import cudnn

DT = cudnn.data_type
TORCH = {DT.HALF: torch.float16, DT.BFLOAT16: torch.bfloat16, DT.FLOAT: torch.float32}
IO_TYPES = [DT.HALF, DT.BFLOAT16, DT.FLOAT]
TOL = {DT.HALF: 5e-3, DT.BFLOAT16: 2e-2, DT.FLOAT: 1e-4}
TF32_TOL = 1e-2
STATS_TOL = 1e-3
EPS = 1e-5
HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
REFUSALS = (cudnn.CudnnNotSupportedError, cudnn.CudnnBadParamError, cudnn.GraphError)

Ref = Callable[[dict[int, torch.Tensor]], torch.Tensor]  # float64 inputs by id(tensor) -> expected

UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "gelu": F.gelu, "swish": F.silu,
    "elu": F.elu, "softplus": F.softplus, "abs": torch.abs, "neg": torch.neg, "sin": torch.sin, "cos": torch.cos,
}
ACTIVATIONS = ["relu", "tanh", "sigmoid", "gelu", "swish"]
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum,
}


@dataclass
class Input:
    tensor: Any  # cudnn tensor
    shape: list[int]
    channels_last: bool
    dtype: Any  # cudnn data type
    scale: float = 1.0


@dataclass
class Case:
    """One random graph: what to feed, what to expect, and how it was drawn."""

    seed: int  # structure seed (what draw_case was given)
    family: str
    desc: str
    graph: cudnn.pygraph
    inputs: list[Input] = field(default_factory=list)
    outputs: list[tuple[Any, Ref, float]] = field(default_factory=list)  # tensor, reference, tolerance
    data_seed: int = 0


class Draw:
    """Sizes for one graph: from small pools (plan-cache friendly) or free (``wide``)."""

    def __init__(self, r: random.Random, wide: bool) -> None:
        self.r, self.wide = r, wide

    def size(self, pool: list[int], lo: int = 1, hi: int = 64) -> int:
        return self.r.randint(lo, hi) if self.wide else self.r.choice(pool)


def new_graph(io: Any) -> cudnn.pygraph:
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)


def add_input(case: Case, shape: list[int], io: Any, channels_last: bool = False, scale: float = 1.0) -> Any:
    stride = row_major(shape)
    if channels_last and len(shape) == 4:
        _, c, h, w = shape
        stride = [c * h * w, 1, w * c, c]
    t = case.graph.tensor(name=f"in{len(case.inputs)}", dim=shape, stride=stride, data_type=io)
    case.inputs.append(Input(t, shape, channels_last and len(shape) == 4, io, scale))
    return t


def row_major(shape: list[int]) -> list[int]:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return stride[::-1]


def ref_of(t: Any) -> Ref:
    return lambda env: env[id(t)]


# -- families ------------------------------------------------------------------------------------

def conv_case(seed: int, r: random.Random, d: Draw) -> Case:
    io, nhwc = r.choice(IO_TYPES), r.random() < 0.6
    n, c, k = d.size([1, 2, 3], 1, 4), d.size([3, 8, 13, 16], 1, 40), d.size([4, 11, 16, 32], 1, 40)
    h, w = d.size([5, 12, 17], 3, 40), d.size([7, 9, 16], 3, 40)
    kr = r.choice([1, 3, 3, 5])
    dil = r.choice([1, 1, 2]) if kr > 1 else 1
    stride, pad = r.choice([1, 1, 2]), r.randint(0, kr // 2)
    while (min(h, w) + 2 * pad - dil * (kr - 1) - 1) < 0:
        dil, pad = 1, kr // 2
    groups = 2 if (c % 2 == 0 and k % 2 == 0 and r.random() < 0.2) else 1
    bias, act = r.random() < 0.7, r.choice([None, *ACTIVATIONS])
    case = Case(seed, "conv", f"conv {io.name} {'NHWC' if nhwc else 'NCHW'} x[{n},{c},{h},{w}] w[{k},{c // groups},"
                f"{kr},{kr}] pad {pad} stride {stride} dil {dil}{' +bias' if bias else ''}{' +' + act if act else ''}",
                new_graph(io))
    g = case.graph
    X = add_input(case, [n, c, h, w], io, nhwc)
    W = add_input(case, [k, c // groups, kr, kr], io, nhwc, scale=1 / math.sqrt(c * kr * kr / groups))
    Y = g.conv_fprop(X, W, padding=[pad, pad], stride=[stride, stride], dilation=[dil, dil])
    ref = lambda env: F.conv2d(env[id(X)], env[id(W)], padding=pad, stride=stride, dilation=dil,
                               groups=groups)
    if bias:
        B = add_input(case, [1, k, 1, 1], io, nhwc)
        Y, ref = g.bias(Y, B), (lambda env, f=ref: f(env) + env[id(B)])
    if act:
        Y, ref = getattr(g, act)(Y), (lambda env, f=ref, a=UNARY[act]: a(f(env)))
    Y.set_output(True).set_data_type(io)
    case.outputs.append((Y, ref, TF32_TOL if io == DT.FLOAT else TOL[io]))
    return case


def matmul_case(seed: int, r: random.Random, d: Draw) -> Case:
    io = r.choice(IO_TYPES)
    b, m, k, n = d.size([1, 2, 3], 1, 4), d.size([1, 7, 33, 64], 1, 300), d.size([8, 33, 64], 1, 300), \
        d.size([5, 32, 96], 1, 300)
    b_batch = b if r.random() < 0.7 else 1
    bias, act, scale = r.random() < 0.5, r.choice([None, None, *ACTIVATIONS]), r.choice([None, 0.5])
    case = Case(seed, "matmul", f"matmul {io.name} a[{b},{m},{k}] b[{b_batch},{k},{n}]{' +bias' if bias else ''}"
                f"{' *' + str(scale) if scale else ''}{' +' + act if act else ''}", new_graph(io))
    g = case.graph
    A = add_input(case, [b, m, k], io)
    Bm = add_input(case, [b_batch, k, n], io, scale=1 / math.sqrt(k))
    Y = g.matmul(A, Bm)
    ref: Ref = lambda env: env[id(A)] @ env[id(Bm)]
    if bias:
        Bias = add_input(case, [1, 1, n], io)
        Y, ref = g.add(Y, Bias), (lambda env, f=ref: f(env) + env[id(Bias)])
    if scale:
        Y, ref = g.mul(Y, scale), (lambda env, f=ref: f(env) * scale)
    if act:
        Y, ref = getattr(g, act)(Y), (lambda env, f=ref, a=UNARY[act]: a(f(env)))
    Y.set_output(True).set_data_type(io)
    case.outputs.append((Y, ref, TF32_TOL if io == DT.FLOAT else TOL[io]))
    return case


def pointwise_shapes(r: random.Random, d: Draw) -> list[int]:
    rank = r.choice([2, 3, 4])
    return [d.size([1, 3, 7, 16, 33], 1, 48) for _ in range(rank - 1)] + [d.size([5, 16, 64, 97], 1, 200)]


def pointwise_case(seed: int, r: random.Random, d: Draw) -> Case:
    io = r.choice(IO_TYPES)
    full = pointwise_shapes(r, d)
    nhwc = len(full) == 4 and r.random() < 0.4
    case = Case(seed, "pointwise", "", new_graph(io))
    g = case.graph
    n_in = r.randint(1, 3)
    values: list[tuple[Any, Ref]] = []
    for i in range(n_in):
        shape = full if i == 0 else [1 if r.random() < 0.4 else s for s in full]
        t = add_input(case, shape, io, nhwc and i == 0)
        values.append((t, ref_of(t)))
    consumed: set[int] = set()
    steps = []
    for _ in range(r.randint(1, 5)):
        unused_inputs = [i for i, inp in enumerate(case.inputs) if id(inp.tensor) not in consumed]
        if r.random() < 0.45 and not unused_inputs[1:]:
            name = r.choice(sorted(UNARY))
            a = r.randrange(len(values))
            t = getattr(g, name)(values[a][0])
            values.append((t, lambda env, f=values[a][1], op=UNARY[name]: op(f(env))))
            consumed.add(id(values[a][0]))
            steps.append(f"{name}(v{a})")
        else:
            name = r.choice(sorted(BINARY))
            a = unused_inputs[0] if unused_inputs else r.randrange(len(values))
            b = r.randrange(len(values))
            t = getattr(g, name)(values[a][0], values[b][0])
            values.append((t, lambda env, fa=values[a][1], fb=values[b][1], op=BINARY[name]: op(fa(env), fb(env))))
            consumed.update((id(values[a][0]), id(values[b][0])))
            steps.append(f"{name}(v{a},v{b})")
    for i, inp in enumerate(case.inputs):  # every input feeds the graph
        if id(inp.tensor) not in consumed:
            last = len(values) - 1
            t = g.add(values[last][0], inp.tensor)
            values.append((t, lambda env, fa=values[last][1], fb=values[i][1]: fa(env) + fb(env)))
            consumed.update((id(values[last][0]), id(inp.tensor)))
            steps.append(f"add(v{last},v{i})")
    for t, ref in values[n_in:]:
        if id(t) not in consumed:
            t.set_output(True).set_data_type(io)
            case.outputs.append((t, ref, TOL[io]))
    case.desc = (f"pointwise {io.name} {'NHWC ' if nhwc else ''}"
                 f"inputs {[inp.shape for inp in case.inputs]}: {'; '.join(steps)}")
    return case


REDUCE = {"ADD": lambda x, dims: x.sum(dims, keepdim=True), "MAX": lambda x, dims: x.amax(dims, keepdim=True),
          "MIN": lambda x, dims: x.amin(dims, keepdim=True), "AMAX": lambda x, dims: x.abs().amax(dims, keepdim=True)}


def reduction_case(seed: int, r: random.Random, d: Draw) -> Case:
    io = r.choice(IO_TYPES)
    shape = [d.size([1, 4, 9, 32], 1, 64) for _ in range(r.choice([2, 3]) - 1)] + [d.size([16, 33, 128], 1, 512)]
    axes = [len(shape) - 1] if r.random() < 0.7 else list(range(1, len(shape)))
    mode = r.choice(sorted(REDUCE))
    pre = r.choice([None, "relu", "abs", "mul"])
    case = Case(seed, "reduction", f"reduction {mode} over {axes} of {io.name} {shape}"
                f"{' after ' + pre if pre else ''}", new_graph(io))
    g = case.graph
    X = add_input(case, shape, io)
    V, ref = X, ref_of(X)
    if pre == "mul":
        Z = add_input(case, [1] * (len(shape) - 1) + [shape[-1]], io)
        V, ref = g.mul(X, Z), (lambda env: env[id(X)] * env[id(Z)])
    elif pre:
        V, ref = getattr(g, pre)(X), (lambda env, op=UNARY[pre]: op(env[id(X)]))
    out_dim = [1 if i in axes else s for i, s in enumerate(shape)]
    Y = g.reduction(V, cudnn.reduction_mode[mode]).set_dim(out_dim).set_output(True).set_data_type(DT.FLOAT)
    case.outputs.append((Y, lambda env, f=ref: REDUCE[mode](f(env), axes), STATS_TOL))
    return case


def norm_case(seed: int, r: random.Random, d: Draw) -> Case:
    io = r.choice(IO_TYPES)
    kind = r.choice(["layernorm", "rmsnorm"])
    train = r.random() < 0.5
    rows, hidden = d.size([7, 33, 128], 1, 300), d.size([64, 96, 768, 1000], 8, 2048)
    phase = cudnn.norm_forward_phase.TRAINING if train else cudnn.norm_forward_phase.INFERENCE
    case = Case(seed, "norm", f"{kind} {'train' if train else 'infer'} {io.name} x[{rows},{hidden}]", new_graph(io))
    g = case.graph
    X = add_input(case, [rows, hidden], io, scale=3.0)
    S = add_input(case, [1, hidden], DT.FLOAT)
    if kind == "layernorm":
        B = add_input(case, [1, hidden], DT.FLOAT)
        Y, M, V = g.layernorm(phase, X, S, B, EPS)

        def ref_y(env: dict[int, torch.Tensor]) -> torch.Tensor:
            return F.layer_norm(env[id(X)], (hidden,), env[id(S)].reshape(-1), env[id(B)].reshape(-1), EPS)

        stats = [(M, lambda env: env[id(X)].mean(-1, keepdim=True)),
                 (V, lambda env: 1 / torch.sqrt(env[id(X)].var(-1, unbiased=False, keepdim=True) + EPS))]
    else:
        Y, V = g.rmsnorm(phase, X, S, None, EPS)

        def ref_y(env: dict[int, torch.Tensor]) -> torch.Tensor:
            x = env[id(X)]
            return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * env[id(S)]

        stats = [(V, lambda env: 1 / torch.sqrt((env[id(X)] ** 2).mean(-1, keepdim=True) + EPS))]
    Y.set_output(True).set_data_type(io)
    case.outputs.append((Y, ref_y, TOL[io] * 2))
    if train:
        for t, ref in stats:
            t.set_output(True).set_data_type(DT.FLOAT)
            case.outputs.append((t, ref, STATS_TOL))
    return case


FAMILIES: list[tuple[str, Callable[[int, random.Random, Draw], Case], float]] = [
    ("conv", conv_case, 0.25), ("matmul", matmul_case, 0.2), ("pointwise", pointwise_case, 0.3),
    ("reduction", reduction_case, 0.1), ("norm", norm_case, 0.15)]


def draw_case(seed: int, wide: bool = False) -> Case:
    r = random.Random(seed)
    make = r.choices([f for _, f, _ in FAMILIES], weights=[w for *_, w in FAMILIES])[0]
    return make(seed, r, Draw(r, wide))


# -- running one case ----------------------------------------------------------------------------

def fill(inp: Input, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(inp.shape, device="cuda", generator=gen, dtype=torch.float32) * inp.scale
    x = x.to(TORCH[inp.dtype])
    return x.contiguous(memory_format=torch.channels_last) if inp.channels_last else x


def out_buffer(t: Any) -> torch.Tensor:
    return torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda",
                               dtype=TORCH[t.get_data_type()]).fill_(float("nan"))


def mismatch(out: torch.Tensor, ref: torch.Tensor, tol: float) -> str | None:
    """Why ``out`` is wrong against ``ref`` (float64), or None."""
    ref = ref.reshape(out.shape).double()
    got = out.double()
    if torch.isnan(got).any() and not torch.isnan(ref).any():
        return "NaN in the output (unwritten or wrong)"
    floor = 1e-3 * math.sqrt(max(ref.numel(), 1))
    err = float((got - ref).norm() / max(float(ref.norm()), floor))
    return None if err <= tol else f"relative error {err:.3g} > {tol:g}"


def run_case(case: Case, draws: int = 2) -> str | None:
    """Build and execute ``case`` on ``draws`` input draws; the first mismatch, or None."""
    g = case.graph
    g.build(HEUR)
    outs = [out_buffer(t) for t, _, _ in case.outputs]
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    gen = torch.Generator(device="cuda").manual_seed(case.data_seed)
    feeds = {inp.tensor: torch.empty(0) for inp in case.inputs}
    for _ in range(draws):
        for inp in case.inputs:
            feeds[inp.tensor] = fill(inp, gen)
        for o in outs:
            o.fill_(float("nan"))
        pack = {**feeds, **{t: o for (t, _, _), o in zip(case.outputs, outs)}}
        g.execute(pack, ws)
        torch.cuda.synchronize()
        env = {id(inp.tensor): feeds[inp.tensor].double() for inp in case.inputs}
        for (t, ref, tol), o in zip(case.outputs, outs):
            why = mismatch(o, ref(env), tol)
            if why:
                return f"{t.get_name()}: {why}"
    return check_replay(g, pack, ws, outs)


@dataclass
class Tally:
    tried: int = 0
    matched: int = 0
    executes: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    defects: list[str] = field(default_factory=list)
    structures: set[int] = field(default_factory=set)
    by_family: Counter[str] = field(default_factory=Counter)

    def line(self, seconds: float, cut: bool) -> str:
        refused = ", ".join(f"{k}: {v}" for k, v in self.refused.most_common())
        return (f"reliability: fuzz tried {self.tried} graphs ({len(self.structures)} distinct structures, "
                f"{dict(self.by_family)}), ran+matched {self.matched} ({self.executes} executes), "
                f"refused {sum(self.refused.values())} {{{refused}}}, wrong {len(self.wrong)}, "
                f"other defects {len(self.defects)}, {seconds:.1f} s{' (time box reached)' if cut else ''}")


def reason(exc: BaseException) -> str:
    status = getattr(exc, "status_name", None)
    return f"{type(exc).__name__}{'/' + status if status else ''}"


def fuzz_one(seed: int, data_seed: int, tally: Tally, wide: bool) -> None:
    case = None
    try:
        case = draw_case(seed, wide)
        case.data_seed = data_seed
        tally.by_family[case.family] += 1
        tally.tried += 1
        why = run_case(case)
        tally.structures.add(case.graph.key())
        tally.executes += 2
        if why:
            tally.wrong.append(f"seed {seed}:{data_seed}: {case.desc}: {why}")
        else:
            tally.matched += 1
    except REFUSALS as exc:
        tally.refused[f"{case.family if case else '?'}: {reason(exc)}"] += 1
        if not str(exc).strip():
            tally.defects.append(f"seed {seed}:{data_seed}: {case.desc if case else ''}: refusal without a message")
    except Exception as exc:  # noqa: BLE001 (anything else is a defect: no clear cudnn exception)
        tally.defects.append(f"seed {seed}:{data_seed}: {case.desc if case else ''}: {type(exc).__name__}: {exc}")


@pytest.fixture
def own_plan_cache(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The plan cache in a fresh folder: repeated structures hit memory, nothing leaks between runs."""
    cache = cudnn.plan_cache
    saved = cache.directory, cache.enabled, cache.max_in_memory
    cache.directory, cache.enabled = tmp_path, True
    cache.max_in_memory = 100_000  # more than the structures: a cyclic walk must not thrash the LRU
    cache.clear(disk=False)
    yield cache
    cache.directory, cache.enabled, cache.max_in_memory = saved
    cache.clear(disk=False)


def test_differential_fuzz(own_plan_cache: Any) -> None:
    replay = os.environ.get("CUDNN_PY_GPU_FUZZ_REPLAY")
    wide = os.environ.get("CUDNN_PY_GPU_FUZZ_VARIETY", "small") == "wide"
    if replay:
        structure, _, data = replay.partition(":")
        case = draw_case(int(structure), wide)
        case.data_seed = int(data or 0)
        print(f"seed {replay}: {case.desc}\n{case.graph}")
        assert run_case(case) is None
        return
    total = int(os.environ.get("CUDNN_PY_GPU_FUZZ", "1000"))
    base = int(os.environ.get("CUDNN_PY_GPU_FUZZ_SEED", "0"))
    budget = float(os.environ.get("CUDNN_PY_GPU_FUZZ_SECONDS", "150"))
    structures = int(os.environ.get("CUDNN_PY_GPU_FUZZ_STRUCTURES", "300"))
    tally, start, cut, launched = Tally(), time.perf_counter(), False, launches()
    for i in range(total):
        if time.perf_counter() - start > budget:
            cut = True
            break
        fuzz_one(base + i % structures, i, tally, wide)
    print("\n" + tally.line(time.perf_counter() - start, cut) + f", replays {launches() - launched}")
    for line in (tally.wrong + tally.defects)[:30]:
        print("  " + line)
    assert not tally.wrong, f"{len(tally.wrong)} wrong results; first: {tally.wrong[0]}"
    assert not tally.defects, f"{len(tally.defects)} defects; first: {tally.defects[0]}"
    assert tally.matched > tally.tried // 2, "most graphs should run: the generator or the backend changed"
    assert launches() > launched, "no pack was replayed: the replay comparison compared nothing"
