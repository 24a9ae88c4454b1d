"""``cudnn.gemm.ops``: the official package's GEMM torch ops that cuDNN's Graph API serves:
``moe_grouped_matmul`` (`cudnn.experimental.moe`, the torch op ``cudnn::moe_grouped_matmul``).
Resolved on first use, so importing this package imports no torch; without PyTorch, reading the
op raises ImportError. The official's Blackwell-only ``swiglu_mlp``, ``situ_mlp`` and
``swiglu_moe`` are absent and say what they need (`cudnn._unavailable`).
"""

from __future__ import annotations

from ..._exports import lazy_exports

__all__ = ["moe_grouped_matmul"]  # noqa: F822 - resolved by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, {"moe_grouped_matmul": "cudnn.experimental.moe"},
                                    otherwise="cudnn._unavailable:missing", torch_error=ImportError)
