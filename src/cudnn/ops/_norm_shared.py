"""What the norm ops of `cudnn.ops.norm` share: the forward phases, the input check, and
marking a graph tensor as an output laid out like a torch tensor."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .._lib.enums import norm_forward_phase
from . import _runtime as rt

if TYPE_CHECKING:
    from .._graph.model.tensor import Tensor

TRAIN, INFER = norm_forward_phase.TRAINING, norm_forward_phase.INFERENCE


def check_input(op: str, x: torch.Tensor) -> None:
    """A floating-point CUDA tensor, else an OpError naming ``op``."""
    rt.check_tensor(op, "input", x)
    rt.check_cuda(op, "input", x)


def as_output(t: Tensor, like: torch.Tensor) -> Tensor:
    """``t`` marked an output with ``like``'s data type, dims and strides."""
    return t.set_output(True).set_data_type(rt.CUDNN_DTYPE[like.dtype]).set_dim(list(like.shape)) \
        .set_stride(list(like.stride()))
