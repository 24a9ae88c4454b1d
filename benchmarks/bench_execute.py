"""pygraph on the GPU: host cost per execute, fused conv + bias + ReLU time, build time.

    PYTHONPATH=src python benchmarks/bench_execute.py [--quick]

1. Host time per call, with the GPU queue pre-filled (a long sleep kernel first) so the
   CPU is what is measured: pygraph.execute, one bare ctypes cudnnBackendExecute with a
   prepared variant pack, torch conv2d (bench_call_overhead.py adds cudnn.Graph and the
   official frontend, which needs a process of its own: it is also named ``cudnn``).
2. GPU time of conv + bias + ReLU at ResNet-50 shapes (fp16, NHWC): one fused cuDNN graph
   vs PyTorch eager (conv2d, add, relu), CUDA events, median of repeats.
3. Build time of that graph (validate -> plans) in this process.
Prints ratios side by side; never asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _timing import host_time, kernel_time

import cudnn
from cudnn._lib import capi

HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def conv_graph(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, pad: int, stride: int,
               handle: cudnn.Handle | None = None):  # type: ignore[no-untyped-def]
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT, handle=handle)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[pad, pad], stride=[stride, stride])
    feeds = {X: x, W: w}
    if b is not None:
        B = g.tensor_like(b)
        Y = g.relu(g.bias(Y, B))
        feeds[B] = b
    Y.set_output(True)
    return g, feeds, Y


def host_us_per_call(fn: Callable[[], None], calls: int = 200, repeats: int = 21) -> float:
    """Median host microseconds per call with the stream kept busy by a sleep kernel.

    ``calls`` stays well under the GPU's launch queue depth (about 1000): past it each
    launch waits for a free slot and the loop would time the GPU, not the host."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        torch.cuda._sleep(int(5e7))  # ~25 ms of GPU work queued ahead of the calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def gpu_us(fn: Callable[[], None], calls: int = 20, repeats: int = 9) -> float:
    """Median GPU microseconds per call of fn: calls queued back to back behind a GPU spin
    (`kernel_time`), so the host's time per call does not enter the figure."""
    return kernel_time(fn, calls, repeats, host_time(fn, calls)) * 1e6


def bench_host(stream: torch.cuda.Stream) -> list[tuple[str, float]]:
    x = torch.randn(1, 8, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(8, 8, 1, 1, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=stream)
    g, feeds, Y = conv_graph(x, w, None, 0, 1, handle)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    pack = {**feeds, Y: y}
    g.execute(pack, ws, handle=handle)
    runner = g.runner()
    entry = runner.prepare(pack, ws)
    execute, h, plan_ptr, pack_ptr = capi.graph.cudnnBackendExecute, handle.ptr, runner.plan_ptr, entry.pack_ptr

    rows = [
        ("bare cudnnBackendExecute (ctypes)", host_us_per_call(lambda: execute(h, plan_ptr, pack_ptr))),
        ("cudnn-py pygraph.execute", host_us_per_call(lambda: g.execute(pack, ws, handle=handle))),
        ("torch conv2d", host_us_per_call(lambda: F.conv2d(x, w))),
    ]
    return rows


RESNET = [  # (N, C, H, K, R, stride): ResNet-50 convolutions at batch 32
    (32, 64, 56, 64, 3, 1),
    (32, 64, 56, 256, 1, 1),
    (32, 128, 28, 128, 3, 1),
    (32, 256, 14, 256, 3, 1),
    (32, 512, 7, 512, 3, 1),
    (32, 256, 56, 512, 1, 2),
]


def bench_fused(quick: bool) -> list[tuple[str, float, float, float]]:
    rows = []
    for n, c, h, k, r, stride in RESNET[:2] if quick else RESNET:
        x = torch.randn(n, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        w = torch.randn(k, c, r, r, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.float16)
        pad = r // 2
        t0 = time.perf_counter()
        g, feeds, Y = conv_graph(x, w, b, pad, stride)
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        build_ms = (time.perf_counter() - t0) * 1e3
        y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        pack = {**feeds, Y: y}
        cudnn_t = gpu_us(lambda: g.execute(pack, ws))
        torch_t = gpu_us(lambda: torch.relu(F.conv2d(x, w, padding=pad, stride=stride) + b))
        ref = torch.relu(F.conv2d(x.float(), w.float(), padding=pad, stride=stride) + b.float())
        assert torch.allclose(y.float(), ref, atol=0.1, rtol=0.02), "fused result does not match torch"
        rows.append((f"N{n} C{c} H{h} K{k} {r}x{r} s{stride}", cudnn_t, torch_t, build_ms))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"device: {torch.cuda.get_device_name()}  cuDNN {cudnn.backend_version_string()}  torch {torch.__version__}")
    stream = torch.cuda.current_stream()
    # pygraph.execute issues on the handle's stream; keep it on torch's current stream
    cudnn.set_stream(handle=cudnn.backend.default_handle(), stream=stream)

    print("\n1. host time per call, 1x1 conv 1x8x8x8 fp16 (GPU queue pre-filled)")
    rows = bench_host(stream)
    base = rows[0][1]
    for name, us in rows:
        ratio = f"{us / base:5.2f}x bare" if us == us else "not installed"
        print(f"  {name:38s} {us:7.2f} us   {ratio}")

    print("\n2. conv + bias + ReLU, fp16 NHWC, GPU time (median of 50)")
    print(f"  {'shape':34s} {'cudnn-py us':>11s} {'torch us':>9s} {'speedup':>8s} {'build ms':>9s}")
    for name, c_t, t_t, build_ms in bench_fused(args.quick):
        print(f"  {name:34s} {c_t:11.1f} {t_t:9.1f} {t_t / c_t:7.2f}x {build_ms:9.1f}")


if __name__ == "__main__":
    main()
