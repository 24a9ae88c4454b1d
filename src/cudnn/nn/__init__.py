"""``cudnn.nn``: torch modules over `cudnn.ops`, drop-ins for their torch counterparts (same
parameters, same state-dict keys), `convert`, which swaps eligible modules of a model, and
`sdpa_kernel`, a context that runs torch's SDPA calls through cuDNN.

Importing this package imports torch; ``import cudnn`` does not.
"""

from __future__ import annotations

from .module_swap import convert
from .modules import Conv2dBiasAct, LayerNorm, MultiheadAttention, RMSNorm, RoutedMultiheadAttention
from .sdpa import sdpa_kernel

__all__ = ["Conv2dBiasAct", "LayerNorm", "MultiheadAttention", "RMSNorm", "RoutedMultiheadAttention", "convert",
           "sdpa_kernel"]
