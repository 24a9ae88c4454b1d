"""cudnn-py: NVIDIA cuDNN's Graph API from Python, through ctypes.

``import cudnn`` needs neither a GPU nor libcudnn: the library is opened by the first call
that needs it. The names below are the documented cuDNN Python API.
"""

from __future__ import annotations

from ._lib import loader as _loader
from ._lib.enums import (
    behavior_note,
    build_plan_policy,
    convolution_mode,
    data_type,
    heur_mode,
    knob_type,
    layout_type,
    norm_forward_phase,
    norm_mode,
    numerical_note,
    padding_mode,
    pointwise_mode,
    reduction_mode,
    resample_mode,
    reshape_mode,
    rng_distribution,
    tensor_reordering,
)
from ._lib.errors import (
    CudnnBadParamError,
    CudnnError,
    CudnnExecutionError,
    CudnnInitError,
    CudnnInternalError,
    CudnnNotSupportedError,
    DescriptorClosedError,
    FeatureUnavailableError,
    LibraryNotFoundError,
    cudnnGraphNotSupportedError,
    version_string as _version_string,
)
from ._version import __version__
from .backend import Handle, create_handle, destroy_handle, get_stream, set_stream
from .graph import ExecutionInputError, GraphError, GraphStateError, pygraph
from .graph import Tensor as tensor


def backend_version() -> int:
    """The loaded libcudnn's version as MAJOR*10000 + MINOR*100 + PATCH (e.g. 91900)."""
    return _loader.report().version


def backend_version_string() -> str:
    """The loaded libcudnn's version as text (e.g. '9.19.0')."""
    return _version_string(backend_version())


def library_info() -> _loader.LoadReport:
    """Where libcudnn was loaded from, its version, and the libraries opened beside it."""
    return _loader.report()


__all__ = [
    "CudnnBadParamError",
    "CudnnError",
    "CudnnExecutionError",
    "CudnnInitError",
    "CudnnInternalError",
    "CudnnNotSupportedError",
    "DescriptorClosedError",
    "ExecutionInputError",
    "GraphError",
    "GraphStateError",
    "FeatureUnavailableError",
    "Handle",
    "LibraryNotFoundError",
    "__version__",
    "backend_version",
    "backend_version_string",
    "behavior_note",
    "build_plan_policy",
    "convolution_mode",
    "create_handle",
    "cudnnGraphNotSupportedError",
    "data_type",
    "destroy_handle",
    "get_stream",
    "heur_mode",
    "knob_type",
    "layout_type",
    "library_info",
    "norm_forward_phase",
    "norm_mode",
    "numerical_note",
    "padding_mode",
    "pointwise_mode",
    "pygraph",
    "reduction_mode",
    "resample_mode",
    "reshape_mode",
    "rng_distribution",
    "set_stream",
    "tensor",
    "tensor_reordering",
]
