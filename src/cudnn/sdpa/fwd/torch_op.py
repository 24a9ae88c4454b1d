"""``cudnn.sdpa.fwd.torch_op``: importing it registers ``torch.ops.cudnn.sdpa_fwd`` and
``sdpa_bwd`` (with fake kernels and autograd); `sdpa` is the Python entry point
(``cudnn.sdpa_torch``). The ops live in `cudnn.ops.sdpa_official`."""

from ...ops.sdpa_official import sdpa, thd_lse_to_padded

__all__ = ["sdpa", "thd_lse_to_padded"]
