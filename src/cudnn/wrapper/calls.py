"""Calling a built ``cudnn.Graph``: variant pack, output allocation, stream, workspace.

Everything that can be known before the first call is in an ``IoPlan`` (uids in call order,
what each output looks like). Per input type a ``Frame`` is made once: how to read the
device, which framework allocates the outputs, which stream is current.

The first call with a set of input objects is checked in full by the Runner (device, dtype,
dims, strides, extent, alignment of each). Those objects are then known: while they live,
and as long as their data stays at the addresses it had (a tensor resized or re-pointed in
place is checked again), a call with them allocates the outputs, looks up the backend
variant pack made for the outputs' addresses (framework allocators hand the same addresses
out again), and makes one ``cudnnBackendExecute``.

Outputs are allocated by the inputs' framework, except that while PyTorch is loaded
outputs are torch tensors (as the official wrapper always returns; seed 000 compares a
CuPy-fed graph's result with ``torch.testing.assert_close``). ``output_framework=`` says
otherwise: "inputs" (CuPy in, CuPy out), "torch" or "cupy". Frameworks that cannot make a
writable empty array here (JAX, Numba, raw DLPack producers) get torch tensors, else CuPy.
"""

from __future__ import annotations

import importlib.util
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._graph.model.graph_errors import ExecutionInputError
from .._graph.pygraph import pygraph
from .._graph.run.packs import Entry
from .._graph.run.runner import Runner
from .._lib.enums import data_type
from ..backend.handle import Handle, default_handle, set_stream
from ..interop import tensors as interop
from ..interop.streams import stream_getter, stream_ptr

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


_KNOWN_KEPT = 32  # input sets remembered per graph (the oldest is dropped beyond)


class _NotOnGpu(Exception):
    def __init__(self, framework: str, where: str) -> None:
        super().__init__(f"a {framework} tensor on {where}; the graph reads GPU memory: move it to the GPU")


# -- frames: per input type ------------------------------------------------------------------

class Frame:
    """How inputs of one type are handled: device, current stream, output allocation."""

    __slots__ = ("_makers", "device", "framework", "in_ptr", "out_framework", "out_ptr", "stream")

    def __init__(self, framework: str, out_framework: str) -> None:
        self.framework = framework
        self.out_framework = out_framework
        self._makers: dict[tuple[OutSpec, int], Callable[[], Any]] = {}
        self.device: Callable[[Any], int] = self._generic_device
        self.stream = stream_getter(framework if framework in ("torch", "cupy") else out_framework)
        self.in_ptr = _pointer_getter(framework)  # None: such inputs always take the checked path
        self.out_ptr = _pointer_getter(out_framework)
        if framework == "torch":
            self.device = _torch_device
        elif framework == "cupy":
            self.device = _cupy_device

    def maker(self, spec: OutSpec, index: int) -> Callable[[], Any]:
        """A zero-argument allocator of output ``spec`` on device ``index`` (made once)."""
        make = self._makers.get((spec, index))
        if make is None:
            make = self._makers[spec, index] = interop.allocator(self.out_framework, spec.dims, spec.strides,
                                                                  spec.dtype, index)
        return make

    def _generic_device(self, x: Any) -> int:
        if type(x) is int:  # a raw pointer: the current device
            from .._lib import cuda

            return cuda.current_device()
        probe = getattr(x, "__dlpack_device__", None)
        if probe is not None:
            code, index = probe()
            where = _DLPACK_DEVICES.get(int(code), f"DLPack device {int(code)}")
        else:
            info = interop.describe(x)
            where, index = info.device_type, info.device_id
        if where not in ("cuda", "cuda_managed"):
            raise _NotOnGpu(self.framework, where)
        return int(index)


_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 13: "cuda_managed"}


def _torch_device(x: Any) -> int:
    dev = x.device
    if dev.type != "cuda":
        raise _NotOnGpu("torch", dev.type)
    return int(dev.index)


def _cupy_device(x: Any) -> int:
    return int(x.device.id)


def _pointer_getter(framework: str) -> Any:
    """The fastest read of a tensor's address for a framework that allocates (None for others)."""
    if framework == "torch":
        import torch

        return torch.Tensor.data_ptr
    return _cupy_ptr if framework == "cupy" else None


def _cupy_ptr(a: Any) -> int:
    return int(a.data.ptr)


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

class _Known:
    """A set of input objects checked before, and what a repeated call with them needs.

    ``last`` is the backend pack of the latest call, with the output and workspace addresses it
    binds: the caching allocators hand the same blocks out again call after call, so a repeated
    call compares two numbers instead of hashing the whole binding (the Runner's pack cache
    remains the one that makes and finds packs)."""

    __slots__ = ("frame", "in_ptr", "index", "last", "last_out", "last_workspace", "make", "makers", "out_ptr",
                 "plan", "ptr_list", "ptrs", "refs", "runner", "uids")

    def __init__(self, plan: IoPlan, frame: Frame, index: int, ptrs: tuple[int, ...], runner: Runner) -> None:
        self.plan, self.frame, self.index, self.ptrs, self.runner = plan, frame, index, ptrs, runner
        self.ptr_list = list(ptrs)  # what a list display of the inputs' addresses is compared with
        self.in_ptr = frame.in_ptr
        self.out_ptr = frame.out_ptr
        self.makers = tuple(frame.maker(spec, index) for spec in plan.outs)
        self.make = self.makers[0] if len(self.makers) == 1 else None  # the common case: one output
        self.uids = plan.in_uids + tuple(spec.uid for spec in plan.outs)  # the binding key's uids
        self.refs: list[Any] = []  # weak references whose callbacks forget this entry
        self.last: Entry | None = None
        self.last_out: Any = None  # the output address (a tuple of them for several outputs)
        self.last_workspace = 0


class Executor:
    """Runs one built pygraph for the wrapper; made when the ``with`` block builds it.

    The first call with a set of input objects takes the checked path (``call``): the plan's
    Runner reads and checks every buffer. Afterwards those objects (by identity, while they
    live, and at the addresses they had) are known: ``call_known`` allocates the outputs, finds
    the backend variant pack for the addresses in the Runner's pack cache, and makes one
    ``cudnnBackendExecute``.
    """

    def __init__(self, graph: pygraph, handle: Any, policy: str, allocate_workspace: bool) -> None:
        self.graph = graph
        self.selected = graph.runner  # the selected plan's Runner (bound once: asked on every call)
        self.handle = handle  # Graph(handle=...): used as given
        self.policy = policy
        self.allocate_workspace = allocate_workspace
        self._frames: dict[type, Frame] = {}
        self._workspaces: dict[Any, Any] = {}  # stream -> buffer (None when the plan needs none)
        self._workspace_at: dict[Any, int] = {}  # stream -> that buffer's address (read once: it is ours)
        self.known: dict[tuple[int, ...], _Known] = {}  # ids of the inputs -> _Known
        self._runner: Runner | None = None  # the Runner the known inputs and workspaces belong to

    def frame(self, x: Any) -> Frame:
        frame = self._frames.get(type(x))
        if frame is None:
            framework = "int" if type(x) is int else interop.describe(x).framework
            frame = self._frames[type(x)] = Frame(framework, out_framework(self.policy, framework))
        return frame

    def forget(self) -> None:
        """Drop what is known of earlier inputs (the io tuples changed)."""
        self.known.clear()

    # -- the hot path -----------------------------------------------------------------------

    def call_known(self, known: _Known, args: tuple[Any, ...], handle: Any, stream: Any) -> Any:
        """``graph(x, w, ...)`` with known inputs: returns the output, or a tuple of them."""
        runner = known.runner  # the Runner of every known set (they are forgotten when it changes)
        if runner is not self.selected() or list(map(known.in_ptr, args)) != known.ptr_list:
            return self.call(known.plan, args, handle, None, stream)  # another plan, or an input moved
        if handle is None:
            handle = self.handle
        if stream is None and type(handle) is Handle:
            s = handle.last_stream
        else:  # this thread's handle on the current stream, a raw cudnnHandle_t, or a stream given
            handle, s = self.handle_for(known.frame, known.index, handle, stream)
        make = known.make
        if make is not None:
            y = make()
            out = known.out_ptr(y)
        else:
            y = tuple(make() for make in known.makers)
            out = tuple(map(known.out_ptr, y))
        workspace_at = self._workspace_at.get(s, 0)
        entry = known.last
        if entry is None or out != known.last_out or workspace_at != known.last_workspace:
            ptrs = (*known.ptrs, out) if make is not None else (*known.ptrs, *out)
            entry = runner.prepared((known.uids, ptrs, workspace_at))
            if entry is None:  # outputs at new addresses (or a new stream): the Runner checks and packs
                pack = dict(zip(known.uids, (*args, *ptrs[len(args):])))
                workspace = self._workspace(s, known.frame, known.index) if self.allocate_workspace else None
                runner.run(pack, workspace, handle)
                workspace_at = self._workspace_at.get(s, 0)
                entry = runner.prepared((known.uids, ptrs, workspace_at))
                if entry is None:  # a pack the Runner keys otherwise (graph constants): found again next call
                    return y
            known.last, known.last_out, known.last_workspace = entry, out, workspace_at
        runner.execute(entry, handle)
        return y

    # -- the checked path -------------------------------------------------------------------

    def call(self, plan: IoPlan, args: tuple[Any, ...], handle: Any, workspace: Any, stream: Any) -> Any:
        """``graph(x, w, ...)``: the Runner checks every buffer it has not seen; then the
        inputs are known for later calls (unless a workspace is given)."""
        pack, frame, index, outs = self.positional_pack(plan, args)
        runner = self._run(pack, frame, index, handle, workspace, stream)
        if workspace is None and frame.in_ptr is not None \
                and len(plan.device_inputs) == len(args) and all(type(a) is type(args[0]) for a in args):
            self._learn(plan, args, frame, index, runner)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, pack: dict[int, Any], frame: Frame, index: int, handle: Any, workspace: Any,
             stream: Any) -> Runner:
        """Run ``pack`` through the selected plan's Runner (which checks buffers it has not seen)
        on the handle and stream the call asks for; returns that Runner."""
        runner = self._current_runner()
        handle, s = self.handle_for(frame, index, handle, stream)
        if workspace is None and self.allocate_workspace:
            workspace = self._workspace(s, frame, index)
        runner.run(pack, workspace, handle)
        return runner

    def positional_pack(self, plan: IoPlan, args: tuple[Any, ...]) -> tuple[dict[int, Any], Frame, int, list[Any]]:
        """The variant pack of a positional call, with its outputs allocated (by address)."""
        position = plan.device_inputs[0] if plan.device_inputs else None
        x = args[position] if position is not None else 0
        frame = self.frame(x)
        try:
            index = frame.device(x)
        except _NotOnGpu as exc:
            what = plan.in_names[position] if position is not None else "inputs"
            raise ExecutionInputError(f"{what}: {exc}") from None
        pack = dict(zip(plan.in_uids, args))
        outs = []
        for spec in plan.outs:
            y = frame.maker(spec, index)()
            pack[spec.uid] = frame.out_ptr(y)  # our own allocation: the address says all
            outs.append(y)
        return pack, frame, index, outs

    def _current_runner(self) -> Runner:
        """The Runner of the selected plan; known inputs and workspaces of an earlier one are dropped."""
        runner = self.graph.runner()
        if runner is not self._runner:
            if self._runner is not None:
                self.known.clear()
                self._workspaces.clear()  # the new plan may need another size
                self._workspace_at.clear()
            self._runner = runner
        return runner

    def _learn(self, plan: IoPlan, args: tuple[Any, ...], frame: Frame, index: int, runner: Runner) -> None:
        """Remember these checked inputs (forgotten when one of them dies)."""
        key = tuple(map(id, args))
        if key in self.known:
            return
        try:
            ptrs = tuple(map(frame.in_ptr, args))
        except Exception:  # noqa: BLE001 - an input that is not what its type promised: stay on the checked path
            return
        known = _Known(plan, frame, index, ptrs, runner)
        forget = _forgetter(self, key)
        try:
            known.refs = [weakref.ref(a, forget) for a in args]
        except TypeError:
            return  # objects without weak references: every call takes the checked path
        known_sets = self.known
        if len(known_sets) >= _KNOWN_KEPT:
            del known_sets[next(iter(known_sets))]
        known_sets[key] = known

    def handle_for(self, frame: Frame, index: int, handle: Any, stream: Any) -> tuple[Any, Any]:
        """The handle to run on, its stream set as the call asks; and that stream."""
        if handle is None:
            handle = self.handle
        if handle is None:  # this thread's handle for the inputs' device, on the current stream
            handle = default_handle(index)
            s: int | None = frame.stream(index) if stream is None else stream_ptr(stream)
            if handle.last_stream != s:
                handle.set_stream(s)
        elif stream is not None:
            s = stream_ptr(stream)
            if not isinstance(handle, Handle) or handle.last_stream != s:
                set_stream(handle, s)
        else:
            s = handle.last_stream if isinstance(handle, Handle) else None  # the user's stream, as it is
        return handle, s

    def autotune(self, plan: IoPlan, args: tuple[Any, ...], handle: Any, warmup: int, repeats: int) -> Any:
        """Time every candidate plan on these inputs (and fresh outputs); keep the fastest."""
        pack, frame, index, _outs = self.positional_pack(plan, args)
        handle, _ = self.handle_for(frame, index, handle, None)
        report = self.graph.autotune(pack, None, handle, warmup, repeats)
        self._current_runner()  # the chosen plan's: what was known for the earlier one is dropped
        return report

    def _workspace(self, stream: Any, frame: Frame, index: int) -> Any:
        """A workspace per stream (calls on two streams must not share one), made once in the
        outputs' framework; None when the plan needs none."""
        if stream in self._workspaces:
            return self._workspaces[stream]
        size = int(self.graph.get_workspace_size())
        buffer = frame.maker(OutSpec(0, "workspace", (size,), (1,), data_type.UINT8), index)() if size else None
        self._workspaces[stream] = buffer
        if buffer is not None:
            self._workspace_at[stream] = frame.out_ptr(buffer)
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
            index = frame.device(x)
        except _NotOnGpu as exc:
            name = next(n for i, n in zip(plan.in_uids, plan.in_names) if pack[i] is x)
            raise ExecutionInputError(f"{name}: {exc}") from None
        for spec in plan.outs:
            if spec.uid not in pack:
                y = buffers[spec.name] = frame.maker(spec, index)()
                pack[spec.uid] = frame.out_ptr(y)
        self._run(pack, frame, index, handle, workspace, stream)
        return buffers


def _forgetter(executor: Executor, key: tuple[int, ...]) -> Callable[[Any], None]:
    """A weak-reference callback that forgets the known inputs ``key`` (the executor held weakly)."""
    ref = weakref.ref(executor)

    def forget(_: Any) -> None:
        owner = ref()
        if owner is not None:
            owner.known.pop(key, None)

    return forget


def _name(plan: IoPlan, uid: int) -> str:
    names: Mapping[int, str] = {**dict(zip(plan.in_uids, plan.in_names)), **{o.uid: o.name for o in plan.outs}}
    return names.get(uid, f"uid {uid}")
