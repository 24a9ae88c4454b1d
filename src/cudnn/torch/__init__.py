"""``cudnn.torch``: PyTorch's own cuDNN attention served by cudnn-py.

``install_sdpa_overrides()`` replaces the CUDA kernels of ``aten::_scaled_dot_product_cudnn_attention``
and its backward (and torch's varlen attention ops, where the installed torch has them) with
kernels on ``cudnn::sdpa_fwd`` / ``cudnn::sdpa_bwd``, so ``F.scaled_dot_product_attention``
under ``sdpa_kernel([SDPBackend.CUDNN_ATTENTION])`` runs through cudnn-py unchanged; the
returned `SdpaOverrides` removes them (``remove()`` or its ``with`` block; dropping it keeps
them, and ``remove_sdpa_overrides()`` removes every installation). ``install()`` does it once
per process. On torch versions with the flash-attention registry, importing this package also
registers the overrides there as ``"CUDNN"``
(``torch.nn.attention.activate_flash_attention_impl("CUDNN")``).
"""

from .sdpa_provider import (
    SdpaOverrides,
    calls,
    install,
    install_sdpa_overrides,
    remove_sdpa_overrides,
    served_plan_names,
)

__all__ = ["SdpaOverrides", "calls", "install", "install_sdpa_overrides", "remove_sdpa_overrides",
           "served_plan_names"]
