"""``cudnn.experimental.ops``: the official package's home of its torch-facing ops,
``moe_grouped_matmul`` (`cudnn.experimental.moe`), and ``rms_norm`` / ``layer_norm`` with the
official signatures (`cudnn.ops.norm`). Names resolve on first use, so importing this package
imports no torch; without PyTorch, reading an op raises ImportError, as in the official package.
The official's Blackwell-only ``swiglu_mlp`` is absent and says what it needs (`cudnn._unavailable`).
"""

from __future__ import annotations

from ..._exports import lazy_exports

__all__ = ["layer_norm", "moe_grouped_matmul", "rms_norm"]  # noqa: F822 - resolved by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, {"moe_grouped_matmul": "cudnn.experimental.moe",
                                               "rms_norm": "cudnn.ops.norm", "layer_norm": "cudnn.ops.norm"},
                                    otherwise="cudnn._unavailable:missing", torch_error=ImportError)
