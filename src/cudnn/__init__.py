"""cudnn-py: NVIDIA cuDNN's Graph API from Python, through ctypes.

``import cudnn`` needs neither a GPU nor libcudnn, and imports almost nothing: every public
name below is looked up in the submodule that defines it the first time it is read (PEP 562
``__getattr__``), so a program pays only for what it uses (``cudnn.data_type`` builds one
enum, ``cudnn.pygraph`` imports the graph builder). The library is opened by the first call
that needs it. The names are the documented cuDNN Python API; ``dir(cudnn)`` lists them all.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._lib.loader import LoadReport
    from .backend.handle import Handle

# Public name -> the module that defines it, imported on first use ("module:attribute" where
# the module's name for it differs). A new export is one line here.
_EXPORTS: dict[str, str] = {
    # enums (generated; each is built the first time it is read)
    "behavior_note": "._lib.enums",
    "build_plan_policy": "._lib.enums",
    "convolution_mode": "._lib.enums",
    "data_type": "._lib.enums",
    "heur_mode": "._lib.enums",
    "knob_type": "._lib.enums",
    "layout_type": "._lib.enums",
    "norm_forward_phase": "._lib.enums",
    "norm_mode": "._lib.enums",
    "numerical_note": "._lib.enums",
    "padding_mode": "._lib.enums",
    "pointwise_mode": "._lib.enums",
    "reduction_mode": "._lib.enums",
    "resample_mode": "._lib.enums",
    "reshape_mode": "._lib.enums",
    "rng_distribution": "._lib.enums",
    "tensor_reordering": "._lib.enums",
    "diagonal_alignment": ".graph.sdpa_enums",  # frontend-only enums of the attention API
    "attention_implementation": ".graph.sdpa_enums",
    "scalar_type": ".graph.api_enums",  # frontend enums without a header enum of their own
    "moe_grouped_matmul_mode": ".graph.api_enums",
    # errors
    "CudnnBadParamError": "._lib.errors",
    "CudnnError": "._lib.errors",
    "CudnnExecutionError": "._lib.errors",
    "CudnnInitError": "._lib.errors",
    "CudnnInternalError": "._lib.errors",
    "CudnnNotSupportedError": "._lib.errors",
    "DescriptorClosedError": "._lib.errors",
    "FeatureUnavailableError": "._lib.errors",
    "LibraryNotFoundError": "._lib.errors",
    "cudnnGraphNotSupportedError": "._lib.errors",
    "CudaUnavailableError": "._lib.errors",
    "CudaError": "._lib.cuda",
    "ExecutionInputError": ".graph",
    "ExecutionInputWarning": ".graph",
    "GraphError": ".graph",
    "GraphNotImplementedError": ".graph",
    "GraphNotSupportedError": ".graph",
    "GraphStateError": ".graph",
    "SerializationError": ".graph",
    "SerializationNotSupportedError": ".graph",
    # handles, streams, kernel caches, knobs
    "Handle": ".backend",
    "destroy_handle": ".backend",
    "get_stream": ".backend",
    "set_stream": ".interop.streams",
    "create_kernel_cache": ".backend.kernel_cache",
    "create_device_properties": ".backend.deviceprop",
    "knob": ".backend.engine:KnobInfo",
    # graphs; `graph`, the builder subpackage that is also a context manager, is in _SUBPACKAGES
    "pygraph": ".graph",
    "set_execute_checks": ".graph.execute",
    "set_execute_replay": ".backend.replay",
    "set_build_processes": ".graph.parallel",
    "execute_replay": ".backend.replay",
    "release_pending": "._lib.release",
    "set_log_level": ".log",
    "tensor": ".graph:Tensor",
    "Tensor": ".graph:Tensor",  # 1.32's name of cudnn.tensor: the same class
    "Node": ".graph.node",
    "NodeType": ".graph.graph_types",
    "GraphContext": ".graph.graph_types",
    "cuda_graph_retention": ".graph.graph_types",
    "handle": ".backend:Handle",  # the official's alias of Handle, for annotations
    "DeviceInfo": ".devices",
    "sdpa_capabilities": ".devices",
    "plan_cache": ".graph",
    "graph_cache": ".helpers",
    "jit": ".helpers",
    "Graph": ".wrapper",
    # plain C API functions outside the graph API (cuDNN >= 9.22, checked when called)
    "causal_conv1d_forward": ".causal_conv1d",
    "causal_conv1d_backward": ".causal_conv1d",
    # the official package's loader helpers
    "is_windows": ".datatypes",
    "load_cudnn": ".datatypes",
    # the official attention torch entry point (imports torch; registers cudnn::sdpa_fwd / sdpa_bwd)
    "sdpa_torch": ".sdpa.fwd.torch_op:sdpa",
}
# Subpackages reachable as attributes without an import statement (``cudnn.backend.Descriptor``,
# as when `import cudnn` imported them all), each imported on first use.
# ``ops``, ``nn`` and ``experimental`` import torch, so only when first read.
_SUBPACKAGES = ("_lib", "backend", "collect_env", "datatypes", "experimental", "graph", "graph_types", "helpers",
                "interop", "nn", "nodes", "ops", "sdpa", "torch", "wrapper")


def __getattr__(name: str) -> Any:
    """A public name or subpackage read for the first time: import its module, keep the value
    here (later reads are plain lookups) and return it."""
    if name in _SUBPACKAGES:
        try:
            return importlib.import_module(f".{name}", __name__)  # the import binds it here
        except ModuleNotFoundError as exc:  # ops / nn without torch: absent as attributes (help, hasattr)
            if exc.name != "torch":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}: cudnn.{name} needs PyTorch, "
                                 "which is not installed") from exc
    target = _EXPORTS.get(name)
    if target is None:  # an official name cudnn-py does not provide says what it needs (`_unavailable`)
        from ._unavailable import missing

        raise missing(__name__, name)
    module_name, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module_name, __name__), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Every public name and subpackage, imported yet or not."""
    return sorted({*globals(), *_EXPORTS, *_SUBPACKAGES})


class _Package(types.ModuleType):
    """The class of the ``cudnn`` module object. The import system binds the ``graph``
    subpackage here after any ``import cudnn.graph...``; that binding makes it callable as the
    documented ``cudnn.graph(handle)`` context manager, whichever import pulled it in first
    (helpers.py says why the subpackage is also the function)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "graph" and isinstance(value, types.ModuleType) and not callable(value):
            from .helpers import make_callable

            make_callable(value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

if os.environ.get("CUDNN_FRONTEND_LOG_INFO"):  # the official frontend's log switches (cudnn.log)
    from .log import frontend_log_from_environment

    frontend_log_from_environment()


def backend_version() -> int:
    """The loaded libcudnn's version as MAJOR*10000 + MINOR*100 + PATCH (e.g. 91900)."""
    from ._lib import loader

    return loader.report().version


def backend_version_string() -> str:
    """The loaded libcudnn's version as text (e.g. '9.19.0')."""
    from ._lib.errors import version_string

    return version_string(backend_version())


def get_last_error_string() -> str:
    """cuDNN's message for the most recent failure on this thread."""
    from ._lib import loader
    from ._lib.errors import last_error_string

    loader.lib()
    return last_error_string()


def create_handle() -> Handle:
    """A new cuDNN handle on the current device, to pass to graphs as ``handle=``.

    A handle is made to declare graphs on, so the first call imports the graph layer first. In a
    process whose CUDA context is live and that has no handle yet, that import starts cudnnCreate
    and cuDNN's opening of its engine libraries on a helper thread
    (`backend.handle.prefetch_default_handle`), and this call takes that handle: cuDNN's start-up
    and the import overlap instead of following one another. Without a live context the handle is
    made here, on the calling thread (cudnnCreate initialises CUDA)."""
    from . import graph  # noqa: F401 - imported for its prefetch of this thread's first handle
    from .backend.handle import create_handle as make

    return make()


def library_info() -> LoadReport:
    """Where libcudnn was loaded from, its version, and the libraries opened beside it."""
    from ._lib import loader

    return loader.report()


__all__ = [  # noqa: PLE0604 - not a literal: every name of _EXPORTS is public
    *_EXPORTS,
    "graph",  # noqa: F822 - the subpackage, imported by __getattr__ when first read
    "__version__",
    "backend_version",
    "backend_version_string",
    "create_handle",
    "get_last_error_string",
    "library_info",
]
