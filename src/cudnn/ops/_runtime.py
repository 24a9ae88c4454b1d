"""What every torch op of `cudnn.ops` shares: dtype tables, argument checks, a bounded graph
cache per device, and one execute on torch's current stream with a workspace from torch's
caching allocator.

A cached entry is a built ``pygraph`` and its cudnn tensors by role; the key is the op name
plus the shapes, strides, dtypes and options the graph was built for (the device is the
cache's own key). Building happens once per key; a call is a dict lookup, one workspace
allocation and one ``graph.execute``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import torch

from .._lib.enums import data_type, heur_mode
from .._lib.errors import FeatureUnavailableError
from ..backend.handle import Handle, default_handle
from ..graph import GraphError, pygraph
from ..graph.tensor import Tensor

CUDNN_DTYPE: dict[torch.dtype, data_type] = {
    torch.float16: data_type.HALF, torch.bfloat16: data_type.BFLOAT16, torch.float32: data_type.FLOAT,
    torch.int32: data_type.INT32, torch.int64: data_type.INT64, torch.uint8: data_type.UINT8,
}
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
HALVES = (torch.float16, torch.bfloat16)
HEURISTICS = [heur_mode.A, heur_mode.FALLBACK]
CACHE_SIZE = 128  # built graphs kept per device


class OpError(GraphError):
    """Bad input to a `cudnn.ops` op: names the op and the argument, expected vs got."""


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
    from .. import backend_version

    loaded = backend_version()
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
    """A built graph and its tensors by role (``ports["x"]``...)."""

    __slots__ = ("graph", "ports", "workspace")

    def __init__(self, graph: pygraph, ports: dict[str, Tensor]) -> None:
        self.graph = graph
        self.ports = ports
        self.workspace = graph.get_workspace_size()


class GraphCache:
    """Per device, the last ``CACHE_SIZE`` built graphs by key (least recently used leaves)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._by_device: dict[int, OrderedDict[Hashable, Built]] = {}
        self._lock = threading.Lock()
        self.builds = 0  # graphs built since start (the tests read it)

    def get(self, device: int, key: Hashable, make: Callable[[pygraph], dict[str, Tensor]]) -> Built:
        """The graph for ``key`` on ``device``; ``make(g)`` declares it on a fresh graph
        (tensors by role, outputs marked) when it is not cached."""
        cache = self._by_device.get(device)
        if cache is None:
            cache = self._by_device.setdefault(device, OrderedDict())
        built = cache.get(key)
        if built is not None:
            cache.move_to_end(key)
            return built
        g = pygraph(io_data_type=data_type.FLOAT, intermediate_data_type=data_type.FLOAT,
                    compute_data_type=data_type.FLOAT, handle=handle(device))
        ports = make(g)
        g.build(HEURISTICS)
        built = Built(g, ports)
        with self._lock:
            cache[key] = built
            self.builds += 1
            while len(cache) > self.size:
                cache.popitem(last=False)
        return built

    def clear(self) -> None:
        with self._lock:
            self._by_device.clear()

    def __len__(self) -> int:
        return sum(map(len, self._by_device.values()))


CACHE = GraphCache()
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def handle(device: int) -> Handle:
    """This thread's cuDNN handle for ``device``, set to torch's current stream there."""
    h = default_handle(device)
    stream = _current_stream(device) if _current_stream is not None \
        else int(torch.cuda.current_stream(device).cuda_stream)
    if h.last_stream != stream:
        h.set_stream(stream)
    return h


def execute(built: Built, device: int, pack: dict[str, torch.Tensor]) -> None:
    """Run ``built`` with its roles bound to ``pack``'s tensors, on torch's current stream;
    the workspace comes from torch's caching allocator (so CUDA-graph capture pools it)."""
    ports = built.ports
    # raw addresses: the graph was built for exactly these shapes and strides, and the Runner
    # finds its backend pack by address value (torch's allocator reuses blocks) in one lookup
    variant = {ports[role]: t.data_ptr() for role, t in pack.items()}
    ws = torch.empty(built.workspace, dtype=torch.uint8, device=torch.device("cuda", device)) \
        if built.workspace else None
    built.graph.execute(variant, None if ws is None else ws.data_ptr(), handle=handle(device))


def tensor_of(g: pygraph, name: str, t: torch.Tensor, shape: list[int] | None = None,
              stride: list[int] | None = None) -> Tensor:
    """A graph tensor with ``t``'s dtype and its (or the given) dims and strides."""
    return g.tensor(name=name, dim=list(t.shape) if shape is None else shape,
                    stride=list(t.stride()) if stride is None else stride, data_type=CUDNN_DTYPE[t.dtype])


def device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()
