"""A captured execute's kernels launched again directly: the nodes of a CUDA graph that holds
only kernels and memsets, read once (function, grid, block, shared memory, a copy of every
parameter's bytes, the launch attributes that differ from the defaults, programmatic
dependencies) and issued later in dependency order with the driver's own launch calls
(``cuLaunchKernelEx``, ``cuMemsetD2D*Async``) on the caller's stream.

Such a launch is what cuDNN's execute issues for that pack, without working it out again: it
costs the host a few driver calls, and on the GPU each kernel follows the work before it as
cuDNN's own launch would (a graph launch, by contrast, adds its own latency behind queued work).
The parameters are copied at capture, so the buffers, workspace and plan the captured execute
named must outlive the `Launches` (as they outlive the captured graph). Reading a graph needs
``cuFuncGetParamInfo`` (a CUDA 12.4 driver); where anything cannot be read back exactly (a
kernel given its parameters as one ``extra`` buffer, a node of another type, an edge whose
kind the driver cannot tell) there is no `Launches`, and the graph is launched as a whole.

``LaunchConfig`` and ``LaunchAttribute`` are ``CUlaunchConfig`` / ``CUlaunchAttribute`` of
cuda.h, so that a launch passes prepared structs through ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Sequence
from typing import Any


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id and its value, a 64-byte union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_ubyte * 64)]


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


# CUlaunchAttributeID values valid for graph nodes (cuda.h) that a kernel's launch must repeat;
# the others are for streams or launches only, graph-only (device-updatable nodes), events, or
# hints to the L2 cache. Every CUDA 12 driver answers for the first six: a node whose answer is
# missing is not read back (a cooperative or cluster kernel launched without its attribute
# could hang); the last two are newer (12.8), and a driver that does not know them set neither.
ATTRIBUTES = {"COOPERATIVE": 2, "CLUSTER_DIMENSION": 4, "CLUSTER_SCHEDULING_POLICY_PREFERENCE": 5, "PRIORITY": 8,
              "MEM_SYNC_DOMAIN_MAP": 9, "MEM_SYNC_DOMAIN": 10, "PREFERRED_CLUSTER_DIMENSION": 11,
              "PREFERRED_SHARED_MEMORY_CARVEOUT": 14}
_NEWER_ATTRIBUTES = frozenset({11, 14})
PROGRAMMATIC_STREAM_SERIALIZATION = 6
_NODE_KERNEL, _NODE_MEMSET, _NODE_EMPTY = 0, 2, 5  # CUgraphNodeType
_EDGE_DEFAULT, _EDGE_PROGRAMMATIC = 0, 1  # CUgraphDependencyType
_INVALID_VALUE = 1  # CUresult of cuFuncGetParamInfo past a function's last parameter


def topological(count: int, edges: Sequence[tuple[int, int]]) -> list[int] | None:
    """Node indices in dependency order (``edges``: (from, to) index pairs), ties in index order;
    None where the edges close a cycle."""
    waiting = [0] * count
    after: list[list[int]] = [[] for _ in range(count)]
    for a, b in edges:
        after[a].append(b)
        waiting[b] += 1
    ready = [i for i in range(count) if not waiting[i]]
    order: list[int] = []
    while ready:
        i = min(ready)
        ready.remove(i)
        order.append(i)
        for j in after[i]:
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    return order if len(order) == count else None


@functools.cache
def _driver_calls() -> tuple[Any, Any, Any, Any]:
    """cuLaunchKernelEx and cuMemsetD2D{8,16,32}Async through ctypes (the GIL released)."""
    lib = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    ex = lib.cuLaunchKernelEx
    ex.restype = ctypes.c_int
    ex.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    memsets = []
    for name, unit in (("cuMemsetD2D8Async", ctypes.c_ubyte), ("cuMemsetD2D16Async", ctypes.c_ushort),
                       ("cuMemsetD2D32Async", ctypes.c_uint)):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t, unit, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
        memsets.append(fn)
    return ex, memsets[0], memsets[1], memsets[2]


class _Kernel:
    __slots__ = ("config", "func", "params", "keep")

    def __init__(self, config: LaunchConfig, func: int, params: Any, keep: tuple[Any, ...]) -> None:
        self.config, self.func, self.params, self.keep = config, func, params, keep


class _Memset:
    __slots__ = ("dst", "pitch", "value", "size", "width", "height")

    def __init__(self, dst: int, pitch: int, value: int, size: int, width: int, height: int) -> None:
        self.dst, self.pitch, self.value, self.size, self.width, self.height = dst, pitch, value, size, width, height


class Launches:
    """The steps of one captured execute; ``launch(stream)`` issues them on ``stream``."""

    __slots__ = ("steps", "_lock")

    def __init__(self, steps: list[_Kernel | _Memset]) -> None:
        self.steps = steps
        self._lock = threading.Lock()  # the prepared configs take the stream of one launch at a time

    def launch(self, stream: int) -> bool:
        """Issue every step on ``stream``; False if the driver refused one (the steps before it
        were issued: the caller runs the whole execute instead, which writes what they wrote)."""
        ex, d8, d16, d32 = _driver_calls()
        with self._lock:
            for step in self.steps:
                if type(step) is _Kernel:
                    step.config.hStream = stream
                    if ex(ctypes.byref(step.config), step.func, step.params, None):
                        return False
                else:
                    fn = d8 if step.size == 1 else d16 if step.size == 2 else d32  # type: ignore[union-attr]
                    if fn(step.dst, step.pitch, step.value, step.width, step.height, stream):  # type: ignore[union-attr]
                        return False
        return True


def from_graph(graph: int) -> Launches | None:
    """The steps of the (not instantiated) CUDA graph at ``graph``, or None where one cannot be
    read back exactly (see the module's note). Needs cuda-bindings and a driver."""
    try:
        from cuda.bindings import driver as drv

        return _read(drv, drv.CUgraph(graph))
    except Exception:  # noqa: BLE001 - anything unreadable: the graph is launched as a whole
        return None


def _ok(result: Any) -> Any:
    if int(result[0]):
        raise RuntimeError(f"driver call failed: {result[0]}")
    return result[1:] if len(result) > 2 else result[1]


def _read(drv: Any, graph: Any) -> Launches | None:
    nodes, count = _ok(drv.cuGraphGetNodes(graph, 0))
    nodes = list(_ok(drv.cuGraphGetNodes(graph, count))[0])[:count]
    index = {int(n): i for i, n in enumerate(nodes)}
    listed = drv.cuGraphGetEdges(graph, 0)
    if int(listed[0]):
        return None
    edges: list[tuple[int, int]] = []
    programmatic: dict[int, int] = {}  # target -> source of a programmatic edge
    if listed[-1]:
        listed = drv.cuGraphGetEdges(graph, listed[-1])
        if int(listed[0]) or len(listed) < 5:  # no edge kinds from this driver or binding
            return None
        _, sources, targets, data, n_edges = listed
        for a, b, e in list(zip(sources, targets, data))[:n_edges]:
            edges.append((index[int(a)], index[int(b)]))
            kind = int(e.type)
            if kind != _EDGE_DEFAULT:
                # programmatic stream serialization (the upstream kernel's trigger or end, port 0
                # or 1); a launch-completion port or another kind has no stream launch to match
                if kind != _EDGE_PROGRAMMATIC or int(e.from_port) not in (0, 1) or int(e.to_port):
                    return None
                programmatic[index[int(b)]] = index[int(a)]
    order = topological(len(nodes), edges)
    if order is None:
        return None
    at = {node: k for k, node in enumerate(order)}
    incoming = [0] * len(nodes)
    for _, b in edges:
        incoming[b] += 1
    for target, source in programmatic.items():  # on one stream it may overlap only its one upstream kernel
        if incoming[target] != 1 or at[source] != at[target] - 1:
            return None
    steps: list[_Kernel | _Memset] = []
    for i in order:
        kind = int(_ok(drv.cuGraphNodeGetType(nodes[i])))
        if kind == _NODE_KERNEL:
            kernel = _kernel(drv, nodes[i], i in programmatic)
            if kernel is None:
                return None
            steps.append(kernel)
        elif kind == _NODE_MEMSET:
            p = _ok(drv.cuGraphMemsetNodeGetParams(nodes[i]))
            if int(p.elementSize) not in (1, 2, 4):
                return None
            steps.append(_Memset(int(p.dst), int(p.pitch), int(p.value), int(p.elementSize), int(p.width),
                                 int(p.height)))
        elif kind != _NODE_EMPTY:
            return None
    return Launches(steps) if steps else None


def _kernel(drv: Any, node: Any, programmatic: bool) -> _Kernel | None:
    p = _ok(drv.cuGraphKernelNodeGetParams(node))
    func = p.func if int(p.func) else _ok(drv.cuKernelGetFunction(p.kern))
    sizes: list[int] = []
    while True:
        got = drv.cuFuncGetParamInfo(func, len(sizes))
        if int(got[0]) == _INVALID_VALUE:  # past the last parameter
            break
        if int(got[0]):  # the driver cannot say (older than CUDA 12.4): the parameters are unknown
            return None
        sizes.append(int(got[2]))
    base = int(p.kernelParams)
    if sizes and not base:  # parameters given as one `extra` buffer
        return None
    values = [ctypes.create_string_buffer(ctypes.string_at(ctypes.c_void_p.from_address(base + 8 * k).value or 0, size),
                                      max(size, 1)) for k, size in enumerate(sizes)]
    params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    attrs = []
    for attr in ATTRIBUTES.values():
        try:
            got = drv.cuGraphKernelNodeGetAttribute(node, drv.CUkernelNodeAttrID(attr))
        except ValueError:  # an id this cuda-bindings does not know
            got = (1,)
        if int(got[0]):
            if attr in _NEWER_ATTRIBUTES:
                continue
            return None
        raw = ctypes.string_at(got[1].getPtr(), 64)
        if raw.strip(b"\0"):
            attrs.append(LaunchAttribute(attr, b"", (ctypes.c_ubyte * 64).from_buffer_copy(raw)))
    if programmatic:
        allowed = (ctypes.c_ubyte * 64)()
        allowed[0] = 1  # programmaticStreamSerializationAllowed
        attrs.append(LaunchAttribute(PROGRAMMATIC_STREAM_SERIALIZATION, b"", allowed))
    table = (LaunchAttribute * max(len(attrs), 1))(*attrs)
    config = LaunchConfig(int(p.gridDimX), int(p.gridDimY), int(p.gridDimZ), int(p.blockDimX), int(p.blockDimY),
                          int(p.blockDimZ), int(p.sharedMemBytes), None, table if attrs else None, len(attrs))
    return _Kernel(config, int(func), ctypes.addressof(params), (values, params, table))
