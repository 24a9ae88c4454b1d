"""``cudnn.gemm``: the official package's GEMM family, as far as cuDNN's Graph API serves it:
``moe_grouped_matmul`` (`cudnn.experimental.moe`; also ``cudnn.gemm.ops.moe_grouped_matmul``).
Its CuTe-DSL, FROST and cuTile kernels (``swiglu_mlp``, ``situ_mlp``, ``swiglu_moe``,
``MhcProjectionBackward``) are absent and say what they need (`cudnn._unavailable`). Names
resolve on first use, so importing this package imports no torch.
"""

from __future__ import annotations

from .._exports import lazy_exports

__all__ = ["moe_grouped_matmul", "ops"]  # noqa: F822 - resolved by __getattr__
__getattr__, __dir__ = lazy_exports(__name__, {"moe_grouped_matmul": ".ops"}, submodules=("ops",),
                                    otherwise="cudnn._unavailable:missing")
