"""cudnn.ops / cudnn.nn without a GPU: op registration and schemas, fake kernels (shapes,
strides, dtypes through meta tensors, forward and backward), refusals that name the argument,
the version gate of causal_conv1d, module parameters and state dicts, convert() on CPU
modules, and the lazy, torch-free ``import cudnn``. Skipped where torch is not installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import cudnn  # noqa: E402
import cudnn.nn as cnn  # noqa: E402
from cudnn import ops  # noqa: E402
from cudnn._lib import loader  # noqa: E402

META = "meta"


def meta(*shape: int, dtype: torch.dtype = torch.float32, grad: bool = True) -> torch.Tensor:
    return torch.empty(*shape, device=META, dtype=dtype).requires_grad_(grad)


def test_import_cudnn_does_not_import_torch_and_resolves_the_subpackages_lazily() -> None:
    code = ("import sys, cudnn; assert 'torch' not in sys.modules; "
            "assert {'ops', 'nn', 'experimental'} <= set(dir(cudnn)); import cudnn.experimental as e; "
            "assert 'torch' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_subpackages_by_attribute() -> None:
    assert cudnn.ops is ops and cudnn.nn is cnn
    assert cudnn.experimental.scaled_dot_product_attention is ops.scaled_dot_product_attention


@pytest.mark.parametrize("name", ["conv2d_bias_act", "conv2d_bias_act_backward", "layer_norm",
                                  "layer_norm_backward", "batch_norm", "batch_norm_backward", "sdpa",
                                  "sdpa_backward", "causal_conv1d", "causal_conv1d_backward"])
def test_ops_are_registered_in_the_cudnn_namespace(name: str) -> None:
    schema = getattr(torch.ops.cudnn, name).default._schema
    assert schema.name == f"cudnn::{name}"
    assert not any(a.alias_info and a.alias_info.is_write for a in schema.arguments)  # functional ops


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "silu"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_conv2d_bias_act_shapes_strides_and_gradients(act: str, layout: str) -> None:
    x = torch.empty(2, 8, 17, 15, device=META)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    w, b = meta(16, 4, 3, 3), meta(16)
    y = ops.conv2d_bias_act(x, w, b, stride=2, padding=1, dilation=1, groups=2, act=act)
    ref = torch.nn.functional.conv2d(torch.empty(2, 8, 17, 15, device=META), torch.empty(16, 4, 3, 3, device=META),
                                     None, 2, 1, 1, 2)
    assert y.shape == ref.shape
    assert y.is_contiguous(memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
    y.sum().backward()
    assert x.grad.shape == x.shape and x.grad.stride() == x.stride()
    assert w.grad.shape == w.shape and b.grad.shape == b.shape


def test_norm_shapes_and_gradients() -> None:
    x, w, b = meta(4, 10, 32), meta(32), meta(32)
    y = ops.layer_norm(x, [32], w, b)
    y.sum().backward()
    assert y.shape == x.shape and x.grad.shape == x.shape and w.grad.shape == (32,) and b.grad.shape == (32,)
    x2, w2 = meta(3, 5, 6, dtype=torch.bfloat16), meta(5, 6, dtype=torch.bfloat16)
    y2 = ops.rms_norm(x2, (5, 6), w2)
    y2.sum().backward()
    assert y2.dtype == torch.bfloat16 and w2.grad.shape == (5, 6)
    xb, bw, bb = meta(2, 8, 4, 4), meta(8), meta(8)
    yb = ops.batch_norm(xb, torch.zeros(8, device=META), torch.ones(8, device=META), bw, bb, training=True)
    yb.sum().backward()
    assert yb.shape == xb.shape and bw.grad.shape == (8,) and bb.grad.shape == (8,)


def test_sdpa_shapes_gqa_and_bhsd_output() -> None:
    q = meta(2, 8, 64, 32, dtype=torch.float16)
    k, v = meta(2, 2, 80, 32, dtype=torch.float16), meta(2, 2, 80, 48, dtype=torch.float16)
    o = ops.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert o.shape == (2, 8, 64, 48) and o.transpose(1, 2).is_contiguous()  # BSHD memory
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_sdpa_takes_three_and_five_dimensions_as_torch() -> None:
    """[B, S, D] (one head) and [A, B, H, S, D] (batch dimensions before the heads): O and the
    gradients keep the inputs' shapes, masks broadcast as against torch's batch dimensions."""
    for shape, mask in (((2, 64, 32), (2, 64, 80)), ((3, 2, 4, 64, 32), (2, 1, 64, 80))):
        q = meta(*shape, dtype=torch.float16)
        k = meta(*shape[:-2], 80, 32, dtype=torch.float16)
        v = meta(*shape[:-2], 80, 48, dtype=torch.float16)
        o = ops.scaled_dot_product_attention(q, k, v, attn_mask=meta(*mask, dtype=torch.float16, grad=False))
        assert o.shape == (*shape[:-1], 48)
        o.sum().backward()
        assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    q5 = meta(3, 2, 4, 64, 32, dtype=torch.float16)
    _raises(lambda: ops.scaled_dot_product_attention(q5, q5[:1], q5[:1]), "key/value", "batch dimensions")
    _raises(lambda: ops.scaled_dot_product_attention(q5, q5, q5, attn_mask=meta(2, 3, 2, 4, 64, 64,
                                                                                  dtype=torch.float16, grad=False)),
            "attn_mask", "at most 5 dimensions")
    _raises(lambda: ops.scaled_dot_product_attention(q5, q5, q5, attn_mask=meta(5, 1, 64, 64, dtype=torch.float16,
                                                                                  grad=False)),
            "attn_mask", "does not broadcast")
    q2 = meta(64, 32, dtype=torch.float16)
    _raises(lambda: ops.scaled_dot_product_attention(q2, q2, q2), "query", "4 dimensions")


def _raises(fn, *words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(cudnn.GraphError) as info:
        fn()
    for w in words:
        assert w in str(info.value), str(info.value)


@pytest.mark.parametrize("shape", [(64, 64), (1, 4, 64, 64), (2, 1, 1, 64)])
def test_a_mask_that_requires_grad_gets_its_gradient_in_its_own_shape(shape: tuple[int, ...]) -> None:
    """A float attn_mask that requires grad is differentiated (the graphs' dBias, in the shape of
    the bias the graph reads, summed by autograd to the mask's own shape); on meta tensors the
    fake kernels give the shapes."""
    q = meta(2, 4, 64, 32, dtype=torch.float16)
    mask = meta(*shape, dtype=torch.float16)
    o = ops.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    dq, dmask = torch.autograd.grad(o, (q, mask), torch.ones_like(o))
    assert dq.shape == q.shape and dmask.shape == mask.shape and dmask.dtype == mask.dtype


def test_bad_input_is_refused_naming_op_and_argument() -> None:
    q = meta(2, 4, 64, 32, dtype=torch.float16)
    k = meta(2, 2, 64, 32, dtype=torch.float16)
    sdpa = ops.scaled_dot_product_attention
    _raises(lambda: sdpa(q, k, k), "scaled_dot_product_attention", "enable_gqa")
    for p in (1.0, -0.1, "0.1", True):  # dropout_p > 0 runs cuDNN's Philox dropout; these are not probabilities
        _raises(lambda p=p: sdpa(q, q, q, dropout_p=p), "dropout_p", "[0, 1)")
    _raises(lambda: sdpa(q.float(), q.float(), q.float()), "query", "dtype")
    _raises(lambda: sdpa(q, q, q, attn_mask=meta(64, 64, dtype=torch.float16), is_causal=True), "attn_mask")
    _raises(lambda: sdpa(q.transpose(2, 3), q, q), "query")
    x, w = meta(2, 8, 8, 8), meta(4, 8, 3, 3)
    _raises(lambda: ops.conv2d_bias_act(x, w, act="tanh"), "conv2d_bias_act", "act")
    _raises(lambda: ops.conv2d_bias_act(x, meta(4, 3, 3, 3)), "weight", "groups")
    _raises(lambda: ops.conv2d_bias_act(x, w, meta(5)), "bias", "4 elements")
    _raises(lambda: ops.conv2d_bias_act(x, w.half()), "weight", "dtype")
    _raises(lambda: ops.conv2d_bias_act(torch.randn(2, 8, 8, 8), torch.randn(4, 8, 3, 3)), "CUDA tensor")
    _raises(lambda: ops.layer_norm(meta(4, 32), [31]), "layer_norm", "normalized_shape")
    _raises(lambda: ops.layer_norm(meta(4, 32), [32], meta(31)), "weight", "32 elements")
    _raises(lambda: ops.batch_norm(meta(2, 8, 4, 4), None, None, meta(7), training=True), "batch_norm", "weight")
    _raises(lambda: ops.batch_norm(meta(2, 8, 4), None, None, training=True), "input", "dimensions")
    _raises(lambda: ops.causal_conv1d(meta(2, 8, 16), meta(8, 9)), "causal_conv1d", "kernel_size")
    _raises(lambda: ops.causal_conv1d(meta(2, 8, 16), meta(8, 4), activation="relu"), "activation")


def test_causal_conv1d_is_gated_on_cudnn_9_22(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below 9.22 (the GPU machine's 9.19) the op refuses before touching memory."""
    x = torch.randn(2, 8, 16)
    monkeypatch.setattr(loader, "version", lambda: 91900)
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.22"):
        torch.ops.cudnn.causal_conv1d(x, torch.randn(8, 4), None, "identity")


def test_causal_conv1d_fake_shapes() -> None:
    x, w, b = meta(2, 8, 16), meta(8, 4), meta(8)
    y = ops.causal_conv1d(x, w, b, "silu")
    y.sum().backward()
    assert y.shape == x.shape and w.grad.shape == w.shape and b.grad.shape == b.shape


def test_modules_keep_the_torch_parameters_and_state_dict_keys() -> None:
    pairs = [(cnn.Conv2dBiasAct(8, 16, 3, padding=1, act="relu"), nn.Conv2d(8, 16, 3, padding=1)),
             (cnn.LayerNorm(32), nn.LayerNorm(32)), (cnn.RMSNorm(32), nn.RMSNorm(32)),
             (cnn.MultiheadAttention(64, 4, batch_first=True), nn.MultiheadAttention(64, 4, batch_first=True))]
    for ours, theirs in pairs:
        assert isinstance(ours, type(theirs))
        assert list(ours.state_dict()) == list(theirs.state_dict())
        ours.load_state_dict(theirs.state_dict())
        for (n1, p1), (n2, p2) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert n1 == n2 and torch.equal(p1, p2)
    with pytest.raises(cudnn.GraphError, match="act"):
        cnn.Conv2dBiasAct(8, 16, 3, act="tanh")


def test_conv_padding_strings_and_modes_as_torch() -> None:
    """"same" keeps the spatial size also for an even kernel (fake shapes); the module takes
    nn.Conv2d's padding_mode and string padding and keeps its state-dict keys; a bad string or
    "same" with a stride is refused naming the argument."""
    x, w, b = meta(2, 8, 13, 11), meta(16, 8, 4, 4), meta(16)
    for dilation in (1, 2):
        assert ops.conv2d_bias_act(x, w, b, 1, "same", dilation).shape == (2, 16, 13, 11)
    assert ops.conv2d_bias_act(x, w, b, 1, "valid").shape == (2, 16, 10, 8)
    with pytest.raises(ops.OpError, match="padding: expected 'same', 'valid'"):
        ops.conv2d_bias_act(x, w, b, 1, "full")
    with pytest.raises(ops.OpError, match="padding: 'same' needs stride 1"):
        ops.conv2d_bias_act(x, w, b, 2, "same")
    ours = cnn.Conv2dBiasAct(8, 16, 3, 1, "same", 2, padding_mode="reflect", act="relu")
    theirs = nn.Conv2d(8, 16, 3, 1, "same", 2, padding_mode="reflect")
    assert list(ours.state_dict()) == list(theirs.state_dict()) and ours.padding_mode == "reflect"
    assert "act='relu'" in repr(ours) and "padding_mode=reflect" in repr(ours)
    with pytest.raises(ops.OpError, match=r"padding_mode: got 'relu', an activation.*act='relu'"):
        cnn.Conv2dBiasAct(8, 16, 3, 1, 1, 1, 1, True, "relu")


def test_mha_refuses_what_cudnn_does_not_compute() -> None:
    m = cnn.MultiheadAttention(64, 4, batch_first=True)
    x = torch.randn(2, 8, 64)
    with pytest.raises(cudnn.GraphError, match="need_weights"):
        m(x, x, x, need_weights=True)
    bads = (torch.zeros(2, 7, dtype=torch.bool), torch.zeros(8, 2, dtype=torch.bool),
            torch.zeros(2, 8, dtype=torch.int32))
    for bad in bads:
        with pytest.raises(cudnn.GraphError, match=r"key_padding_mask: expected a boolean or float \[B, S\] tensor"):
            m(x, x, x, key_padding_mask=bad)
    with pytest.raises(cudnn.GraphError, match=r"query/key/value: expected three 3-D .* \(8, 64\), \(2, 8, 64\)"):
        m(x[0], x, x)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Sequential(nn.Flatten(), nn.LayerNorm(8 * 4 * 4), nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(x)))
        return self.head(self.relu(self.bn2(self.conv2(y)) + y))


def _randomize_bn(model: nn.Module) -> None:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def test_convert_folds_conv_bn_relu_in_eval_and_swaps_norms() -> None:
    torch.manual_seed(0)
    model = _Net()
    _randomize_bn(model)
    model.eval()
    conv = cnn.convert(model)
    kinds = [type(m) for m in conv.modules()]
    assert kinds.count(cnn.Conv2dBiasAct) == 2 and nn.BatchNorm2d not in kinds
    assert cnn.LayerNorm in kinds and nn.Linear in kinds
    acts = sorted(m.act for m in conv.modules() if isinstance(m, cnn.Conv2dBiasAct))
    assert acts == ["none", "relu"]  # conv2 + bn2 feeds an add: its ReLU stays outside
    # the folded weights reproduce conv -> bn on CPU (torch's conv on the folded parameters)
    fused = next(m for m in conv.modules() if isinstance(m, cnn.Conv2dBiasAct) and m.act == "relu")
    x = torch.randn(2, 3, 4, 4)
    ref = torch.relu(model.bn(model.conv(x)))
    got = torch.relu(nn.functional.conv2d(x, fused.weight, fused.bias, padding=1))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert type(model.bn) is nn.BatchNorm2d  # not in place: the original is untouched


def test_convert_in_training_mode_only_swaps_norms() -> None:
    model = _Net().train()
    conv = cnn.convert(model)
    kinds = [type(m) for m in conv.modules()]
    assert nn.BatchNorm2d in kinds and cnn.Conv2dBiasAct not in kinds and cnn.LayerNorm in kinds


def test_convert_folds_sequential_runs_when_fx_cannot_trace() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent control flow: fx cannot trace this
                return self.body(x)
            return -self.body(x)

    model = Branchy().eval()
    conv = cnn.convert(model)
    assert type(conv) is Branchy
    assert [type(m) for m in conv.body] == [cnn.Conv2dBiasAct, nn.Identity, nn.Identity, nn.Conv2d]


def test_graph_cache_is_bounded_lru() -> None:
    from cudnn.ops._runtime import GraphCache

    cache = GraphCache(size=2)
    made: list[int] = []

    class FakeGraph:  # stands in for a pygraph: the cache calls build, get_workspace_size and runner
        def __init__(self, **_: object) -> None: ...

        def build(self, _modes: object) -> None: ...

        def get_workspace_size(self) -> int:
            return 0

        def runner(self, sized: bool = False) -> None:
            return None

        def lowering_trial_pending(self) -> bool:
            return False

    import cudnn.ops._runtime as rt

    saved, saved_handle = rt.pygraph, rt.handle
    rt.pygraph, rt.handle = FakeGraph, (lambda device: None)  # type: ignore[assignment]
    try:
        for key in ("a", "b", "a", "c"):
            cache.get(0, key, lambda g, key=key: made.append(key) or {})
        assert made == ["a", "b", "c"]  # "a" was found the second time
        assert len(cache) == 2
        cache.get(0, "a", lambda g: made.append("a") or {})
        assert made == ["a", "b", "c"]  # "a" was used more recently than "b": "b" left
        cache.get(0, "b", lambda g: made.append("b") or {})
        assert made[-1] == "b" and cache.builds == 4
        cache.get(1, "a", lambda g: made.append("a1") or {})
        assert made[-1] == "a1"  # per device
    finally:
        rt.pygraph, rt.handle = saved, saved_handle


def test_eager_path_only_for_plain_cuda_tensors_outside_tracing() -> None:
    """`_runtime.eager` sends CPU, meta and fake tensors, and calls under a dispatch mode, to
    the registered op (whose fake kernels and checks the tests above exercise)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from cudnn.ops._runtime import eager

    assert not eager(torch.empty(2))
    assert not eager(torch.empty(2, device=META))
    assert not eager(None, torch.empty(2, device=META))
    assert not eager(torch.nn.Parameter(torch.empty(2, device=META)))
    assert not eager("not a tensor")
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.empty(2))
        assert not eager(fake)
    with FakeTensorMode():
        assert not eager()  # a dispatch mode is active


def test_fake_tensor_mode_reaches_the_fake_kernels() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 8, 10, 10, dtype=torch.float16, device=META).contiguous(memory_format=torch.channels_last)
        w = torch.empty(16, 8, 3, 3, dtype=torch.float16, device=META)
        y = ops.conv2d_bias_act(x, w, None, 1, 1, 1, 1, "relu")
        n = ops.layer_norm(torch.empty(4, 32, device=META), [32])
    assert y.shape == (2, 16, 10, 10) and y.is_contiguous(memory_format=torch.channels_last)
    assert n.shape == (4, 32)


def test_registered_attention_op_refuses_dropout_without_its_seed_and_offset() -> None:
    """torch.ops.cudnn.sdpa / sdpa_backward take dropout's Philox seed and offset as an int64 (2,)
    tensor on the query's device (cudnn.ops draws it per call); anything else is refused by name."""
    from cudnn.ops.attention import _check_rng

    q = torch.empty(1, 1, 8, 8)
    _check_rng(torch.zeros(2, dtype=torch.int64), q)
    for bad in (None, torch.zeros(2, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int64),
                torch.zeros(4, dtype=torch.int64)[::2], torch.zeros(2, dtype=torch.int64, device=META)):
        with pytest.raises(cudnn.GraphError, match=r"rng: with dropout_p > 0, expected the Philox seed and offset"):
            _check_rng(bad, q)
