"""cuDNN's classic C API, one Python function per C function (cudnn-python-wrappers, revived).

    from cudnn import legacy as libcudnn

    handle = libcudnn.cudnnCreate()
    x_desc = libcudnn.cudnnCreateTensorDescriptor()
    libcudnn.cudnnSetTensor4dDescriptor(x_desc, libcudnn.cudnnTensorFormat["CUDNN_TENSOR_NCHW"],
                                        libcudnn.cudnnDataType["CUDNN_DATA_FLOAT"], 64, 128, 112, 112)

Every function of cudnn_ops_v9.h, cudnn_cnn_v9.h and cudnn_adv_v9.h is here under its C name,
with the graph library's handle, stream, version, error and callback functions; signatures
come from the headers (tools/gen_api.py), so nothing is missed and argument types are right.

Conventions (those of the old wrappers, for cuDNN 9):

- Parameters keep their C names and order. Out-parameters are not passed but returned: one
  value, or a tuple in C order. Arrays come back as lists cut to the count cuDNN filled in;
  algorithm searches (Find / Get..._v7) as lists of cudnnConvolution*AlgoPerf_t structs.
- Handles and descriptors are `Opaque` values typed by their C type. As in C they are not
  freed for you: call the matching cudnnDestroy*. Using one after that is an exception.
- Enums: dictionaries under the old names (``cudnnTensorFormat["CUDNN_TENSOR_NCHW"]``) whose
  values are the IntEnum members of the C enums (``cudnnTensorFormat_t.CUDNN_TENSOR_NCHW``);
  enum parameters also take the member name as a string.
- alpha / beta (any ``const void *alpha...`` / ``beta...``): a Python number is passed as a
  double when the call's first tensor descriptor (its first filter descriptor if it has no
  tensor descriptor) has data type CUDNN_DATA_DOUBLE, as a float otherwise: cuDNN's rule for
  scaling parameters. A ctypes.c_float / c_double is passed as given. cudnnSetTensor's value
  is converted to the tensor's own data type.
- Pointers: ints, ctypes objects, anything with ``__cuda_array_interface__`` or ``__dlpack__``
  (PyTorch, CuPy, JAX, Numba), torch tensors that require grad; None is NULL. Host memory is
  refused where cuDNN reads device memory. ``const int *`` inputs also take Python lists.
- Every status other than CUDNN_STATUS_SUCCESS raises a `cudnn.CudnnError` subclass carrying
  the status name, cuDNN's last error message and the call.

Changed since the cuDNN 6 wrappers: results are Python values (no ``.value``), and what
cuDNN 8 removed is gone (`REMOVED` says what replaces it): cudnnGetConvolutionForwardAlgorithm
and the cudnnConvolutionFwdPreference enum give way to cudnnGetConvolutionForwardAlgorithm_v7
(heuristics) and cudnnFindConvolutionForwardAlgorithm (measured).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from .._lib import capi, legacy_enums, structs
from .._lib import enums as graph_enums
from .._lib.api_graph import FUNCTIONS as _GRAPH_TABLE
from .._lib.api_legacy import FUNCTIONS as _LEGACY_TABLE
from ._call import Binding, make_function
from ._objects import NULL as NULL  # re-exported
from ._objects import Opaque as Opaque  # re-exported
from ._signature import Kind as Kind  # re-exported
from ._signature import Signature, classify_table

# Graph-library functions that belong to the classic API too (handles, streams, versions,
# errors, callbacks); the backend descriptor functions stay with cudnn.backend.
HANDLE_FUNCTIONS: tuple[str, ...] = tuple(
    name for name in _GRAPH_TABLE
    if not name.startswith("cudnnBackend") and name != "cudnnGetExecutionPlanWorkspaceSize"
)

ENUM_TYPES: dict[str, type[IntEnum]] = {
    name: getattr(module, name) for module in (graph_enums, legacy_enums) for name in module.C_ENUMS
}
_TYPES: dict[str, Any] = {"opaque": frozenset(structs.OPAQUE_TYPES), "enums": frozenset(ENUM_TYPES),
                          "structs": frozenset(structs.STRUCTS)}

SIGNATURES: dict[str, Signature] = {
    **classify_table({n: _GRAPH_TABLE[n] for n in HANDLE_FUNCTIONS}, "cudnn_graph_v9.h", **_TYPES),
    **classify_table(_LEGACY_TABLE, "cudnn_ops_v9.h / cudnn_cnn_v9.h / cudnn_adv_v9.h", **_TYPES),
}


def _build() -> dict[str, Any]:
    functions = {}
    for name, sig in SIGNATURES.items():
        binding = Binding(sig, _LazyApi(name in _GRAPH_TABLE), ENUM_TYPES, _TYPES["opaque"])
        functions[name] = make_function(binding)
    return functions


class _LazyApi:
    """capi.graph or capi.legacy, looked up on the first call (no library opens at import)."""

    __slots__ = ("_api", "_graph")

    def __init__(self, graph: bool) -> None:
        self._graph = graph
        self._api: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._api is None:
            self._api = capi.graph if self._graph else capi.__getattr__("legacy")
        return getattr(self._api, name)


FUNCTIONS: dict[str, Any] = _build()
globals().update(FUNCTIONS)

# The enums the classic API uses, as IntEnums under their C names and as dictionaries under
# the old wrappers' names (cudnnDataType_t -> cudnnDataType).
_USED = {p.base for sig in SIGNATURES.values() for p in sig.params if p.base in ENUM_TYPES}
_USED |= {e for s in structs.STRUCTS.values() for e in s._enums_.values()} | {"cudnnSeverity_t"}
globals().update({name: ENUM_TYPES[name] for name in sorted(_USED)})
ENUM_DICTS: dict[str, dict[str, IntEnum]] = {
    name[:-2]: dict(ENUM_TYPES[name].__members__) for name in sorted(_USED)
}
globals().update(ENUM_DICTS)
# CUDA's libraryPropertyType (library_types.h), for cudnnGetProperty.
libraryPropertyType: dict[str, int] = {"MAJOR_VERSION": 0, "MINOR_VERSION": 1, "PATCH_LEVEL": 2}
globals().update(legacy_enums.CONSTANTS)
globals().update(structs.STRUCTS)

# Names of the cuDNN 6/7 API that later versions removed -> what to use instead.
REMOVED: dict[str, str] = {
    "cudnnGetConvolutionForwardAlgorithm": "cudnnGetConvolutionForwardAlgorithm_v7 (heuristics) or "
                                           "cudnnFindConvolutionForwardAlgorithm (measured)",
    "cudnnGetConvolutionBackwardDataAlgorithm": "cudnnGetConvolutionBackwardDataAlgorithm_v7 or "
                                                "cudnnFindConvolutionBackwardDataAlgorithm",
    "cudnnGetConvolutionBackwardFilterAlgorithm": "cudnnGetConvolutionBackwardFilterAlgorithm_v7 or "
                                                  "cudnnFindConvolutionBackwardFilterAlgorithm",
    "cudnnConvolutionFwdPreference": "the returned perf list of cudnnGetConvolutionForwardAlgorithm_v7, "
                                     "sorted fastest first; pick by .memory for a workspace limit",
    "cudnnConvolutionBwdDataPreference": "the perf list of cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnConvolutionBwdFilterPreference": "the perf list of cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnSetRNNDescriptor": "cudnnSetRNNDescriptor_v8",
    "cudnnRNNForwardTraining": "cudnnRNNForward with CUDNN_FWD_MODE_TRAINING",
    "cudnnRNNForwardInference": "cudnnRNNForward with CUDNN_FWD_MODE_INFERENCE",
    "cudnnRNNBackwardData": "cudnnRNNBackwardData_v8",
    "cudnnRNNBackwardWeights": "cudnnRNNBackwardWeights_v8",
    "cudnnGetRNNParamsSize": "cudnnGetRNNWeightSpaceSize",
    "cudnnGetRNNWorkspaceSize": "cudnnGetRNNTempSpaceSizes",
    "cudnnGetRNNTrainingReserveSize": "cudnnGetRNNTempSpaceSizes",
}


def __getattr__(name: str) -> Any:
    if name in REMOVED:
        raise AttributeError(f"{name} is not in cuDNN 9 (removed in cuDNN 8): use {REMOVED[name]}")
    raise AttributeError(f"module 'cudnn.legacy' has no attribute {name!r}")


__all__ = sorted(  # noqa: PLE0605 - the names of the generated tables, not a literal
    [*FUNCTIONS, *ENUM_DICTS, *(n for n in _USED), *legacy_enums.CONSTANTS, *structs.STRUCTS,
     "ENUM_DICTS", "ENUM_TYPES", "FUNCTIONS", "HANDLE_FUNCTIONS", "Kind", "NULL", "Opaque", "REMOVED",
     "SIGNATURES", "Signature", "libraryPropertyType"]
)
