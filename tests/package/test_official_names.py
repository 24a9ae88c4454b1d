"""Names the official package's own code uses, without a GPU: ``heur_mode.OPENSOURCE`` (refused
alone, dropped with a warning beside other modes) and ``cudnn.experimental.ops.moe_grouped_matmul``
(lazy and torch-free to import, the official signature, argument checks, shapes on meta tensors,
the graph it declares). Its run against torch's reference needs a GPU: tests/graph/test_moe_gpu.py."""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
import types
from typing import Any

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.records import plan_reuse as plan_store

A = cudnn.heur_mode.A


def _relu_graph() -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=1)
    g.relu(g.tensor([2, 3, 4], name="x"), name="r").set_output(True)
    return g


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """create_execution_plans with an operation graph and libcudnn 9.19.0 stood in: the modes
    that reach cuDNN's heuristics are recorded."""
    asked: list[list[Any]] = []
    monkeypatch.setattr(pipeline_module.loader, "report", lambda: types.SimpleNamespace(version=91900))
    monkeypatch.setattr(cudnn.pygraph, "_op_graph", lambda self: "OPGRAPH")
    monkeypatch.setattr(pipeline_module.Pipeline, "create_plans", lambda self, modes: asked.append(list(modes)))
    return asked


def test_opensource_alone_is_refused_naming_the_mode_and_the_versions(planned: list[list[Any]]) -> None:
    g = _relu_graph()
    g.validate()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"(?s)heur_mode\.OPENSOURCE: .*own engines \(compiled with NVRTC.*"
                             r"no libcudnn version has "
                             r"such a heuristic mode \(none up to the 9\.\d+\.\d+ headers; the loaded libcudnn is "
                             r"9\.19\.0\).*hint: .*heur_mode\.A, cudnn\.heur_mode\.FALLBACK"):
        g.create_execution_plans([cudnn.heur_mode.OPENSOURCE])
    with pytest.raises(TypeError, match=r"one mode goes in a list too: \[cudnn\.heur_mode\.OPENSOURCE\]"):
        g.create_execution_plans(cudnn.heur_mode.OPENSOURCE)  # as the official's binding refuses it
    assert planned == []


def test_build_refuses_opensource_before_the_plan_cache(monkeypatch: pytest.MonkeyPatch,
                                                        planned: list[list[Any]]) -> None:
    def no_cache(*args: Any) -> None:
        raise AssertionError("the plan cache was consulted")

    monkeypatch.setattr(plan_store, "adopt_cached", no_cache)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"heur_mode\.OPENSOURCE"):
        _relu_graph().build([cudnn.heur_mode.OPENSOURCE])


def test_opensource_beside_other_modes_adds_no_plan_and_says_so(planned: list[list[Any]],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    g = _relu_graph()
    g.validate()
    with caplog.at_level(logging.WARNING, logger="cudnn.build"):
        g.create_execution_plans([cudnn.heur_mode.OPENSOURCE, A, cudnn.heur_mode.FALLBACK])
    assert planned == [[A, cudnn.heur_mode.FALLBACK]]
    assert "heur_mode.OPENSOURCE adds no plan" in caplog.text and "heur_mode.A" in caplog.text
    g.create_execution_plans([A])  # no warning without it
    assert planned[-1] == [A] and caplog.text.count("adds no plan") == 1


# -- cudnn.experimental.ops ------------------------------------------------------------------------

def test_experimental_ops_is_a_lazy_package_that_imports_no_torch() -> None:
    """Importable (``from cudnn.experimental.ops import ...`` needs a module), listing the official's
    names; without PyTorch, reading the op is an ImportError that says so, as in the official."""
    code = ("import sys; sys.modules['torch'] = None\n"  # torch unimportable, installed or not
            "import cudnn, cudnn.experimental.ops as ops\n"
            "assert cudnn.experimental.ops is ops and 'moe_grouped_matmul' in dir(ops) and "
            "'moe_grouped_matmul' in ops.__all__\n"
            "try:\n"
            "    from cudnn.experimental.ops import moe_grouped_matmul\n"
            "except ImportError as exc:\n"
            "    print('ImportError:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "ImportError: cudnn.experimental.ops.moe_grouped_matmul needs PyTorch" in out.stdout
    code = "import sys, cudnn.experimental.ops; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "False", out.stderr


def _moe() -> Any:
    pytest.importorskip("torch")
    from cudnn.experimental.ops import moe_grouped_matmul

    return moe_grouped_matmul


def _meta(*shape: int, dtype: str = "float16") -> Any:
    torch = pytest.importorskip("torch")
    return torch.empty(*shape, dtype=getattr(torch, dtype), device="meta")


E, M, K, N = 4, 64, 32, 48


def test_moe_grouped_matmul_has_the_official_signature() -> None:
    # cudnn/gemm/ops/moe_grouped_matmul.py of the official 1.32 wheel
    params = inspect.signature(_moe()).parameters
    assert [(p.name, p.default) for p in params.values()] == [
        ("token", inspect.Parameter.empty), ("weight", inspect.Parameter.empty),
        ("first_token_offset", inspect.Parameter.empty), ("token_index", None), ("token_ks", None),
        ("mode", "none"), ("top_k", 1)]
    from cudnn.experimental import moe_grouped_matmul

    assert moe_grouped_matmul is _moe()


@pytest.mark.parametrize(("mode", "rows"), [("none", M), ("gather", 96), ("scatter", M)])
def test_moe_grouped_matmul_on_meta_tensors_gives_the_output_shape(mode: str, rows: int) -> None:
    index = _meta(1, rows, 1, dtype="int32")
    y = _moe()(_meta(1, M, K), _meta(E, N, K).transpose(1, 2), _meta(E, 1, 1, dtype="int32"), index,
               _meta(1, M, 1, dtype="int32"), mode=mode, top_k=2)
    assert tuple(y.shape) == (1, rows, N) and y.dtype == _meta(1).dtype and y.device.type == "meta"


def test_moe_grouped_matmul_refuses_bad_arguments_before_any_gpu_work() -> None:
    moe = _moe()
    import torch

    token, weight, fto = _meta(1, M, K), _meta(E, K, N), _meta(E, 1, 1, dtype="int32")
    with pytest.raises(ValueError, match="token: expected a CUDA tensor, got one on cpu"):
        moe(torch.empty(1, M, K, dtype=torch.float16), weight, fto)
    with pytest.raises(ValueError, match=r"mode: expected one of \('none', 'gather', 'scatter'\), got 'combine'"):
        moe(token, weight, fto, mode="combine")
    with pytest.raises(ValueError, match="token_index: mode 'gather' needs it, got None"):
        moe(token, weight, fto, mode="gather")
    with pytest.raises(ValueError, match="token_ks: mode 'scatter' needs it, got None"):
        moe(token, weight, fto, _meta(1, M, 1, dtype="int32"), mode="scatter")
    with pytest.raises(ValueError, match="first_token_offset: expected dtype in \\['int32'\\], got int64"):
        moe(token, weight, _meta(E, 1, 1, dtype="int64"))


def test_moe_grouped_matmul_declares_the_graph_it_runs() -> None:
    _moe()
    from cudnn.experimental.moe import declare

    g = cudnn.pygraph()
    ports = declare(g, "scatter", 2, _meta(1, M, K, dtype="bfloat16"), _meta(E, N, K, dtype="bfloat16").transpose(1, 2),
                    _meta(E, 1, 1, dtype="int32"), _meta(1, M, 1, dtype="int32"), _meta(1, M, 1, dtype="int32"))
    g.validate()
    out = ports["output"]
    assert out.get_dim() == [1, M, N] and out.get_data_type() == cudnn.data_type.BFLOAT16
    assert ports["weight"].get_stride() == [N * K, 1, K]
    node = json.loads(str(g))["nodes"][0]
    assert (node["tag"], node["mode"], node["top_k"]) == ("MOE_GROUPED_MATMUL", "SCATTER", 2)


# -- official names outside cuDNN's Graph API --------------------------------------------------------

OFFICIAL_NAMES = "/work/shared/reference/official-1.32/top_level_names.txt"
# Graph-API names of the official that cudnn-py serves or will serve (neither absent nor refused here)
GRAPH_API = {"DeviceInfo", "FRONTEND_KNOB_TYPE_BASE", "GraphContext", "Node", "NodeType", "Tensor",
             "cuda_graph_retention", "engines", "graph_types", "handle", "is_frontend_knob_type", "nodes", "ops",
             "sdpa_capabilities", "sdpa_torch", "torch"}


def _official_names() -> list[str]:
    try:
        with open(OFFICIAL_NAMES) as f:
            return f.read().split()
    except OSError:
        pytest.skip(f"{OFFICIAL_NAMES} is not on this machine")


def test_every_official_name_is_served_or_says_what_it_needs() -> None:
    from cudnn import _unavailable

    names = _official_names()
    assert len(names) == 226
    table = set(_unavailable.TOP_LEVEL)
    assert table <= set(names)  # no invented names
    assert not table & GRAPH_API
    unaccounted = [n for n in names if n not in table and n not in GRAPH_API and not hasattr(cudnn, n)]
    assert unaccounted == []
    assert not [n for n in table if n in cudnn.__dict__ or n in dir(cudnn)]  # none of them is provided


@pytest.mark.parametrize(("name", "needs"), [
    ("GemmSwigluSm100", "a Blackwell (SM100) GPU and nvidia-cutlass-dsl"),
    ("grouped_gemm_jax_sm100", "JAX, a Blackwell (SM100) GPU and nvidia-cutlass-dsl"),
    ("MoeEp", "nvidia-cudnn-frontend[cutedsl,comm]"),
    ("flex_attn_func", "nvidia-cutlass-dsl"),
    ("rope_qdq_inplace", "Triton"),
    ("MhcProjectionBackward", "cuda-tile (cuTile)"),
    ("gnn_agg_simple_forward", "cuDNN C API functions outside the Graph API"),
    ("fla", "flash-linear-attention"),
])
def test_an_unavailable_name_is_an_attribute_error_when_read(name: str, needs: str) -> None:
    from cudnn._unavailable import Unavailable, UnavailableAttributeError

    assert not hasattr(cudnn, name)
    assert getattr(cudnn, name, "absent") == "absent"
    with pytest.raises(AttributeError) as info:
        getattr(cudnn, name)
    assert isinstance(info.value, UnavailableAttributeError) and isinstance(info.value, Unavailable)
    assert not isinstance(info.value, ImportError)
    text = str(info.value)
    assert text.startswith(f"cudnn.{name} is not provided by cudnn-py: it needs ") and needs in text
    assert text.endswith("cudnn-py serves cuDNN's Graph API only") and info.value.name == name


@pytest.mark.parametrize("name", ["GemmSwigluSm100", "MoeEp", "causal_conv1d_nwh_forward"])
def test_from_cudnn_import_an_unavailable_name_is_an_import_error_saying_what_it_needs(name: str) -> None:
    from cudnn._unavailable import Unavailable, UnavailableImportError

    with pytest.raises(ImportError) as info:
        exec(f"from cudnn import {name}", {})
    assert isinstance(info.value, UnavailableImportError) and isinstance(info.value, Unavailable)
    assert not isinstance(info.value, AttributeError)
    assert str(info.value).startswith(f"cudnn.{name} is not provided by cudnn-py: it needs ")
    assert info.value.name == name and info.value.needs in str(info.value)


def test_unknown_names_keep_the_ordinary_errors() -> None:
    with pytest.raises(AttributeError, match=r"^module 'cudnn' has no attribute 'no_such_name'$"):
        cudnn.no_such_name  # noqa: B018
    with pytest.raises(ImportError, match=r"cannot import name 'no_such_name' from 'cudnn'"):
        exec("from cudnn import no_such_name", {})


def test_blackwell_only_ops_of_the_experimental_and_gemm_packages_say_what_they_need() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import cudnn.experimental.ops as e, cudnn.gemm as g, cudnn.gemm.ops as go\n"
            "assert not hasattr(e, 'swiglu_mlp') and not hasattr(go, 'swiglu_moe') and not hasattr(g, 'situ_mlp')\n"
            "for stmt in ('from cudnn.experimental.ops import swiglu_mlp', 'from cudnn.gemm.ops import swiglu_moe',\n"
            "             'from cudnn.gemm import MhcProjectionBackward'):\n"
            "    try:\n"
            "        exec(stmt, {})\n"
            "    except ImportError as exc:\n"
            "        print(type(exc).__name__, exc)\n"
            "try:\n"
            "    from cudnn.gemm.ops import moe_grouped_matmul\n"
            "except ImportError as exc:\n"
            "    print(type(exc).__name__, exc)\n"
            "print(sorted(dir(go)), sorted(dir(e))[-3:])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("UnavailableImportError cudnn.experimental.ops.swiglu_mlp is not provided by cudnn-py: it "
                        "needs a Blackwell (SM100) GPU and nvidia-cutlass-dsl (the official package's CuTe-DSL "
                        "kernels); cudnn-py serves cuDNN's Graph API only")
    assert lines[1].startswith("UnavailableImportError cudnn.gemm.ops.swiglu_moe is not provided by cudnn-py: it "
                               "needs a Blackwell (SM100) GPU")
    assert lines[2].startswith("UnavailableImportError cudnn.gemm.MhcProjectionBackward is not provided by "
                               "cudnn-py: it needs cuda-tile (cuTile)")
    assert lines[3] == "ImportError cudnn.gemm.ops.moe_grouped_matmul needs PyTorch, which is not installed"
    assert "moe_grouped_matmul" in lines[4] and "swiglu" not in lines[4]


def test_the_gemm_package_imports_no_torch() -> None:
    code = "import sys, cudnn, cudnn.gemm, cudnn.gemm.ops; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "False", out.stderr
