"""``cudnn.experimental.ops``: the official package's home of its torch-facing ops,
``moe_grouped_matmul`` (`cudnn.experimental.moe`), and ``rms_norm`` / ``layer_norm`` with the
official signatures (`cudnn.ops.norm`). Names resolve on first use, so importing this package
imports no torch; without PyTorch, reading an op raises ImportError, as in the official package.
The official's Blackwell-only ``swiglu_mlp`` is absent and says what it needs (`cudnn._unavailable`).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"moe_grouped_matmul": "cudnn.experimental.moe", "rms_norm": "cudnn.ops.norm",
          "layer_norm": "cudnn.ops.norm"}
__all__ = ["layer_norm", "moe_grouped_matmul", "rms_norm"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        from ..._unavailable import missing

        raise missing(__name__, name)
    try:
        module = importlib.import_module(home)
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ImportError(f"{__name__}.{name} needs PyTorch, which is not installed") from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
