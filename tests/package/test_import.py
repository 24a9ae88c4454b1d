"""`import cudnn` is cheap: it imports three small modules of its own (the version, the lazy
export table's mechanism and the official module cudnn/graph.py), no optional package and no
library; every public name is imported on first use, and enums are built one by one when first
read."""

from __future__ import annotations

import json
import os
import pickle
import pydoc
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

import cudnn
from cudnn._lib import enums
from cudnn._lib.lazy_enums import LazyEnums

SRC = str(Path(__file__).resolve().parents[2] / "src")
# Packages that `import cudnn` must leave alone: callers import them where they use them.
OPTIONAL = ("torch", "numpy", "cupy", "jax", "numba", "ml_dtypes", "cuda", "certifi")


# What `import cudnn` imports of cudnn: the package, its lazy-export helper, the version, and the
# small official module cudnn/graph.py (so that `cudnn.graph` stays the function).
IMPORTED_BY_IMPORT = ["cudnn", "cudnn._exports", "cudnn._version", "cudnn.graph"]


def _fresh(code: str) -> dict[str, object]:
    """Run ``code`` in a new interpreter; it binds ``result``, which comes back through JSON.
    ``new_modules`` holds the modules imported after the interpreter's own start-up."""
    program = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"{code}\n"
        "result['new_modules'] = sorted(set(sys.modules) - before)\n"
        "print(json.dumps(result))\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def _libraries_mapped() -> str:
    return "open('/proc/self/maps').read() if sys.platform == 'linux' else ''"


def test_import_loads_no_submodule_optional_package_or_library() -> None:
    result = _fresh(f"import cudnn\nresult = {{'maps': {_libraries_mapped()}}}")
    new = result["new_modules"]
    assert [m for m in new if m.startswith("cudnn")] == IMPORTED_BY_IMPORT
    loaded_optional = [m for m in new if m.split(".")[0] in OPTIONAL]
    assert loaded_optional == []
    assert "ctypes" not in new  # nothing of the C boundary either
    assert "libcudnn" not in result["maps"]


def test_reading_an_enum_builds_that_enum_only() -> None:
    result = _fresh(
        "import cudnn\n"
        "half = int(cudnn.data_type.HALF)\n"
        "from cudnn._lib import enums\n"
        f"result = {{'half': half, 'built': sorted(n for n in vars(enums) if n in enums.C_ENUMS or n in "
        f"enums.PUBLIC_ENUMS), 'maps': {_libraries_mapped()}}}"
    )
    assert result["half"] == 2
    assert result["built"] == ["data_type"]
    new = result["new_modules"]
    assert not [m for m in new if m.split(".")[0] in OPTIONAL]
    assert not [m for m in new if m.startswith(("cudnn._graph", "cudnn.backend", "cudnn.wrapper"))]
    assert "libcudnn" not in result["maps"]


def test_first_use_of_the_graph_builder_loads_no_optional_package_or_library() -> None:
    result = _fresh(f"import cudnn\ncudnn.pygraph\ncudnn.Graph\nresult = {{'maps': {_libraries_mapped()}}}")
    assert not [m for m in result["new_modules"] if m.split(".")[0] in OPTIONAL]
    assert "libcudnn" not in result["maps"]


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in cudnn.__all__:
        assert getattr(cudnn, name) is not None, name
    assert set(cudnn.__all__) <= set(dir(cudnn))
    assert cudnn.data_type is enums.data_type and cudnn.tensor is cudnn.Tensor
    assert cudnn.knob.__name__ == "KnobInfo" and callable(cudnn.graph)


def test_from_cudnn_import_every_name_in_a_fresh_interpreter() -> None:
    names = ", ".join(n for n in cudnn.__all__ if n != "__version__")
    result = _fresh(f"from cudnn import {names}\nresult = {{'graph_callable': callable(graph)}}")
    assert result["graph_callable"] is True


def test_subpackages_are_attributes_as_before() -> None:
    result = _fresh("import cudnn\nresult = {'descriptor': cudnn.backend.Descriptor.__name__, "
                    "'tensors': cudnn.interop.tensors.__name__, 'context': cudnn.wrapper.context.__name__, "
                    "'enums': cudnn._lib.enums.__name__, 'callable': callable(cudnn.graph)}")
    assert result["descriptor"] == "Descriptor" and result["callable"] is True
    assert result["tensors"] == "cudnn.interop.tensors" and result["enums"] == "cudnn._lib.enums"
    assert result["context"] == "cudnn.wrapper.context"


def test_dir_lists_public_names_before_they_are_imported() -> None:
    result = _fresh("import cudnn\nnames = dir(cudnn)\nresult = {'names': names}")
    assert set(cudnn.__all__) <= set(result["names"])  # type: ignore[arg-type]
    assert [m for m in result["new_modules"] if m.startswith("cudnn")] == IMPORTED_BY_IMPORT


def test_help_lists_the_public_names() -> None:
    text = pydoc.render_doc(cudnn, renderer=pydoc.plaintext)
    for name in ("pygraph", "Graph", "data_type", "heur_mode", "create_handle", "CudnnError", "backend_version"):
        assert name in text, name


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="module 'cudnn' has no attribute 'pygraf'"):
        cudnn.pygraf  # noqa: B018
    assert not hasattr(cudnn, "data_types")
    with pytest.raises(ImportError):
        exec("from cudnn import data_types", {})  # noqa: S102 - the statement itself is under test
    with pytest.raises(AttributeError, match="'cudnn._lib.enums' has no attribute 'cudnnNotAnEnum_t'"):
        enums.cudnnNotAnEnum_t  # noqa: B018


@pytest.mark.parametrize("first", ["import cudnn.wrapper", "import cudnn._graph.model.tensor",
                                   "import cudnn._graph.pygraph", "import cudnn; cudnn.pygraph",
                                   "from cudnn import graph", "import cudnn.sdpa", "import cudnn.graph",
                                   "from cudnn.graph import jit", "import cudnn.graph as m"])
def test_cudnn_graph_is_the_function_whichever_import_comes_first(first: str) -> None:
    """``cudnn.graph`` read through the package is the official context manager, whatever was
    imported before, the module cudnn/graph.py included: ``import cudnn`` imports that module at
    once, so a later import of it finds it imported and binds nothing over the function."""
    result = _fresh(f"{first}\nimport cudnn\nresult = {{'callable': callable(cudnn.graph), "
                    "'name': cudnn.graph.__module__ + '.' + cudnn.graph.__name__}")
    assert result["callable"] is True and result["name"] == "cudnn._graph.helpers.graph"


def test_the_graph_module_names_graph_jit_and_graph_cache() -> None:
    result = _fresh("import cudnn.graph\nm = sys.modules['cudnn.graph']\n"
                    "from cudnn.graph import graph, graph_cache, jit\n"
                    "result = {'same': (graph, jit, graph_cache) == (m.graph, m.jit, m.graph_cache), "
                    "'module': m.__name__}")
    assert result["same"] is True and result["module"] == "cudnn.graph"


# -- lazily built enums ------------------------------------------------------------------------

def test_built_enums_are_stored_once_and_pickle_by_reference() -> None:
    assert enums.cudnnStatus_t is enums.cudnnStatus_t
    assert "cudnnStatus_t" in vars(enums)  # the second read is a plain attribute lookup
    assert pickle.loads(pickle.dumps(cudnn.data_type.HALF)) is cudnn.data_type.HALF
    assert enums.cudnnStatus_t.__module__ == "cudnn._lib.enums"
    assert enums.data_type.__doc__ == "cudnnDataType_t under its documented Python name."
    assert set(enums.C_ENUMS) | set(enums.PUBLIC_ENUMS) <= set(dir(enums))


def test_concurrent_first_reads_get_one_class() -> None:
    module = types.ModuleType("lazy_enums_probe")
    sys.modules[module.__name__] = module
    try:
        lazy = LazyEnums(module.__name__, {"colour_t": {f"C{i}": i for i in range(300)}}, {})
        module.__getattr__ = lazy.build  # type: ignore[attr-defined]
        seen: list[type] = []
        start = threading.Barrier(8)

        def read() -> None:
            start.wait()
            seen.append(module.colour_t)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(cls) for cls in seen}) == 1 and seen[0] is module.colour_t
        assert module.colour_t.C299 == 299
    finally:
        del sys.modules[module.__name__]


# -- what a first graph imports ------------------------------------------------------------------

FIRST_GRAPH = (
    "import cudnn\n"
    "g = cudnn.pygraph()\n"
    "x = g.tensor(dim=[8, 64, 56, 56], stride=[64 * 56 * 56, 1, 64 * 56, 64], data_type=cudnn.data_type.HALF)\n"
    "w = g.tensor(dim=[64, 64, 3, 3], stride=[576, 1, 192, 64], data_type=cudnn.data_type.HALF)\n"
    "b = g.tensor(dim=[1, 64, 1, 1], stride=[64, 1, 64, 64], data_type=cudnn.data_type.HALF)\n"
    "y = g.relu(g.bias(g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]), b))\n"
    "y.set_output(True)\n"
    "g.validate()\n"
)
# Modules a conv + bias + relu graph does not need, imported by what first uses them: the other op
# families (and their nodes), autotuning, plan reports and records, introspection, pictures, JSON
# and plan (de)serialization, and the standard modules only those use.
LAZY_MODULES = (
    "cudnn._graph.methods.norm_methods", "cudnn._graph.methods.attention_methods",
    "cudnn._graph.methods.lowp_methods", "cudnn._graph.methods.moe_methods",
    "cudnn._graph.methods.gated_methods", "cudnn._graph.families.norm_nodes", "cudnn._graph.families.sdpa_nodes",
    "cudnn._graph.families.sdpa_fp8_nodes", "cudnn._graph.families.block_scale_nodes", "cudnn._graph.families.moe_nodes",
    "cudnn._graph.families.gated_nodes", "cudnn._graph.model.sdpa_enums", "cudnn._graph.model.api_enums",
    "cudnn._graph.text.graph_from_json", "cudnn._graph.build.autotune", "cudnn._graph.build.plan_report",
    "cudnn._graph.plans.plan_configs", "cudnn._graph.text.inspection", "cudnn._graph.text.diagram",
    "cudnn._graph.records.serialize_args", "statistics", "html", "difflib",
)


def test_a_first_graph_imports_only_what_it_needs() -> None:
    result = _fresh(f"{FIRST_GRAPH}result = {{'nodes': len(g.nodes), 'maps': {_libraries_mapped()}}}")
    assert result["nodes"] == 3
    new = result["new_modules"]
    assert [m for m in LAZY_MODULES if m in new] == []
    assert not [m for m in new if m.split(".")[0] in OPTIONAL]
    assert "libcudnn" not in result["maps"]


def test_what_a_first_graph_leaves_out_is_there_when_first_read() -> None:
    result = _fresh(
        f"{FIRST_GRAPH}"
        "import inspect\n"
        "in_dir = [n for n in ('sdpa', 'layernorm', 'rope', 'gdn_bwd', 'moe_grouped_matmul', 'sdpa_fp8') "
        "if n in dir(cudnn.pygraph)]\n"
        "unloaded = 'cudnn._graph.methods.attention_methods' not in sys.modules\n"
        "methods = {n: getattr(cudnn.pygraph, n) for n in ('sdpa', 'layernorm', 'rope', 'gdn_bwd', "
        "'moe_grouped_matmul', 'sdpa_fp8', 'block_scale_quantize')}\n"
        "from cudnn._graph.methods import attention_methods as sdpa_ops, gated_methods as gated_ops\n"
        "from cudnn._graph.methods import lowp_methods as lowp_ops, method_table as oplib\n"
        "from cudnn._graph.methods import moe_methods as moe_ops, norm_methods as norm_ops\n"
        "direct = {'sdpa': sdpa_ops.sdpa, 'layernorm': norm_ops.layernorm, 'rope': gated_ops.rope, "
        "'moe_grouped_matmul': moe_ops.moe_grouped_matmul, 'sdpa_fp8': lowp_ops.sdpa_fp8, "
        "'block_scale_quantize': lowp_ops.block_scale_quantize}\n"
        "same = all(methods[n] is oplib.OPS[n] and methods[n].__wrapped__ is f for n, f in direct.items())\n"
        "same = same and methods['gdn_bwd'] is oplib.OPS['gdn_bwd'] and g.layernorm.__func__ is methods['layernorm']\n"
        "placeholders = [n for n, v in vars(cudnn.pygraph).items() if isinstance(v, oplib._Deferred)]\n"
        "t = g.sdpa(g.tensor(dim=[1, 2, 8, 64]), g.tensor(dim=[1, 2, 8, 64]), g.tensor(dim=[1, 2, 8, 64]), "
        "is_inference=True)\n"
        "from cudnn import graph_types\n"
        "from cudnn._graph.build import autotune, plan_report\n"
        "from cudnn._graph.plans import plan_configs as plan_entries\n"
        "from cudnn._graph.text import inspection as introspect\n"
        "result = {'in_dir': in_dir, 'unloaded': unloaded, 'same': same, 'placeholders': placeholders,\n"
        "          'sdpa_signature': str(inspect.signature(cudnn.pygraph.sdpa)) == "
        "str(inspect.signature(sdpa_ops.sdpa)),\n"
        "          'node_type': cudnn.NodeType is graph_types.NodeType and g.nodes[0].node_type is "
        "graph_types.NodeType.CONV_FPROP,\n"
        "          'tensors': sorted(g.tensors) == sorted(introspect.by_name(g.nodes)[0]),\n"
        "          'plans': g.plans == [] and plan_entries.PlanEntry.__name__ == 'PlanEntry',\n"
        "          'modules': [autotune.__name__, plan_report.__name__]}\n"
    )
    assert len(result["in_dir"]) == 6 and result["unloaded"] is True  # dir() lists them before they load
    assert result["same"] is True and result["sdpa_signature"] is True
    assert result["placeholders"] == []  # every family a read imported replaced its placeholders
    assert result["node_type"] is True and result["tensors"] is True and result["plans"] is True
    assert result["modules"] == ["cudnn._graph.build.autotune", "cudnn._graph.build.plan_report"]


def test_every_op_method_of_a_lazy_family_is_listed_under_its_module() -> None:
    from cudnn._graph.methods import method_table as oplib

    oplib.load_all()
    module_of = {name: method.__wrapped__.__module__ for name, method in oplib.OPS.items()}  # type: ignore[attr-defined]
    listed = {name: f"cudnn._graph.methods.{module}" for module, names in oplib.FAMILIES.items() for name in names}
    assert {n: m for n, m in module_of.items() if m != "cudnn._graph.methods.core_methods"} == listed
    assert all(oplib.is_op(name) for name in listed) and not oplib.is_op("tensor")


def test_concurrent_first_reads_of_a_lazy_op_import_its_family_once() -> None:
    result = _fresh(
        "import threading\n"
        "import cudnn\n"
        "start = threading.Barrier(8)\n"
        "seen = []\n"
        "def read():\n"
        "    start.wait()\n"
        "    seen.append(cudnn.pygraph.layernorm)\n"
        "threads = [threading.Thread(target=read) for _ in range(8)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "from cudnn._graph.methods import norm_methods as norm_ops\n"
        "result = {'one': len({id(m) for m in seen}) == 1 and seen[0].__wrapped__ is norm_ops.layernorm, "
        "'count': len(seen)}\n"
    )
    assert result == {"one": True, "count": 8, "new_modules": result["new_modules"]}


def test_a_graph_json_holding_a_lazy_family_is_rebuilt_in_a_fresh_interpreter() -> None:
    dt = cudnn.data_type  # moe_ops registers the rebuilder of its nodes: deserialize imports every family
    g = cudnn.pygraph(io_data_type=dt.HALF, compute_data_type=dt.FLOAT)
    token = g.tensor(dim=[1, 16, 32], stride=[512, 32, 1], name="token")
    weight = g.tensor(dim=[4, 32, 8], stride=[256, 8, 1], name="weight")
    offset = g.tensor(dim=[4, 1, 1], stride=[1, 1, 1], data_type=dt.INT32, name="offset")
    g.moe_grouped_matmul(token, weight, offset, name="moe").set_output(True)
    result = _fresh(f"import cudnn\ng = cudnn.pygraph()\ng.deserialize({str(g)!r})\n"
                    "result = {'ops': [n.op for n in g.nodes]}")
    assert result["ops"] == ["moe_grouped_matmul"]


def test_the_graph_builder_imports_nothing_by_the_package_name() -> None:
    """Loaded under another name, beside another package called ``cudnn`` (the official frontend,
    as bench_build --interleaved runs them), cudnn-py builds and lowers graphs through its own
    modules only: every import on that path is relative."""
    result = _fresh(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('cudnn_py', {SRC!r} + '/cudnn/__init__.py', "
        f"submodule_search_locations=[{SRC!r} + '/cudnn'])\n"
        "cp = importlib.util.module_from_spec(spec); sys.modules['cudnn_py'] = cp; spec.loader.exec_module(cp)\n"
        "bf16, f32 = cp.data_type.BFLOAT16, cp.data_type.FLOAT\n"
        "g = cp.pygraph(io_data_type=bf16, intermediate_data_type=f32, compute_data_type=f32)\n"
        "q, k, v, o, do = (g.tensor(dim=[2, 4, 64, 64], stride=[16384, 4096, 64, 1], data_type=bf16)\n"
        "                  for _ in range(5))\n"
        "st = g.tensor(dim=[2, 4, 64, 1], stride=[256, 64, 1, 1], data_type=f32)\n"
        "outs = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, use_causal_mask=True)\n"
        "[t.set_output(True) for t in outs]\n"
        "x = g.tensor(dim=[8, 64, 32, 32], stride=[65536, 1, 2048, 64], data_type=bf16)\n"
        "w = g.tensor(dim=[64, 64, 3, 3], stride=[576, 1, 192, 64], data_type=bf16)\n"
        "g.relu(input=g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])).set_output(True)\n"
        "g.validate()\n"
        "from cudnn_py._graph.model.expand import expand\n"
        "nodes, _ = expand(g.nodes, g.context, 91900)\n"
        "result = {'ops': len(nodes)}\n"
    )
    assert result["ops"] > 10
    assert [m for m in result["new_modules"] if m == "cudnn" or m.startswith("cudnn.")] == []


def test_importing_every_module_starts_no_thread() -> None:
    """Threads start where a call needs them (the handle made beside the graph layer's import by
    ``cudnn.create_handle()`` and ``pygraph()``, plan builds, the plan cache's writer), never on
    import: every module of cudnn that imports here leaves the interpreter with its main thread
    alone."""
    result = _fresh(
        "import importlib, pkgutil, threading\n"
        "import cudnn\n"
        "imported = 0\n"
        "for info in pkgutil.walk_packages(cudnn.__path__, 'cudnn.'):\n"
        "    if info.name.endswith('__main__'):\n"
        "        continue\n"
        "    try:\n"
        "        importlib.import_module(info.name)\n"
        "        imported += 1\n"
        "    except ModuleNotFoundError as exc:  # the torch-backed packages where torch is absent\n"
        "        if exc.name != 'torch':\n"
        "            raise\n"
        "result = {'imported': imported, 'threads': [t.name for t in threading.enumerate()]}\n"
    )
    assert result["imported"] > 100 and result["threads"] == ["MainThread"]
