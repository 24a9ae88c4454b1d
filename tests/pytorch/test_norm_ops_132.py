"""The official 1.32 norm and MoE torch ops without a GPU: the public signatures of
``cudnn.ops.norm`` and their older call form, the op schemas exactly as the official registers
them, fake kernels on meta tensors (forward, backward and autograd), torch.compile tracing, and
the refusals that name the argument. Skipped where torch is not installed."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import cudnn  # noqa: E402
import cudnn.ops.norm as norm  # noqa: E402
from cudnn.ops import _runtime as rt  # noqa: E402

H, F32 = torch.float16, torch.float32
EMPTY = inspect.Parameter.empty

SCHEMAS = {
    "rmsnorm": "cudnn::rmsnorm(Tensor x, Tensor scale, float eps, Tensor? bias=None) -> (Tensor, Tensor)",
    "rmsnorm_bwd": "cudnn::rmsnorm_bwd(Tensor dy, Tensor x, Tensor scale, Tensor inv_var, bool has_dbias=False) "
                   "-> (Tensor, Tensor, Tensor)",
    "layernorm": "cudnn::layernorm(Tensor x, Tensor scale, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)",
    "layernorm_bwd": "cudnn::layernorm_bwd(Tensor dy, Tensor x, Tensor scale, Tensor mean, Tensor inv_var) "
                     "-> (Tensor, Tensor, Tensor)",
    "moe_grouped_matmul": "cudnn::moe_grouped_matmul(Tensor token, Tensor weight, Tensor first_token_offset, "
                          "Tensor? token_index=None, Tensor? token_ks=None, str mode=\"none\", int top_k=1) -> Tensor",
}


def meta(*shape: int, dtype: torch.dtype = H, grad: bool = False) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype).requires_grad_(grad)


def params(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
            if p.kind is not inspect.Parameter.KEYWORD_ONLY]


# -- signatures and schemas ----------------------------------------------------------------------

def test_public_functions_have_the_official_signatures() -> None:
    # cudnn/ops/norm/rmsnorm.py and layernorm.py of the official 1.32 wheel
    assert params(norm.rms_norm) == [("input", EMPTY), ("weight", EMPTY), ("bias", None), ("eps", 1e-5)]
    assert params(norm.layer_norm) == [("input", EMPTY), ("normalized_shape", EMPTY), ("weight", None),
                                       ("bias", None), ("eps", 1e-5)]
    for fn in (norm.rms_norm, norm.layer_norm):  # cudnn-py's one addition is keyword-only
        extra = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
        assert extra == ["training"]
    assert cudnn.ops.rms_norm is norm.rms_norm and cudnn.ops.layer_norm is norm.layer_norm


def test_experimental_and_gemm_ops_resolve_to_the_official_signature_functions() -> None:
    from cudnn.experimental import moe
    from cudnn.experimental.ops import layer_norm, moe_grouped_matmul, rms_norm
    from cudnn.gemm import moe_grouped_matmul as gemm_moe
    from cudnn.gemm.ops import moe_grouped_matmul as gemm_ops_moe

    assert rms_norm is norm.rms_norm and layer_norm is norm.layer_norm
    assert moe_grouped_matmul is moe.moe_grouped_matmul is gemm_moe is gemm_ops_moe


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_op_schemas_are_the_officials(name: str) -> None:
    import cudnn.experimental.moe  # noqa: F401 - registers cudnn::moe_grouped_matmul

    assert str(getattr(torch.ops.cudnn, name).default._schema) == SCHEMAS[name]


def test_the_older_ops_stay_beside_the_official_ones() -> None:
    for name in ("layer_norm", "layer_norm_backward", "batch_norm"):
        assert getattr(torch.ops.cudnn, name).default._schema.name == f"cudnn::{name}"


# -- fake kernels ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [H, torch.bfloat16, F32])
def test_rmsnorm_fake_shapes_and_dtypes(dtype: torch.dtype) -> None:
    x, s, b = meta(8, 32, 1, 1, dtype=dtype), meta(1, 32, 1, 1, dtype=dtype), meta(1, 32, 1, 1, dtype=dtype)
    y, inv = torch.ops.cudnn.rmsnorm(x, s, 1e-5, b)
    assert (y.shape, y.dtype, inv.shape, inv.dtype) == (x.shape, dtype, (8, 1, 1, 1), F32)
    for has_dbias, db_shape in ((True, (1, 32, 1, 1)), (False, (0,))):
        dx, ds, db = torch.ops.cudnn.rmsnorm_bwd(x, x, s, inv, has_dbias)
        assert (dx.shape, dx.dtype, ds.shape, ds.dtype) == (x.shape, dtype, s.shape, dtype)
        assert tuple(db.shape) == db_shape and db.dtype == dtype


@pytest.mark.parametrize("dtype", [H, torch.bfloat16, F32])
def test_layernorm_fake_shapes_and_dtypes(dtype: torch.dtype) -> None:
    x, p = meta(8, 32, 1, 1, dtype=dtype), meta(1, 32, 1, 1, dtype=F32)
    y, mean, inv = torch.ops.cudnn.layernorm(x, p, p, 1e-5)
    assert (y.shape, y.dtype) == (x.shape, dtype)
    assert all((t.shape, t.dtype) == ((8, 1, 1, 1), F32) for t in (mean, inv))
    dx, ds, db = torch.ops.cudnn.layernorm_bwd(x, x, p, mean, inv)
    assert (dx.shape, dx.dtype) == (x.shape, dtype)
    assert all((t.shape, t.dtype) == ((1, 32, 1, 1), F32) for t in (ds, db))


@pytest.mark.parametrize("bias", [True, False])
def test_rmsnorm_autograd_on_meta(bias: bool) -> None:
    x, s = meta(8, 32, 1, 1, grad=True), meta(1, 32, 1, 1, grad=True)
    b = meta(1, 32, 1, 1, grad=True) if bias else None
    y, inv = torch.ops.cudnn.rmsnorm(x, s, 1e-5, b)
    assert not inv.requires_grad  # marked non-differentiable, as in the official
    y.sum().backward()
    assert x.grad.shape == x.shape and s.grad.shape == s.shape and s.grad.dtype == H
    assert (b.grad.shape == b.shape) if b is not None else True


def test_layernorm_autograd_on_meta() -> None:
    x, s, b = meta(8, 32, 1, 1, grad=True), meta(1, 32, 1, 1, dtype=F32, grad=True), \
        meta(1, 32, 1, 1, dtype=F32, grad=True)
    y, mean, inv = torch.ops.cudnn.layernorm(x, s, b, 1e-5)
    assert not mean.requires_grad and not inv.requires_grad
    y.sum().backward()
    assert (x.grad.dtype, s.grad.dtype, b.grad.dtype) == (H, F32, F32) and b.grad.shape == (1, 32, 1, 1)


def test_public_functions_on_meta_tensors() -> None:
    x = meta(4, 6, 32, grad=True)
    assert norm.rms_norm(x, meta(32)).shape == x.shape
    assert norm.rms_norm(x, meta(32), meta(32), 1e-6).shape == x.shape
    assert norm.rms_norm(x, None).shape == x.shape
    assert norm.layer_norm(x, (32,), meta(32), meta(32)).shape == x.shape
    assert norm.layer_norm(x, 32).shape == x.shape
    assert norm.layer_norm(x, [6, 32], meta(6, 32), None).shape == x.shape  # several trailing dims
    y = norm.rms_norm(x, meta(32, grad=True))
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_rms_norm_older_call_form_is_told_apart_by_the_second_argument() -> None:
    x = meta(4, 6, 32)
    assert norm.rms_norm(x, (6, 32), meta(6, 32), None).shape == x.shape  # (x, normalized_shape, weight, eps)
    assert norm.rms_norm(x, [32], None).shape == x.shape
    assert norm.rms_norm(x, torch.Size([32])).shape == x.shape
    with pytest.raises(rt.OpError, match=r"rms_norm: normalized_shape: expected the trailing dims"):
        norm.rms_norm(x, [31])
    with pytest.raises(rt.OpError, match=r"rms_norm: weight: expected 32 elements"):
        norm.rms_norm(x, [32], meta(31))  # the third argument is the weight in the older form
    with pytest.raises(TypeError, match=r"rms_norm: weight: expected a torch.Tensor \(or a normalized shape\), "
                                        r"got str"):
        norm.rms_norm(x, "w")
    with pytest.raises(TypeError, match=r"rms_norm: bias: expected a torch.Tensor or None, got float"):
        norm.rms_norm(x, meta(32), 0.5)


def test_the_official_ops_trace_under_torch_compile_fullgraph() -> None:
    def f(x: torch.Tensor, s: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        y, _inv = torch.ops.cudnn.rmsnorm(x, s, 1e-5)
        z, _mean, _inv2 = torch.ops.cudnn.layernorm(y, p, p, 1e-5)
        return z

    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="eager")(meta(8, 32, 1, 1), meta(1, 32, 1, 1),
                                                             meta(1, 32, 1, 1, dtype=F32))
    assert out.shape == (8, 32, 1, 1) and out.dtype == H


# -- refusals that name the argument ---------------------------------------------------------------

@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: torch.ops.cudnn.rmsnorm(meta(8, 32), meta(1, 32, 1, 1), 1e-5), rt.OpError,
     r"cudnn::rmsnorm: x: expected shape \(rows, hidden_size, 1, 1\), got \(8, 32\)"),
    (lambda: torch.ops.cudnn.rmsnorm(meta(8, 32, 1, 1), meta(32), 1e-5), rt.OpError,
     r"cudnn::rmsnorm: scale: expected shape \(1, 32, 1, 1\), got \(32,\)"),
    (lambda: torch.ops.cudnn.rmsnorm(meta(8, 32, 1, 1), meta(1, 32, 1, 1, dtype=F32), 1e-5), TypeError,
     r"cudnn::rmsnorm: scale: expected dtype float16, got float32"),
    (lambda: torch.ops.cudnn.rmsnorm(meta(8, 32, 1, 1, dtype=torch.int32), meta(1, 32, 1, 1), 1e-5), TypeError,
     r"cudnn::rmsnorm: x: expected dtype float16, bfloat16 or float32, got int32"),
    (lambda: torch.ops.cudnn.rmsnorm(meta(8, 32, 1, 1), meta(1, 32, 1, 1), 1e-5, meta(1, 16, 1, 1)), rt.OpError,
     r"cudnn::rmsnorm: bias: expected shape \(1, 32, 1, 1\), got \(1, 16, 1, 1\)"),
    (lambda: torch.ops.cudnn.rmsnorm(meta(32, 8, 1, 1).permute(1, 0, 2, 3), meta(1, 32, 1, 1), 1e-5), rt.OpError,
     r"cudnn::rmsnorm: x: expected a contiguous tensor"),
    (lambda: torch.ops.cudnn.rmsnorm_bwd(meta(8, 32, 1, 1), meta(8, 32, 1, 1), meta(1, 32, 1, 1),
                                         meta(8, 1, 1, 1), True), TypeError,
     r"cudnn::rmsnorm_bwd: inv_var: expected dtype float32, got float16"),
    (lambda: torch.ops.cudnn.rmsnorm_bwd(meta(8, 32, 1, 1, dtype=F32), meta(8, 32, 1, 1), meta(1, 32, 1, 1),
                                         meta(8, 1, 1, 1, dtype=F32)), TypeError,
     r"cudnn::rmsnorm_bwd: dy: expected dtype float16, got float32"),
    (lambda: torch.ops.cudnn.layernorm(meta(8, 32, 1, 1), meta(1, 32, 1, 1), meta(1, 32, 1, 1, dtype=F32), 1e-5),
     TypeError, r"cudnn::layernorm: scale: expected dtype float32, got float16"),
    (lambda: torch.ops.cudnn.layernorm_bwd(meta(8, 32, 1, 1), meta(8, 32, 1, 1), meta(1, 32, 1, 1, dtype=F32),
                                           meta(4, 1, 1, 1, dtype=F32), meta(8, 1, 1, 1, dtype=F32)), rt.OpError,
     r"cudnn::layernorm_bwd: mean: expected shape \(8, 1, 1, 1\), got \(4, 1, 1, 1\)"),
])
def test_refusals_name_the_op_and_argument(call: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


def test_cpu_tensors_are_refused_before_any_kernel() -> None:
    x, s = torch.zeros(8, 32, 1, 1, dtype=H), torch.ones(1, 32, 1, 1, dtype=H)
    with pytest.raises(rt.OpError, match=re.escape("rmsnorm: x: expected a CUDA tensor, got one on cpu")):
        torch.ops.cudnn.rmsnorm(x, s, 1e-5)
    p = torch.ones(1, 32, 1, 1)
    with pytest.raises(rt.OpError, match=re.escape("layernorm: x: expected a CUDA tensor, got one on cpu")):
        torch.ops.cudnn.layernorm(x, p, p, 1e-5)


def test_op_errors_are_value_errors_as_the_officials() -> None:
    assert issubclass(rt.OpError, ValueError)


# -- cudnn::moe_grouped_matmul ---------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "rows"), [("none", 64), ("gather", 96), ("scatter", 64)])
def test_moe_op_fake_kernel_gives_the_output_shape(mode: str, rows: int) -> None:
    import cudnn.experimental.moe  # noqa: F401

    out = torch.ops.cudnn.moe_grouped_matmul(meta(1, 64, 32), meta(4, 48, 32).transpose(1, 2),
                                             meta(4, 1, 1, dtype=torch.int32), meta(1, rows, 1, dtype=torch.int32),
                                             meta(1, 64, 1, dtype=torch.int32), mode, 2)
    assert tuple(out.shape) == (1, rows, 48) and out.dtype == H


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"mode": "combine"}, r"mode: expected one of \('none', 'gather', 'scatter'\), got 'combine'"),
    ({"mode": "gather"}, r"token_index: mode 'gather' needs it, got None"),
    ({"top_k": 0}, r"top_k: expected an int >= 1, got 0"),
])
def test_moe_op_refusals(kwargs: dict[str, Any], match: str) -> None:
    from cudnn.gemm.ops import moe_grouped_matmul

    with pytest.raises(rt.OpError, match=match):
        moe_grouped_matmul(meta(1, 64, 32), meta(4, 32, 48), meta(4, 1, 1, dtype=torch.int32), **kwargs)
    with pytest.raises(rt.OpError, match=match):  # the torch op checks the same
        torch.ops.cudnn.moe_grouped_matmul(meta(1, 64, 32), meta(4, 32, 48), meta(4, 1, 1, dtype=torch.int32),
                                           **kwargs)


def test_moe_op_traces_under_torch_compile_fullgraph() -> None:
    from cudnn.gemm.ops import moe_grouped_matmul

    torch._dynamo.reset()
    f = torch.compile(lambda t, w, o: moe_grouped_matmul(t, w, o), fullgraph=True, backend="eager")
    out = f(meta(1, 64, 32), meta(4, 32, 48), meta(4, 1, 1, dtype=torch.int32))
    assert tuple(out.shape) == (1, 64, 48)
