"""ctypes signatures for the generated C function tables, bound on first use.

``capi.graph.cudnnBackendFinalize`` is the ctypes function with argtypes/restype taken from
the header's prototype. Binding happens when an attribute is first read, so `import cudnn`
opens no library, and a function missing from an older libcudnn fails only when called,
with the version that introduced it in the message. ``capi.legacy`` is the classic C API
(cudnn_ops / cudnn_cnn / cudnn_adv); its table is imported on first access, as is
``capi.subquadratic`` (causal conv1d, cuDNN >= 9.22).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping
from typing import Any

from . import enums as _enums
from . import loader
from .api_graph import FUNCTIONS as GRAPH_FUNCTIONS
from .status import FeatureUnavailableError

_SCALARS: dict[str, Any] = {
    "int": ctypes.c_int,
    "unsigned": ctypes.c_uint,
    "unsigned int": ctypes.c_uint,
    "long": ctypes.c_long,
    "unsigned long long": ctypes.c_ulonglong,
    "long long": ctypes.c_longlong,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "char": ctypes.c_char,
    "libraryPropertyType": ctypes.c_int,  # a CUDA enum
}

# C enum names (passed as int); read from the generated tables, so no enum class is built.
ENUM_NAMES: set[str] = set(_enums.C_ENUMS)


def ctype_of(ctype: str, enum_names: set[str] = ENUM_NAMES, structs: Mapping[str, Any] | None = None) -> Any:
    """C type text from the headers -> ctypes type (None for void); ``structs``: name -> Structure."""
    base = ctype.replace("const ", "").strip()
    stars = base.count("*")
    base = base.replace("*", "").strip()
    if structs and base in structs:
        return ctypes.POINTER(structs[base]) if stars == 1 else structs[base] if stars == 0 else ctypes.c_void_p
    if stars == 0:
        if base == "void":
            return None
        if base in _SCALARS:
            return _SCALARS[base]
        if base in enum_names:
            return ctypes.c_int
        return ctypes.c_void_p  # opaque handles and descriptors (typedef'd pointers)
    if stars == 1 and base == "char":
        return ctypes.c_char_p
    if stars == 1 and base in _SCALARS:
        return ctypes.POINTER(_SCALARS[base])
    if stars == 1 and base in enum_names:
        return ctypes.POINTER(ctypes.c_int)
    if stars == 1 and base != "void":
        return ctypes.POINTER(ctypes.c_void_p)  # out-parameter of an opaque handle type
    return ctypes.c_void_p


class Api:
    """Lazily bound functions of one generated table."""

    def __init__(self, functions: dict[str, tuple[str, tuple[tuple[str, str], ...], int | None, bool]],
                 enum_names: set[str] = ENUM_NAMES, structs: Mapping[str, Any] | None = None) -> None:
        self._functions = functions
        self._enum_names = enum_names
        self._structs = structs

    def __getattr__(self, name: str) -> Any:
        try:
            restype, params, since, _deprecated = self._functions[name]
        except KeyError:
            raise AttributeError(f"{name} is not a function of the cuDNN headers") from None
        library = loader.lib()
        try:
            fn = getattr(library, name)
        except AttributeError:
            raise FeatureUnavailableError(name, since, loader.report().version) from None
        fn.restype = ctype_of(restype, self._enum_names, self._structs)
        fn.argtypes = [ctype_of(t, self._enum_names, self._structs) for t, _ in params]
        setattr(self, name, fn)  # next lookups skip __getattr__
        return fn

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def signature(self, name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        restype, params, _, _ = self._functions[name]
        return restype, params

    def names(self) -> list[str]:
        return list(self._functions)


graph = Api(GRAPH_FUNCTIONS)


@functools.cache
def execute_holding_gil() -> Any:
    """``cudnnBackendExecute(handle, plan, pack) -> status`` through ctypes.PyDLL: the call keeps
    the GIL, for a CUDA-graph capture no other Python thread may interleave with
    (`cuda.capture_graph`)."""
    fn = ctypes.PyDLL(loader.report().path).cudnnBackendExecute
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p] * 3
    return fn


# -- cuDNN's log callback (cudnnSetCallback / cudnnGetCallback) ------------------------------
# cudnnCallback_t: void (*)(cudnnSeverity_t, void *udata, const cudnnDebug_t *, const char *msg).
# ``msg`` is several NUL-terminated lines ended by an empty one, so it is taken as a pointer
# (a c_char_p would stop at the first line); the generated table passes ``fptr`` as void *.
LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
SEV_FATAL_EN, SEV_ERROR_EN, SEV_WARNING_EN, SEV_INFO_EN = 1 << 0, 1 << 1, 1 << 2, 1 << 3  # 1U << cudnnSeverity_t


def set_log_callback(mask: int, fn: Any) -> int:
    """cudnnSetCallback(mask, NULL, fn): ``fn`` a LOG_CALLBACK (the caller keeps it alive) or
    None for cuDNN's own default output; returns the status."""
    return int(graph.cudnnSetCallback(mask, None, fn))


def get_log_callback() -> tuple[int, int, int]:
    """cudnnGetCallback: (status, mask, function pointer address or 0)."""
    mask, udata, fptr = ctypes.c_uint(), ctypes.c_void_p(), ctypes.c_void_p()
    status = graph.cudnnGetCallback(ctypes.byref(mask), ctypes.byref(udata), ctypes.byref(fptr))
    return int(status), mask.value, fptr.value or 0


def message_lines(address: int, limit: int = 4096) -> list[str]:
    """The lines of a cuDNN log message at ``address``: NUL-terminated strings up to an empty one."""
    lines: list[str] = []
    while address and len(lines) < limit:
        raw = ctypes.string_at(address)
        if not raw:
            break
        lines.append(raw.decode(errors="replace"))
        address += len(raw) + 1
    return lines


def __getattr__(name: str) -> Any:
    """``legacy``: the classic C API table, imported and wrapped on first use."""
    if name == "legacy":
        from . import legacy_enums, structs
        from .api_legacy import FUNCTIONS as LEGACY_FUNCTIONS

        api = Api(LEGACY_FUNCTIONS, ENUM_NAMES | set(legacy_enums.C_ENUMS), structs.STRUCTS)
        globals()["legacy"] = api
        return api
    if name == "subquadratic":  # the causal conv1d functions (cuDNN >= 9.22)
        from . import api_subquadratic

        api = Api(api_subquadratic.FUNCTIONS, ENUM_NAMES | set(api_subquadratic.ENUMS))
        globals()["subquadratic"] = api
        return api
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
