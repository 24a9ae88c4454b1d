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
from .backend.engine import KnobInfo as knob
from .backend.kernel_cache import create_kernel_cache
from .graph import ExecutionInputError, GraphError, GraphStateError, SerializationError, plan_cache, pygraph
from .graph import Tensor as tensor
from .helpers import graph_cache, jit
from .helpers import make_callable as _make_callable
from .wrapper import Graph

# `cudnn.graph` is the builder subpackage and the documented context manager at once: the
# module object is made callable (helpers.py says why), so `import cudnn.graph.tensor` still works.
_make_callable(graph)  # noqa: F821 - bound by the `from .graph import` above


def backend_version() -> int:
    """The loaded libcudnn's version as MAJOR*10000 + MINOR*100 + PATCH (e.g. 91900)."""
    return _loader.report().version


def backend_version_string() -> str:
    """The loaded libcudnn's version as text (e.g. '9.19.0')."""
    return _version_string(backend_version())


def get_last_error_string() -> str:
    """cuDNN's message for the most recent failure on this thread."""
    _loader.lib()
    from ._lib.errors import last_error_string

    return last_error_string()


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
    "SerializationError",
    "FeatureUnavailableError",
    "Graph",
    "Handle",
    "LibraryNotFoundError",
    "__version__",
    "backend_version",
    "backend_version_string",
    "behavior_note",
    "build_plan_policy",
    "convolution_mode",
    "create_handle",
    "create_kernel_cache",
    "cudnnGraphNotSupportedError",
    "data_type",
    "destroy_handle",
    "get_last_error_string",
    "get_stream",
    "graph",
    "graph_cache",
    "heur_mode",
    "jit",
    "knob",
    "knob_type",
    "layout_type",
    "library_info",
    "norm_forward_phase",
    "norm_mode",
    "numerical_note",
    "padding_mode",
    "plan_cache",
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
