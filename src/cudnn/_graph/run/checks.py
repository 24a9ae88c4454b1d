"""Checking the buffers of a variant pack before their first execute: the check mode
(`set_execute_checks`) and `BufferChecks`, which turns a buffer into the device address cuDNN is
given, or refuses it.

The first call with a set of buffers checks them: what is unsafe is refused (too small for
what the tensor addresses, on another device or the host, misaligned, missing); a shape, stride
or dtype that differs from the tensor's but stays inside the buffer gives one
`ExecutionInputWarning` per tensor ("warn", the default) or an error ("strict"). "off" skips
the checks. A ragged tensor's buffer is packed by offsets on the device: it must hold one
token, and its shape is not compared.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from ..._lib import cuda
from ..._lib.enums import data_type
from ..._lib.host import HostScalar
from ..model.graph_errors import ExecutionInputError, ExecutionInputWarning
from .bindings import Binding, squeezed

CHECK_MODES = ("strict", "warn", "off")
_checks = [os.environ.get("CUDNN_PY_EXECUTE_CHECKS", "warn")]


def set_execute_checks(mode: str) -> None:
    """How the first call with a set of buffers checks them: "warn" (default; refuse what is
    unsafe, warn once per tensor on a memory-safe shape/stride/dtype mismatch), "strict"
    (refuse mismatches too) or "off" (no checks). ``$CUDNN_PY_EXECUTE_CHECKS`` sets the start value."""
    if mode not in CHECK_MODES:
        raise ValueError(f"set_execute_checks: expected one of {CHECK_MODES}, got {mode!r}")
    _checks[0] = mode


def execute_checks() -> str:
    """The current execute-check mode (see `set_execute_checks`)."""
    mode = _checks[0]
    if mode not in CHECK_MODES:
        raise ValueError(f"$CUDNN_PY_EXECUTE_CHECKS: expected one of {CHECK_MODES}, got {mode!r}")
    return mode


class BufferChecks:
    """The checks of one plan's buffers: ``label`` names the graph in messages, ``device`` is the
    GPU it was built for (None: any), ``workspace_size`` the bytes its workspace must hold.
    Remembers the uids a mismatch warning was given for (``warned``: once per tensor)."""

    __slots__ = ("label", "device", "workspace_size", "warned")

    def __init__(self, label: str, device: int | None, workspace_size: int) -> None:
        self.label = label
        self.device = device
        self.workspace_size = workspace_size
        self.warned: set[int] = set()

    def pointer(self, b: Binding, value: Any, mode: str, tensor: Any) -> int | HostScalar:
        """The checked device address of ``value`` for ``b`` (a HostScalar for a Python number);
        ``tensor`` is ``torch.Tensor`` while torch is loaded (its exact tensors need no more)."""
        t = b.tensor
        if t.get_is_pass_by_value():
            if isinstance(value, (int, float, bool)):
                return HostScalar(value, t.get_data_type())
            if mode == "off":
                return self._describe(b, value).ptr
            info = self._describe(b, value)
            if info.device_type not in ("cpu", "cuda_host"):
                raise ExecutionInputError(f"{self.label}: {b.label} is passed by value and needs a host "
                                          f"tensor or a Python number, got memory on {info.device_type}")
            self._check_layout(b, info, mode)
            return info.ptr
        if type(value) is int:
            if mode != "off":
                self.raw_pointer(b.label, value, b.needed)
            return value
        if type(value) is tensor and (ptr := self._exact_torch_pointer(b, value)) is not None:
            return ptr
        info = self._describe(b, value)
        if mode == "off":
            return info.ptr
        if info.device_type not in ("cuda", "cuda_managed"):
            raise ExecutionInputError(f"{self.label}: {b.label} must be in GPU memory, got a "
                                      f"{info.framework} tensor on {info.device_type}")
        if self.device is not None and info.device_id != self.device:
            raise ExecutionInputError(f"{self.label}: {b.label} is on cuda:{info.device_id} but the graph was "
                                      f"built for cuda:{self.device}")
        self._check_layout(b, info, mode)
        if info.ptr % t.get_alignment():
            raise ExecutionInputError(f"{self.label}: {b.label} starts at {info.ptr:#x}, which is not "
                                      f"{t.get_alignment()}-byte aligned")
        return info.ptr

    def _exact_torch_pointer(self, b: Binding, t: Any) -> int | None:
        """The address of a torch tensor that is exactly what ``b`` declares (dtype, dims, strides),
        on this graph's GPU and aligned: its own storage then holds everything the descriptor
        addresses, so nothing more is read. None: the general check decides (and explains)."""
        dims, strides, _ = b.layout
        try:
            if t.dtype is not b.torch_dtype or t.shape != dims or t.stride() != strides or not t.is_cuda \
                    or t.is_neg():
                return None
        except (RuntimeError, AttributeError):  # no strides (sparse), or not torch's own tensor API
            return None
        if self.device is not None and t.get_device() != self.device:
            return None
        ptr: int = t.data_ptr()
        return ptr if ptr % b.tensor.get_alignment() == 0 else None

    def _torch_workspace_pointer(self, t: Any, need: int) -> int | None:
        """The address of a torch workspace on this graph's GPU holding ``need`` bytes from its
        first element; None: the general check decides (and explains)."""
        try:
            if not t.is_cuda or (self.device is not None and t.get_device() != self.device):
                return None
            have = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
        except (RuntimeError, NotImplementedError, AttributeError):
            return None
        ptr: int = t.data_ptr()
        return ptr if have >= need else None

    def _describe(self, b: Binding, value: Any) -> Any:
        """`cudnn.interop.tensors.describe` of ``value``, its refusal naming ``b``."""
        try:
            return _interop().describe(value)
        except (TypeError, ValueError, BufferError) as exc:
            raise ExecutionInputError(f"{self.label}: {b.label}: {exc}") from None

    def _check_layout(self, b: Binding, info: Any, mode: str) -> None:
        """Refuse a buffer smaller than what the tensor addresses; a memory-safe mismatch of
        dtype, dims or strides warns once per tensor (an error in strict mode). A ragged
        tensor's buffer is packed (its shape is not the declared one, its extent depends on
        offsets on the device): it must hold one token, and only its dtype is compared."""
        t = b.tensor
        needed = b.needed
        have = info.extent_bytes if info.extent_bytes is not None else info.needed_bytes
        if t.get_data_type() == data_type.BOOLEAN:  # bit-packed masks: any bytes, enough of them
            if have < needed:
                raise ExecutionInputError(f"{self.label}: {b.label} is a bit-packed BOOLEAN mask of "
                                          f"{t.element_count()} elements needing {needed} bytes; the buffer has {have}")
            if info.dtype in (data_type.BOOLEAN, data_type.BYTE_BOOLEAN):  # a framework bool (interop.framework_dtypes)
                self._mismatch(b, mode, f"is a bit-packed BOOLEAN mask (8 elements a byte), got a {info.framework} "
                                        "bool buffer of a byte an element: its elements are not the mask's "
                                        "(pack it, or on cuDNN >= 9.25 declare BYTE_BOOLEAN)")
            return
        mismatch = ""
        dims, strides, axes = b.layout
        if info.dtype != t.get_data_type():
            mismatch = f"expects {t.get_data_type().name} data, got {info.framework} {info.dtype.name}"
        elif not b.ragged and (info.shape != dims or info.strides != strides) and \
                squeezed(info.shape, info.strides) != axes:
            mismatch = (f"expects dims {list(dims)} strides {list(strides)}, got a buffer with shape "
                        f"{list(info.shape)} strides {list(info.strides)}")
        if have < needed and b.ragged:
            raise ExecutionInputError(f"{self.label}: {b.label} is ragged (packed by its offsets) and needs at "
                                      f"least one token, {needed} bytes for dims {list(dims)} strides "
                                      f"{list(strides)}; the buffer has {have}")
        if have < needed:
            detail = f" ({mismatch})" if mismatch else ""
            raise ExecutionInputError(f"{self.label}: {b.label} needs {needed} bytes for dims {list(dims)} strides "
                                      f"{list(strides)}; the buffer has {have}{detail}")
        if mismatch:
            self._mismatch(b, mode, mismatch)

    def _mismatch(self, b: Binding, mode: str, mismatch: str) -> None:
        """A memory-safe mismatch: an error in strict mode, else a warning once per tensor."""
        if mode == "strict":
            raise ExecutionInputError(f"{self.label}: {b.label} {mismatch}")
        if b.uid not in self.warned:
            self.warned.add(b.uid)
            warnings.warn(f"{self.label}: {b.label} {mismatch}; cuDNN reads it as declared (it stays inside "
                          "the buffer)", ExecutionInputWarning, stacklevel=6)

    def raw_pointer(self, label: str, ptr: int, needed: int) -> None:
        """Refuse a raw address that CUDA knows is not this graph's GPU memory or ends too early."""
        if ptr <= 0:
            raise ExecutionInputError(f"{self.label}: {label}: pointer {ptr} is not a device address")
        try:
            where = cuda.pointer_info(ptr)
        except Exception:  # noqa: BLE001 - cuda-bindings' own error types
            return  # memory CUDA cannot describe (e.g. from a foreign allocator): trust the caller
        if not where.is_device:
            raise ExecutionInputError(f"{self.label}: {label}: {ptr:#x} is not GPU memory")
        if self.device is not None and where.device != self.device:
            raise ExecutionInputError(f"{self.label}: {label}: {ptr:#x} is on cuda:{where.device}, the graph "
                                      f"on cuda:{self.device}")
        if where.size and where.end < ptr + needed:
            raise ExecutionInputError(f"{self.label}: {label} needs {needed} bytes at {ptr:#x}; its allocation "
                                      f"ends {where.end - ptr} bytes after it")

    def workspace_pointer(self, workspace: Any, mode: str, tensor: Any) -> int:
        """The checked address of the caller's workspace (0 for None where none is needed)."""
        need = self.workspace_size
        if workspace is None:
            if need:
                raise ExecutionInputError(f"{self.label}: the plan needs a workspace of {need} bytes; got None")
            return 0
        if type(workspace) is int:
            if need and mode != "off":
                self.raw_pointer("workspace", workspace, need)
            return workspace
        if type(workspace) is tensor and (ptr := self._torch_workspace_pointer(workspace, need)) is not None:
            return ptr
        try:
            info = _interop().describe(workspace)
        except (TypeError, ValueError, BufferError) as exc:
            raise ExecutionInputError(f"{self.label}: workspace: {exc}") from None
        size = info.extent_bytes if info.extent_bytes is not None else info.needed_bytes
        if size < need:
            raise ExecutionInputError(f"{self.label}: the workspace has {size} bytes; the plan needs {need}")
        if need and info.device_type not in ("cuda", "cuda_managed"):
            raise ExecutionInputError(f"{self.label}: the workspace must be GPU memory, got {info.device_type}")
        return info.ptr


@functools.cache
def _interop() -> Any:
    """cudnn.interop.tensors, imported on the first check (not when cudnn is imported)."""
    from ...interop import tensors

    return tensors
