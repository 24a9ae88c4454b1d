"""The typed public API: every op method of ``pygraph`` is declared for type checkers with its
runtime signature (src/cudnn/_graph/methods/declared_*.py, written by
tools/gen_op_declarations.py), the declarations are never imported at run time, and
``cudnn/__init__.py`` declares every lazily exported name for a checker, from the module that
``_EXPORTS`` names."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_op_declarations_are_those_of_the_runtime() -> None:
    stale = [str(path.relative_to(ROOT)) for path, text in _tool("gen_op_declarations").render().items()
             if not path.exists() or path.read_text() != text]
    assert not stale, f"out of date (python tools/gen_op_declarations.py --write): {stale}"


def test_the_enum_stub_is_that_of_the_tables() -> None:
    """src/cudnn/_lib/enums.pyi declares the public enums with the members enums.py builds."""
    stub = _tool("gen_enum_stub")
    text = stub.render()
    assert (stub.TARGET.read_text() if stub.TARGET.exists() else None) == text, \
        "out of date: python tools/gen_enum_stub.py --write"
    import cudnn

    for name in stub.public_names():
        members = getattr(cudnn, name).__members__.items()
        assert f"class {name}(" in text and all(f"    {m} = {int(v)}" in text for m, v in members if m.isidentifier())


def test_every_op_method_is_declared_once() -> None:
    from cudnn._graph.methods import method_table
    from cudnn._graph.methods.declared_core import CoreOpMethods
    from cudnn._graph.methods.declared_families import FamilyOpMethods

    method_table.load_all()
    core = {n for n in vars(CoreOpMethods) if not n.startswith("_")}
    families = {n for n in vars(FamilyOpMethods) if not n.startswith("_")}
    assert not core & families
    assert core | families == set(method_table.OPS)


def test_the_declarations_are_not_imported_at_run_time() -> None:
    code = ("import sys, cudnn\n"
            "cudnn.pygraph, cudnn.Graph, cudnn.tensor, cudnn.data_type\n"
            "print(sorted(m for m in sys.modules if m.startswith('cudnn._graph.methods.declared')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_package_declares_every_lazy_name_for_a_type_checker() -> None:
    """`import cudnn` imports the names of _EXPORTS on first read; its `if TYPE_CHECKING:` block
    imports each from the module _EXPORTS names, and every subpackage (tools/gen_exports_block.py)."""
    block = _tool("gen_exports_block")
    text = block.INIT.read_text()
    assert block.rewrite(text) == text, "out of date: python tools/gen_exports_block.py --write"
