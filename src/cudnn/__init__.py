"""cudnn-py: NVIDIA cuDNN's Graph API from Python, through ctypes.

``import cudnn`` needs neither a GPU nor libcudnn, and imports almost nothing: every public
name below is looked up in the submodule that defines it the first time it is read (PEP 562
``__getattr__``, made from the table `_EXPORTS` by `cudnn._exports`), so a program pays only
for what it uses (``cudnn.data_type`` builds one enum, ``cudnn.pygraph`` imports the graph
builder). The library is opened by the first call
that needs it. The names are the documented cuDNN Python API; ``dir(cudnn)`` lists them all.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._exports import lazy_exports
from ._version import __version__

if TYPE_CHECKING:
    from ._lib.loader import LoadReport

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
    "diagonal_alignment": "._graph.model.sdpa_enums",  # frontend-only enums of the attention API
    "attention_implementation": "._graph.model.sdpa_enums",
    "scalar_type": "._graph.model.api_enums",  # frontend enums without a header enum of their own
    "moe_grouped_matmul_mode": "._graph.model.api_enums",
    # errors
    "CudnnBadParamError": "._lib.status",
    "CudnnError": "._lib.status",
    "CudnnExecutionError": "._lib.status",
    "CudnnInitError": "._lib.status",
    "CudnnInternalError": "._lib.status",
    "CudnnNotSupportedError": "._lib.status",
    "DescriptorClosedError": "._lib.status",
    "FeatureUnavailableError": "._lib.status",
    "LibraryNotFoundError": "._lib.status",
    "cudnnGraphNotSupportedError": "._lib.status",
    "CudaUnavailableError": "._lib.status",
    "CudaError": "._lib.cuda",
    "ExecutionInputError": "._graph.model.graph_errors",
    "ExecutionInputWarning": "._graph.model.graph_errors",
    "GraphError": "._graph.model.graph_errors",
    "GraphNotImplementedError": "._graph.model.graph_errors",
    "GraphNotSupportedError": "._graph.model.graph_errors",
    "GraphStateError": "._graph.model.graph_errors",
    "SerializationError": "._graph.model.graph_errors",
    "SerializationNotSupportedError": "._graph.model.graph_errors",
    # handles, streams, kernel caches, knobs
    "Handle": ".backend",
    "destroy_handle": ".backend",
    "get_stream": ".backend",
    "set_stream": ".interop.streams",
    "create_kernel_cache": ".backend.kernel_cache",
    "create_device_properties": ".backend.deviceprop",
    "knob": ".backend.engine:KnobInfo",
    # graphs
    "pygraph": "._graph.pygraph",
    "graph": "._graph.helpers",  # the official context manager (cudnn/graph.py names it too)
    "set_execute_checks": "._graph.run.checks",
    "set_execute_replay": ".backend.replay",
    "set_build_processes": "._graph.plans.threads",
    "set_lowering_trials": "._graph.build.trial",
    "lowering_trials_pending": "._graph.build.trial",
    "execute_replay": ".backend.replay",
    "release_pending": "._lib.release",
    "set_log_level": ".log",
    "tensor": "._graph.model.tensor:Tensor",
    "Tensor": "._graph.model.tensor",  # 1.32's name of cudnn.tensor: the same class
    "Node": "._graph.model.node",
    "NodeType": "._graph.model.node_types",
    "GraphContext": "._graph.model.node_types",
    "cuda_graph_retention": "._graph.model.node_types",
    "handle": ".backend:Handle",  # the official's alias of Handle, for annotations
    "DeviceInfo": ".devices",
    "sdpa_capabilities": ".devices",
    "plan_cache": "._graph.records.plan_cache",
    "graph_cache": "._graph.helpers",
    "jit": "._graph.helpers",
    "Graph": ".wrapper",
    # plain C API functions outside the graph API (cuDNN >= 9.22, checked when called)
    "causal_conv1d_forward": ".causal_conv1d_capi",
    "causal_conv1d_backward": ".causal_conv1d_capi",
    # the official package's loader helpers
    "is_windows": ".datatypes",
    "load_cudnn": ".datatypes",
    # the official attention torch entry point (imports torch; registers cudnn::sdpa_fwd / sdpa_bwd)
    "sdpa_torch": ".sdpa.fwd.torch_op:sdpa",
}
# Subpackages reachable as attributes without an import statement (``cudnn.backend.Descriptor``,
# as when `import cudnn` imported them all), each imported on first use.
# ``ops``, ``nn`` and ``experimental`` import torch, so only when first read.
_SUBPACKAGES = ("_lib", "backend", "collect_env", "datatypes", "experimental", "graph_types", "interop", "nn", "nodes",
                "ops", "sdpa", "torch", "wrapper")
if TYPE_CHECKING:
    # What a type checker sees of the names above
    # (at run time each is imported on first read): the same objects, from the modules
    # _EXPORTS names. Written by tools/gen_exports_block.py, checked by
    # tests/package/test_typed_api.py.
    from . import _lib as _lib
    from . import backend as backend
    from . import collect_env as collect_env
    from . import datatypes as datatypes
    from . import experimental as experimental
    from . import graph_types as graph_types
    from . import interop as interop
    from . import nn as nn
    from . import nodes as nodes
    from . import ops as ops
    from . import sdpa as sdpa
    from . import torch as torch
    from . import wrapper as wrapper
    from ._graph.build.trial import lowering_trials_pending as lowering_trials_pending
    from ._graph.build.trial import set_lowering_trials as set_lowering_trials
    from ._graph.helpers import graph as graph
    from ._graph.helpers import graph_cache as graph_cache
    from ._graph.helpers import jit as jit
    from ._graph.model.api_enums import moe_grouped_matmul_mode as moe_grouped_matmul_mode
    from ._graph.model.api_enums import scalar_type as scalar_type
    from ._graph.model.graph_errors import ExecutionInputError as ExecutionInputError
    from ._graph.model.graph_errors import ExecutionInputWarning as ExecutionInputWarning
    from ._graph.model.graph_errors import GraphError as GraphError
    from ._graph.model.graph_errors import GraphNotImplementedError as GraphNotImplementedError
    from ._graph.model.graph_errors import GraphNotSupportedError as GraphNotSupportedError
    from ._graph.model.graph_errors import GraphStateError as GraphStateError
    from ._graph.model.graph_errors import SerializationError as SerializationError
    from ._graph.model.graph_errors import SerializationNotSupportedError as SerializationNotSupportedError
    from ._graph.model.node import Node as Node
    from ._graph.model.node_types import GraphContext as GraphContext
    from ._graph.model.node_types import NodeType as NodeType
    from ._graph.model.node_types import cuda_graph_retention as cuda_graph_retention
    from ._graph.model.sdpa_enums import attention_implementation as attention_implementation
    from ._graph.model.sdpa_enums import diagonal_alignment as diagonal_alignment
    from ._graph.model.tensor import Tensor as Tensor
    from ._graph.model.tensor import Tensor as _tensor
    from ._graph.plans.threads import set_build_processes as set_build_processes
    from ._graph.pygraph import pygraph as pygraph
    from ._graph.records.plan_cache import plan_cache as plan_cache
    from ._graph.run.checks import set_execute_checks as set_execute_checks
    from ._lib.cuda import CudaError as CudaError
    from ._lib.enums import behavior_note as behavior_note
    from ._lib.enums import build_plan_policy as build_plan_policy
    from ._lib.enums import convolution_mode as convolution_mode
    from ._lib.enums import data_type as data_type
    from ._lib.enums import heur_mode as heur_mode
    from ._lib.enums import knob_type as knob_type
    from ._lib.enums import layout_type as layout_type
    from ._lib.enums import norm_forward_phase as norm_forward_phase
    from ._lib.enums import norm_mode as norm_mode
    from ._lib.enums import numerical_note as numerical_note
    from ._lib.enums import padding_mode as padding_mode
    from ._lib.enums import pointwise_mode as pointwise_mode
    from ._lib.enums import reduction_mode as reduction_mode
    from ._lib.enums import resample_mode as resample_mode
    from ._lib.enums import reshape_mode as reshape_mode
    from ._lib.enums import rng_distribution as rng_distribution
    from ._lib.enums import tensor_reordering as tensor_reordering
    from ._lib.release import release_pending as release_pending
    from ._lib.status import CudaUnavailableError as CudaUnavailableError
    from ._lib.status import CudnnBadParamError as CudnnBadParamError
    from ._lib.status import CudnnError as CudnnError
    from ._lib.status import CudnnExecutionError as CudnnExecutionError
    from ._lib.status import CudnnInitError as CudnnInitError
    from ._lib.status import CudnnInternalError as CudnnInternalError
    from ._lib.status import CudnnNotSupportedError as CudnnNotSupportedError
    from ._lib.status import DescriptorClosedError as DescriptorClosedError
    from ._lib.status import FeatureUnavailableError as FeatureUnavailableError
    from ._lib.status import LibraryNotFoundError as LibraryNotFoundError
    from ._lib.status import cudnnGraphNotSupportedError as cudnnGraphNotSupportedError
    from .backend import Handle as Handle
    from .backend import Handle as _handle
    from .backend import destroy_handle as destroy_handle
    from .backend import get_stream as get_stream
    from .backend.deviceprop import create_device_properties as create_device_properties
    from .backend.engine import KnobInfo as _knob
    from .backend.kernel_cache import create_kernel_cache as create_kernel_cache
    from .backend.replay import execute_replay as execute_replay
    from .backend.replay import set_execute_replay as set_execute_replay
    from .causal_conv1d_capi import causal_conv1d_backward as causal_conv1d_backward
    from .causal_conv1d_capi import causal_conv1d_forward as causal_conv1d_forward
    from .datatypes import is_windows as is_windows
    from .datatypes import load_cudnn as load_cudnn
    from .devices import DeviceInfo as DeviceInfo
    from .devices import sdpa_capabilities as sdpa_capabilities
    from .interop.streams import set_stream as set_stream
    from .log import set_log_level as set_log_level
    from .sdpa.fwd.torch_op import sdpa as _sdpa_torch
    from .wrapper import Graph as Graph
    # names whose module calls them otherwise (`import A as B` would not export B to a checker)
    knob = _knob
    tensor = _tensor
    handle = _handle
    sdpa_torch = _sdpa_torch

# Any other name: an official name cudnn-py does not provide says what it needs (`_unavailable`).
# (Defined for the run time only: a type checker knows the names above and reports any other.)
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=_SUBPACKAGES,
                                        otherwise="._unavailable:missing")

    # The module cudnn/graph.py, imported now (it is small) as the official package imports it, so
    # that a later `import cudnn.graph` finds it imported and does not bind the module over the
    # name: `cudnn.graph` is the function, read through the table above on first use.
    import importlib as _importlib

    _importlib.import_module(".graph", __name__)  # binds the module as `graph` here...
    del globals()["graph"], _importlib  # ...which the table's function takes over on first read


if os.environ.get("CUDNN_FRONTEND_LOG_INFO"):  # the official frontend's log switches (cudnn.log)
    from .log import frontend_log_from_environment

    frontend_log_from_environment()


def backend_version() -> int:
    """The loaded libcudnn's version as MAJOR*10000 + MINOR*100 + PATCH (e.g. 91900)."""
    from ._lib import loader

    return loader.version()


def backend_version_string() -> str:
    """The loaded libcudnn's version as text (e.g. '9.19.0')."""
    from ._lib.status import version_string

    return version_string(backend_version())


def get_last_error_string() -> str:
    """cuDNN's message for the most recent failure on this thread."""
    from ._lib import loader
    from ._lib.status import last_error_string

    loader.lib()
    return last_error_string()


def create_handle() -> Handle:
    """A new cuDNN handle on the current device, to pass to graphs as ``handle=``.

    A handle is made to declare graphs on, so this call also imports the graph layer. In a process
    whose CUDA context is live and that has no handle yet, it first starts cudnnCreate and cuDNN's
    opening of its engine libraries on a helper thread (`backend.handle.prefetch_default_handle`),
    imports the graph layer meanwhile, then takes that handle: the two overlap instead of following
    one another. Without a live context the handle is made here, on the calling thread
    (cudnnCreate initialises CUDA)."""
    from .backend.handle import create_handle as make
    from .backend.handle import prefetch_default_handle

    prefetch_default_handle()
    from ._graph import pygraph  # noqa: F401 - the graph layer, imported while the handle is made

    return make()


def library_info() -> LoadReport:
    """Where libcudnn was loaded from, its version, and the libraries opened beside it."""
    from ._lib import loader

    return loader.report()


__all__ = [  # noqa: PLE0604 - not a literal: every name of _EXPORTS is public
    *_EXPORTS,
    "__version__",
    "backend_version",
    "backend_version_string",
    "create_handle",
    "get_last_error_string",
    "library_info",
]
