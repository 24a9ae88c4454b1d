"""The official 1.32 attention torch ops without a GPU: ``cudnn::sdpa_fwd`` / ``cudnn::sdpa_bwd``
schemas, fake kernels (shapes and strides for BHSD, BSHD views, THD and the log-sum-exp),
autograd and ``torch.compile(fullgraph=True)`` on meta tensors, argument refusals, the graphs
the ops declare (validated by cudnn-py's pygraph; nothing runs), the packed-to-padded
log-sum-exp on CPU values, and ``cudnn.torch``'s overrides in torch's dispatcher. The runs
against a float32 reference are tests/pytorch/test_sdpa_torch_ops_132_gpu.py and
tests/pytorch/test_sdpa_provider_gpu.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import cudnn  # noqa: E402
from cudnn.ops import OpError  # noqa: E402
from cudnn.ops import _runtime as rt  # noqa: E402
from cudnn.ops import sdpa_official as so  # noqa: E402

H = torch.float16
FWD = ("cudnn::sdpa_fwd(Tensor q, Tensor k, Tensor v, float attn_scale, bool is_causal=False, "
       "bool causal_bottom_right=False, int window_left=-1, int window_right=-1, Tensor? sinks=None, "
       "Tensor? seq_len_q=None, Tensor? seq_len_kv=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, "
       "int max_seqlen_q=0, int max_seqlen_kv=0, bool return_lse=True) -> (Tensor, Tensor)")
BWD = ("cudnn::sdpa_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, float attn_scale, "
       "bool is_causal=False, bool causal_bottom_right=False, int window_left=-1, int window_right=-1, "
       "Tensor? sinks=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, int max_seqlen_q=0, "
       "int max_seqlen_kv=0, bool is_deterministic=False) -> (Tensor, Tensor, Tensor)")


def meta(*shape: int, dtype: torch.dtype = H, grad: bool = False) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype, requires_grad=grad)


def bshd(b: int, h: int, s: int, d: int) -> torch.Tensor:
    """A [B, H, S, D] view of BSHD memory."""
    return meta(b, s, h, d).transpose(1, 2)


# -- schemas and entry points ----------------------------------------------------------------------

def test_schemas_are_the_officials() -> None:
    assert str(torch.ops.cudnn.sdpa_fwd.default._schema) == FWD
    assert str(torch.ops.cudnn.sdpa_bwd.default._schema) == BWD


def test_entry_points() -> None:
    from cudnn.sdpa.fwd import torch_op

    assert cudnn.sdpa_torch is torch_op.sdpa is so.sdpa
    assert callable(cudnn.torch.install_sdpa_overrides)
    assert {"fwd", "bwd", "fwd_cpp", "bwd_cpp", "fwd_fa2", "bwd_fa2"} <= set(cudnn.torch.calls)


def test_import_cudnn_imports_no_torch_and_sdpa_torch_registers_the_ops() -> None:
    code = ("import sys, cudnn; assert 'torch' not in sys.modules; import cudnn.sdpa; "
            "assert 'torch' not in sys.modules; f = cudnn.sdpa_torch; import torch; "
            "print(torch.ops.cudnn.sdpa_fwd.default.name(), f.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["cudnn::sdpa_fwd", "sdpa"]


# -- fake kernels --------------------------------------------------------------------------------------

def test_fake_forward_bhsd_gqa() -> None:
    q, k, v = meta(2, 8, 16, 64), meta(2, 2, 32, 64), meta(2, 2, 32, 128)
    o, lse = torch.ops.cudnn.sdpa_fwd(q, k, v, 0.125)
    assert (o.shape, o.stride(), o.dtype) == ((2, 8, 16, 128), (16384, 2048, 128, 1), H)
    assert (lse.shape, lse.stride(), lse.dtype) == ((2, 8, 16, 1), (128, 16, 1, 1), torch.float32)


def test_fake_forward_bshd_view_keeps_its_layout() -> None:
    q, k = bshd(2, 4, 16, 64), bshd(2, 4, 24, 64)
    o, lse = torch.ops.cudnn.sdpa_fwd(q, k, k, 0.125, is_causal=True)
    assert o.shape == (2, 4, 16, 64) and o.stride() == q.stride() == (4096, 64, 256, 1)
    o, _ = torch.ops.cudnn.sdpa_fwd(q, k, bshd(2, 4, 24, 32), 0.125)  # other D_v: Q's dim order
    assert o.shape == (2, 4, 16, 32) and o.stride() == (2048, 32, 128, 1)
    assert lse.shape == (2, 4, 16, 1) and lse.is_contiguous()


def test_fake_forward_without_lse_gives_an_empty_float_tensor() -> None:
    q = meta(1, 2, 8, 64)
    _, lse = torch.ops.cudnn.sdpa_fwd(q, q, q, 0.1, return_lse=False)
    assert lse.shape == (0,) and lse.dtype == torch.float32


def test_fake_forward_thd() -> None:
    q, k, v = meta(40, 4, 64), meta(50, 2, 64), meta(50, 2, 32)
    cu = meta(4, dtype=torch.int32)
    o, lse = torch.ops.cudnn.sdpa_fwd(q, k, v, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20,
                                      max_seqlen_kv=30)
    assert (o.shape, o.stride()) == ((40, 4, 32), (128, 32, 1))
    assert (lse.shape, lse.dtype) == ((40, 4, 1), torch.float32)


def test_fake_backward_dense_and_thd() -> None:
    q, k = bshd(2, 4, 16, 64), meta(2, 2, 24, 64)
    o = bshd(2, 4, 16, 64)
    dq, dk, dv = torch.ops.cudnn.sdpa_bwd(o, q, k, k, o, meta(2, 4, 16, dtype=torch.float32), 0.1, True)
    assert (dq.shape, dq.stride()) == (q.shape, q.stride())
    assert (dk.shape, dk.stride()) == (k.shape, k.stride()) and dv.shape == k.shape
    t, tk = meta(40, 4, 64), meta(50, 2, 64)
    cu = meta(4, dtype=torch.int64)
    grads = torch.ops.cudnn.sdpa_bwd(t, t, tk, tk, t, meta(3, 4, 20, 1, dtype=torch.float32), 0.1,
                                     cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=30)
    assert [g.shape for g in grads] == [(40, 4, 64), (50, 2, 64), (50, 2, 64)]
    assert all(g.is_contiguous() for g in grads)


def test_fake_kernel_in_fake_tensor_mode_on_cuda() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(1, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
        o, lse = torch.ops.cudnn.sdpa_fwd(q, q, q, 0.1, window_left=4, window_right=0)
        assert o.device.type == "cuda" and o.dtype == torch.bfloat16 and lse.shape == (1, 2, 8, 1)


# -- autograd and compile on meta tensors ----------------------------------------------------------

def test_autograd_dense_reaches_sdpa_bwd() -> None:
    q, k = meta(2, 4, 16, 64, grad=True), meta(2, 2, 16, 64, grad=True)
    o, lse = torch.ops.cudnn.sdpa_fwd(q, k, k, 0.1, True)
    assert not lse.requires_grad
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_autograd_thd_reaches_sdpa_bwd() -> None:
    t = meta(40, 4, 64, grad=True)
    cu = meta(4, dtype=torch.int32)
    o, _ = torch.ops.cudnn.sdpa_fwd(t, t, t, 0.1, True, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20,
                                    max_seqlen_kv=20)
    o.sum().backward()
    assert t.grad.shape == (40, 4, 64)


def test_sdpa_entry_computes_lse_when_a_gradient_is_wanted() -> None:
    q = meta(1, 2, 8, 64, grad=True)
    o = cudnn.sdpa_torch(q, q, q, is_causal=True)
    assert isinstance(o, torch.Tensor)
    o.sum().backward()  # would raise "return_lse=True" without the internal log-sum-exp
    assert q.grad.shape == q.shape
    o, lse = cudnn.sdpa_torch(q.detach(), q.detach(), q.detach(), return_lse=True, scale=0.5)
    assert lse.shape == (1, 2, 8, 1)


def test_autograd_refusals() -> None:
    q = meta(1, 2, 8, 64, grad=True)
    o, _ = torch.ops.cudnn.sdpa_fwd(q, q, q, 0.1, return_lse=False)
    with pytest.raises(RuntimeError, match="return_lse=True"):
        o.sum().backward()
    n = meta(1, dtype=torch.int32)
    o, _ = torch.ops.cudnn.sdpa_fwd(q, q, q, 0.1, seq_len_q=n, seq_len_kv=n)
    with pytest.raises(NotImplementedError, match="padded dense batch"):
        o.sum().backward()
    sinks = meta(2, dtype=torch.float32, grad=True)
    o, _ = torch.ops.cudnn.sdpa_fwd(q, q, q, 0.1, sinks=sinks)
    with pytest.raises(NotImplementedError, match="dsinks"):
        o.sum().backward()


def test_compile_fullgraph() -> None:
    torch._dynamo.reset()

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cudnn.sdpa_torch(q, k, v, is_causal=True, window_left=8) * 2

    q, k = meta(2, 4, 16, 64), meta(2, 2, 16, 64)
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, k)
    assert out.shape == (2, 4, 16, 64)


# -- refusals ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    ({"q": meta(1, 2, 8, 64, dtype=torch.float32)}, r"sdpa_fwd: q: expected dtype in \['float16', 'bfloat16'\]"),
    ({"k": meta(1, 2, 8, 64, dtype=torch.bfloat16)}, r"sdpa_fwd: k: expected dtype in \['float16'\], got bfloat16"),
    ({"q": torch.empty(1, 2, 8, 64, dtype=H)}, r"sdpa_fwd: q: expected a CUDA tensor, got one on cpu"),
    ({"q": meta(2, 8, 64)}, r"q: expected \[B, H, S, D\], got shape \(2, 8, 64\)"),
    ({"k": meta(1, 3, 8, 64), "v": meta(1, 3, 8, 64)}, r"head counts must divide q's 2"),
    ({"k": meta(1, 2, 8, 32)}, r"k/v: expected k \[B=1, H_k, S_kv, D_qk=64\]"),
    ({"is_causal": True, "window_right": 2}, r"window_right: is_causal masks every future column"),
    ({"causal_bottom_right": True}, r"causal_bottom_right: it only re-anchors a diagonal band"),
    ({"window_left": 0}, r"window_left: expected -1 .* got 0"),
    ({"seq_len_q": meta(1, dtype=torch.int32)}, r"seq_len_q/seq_len_kv: a padded batch needs both"),
    ({"seq_len_q": meta(2, dtype=torch.int32), "seq_len_kv": meta(2, dtype=torch.int32)},
     r"seq_len_q: expected 1 lengths \(one per batch\), got shape \(2,\)"),
    ({"seq_len_q": meta(1, dtype=torch.float32), "seq_len_kv": meta(1, dtype=torch.int32)},
     r"seq_len_q: expected dtype in \['int32', 'int64'\]"),
    ({"sinks": meta(3, dtype=torch.float32)}, r"sinks: expected 2 logits \(one per query head\)"),
    ({"cu_seqlens_kv": meta(2, dtype=torch.int32)}, r"cu_seqlens_kv: given without cu_seqlens_q"),
])
def test_forward_refusals(kwargs: dict[str, Any], match: str) -> None:
    args = {"q": meta(1, 2, 8, 64), "k": meta(1, 2, 8, 64), "v": meta(1, 2, 8, 64)}
    for name in ("q", "k", "v"):
        if name in kwargs:
            args[name] = kwargs.pop(name)
    with pytest.raises(OpError, match=match):
        torch.ops.cudnn.sdpa_fwd(args["q"], args["k"], args["v"], 0.1, **kwargs)


def test_head_dim_not_a_multiple_of_8_is_not_supported() -> None:
    q = meta(1, 2, 8, 60)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"head dim D_qk=60 .* multiple of 8"):
        torch.ops.cudnn.sdpa_fwd(q, q, q, 0.1)
    assert issubclass(OpError, ValueError)  # the official raises ValueError for bad arguments


@pytest.mark.parametrize("kwargs, match", [
    ({"cu_seqlens_kv": None}, r"cu_seqlens_kv: the packed \(THD\) path needs cu_seqlens_kv"),
    ({"cu_seqlens_kv": meta(5, dtype=torch.int32)}, r"two \[B \+ 1\] prefix sums of one batch"),
    ({"max_seqlen_q": 0}, r"max_seqlen_q: the packed \(THD\) path needs the longest sequence's length, got 0"),
    ({"seq_len_q": meta(3, dtype=torch.int32), "seq_len_kv": meta(3, dtype=torch.int32)},
     r"takes its lengths from cu_seqlens"),
    ({"cu_seqlens_q": meta(4, dtype=torch.float32)}, r"cu_seqlens_q: expected dtype in \['int32', 'int64'\]"),
])
def test_thd_refusals(kwargs: dict[str, Any], match: str) -> None:
    t = meta(40, 4, 64)
    args: dict[str, Any] = {"cu_seqlens_q": meta(4, dtype=torch.int32), "cu_seqlens_kv": meta(4, dtype=torch.int32),
                            "max_seqlen_q": 20, "max_seqlen_kv": 20}
    args.update(kwargs)
    with pytest.raises(OpError, match=match):
        torch.ops.cudnn.sdpa_fwd(t, t, t, 0.1, **args)


def test_backward_refusals() -> None:
    q = meta(1, 2, 8, 64)
    lse = meta(1, 2, 8, 1, dtype=torch.float32)
    with pytest.raises(OpError, match=r"sdpa_bwd: lse: expected the forward's log-sum-exp \(1, 2, 8, 1\)"):
        torch.ops.cudnn.sdpa_bwd(q, q, q, q, q, meta(1, 2, 8, 2, dtype=torch.float32), 0.1)
    with pytest.raises(OpError, match=r"sdpa_bwd: lse: expected dtype in \['float32'\]"):
        torch.ops.cudnn.sdpa_bwd(q, q, q, q, q, meta(1, 2, 8, 1), 0.1)
    with pytest.raises(OpError, match=r"sdpa_bwd: grad_out: expected shape \(1, 2, 8, 64\)"):
        torch.ops.cudnn.sdpa_bwd(meta(1, 2, 4, 64), q, q, q, q, lse, 0.1)
    with pytest.raises(OpError, match=r"sdpa_bwd: window_right: is_causal"):
        torch.ops.cudnn.sdpa_bwd(q, q, q, q, q, lse, 0.1, True, window_right=3)
    t, cu = meta(40, 4, 64), meta(4, dtype=torch.int32)
    with pytest.raises(OpError, match=r"lse: expected .*\(padded: thd_lse_to_padded\), got \(40, 4, 1\)"):
        torch.ops.cudnn.sdpa_bwd(t, t, t, t, t, meta(40, 4, 1, dtype=torch.float32), 0.1, cu_seqlens_q=cu,
                                 cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=20)


# -- the packed-to-padded log-sum-exp (CPU values) --------------------------------------------------

def test_thd_lse_to_padded_values() -> None:
    cu = torch.tensor([0, 3, 3, 7], dtype=torch.int32)  # lengths 3, 0, 4
    lse = torch.arange(7 * 2, dtype=torch.float32).reshape(7, 2, 1) + 1
    padded = so.thd_lse_to_padded(lse, cu, 5)
    assert padded.shape == (3, 2, 5, 1) and padded.is_contiguous()
    assert padded[0, :, :3, 0].tolist() == lse[:3, :, 0].t().tolist()
    assert padded[2, :, :4, 0].tolist() == lse[3:7, :, 0].t().tolist()
    assert padded[1].abs().sum() == 0 and padded[0, :, 3:].abs().sum() == 0 and padded[2, :, 4:].abs().sum() == 0
    more = torch.cat([lse, torch.full((3, 2, 1), 99.0)])  # tokens past cu[-1] are left out
    assert torch.equal(so.thd_lse_to_padded(more, cu, 5), padded)
    assert torch.equal(so.thd_lse_to_padded(lse[:, :, 0], cu.long(), 5), padded)


# -- the graphs the ops declare (validated by cudnn-py, nothing executed) ---------------------------

@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The ops' graph declarations on a fresh pygraph, validated; `rt.run` records the addresses
    instead of executing (there is no GPU here)."""
    seen: dict[str, Any] = {}

    def graph(dev: int, key: tuple, make: Any) -> Any:
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
        seen["ports"] = make(g)
        g.validate()
        seen["key"] = key
        return types.SimpleNamespace(ports=seen["ports"])

    monkeypatch.setattr(so, "_graph", graph)
    monkeypatch.setattr(rt, "run", lambda built, dev, ptrs: seen.__setitem__("ptrs", ptrs))
    monkeypatch.setattr(rt, "device_index", lambda t: 0)
    return seen


def scales(key: tuple) -> list[float]:
    """The float entries of a graph key: the attention scale it was built for."""
    return [x for x in key if type(x) is float]


def _port(seen: dict[str, Any], name: str) -> tuple[list[int], list[int]]:
    t = seen["ports"][name]
    return t.get_dim(), t.get_stride()


def test_declared_thd_forward_with_sinks_and_window(declared: dict[str, Any]) -> None:
    q, k = meta(40, 4, 64), meta(50, 2, 64)
    cu = meta(4, dtype=torch.int32)
    so.forward(q, k, k, 0.1, True, False, 8, -1, meta(4, dtype=torch.float32), None, None, cu, cu, 20, 30, True)
    assert list(declared["ports"]) == ["q", "k", "v", "sinks", "seq_len_q", "seq_len_kv", "ragged_q", "ragged_k",
                                       "ragged_v", "ragged_o", "ragged_stats", "o", "stats"]
    assert _port(declared, "q") == ([3, 4, 20, 64], [5120, 64, 256, 1])
    assert _port(declared, "k") == ([3, 2, 30, 64], [3840, 64, 128, 1])
    assert _port(declared, "o") == ([3, 4, 20, 64], [5120, 64, 256, 1])
    assert _port(declared, "stats") == ([3, 4, 20, 1], [80, 1, 4, 1])  # token-major [T, H, 1]
    assert declared["ports"]["o"].get_ragged_offset() is declared["ports"]["ragged_o"]
    assert len(declared["ptrs"]) == len(declared["ports"])


def test_declared_dense_padded_bottom_right(declared: dict[str, Any]) -> None:
    q, k = bshd(2, 4, 16, 64), meta(2, 2, 32, 64)
    n = meta(2, dtype=torch.int64)
    o, _ = so.forward(q, k, k, 0.1, True, True, -1, -1, None, n, n)
    assert list(declared["ports"]) == ["q", "k", "v", "seq_len_q", "seq_len_kv", "o", "stats"]
    assert _port(declared, "o") == ([2, 4, 16, 64], list(o.stride())) and o.stride() == q.stride()
    assert _port(declared, "stats") == ([2, 4, 16, 1], [64, 16, 1, 1])
    so.backward(o, q, k, k, o, meta(2, 4, 16, 1, dtype=torch.float32), 0.1, window_left=4, window_right=0,
                is_deterministic=True)
    assert list(declared["ports"]) == ["q", "k", "v", "o", "do", "stats", "dq", "dk", "dv"]
    assert _port(declared, "dq") == ([2, 4, 16, 64], list(q.stride()))


def test_declared_thd_backward(declared: dict[str, Any]) -> None:
    t, tk = meta(40, 4, 64), meta(50, 2, 64)
    cu = meta(4, dtype=torch.int32)
    so.backward(t, t, tk, tk, t, meta(3, 4, 20, 1, dtype=torch.float32), 0.1, True, sinks=meta(4),
                cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=30)
    ports = declared["ports"]
    assert {"ragged_q", "ragged_do", "ragged_dq", "ragged_dk", "ragged_dv", "sinks"} <= set(ports)
    assert _port(declared, "stats") == ([3, 4, 20, 1], [80, 20, 1, 1])  # padded, dense
    assert _port(declared, "dk") == ([3, 2, 30, 64], [3840, 64, 128, 1])
    assert ("sdpa_bwd" in declared["key"]) and (64, 64) in declared["key"]  # token totals rounded up to 64


# -- cudnn.torch: the overrides in torch's dispatcher ----------------------------------------------

def _has_cuda_kernel(op: str) -> bool:
    """Whether ``op``'s active CUDA kernel is the provider's (torch's dispatch table names the
    file a kernel was registered from; a CUDA build of torch also lists its own, inactive)."""
    active = [line for line in torch._C._dispatch_dump(op).splitlines() if line.startswith("CUDA:")]
    return bool(active) and "sdpa_provider.py" in active[0]


DENSE = ("aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward")


def test_install_and_remove_register_and_restore_the_cuda_kernels() -> None:
    from cudnn.torch import SdpaOverrides, install_sdpa_overrides

    assert not any(_has_cuda_kernel(op) for op in DENSE)
    handle = install_sdpa_overrides()
    try:
        assert isinstance(handle, SdpaOverrides) and handle.installed
        assert set(DENSE) <= set(handle.ops)
        assert all(_has_cuda_kernel(op) for op in handle.ops)
        varlen = [op for op in handle.ops if op.startswith("torch_attn::")]
        assert varlen == [f"torch_attn::{n}" for n in ("_varlen_attn", "_varlen_attn_out", "_varlen_attn_backward")
                          if hasattr(torch.ops.torch_attn, n)]
    finally:
        handle.remove()
    assert not handle.installed and not any(_has_cuda_kernel(op) for op in handle.ops)
    handle.remove()  # a second remove does nothing
    with install_sdpa_overrides() as h2:
        assert all(_has_cuda_kernel(op) for op in DENSE)
    assert not any(_has_cuda_kernel(op) for op in DENSE) and not h2.installed


def test_a_dropped_handle_keeps_the_overrides_until_removed() -> None:
    import gc

    from cudnn.torch import install_sdpa_overrides, remove_sdpa_overrides

    install_sdpa_overrides()  # the handle is dropped at once
    gc.collect()
    try:
        assert all(_has_cuda_kernel(op) for op in DENSE)
    finally:
        assert remove_sdpa_overrides() == 1
    assert not any(_has_cuda_kernel(op) for op in DENSE)
    assert remove_sdpa_overrides() == 0
    kept = install_sdpa_overrides()
    kept.remove()
    assert remove_sdpa_overrides() == 0  # a removed handle is not removed again


def test_installations_nest() -> None:
    from cudnn.torch import install_sdpa_overrides

    outer = install_sdpa_overrides()
    inner = install_sdpa_overrides()
    try:
        inner.remove()
        assert not inner.installed and outer.installed and all(_has_cuda_kernel(op) for op in DENSE)
    finally:
        outer.remove()
    assert not any(_has_cuda_kernel(op) for op in DENSE)
    assert "removed" in repr(outer) and outer.ops == inner.ops


def test_installing_says_nothing() -> None:
    """torch warns once per process when a kernel of its own is overridden (a CUDA build has
    one): installing is the point, so the provider installs quietly, in a fresh process where
    that warning has not been given yet."""
    code = ("import cudnn.torch as ct; a = ct.install_sdpa_overrides(); b = ct.install_sdpa_overrides(); "
            "b.remove(); a.remove()")
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and "Overriding a previously registered kernel" not in out.stderr, out.stderr[-2000:]


def test_install_is_once_per_process() -> None:
    from cudnn.torch import install

    first = install()
    try:
        assert install() is first and first.installed
    finally:
        first.remove()
    second = install()
    try:
        assert second is not first and second.installed
    finally:
        second.remove()


def test_registered_with_torchs_flash_registry() -> None:
    import cudnn.torch  # noqa: F401

    listing = getattr(torch.nn.attention, "list_flash_attention_impls", None)
    if listing is None or hasattr(torch.backends.cuda, "enable_cudnn_sdp_python"):
        pytest.skip("this torch has no flash-attention registry (or its own cuDNN switch)")
    assert "CUDNN" in listing()


# -- cudnn.torch: the kernels' outputs and fallbacks (cuDNN execution stood in) -------------------

def test_served_forward_matches_torchs_meta_contract(declared: dict[str, Any]) -> None:
    from cudnn.torch import calls, sdpa_provider

    q, k = bshd(2, 4, 16, 64), meta(2, 2, 24, 64)
    before = calls["fwd"]
    got = sdpa_provider._fwd(q, k, k, None, True, 0.0, True, False, scale=None)
    want = torch.ops.aten._scaled_dot_product_cudnn_attention.default(q, k, k, None, True, 0.0, True, False)
    assert calls["fwd"] == before + 1 and len(got) == len(want) == 9
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype)
        else:
            assert g == w
    assert scales(declared["key"]) == [pytest.approx(1 / 8)]  # scale None: 1/sqrt(D)
    lse = got[1]
    grads = sdpa_provider._bwd(got[0], q, k, k, got[0], lse.squeeze(-1), got[6], got[7], None, None, None, 16, 24,
                               0.0, True, scale=0.5)
    assert calls["bwd"] >= 1 and [g.shape for g in grads] == [q.shape, k.shape, k.shape]
    assert scales(declared["key"]) == [0.5]


def test_fallbacks_call_torchs_worker_ops_and_log_once(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from cudnn.torch import calls, sdpa_provider

    worker: list[tuple] = []
    monkeypatch.setattr(torch.ops.aten, "_cudnn_attention_forward",
                        lambda *a, **kw: worker.append(("fwd", a, kw)) or "torch's forward")
    monkeypatch.setattr(torch.ops.aten, "_cudnn_attention_backward",
                        lambda *a, **kw: worker.append(("bwd", a, kw)) or "torch's backward")
    monkeypatch.setattr(sdpa_provider, "_logged", set())
    q, bias = meta(1, 2, 8, 64), meta(1, 1, 8, 8)
    before = dict(calls)
    with caplog.at_level(logging.INFO, logger="cudnn.torch"):
        assert sdpa_provider._fwd(q, q, q, bias, True, 0.0, False, True, scale=0.3) == "torch's forward"
        assert sdpa_provider._fwd(q, q, q, None, True, 0.0, False, True) == "torch's forward"
        h60 = meta(1, 2, 8, 60)
        assert sdpa_provider._fwd(h60, h60, h60, None, True) == "torch's forward"  # refused: head dim
        f32 = meta(1, 2, 8, 64, dtype=torch.float32)
        assert sdpa_provider._fwd(f32, f32, f32, bias, True, 0.1) == "torch's forward"  # refused: dtype
        seed = torch.empty((), device="meta", dtype=torch.int64)
        assert sdpa_provider._bwd(q, q, q, q, q, meta(1, 2, 8, dtype=torch.float32), seed, seed, None,
                                  meta(2, dtype=torch.int32), None, 8, 8, 0.2, False) == "torch's backward"
    assert calls["fwd_cpp"] == before["fwd_cpp"] + 4 and calls["bwd_cpp"] == before["bwd_cpp"] + 1
    assert calls["fwd"] == before["fwd"]
    assert worker[0][1][3] is bias and worker[0][1][6:] == (8, 8, True, 0.0, False, True)
    assert worker[0][2] == {"scale": 0.3}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("return_debug_mask" in m for m in messages) == 1  # once per reason
    assert any("head dim D_qk=60" in m for m in messages) and any("float32" in m for m in messages)
    assert any("nested-tensor" in m for m in messages)


def test_a_graph_cudnn_refuses_goes_to_torchs_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call whose graph cuDNN rejects (a parameter it refuses, no engine) is torch's kernel's,
    which accepts it or raises torch's own error: never an error torch would not raise."""
    from cudnn._lib.status import CudnnBadParamError, cudnnGraphNotSupportedError
    from cudnn.ops import attention
    from cudnn.torch import calls, sdpa_provider

    monkeypatch.setattr(torch.ops.aten, "_cudnn_attention_forward", lambda *a, **kw: "torch's forward")
    q, bias = meta(1, 2, 8, 64), meta(1, 1, 8, 8)
    for error in (CudnnBadParamError(2000, "finalize", "bad bias strides"),
                  cudnnGraphNotSupportedError(3000, "heuristics", "no engine")):
        def refuse(*args: Any, error: Exception = error) -> Any:
            raise error

        monkeypatch.setattr(attention, "forward", refuse)
        before = calls["fwd_cpp"]
        assert sdpa_provider._fwd(q, q, q, bias, True) == "torch's forward"
        assert calls["fwd_cpp"] == before + 1


@pytest.fixture
def attention_graphs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """`cudnn.ops.attention`'s graphs as declared and validated on a fresh pygraph (nothing
    builds or runs: there is no GPU here); each entry: its key, ports by role, the roles bound
    and the addresses a run was given."""
    from cudnn.ops import attention  # noqa: F401  (registers its ops)

    seen: list[dict[str, Any]] = []

    class Stand:
        def __init__(self, entry: dict[str, Any]) -> None:
            self.entry, self.ports, self.info = entry, entry["ports"], None
            self.derived: dict[Any, Any] = {}

        def bind(self, *roles: str) -> Stand:
            self.entry["roles"] = roles
            return self

    def build(dev: int, key: tuple, make: Any) -> Stand:
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
        entry = {"key": key, "ports": make(g)}
        g.validate()
        seen.append(entry)
        return Stand(entry)

    monkeypatch.setattr(rt, "CACHE", types.SimpleNamespace(lookup=lambda dev, key: None, build=build))
    monkeypatch.setattr(rt, "run", lambda built, dev, ptrs: built.entry.__setitem__("ptrs", ptrs))
    return seen


def test_served_mask_and_dropout_forward_and_backward(attention_graphs: list[dict[str, Any]]) -> None:
    """An attn_bias (here torch's [B, 1, S_q, S_kv] expanded over the heads) and dropout are
    served on the attention graphs: the bias port is [B, 1, S_q, S_kv] (the repeated head
    dimension kept at 1), the seed and offset are the halves of one drawn [2] tensor, returned
    for the backward, which binds the same halves again."""
    from cudnn.torch import calls, sdpa_provider

    q, k = bshd(2, 4, 16, 64), bshd(2, 2, 24, 64)
    bias = meta(2, 1, 16, 24).expand(2, 4, 16, 24)
    rng = torch.empty(2, dtype=torch.int64, device="meta")
    before = dict(calls)
    with pytest.MonkeyPatch.context() as mp:
        from cudnn.ops import attention

        mp.setattr(attention, "draw_rng", lambda q: rng)
        out = sdpa_provider._fwd(q, k, k, bias, True, 0.25, False, False, scale=0.5)
    assert calls["fwd"] == before["fwd"] + 1 and calls["fwd_cpp"] == before["fwd_cpp"]
    o, lse, seed, offset = out[0], out[1], out[6], out[7]
    assert o.shape == q.shape and o.stride() == q.stride()  # torch's cuDNN contract: O in Q's layout
    assert lse.shape == (2, 4, 16, 1) and lse.dtype == torch.float32
    assert (seed.shape, offset.shape) == ((), ())
    fwd = attention_graphs[-1]
    assert fwd["roles"] == ("q", "k", "v", "bias", "seed", "offset", "o", "stats")
    assert fwd["ports"]["bias"].get_dim() == [2, 1, 16, 24]
    assert fwd["ptrs"][4:6] == (rng.data_ptr(), rng.data_ptr() + 8)
    grads = sdpa_provider._bwd(o, q, k, k, o, lse.squeeze(-1), seed, offset, bias, None, None, 16, 24, 0.25, True,
                               scale=0.5)
    assert calls["bwd"] == before["bwd"] + 1
    assert [(g.shape, g.stride()) for g in grads] == [(t.shape, t.stride()) for t in (q, k, k)]
    bwd = attention_graphs[-1]
    assert bwd["roles"][-3:] == ("bias", "seed", "offset") and 0.25 in bwd["key"] and 0.5 in bwd["key"]
    assert bwd["ptrs"][-2:] == fwd["ptrs"][4:6]  # the forward's dropout mask again


@pytest.mark.parametrize("shape", [(1, 4, 16, 24), (2, 1, 16, 24), (1, 1, 16, 24), (2, 4, 16, 24)])
def test_the_backward_graph_with_dbias_validates(attention_graphs: list[dict[str, Any]],
                                                 shape: tuple[int, ...]) -> None:
    """A bias that requires grad: the backward graph declares dBias packed in the bias's shape
    (read over the batch or the heads where it has one), bound after the gradients of Q, K, V,
    and the backward returns it in that shape."""
    from cudnn.ops import attention

    q, k = bshd(2, 4, 16, 64), bshd(2, 4, 24, 64)
    bias = meta(*shape)
    o, stats, _ = attention._run(q, k, k, bias, False, 0.5, True, o_like_q=True)
    dq, _, _, db = attention._run_bwd(o, q, k, k, o, stats, bias, False, 0.5, bias_grad=True)
    bwd = attention_graphs[-1]
    assert bwd["roles"][-2:] == ("bias", "dbias") and bwd["key"][-1] is True
    assert bwd["ports"]["dbias"].get_dim() == list(shape)
    assert bwd["ports"]["dbias"].get_stride() == list(torch.empty(shape, device="meta").stride())
    assert db is not None and db.shape == bias.shape and db.dtype == q.dtype and dq.shape == q.shape
    assert attention._run_bwd(o, q, k, k, o, stats, bias, False, 0.5)[3] is None  # no dBias asked: none made
    assert attention_graphs[-1]["roles"][-1] == "bias"


def test_a_boolean_mask_becomes_an_additive_bias() -> None:
    from cudnn.ops import attention

    q, k = torch.zeros(2, 2, 3, 8, dtype=H), torch.zeros(2, 2, 4, 8, dtype=H)
    keep = torch.tensor([[True, True, False, False]]).expand(3, 4)  # one row repeated over S_q
    bias = attention.mask_bias(keep, q, k)
    assert bias.shape == (1, 1, 3, 4) and bias.dtype == H and bias.stride(3) == 1 and bias.stride(2) == 4
    lowest = torch.finfo(H).min
    assert bias[0, 0].tolist() == [[0.0, 0.0, lowest, lowest]] * 3
    float_mask = torch.randn(2, 1, 1, 4)  # float32: in Q's dtype
    float_mask[1, 0, 0, 3] = float("-inf")
    got = attention.mask_bias(float_mask, q, k)
    assert got.shape == (2, 1, 3, 4) and got.dtype == H and torch.equal(got[0, 0, 2], float_mask[0, 0, 0].to(H))
    assert got[1, 0, 1, 3] == float("-inf") and torch.equal(got[1, 0, 1, :3], float_mask[1, 0, 0, :3].to(H))
    ready = torch.zeros(2, 1, 3, 4, dtype=H)  # torch's own form of a converted boolean mask
    assert attention.mask_bias(ready, q, k) is ready
    with pytest.raises(OpError, match="attn_mask: shape \\(5,\\) does not broadcast"):
        attention.mask_bias(torch.zeros(5), q, k)
    with pytest.raises(OpError, match="attn_mask: shape \\(3, 1, 3, 4\\) does not broadcast to \\[B, H, 3, 4\\]"):
        attention.mask_bias(torch.zeros(3, 1, 3, 4), q, k)  # three batches, the query's two


def test_the_rng_halves_are_found_again() -> None:
    from cudnn.torch import sdpa_provider

    rng = torch.tensor([7, 11], dtype=torch.int64)
    same = sdpa_provider._rng_of(rng[0], rng[1])
    assert same.data_ptr() == rng.data_ptr() and same.tolist() == [7, 11]
    apart = sdpa_provider._rng_of(torch.tensor(3), torch.tensor([5]))  # torch's own kernel's two scalars
    assert apart.tolist() == [3, 5] and apart.dtype == torch.int64


def test_varlen_window_conventions() -> None:
    from cudnn.torch import sdpa_provider

    assert sdpa_provider._window(False, None) == (False, -1, -1)
    assert sdpa_provider._window(False, [-1, 0]) == (True, -1, -1)  # flash's causal
    assert sdpa_provider._window(False, [7, 0]) == (True, 8, -1)  # 7 back plus the token itself
    assert sdpa_provider._window(True, [3, 2]) == (True, 4, 2)  # refused later by sdpa_fwd (causal + right > 0)


def test_a_dense_call_is_found_by_its_arguments_once_its_layouts_are_recorded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The keyed path of a dense forward/backward runs only a graph whose builder recorded its
    output layouts; a graph cached under the key without them (another thread still building)
    or no graph at all sends the call the checked way."""
    q = meta(1, 2, 8, 64)
    ran: list[tuple] = []
    monkeypatch.setattr(rt, "run", lambda built, dev, ptrs: ran.append(ptrs))
    key = so._fwd_key(q, q, q, 0.125, False, False, -1, -1, True)
    found: dict[tuple, Any] = {}
    monkeypatch.setattr(rt, "CACHE", types.SimpleNamespace(lookup=lambda dev, k: found.get(k)))
    assert so._fwd_cached(key, q, q, q) is None  # nothing cached
    found[key] = types.SimpleNamespace(info=None)
    assert so._fwd_cached(key, q, q, q) is None and not ran  # cached, layouts not recorded yet
    found[key].info = ((1, 2, 8, 64), (1024, 64, 128, 1), (1, 2, 8, 1))
    o, stats = so._fwd_cached(key, q, q, q)
    assert (o.shape, o.stride(), stats.shape, stats.dtype) == ((1, 2, 8, 64), (1024, 64, 128, 1), (1, 2, 8, 1),
                                                               torch.float32)
    assert len(ran) == 1 and len(ran[0]) == 5
    found[key].info = ((1, 2, 8, 64), (1024, 512, 64, 1), None)  # built without the log-sum-exp
    o, stats = so._fwd_cached(key, q, q, q)
    assert o.stride() == (1024, 512, 64, 1) and stats is None and len(ran[1]) == 4
    assert so.forward(q, q, q, 0.125)[1].shape == (0,) and so.dense_forward(q, q, q, 0.125)[1] is None
    lse = meta(1, 2, 8, 1, dtype=torch.float32)
    bkey = so._bwd_key(q, q, q, q, q, lse, 0.125, False, False, -1, -1, False)
    found[bkey] = types.SimpleNamespace(info=None)
    assert so._bwd_cached(bkey, q, q, q, q, q, lse) is None
    found[bkey].info = tuple(((1, 2, 8, 64), (1024, 512, 64, 1)) for _ in range(3))
    grads = so._bwd_cached(bkey, q, q, q, q, q, lse)
    assert [g.stride() for g in grads] == [(1024, 512, 64, 1)] * 3 and len(ran[-1]) == 9
    runs = len(ran)
    assert so.backward(q, q, q, q, q, lse, 0.125) is not None  # found by the same key
    assert len(ran) == runs + 1 and len(ran[-1]) == 9


# -- the nested path: torch's worker ops -----------------------------------------------------------

def test_worker_ops_are_overridden_where_torch_hands_out_its_kernels() -> None:
    """Where torch can hand out its own worker kernels (``torch.library.get_kernel``, a CUDA build)
    the provider overrides them too, and gives them back on removal; elsewhere it leaves them."""
    from cudnn.torch import install_sdpa_overrides, sdpa_provider

    workers = ("aten::_cudnn_attention_forward", "aten::_cudnn_attention_backward")
    able = bool(sdpa_provider._worker_kernels())
    with install_sdpa_overrides() as handle:
        assert (set(workers) <= set(handle.ops)) == able
        assert all(_has_cuda_kernel(op) for op in workers) == able
    assert not any(_has_cuda_kernel(op) for op in workers)


class _TorchKernel:
    """Stands for one of torch's own worker kernels: records the calls handed to it."""

    def __init__(self, answer: str) -> None:
        self.answer, self.calls = answer, []  # type: ignore[var-annotated]

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> str:
        self.calls.append((keyset, args, kwargs))
        return self.answer


def test_nested_calls_run_packed_graphs_and_the_rest_runs_torchs_worker_kernels(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed call of the worker forward (cum_seq_q, no mask, no dropout) runs sdpa_fwd's THD
    graph, counted as served; a dense call, or one with a mask, dropout or paged KV, goes to
    torch's kernel with every argument as given (the latter counted and logged); the backward
    runs sdpa_bwd on the padded log-sum-exp of a [T_q, H, 1] one and hands any other to torch."""
    from cudnn.torch import calls, sdpa_provider

    fwd, bwd = _TorchKernel("torch's forward"), _TorchKernel("torch's backward")
    monkeypatch.setattr(sdpa_provider, "_torch_worker", {"_cudnn_attention_forward": fwd,
                                                         "_cudnn_attention_backward": bwd})
    ran: list[tuple] = []

    def forward(*args: Any, **kw: Any) -> tuple:
        ran.append(("fwd", args, kw))
        return meta(30, 4, 64), meta(30, 4, 1, dtype=torch.float32)

    def backward(*args: Any, **kw: Any) -> tuple:
        ran.append(("bwd", args, kw))
        return "dq", "dk", "dv"

    monkeypatch.setattr(so, "forward", forward)
    monkeypatch.setattr(so, "backward", backward)
    monkeypatch.setattr(so, "thd_lse_to_padded", lambda lse, cu, n: ("padded", lse.shape, n))
    q, cu = meta(30, 4, 64), meta(3, dtype=torch.int32)
    before = dict(calls)
    out = sdpa_provider._worker_fwd("ks", q, q, q, None, cu, cu, 20, 20, True, 0.0, True, False, scale=0.25)
    assert out[0].shape == (30, 4, 64) and out[1].shape == (30, 4, 1) and out[2] is cu and out[4:6] == (20, 20)
    assert ran[0][2] == {"cu_seqlens_q": cu, "cu_seqlens_kv": cu, "max_seqlen_q": 20, "max_seqlen_kv": 20,
                         "return_lse": True} and ran[0][1][3:] == (0.25, True)
    assert calls["fwd"] == before["fwd"] + 1 and not fwd.calls
    dense = meta(1, 4, 8, 64)
    assert sdpa_provider._worker_fwd("ks", dense, dense, dense, None, None, None, 8, 8, True) == "torch's forward"
    assert fwd.calls[-1] == ("ks", (dense, dense, dense, None, None, None, 8, 8, True, 0.0, False, False),
                             {"scale": None})
    assert calls["fwd_cpp"] == before["fwd_cpp"]  # the dense caller counted it (or it is not the provider's)
    bias = meta(1, 1, 20, 20)
    for kwargs, extra in (({"attn_bias": bias}, {}), ({"dropout_p": 0.1}, {}), ({}, {"seqused_k": cu})):
        a = {"attn_bias": None, "dropout_p": 0.0} | kwargs
        assert sdpa_provider._worker_fwd("ks", q, q, q, a["attn_bias"], cu, cu, 20, 20, True, a["dropout_p"],
                                         **extra) == "torch's forward"
        assert fwd.calls[-1][2] == {"scale": None, **extra}
    assert calls["fwd_cpp"] == before["fwd_cpp"] + 3 and calls["fwd"] == before["fwd"] + 1
    lse, seed = meta(30, 4, 1, dtype=torch.float32), torch.empty((), device="meta", dtype=torch.int64)
    assert sdpa_provider._worker_bwd("ks", q, q, q, q, q, lse, seed, seed, None, cu, cu, 20, 20, 0.0,
                                     True) == ("dq", "dk", "dv")
    assert ran[1][1][5] == ("padded", (30, 4, 1), 20) and ran[1][2]["cu_seqlens_q"] is cu
    assert calls["bwd"] == before["bwd"] + 1
    other = meta(2, 4, 20, dtype=torch.float32)  # a log-sum-exp the provider's forward does not make
    assert sdpa_provider._worker_bwd("ks", q, q, q, q, q, other, seed, seed, None, cu, cu, 20, 20, 0.0,
                                     True) == "torch's backward"
    assert sdpa_provider._worker_bwd("ks", dense, dense, dense, dense, dense, lse, seed, seed, None, None, None,
                                     8, 8, 0.0, False) == "torch's backward"
    assert calls["bwd"] == before["bwd"] + 1 and calls["bwd_cpp"] == before["bwd_cpp"] + 1
