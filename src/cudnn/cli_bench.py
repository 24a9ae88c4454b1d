"""``python -m cudnn bench``: a few common ops timed through cudnn-py and PyTorch in one run.

Each case builds its graph once (heuristics A then FALLBACK), then times ``iters`` calls of
``execute`` and of the PyTorch equivalent between two device synchronizations: wall time per
call as a user sees it, host overhead included. With PyTorch the outputs are also compared.
Without PyTorch only cudnn-py is timed, on buffers from cuda-bindings.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cudnn

from ._lib import cuda

HALF, BF16, FLOAT = cudnn.data_type.HALF, cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
HEURISTICS = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


@dataclass
class Case:
    """One op: its graph, the tensors to bind, and the PyTorch call computing the same."""

    name: str
    shape: str
    graph: cudnn.pygraph
    inputs: dict[str, Any]  # name -> cudnn tensor
    output: Any  # the cudnn tensor compared
    torch_fn: Callable[[dict[str, Any]], Any] | None  # inputs by name -> output
    tolerance: float


def _conv(torch: Any) -> Case:
    n, c, h, k = 32, 64, 56, 64
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="x", dim=[n, c, h, h], stride=[h * h * c, 1, h * c, c])
    W = g.tensor(name="w", dim=[k, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    B = g.tensor(name="b", dim=[1, k, 1, 1], stride=[k, 1, k, k])
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)

    def ref(t: dict[str, Any]) -> Any:
        return torch.relu(torch.nn.functional.conv2d(t["x"], t["w"], t["b"].flatten(), padding=1))

    return Case("conv+bias+relu", f"x [{n},{c},{h},{h}] fp16 NHWC, w [{k},{c},3,3]", g,
                {"x": X, "w": W, "b": B}, Y, ref if torch else None, 2e-2)


def _matmul(torch: Any) -> Case:
    b, m, k, n = 16, 1024, 1024, 1024
    g = cudnn.pygraph(io_data_type=HALF, compute_data_type=FLOAT)
    A = g.tensor(name="a", dim=[b, m, k])
    Bt = g.tensor(name="b", dim=[b, k, n])
    C = g.matmul(A, Bt).set_output(True)
    return Case("matmul", f"[{b},{m},{k}] x [{b},{k},{n}] fp16", g, {"a": A, "b": Bt}, C,
                (lambda t: torch.bmm(t["a"], t["b"])) if torch else None, 2e-2)


def _layernorm(torch: Any) -> Case:
    rows, d = 16384, 4096
    g = cudnn.pygraph(intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="x", dim=[rows, d], data_type=BF16)
    S = g.tensor(name="scale", dim=[1, d], data_type=FLOAT)
    Bias = g.tensor(name="bias", dim=[1, d], data_type=FLOAT)
    Y = g.layernorm(cudnn.norm_forward_phase.INFERENCE, X, S, Bias, 1e-5)[0].set_output(True)

    def ref(t: dict[str, Any]) -> Any:
        x = t["x"]
        return torch.nn.functional.layer_norm(x, (d,), t["scale"].flatten().to(x.dtype),
                                              t["bias"].flatten().to(x.dtype), 1e-5)

    return Case("layernorm", f"[{rows},{d}] bf16, fp32 scale/bias", g, {"x": X, "scale": S, "bias": Bias}, Y,
                ref if torch else None, 5e-2)


def _sdpa(torch: Any) -> Case:
    b, h, s, d = 4, 16, 2048, 128
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    Q, K, V = (g.tensor(name=x, dim=[b, h, s, d]) for x in ("q", "k", "v"))
    out = g.sdpa(Q, K, V, generate_stats=False, attn_scale=d ** -0.5, use_causal_mask=True)[0].set_output(True)

    def ref(t: dict[str, Any]) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)

    return Case("sdpa causal fwd", f"b{b} h{h} s{s} d{d} bf16", g, {"q": Q, "k": K, "v": V}, out,
                ref if torch else None, 2e-2)


CASES = {"conv": _conv, "matmul": _matmul, "layernorm": _layernorm, "sdpa": _sdpa}


def _per_call_us(fn: Callable[[], Any], iters: int, sync: Callable[[], None]) -> float:
    for _ in range(3):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def _torch_buffers(torch: Any, case: Case) -> dict[str, Any]:
    dtypes = {HALF: torch.float16, BF16: torch.bfloat16, FLOAT: torch.float32}
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = {}
    for name, t in case.inputs.items():
        base = torch.randn(t.get_dim(), device="cuda", generator=gen, dtype=torch.float32)
        if name == "w":
            base = base / (t.get_dim()[1] * 9) ** 0.5
        out[name] = torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda",
                                        dtype=dtypes[t.get_data_type()]).copy_(base)
    y = case.output
    out["__out__"] = torch.empty_strided(y.get_dim(), y.get_stride(), device="cuda", dtype=dtypes[y.get_data_type()])
    return out


def _raw_buffers(case: Case, keep: list[Any]) -> dict[str, Any]:
    """Device pointers holding random values (fp16 bits, read as the tensor's type: only timed);
    the buffers are appended to ``keep``, which owns them."""
    import numpy as np

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for name, t in [*case.inputs.items(), ("__out__", case.output)]:
        count = 1 + sum((d - 1) * s for d, s in zip(t.get_dim(), t.get_stride()))
        itemsize = 4 if t.get_data_type() == FLOAT else 2
        host = rng.standard_normal(count * itemsize // 2).astype(np.float16)
        buf = cuda.DeviceBuffer(host.nbytes)
        buf.copy_from_host(host)
        keep.append(buf)
        out[name] = buf.ptr
    return out


def bench(only: list[str], iters: int) -> int:
    """Run the cases (all, or those named in ``only``); print one line each and the ratios."""
    unknown = [c for c in only if c not in CASES]
    if unknown:
        print(f"bench: unknown case(s) {unknown}; choose from {sorted(CASES)}", file=sys.stderr)
        return 2
    if iters < 1:
        print(f"bench: iters must be at least 1, got {iters}", file=sys.stderr)
        return 2
    reason = cuda.why_no_gpu()
    if reason:
        print(f"bench needs an NVIDIA GPU to time anything: {reason}", file=sys.stderr)
        return 1
    try:
        import torch

        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    print(f"cudnn-py {cudnn.__version__}, cuDNN {cudnn.backend_version_string()}, "
          f"{cuda.device_info(cuda.current_device()).name}; {iters} calls each, wall time per call"
          + ("" if torch else " (PyTorch not installed: cudnn-py only)"))
    head = f"{'op':16s} {'shape':42s} {'cudnn-py':>10s} {'torch':>10s} {'torch/cudnn':>11s}  check"
    print(head)
    failed = False
    for key in only or list(CASES):
        case = CASES[key](torch)
        try:
            case.graph.build(HEURISTICS)
        except cudnn.CudnnError as exc:
            print(f"{case.name:16s} {case.shape:42s} not built: {str(exc).splitlines()[0]}", flush=True)
            failed = True
            continue
        keep: list[Any] = []  # cuda-bindings buffers (without PyTorch) live until the case is done
        bufs = _torch_buffers(torch, case) if torch else _raw_buffers(case, keep)
        pack = {t: bufs[n] for n, t in case.inputs.items()}
        pack[case.output] = bufs["__out__"]
        size = max(case.graph.get_workspace_size(), 1)
        if torch:
            ws: Any = torch.empty(size, device="cuda", dtype=torch.uint8)
        else:
            keep.append(cuda.DeviceBuffer(size))
            ws = keep[-1].ptr
        sync = torch.cuda.synchronize if torch else cuda.synchronize
        ours = _per_call_us(functools.partial(case.graph.execute, pack, ws), iters, sync)
        line = f"{case.name:16s} {case.shape:42s} {ours:8.1f}us"
        if torch and case.torch_fn is not None:
            args = {n: bufs[n] for n in case.inputs}
            theirs = _per_call_us(functools.partial(case.torch_fn, args), iters, sync)
            expected = case.torch_fn(args).float()
            err = float((bufs["__out__"].float() - expected).abs().max() / max(expected.abs().max().item(), 1e-6))
            ok = err <= case.tolerance
            failed |= not ok
            line += f" {theirs:8.1f}us {theirs / ours:10.2f}x  {'ok' if ok else 'MISMATCH'} (rel. err {err:.1e})"
        print(line, flush=True)
    return 1 if failed else 0
