"""What the examples need, checked before they start, so that a missing GPU, PyTorch or cuDNN
is a one-line message and exit status 1 rather than a traceback; and their command lines,
parsed before any of that, so that ``--help`` and a mistyped option answer on any machine."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A command line described by the first paragraph of the script's docstring ``doc``."""
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive (at least 1)")
    return value


def need_torch(script: str) -> Any:
    """Return the torch module; exit with a message naming it if PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        sys.exit(f"{os.path.basename(script)} needs PyTorch with CUDA (pip install torch) and an NVIDIA GPU; "
                 "PyTorch is not installed")
    return torch


def need_gpu_and_torch(script: str) -> Any:
    """Return the torch module if PyTorch with CUDA, a GPU and cuDNN 9 are all here; else exit
    with a message naming what is missing."""
    name = os.path.basename(script)
    try:
        import torch
    except ImportError:
        sys.exit(f"{name} needs PyTorch with CUDA (pip install torch) for its buffers and its reference; "
                 "PyTorch is not installed")
    if torch.version.cuda is None:
        sys.exit(f"{name} needs PyTorch with CUDA and an NVIDIA GPU; the PyTorch here ({torch.__version__}) "
                 "is a CPU-only build")
    if not torch.cuda.is_available():
        sys.exit(f"{name} needs an NVIDIA GPU with a working driver; PyTorch finds no usable CUDA device here "
                 "(python -m cudnn info says why)")
    import cudnn

    try:
        cudnn.backend_version()
    except cudnn.LibraryNotFoundError as exc:
        sys.exit(f"{name} needs cuDNN 9: {exc}")
    return torch


def check(label: str, got: Any, expected: Any, atol: float, rtol: float) -> bool:
    """Print how far ``got`` is from ``expected`` (both torch tensors) and whether it is within
    atol + rtol * |expected|."""
    got64, exp64 = got.double(), expected.double()
    err = (got64 - exp64).abs()
    ok = bool((err <= atol + rtol * exp64.abs()).all())
    print(f"{label}: max |cuDNN - PyTorch| = {err.max().item():.2e} (atol {atol:g}, rtol {rtol:g}): "
          f"{'OK' if ok else 'MISMATCH'}")
    return ok
