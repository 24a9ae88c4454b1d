"""``cudnn.sdpa.fwd.torch_op``: importing it registers ``torch.ops.cudnn.sdpa_fwd`` and
``sdpa_bwd`` (with fake kernels and autograd); `sdpa` is the Python entry point
(``cudnn.sdpa_torch``). The ops live in `cudnn.ops.sdpa_official`. Without PyTorch the module
still imports (``cudnn.sdpa_torch`` stays a name of ``cudnn``), and `sdpa` says what is missing."""

from __future__ import annotations

from typing import Any

__all__ = ["sdpa"]

try:
    import torch  # noqa: F401
except ModuleNotFoundError as _missing:
    if _missing.name != "torch":
        raise

    def sdpa(*args: Any, **kwargs: Any) -> Any:
        """Needs PyTorch, which is not installed."""
        raise ModuleNotFoundError("cudnn.sdpa_torch needs PyTorch, which is not installed", name="torch")
else:
    from ...ops.sdpa_official import sdpa, thd_lse_to_padded

    __all__ += ["thd_lse_to_padded"]
