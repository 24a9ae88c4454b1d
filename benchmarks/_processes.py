"""Process setup shared by the benchmarks that run the official frontend beside cudnn-py: the
environment of a child that imports the official (it is also named ``cudnn``), and a driver JIT
cache of each process's own. Imports nothing that touches CUDA, so it can run before torch."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

OWN_JIT_CACHE = "BENCH_OWN_JIT_CACHE"  # set in children whose parent chose their JIT caches


def official_env(other: str | None) -> dict[str, str]:
    """The environment of a child process whose ``cudnn`` is the official frontend (``other``:
    the directory it is installed in; else found on the default path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if other:
        env["PYTHONPATH"] = os.path.abspath(other)
    return env


CHILD_CWD = tempfile.gettempdir()  # where every child of either package runs: the same directory for both


def enter_child_cwd() -> None:
    """Move this process to `CHILD_CWD`, where its children run, and make every ``PYTHONPATH``
    entry absolute first, so that the children (`ours_env`) import the cudnn-py this process
    imported. NVRTC looks up each header a runtime-compiled kernel includes in the working
    directory first, so both packages' builds run in one directory."""
    if os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p)
    os.chdir(CHILD_CWD)


def ours_env(**overrides: str) -> dict[str, str]:
    """The environment of a child process that imports cudnn-py as this one does (run after
    `enter_child_cwd`), with ``overrides``."""
    return dict(os.environ) | overrides


def own_jit_cache(prefix: str) -> None:
    """A new, empty driver JIT cache (``CUDA_CACHE_PATH``) for this process, unless the caller
    chose one; its children then make their own too. Runtime-compiled engines hand their
    kernels to the driver, which keeps the machine code in that cache for every later process:
    without a cache of its own, a process's figures depend on which package compiled first.
    Must run before CUDA initialises."""
    if "CUDA_CACHE_PATH" in os.environ and os.environ.get(OWN_JIT_CACHE) != "1":
        return
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    os.environ["CUDA_CACHE_PATH"] = path
    os.environ[OWN_JIT_CACHE] = "1"
