"""cudnn.legacy on the GPU, compared with PyTorch.

References are computed by PyTorch in float64 from the same inputs. Tolerances:
- float32 convolutions: max |error| <= 2e-3 x max |reference| (the algorithm cuDNN picks may
  use TF32 tensor cores, which round inputs to 10 bits); float64 convolutions: 1e-10.
- element-wise ops, pooling, softmax: rtol 1e-5, atol 1e-6 (float32 rounding only).
- batch norm (reductions over N*H*W): rtol 1e-4, atol 1e-5.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import cudnn
from cudnn import legacy as L

ROOT = Path(__file__).resolve().parents[2]
_DTYPES = {torch.float32: "CUDNN_DATA_FLOAT", torch.float64: "CUDNN_DATA_DOUBLE"}


@pytest.fixture(scope="module")
def handle() -> Iterator[L.Opaque]:
    h = L.cudnnCreate()
    L.cudnnSetStream(h, torch.cuda.current_stream())
    yield h
    L.cudnnDestroy(h)


class Descriptors:
    """Creates descriptors for torch tensors and destroys them all at the end of a test."""

    def __init__(self) -> None:
        self._made: list[tuple[object, L.Opaque]] = []

    def tensor(self, t: torch.Tensor) -> L.Opaque:
        d = self._keep(L.cudnnDestroyTensorDescriptor, L.cudnnCreateTensorDescriptor())
        assert t.dim() == 4
        L.cudnnSetTensorNdDescriptor(d, _DTYPES[t.dtype], 4, list(t.shape), list(t.stride()))
        return d

    def filter(self, w: torch.Tensor) -> L.Opaque:
        d = self._keep(L.cudnnDestroyFilterDescriptor, L.cudnnCreateFilterDescriptor())
        L.cudnnSetFilter4dDescriptor(d, _DTYPES[w.dtype], "CUDNN_TENSOR_NCHW", *w.shape)
        return d

    def convolution(self, pad: int, stride: int, dtype: torch.dtype) -> L.Opaque:
        d = self._keep(L.cudnnDestroyConvolutionDescriptor, L.cudnnCreateConvolutionDescriptor())
        L.cudnnSetConvolution2dDescriptor(d, pad, pad, stride, stride, 1, 1, "CUDNN_CROSS_CORRELATION", _DTYPES[dtype])
        return d

    def make(self, create: object, destroy: object) -> L.Opaque:
        return self._keep(destroy, create())  # type: ignore[operator]

    def _keep(self, destroy: object, d: L.Opaque) -> L.Opaque:
        self._made.append((destroy, d))
        return d

    def close(self) -> None:
        for destroy, d in reversed(self._made):
            destroy(d)  # type: ignore[operator]
        assert all(d.destroyed for _, d in self._made)


@pytest.fixture
def descs() -> Iterator[Descriptors]:
    d = Descriptors()
    yield d
    d.close()


def _workspace(size: int) -> torch.Tensor | None:
    return torch.empty(size, dtype=torch.uint8, device="cuda") if size else None


def _assert_conv_close(got: torch.Tensor, ref: torch.Tensor) -> None:
    tol = 1e-10 if got.dtype == torch.float64 else 2e-3
    err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= tol, f"max error {err:.2e} x max|ref| exceeds {tol:.0e}"


def _first_ok(perfs: list) -> object:  # type: ignore[type-arg]
    assert perfs, "cuDNN returned no algorithm"
    ok = [p for p in perfs if p.status == 0]
    assert ok, f"no algorithm succeeded: {perfs}"
    return ok[0]


# -- convolution -----------------------------------------------------------------------------------

def _conv_problem(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(2, 8, 16, 16, device="cuda", dtype=dtype)
    w = torch.randn(16, 8, 3, 3, device="cuda", dtype=dtype)
    dy = torch.randn(2, 16, 8, 8, device="cuda", dtype=dtype)  # stride 2, pad 1 -> 8x8
    return x, w, dy


def _torch_conv(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y = F.conv2d(x64, w64, stride=2, padding=1)
    y.backward(dy.double())
    return y.detach(), x64.grad, w64.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_convolution_forward(handle: L.Opaque, descs: Descriptors, dtype: torch.dtype) -> None:
    x, w, dy = _conv_problem(dtype)
    ref, _, _ = _torch_conv(x, w, dy)
    xd, wd, conv = descs.tensor(x), descs.filter(w), descs.convolution(1, 2, dtype)
    assert L.cudnnGetConvolution2dForwardOutputDim(conv, xd, wd) == tuple(ref.shape)
    y = torch.empty(ref.shape, device="cuda", dtype=dtype)
    yd = descs.tensor(y)
    count = L.cudnnGetConvolutionForwardAlgorithmMaxCount(handle)
    perfs = L.cudnnGetConvolutionForwardAlgorithm_v7(handle, xd, wd, conv, yd, count)
    assert all(isinstance(p, L.cudnnConvolutionFwdAlgoPerf_t) for p in perfs) and len(perfs) <= count
    perf = _first_ok(perfs)
    L.cudnnSetConvolutionMathType(conv, perf.mathType)
    size = L.cudnnGetConvolutionForwardWorkspaceSize(handle, xd, wd, conv, yd, perf.algo)
    assert isinstance(size, int) and size >= 0
    L.cudnnConvolutionForward(handle, 1.0, xd, x, wd, w, conv, perf.algo, _workspace(size), size, 0.0, yd, y)
    _assert_conv_close(y, ref)
    # alpha and beta reach cuDNN as numbers of the right width: y = 0.5 * conv + 2 * y0
    y0 = torch.randn_like(y)
    y.copy_(y0)
    L.cudnnConvolutionForward(handle, 0.5, xd, x, wd, w, conv, perf.algo, _workspace(size), size, 2.0, yd, y)
    _assert_conv_close(y, 0.5 * ref + 2.0 * y0.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_convolution_backward_data(handle: L.Opaque, descs: Descriptors, dtype: torch.dtype) -> None:
    x, w, dy = _conv_problem(dtype)
    _, ref, _ = _torch_conv(x, w, dy)
    wd, dyd, conv = descs.filter(w), descs.tensor(dy), descs.convolution(1, 2, dtype)
    dx = torch.empty_like(x)
    dxd = descs.tensor(dx)
    count = L.cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle)
    perf = _first_ok(L.cudnnFindConvolutionBackwardDataAlgorithm(handle, wd, dyd, conv, dxd, count))
    assert isinstance(perf, L.cudnnConvolutionBwdDataAlgoPerf_t) and perf.time >= 0
    L.cudnnSetConvolutionMathType(conv, perf.mathType)
    size = L.cudnnGetConvolutionBackwardDataWorkspaceSize(handle, wd, dyd, conv, dxd, perf.algo)
    L.cudnnConvolutionBackwardData(handle, 1.0, wd, w, dyd, dy, conv, perf.algo, _workspace(size), size, 0.0, dxd, dx)
    _assert_conv_close(dx, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_convolution_backward_filter(handle: L.Opaque, descs: Descriptors, dtype: torch.dtype) -> None:
    x, w, dy = _conv_problem(dtype)
    _, _, ref = _torch_conv(x, w, dy)
    xd, dyd, conv = descs.tensor(x), descs.tensor(dy), descs.convolution(1, 2, dtype)
    dw = torch.empty_like(w)
    dwd = descs.filter(dw)
    count = L.cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle)
    perf = _first_ok(L.cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, xd, dyd, conv, dwd, count))
    L.cudnnSetConvolutionMathType(conv, perf.mathType)
    size = L.cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, xd, dyd, conv, dwd, perf.algo)
    L.cudnnConvolutionBackwardFilter(handle, 1.0, xd, x, dyd, dy, conv, perf.algo, _workspace(size), size, 0.0, dwd, dw)
    _assert_conv_close(dw, ref)


def test_bias_add_and_backward_bias(handle: L.Opaque, descs: Descriptors) -> None:
    torch.manual_seed(1)
    y = torch.randn(2, 16, 8, 8, device="cuda")
    bias = torch.randn(1, 16, 1, 1, device="cuda")
    expected = y + bias
    L.cudnnAddTensor(handle, 1.0, descs.tensor(bias), bias, 1.0, descs.tensor(y), y)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)
    db = torch.empty_like(bias)
    L.cudnnConvolutionBackwardBias(handle, 1.0, descs.tensor(y), y, 0.0, descs.tensor(db), db)
    torch.testing.assert_close(db.double(), y.double().sum((0, 2, 3), keepdim=True), rtol=1e-5, atol=1e-4)


# -- activation, pooling, softmax ------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "coef", "reference"), [
    ("CUDNN_ACTIVATION_RELU", 0.0, torch.relu),
    ("CUDNN_ACTIVATION_SIGMOID", 0.0, torch.sigmoid),
    ("CUDNN_ACTIVATION_TANH", 0.0, torch.tanh),
    ("CUDNN_ACTIVATION_CLIPPED_RELU", 1.5, lambda t: t.clamp(0.0, 1.5)),
    ("CUDNN_ACTIVATION_ELU", 1.0, F.elu),
])
def test_activation_forward_and_backward(handle: L.Opaque, descs: Descriptors, mode: str, coef: float,
                                         reference: object) -> None:
    torch.manual_seed(2)
    x = torch.randn(2, 3, 8, 8, device="cuda")
    dy = torch.randn_like(x)
    act = descs.make(L.cudnnCreateActivationDescriptor, L.cudnnDestroyActivationDescriptor)
    L.cudnnSetActivationDescriptor(act, L.cudnnActivationMode[mode], L.cudnnNanPropagation["CUDNN_NOT_PROPAGATE_NAN"],
                                   coef)
    xd = descs.tensor(x)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    L.cudnnActivationForward(handle, act, 1.0, xd, x, 0.0, xd, y)
    x64 = x.double().requires_grad_()
    ref = reference(x64)  # type: ignore[operator]
    ref.backward(dy.double())
    torch.testing.assert_close(y.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    L.cudnnActivationBackward(handle, act, 1.0, xd, y, xd, dy, xd, x, 0.0, xd, dx)
    torch.testing.assert_close(dx.double(), x64.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("mode", "reference"), [
    ("CUDNN_POOLING_MAX", lambda t: F.max_pool2d(t, 3, 2, 1)),
    ("CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING", lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=True)),
    ("CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING", lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False)),
])
def test_pooling_forward_and_backward(handle: L.Opaque, descs: Descriptors, mode: str, reference: object) -> None:
    torch.manual_seed(3)
    x = torch.randn(2, 3, 16, 16, device="cuda")
    pool = descs.make(L.cudnnCreatePoolingDescriptor, L.cudnnDestroyPoolingDescriptor)
    L.cudnnSetPooling2dDescriptor(pool, mode, "CUDNN_NOT_PROPAGATE_NAN", 3, 3, 1, 1, 2, 2)
    x64 = x.double().requires_grad_()
    ref = reference(x64)  # type: ignore[operator]
    xd = descs.tensor(x)
    assert L.cudnnGetPooling2dForwardOutputDim(pool, xd) == tuple(ref.shape)
    y = torch.empty(ref.shape, device="cuda")
    yd = descs.tensor(y)
    L.cudnnPoolingForward(handle, pool, 1.0, xd, x, 0.0, yd, y)
    torch.testing.assert_close(y.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    dy = torch.randn_like(y)
    ref.backward(dy.double())
    dx = torch.empty_like(x)
    L.cudnnPoolingBackward(handle, pool, 1.0, yd, y, yd, dy, xd, x, 0.0, xd, dx)
    torch.testing.assert_close(dx.double(), x64.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("algo", "mode", "reference"), [
    ("CUDNN_SOFTMAX_ACCURATE", "CUDNN_SOFTMAX_MODE_CHANNEL", lambda t: torch.softmax(t, 1)),
    ("CUDNN_SOFTMAX_ACCURATE", "CUDNN_SOFTMAX_MODE_INSTANCE",
     lambda t: torch.softmax(t.reshape(t.shape[0], -1), 1).reshape(t.shape)),
    ("CUDNN_SOFTMAX_LOG", "CUDNN_SOFTMAX_MODE_CHANNEL", lambda t: torch.log_softmax(t, 1)),
])
def test_softmax_forward_and_backward(handle: L.Opaque, descs: Descriptors, algo: str, mode: str,
                                      reference: object) -> None:
    torch.manual_seed(4)
    x = torch.randn(4, 10, 3, 5, device="cuda")
    dy = torch.randn_like(x)
    x64 = x.double().requires_grad_()
    ref = reference(x64)  # type: ignore[operator]
    ref.backward(dy.double())
    xd = descs.tensor(x)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    L.cudnnSoftmaxForward(handle, L.cudnnSoftmaxAlgorithm[algo], L.cudnnSoftmaxMode[mode], 1.0, xd, x, 0.0, xd, y)
    torch.testing.assert_close(y.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    L.cudnnSoftmaxBackward(handle, algo, mode, 1.0, xd, y, xd, dy, 0.0, xd, dx)
    torch.testing.assert_close(dx.double(), x64.grad, rtol=1e-5, atol=1e-5)


# -- batch normalization ---------------------------------------------------------------------------

def _bn_problem() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(5)
    c = 6
    x = torch.randn(4, c, 8, 8, device="cuda") * 2.0 + 0.5
    weight = torch.rand(c, device="cuda") + 0.5
    bias = torch.randn(c, device="cuda")
    running_mean = torch.randn(c, device="cuda") * 0.1
    running_var = torch.rand(c, device="cuda") + 0.5
    return x, weight, bias, running_mean, running_var


def _bn_descriptor(descs: Descriptors, xd: L.Opaque) -> L.Opaque:
    bnd = descs.make(L.cudnnCreateTensorDescriptor, L.cudnnDestroyTensorDescriptor)
    L.cudnnDeriveBNTensorDescriptor(bnd, xd, L.cudnnBatchNormMode["CUDNN_BATCHNORM_SPATIAL"])
    assert L.cudnnGetTensor4dDescriptor(bnd)[:5] == (L.cudnnDataType_t.CUDNN_DATA_FLOAT, 1, 6, 1, 1)
    return bnd


def test_batch_norm_inference(handle: L.Opaque, descs: Descriptors) -> None:
    x, weight, bias, mean, var = _bn_problem()
    eps = 1e-5
    xd = descs.tensor(x)
    bnd = _bn_descriptor(descs, xd)
    y = torch.empty_like(x)
    L.cudnnBatchNormalizationForwardInference(handle, "CUDNN_BATCHNORM_SPATIAL", 1.0, 0.0, xd, x, xd, y, bnd,
                                              weight, bias, mean, var, eps)
    ref = F.batch_norm(x.double(), mean.double(), var.double(), weight.double(), bias.double(), False, 0.0, eps)
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-5)


def test_batch_norm_training_forward_and_backward(handle: L.Opaque, descs: Descriptors) -> None:
    x, weight, bias, mean, var = _bn_problem()
    eps, factor = 1e-5, 0.1
    xd = descs.tensor(x)
    bnd = _bn_descriptor(descs, xd)
    y = torch.empty_like(x)
    running_mean, running_var = mean.clone(), var.clone()
    save_mean, save_inv_var = torch.empty_like(mean), torch.empty_like(var)
    L.cudnnBatchNormalizationForwardTraining(handle, "CUDNN_BATCHNORM_SPATIAL", 1.0, 0.0, xd, x, xd, y, bnd,
                                             weight, bias, factor, running_mean, running_var, eps,
                                             save_mean, save_inv_var)
    x64 = x.double().requires_grad_()
    w64, b64 = weight.double().requires_grad_(), bias.double().requires_grad_()
    ref_mean, ref_var = mean.double(), var.double()  # updated in place by F.batch_norm
    ref = F.batch_norm(x64, ref_mean, ref_var, w64, b64, True, factor, eps)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(y.double(), ref.detach(), **tol)
    torch.testing.assert_close(running_mean.double(), ref_mean, **tol)
    torch.testing.assert_close(running_var.double(), ref_var, **tol)  # unbiased batch variance, as PyTorch
    torch.testing.assert_close(save_mean.double(), x.double().mean((0, 2, 3)), **tol)
    batch_var = x.double().var((0, 2, 3), unbiased=False)
    torch.testing.assert_close(save_inv_var.double(), 1.0 / torch.sqrt(batch_var + eps), **tol)

    dy = torch.randn_like(x)
    ref.backward(dy.double())
    dx, dweight, dbias = torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias)
    L.cudnnBatchNormalizationBackward(handle, "CUDNN_BATCHNORM_SPATIAL", 1.0, 0.0, 1.0, 0.0, xd, x, xd, dy, xd, dx,
                                      bnd, weight, dweight, dbias, eps, save_mean, save_inv_var)
    torch.testing.assert_close(dx.double(), x64.grad, **tol)
    torch.testing.assert_close(dweight.double(), w64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dbias.double(), b64.grad, rtol=1e-4, atol=1e-4)


# -- handles, streams, errors on a real GPU --------------------------------------------------------

def test_handle_stream_and_fill(handle: L.Opaque, descs: Descriptors) -> None:
    stream = torch.cuda.Stream()
    other = L.cudnnCreate()
    try:
        L.cudnnSetStream(other, stream)
        assert L.cudnnGetStream(other) == stream.cuda_stream
        t = torch.zeros(2, 3, 4, 5, device="cuda", dtype=torch.float64)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            L.cudnnSetTensor(other, descs.tensor(t), t, 2.5)  # the value in the tensor's type (double)
        stream.synchronize()
        assert bool((t == 2.5).all())
    finally:
        L.cudnnDestroy(other)
    assert other.destroyed
    with pytest.raises(cudnn.DescriptorClosedError, match="destroyed"):
        L.cudnnGetStream(other)


def test_shapes_cudnn_refuses_raise(handle: L.Opaque, descs: Descriptors) -> None:
    x = torch.randn(2, 3, 4, 5, device="cuda")
    y = torch.empty(2, 3, 4, 6, device="cuda")  # not broadcastable: cuDNN refuses
    with pytest.raises(cudnn.CudnnError, match="cudnnAddTensor"):
        L.cudnnAddTensor(handle, 1.0, descs.tensor(x), x, 0.0, descs.tensor(y), y)


# -- the ported README example ---------------------------------------------------------------------

@pytest.mark.parametrize("memory", ["torch", "cupy"])
def test_legacy_convolution_example(memory: str) -> None:
    if memory == "cupy":
        pytest.importorskip("cupy")
    cmd = [sys.executable, str(ROOT / "examples" / "legacy_convolution.py"), "--n", "8", "--c", "32", "--k", "32",
           "--size", "28"] + (["--cupy"] if memory == "cupy" else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Cudnn algorithm = " in out.stdout and "fprop:" in out.stdout
    assert out.stdout.rstrip().endswith("match"), out.stdout
