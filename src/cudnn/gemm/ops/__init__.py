"""``cudnn.gemm.ops``: the official package's GEMM torch ops that cuDNN's Graph API serves:
``moe_grouped_matmul`` (`cudnn.experimental.moe`, the torch op ``cudnn::moe_grouped_matmul``).
Resolved on first use, so importing this package imports no torch; without PyTorch, reading the
op raises ImportError. The official's Blackwell-only ``swiglu_mlp``, ``situ_mlp`` and
``swiglu_moe`` are absent and say what they need (`cudnn._unavailable`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["moe_grouped_matmul"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    if name != "moe_grouped_matmul":
        from ..._unavailable import missing

        raise missing(__name__, name)
    try:
        module = importlib.import_module("cudnn.experimental.moe")
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ImportError(f"{__name__}.{name} needs PyTorch, which is not installed") from exc
    value = module.moe_grouped_matmul
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
