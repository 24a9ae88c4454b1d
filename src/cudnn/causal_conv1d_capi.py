"""``cudnn.causal_conv1d_forward`` / ``causal_conv1d_backward``: the official positional-only
functions over cudnnCausalConv1dForward / Backward, a plain C API of libcudnn >= 9.22 (not the
graph API).

A depthwise causal 1-D convolution: x and y are (batch, dim, seq_len), weight (dim,
kernel_size) and bias (dim,), all contiguous device memory; y[t] = act(bias + sum_j
x[t - j] * weight[kernel_size - 1 - j]). Arguments are plain integers (device addresses, sizes,
raw cudnnDataType_t and cudnnCausalConv1dActivation_t values), checked here before the call so
a bad one is an exception naming it, never a kernel reading wild memory.
"""

from __future__ import annotations

from typing import Any

from ._lib.enums import data_type

SINCE = 92200
KERNEL_SIZES = frozenset([*range(2, 9), 16, 32, 64, 128, 256])
DATA_TYPES = (data_type.DOUBLE, data_type.FLOAT, data_type.HALF, data_type.BFLOAT16)
ACTIVATIONS = {0: "IDENTITY", 1: "SILU"}  # cudnnCausalConv1dActivation_t
# dweight / dbias type the header requires for each data type
_DW_TYPE = {int(t): data_type.DOUBLE if t == data_type.DOUBLE else data_type.FLOAT for t in DATA_TYPES}


def require_version(version: int, what: str) -> None:
    """Refuse with "needs cuDNN >= 9.22.0; the loaded libcudnn is X" below 9.22."""
    from ._lib.status import FeatureUnavailableError

    if version < SINCE:
        raise FeatureUnavailableError(what, SINCE, version)


def _int(fn: str, arg: str, value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{fn}: {arg}: expected an int, got {type(value).__name__} {value!r}")
    return int(value)


def _pointer(fn: str, arg: str, value: Any) -> int:
    ptr = _int(fn, arg, value)
    if ptr <= 0:
        raise ValueError(f"{fn}: {arg}: expected a device address, got {ptr:#x}"
                         + (" (cuDNN requires a bias buffer)" if "bias" in arg else ""))
    return ptr


def _sizes(fn: str, batch: Any, dim: Any, seq_len: Any, kernel_size: Any) -> tuple[int, int, int, int]:
    b, d, s, k = (_int(fn, n, v) for n, v in (("batch", batch), ("dim", dim), ("seq_len", seq_len),
                                               ("kernel_size", kernel_size)))
    for name, v in (("batch", b), ("dim", d), ("seq_len", s)):
        if not 1 <= v < 2**31:
            raise ValueError(f"{fn}: {name}: expected 1 <= {name} < 2**31, got {v}")
    if k not in KERNEL_SIZES:
        raise ValueError(f"{fn}: kernel_size: cuDNN supports 2-8, 16, 32, 64, 128 and 256, got {k}")
    if b * d * s >= 2**31:
        raise ValueError(f"{fn}: batch * dim * seq_len = {b * d * s} elements is more than int32 indexing allows")
    return b, d, s, k


def _dtype(fn: str, arg: str, value: Any, allowed: tuple[data_type, ...]) -> int:
    raw = _int(fn, arg, value)
    if raw not in {int(t) for t in allowed}:
        try:
            got = data_type(raw).name
        except ValueError:
            got = str(raw)
        raise ValueError(f"{fn}: {arg}: expected one of {', '.join(t.name for t in allowed)} "
                         f"(cudnn.data_type or its int value), got {got}")
    return raw


def _activation(fn: str, value: Any) -> int:
    raw = _int(fn, "activation", value)
    if raw not in ACTIVATIONS:
        raise ValueError(f"{fn}: activation: expected 0 (IDENTITY) or 1 (SILU), got {raw}")
    return raw


def _call(fn: str, c_name: str, args: tuple[Any, ...]) -> None:
    from ._lib import capi, loader
    from ._lib.status import raise_status

    require_version(loader.report().version, f"{fn} ({c_name})")
    status = getattr(capi.subquadratic, c_name)(*args)
    if status:
        raise_status(status, f"{fn}: {c_name}")


def causal_conv1d_forward(stream: int, x_ptr: int, weight_ptr: int, bias_ptr: int, out_ptr: int, batch: int,
                          dim: int, seq_len: int, kernel_size: int, data_type: int, activation: int,
                          /) -> None:
    """out = activation(causal_conv1d(x, weight) + bias) on ``stream`` (cuDNN >= 9.22)."""
    fn = "causal_conv1d_forward"
    s = _int(fn, "stream", stream)
    if s < 0:
        raise ValueError(f"{fn}: stream: expected a cudaStream_t (0 for the default stream), got {s}")
    ptrs = [_pointer(fn, n, v) for n, v in (("x_ptr", x_ptr), ("weight_ptr", weight_ptr), ("bias_ptr", bias_ptr),
                                           ("out_ptr", out_ptr))]
    sizes = _sizes(fn, batch, dim, seq_len, kernel_size)
    dt = _dtype(fn, "data_type", data_type, DATA_TYPES)
    _call(fn, "cudnnCausalConv1dForward", (s, *ptrs, *sizes, dt, _activation(fn, activation)))


def causal_conv1d_backward(stream: int, x_ptr: int, weight_ptr: int, bias_ptr: int, dy_ptr: int, dx_ptr: int,
                           dweight_ptr: int, dbias_ptr: int, batch: int, dim: int, seq_len: int, kernel_size: int,
                           data_type: int, dw_data_type: int, activation: int, /) -> None:
    """dx, and dweight / dbias accumulated (zero them first), of ``causal_conv1d_forward``
    (cuDNN >= 9.22). ``dw_data_type`` is DOUBLE for DOUBLE data, else FLOAT."""
    fn = "causal_conv1d_backward"
    s = _int(fn, "stream", stream)
    if s < 0:
        raise ValueError(f"{fn}: stream: expected a cudaStream_t (0 for the default stream), got {s}")
    ptrs = [_pointer(fn, n, v) for n, v in (("x_ptr", x_ptr), ("weight_ptr", weight_ptr), ("bias_ptr", bias_ptr),
                                           ("dy_ptr", dy_ptr), ("dx_ptr", dx_ptr), ("dweight_ptr", dweight_ptr),
                                           ("dbias_ptr", dbias_ptr))]
    sizes = _sizes(fn, batch, dim, seq_len, kernel_size)
    dt = _dtype(fn, "data_type", data_type, DATA_TYPES)
    want = _DW_TYPE[dt]
    dw = _dtype(fn, "dw_data_type", dw_data_type, (want,))
    _call(fn, "cudnnCausalConv1dBackward", (s, *ptrs, *sizes, dt, dw, _activation(fn, activation)))
