"""``cudnn.ops.layer_norm``, ``rms_norm`` and ``batch_norm``: torch ops over cuDNN's norm graphs;
``cudnn.ops.norm`` is also the official package's ``cudnn.ops.norm`` (``rms_norm`` and ``layer_norm``
with its signatures, the torch ops ``cudnn::rmsnorm``, ``rmsnorm_bwd``, ``layernorm`` and
``layernorm_bwd`` with its schemas, registered when this module is imported).

Training forwards write the statistics cuDNN's backward graphs read (MEAN and INV_VARIANCE,
float32), so the backward is one cuDNN graph too. Layer and RMS norm view the input as
[rows, features] (features: the normalized trailing axes); batch norm runs NHWC (cuDNN's
batch-norm engines want it) and returns the input's layout. Eval-mode batch norm is one
pointwise graph reading the running statistics as they are; its backward is another for dX
(dY * inv_std * weight) and, where dWeight or dBias is wanted, the backward graph's sums at
the running statistics.
"""

from . import _norm_official  # noqa: F401  (imported for its registration of the official package's ops)
from ._norm_batch import batch_norm
from ._norm_layer import layer_norm, rms_norm

__all__ = ["batch_norm", "layer_norm", "rms_norm"]
