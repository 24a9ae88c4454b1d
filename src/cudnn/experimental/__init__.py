"""``cudnn.experimental``: the official home of ``scaled_dot_product_attention`` (the torch op
of `cudnn.ops`), of ``moe_grouped_matmul`` (in `moe`) and of the package `ops`
(``cudnn.experimental.ops.moe_grouped_matmul``, as the official's). Names are resolved on first
use, so importing this package imports neither torch nor the MoE module."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_EXPORTS = {"scaled_dot_product_attention": "..ops.attention", "moe_grouped_matmul": ".moe", "ops": ".ops"}


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if target.endswith(".moe") and importlib.util.find_spec(__name__ + ".moe") is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (cudnn.experimental.moe is absent)")
    module = importlib.import_module(target, __name__)
    value = module if name == "ops" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
