"""Find and open libcudnn 9 and the libraries its engines open later; lazily, once.

Search order: the file or folder named by $CUDNN_PY_LIBRARY (no fallback when it is set:
the user asked for that one), then the copy this process already has open (a framework such
as PyTorch loaded it: a second copy would clash with it, and finding it costs no search),
then cuda-pathfinder (pip wheels, conda, the system loader, CUDA_HOME), then the system
loader directly. cuDNN opens its sub-libraries from its own folder, but it opens NVRTC
(runtime-compiled engines) and cuBLASLt (some matmul engines) by soname; from pip wheels
those are not on the loader path, so they are opened here first: a later dlopen by soname
then finds the copy already in the process. Of those, the copy already open comes first, then
the one in a folder of $LD_LIBRARY_PATH (the copy cuDNN's own dlopen would find), then
cuda-pathfinder's.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .record import Record
from .status import (
    LibraryNotFoundError,
    install_hint,
    install_last_error_reader,
    make_last_error_reader,
    version_string,
)

ENV_VAR = "CUDNN_PY_LIBRARY"
MIN_VERSION = 90000
_SONAME = "cudnn64_9.dll" if sys.platform == "win32" else "libcudnn.so.9"
# Libraries cuDNN's engines dlopen by soname; missing ones only disable those engines.
_DEPENDENCIES = ("nvrtc", "cublasLt", "cublas")


class LoadReport(Record):
    """Where libcudnn came from and what was opened beside it (`cudnn.library_info()`)."""

    __slots__ = ("path", "found_via", "version", "cudart_version", "dependencies")

    def __init__(self, path: str, found_via: str, version: int, cudart_version: int,
                 dependencies: dict[str, str] | None = None) -> None:
        self.path, self.found_via, self.version, self.cudart_version = path, found_via, version, cudart_version
        self.dependencies: dict[str, str] = {} if dependencies is None else dependencies  # name -> path or error

    def __str__(self) -> str:
        lines = [
            f"libcudnn {version_string(self.version)} "
            f"(CUDA runtime {self.cudart_version // 1000}.{self.cudart_version % 1000 // 10})",
            f"  path: {self.path} (via {self.found_via})",
        ]
        lines += [f"  {name}: {where}" for name, where in self.dependencies.items()]
        return "\n".join(lines)


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_report: LoadReport | None = None
_load_hooks: list[Callable[[], None]] = []  # run once, right after libcudnn is opened


def on_load(fn: Callable[[], None]) -> None:
    """Run ``fn()`` once libcudnn is open: now if it already is, else right after it is loaded
    (``cudnn.set_log_level`` installs cuDNN's log callback this way). ``fn`` must not raise."""
    with _lock:
        if _lib is None:
            _load_hooks.append(fn)
            return
    fn()


def lib() -> ctypes.CDLL:
    """The opened libcudnn; the first call loads it (raises LibraryNotFoundError)."""
    if _lib is None:
        _load()
    assert _lib is not None
    return _lib


def report() -> LoadReport:
    lib()
    assert _report is not None
    return _report


def version() -> int:
    """The loaded libcudnn's version as MAJOR*10000 + MINOR*100 + PATCH (loading it first): what
    ``cudnn.backend_version()`` returns and version gates compare with."""
    return report().version


def is_loaded() -> bool:
    return _lib is not None


def _load() -> None:
    global _lib, _report
    with _lock:
        if _lib is not None:
            return
        handle, path, via = _open_cudnn()
        handle.cudnnGetVersion.restype = ctypes.c_size_t
        handle.cudnnGetVersion.argtypes = []
        handle.cudnnGetCudartVersion.restype = ctypes.c_size_t
        handle.cudnnGetCudartVersion.argtypes = []
        version = int(handle.cudnnGetVersion())
        if version < MIN_VERSION:
            raise LibraryNotFoundError(
                f"{path} is cuDNN {version_string(version)}; cudnn-py needs cuDNN 9. "
                f"Install nvidia-cudnn-cu12 or nvidia-cudnn-cu13, or point ${ENV_VAR} at a cuDNN 9 library."
            )
        reader = handle.cudnnGetLastErrorString
        reader.restype, reader.argtypes = None, [ctypes.c_char_p, ctypes.c_size_t]
        install_last_error_reader(make_last_error_reader(reader))
        # Status errors come only from calls into the library opened here, so the check saying
        # why no GPU is usable is registered now (importing cuda does it), not at `import cudnn`:
        # an import down, inside the function to keep `import cudnn` cheap.
        from . import cuda

        install_hint(1000, _status_hint)
        cudart = int(handle.cudnnGetCudartVersion())
        cuda.note_library_runtime(cudart)
        _report = LoadReport(path, via, version, cudart, _open_dependencies(cudart // 1000))
        _lib = handle
        hooks, _load_hooks[:] = list(_load_hooks), []
        for hook in hooks:
            hook()


def _status_hint(status: int) -> str:
    """The hint of a 1xxx status raised while a GPU is usable (a missing GPU is handled before)."""
    if status == 1008 and _report is not None:  # CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED
        deps = ", ".join(f"{k}: {v}" for k, v in _report.dependencies.items())
        return f"a cuDNN sub-library or one it needs failed to load ({deps})"
    return ""


def _open_cudnn() -> tuple[ctypes.CDLL, str, str]:
    tried: list[str] = []
    override = os.environ.get(ENV_VAR)
    if override:
        target = Path(override)
        path = target / _SONAME if target.is_dir() else target
        try:
            return _dlopen(str(path)), str(path), f"${ENV_VAR}"
        except OSError as exc:
            tried.append(f"${ENV_VAR}={override}: {exc}")
            raise LibraryNotFoundError(_not_found(tried)) from exc
    loaded_here = _already_open(_SONAME)
    if loaded_here is not None:
        return loaded_here[0], loaded_here[1], "already loaded in this process"
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        tried.append("cuda-pathfinder: not installed (pip install cuda-pathfinder)")
    else:
        try:
            loaded = load_nvidia_dynamic_lib("cudnn")
            return _dlopen(loaded.abs_path), loaded.abs_path, f"cuda-pathfinder, {loaded.found_via}"
        except Exception as exc:  # noqa: BLE001 - pathfinder's errors (several types) list the folders searched
            tried.append(_pathfinder_failure(exc))
    try:
        handle = _dlopen(_SONAME)
        return handle, _SONAME, "system loader"
    except OSError as exc:
        tried.append(f"system loader ({_SONAME}): {exc}")
    raise LibraryNotFoundError(_not_found(tried))


def _not_found(tried: list[str]) -> str:
    """The error's text: that cuDNN is missing and how to get it first, then every place tried
    (where cuda-pathfinder stopped at a library cuDNN needs, that one is missing too)."""
    lines = "\n".join(f"  - {t}" for t in tried)
    return (
        "cuDNN 9 (libcudnn) was not found. Install it with `pip install \"cudnn-py[cu13]\"` (or [cu12]; "
        "in a checkout: `pip install -e \".[cu13]\"`), or set "
        f"${ENV_VAR} to the library file or its folder.\n"
        f"Tried:\n{lines}"
    )


def _pathfinder_failure(exc: Exception) -> str:
    """One line of the tried list for cuda-pathfinder's failure. It opens the libraries libcudnn
    needs (cuBLASLt) before libcudnn itself, so its error may name only one of those."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if "cudnn" in text.lower():
        return f"cuda-pathfinder: {text}"
    return f"cuda-pathfinder: a library libcudnn needs is missing too: {text}"


def _dlopen(path: str) -> ctypes.CDLL:
    mode = getattr(os, "RTLD_NOW", 0) | getattr(os, "RTLD_GLOBAL", 0)
    return ctypes.CDLL(path, mode=mode)


def _already_open(soname: str) -> tuple[ctypes.CDLL, str] | None:
    """``soname`` when this process already has it open, with its path; else None (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        handle = ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return None
    return handle, _mapped_path(soname) or soname


def _mapped_path(soname: str) -> str | None:
    """Where the mapped file named ``soname`` lives, from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.startswith("/") and os.path.basename(path).startswith(soname):
                    return path
    except OSError:
        pass
    return None


def _on_library_path(soname: str) -> str | None:
    """The file ``soname`` in the first folder of $LD_LIBRARY_PATH holding it, else None (Linux
    only). cuDNN opens NVRTC and cuBLAS by soname, and the system loader searches those folders
    before libcudnn's own RUNPATH (the wheels' folders beside it) and cuda-pathfinder's order:
    opening this copy keeps the one cuDNN would have opened by itself, as under the official
    frontend, which opens none. A folder written with a ``$ORIGIN``-style token, which only the
    system loader expands, is left to cuda-pathfinder's search."""
    if not sys.platform.startswith("linux"):
        return None
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        path = os.path.join(folder, soname)
        if folder and "$" not in folder and os.path.isfile(path):
            return path
    return None


def _open_dependencies(cuda_major: int) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in _DEPENDENCIES:
        soname = f"lib{name}.so.{cuda_major}"
        here = _already_open(soname)  # the copy a framework already opened is the one cuDNN will find
        if here is not None:
            found[name] = f"{here[1]} (already loaded in this process)"
            continue
        path = _on_library_path(soname)  # else the one cuDNN's own dlopen by soname would find first
        if path is None:
            continue
        try:
            _dlopen(path)
        except OSError:
            continue  # cuda-pathfinder's search follows
        found[name] = f"{path} (LD_LIBRARY_PATH)"
    missing = [name for name in _DEPENDENCIES if name not in found]
    if missing:
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib
        except ImportError:
            found |= dict.fromkeys(missing, "not opened (cuda-pathfinder missing)")
            missing = []
        for name in missing:
            try:
                found[name] = load_nvidia_dynamic_lib(name).abs_path
            except Exception as exc:  # noqa: BLE001 - reported per library; libcudnn may load without it
                found[name] = f"not found ({str(exc).splitlines()[0]})"
    return {name: found[name] for name in _DEPENDENCIES}
