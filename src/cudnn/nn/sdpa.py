"""``cudnn.nn.sdpa_kernel()``: route ``torch.nn.functional.scaled_dot_product_attention`` call
sites through `cudnn.ops.scaled_dot_product_attention`, as ``torch.nn.attention.sdpa_kernel``
routes them to one of torch's backends.

Inside the context (or a function decorated with it), every call of torch's SDPA made on this
thread runs cuDNN's attention graphs, forward and backward. A call cuDNN does not cover
(float32 outside autocast, a CPU tensor, a shape no engine supports) raises
`cudnn.ops.OpError` or cuDNN's not-supported error before any kernel runs; with
``fallback=True`` it runs torch's own SDPA instead, after a warning that names the reason
(once per reason). `cudnn.nn.convert` runs the forward of a model with SDPA call sites in
``sdpa_kernel(fallback=True)``.

The routing is a ``torch.overrides.TorchFunctionMode``: it sees every torch call made in the
context on this thread, which adds a little Python time to each of them. A torch function
that hands itself to torch-function handling runs whole, unseen inside: so the SDPA that
``nn.MultiheadAttention`` calls within ``F.multi_head_attention_forward`` stays torch's.
`cudnn.nn.convert` turns those modules into `RoutedMultiheadAttention`, which calls
`attention_with_fallback` itself.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import ops
from .._lib.status import CudnnNotSupportedError

_SDPA = F.scaled_dot_product_attention
_NOT_COVERED = (ops.OpError, CudnnNotSupportedError)


class _CudnnAttention(TorchFunctionMode):
    """Sends torch's SDPA to cudnn.ops; every other call goes on unchanged."""

    def __init__(self, fallback: bool) -> None:
        super().__init__()
        self.fallback = fallback

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is not _SDPA:
            return func(*args, **kwargs)
        if self.fallback:
            return attention_with_fallback(*args, **kwargs)
        return ops.scaled_dot_product_attention(*args, **kwargs)


def attention_with_fallback(*args: Any, **kwargs: Any) -> torch.Tensor:
    """`cudnn.ops.scaled_dot_product_attention` (torch's SDPA arguments), or, for a call cuDNN
    does not cover, torch's own SDPA after a RuntimeWarning naming why (once per reason)."""
    try:
        return ops.scaled_dot_product_attention(*args, **kwargs)
    except _NOT_COVERED as exc:
        _warn_once(str(exc))
    return _SDPA(*args, **kwargs)  # inside a routing mode this comes back here once, and then runs


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(reason: str) -> None:
    with _warned_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(f"scaled_dot_product_attention runs in torch, not cuDNN, for this call: {reason}",
                  RuntimeWarning, stacklevel=5)


@contextmanager
def sdpa_kernel(fallback: bool = False) -> Iterator[None]:
    """Run ``torch.nn.functional.scaled_dot_product_attention`` calls on this thread through
    `cudnn.ops.scaled_dot_product_attention` while the context is open (also a decorator).

    ``fallback``: a call cuDNN does not cover runs torch's own SDPA, after a warning naming
    why (once per reason), instead of raising."""
    with _CudnnAttention(bool(fallback)):
        yield


_ROUTED = "_cudnn_routes_attention"
_routed = threading.local()  # this thread's modes opened by routed forwards, innermost last


def _enter(_module: torch.nn.Module, _args: Any) -> None:
    mode = _CudnnAttention(fallback=True)
    mode.__enter__()
    stack = getattr(_routed, "modes", None)
    if stack is None:
        stack = _routed.modes = []
    stack.append(mode)


def _leave(_module: torch.nn.Module, _args: Any, _output: Any) -> None:
    _routed.modes.pop().__exit__(None, None, None)


def route_attention(module: torch.nn.Module) -> None:
    """Make ``module``'s forward run in ``sdpa_kernel(fallback=True)`` through two hooks (the
    module, its parameters and state-dict keys are unchanged; the hooks are module-level
    functions, so the module still pickles). A module routed already is left as it is."""
    if getattr(module, _ROUTED, False):
        return
    module.register_forward_pre_hook(_enter)
    module.register_forward_hook(_leave, always_call=True)  # also when the forward raises
    setattr(module, _ROUTED, True)  # copies of the module carry it with the hooks
