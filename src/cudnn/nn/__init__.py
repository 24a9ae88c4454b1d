"""``cudnn.nn``: torch modules over `cudnn.ops`, drop-ins for their torch counterparts (same
parameters, same state-dict keys), and `convert`, which swaps eligible modules of a model.

Importing this package imports torch; ``import cudnn`` does not.
"""

from __future__ import annotations

from .convert import convert
from .modules import Conv2dBiasAct, LayerNorm, MultiheadAttention, RMSNorm

__all__ = ["Conv2dBiasAct", "LayerNorm", "MultiheadAttention", "RMSNorm", "convert"]
