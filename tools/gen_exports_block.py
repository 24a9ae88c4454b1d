"""Writes and checks the ``if TYPE_CHECKING:`` block of ``src/cudnn/__init__.py`` that declares,
for a type checker, every name ``_EXPORTS`` serves lazily and every subpackage of
``_SUBPACKAGES``: ``python tools/gen_exports_block.py --write`` rewrites it from the two
tables (after an export is added or its module moves); tests/package/test_typed_api.py fails
when it differs from them.

A name is imported as ``from MODULE import NAME as NAME`` (the form that re-exports it to a
checker); a name its module calls otherwise is imported privately and assigned
(``tensor = _tensor``), since ``import A as B`` does not re-export ``B``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

INIT = Path(__file__).resolve().parents[1] / "src" / "cudnn" / "__init__.py"
BEGIN = "if TYPE_CHECKING:\n    # What a type checker sees of the names above"
END = "\n# Any other name:"


def _tables(text: str) -> tuple[dict[str, str], tuple[str, ...]]:
    found: dict[str, object] = {}
    for node in ast.parse(text).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id in ("_EXPORTS", "_SUBPACKAGES") and node.value is not None:
            found[target.id] = ast.literal_eval(node.value)
    exports, subpackages = found["_EXPORTS"], found["_SUBPACKAGES"]
    assert isinstance(exports, dict) and isinstance(subpackages, tuple)
    return exports, subpackages


def _sort_key(module: str) -> tuple[int, str]:
    return (0 if module == "." else 1, module.lower())


def _member_key(pair: tuple[str, str]) -> tuple[int, str, str]:
    """isort's order of the names one import brings (ruff's default): constants, classes, the rest."""
    attribute, name = pair
    kind = 0 if attribute.isupper() and len(attribute) > 1 else 1 if attribute[0].isupper() else 2
    return (kind, attribute.lower(), name)


def render_block(text: str) -> str:
    """The block, from the tables of ``text`` (the source of cudnn/__init__.py)."""
    exports, subpackages = _tables(text)
    imports: dict[str, list[tuple[str, str]]] = {".": [(s, s) for s in subpackages]}
    aliases = []
    for name, target in exports.items():
        module, _, attribute = target.partition(":")
        attribute = attribute or name
        if attribute == name:
            imports.setdefault(module, []).append((attribute, name))
        else:
            imports.setdefault(module, []).append((attribute, f"_{name}"))
            aliases.append(name)
    lines = [BEGIN, "    # (at run time each is imported on first read): the same objects, from the modules",
             "    # _EXPORTS names. Written by tools/gen_exports_block.py, checked by",
             "    # tests/package/test_typed_api.py."]
    for module in sorted(imports, key=_sort_key):
        for attribute, name in sorted(imports[module], key=_member_key):
            lines.append(f"    from {module} import {attribute} as {name}")
    lines.append("    # names whose module calls them otherwise (`import A as B` would not export B to a checker)")
    lines += [f"    {name} = _{name}" for name in aliases]
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    start = text.index(BEGIN)
    end = text.index(END, start)
    return text[:start] + render_block(text) + text[end:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the block")
    parser.add_argument("--check", action="store_true", help="fail when the block is out of date (the default)")
    args = parser.parse_args()
    text = INIT.read_text()
    if args.write:
        INIT.write_text(rewrite(text))
        return 0
    if rewrite(text) != text:
        print(f"{INIT}: the TYPE_CHECKING block is out of date: run python tools/gen_exports_block.py --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
