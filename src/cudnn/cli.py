"""``python -m cudnn`` (and the ``cudnn-py`` command): what was found, a demo, pictures, timings.

    python -m cudnn --version                 # cudnn-py's version
    python -m cudnn info                      # cuDNN, driver, CUDA runtime, GPUs, cuDNN's features
    python -m cudnn demo                      # build and run conv + bias + ReLU, checked with NumPy
    python -m cudnn show graph.json -o g.svg  # draw a printed graph (str(graph)) as SVG or DOT
    python -m cudnn bench                     # a few ops, cudnn-py and PyTorch side by side
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import cudnn

from ._lib import cuda
from ._lib.loader import LoadReport
from ._lib.status import version_string

# Features a cuDNN version gates, beyond the backend operations its headers date (listed too):
# (what, module, name of its version constant or the version itself)
FEATURE_GATES: tuple[tuple[str, str, str | int], ...] = (
    ("attention as one SDPA_FWD operation (implementation=UNIFIED)", "", 91301),  # families/sdpa_unified_nodes
    ("kernel cache", "cudnn.backend.kernel_cache", "SINCE"),
    ("kernel cache JSON (save / load)", "cudnn.backend.kernel_cache", "SERIALIZE_SINCE"),
    ("device properties (builds for a described GPU)", "cudnn.backend.deviceprop", "DEVICEPROP_SINCE"),
    ("block-scale quantize / dequantize", "cudnn._graph.families.block_scale_nodes", "BLOCK_SCALE_SINCE"),
    ("execute-time shape overrides", "cudnn._graph.build.pipeline", "OVERRIDE_SHAPE_SINCE"),
    ("compile-time constant scalars", "cudnn._graph.methods.core_methods", "COMPILE_TIME_CONST_SINCE"),
    ("causal conv1d", "cudnn.causal_conv1d_capi", "SINCE"),
)


# -- info ---------------------------------------------------------------------------------------

def bindings_installed() -> bool:
    """Whether cuda-bindings, through which cudnn-py makes its CUDA calls, is installed."""
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):  # no `cuda` namespace at all
        return False


_NO_BINDINGS = ("cuda-bindings is not installed (cudnn-py makes its CUDA calls through it; "
                "the cu13 and cu12 extras install it with cuDNN)")


def driver_status() -> tuple[int | None, str]:
    """The CUDA version the NVIDIA driver supports (None without a driver) and a line saying so."""
    if not bindings_installed():
        return None, f"not checked: {_NO_BINDINGS}"
    try:
        from cuda.bindings import driver as drv

        err, version = drv.cuDriverGetVersion()
    except Exception as exc:  # noqa: BLE001 - cuda-bindings raises its own types when libcuda cannot be opened
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, (f"none: libcuda.so.1, the NVIDIA driver's library, could not be loaded ({first}). Graphs "
                      "can be declared, validated, printed and drawn here; running them needs an NVIDIA GPU and driver")
    if int(err) != 0:
        return None, f"present, but cuDriverGetVersion failed: {getattr(err, 'name', err)}"
    release = _driver_release()
    return int(version), f"{release or 'present'} (supports CUDA {_cuda_version(int(version))})"


def _driver_release() -> str:
    """The driver's release number (e.g. '570.124.06') where Linux shows it."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    words = text.split()
    for i, w in enumerate(words):
        if w == "Module" and i + 1 < len(words) and words[i + 1][:1].isdigit():
            return words[i + 1]
    return ""


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def runtime_version() -> int | None:
    """The version of the CUDA runtime cudnn-py calls (cuda-bindings' cudart)."""
    try:
        err, v = cuda.runtime().cudaRuntimeGetVersion()
    except Exception:  # noqa: BLE001 - no usable cudart: reported as unknown
        return None
    return int(v) if int(err) == 0 else None


def feature_lines(version: int) -> list[str]:
    """One line per gated feature: whether the loaded cuDNN (``version``) has it."""
    from ._lib.enums import SINCE

    gates: list[tuple[str, int]] = []
    for what, module, since in FEATURE_GATES:
        if isinstance(since, int):
            gates.append((what, since))
            continue
        try:
            gates.append((what, int(getattr(importlib.import_module(module), since))))
        except (ImportError, AttributeError):
            continue  # not in this cudnn-py
    for name, since in SINCE.get("cudnnBackendDescriptorType_t", {}).items():
        op = name.removeprefix("CUDNN_BACKEND_").removesuffix("_DESCRIPTOR")
        gates.append((f"backend {op.removeprefix('OPERATION_')}{' operation' if 'OPERATION_' in op else ''}", since))
    for name, since in SINCE.get("cudnnDataType_t", {}).items():
        gates.append((f"data type {name.removeprefix('CUDNN_DATA_')}", since))
    lines = []
    for what, since in sorted(gates, key=lambda g: (g[1], g[0])):
        ok = version >= since
        lines.append(f"  {'yes' if ok else 'no ':3s}  {version_string(since):>7s}  {what}"
                     + ("" if ok else f"  (needs cuDNN >= {version_string(since)})"))
    return lines


def info() -> int:
    """Print what was found, cuDNN first: where it is missing, how to get it, then what else is
    missing. Exit status 1 without cuDNN."""
    print(f"cudnn-py {cudnn.__version__} (Python {sys.version.split()[0]})")
    try:
        report: LoadReport | None = cudnn.library_info()
    except cudnn.LibraryNotFoundError as exc:
        report = None
        print("cuDNN: not found\n" + "\n".join(f"  {line}" for line in str(exc).splitlines()))
    else:
        print(f"cuDNN: {report}")
    driver_cuda, driver_line = driver_status()
    print(f"NVIDIA driver: {driver_line}")
    rt = runtime_version()
    if rt is not None:
        print(f"CUDA runtime: {_cuda_version(rt)} (cuda-bindings)")
    elif not bindings_installed():
        print("CUDA runtime: not checked (no cuda-bindings)")
    # a driver runs runtimes of its CUDA major version (minor version compatibility), not newer ones
    if driver_cuda is not None and rt is not None and driver_cuda // 1000 < rt // 1000:
        print(f"  the driver is too old for this CUDA runtime: it supports CUDA {_cuda_version(driver_cuda)}, the "
              f"runtime is {_cuda_version(rt)}. Update the NVIDIA driver, or install the CUDA "
              f"{driver_cuda // 1000} packages (cudnn-py[cu{driver_cuda // 1000}])")
    if driver_cuda is not None:
        reason = cuda.why_no_gpu()
        if reason:
            print(f"GPU: none usable ({reason})")
        for i in range(cuda.device_count()):
            d = cuda.device_info(i)
            cc = d.compute_capability
            print(f"GPU {i}: {d.name}, compute capability {cc[0]}.{cc[1]} (sm_{cc[0]}{cc[1]}), {d.sm_count} SMs, "
                  f"{d.total_memory / 2**30:.0f} GiB")
    else:
        print("GPU: none (no driver)" if bindings_installed() else "GPU: not checked (no cuda-bindings)")
    if report is None:
        return 1
    print(f"features of the loaded cuDNN {version_string(report.version)}:")
    print("\n".join(feature_lines(report.version)))
    return 0


# -- demo ---------------------------------------------------------------------------------------

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


def demo(as_json: bool = False) -> int:
    """Build, run and check the demo graph; ``as_json``: print only its validated JSON (no GPU needed)."""
    import numpy as np

    n, c, h, k = 4, 32, 28, 64
    if as_json:
        g, _ = _demo_graph(n, c, h, k)
        g.validate()
        print(g)
        return 0
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

    def nhwc(a: Any) -> Any:
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1))

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
    plan = g.get_plan_name_at_index(0) if g.get_execution_plan_count() else "?"
    print(f"GPU: {device}; built in {build_ms:.0f} ms with plan {plan}; workspace {g.get_workspace_size()} bytes")
    ok = err < 5e-2 * max(1.0, float(np.abs(ref).max()))
    print(f"max |cuDNN - NumPy| = {err:.4f} over {y.size} outputs: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


# -- show ---------------------------------------------------------------------------------------

def show(source: str, output: str | None, expand: bool) -> int:
    """Draw a printed graph: SVG or DOT by the output's suffix; DOT on stdout without -o."""
    from ._graph.pygraph import pygraph
    from ._graph.text import diagram

    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"show: cannot read {source}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        pic = diagram.from_json_text(text, pygraph, expand)
        if output is None:
            sys.stdout.write(pic.dot())
            return 0
        diagram.save(pic, output)
    except ValueError as exc:  # GraphError, SerializationError, bad JSON (json.JSONDecodeError)
        start = text.lstrip()[:1]
        hint = "" if start in ("{", "") else (
            f"; the input starts with {text.lstrip().splitlines()[0][:60]!r}, not '{{': give only the JSON "
            "(python -m cudnn demo --json prints only the demo graph's)")
        print(f"show: {source}: {exc}{hint}", file=sys.stderr)
        return 2
    print(f"wrote {output}: {sum(b.kind in ('op', 'composite') for b in pic.boxes.values())} ops, "
          f"{len(pic.edges)} edges")
    return 0


# -- main ---------------------------------------------------------------------------------------

def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive (at least 1)")
    return value


def bench_cases(text: str) -> list[str]:
    """An argparse type: comma-separated names of ``bench`` cases, each one it knows."""
    from .cli_bench import CASES

    names = [c for c in text.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    return names


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line: ``prog`` is the name it was started by (None: the program's file name,
    ``cudnn-py`` for the console script)."""
    ap = argparse.ArgumentParser(prog=prog, description="cudnn-py: cuDNN's Graph API from Python")
    ap.add_argument("--version", action="version", version=f"cudnn-py {cudnn.__version__}")
    sub = ap.add_subparsers(dest="command")
    sub.add_parser("info", help="cuDNN (version, path), driver, CUDA runtime, GPUs and the features cuDNN has",
                   description="Print what cudnn-py finds: cuDNN (version and path, or how to install it), the "
                               "NVIDIA driver, the CUDA runtime, the GPUs, and which features the loaded cuDNN "
                               "has. Exit status 1 when cuDNN cannot be loaded.")
    p_demo = sub.add_parser("demo", help="build and run a fused conv + bias + ReLU graph, checked against NumPy",
                            description="Build a fused conv + bias + ReLU graph (fp16 NHWC), run it on the GPU "
                                        "and check the result against NumPy. Without a GPU: print the validated "
                                        "graph instead.")
    p_demo.add_argument("--json", action="store_true",
                        help="print only the graph's JSON, run nothing (python -m cudnn demo --json | "
                             "python -m cudnn show -)")
    p_show = sub.add_parser("show", help="draw a printed graph (the JSON of str(graph)) as SVG or Graphviz DOT",
                            description="Draw a printed graph (the JSON that str(graph) gives) as SVG or "
                                        "Graphviz DOT. Needs no GPU and no cuDNN.")
    p_show.add_argument("graph", help="a file holding the JSON of str(graph), or - for stdin")
    p_show.add_argument("-o", "--output", help="g.svg or g.dot (without it: DOT on stdout)")
    p_show.add_argument("--expand", action="store_true",
                        help="draw composite nodes (attention, norms) as the primitive ops they expand into")
    p_bench = sub.add_parser("bench", help="time a few ops: cudnn-py and PyTorch side by side",
                             description="Time a few common ops (conv, matmul, layer norm, attention) through "
                                         "cudnn-py and, where it is installed with CUDA, PyTorch; compare their "
                                         "outputs. Needs an NVIDIA GPU.")
    p_bench.add_argument("--only", type=bench_cases, default=[], metavar="CASES",
                         help="comma-separated cases: conv,matmul,layernorm,sdpa (default: all)")
    p_bench.add_argument("--iters", type=positive_int, default=50, help="timed calls per op, at least 1 (default 50)")
    return ap


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the command line ``argv`` (None: ``sys.argv[1:]``); its exit status. Arguments are
    checked first: a mistake is argparse's usage error (exit status 2) on any machine."""
    ap = parser(prog)
    args = ap.parse_args(argv)
    if args.command == "info":
        return info()
    if args.command == "demo":
        return demo(args.json)
    if args.command == "show":
        return show(args.graph, args.output, args.expand)
    if args.command == "bench":
        from .cli_bench import bench

        return bench(args.only, args.iters)
    ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(prog="python -m cudnn.cli"))
