"""The role of each C parameter in the Python call, decided from the prototype alone.

A parameter is an input the caller passes, or an out-parameter the wrapper allocates and
returns. The rules, in order (``T`` is the C type without ``const`` and ``*``):

- ``T`` by value: an opaque handle or descriptor (HANDLE), ``cudaStream_t`` (STREAM),
  ``cudnnCallback_t`` (CALLBACK), an enum (ENUM), or a number (VALUE).
- ``const void *`` named ``alpha*`` / ``beta*``: a host scaling factor (SCALE);
  ``valuePtr`` of cudnnSetTensor: a host value in the tensor's type (FILL).
- other ``void *`` / ``const void *``: memory, usually on the device (POINTER).
- ``const T *`` of numbers or enums: an input array (IN_ARRAY), a list or a pointer; the
  few that must be in device memory (``devSeqLengths``...) take only pointers.
- non-const ``T *`` of a header struct: an array of results (OUT_ARRAY), its length the
  ``requestedAlgoCount`` input; ``char *``: a message buffer (OUT_STRING).
- non-const ``T *`` named like an array (``dimA``, ``strideA``, ``seqLengthArray``,
  ``axes``): OUT_ARRAY, its length the ``...Requested`` (or ``nbDims``) input before it.
- any other non-const ``T *`` or ``void **``: one returned value (OUT).
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any


class Kind(enum.Enum):
    """How a C parameter is passed from Python: a value, an enum, a handle, a pointer, an out-parameter, ..."""

    VALUE = "number"
    ENUM = "enum"
    HANDLE = "handle or descriptor"
    STREAM = "CUDA stream"
    CALLBACK = "callback"
    SCALE = "host scaling factor"
    FILL = "host value"
    POINTER = "pointer"
    IN_ARRAY = "input array"
    OUT = "out-parameter"
    OUT_ARRAY = "out array"
    OUT_STRING = "out string"


OUT_KINDS = frozenset({Kind.OUT, Kind.OUT_ARRAY, Kind.OUT_STRING})

_SCALE = re.compile(r"(alpha|beta)(\d|[A-Z]\w*)?")
_ARRAY_NAME = re.compile(r"\w*[a-z]A|seqLengthArray|axes")
# Length input -> out-parameter saying how many entries were filled (arrays are cut to it).
_FILLED_COUNT = {
    "nbDimsRequested": "nbDims",
    "arrayLengthRequested": "arrayLength",
    "seqLengthSizeRequested": "seqLengthArraySize",
    "requestedAlgoCount": "returnedAlgoCount",
}
# Counts that only say how long a returned list is: not returned on their own.
HIDDEN_COUNTS = frozenset({"returnedAlgoCount"})
# Pointer parameters that take host memory (all other pointers get device memory).
HOST_POINTERS = frozenset({"paddingFill", "param", "ptr", "udata", "tag"})
# Descriptor parameters the cuDNN documentation allows to be NULL; None is refused elsewhere.
OPTIONAL_DESCRIPTORS: dict[str, frozenset[str]] = {
    name: frozenset(params.split())
    for name, params in {
        "cudnnBatchNormalizationForwardTrainingEx": "zDesc activationDesc",
        "cudnnBatchNormalizationBackwardEx": "yDesc dzDesc activationDesc",
        "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize": "zDesc activationDesc",
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize": "yDesc dzDesc activationDesc",
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize": "activationDesc",
        "cudnnNormalizationForwardInference": "zDesc activationDesc",
        "cudnnNormalizationForwardTraining": "zDesc activationDesc",
        "cudnnNormalizationBackward": "yDesc dzDesc activationDesc",
        "cudnnGetNormalizationForwardTrainingWorkspaceSize": "zDesc activationDesc",
        "cudnnGetNormalizationBackwardWorkspaceSize": "yDesc dzDesc activationDesc",
        "cudnnGetNormalizationTrainingReserveSpaceSize": "activationDesc",
        "cudnnSetRNNDescriptor_v8": "dropoutDesc",
        "cudnnRNNForward": "cDesc",
        "cudnnRNNBackwardData_v8": "cDesc",
        "cudnnSetAttnDescriptor": "attnDropoutDesc postDropoutDesc",
        "cudnnGetCTCLossWorkspaceSize": "gradientsDesc",
        "cudnnGetCTCLossWorkspaceSize_v8": "gradientsDesc",
    }.items()
}
# Input arrays read by the GPU: a Python list (host memory) would fault there.
DEVICE_ARRAYS: dict[str, frozenset[str]] = {"cudnnCTCLoss_v8": frozenset({"labels", "labelLengths", "inputLengths"})}
# Defaults for inputs the C API makes the caller size.
DEFAULTS: dict[tuple[str, str], Any] = {("cudnnGetLastErrorString", "max_size"): 4096}
_TENSOR_TYPES = ("cudnnTensorDescriptor_t", "cudnnFilterDescriptor_t")


@dataclass(frozen=True)
class Param:
    """One C parameter and how the Python call treats it."""

    name: str
    ctype: str  # as in the header, e.g. "const cudnnTensorDescriptor_t"
    base: str  # without const and stars, e.g. "cudnnTensorDescriptor_t"
    kind: Kind
    length: str | None = None  # OUT_ARRAY / OUT_STRING: the input giving the length
    filled: str | None = None  # OUT_ARRAY: the out-parameter giving the filled length
    optional: bool = False  # HANDLE: None (NULL) allowed
    host: bool = False  # POINTER: host memory expected
    device: bool = False  # IN_ARRAY: device memory required (no Python lists)
    dtype_from: str | None = None  # SCALE / FILL: the descriptor whose data type decides


@dataclass(frozen=True)
class Signature:
    """A C function as the Python call sees it."""

    name: str
    restype: str
    params: tuple[Param, ...]
    header: str
    since: int | None
    deprecated: bool
    defaults: tuple[tuple[str, Any], ...] = ()

    @property
    def inputs(self) -> tuple[Param, ...]:
        """The parameters the caller passes (everything but out-parameters)."""
        return tuple(p for p in self.params if p.kind not in OUT_KINDS)

    @property
    def outputs(self) -> tuple[Param, ...]:
        """The out-parameters returned to the caller (hidden array counts excluded)."""
        return tuple(p for p in self.params if p.kind in OUT_KINDS and p.name not in HIDDEN_COUNTS)

    @property
    def destroys(self) -> bool:
        """Whether the function destroys the object its first parameter is."""
        return self.name.startswith("cudnnDestroy") and bool(self.params) and self.params[0].kind is Kind.HANDLE

    def python_signature(self) -> inspect.Signature:
        """The Python signature of the binding: the inputs, with their defaults."""
        defaults = dict(self.defaults)
        return inspect.Signature([
            inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=defaults.get(p.name, inspect.Parameter.empty), annotation=p.ctype)
            for p in self.inputs
        ])

    def __str__(self) -> str:
        outs = [p.name for p in self.outputs]
        ret = "None" if not outs else outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
        if self.restype not in ("cudnnStatus_t", "void"):
            ret = self.restype
        return f"{self.name}({', '.join(p.name for p in self.inputs)}) -> {ret}"


def classify(name: str, restype: str, params: tuple[tuple[str, str], ...], *, opaque: Collection[str],
             enums: Collection[str], structs: Collection[str], header: str = "", since: int | None = None,
             deprecated: bool = False) -> Signature:
    """The Signature of one generated-table entry."""
    names = [pname for _, pname in params]
    out: list[Param] = []
    for index, (ctype, pname) in enumerate(params):
        base = ctype.replace("const ", "").replace("*", "").strip()
        kind = _kind(ctype, base, pname, name, opaque, enums, structs)
        extra: dict[str, Any] = {}
        if kind is Kind.OUT_ARRAY or kind is Kind.OUT_STRING:
            extra["length"] = _length_param(name, pname, params[:index], params[index + 1:], kind)
            filled = _FILLED_COUNT.get(extra["length"])
            if filled in names:
                extra["filled"] = filled
        elif kind is Kind.HANDLE:
            extra["optional"] = pname in OPTIONAL_DESCRIPTORS.get(name, ())
        elif kind is Kind.POINTER:
            extra["host"] = pname in HOST_POINTERS
        elif kind is Kind.IN_ARRAY:
            extra["device"] = pname.startswith("devSeqLengths") or pname in DEVICE_ARRAYS.get(name, ())
        elif kind in (Kind.SCALE, Kind.FILL):
            extra["dtype_from"] = _first_tensor(params)
        out.append(Param(pname, ctype, base, kind, **extra))
    defaults = tuple((p, v) for (fn, p), v in DEFAULTS.items() if fn == name)
    return Signature(name, restype, tuple(out), header, since, deprecated, defaults)


def _kind(ctype: str, base: str, pname: str, fname: str, opaque: Collection[str],
          enums: Collection[str], structs: Collection[str]) -> Kind:
    stars = ctype.count("*")
    const = ctype.startswith("const ")
    if stars == 0:
        if base == "cudaStream_t":
            return Kind.STREAM
        if base == "cudnnCallback_t":
            return Kind.CALLBACK
        if base in opaque:
            return Kind.HANDLE
        return Kind.ENUM if base in enums else Kind.VALUE
    if stars > 1:
        return Kind.OUT  # void **: a pointer cuDNN hands back
    if base == "void":
        if const and _SCALE.fullmatch(pname):
            return Kind.SCALE
        if const and (fname, pname) == ("cudnnSetTensor", "valuePtr"):
            return Kind.FILL
        return Kind.POINTER
    if const:
        return Kind.IN_ARRAY
    if base == "char":
        return Kind.OUT_STRING
    if base in structs or _ARRAY_NAME.fullmatch(pname):
        return Kind.OUT_ARRAY
    if base in opaque or base in enums or base in ("cudaStream_t", "cudnnCallback_t") or _is_number(base):
        return Kind.OUT
    return Kind.POINTER  # a pointer to an opaque struct (cudnnRuntimeTag_t *): pass NULL


def _is_number(base: str) -> bool:
    return base in {"int", "unsigned", "unsigned int", "long", "long long", "unsigned long long", "size_t",
                    "float", "double", "int32_t", "uint32_t", "int64_t", "uint64_t"}


def _length_param(fname: str, pname: str, before: tuple[tuple[str, str], ...],
                  after: tuple[tuple[str, str], ...], kind: Kind) -> str:
    if kind is Kind.OUT_STRING:  # char *message, size_t max_size
        for ctype, name in after:
            if ctype == "size_t":
                return name
        raise ValueError(f"{fname}: no size for the string buffer {pname}")
    candidates = [name for ctype, name in before if "*" not in ctype and
                  (name.endswith("Requested") or name in ("requestedAlgoCount", "nbDims"))]
    if not candidates:
        raise ValueError(f"{fname}: cannot tell the length of the array {pname}")
    if pname.startswith("seqLength"):  # cudnnGetSeqDataDescriptor: seqLengthSizeRequested
        candidates = [name for name in candidates if name.startswith("seqLength")] or candidates
    return candidates[0]


def _first_tensor(params: tuple[tuple[str, str], ...]) -> str | None:
    """The descriptor whose data type sets the precision of alpha / beta (see the module doc)."""
    for wanted in _TENSOR_TYPES:
        for ctype, name in params:
            if ctype.replace("const ", "").strip() == wanted:
                return name
    return None


def classify_table(functions: Mapping[str, tuple[str, tuple[tuple[str, str], ...], int | None, bool]],
                   header: str, **types: Collection[str]) -> dict[str, Signature]:
    """Classify every function of a generated C table from ``header`` into Signatures."""
    return {
        name: classify(name, restype, params, header=header, since=since, deprecated=deprecated, **types)
        for name, (restype, params, since, deprecated) in functions.items()
    }
