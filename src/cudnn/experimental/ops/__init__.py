"""``cudnn.experimental.ops``: the official package's home of its torch-facing ops,
``moe_grouped_matmul`` (`cudnn.experimental.moe`), ``rms_norm`` and ``layer_norm``; any other op
name is `cudnn.ops`'s. Names resolve on first use, so importing this package imports no torch;
without PyTorch, reading an op raises ImportError, as in the official package."""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"moe_grouped_matmul": "cudnn.experimental.moe"}  # the rest: cudnn.ops
__all__ = ["layer_norm", "moe_grouped_matmul", "rms_norm"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(_HOMES.get(name, "cudnn.ops"))
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ImportError(f"{__name__}.{name} needs PyTorch, which is not installed") from exc
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
