"""What tools/sanitize.sh needs in Python.

1. A pytest plugin (``-p sanitize_support``) for the sanitized process: torch computes its
   references without cuDNN (torch keeps its own cuDNN handles for the life of the process and
   never destroys them, so they would show as leaks that are not ours), and once the session is
   over every GPU resource is released: the locals of finished frames and the closures of the
   test files' functions cleared, plan cache emptied, every cuDNN handle destroyed, torch's
   cuBLAS workspaces and cached device and pinned host blocks freed; then the CUDA context is
   reset, which is when the leak check counts what is still allocated, and the process leaves.
2. ``python3 tools/sanitize_support.py report TOOL LOG STATUS``: one summary line
   (``reliability: sanitizer ...``) from a compute-sanitizer log, leaked allocations attributed
   to their owner from each one's host backtrace with the largest stacks printed, and for
   racecheck the kernels with hazards.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import types
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

_status = [0]


# -- 1. the pytest plugin ---------------------------------------------------------------------

def pytest_configure(config: Any) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.backends.cudnn.enabled = False


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _status[0] = int(exitstatus)


def _describe(o: Any) -> str:
    if isinstance(o, types.FrameType):
        return f"frame {o.f_code.co_name} ({Path(o.f_code.co_filename).name}:{o.f_lineno})"
    if isinstance(o, dict):
        if "__builtins__" in o and "__name__" in o:
            return f"module dict {o['__name__']}"
        return f"dict keys {[str(k)[:40] for k in list(o)[:6]]}"
    if isinstance(o, (list, tuple, set)):
        return f"{type(o).__name__} of {len(o)}"
    if isinstance(o, types.FunctionType):
        return f"function {o.__qualname__}"
    if isinstance(o, BaseException):
        return f"exception {type(o).__name__}: {str(o)[:80]}"
    return type(o).__module__ + "." + type(o).__qualname__


def _chain(obj: Any, exclude: set[int], depth: int = 8) -> str:
    """One path of referrers from ``obj`` upwards: what keeps it alive."""
    steps, cur, seen = [], obj, {id(obj)}
    kept: list[Any] = []  # this function's own lists stay alive and out of the walk
    seen |= {id(kept), id(steps), id(seen)}
    for _ in range(depth):
        found = gc.get_referrers(cur)
        kept.append(found)
        seen.add(id(found))
        refs = [r for r in found if id(r) not in exclude and id(r) not in seen]
        kept.append(refs)
        seen.add(id(refs))
        if not refs:
            break
        cur = next((r for r in refs if not isinstance(r, types.FrameType)), refs[0])
        seen.add(id(cur))
        steps.append(_describe(cur))
    return " <- ".join(steps) or "(no referrer)"


def who_holds() -> list[str]:
    """What is still alive at the end of the session that holds GPU memory, and why."""
    torch = sys.modules.get("torch")
    import cudnn

    gc.collect()
    objs = gc.get_objects()
    tensors = [o for o in objs if torch is not None and isinstance(o, torch.Tensor) and o.is_cuda]
    graphs = [o for o in objs if isinstance(o, cudnn.pygraph)]
    frames = [o for o in objs if isinstance(o, types.FrameType) and "tests" in o.f_code.co_filename]
    errors = [o for o in objs if isinstance(o, BaseException)]
    exclude = {id(objs), id(tensors), id(graphs), id(frames), id(errors), id(sys._getframe())}
    nbytes = sum(t.untyped_storage().nbytes() for t in tensors)
    lines = [f"sanitize holders: {len(tensors)} CUDA tensors alive ({nbytes} B), {len(graphs)} graphs, "
             f"{len(frames)} test frames, {len(errors)} exceptions "
             f"({dict(Counter(type(e).__name__ for e in errors).most_common(5))})"]
    kinds = Counter((tuple(t.shape), str(t.dtype).removeprefix("torch."), t.requires_grad,
                     type(t.grad_fn).__name__ if t.grad_fn is not None else "-",
                     t._base is not None, sys.getrefcount(t) - 2) for t in tensors)
    lines += [f"  tensors {k} x{n}  (shape, dtype, requires_grad, grad_fn, view, refs)"
              for k, n in kinds.most_common(8)]
    pairs = [("tensor", o) for o in tensors[:6]] + [("graph", o) for o in graphs[:2]] + \
        [("frame", o) for o in frames[:2]] + [("exception", o) for o in errors[:2]]
    exclude |= {id(pairs), *(id(p) for p in pairs)}
    for what, o in pairs:  # a loop, not a generator: a generator's frame would hold ``o`` too
        lines.append(f"  {what} {_describe(o)} held by: {_chain(o, exclude)}")
    del objs, pairs
    return lines


KEEP_FRAMES = ("_pytest", "pluggy", "sanitize_support")  # frames of what is still running the session


def clear_finished_frames() -> int:
    """Drop what frame objects still hold after their function returned.

    compute-sanitizer records the Python stack of every allocation, and the frame objects it
    keeps hold their locals (tensors, graphs) and their function, whose closure cells hold what
    the test's nested functions captured, to the end of the process, where all of it would be
    counted as leaked though the program dropped it long before. So the locals of every frame
    outside pytest's own machinery are cleared (frames still running raise on ``clear()`` and
    are left alone), and so are the closure cells of functions defined in the test files."""
    cleared = 0
    for f in [o for o in gc.get_objects() if isinstance(o, types.FrameType)]:
        if any(k in f.f_code.co_filename for k in KEEP_FRAMES):
            continue
        try:
            f.clear()
            cleared += 1
        except RuntimeError:  # still executing
            pass
    tests = os.sep + "tests" + os.sep
    for fn in [o for o in gc.get_objects() if isinstance(o, types.FunctionType)]:
        if tests in fn.__code__.co_filename:
            for cell in fn.__closure__ or ():
                try:
                    del cell.cell_contents
                except ValueError:  # already empty
                    pass
    return cleared


def release_everything() -> str:
    """Free what this process still holds on the GPU; a line saying what was found."""
    frames = clear_finished_frames()
    gc.collect()
    import cudnn
    from cudnn.backend.descriptor import live_count
    from cudnn.backend.handle import destroy_all_handles

    cudnn.plan_cache.clear(disk=False)
    gc.collect()
    cudnn.release_pending()  # what the collections freed (finalizers only queue their releases)
    handles = destroy_all_handles()
    cudnn.release_pending()
    torch = sys.modules.get("torch")
    held = "no torch"
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        if hasattr(torch._C, "_host_emptyCache"):  # pinned host blocks kept by torch's host cache
            torch._C._host_emptyCache()
        alive = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.is_cuda]
        held = f"{len(alive)} CUDA tensors still referenced"
        del alive
    line = (f"sanitize cleanup: {frames} finished frames cleared, {handles} cuDNN handles destroyed, "
            f"{live_count()} backend descriptors and {held}")
    return line


def reset_context() -> tuple[bool, str]:
    """Destroy this process's CUDA context now (the CUDA runtime's ``cudaDeviceReset``, through
    the libcudart torch loaded; the driver's primary-context reset without torch): the moment
    compute-sanitizer checks for leaks. Whether it worked, and a word on it. Allocations the
    reset makes for itself show in the log with this function in their backtrace; the report
    lists them apart."""
    import ctypes

    with open("/proc/self/maps") as maps:
        cudart = sorted({ln.split()[-1] for ln in maps if "libcudart.so" in ln})
    if cudart:
        status = ctypes.CDLL(cudart[0]).cudaDeviceReset()
        return status == 0, f"cudaDeviceReset {status}"
    from cudnn._lib import cuda

    drv = cuda.driver()
    err, dev = drv.cuCtxGetDevice()
    err = drv.cuDevicePrimaryCtxReset(dev)[0] if int(err) == 0 else err
    return int(err) == 0, f"primary context reset {getattr(err, 'name', err)}"


def pytest_unconfigure(config: Any) -> None:
    """Release everything, reset the context (the leak check), and leave with ``os._exit`` so
    that nothing touches the device after the reset. A failed release is reported and the reset
    still happens, so whatever was not released counts as leaked; a failed reset leaves the
    process to end normally.

    Letting the process end normally instead (CUDNN_PY_SANITIZE_RESET=0) leaves the context's
    destruction to the runtime's teardown at exit, after torch's and the libraries' own static
    destructors; under compute-sanitizer with torch loaded that teardown ends in a signal (SIGBUS
    or SIGSEGV, depending on the tests that ran) and the leak check then misses what the
    libraries freed or lost on the way."""
    try:
        line = release_everything()
        if os.environ.get("CUDNN_PY_SANITIZE_HOLDERS"):
            line = "\n".join([line, *who_holds()])
    except Exception as exc:  # noqa: BLE001 - report it; the leak check still runs
        line = f"sanitize cleanup failed: {type(exc).__name__}: {exc}"
    reset = False
    if os.environ.get("CUDNN_PY_SANITIZE_RESET", "1") != "0":
        try:
            reset, said = reset_context()
        except Exception as exc:  # noqa: BLE001 - then the runtime's teardown does it
            said = f"context reset failed: {type(exc).__name__}: {exc}"
        line += f"\nsanitize reset: {said}"
    print(line, flush=True)
    if reset:
        sys.stderr.flush()
        os._exit(_status[0])


# -- 2. the log reader ------------------------------------------------------------------------

DRIVER = re.compile(r"libcuda\.so|libcudart|cydriver|cyruntime|driver\.cpython|runtime\.cpython|"
                    r"cuMemAlloc|cudaMalloc")
FRAME = re.compile(r"Host Frame:\s*(.*)")
LEAK = re.compile(r"Leaked ([0-9,]+) bytes")


TORCH_BLAS = "torch's cuBLAS handles"  # torch keeps them to the end of the process by design: not counted
RESET = "the context reset itself"  # made during reset_context, after everything was released: not counted
NOT_COUNTED = (TORCH_BLAS, RESET)


def owner(frames: list[str]) -> str:
    """Who made a leaked allocation: judged on the whole host backtrace."""
    text = "\n".join(frames)
    if re.search(r"\breset_context in sanitize_support\.py", text):
        return RESET
    if re.search(r"cublas(Lt)?Create", text) and re.search(r"libtorch", text):
        return TORCH_BLAS
    if re.search(r"libtorch|libc10", text):
        return "torch"
    if re.search(r"libcudnn", text):
        return "cuDNN called through cudnn-py (ctypes)" if re.search(r"_ctypes|libffi", text) else "cuDNN"
    if re.search(r"cuda/bindings|cuda\.bindings|cyruntime|cydriver", text):
        return "cuda-bindings called from Python"
    return "other"


def leaks(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(bytes, host frames) of every leak record printed in the log."""
    out: list[tuple[int, list[str]]] = []
    current: tuple[int, list[str]] | None = None
    for line in lines:
        m = LEAK.search(line)
        if m:
            current = (int(m.group(1).replace(",", "")), [])
            out.append(current)
            continue
        f = FRAME.search(line)
        if f and current is not None:
            current[1].append(f.group(1).strip())
        elif current is not None and not line.strip("= \n"):
            current = None
    return out


def stack_key(frames: list[str], depth: int = 6) -> str:
    kept = [re.sub(r"\[0x[0-9a-f]+\]\s*", "", f) for f in frames if not DRIVER.search(f)]
    return " <- ".join(kept[:depth]) or "(only driver frames)"


KERNEL = re.compile(r"access at (?:0x[0-9a-f]+ in )?(?:\S+:\d+:)?([A-Za-z_][\w:<>,]*?)(?:\+0x[0-9a-f]+|\(|\s|$)")


def race_kernels(lines: list[str]) -> Counter[str]:
    """Kernels named by racecheck's hazard reports, with the number of reports naming each."""
    names: Counter[str] = Counter()
    for i, line in enumerate(lines):
        if "Race reported" not in line and "Hazard" not in line:
            continue
        found = {m.group(1) for ln in lines[i:i + 2] for m in KERNEL.finditer(ln)}
        for name in found:
            names[name[:160]] += 1
    return names


def total(pattern: str, text: str, group: int = 1) -> int:
    return sum(int(m.group(group).replace(",", "")) for m in re.finditer(pattern, text))


def report(tool: str, log: Path, status: str) -> None:
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = text.splitlines()
    errors = total(r"ERROR SUMMARY: ([0-9,]+) error", text)
    hazards = total(r"RACECHECK SUMMARY: ([0-9,]+) hazards? displayed \(([0-9,]+) errors?", text, 2)
    benign = sum("CUDA API call to cuGetProcAddress" in ln for ln in lines)
    api = sum(bool(re.search(r"Program hit .* on CUDA API call to", ln)) and "cuGetProcAddress" not in ln
              for ln in lines)
    leaked_allocs = total(r"LEAK SUMMARY: [0-9,]+ bytes leaked in ([0-9,]+) allocations", text)
    leaked_bytes = total(r"LEAK SUMMARY: ([0-9,]+) bytes leaked", text)
    records = leaks(lines)
    by_owner: Counter[str] = Counter(owner(f) for _, f in records)
    api_text = f"API errors {api}, benign cuGetProcAddress lookups filtered {benign}; log {log}"
    if tool == "racecheck":
        warnings = total(r"RACECHECK SUMMARY: .*?([0-9,]+) warnings?\)", text)
        kernels = race_kernels(lines)
        owners = Counter("cuDNN" if k.startswith("cudnn") or "cudnn_generated" in k else
                         "torch" if "at::" in k or k.startswith("_ZN2at") else "other" for k in kernels)
        print(f"reliability: sanitizer racecheck: exit {status}, hazards: {hazards} errors, {warnings} warnings, "
              f"in {len(kernels)} kernels ({dict(owners)}; cudnn-py launches no kernel of its own); {api_text}")
        for name, n in kernels.most_common(30):
            print(f"  race hazard in kernel ({n} reports): {name}")
        return
    memory = errors - benign - api - leaked_allocs
    counted = sum(n for k, n in by_owner.items() if k not in NOT_COUNTED)
    skipped = " or ".join(f"{by_owner.get(k, 0)} of {k}" for k in NOT_COUNTED)
    print(f"reliability: sanitizer {tool}: exit {status}, memory errors {memory}, leaks {counted} "
          f"(not counting {skipped}; all: {leaked_allocs} allocations, "
          f"{leaked_bytes} B; by owner: {', '.join(f'{k} {v}' for k, v in by_owner.most_common()) or 'none'}), "
          f"{api_text}")
    stacks: dict[str, list[int]] = defaultdict(list)
    for size, frames in records:
        stacks[f"[{owner(frames)}] {stack_key(frames)}"].append(size)
    for key, sizes in sorted(stacks.items(), key=lambda kv: -sum(kv[1]))[:10]:
        print(f"  leak stack: {len(sizes)} allocations, {sum(sizes)} B: {key}")


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "report":
        sys.exit("usage: sanitize_support.py report TOOL LOG STATUS")
    report(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
