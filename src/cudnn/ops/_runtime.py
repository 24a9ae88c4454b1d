"""What every torch op of `cudnn.ops` shares: dtype tables, argument checks, a bounded graph
cache per device, and one execute on torch's current stream with a workspace from torch's
caching allocator.

A cached entry is a built ``pygraph`` and its cudnn tensors by role; the key is the op name
plus the shapes, strides, dtypes and options the graph was built for (the device is the
cache's own key). Building happens once per key; a call is a dict lookup, one workspace
allocation and one ``graph.execute``. With ``torch.backends.cudnn.benchmark`` set, as for
torch's own cuDNN calls, a build also times the heuristics' leading candidate plans once on
scratch buffers and keeps the fastest (`tune`); otherwise the heuristics' first plan runs.

Eager calls skip torch's dispatcher (`eager`): a registered custom op costs tens of
microseconds of Python per call (dispatch, autograd wrapper, alias checks), more than the
work itself at small sizes. So the op functions key the cache on the raw arguments first,
check the arguments only when they miss (a key that was built has passed the checks), and
run the kernel directly, through a plain ``torch.autograd.Function`` when a gradient is
wanted. Under torch.compile, tracing, dispatch modes, functorch transforms or tensor
subclasses the registered op runs instead, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import torch

from .._graph.model.graph_errors import GraphError, GraphNotSupportedError
from .._graph.model.tensor import Tensor
from .._graph.pygraph import pygraph
from .._graph.records.plan_reuse import TUNED_SOURCE
from .._lib import loader
from .._lib.enums import data_type, heur_mode
from .._lib.status import CudnnError, FeatureUnavailableError, cudnnGraphNotSupportedError
from ..backend.handle import Handle, default_handle
from ..log import get_logger

CUDNN_DTYPE: dict[torch.dtype, data_type] = {
    torch.float16: data_type.HALF, torch.bfloat16: data_type.BFLOAT16, torch.float32: data_type.FLOAT,
    torch.int32: data_type.INT32, torch.int64: data_type.INT64, torch.uint8: data_type.UINT8,
}
TORCH_DTYPE: dict[data_type, torch.dtype] = {v: k for k, v in CUDNN_DTYPE.items()}
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
HALVES = (torch.float16, torch.bfloat16)
HEURISTICS = [heur_mode.A, heur_mode.FALLBACK]
CACHE_SIZE = 128  # built graphs kept per device
TUNE_PLANS = 16  # candidates timed per graph in benchmark mode (batch norm's are compiled at build)


class OpError(GraphError):
    """Bad input to a `cudnn.ops` op: names the op and the argument, expected vs got."""


class OpNotSupportedError(OpError, GraphNotSupportedError):
    """A `cudnn.ops` call cuDNN has no engine for: an ``OpError`` naming the op and its input, and a
    ``cudnnGraphNotSupportedError``."""


# -- argument checks ----------------------------------------------------------------------------

def check_tensor(op: str, name: str, t: Any, dtypes: tuple[torch.dtype, ...] = FLOATS,
                 rank: int | tuple[int, ...] | None = None, device: torch.device | None = None) -> None:
    """Refuse a non-tensor, a wrong dtype, rank or device, before any kernel runs."""
    if not isinstance(t, torch.Tensor):
        raise OpError(f"cudnn.ops.{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise OpError(f"cudnn.ops.{op}: {name}: expected dtype in "
                      f"{[str(d).removeprefix('torch.') for d in dtypes]}, got {str(t.dtype).removeprefix('torch.')}")
    ranks = (rank,) if isinstance(rank, int) else rank
    if ranks is not None and t.dim() not in ranks:
        raise OpError(f"cudnn.ops.{op}: {name}: expected {' or '.join(map(str, ranks))} dimensions, "
                      f"got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise OpError(f"cudnn.ops.{op}: {name}: expected a tensor on {device} (where the first input is), "
                      f"got one on {t.device}")


def check_cuda(op: str, name: str, t: torch.Tensor) -> None:
    """cuDNN runs on CUDA tensors only (fake/meta tensors pass: they only propagate shapes)."""
    if t.device.type not in ("cuda", "meta"):
        raise OpError(f"cudnn.ops.{op}: {name}: expected a CUDA tensor, got one on {t.device}")


def check_same_dtype(op: str, pairs: Mapping[str, torch.Tensor | None], dtype: torch.dtype) -> None:
    for name, t in pairs.items():
        if t is not None and t.dtype != dtype:
            raise OpError(f"cudnn.ops.{op}: {name}: expected dtype {str(dtype).removeprefix('torch.')} "
                          f"(the input's), got {str(t.dtype).removeprefix('torch.')}")


def choice(op: str, name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise OpError(f"cudnn.ops.{op}: {name}: expected one of {allowed}, got {value!r}")
    return value


def needs_version(what: str, needed: int) -> None:
    """Refuse ``what`` when the loaded libcudnn is older than ``needed`` (MAJOR*10000+MINOR*100)."""
    loaded = loader.version()
    if loaded < needed:
        raise FeatureUnavailableError(what, needed, loaded)


def channels_last(t: torch.Tensor) -> bool:
    """True when ``t`` (4-D) is laid out NHWC and not also plain contiguous: the output of an op
    follows the input's layout, and fake kernels decide it by this same test."""
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def like_layout(t: torch.Tensor, shape: list[int], nhwc: bool, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new tensor of ``shape`` on ``t``'s device, NHWC when ``nhwc`` else contiguous."""
    y = torch.empty(shape, dtype=dtype or t.dtype, device=t.device)
    return y.contiguous(memory_format=torch.channels_last) if nhwc else y


def signature(*tensors: torch.Tensor | None) -> tuple[Hashable, ...]:
    """Shapes, strides and dtypes of the tensors: the part of a cache key they decide."""
    return tuple(None if t is None else (tuple(t.shape), t.stride(), t.dtype) for t in tensors)


def autocast(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """Under CUDA autocast, float32 tensors become the autocast dtype (as torch's own
    conv, matmul and attention ops do); otherwise the tensors are returned as they are."""
    if not torch.is_autocast_enabled("cuda"):
        return tensors
    low = torch.get_autocast_dtype("cuda")
    return tuple(t.to(low) if t is not None and t.dtype == torch.float32 else t for t in tensors)


# -- graphs ------------------------------------------------------------------------------------

class Built:
    """A built graph, its tensors by role (``ports["x"]``...), the device it runs on, and what
    the op worked out when it built it (``info``: output sizes and strides, layouts), so a
    cache hit repeats none of that work. ``uids`` are the roles' uids in the order the op
    passes their addresses to `run` (set once by `bind`). ``derived``: what the op's eager
    backward finds once per forward graph (its backward graphs, by the layouts and types of
    what they read), so a backward call builds no cache key. While the graph's lowering trial
    is pending (``following``), each call asks the graph for its Runner (`follow`)."""

    __slots__ = ("derived", "device", "following", "graph", "info", "ports", "runner", "uids", "workspace")

    def __init__(self, graph: pygraph, ports: dict[str, Tensor], device: int = 0) -> None:
        self.graph = graph
        self.ports = ports
        self.device = torch.device("cuda", device)
        self.info: Any = None
        # the Runner run_pointers runs (no per-call checks), and the workspace `run` allocates for it
        self.runner = graph.runner(sized=True)
        self.workspace = graph.get_workspace_size()
        self.following = graph.lowering_trial_pending()
        self.uids: tuple[int, ...] = ()
        self.derived: dict[Hashable, Any] = {}

    def follow(self) -> Any:
        """The Runner the graph's lowering trial routes this call to; once the trial has decided,
        the one every call runs from then on."""
        runner = self.graph.runner(sized=True)
        if not self.graph.lowering_trial_pending():
            self.runner, self.workspace = runner, runner.workspace_size
            self.following = False
        return runner

    def bind(self, *roles: str) -> Built:
        """Fix the roles (and their order) whose addresses `run` is given on every call."""
        self.uids = tuple(self.ports[r].get_uid() for r in roles)
        return self


class GraphCache:
    """Per device, the last ``CACHE_SIZE`` built graphs by key (least recently used leaves),
    and as many keys cuDNN had no engine for: asking again raises at once (a call that falls
    back to torch where cuDNN refuses, as routed attention does, would otherwise pay for the
    refused build on every call)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._by_device: dict[int, OrderedDict[Hashable, Built]] = {}
        # (device, key) -> the refusal's (status, context, message, hint): not the exception,
        # whose traceback would keep the tensors of the refused call alive
        self._refused: OrderedDict[tuple[int, Hashable], tuple[int, str, str, str]] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0  # graphs built since start (the tests read it)
        self.tuned = 0  # of those, how many had their plans timed (torch.backends.cudnn.benchmark)

    def get(self, device: int, key: Hashable, make: Callable[[pygraph], dict[str, Tensor]]) -> Built:
        """The graph for ``key`` on ``device``; ``make(g)`` declares it on a fresh graph
        (tensors by role, outputs marked) when it is not cached."""
        built = self.lookup(device, key)
        return self.build(device, key, make) if built is None else built

    def lookup(self, device: int, key: Hashable) -> Built | None:
        """The cached graph for ``key`` on ``device`` (now the most recently used), or None."""
        cache = self._by_device.get(device)
        built = None if cache is None else cache.get(key)
        if built is not None:
            cache.move_to_end(key)  # type: ignore[union-attr]
        return built

    def build(self, device: int, key: Hashable, make: Callable[[pygraph], dict[str, Tensor]]) -> Built:
        """Build the graph ``make(g)`` declares and cache it under ``key`` on ``device``; where
        cuDNN has no engine for it, raise cudnnGraphNotSupportedError, now and for this key
        from then on."""
        refused = self._refused.get((device, key))
        if refused is not None:
            raise cudnnGraphNotSupportedError(*refused)
        cache = self._by_device.get(device)
        if cache is None:
            cache = self._by_device.setdefault(device, OrderedDict())
        g = pygraph(io_data_type=data_type.FLOAT, intermediate_data_type=data_type.FLOAT,
                    compute_data_type=data_type.FLOAT, handle=handle(device))
        ports = make(g)
        try:
            g.build(HEURISTICS)
        except cudnnGraphNotSupportedError as exc:
            with self._lock:
                self._refused[(device, key)] = (exc.status, exc.context, exc.message, exc.hint)
                while len(self._refused) > self.size:
                    self._refused.popitem(last=False)
            raise
        tuned = bool(torch.backends.cudnn.benchmark) and tune(g, ports, device)
        built = Built(g, ports, device)
        with self._lock:
            cache[key] = built
            self.builds += 1
            self.tuned += tuned
            while len(cache) > self.size:
                cache.popitem(last=False)
        return built

    def clear(self) -> None:
        with self._lock:
            self._by_device.clear()
            self._refused.clear()

    def __len__(self) -> int:
        return sum(map(len, self._by_device.values()))


CACHE = GraphCache()


def tune(g: pygraph, ports: dict[str, Tensor], device: int) -> bool:
    """Select ``g``'s fastest plan among the heuristics' first ``TUNE_PLANS``, each run on
    zeroed scratch tensors of the graph's shapes (``torch.backends.cudnn.benchmark``: the
    first call of a shape pays for it, as in torch's own benchmark mode, and the plan cache
    keeps the choice for later processes). Where that cannot run (a CUDA graph being captured,
    no memory for the scratch tensors, a cuDNN error) the heuristics' plan stays, the
    ``cudnn.ops`` log says why, and this returns False."""
    if any(r.status == "selected" and r.source == TUNED_SOURCE for r in g.describe_plans()):
        return True  # the build took a plan an earlier tuning chose (in this process or before)
    if torch.cuda.is_current_stream_capturing():
        return False
    try:
        pack = {t: _scratch(t.get_dim(), t.get_stride(), TORCH_DTYPE[t.get_data_type()], device)
                for t in ports.values()}
        g.autotune(pack, handle=handle(device), warmup=1, repeats=5, progress=False, max_plans=TUNE_PLANS)
    except (torch.OutOfMemoryError, CudnnError, GraphError) as exc:
        get_logger("ops").info("autotuning %s kept the heuristics' plan: %s", g.label(), exc)
        return False
    return True


def _scratch(dims: list[int], strides: list[int], dtype: torch.dtype, device: int) -> torch.Tensor:
    """Zeros laid out as ``dims`` / ``strides`` (broadcast and padded strides included)."""
    extent = 1 + sum((d - 1) * s for d, s in zip(dims, strides)) if all(dims) else 0
    return torch.zeros(extent, dtype=dtype, device=device).as_strided(dims, strides)


_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


_tls = threading.local()  # this thread's default handle per device, as `default_handle` keeps it


def handle(device: int) -> Handle:
    """This thread's cuDNN handle for ``device``, set to torch's current stream there."""
    try:
        h = _tls.handles[device]
    except (AttributeError, KeyError):
        h = None
    if h is None or not h.address:  # first use here, or destroyed / inherited across fork()
        h = default_handle(device)
        if not hasattr(_tls, "handles"):
            _tls.handles = {}
        _tls.handles[device] = h
    stream = _current_stream(device) if _current_stream is not None \
        else int(torch.cuda.current_stream(device).cuda_stream)
    if h.last_stream != stream:
        h.set_stream(stream)
    return h


# torch's caching allocator without a tensor per block: a workspace is a raw block taken on
# the stream the graph runs on and handed back once the execute is enqueued (the allocator
# reuses it in that stream's order, and under CUDA-graph capture takes it from the graph's
# pool, exactly as for a tensor). Tiny workspaces are common (a norm plan's is ~100 bytes),
# and a tensor for each would cost more than the execute around it.
_raw_alloc = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
_raw_delete = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_RAW_BLOCKS = _raw_alloc is not None and _raw_delete is not None and _current_device is not None


def run(built: Built, device: int, pointers: tuple[int, ...], uids: tuple[int, ...] | None = None) -> None:
    """Run ``built`` on raw addresses, one per role of ``built.uids`` in that order (or of
    ``uids``), on torch's current stream with a workspace from torch's caching allocator (so
    CUDA-graph capture pools it). The graph was built for exactly these shapes and strides, so
    the Runner binds the addresses unchecked and finds its backend pack by (uids, addresses) in
    one lookup. The caller keeps the tensors alive until this returns (the allocator orders
    reuse on the stream)."""
    h = handle(device)
    stream = h.last_stream  # torch's current stream, which `handle` just set
    uids = built.uids if uids is None else uids
    if built.following:
        runner = built.follow()
        size = runner.workspace_size
    else:
        runner, size = built.runner, built.workspace
    if not size:
        runner.run_pointers(uids, pointers, 0, h, stream)
    elif _RAW_BLOCKS and _current_device() == device:  # type: ignore[misc]
        ws = _raw_alloc(size, stream)  # type: ignore[misc]
        try:
            runner.run_pointers(uids, pointers, ws, h, stream)
        finally:
            _raw_delete(ws)  # type: ignore[misc]
    else:  # another device is current (the raw allocator takes the current one), or an old torch
        block = torch.empty(size, dtype=torch.uint8, device=built.device)
        runner.run_pointers(uids, pointers, block.data_ptr(), h, stream)


def execute(built: Built, device: int, pack: dict[str, torch.Tensor]) -> None:
    """Run ``built`` with its roles bound to ``pack``'s tensors (any roles, any order)."""
    ports = built.ports
    launch(built, device, {ports[role]: t.data_ptr() for role, t in pack.items()})


def launch(built: Built, device: int, variant: dict[Tensor, int]) -> None:
    """Run ``built`` on raw addresses keyed by graph tensor (``variant``: tensor -> data_ptr)."""
    run(built, device, tuple(variant.values()), tuple(t.get_uid() for t in variant))


# -- the eager fast path -----------------------------------------------------------------------

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch = getattr(torch._C, "_are_functorch_transforms_active", None)


def eager(*tensors: Any) -> bool:
    """True when a call may run its kernel without torch's dispatcher: not compiling, no
    dispatch mode (fake tensors, tracing, export) or functorch transform active, and every
    tensor given a plain tensor or Parameter on CUDA. Otherwise the registered op runs."""
    if torch.compiler.is_compiling() or (_dispatch_modes is not None and _dispatch_modes()) \
            or (_functorch is not None and _functorch()):
        return False
    for t in tensors:  # noqa: SIM110 (a loop: cheaper than all() over a generator, per call)
        if t is not None and (type(t) not in _PLAIN or not t.is_cuda):
            return False
    return True


def sig(t: torch.Tensor | None) -> Hashable:
    """The cache-key part of an optional tensor argument: shape, strides, dtype and device
    index (a tensor on another device than the first input must miss, and be refused)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device())


def tensor_of(g: pygraph, name: str, t: torch.Tensor, shape: list[int] | None = None,
              stride: list[int] | None = None) -> Tensor:
    """A graph tensor with ``t``'s dtype and its (or the given) dims and strides."""
    return g.tensor(name=name, dim=list(t.shape) if shape is None else shape,
                    stride=list(t.stride()) if stride is None else stride, data_type=CUDNN_DTYPE[t.dtype])


def device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()
