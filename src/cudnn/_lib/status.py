"""cuDNN status codes as Python exceptions.

Every C call goes through ``if status: raise_status(...)`` (inlined on hot
paths). The exception carries the status, its name, cuDNN's own last error message and what
we were doing, so a failure reads like ``conv_fprop.0: finalizing CONVOLUTION_FORWARD
operation: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002): <cuDNN's explanation>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import enums

_NOT_SUPPORTED = 3000  # CUDNN_STATUS_NOT_SUPPORTED


class CudnnError(RuntimeError):
    """A cuDNN call returned a status other than CUDNN_STATUS_SUCCESS."""

    def __init__(self, status: int, context: str = "", message: str = "", hint: str = "") -> None:
        self.status = int(status)
        self.status_name = status_name(status)
        self.message = message
        self.context = context
        self.hint = hint
        super().__init__(self._text())

    def _text(self) -> str:
        text = f"{self.status_name} ({self.status})"
        if self.context:
            text = f"{self.context}: {text}"
        if self.message:
            text += f": {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def recontext(self, context: str) -> None:
        """Say this error of ``context`` instead, its status, message and hint kept: for a caller
        that knows better than the descriptor that raised it what was being done."""
        self.context = context
        self.args = (self._text(),)


class CudnnInitError(CudnnError):
    """1xxx: the library is not initialized, or its parts do not match (no GPU, bad install)."""


class CudaUnavailableError(CudnnInitError):
    """No usable GPU: no NVIDIA driver at all, a driver too old for the CUDA runtime, or no device.

    Raised by every entry point that needs a GPU (handles, ``build``, ``execute``, the
    ``cudnn.Graph`` wrapper, classic calls that create a handle), whether cuDNN or CUDA saw the
    problem first. ``reason`` is ``"no_driver"``, ``"driver_too_old"``, ``"no_device"`` or
    ``"cuda_error"``; ``detail`` says what was found and ``hint`` (which starts with the detail)
    what to do. ``status`` is cuDNN's (``CUDNN_STATUS_NOT_INITIALIZED`` when CUDA saw it first).
    Declaring, validating and printing graphs needs no GPU.
    """

    def __init__(self, status: int, context: str = "", message: str = "", hint: str = "",
                 reason: str = "cuda_error", detail: str = "") -> None:
        super().__init__(status, context, message, hint)
        self.reason = reason
        self.detail = detail

    @classmethod
    def from_cuda(cls, call: str, error_name: str, reason: str, detail: str, advice: str) -> CudaUnavailableError:
        """A CUDA call failed for want of a GPU: the first line says why, not CUDA's error name
        (the runtime answers ``cudaErrorInsufficientDriver`` also when there is no driver at all)."""
        err = cls(1001, call, f"CUDA {call} returned {error_name}", f"{detail}. {advice}", reason, detail)
        err.args = (f"{call}: {detail}\n  cause: CUDA {call} returned {error_name}\n  hint: {advice}",)
        return err


class CudnnBadParamError(CudnnError, ValueError):
    """2xxx: cuDNN rejected a parameter value."""


class cudnnGraphNotSupportedError(CudnnError):  # the official package's name
    """The graph (or request) is valid but not supported here: by the loaded cuDNN, by this GPU, by
    the engines' rules, or by cudnn-py (a configuration it does not build, or one it refuses
    because engines were seen computing it wrongly). Every 3xxx status raises it, and so does
    ``check_support`` / ``build`` when no engine is left.

    The official package's class, so code written for it catches ours (it also is a
    ``RuntimeError``, as every ``CudnnError``). ``CudnnNotSupportedError`` is another name for
    it. Raised with a message alone, as the official raises it, ``str()`` is the message.
    """

    def __init__(self, status: int | str = _NOT_SUPPORTED, context: str = "", message: str = "",
                 hint: str = "") -> None:
        if isinstance(status, str):  # cudnnGraphNotSupportedError("why"), the official's form
            super().__init__(_NOT_SUPPORTED, context, status, hint)
            self.args = (status,)
        else:
            super().__init__(status, context, message, hint)


CudnnNotSupportedError = cudnnGraphNotSupportedError  # cudnn-py's earlier name for the 3xxx class


class CudnnInternalError(CudnnError):
    """4xxx: cuDNN failed internally (compilation, allocation, ...)."""


class CudnnExecutionError(CudnnError):
    """5xxx: a kernel launch or a library cuDNN relies on failed while executing."""


class LibraryNotFoundError(OSError):
    """libcudnn (or a library it needs) could not be loaded; the message lists every try."""


class FeatureUnavailableError(cudnnGraphNotSupportedError):
    """The loaded cuDNN is too old for the requested function, enum value or op (a
    ``cudnnGraphNotSupportedError``, as the official reports its version gates)."""

    def __init__(self, what: str, needed: int | None, loaded: int) -> None:
        need = f"cuDNN >= {version_string(needed)}" if needed else "a newer cuDNN"
        self.needed, self.loaded = needed, loaded
        super().__init__(
            _NOT_SUPPORTED,
            what,
            f"needs {need}; the loaded libcudnn is {version_string(loaded)}",
        )


class DescriptorClosedError(ValueError):
    """A descriptor or handle was used after close() / destroy_handle()."""


_CATEGORIES: dict[int, type[CudnnError]] = {
    1000: CudnnInitError,
    2000: CudnnBadParamError,
    3000: cudnnGraphNotSupportedError,
    4000: CudnnInternalError,
    5000: CudnnExecutionError,
}


def status_name(status: int) -> str:
    try:
        return enums.cudnnStatus_t(status).name
    except ValueError:
        return f"CUDNN_STATUS_UNKNOWN_{int(status)}"


def version_string(version: int) -> str:
    """92800 -> '9.28.0'."""
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def exception_class(status: int) -> type[CudnnError]:
    return _CATEGORIES.get(int(status) // 1000 * 1000, CudnnError)


# Set by the loader once libcudnn is open: reads cudnnGetLastErrorString.
_last_error: Callable[[], str] = lambda: ""  # noqa: E731
# Hints for statuses whose cause is usually outside cuDNN.
_HINTS: dict[int, Callable[[int], str]] = {}
# CUDNN_STATUS_NOT_INITIALIZED and _SUBLIBRARY_LOADING_FAILED: how cuDNN reports a missing GPU.
_NO_GPU_STATUSES = frozenset({1001, 1008})
# Set when the CUDA helpers are imported: None when a GPU is usable, else (reason, detail, advice).
_gpu_problem: Callable[[], tuple[str, str, str] | None] | None = None


def last_error_string() -> str:
    """cuDNN's message for the most recent failure on this thread (may be empty)."""
    return _last_error()


def install_last_error_reader(fn: Callable[[], str]) -> None:
    global _last_error
    _last_error = fn


def install_hint(status_category: int, fn: Callable[[int], str]) -> None:
    """Register a hint provider for a status category (e.g. 1000: no GPU found)."""
    _HINTS[status_category] = fn


def install_gpu_check(fn: Callable[[], tuple[str, str, str] | None]) -> None:
    """Register the check run on the statuses cuDNN reports a missing GPU with (1001, 1008): it
    returns ``(reason, detail, advice)`` when no GPU is usable (the status then raises
    CudaUnavailableError), None when one is."""
    global _gpu_problem
    _gpu_problem = fn


def raise_status(status: int, context: str | Callable[[], str] = "") -> None:
    """Raise the exception for a failed status; ``context`` may be a callable (lazy).

    A not-initialized or sub-library-loading status while no GPU is usable raises
    CudaUnavailableError, with the reason in its hint."""
    ctx = context() if callable(context) else context
    category = int(status) // 1000 * 1000
    if int(status) in _NO_GPU_STATUSES and _gpu_problem is not None:
        problem = _gpu_problem()
        if problem:
            reason, detail, advice = problem
            raise CudaUnavailableError(status, ctx, _last_error(), f"{detail}. {advice}", reason, detail)
    hint_fn = _HINTS.get(category)
    hint = hint_fn(int(status)) if hint_fn else ""
    raise exception_class(status)(status, ctx, _last_error(), hint)


def make_last_error_reader(fn: Any) -> Callable[[], str]:
    """A reader of cudnnGetLastErrorString ``fn`` (a ctypes function), for the loader to install."""
    import ctypes  # here, not at the top: raising and catching CudnnError needs no ctypes

    def read() -> str:
        buf = ctypes.create_string_buffer(4096)  # per call: the reader may run on any thread
        fn(buf, len(buf))
        return buf.value.decode(errors="replace").strip()

    return read
