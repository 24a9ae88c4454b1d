"""The eager paths of `cudnn.ops` bind raw addresses by role order (`Built.bind` / `rt.run`):
check on CPU tensors, with graphs validated but not built and a runner that records instead
of executing, that every address given for a graph tensor belongs to a torch tensor of that
tensor's dtype and element count, that outputs go to fresh allocations, and that inputs are
never fresh allocations nothing wrote. Skipped where torch is not installed."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from cudnn import (
    ops,  # noqa: E402
    pygraph,  # noqa: E402
)
from cudnn.ops import _runtime as rt  # noqa: E402

FRESH = {"aten.empty.memory_format", "aten.empty_strided.default", "aten.new_empty_strided.default",
         "aten.new_empty.default", "aten.empty_like.default"}


class Recorder:
    """Stands for the Runner: records what `rt.run` would execute."""

    def __init__(self, graph: pygraph, log: list) -> None:
        self.graph, self.log = graph, log

    def run_pointers(self, uids: tuple[int, ...], pointers: tuple[int, ...], workspace: int, handle: Any,
                     stream: int | None = None) -> None:
        self.log.append((self.graph, uids, pointers))


class Tracker(TorchDispatchMode):
    """Remembers, by address, the tensor each aten op made and whether it was a fresh allocation."""

    def __init__(self, seen: dict[int, tuple[Any, bool]]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        fresh = str(func) in FRESH
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor) and o.numel() and not func.is_view:
                self.seen[o.data_ptr()] = (o, fresh)  # a view makes no memory: its address is its base's, or inside it
        return out


class Bound:
    """What one test's calls executed (``log``) and the tensors seen so far by address."""

    def __init__(self) -> None:
        self.log: list = []
        self.seen: dict[int, tuple[Any, bool]] = {}


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> Bound:
    """Ops run eagerly on CPU tensors; graphs are validated, given uids, never built."""
    state = Bound()
    log = state.log

    class Graph(pygraph):
        def __init__(self, *args: Any, handle: Any = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)  # no cuDNN handle on CPU

        def build(self, _modes: Any = None) -> None:
            self.validate()

        def get_workspace_size(self, *_: Any, **__: Any) -> int:
            return 0

        def runner(self, sized: bool = False) -> Any:
            return Recorder(self, log)

        def lowering_trial_pending(self) -> bool:
            return False

    class Built(rt.Built):
        def __init__(self, graph: pygraph, ports: dict, device: int = 0) -> None:
            for uid, t in enumerate(ports.values(), 1):
                t.set_uid(uid)
            super().__init__(graph, ports, 0)

    monkeypatch.setattr(rt, "CACHE", rt.GraphCache())
    monkeypatch.setattr(rt, "pygraph", Graph)
    monkeypatch.setattr(rt, "Built", Built)
    monkeypatch.setattr(rt, "handle", lambda device: SimpleNamespace(last_stream=0))  # no stream on CPU
    monkeypatch.setattr(rt, "eager", lambda *tensors: True)
    monkeypatch.setattr(rt, "check_cuda", lambda *args: None)
    monkeypatch.setattr(rt, "device_index", lambda t: 0)
    return state


def check(state: Bound, fn: Any, *inputs: torch.Tensor | None, in_place: tuple[torch.Tensor, ...] = ()) -> None:
    """Run ``fn`` and check every address it bound; ``in_place``: inputs the op updates in place
    (batch norm's float32 running statistics), which outputs may be bound to."""
    log, seen = state.log, state.seen
    updated = {t.data_ptr() for t in in_place}
    seen.update({t.data_ptr(): (t, False) for t in inputs if t is not None})
    with Tracker(seen):
        fn()
    assert log, "nothing was executed"
    written: set[int] = set()
    for graph, uids, pointers in log:
        assert len(uids) == len(pointers)
        for uid, ptr in zip(uids, pointers):
            t = graph.query_tensor_attributes_of_uid(uid)
            output = "::" in t.get_name()  # named by the node that writes it
            if ptr not in seen:  # an address inside a fresh scratch block (batch norm's statistics)
                assert any(base <= ptr < base + o.numel() * o.element_size() and fresh
                           for base, (o, fresh) in seen.items()), t.get_name()
                if output:
                    written.add(ptr)
                else:
                    assert ptr in written, f"input {t.get_name()} bound to an unwritten allocation"
                continue
            tensor, fresh = seen[ptr]
            assert rt.CUDNN_DTYPE[tensor.dtype] == t.get_data_type(), t.get_name()
            n = math.prod(t.get_dim())
            # or the start of a fresh block of statistics (batch norm's), which an input reads once written
            assert tensor.numel() == n or (fresh and tensor.numel() >= 2 * n), t.get_name()
            if output:
                assert fresh or ptr in updated, f"output {t.get_name()} bound to a tensor that is not a new allocation"
                written.add(ptr)
            else:
                assert not fresh or ptr in written, f"input {t.get_name()} bound to an unwritten allocation"
    log.clear()


H, BF = torch.float16, torch.bfloat16
CL = torch.channels_last


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "silu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d_bias_act(bound: Bound, act: str, with_bias: bool) -> None:
    x = torch.randn(2, 8, 6, 6, dtype=H).contiguous(memory_format=CL)
    xc = torch.randn(2, 8, 6, 6, dtype=H)
    w = torch.randn(16, 8, 3, 3, dtype=H)
    b = torch.randn(16, dtype=H) if with_bias else None
    with torch.no_grad():
        check(bound, lambda: ops.conv2d_bias_act(x, w, b, 1, 1, 1, 1, act), x, w, b)
        check(bound, lambda: ops.conv2d_bias_act(xc, w, b, 1, 1, 1, 1, act), xc, w, b)
    xg, wg = x.clone().requires_grad_(), w.contiguous(memory_format=CL).requires_grad_()
    bg = None if b is None else b.clone().requires_grad_()
    check(bound, lambda: ops.conv2d_bias_act(xg, wg, bg, 1, 1, 1, 1, act).sum().backward(), xg, wg, bg)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_and_rms_norm(bound: Bound, rms: bool, affine: bool) -> None:
    t = torch.randn(4, 64, dtype=BF)
    w = torch.randn(64, dtype=BF) if affine else None
    b = None if rms or not affine else torch.randn(64, dtype=BF)

    def op(x: torch.Tensor, w_: torch.Tensor | None, b_: torch.Tensor | None, **kw: Any) -> torch.Tensor:
        return ops.rms_norm(x, [64], w_, **kw) if rms else ops.layer_norm(x, [64], w_, b_, **kw)

    with torch.no_grad():
        for training in (False, True):
            check(bound, lambda training=training: op(t, w, b, training=training), t, w, b)
    tg = t.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    bg = None if b is None else b.clone().requires_grad_()
    check(bound, lambda: op(tg, wg, bg).sum().backward(), tg, wg, bg)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_batch_norm(bound: Bound, layout: str) -> None:
    x = torch.randn(2, 8, 4, 4, dtype=H)
    if layout == "nhwc":
        x = x.contiguous(memory_format=CL)
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    rm, rv = torch.zeros(8), torch.ones(8)
    with torch.no_grad():
        check(bound, lambda: ops.batch_norm(x, None, None, w, b, True), x, w, b)
        check(bound, lambda: ops.batch_norm(x, rm, rv, None, None, True), x, rm, rv, in_place=(rm, rv))
        check(bound, lambda: ops.batch_norm(x, rm, rv, w, b, False), x, rm, rv, w, b)
        check(bound, lambda: ops.batch_norm(x, rm, rv, None, None, False), x, rm, rv)
        low = [t.to(H) for t in (rm, rv, w, b)]  # statistics and parameters in the input's dtype (.half())
        check(bound, lambda: ops.batch_norm(x, low[0], low[1], low[2], low[3], False), x, *low)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    check(bound, lambda: ops.batch_norm(xg, rm, rv, wg, bg, True).sum().backward(), xg, wg, bg, rm, rv,
          in_place=(rm, rv))
    for wi, bi in ((wg, bg), (w, b)):  # eval mode: every gradient, and dX alone (frozen parameters)
        check(bound, lambda wi=wi, bi=bi: ops.batch_norm(xg, rm, rv, wi, bi, False).sum().backward(), xg, wi, bi,
              rm, rv)


@pytest.mark.parametrize("masked", [False, True])
def test_scaled_dot_product_attention(bound: Bound, masked: bool) -> None:
    q = torch.randn(1, 2, 16, 64, dtype=H)
    mask = torch.randn(16, 16, dtype=H) if masked else None
    with torch.no_grad():
        check(bound, lambda: ops.scaled_dot_product_attention(q, q, q, attn_mask=mask), q, mask)
    qg = q.clone().requires_grad_()
    check(bound, lambda: ops.scaled_dot_product_attention(qg, qg, qg, attn_mask=mask, is_causal=not masked)
          .sum().backward(), qg, mask)
