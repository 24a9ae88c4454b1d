"""Calling a built ``cudnn.Graph``: variant pack, output allocation, stream, workspace.

Everything that can be known before the first call is in an ``IoPlan`` (uids in call order,
what each output looks like). Per input type a ``Frame`` is made once: how to read the
device, which framework allocates the outputs, which stream is current. A call is then a
dict of uid -> buffer, one ``empty`` per output, a stream check, and ``pygraph.execute``,
whose Runner checks each buffer object the first time it sees it and keeps the backend variant
pack for that set of objects. A fresh output tensor per call would defeat that cache, so the
Runner is given, for each output, a small stable stand-in per address (``OutputAt``): the
allocator hands the same addresses out again, and the cache hits.

Outputs are allocated by the inputs' framework, except that while PyTorch is loaded
outputs are torch tensors (as the official wrapper always returns; seed 000 compares a
CuPy-fed graph's result with ``torch.testing.assert_close``). ``output_framework=`` says
otherwise: "inputs" (CuPy in, CuPy out), "torch" or "cupy". Frameworks that cannot make a
writable empty array here (JAX, Numba, raw DLPack producers) get torch tensors, else CuPy.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._lib.enums import data_type
from ..backend.handle import Handle, default_handle
from ..backend.handle import set_stream as _set_stream
from ..graph import pygraph
from ..graph.errors import ExecutionInputError
from ..interop import tensors as interop
from ..interop.streams import stream_ptr

OUTPUT_FRAMEWORKS = ("auto", "inputs", "torch", "cupy")


@dataclass(frozen=True)
class OutSpec:
    """One output the wrapper may allocate: its uid, dict key, layout and type."""

    uid: int
    name: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: data_type


@dataclass(frozen=True)
class IoPlan:
    """Inputs and outputs in call order (positional), or all of them (dict calls)."""

    in_uids: tuple[int, ...]
    in_names: tuple[str, ...]
    outs: tuple[OutSpec, ...]
    device_inputs: tuple[int, ...]  # positions of inputs in device memory (not by-value)


class OutputAt:
    """Output ``spec``'s buffer at one address, as the Runner reads it (``__cuda_array_interface__``).

    One per (output, address), kept by the Executor: the Runner caches variant packs by object
    identity, and this object is the same whenever the allocator reuses the address. It holds
    no reference to the tensor, so the memory is freed with the tensor the caller got.
    """

    __slots__ = ("__cuda_array_interface__", "__weakref__", "dtype")

    def __init__(self, spec: OutSpec, ptr: int) -> None:
        size = interop.itemsize(spec.dtype)
        self.dtype = _DtypeName(interop.dtype_name(spec.dtype), size)  # read before the typestr
        self.__cuda_array_interface__ = {"shape": spec.dims, "typestr": f"|V{size}", "version": 3,
                                         "strides": tuple(s * size for s in spec.strides), "data": (ptr, False)}


class _DtypeName:
    __slots__ = ("itemsize", "name")

    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize


_VIEWS_KEPT = 64  # stand-ins kept per graph (the oldest is dropped beyond)


class _NotOnGpu(Exception):
    def __init__(self, framework: str, where: str) -> None:
        super().__init__(f"a {framework} tensor on {where}; the graph reads GPU memory: move it to the GPU")


# -- frames: per input type ------------------------------------------------------------------

class Frame:
    """How inputs of one type are handled: device, current stream, output allocation."""

    __slots__ = ("_devices", "device", "empty", "framework", "out_framework", "ptr", "stream")

    def __init__(self, framework: str, out_framework: str) -> None:
        self.framework = framework
        self.out_framework = out_framework
        self._devices: dict[int, Any] = {}
        self.device: Callable[[Any], tuple[int, Any]] = self._generic_device
        stream_framework = framework if framework in ("torch", "cupy") else out_framework
        self.stream: Callable[[int], int] = _STREAM_GETTERS[stream_framework]()
        self.empty, self.ptr = _ALLOCATORS[out_framework]()
        if framework == "torch" and out_framework == "torch":
            self.device = _torch_device  # the input's own torch.device serves the allocation
        elif framework == "cupy":
            self.device = self._cupy_device

    def _out_device(self, index: int) -> Any:
        dev = self._devices.get(index)
        if dev is None:
            dev = self._devices[index] = _DEVICE_OBJECTS[self.out_framework](index)
        return dev

    def _cupy_device(self, x: Any) -> tuple[int, Any]:
        index = x.device.id
        return index, self._out_device(index)

    def _generic_device(self, x: Any) -> tuple[int, Any]:
        if type(x) is int:  # a raw pointer: the current device
            from .._lib import cuda

            index = cuda.current_device()
            return index, self._out_device(index)
        probe = getattr(x, "__dlpack_device__", None)
        if probe is not None:
            code, index = probe()
            where = _DLPACK_DEVICES.get(int(code), f"DLPack device {int(code)}")
        else:
            info = interop.describe(x)
            where, index = info.device_type, info.device_id
        if where not in ("cuda", "cuda_managed"):
            raise _NotOnGpu(self.framework, where)
        return int(index), self._out_device(int(index))


_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 13: "cuda_managed"}


def _torch_device(x: Any) -> tuple[int, Any]:
    dev = x.device
    if dev.type != "cuda":
        raise _NotOnGpu("torch", dev.type)
    return dev.index, dev


def _torch_stream_getter() -> Callable[[int], int]:
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch.compile's code calls
    if raw is not None:
        return raw
    return lambda index: int(torch.cuda.current_stream(index).cuda_stream)


def _cupy_stream_getter() -> Callable[[int], int]:
    import cupy

    def current(index: int) -> int:
        try:
            return int(cupy.cuda.get_current_stream(index).ptr)
        except TypeError:  # CuPy without the device argument
            with cupy.cuda.Device(index):
                return int(cupy.cuda.get_current_stream().ptr)

    return current


_STREAM_GETTERS: dict[str, Callable[[], Callable[[int], int]]] = {
    "torch": _torch_stream_getter, "cupy": _cupy_stream_getter}


def _torch_allocator() -> tuple[Callable[[OutSpec, Any], Any], Callable[[Any], int]]:
    import torch

    dtypes: dict[data_type, Any] = {}
    empty_strided = torch.empty_strided

    def empty(spec: OutSpec, device: Any) -> Any:
        dt = dtypes.get(spec.dtype)
        if dt is None:
            dt = dtypes[spec.dtype] = interop.torch_dtype(spec.dtype)
        return empty_strided(spec.dims, spec.strides, dtype=dt, device=device)

    return empty, _torch_ptr


def _torch_ptr(t: Any) -> int:
    return t.data_ptr()


def _cupy_allocator() -> tuple[Callable[[OutSpec, Any], Any], Callable[[Any], int]]:
    def empty(spec: OutSpec, device: Any) -> Any:
        return interop.empty_like_framework("cupy", spec.dims, spec.strides, spec.dtype, device)

    return empty, _cupy_ptr


def _cupy_ptr(a: Any) -> int:
    return int(a.data.ptr)


_ALLOCATORS: dict[str, Callable[[], tuple[Callable[[OutSpec, Any], Any], Callable[[Any], int]]]] = {
    "torch": _torch_allocator, "cupy": _cupy_allocator}


def _torch_device_object(index: int) -> Any:
    import torch

    return torch.device("cuda", index)


_DEVICE_OBJECTS: dict[str, Callable[[int], Any]] = {"torch": _torch_device_object, "cupy": lambda index: index}


def out_framework(policy: str, framework: str) -> str:
    """The framework that allocates outputs for inputs of ``framework`` (see the module doc)."""
    if policy in ("torch", "cupy"):
        return policy
    if framework == "torch" or (policy == "auto" and "torch" in sys.modules):
        return "torch"
    if framework == "cupy":
        return "cupy"
    for substitute in ("torch", "cupy"):
        if substitute in sys.modules or importlib.util.find_spec(substitute) is not None:
            return substitute
    raise ExecutionInputError(f"cannot allocate outputs for {framework} inputs: install torch or cupy, "
                              "or give the outputs in a dict call")


# -- the executor ---------------------------------------------------------------------------

class Executor:
    """Runs one built pygraph for the wrapper; made when the ``with`` block builds it."""

    def __init__(self, graph: pygraph, handle: Any, policy: str, allocate_workspace: bool) -> None:
        self.graph = graph
        self.handle = handle  # Graph(handle=...): used as given
        self.policy = policy
        self.allocate_workspace = allocate_workspace
        self._frames: dict[type, Frame] = {}
        self._views: dict[tuple[int, int], Any] = {}  # (uid, address) -> OutputAt (or the int address)
        self._workspaces: dict[Any, tuple[int, Any]] = {}  # stream -> (size, buffer or None)
        self._workspace_size: int | None = None
        self._execute = graph.execute

    def frame(self, x: Any) -> Frame:
        frame = self._frames.get(type(x))
        if frame is None:
            framework = "int" if type(x) is int else interop.describe(x).framework
            frame = self._frames[type(x)] = Frame(framework, out_framework(self.policy, framework))
        return frame

    # -- the hot path -----------------------------------------------------------------------

    def call(self, plan: IoPlan, args: tuple[Any, ...], handle: Any, workspace: Any, stream: Any) -> Any:
        """``graph(x, w, ...)``: returns the output, or a tuple of them."""
        pack, frame, index, device, outs = self.positional_pack(plan, args)
        self.run(pack, frame, index, device, handle, workspace, stream)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def positional_pack(self, plan: IoPlan, args: tuple[Any, ...]) -> tuple[dict[int, Any], Frame, int, Any, list[Any]]:
        """The variant pack of a positional call, with its outputs allocated."""
        position = plan.device_inputs[0] if plan.device_inputs else None
        x = args[position] if position is not None else 0
        frame = self._frames.get(type(x)) or self.frame(x)
        try:
            index, device = frame.device(x)
        except _NotOnGpu as exc:
            raise ExecutionInputError(f"{plan.in_names[position]}: {exc}") from None
        pack = dict(zip(plan.in_uids, args))
        empty, ptr, views = frame.empty, frame.ptr, self._views
        outs = []
        for spec in plan.outs:
            y = empty(spec, device)
            address = ptr(y)
            view = views.get((spec.uid, address))
            pack[spec.uid] = view if view is not None else self._view(spec, address)
            outs.append(y)
        return pack, frame, index, device, outs

    def run(self, pack: dict[int, Any], frame: Frame, index: int, device: Any, handle: Any, workspace: Any,
            stream: Any) -> None:
        handle, s = self.handle_for(frame, index, handle, stream)
        if workspace is None and self.allocate_workspace:
            held = self._workspaces.get(s)
            workspace = held[1] if held is not None else self._new_workspace(s, frame, device)
        self._execute(pack, workspace, handle)

    def handle_for(self, frame: Frame, index: int, handle: Any, stream: Any) -> tuple[Any, Any]:
        """The handle to run on, its stream set as the call asks; and that stream."""
        if handle is None:
            handle = self.handle
        if handle is None:  # this thread's handle for the inputs' device, on the current stream
            handle = default_handle(index)
            s = frame.stream(index) if stream is None else stream_ptr(stream)
            if handle._stream != s:  # Handle.set_stream records the stream it last set
                handle.set_stream(s)
        elif stream is not None:
            s = stream_ptr(stream)
            if not isinstance(handle, Handle) or handle._stream != s:
                _set_stream(handle, s)
        else:
            s = handle._stream if isinstance(handle, Handle) else None  # the user's stream, as it is
        return handle, s

    def autotune(self, plan: IoPlan, args: tuple[Any, ...], handle: Any, warmup: int, repeats: int) -> Any:
        """Time every candidate plan on these inputs (and fresh outputs); keep the fastest."""
        pack, frame, index, _device, _outs = self.positional_pack(plan, args)
        handle, _ = self.handle_for(frame, index, handle, None)
        report = self.graph.autotune(pack, None, handle, warmup, repeats)
        self._workspace_size = None  # the chosen plan may need another size
        self._workspaces.clear()
        return report

    def _view(self, spec: OutSpec, address: int) -> Any:
        try:
            view: Any = OutputAt(spec, address)
        except ValueError:  # no framework dtype (packed sub-byte types): the raw address
            view = address
        views = self._views
        if len(views) >= _VIEWS_KEPT:
            del views[next(iter(views))]
        views[(spec.uid, address)] = view
        return view

    def _new_workspace(self, stream: Any, frame: Frame, device: Any) -> Any:
        """A workspace per stream (calls on two streams must not share one), made once in the
        outputs' framework, grown if a larger one is ever needed; None when the plan needs none."""
        if self._workspace_size is None:
            self._workspace_size = int(self.graph.get_workspace_size())
        size = self._workspace_size
        held = self._workspaces.get(stream)
        if held is not None and held[0] >= size:
            return held[1]
        buffer = frame.empty(OutSpec(0, "workspace", (size,), (1,), data_type.UINT8), device) if size else None
        self._workspaces[stream] = (size, buffer)
        return buffer

    # -- dict calls -------------------------------------------------------------------------

    def call_dict(self, plan: IoPlan, buffers: dict[Any, Any], uid_of: Callable[[Any], int],
                  handle: Any, workspace: Any, stream: Any) -> dict[Any, Any]:
        """``graph({name: tensor, ...})``: outputs not given are allocated and added to the dict."""
        pack: dict[int, Any] = {}
        key_of: dict[int, Any] = {}
        for key, value in buffers.items():
            uid = uid_of(key)
            if uid in key_of and buffers[key_of[uid]] is not value:
                raise ExecutionInputError(f"{key_of[uid]!r} and {key!r} name the same tensor "
                                          f"({_name(plan, uid)}) with different buffers")
            key_of[uid] = key
            pack[uid] = value
        missing = [name for uid, name in zip(plan.in_uids, plan.in_names) if uid not in pack]
        if missing:
            raise ExecutionInputError(f"the dict lacks the graph inputs {missing}")
        x = next((pack[plan.in_uids[i]] for i in plan.device_inputs if type(pack[plan.in_uids[i]]) is not int), 0)
        frame = self.frame(x)
        try:
            index, device = frame.device(x)
        except _NotOnGpu as exc:
            name = next(n for i, n in zip(plan.in_uids, plan.in_names) if pack[i] is x)
            raise ExecutionInputError(f"{name}: {exc}") from None
        for spec in plan.outs:
            if spec.uid not in pack:
                y = frame.empty(spec, device)
                buffers[spec.name] = y
                address = frame.ptr(y)
                pack[spec.uid] = self._views.get((spec.uid, address)) or self._view(spec, address)
        self.run(pack, frame, index, device, handle, workspace, stream)
        return buffers


def _name(plan: IoPlan, uid: int) -> str:
    names: Mapping[int, str] = {**dict(zip(plan.in_uids, plan.in_names)), **{o.uid: o.name for o in plan.outs}}
    return names.get(uid, f"uid {uid}")
