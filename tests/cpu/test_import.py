"""`import cudnn` is cheap: it imports no submodule, no optional package and no library; every
public name is imported on first use, and enums are built one by one when first read."""

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
    assert [m for m in new if m.startswith("cudnn")] == ["cudnn", "cudnn._version"]
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
    assert not [m for m in new if m.startswith(("cudnn.graph", "cudnn.backend", "cudnn.wrapper"))]
    assert "libcudnn" not in result["maps"]


def test_first_use_of_the_graph_builder_loads_no_optional_package_or_library() -> None:
    result = _fresh(f"import cudnn\ncudnn.pygraph\ncudnn.Graph\nresult = {{'maps': {_libraries_mapped()}}}")
    assert not [m for m in result["new_modules"] if m.split(".")[0] in OPTIONAL]
    assert "libcudnn" not in result["maps"]


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in cudnn.__all__:
        assert getattr(cudnn, name) is not None, name
    assert set(cudnn.__all__) <= set(dir(cudnn))
    assert cudnn.data_type is enums.data_type and cudnn.tensor is cudnn.graph.Tensor
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
    assert [m for m in result["new_modules"] if m.startswith("cudnn")] == ["cudnn", "cudnn._version"]


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


@pytest.mark.parametrize("first", ["import cudnn.wrapper", "import cudnn.graph.tensor", "import cudnn.helpers",
                                   "import cudnn; cudnn.pygraph", "from cudnn import graph"])
def test_cudnn_graph_is_callable_whichever_import_comes_first(first: str) -> None:
    result = _fresh(f"{first}\nimport cudnn\nresult = {{'callable': callable(cudnn.graph), "
                    "'package': cudnn.graph.__name__}")
    assert result["callable"] is True and result["package"] == "cudnn.graph"


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
