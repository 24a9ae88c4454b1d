"""``python -m cudnn``: the demo and a report of what was found.

    python -m cudnn demo   # build and run conv + bias + ReLU on the GPU, check it with NumPy
    python -m cudnn info   # versions, library paths, GPUs
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import cudnn

from ._lib import cuda


def info() -> int:
    print(f"cudnn-py {cudnn.__version__} (Python {sys.version.split()[0]})")
    try:
        print(cudnn.library_info())
    except cudnn.LibraryNotFoundError as exc:
        print(exc)
        return 1
    reason = cuda.why_no_gpu()
    if reason:
        print(f"GPU: none usable ({reason})")
    for i in range(cuda.device_count()):
        d = cuda.device_info(i)
        print(f"GPU {i}: {d.name}, sm_{d.compute_capability[0]}{d.compute_capability[1]}, {d.sm_count} SMs, "
              f"{d.total_memory / 2**30:.0f} GiB")
    return 0


def _demo_graph(n: int, c: int, h: int, k: int) -> tuple[cudnn.pygraph, dict[str, Any]]:
    """Seed 002's graph: Y = ReLU(conv(X, W) + B), fp16 NHWC in and out, fp32 inside."""
    g = cudnn.pygraph(name="conv_bias_relu", io_data_type=cudnn.data_type.HALF,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=[n, c, h, h], stride=[h * h * c, 1, h * c, c])
    W = g.tensor(name="W", dim=[k, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    B = g.tensor(name="B", dim=[1, k, 1, 1], stride=[k, 1, k, k])
    conv = g.conv_fprop(X, W, padding=[1, 1], name="conv")
    Y = g.relu(g.bias(conv, B, name="bias"), name="relu")
    Y.set_output(True).set_name("Y")
    return g, {"X": X, "W": W, "B": B, "Y": Y}


def _reference(x: Any, w: Any, b: Any) -> Any:
    """NumPy conv (padding 1) + bias + ReLU on NCHW float32 arrays."""
    import numpy as np

    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N C H W 3 3
    y = np.einsum("nchwrs,kcrs->nkhw", windows, w, optimize=True) + b.reshape(1, -1, 1, 1)
    return np.maximum(y, 0)


def demo() -> int:
    import numpy as np

    n, c, h, k = 4, 32, 28, 64
    print(f"cudnn-py {cudnn.__version__}: fused conv + bias + ReLU, X [{n},{c},{h},{h}] fp16 NHWC, W [{k},{c},3,3]")
    g, t = _demo_graph(n, c, h, k)
    g.validate()
    try:
        print(f"cuDNN {cudnn.backend_version_string()} from {cudnn.library_info().path}")
    except cudnn.LibraryNotFoundError as exc:
        print(exc)
        return 1
    reason = cuda.why_no_gpu()
    if reason:
        print(f"\nNo GPU here ({reason}).\nThis is the graph the demo would build and run, as cudnn-py "
              f"validated it:\n{g}\n\nRun `python -m cudnn demo` on a machine with an NVIDIA GPU to execute it.")
        return 0

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, h)).astype(np.float16)
    w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float16)
    b = rng.standard_normal(k).astype(np.float16)
    t0 = time.perf_counter()
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    build_ms = (time.perf_counter() - t0) * 1e3
    nhwc = lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))  # noqa: E731
    bufs = {name: cuda.DeviceBuffer(arr.nbytes) for name, arr in
            {"X": x, "W": w, "B": b, "Y": np.empty((n, h, h, k), np.float16)}.items()}
    bufs["X"].copy_from_host(nhwc(x))
    bufs["W"].copy_from_host(nhwc(w))
    bufs["B"].copy_from_host(b)
    workspace = cuda.DeviceBuffer(g.get_workspace_size())
    pack = {t[name]: bufs[name].ptr for name in ("X", "W", "B", "Y")}
    g.execute(pack, workspace.ptr)
    cuda.synchronize()
    y = bufs["Y"].copy_to_host(np.empty((n, h, h, k), np.float16)).transpose(0, 3, 1, 2).astype(np.float32)
    ref = _reference(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32))
    err = float(np.abs(y - ref).max())
    device = cuda.device_info(cuda.current_device()).name
    print(f"GPU: {device}; built in {build_ms:.0f} ms with plan {g.get_plan_name_at_index(0) if g.get_execution_plan_count() else '?'}; "
          f"workspace {g.get_workspace_size()} bytes")
    ok = err < 5e-2 * max(1.0, float(np.abs(ref).max()))
    print(f"max |cuDNN - NumPy| = {err:.4f} over {y.size} outputs: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cudnn", description="cudnn-py: cuDNN's Graph API from Python")
    sub = ap.add_subparsers(dest="command")
    sub.add_parser("demo", help="build and run a fused conv + bias + ReLU graph, checked against NumPy")
    sub.add_parser("info", help="versions, library paths and GPUs")
    args = ap.parse_args(argv)
    if args.command == "info":
        return info()
    if args.command == "demo":
        return demo()
    ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
