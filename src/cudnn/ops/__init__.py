"""``cudnn.ops``: cuDNN graphs as registered torch ops (namespace ``torch.ops.cudnn``).

Each op has a fake kernel (shape propagation for ``torch.compile(fullgraph=True)``), a
backward made of cuDNN graphs (registered through ``torch.library.register_autograd``), and a
graph cache per device keyed on shapes, strides, dtypes and options (`_runtime.CACHE`). Work
runs on torch's current stream with workspaces from torch's caching allocator, so the ops
also run under CUDA-graph capture. Importing this package imports torch; ``import cudnn``
does not.
"""

from __future__ import annotations

from ._runtime import CACHE, OpError
from .attention import scaled_dot_product_attention
from .causal_conv1d import causal_conv1d
from .conv import conv2d_bias_act
from .norm import batch_norm, layer_norm, rms_norm

__all__ = ["CACHE", "OpError", "batch_norm", "causal_conv1d", "conv2d_bias_act", "layer_norm", "rms_norm",
           "scaled_dot_product_attention"]
