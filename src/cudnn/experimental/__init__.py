"""``cudnn.experimental``: the official home of ``scaled_dot_product_attention`` (the torch op
of `cudnn.ops`), of ``moe_grouped_matmul`` (in `moe`) and of the package `ops`
(``cudnn.experimental.ops.moe_grouped_matmul``, as the official's). Names are resolved on first
use, so importing this package imports neither torch nor the MoE module."""

from __future__ import annotations

from .._exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {"scaled_dot_product_attention": "..ops.attention",
                                               "moe_grouped_matmul": ".moe"}, submodules=("ops",))
