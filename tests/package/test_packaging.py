"""Packaging metadata: the license file matches the metadata, the extras never mix CUDA 12 and
13 stacks, the README's test command is what CI runs first and keeps the set-up command's
cuDNN, and the documentation's pages exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import cudnn

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[Requirement]] = {
    name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()
}


def _cuda_major(req: Requirement) -> int | None:
    """The CUDA major version a requirement ties the install to, None for a CUDA-neutral one."""
    name = req.name.lower()
    if match := re.search(r"-cu(\d+)$", name):
        return int(match.group(1))
    if name == "cuda-bindings":
        spec = SpecifierSet(str(req.specifier))
        majors = {major for major in range(11, 20) if any(spec.contains(f"{major}.{minor}") for minor in range(100))}
        return majors.pop() if len(majors) == 1 else None
    if name.startswith("nvidia-"):  # unsuffixed NVIDIA wheels (nvidia-cublas, ...) are CUDA 13's
        return 13
    return None


def _readme_commands() -> tuple[str, str]:
    text = (ROOT / "README.md").read_text()
    setup = re.search(r"^# 1\..*\n(.+)$", text, re.MULTILINE)
    tests = re.search(r"^# 2\..*\n(.+)$", text, re.MULTILINE)
    assert setup and tests, "README: the two commands follow '# 1.' and '# 2.' comment lines"
    return setup.group(1).strip(), tests.group(1).strip()


def _extras_of(command: str) -> set[str]:
    for word in shlex.split(command):
        if match := re.fullmatch(r"\.\[([a-z0-9,]+)\]", word):
            return set(match.group(1).split(","))
    raise AssertionError(f"no .[extras] in {command!r}")


def test_license_file_matches_the_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == {"text": "MIT"}
    assert text.startswith("MIT License\n") and "Permission is hereby granted, free of charge" in text
    assert "License :: OSI Approved :: MIT License" in PROJECT["classifiers"]


def test_changelog_has_the_current_version_and_unreleased_work() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert any(h.split()[0] == cudnn.__version__ for h in headings[1:]), headings


def test_project_urls_are_https() -> None:
    urls = PROJECT["urls"]
    assert urls and all(u.startswith("https://") for u in urls.values())


def test_metadata_names_an_author_and_cudnn_pys_own_pages() -> None:
    """`pip show` prints an author and a home page (recent pip reads Home-page from the URL
    labelled Homepage); the first URLs are cudnn-py's own, NVIDIA's come after them."""
    assert PROJECT["authors"] and all(a.get("name") for a in PROJECT["authors"])
    urls = PROJECT["urls"]
    own = ("Homepage", "Documentation", "Source", "Issues", "Changelog")
    assert list(urls)[:len(own)] == list(own)
    source = urls["Source"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", source), source
    assert urls["Issues"] == f"{source}/issues"
    assert urls["Changelog"].startswith(f"{source}/") and urls["Changelog"].endswith("CHANGELOG.md")
    assert urls["Homepage"] in (urls["Documentation"], source)
    assert any("nvidia.com" in u for label, u in urls.items() if label not in own)
    assert not any("nvidia" in urls[label].lower() for label in own)


def test_documentation_site_and_repository_agree_with_the_metadata() -> None:
    config = dict(re.findall(r"^(\w+):[ \t]*(\S.*)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    urls = PROJECT["urls"]
    assert config["site_url"] == urls["Documentation"] and config["site_url"].endswith("/")
    assert config["repo_url"] == urls["Source"]
    assert config["repo_name"] == urls["Source"].removeprefix("https://github.com/")


@pytest.mark.parametrize("extra", ["cu12", "cu13"])
def test_each_cuda_extra_pulls_one_cuda_major(extra: str) -> None:
    majors = [_cuda_major(r) for r in EXTRAS[extra]]
    assert set(majors) == {int(extra[2:])}, f"{extra}: {[str(r) for r in EXTRAS[extra]]}"
    assert _cuda_major(Requirement("cuda-bindings>=12.6")) is None  # open-ended: no single major


@pytest.mark.parametrize("extra", ["dev", "docs"])
def test_tool_extras_pull_no_cuda_package(extra: str) -> None:
    cuda = [str(r) for r in EXTRAS[extra] if r.name.startswith(("nvidia-", "cuda-"))]
    assert cuda == [], f"[{extra}] would mix CUDA stacks into .[cu12,{extra}] / .[cu13,{extra}]: {cuda}"


def test_docs_extra_has_the_site_tools() -> None:
    assert {r.name for r in EXTRAS["docs"]} >= {"mkdocs", "mkdocs-material", "mkdocstrings"}
    assert any("python" in r.extras for r in EXTRAS["docs"] if r.name == "mkdocstrings")


def _ci_commands() -> list[str]:
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    return [line for line in ci if line and not line.startswith("#") and not line.startswith(("set ", "cd "))]


def test_readme_test_command_is_what_ci_runs_first() -> None:
    """The README's test command, exactly, is CI's first test run (only lint comes before it)."""
    _, tests = _readme_commands()
    commands = _ci_commands()
    assert [c for c in commands if "pytest" in c][0] == tests
    assert not [c for c in commands[:commands.index(tests)] if "[cu" in c or "nvidia" in c]


LINT_IMPORTS = 'python -c "from importlinter.cli import lint_imports_command; lint_imports_command()"'


def test_ci_runs_ruff_mypy_and_the_import_contracts_before_the_tests() -> None:
    _, tests = _readme_commands()
    commands = _ci_commands()
    lint = commands.index("python -m ruff check src"), commands.index("python -m mypy"), commands.index(LINT_IMPORTS)
    assert max(lint) < commands.index(tests)
    assert {r.name for r in EXTRAS["lint"]} == {"ruff", "mypy", "import-linter"}


def _contracts() -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    return contracts


def test_the_import_contract_names_every_package() -> None:
    """Each package under src/cudnn is in a layer of the top-level import-linter contract (the
    layers contract without containers), except the classic C API (`legacy`), which stands
    apart; every name in a layer is a package or module of src/cudnn (``cudnn.graph`` is the
    module of the official graph helpers)."""
    (contract,) = [c for c in _contracts() if c["type"] == "layers" and not c.get("containers")]
    named = {name.strip() for layer in contract["layers"] for name in re.split(r"[:|]", layer)}
    top = ROOT / "src" / "cudnn"
    packages = {f"cudnn.{p.parent.name}" for p in top.glob("*/__init__.py")}
    modules = {f"cudnn.{p.stem}" for p in top.glob("*.py") if p.stem != "__init__"}
    assert packages - {"cudnn.legacy"} <= named and named <= packages | modules
    assert "cudnn.legacy" not in named


def test_the_import_contracts_cover_the_graph_stages_and_every_cycle() -> None:
    """The stages of cudnn._graph are layers of an exhaustive contract (a new stage must be
    placed), and an acyclic-siblings contract over the whole package fails CI on any import
    cycle; no contract leaves out the imports under TYPE_CHECKING."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert not config.get("exclude_type_checking_imports", False)
    (stages,) = [c for c in _contracts() if c.get("containers") == ["cudnn._graph"]]
    assert stages["type"] == "layers" and stages["exhaustive"] is True
    graph = ROOT / "src" / "cudnn" / "_graph"
    children = {p.parent.name for p in graph.glob("*/__init__.py")} | {p.stem for p in graph.glob("*.py")}
    placed = {name.strip() for layer in stages["layers"] for name in layer.replace("|", ":").split(":")}
    assert placed == children - {"__init__"}
    (acyclic,) = [c for c in _contracts() if c["type"] == "acyclic_siblings"]
    assert acyclic["ancestors"] == ["cudnn"] and acyclic["depth"] >= 3
    assert not any(c.get("ignore_imports") for c in _contracts())


def _is_submodule(src: Path, name: str) -> bool:
    return (src / "cudnn" / f"{name}.py").exists() or (src / "cudnn" / name / "__init__.py").exists()


def test_no_module_of_the_package_imports_the_package_itself() -> None:
    """``cudnn/__init__.py`` names every layer (lazily, and under TYPE_CHECKING for a checker), so a
    module below it that imports ``cudnn`` closes a cycle through the root, which the contracts do
    not see (the root is no sibling of anything). Only the command line, which sits above all, may."""
    import ast

    src = ROOT / "src"
    top = {"cudnn.cli", "cudnn.cli_bench", "cudnn.__main__"}
    offenders = []
    for path in sorted((src / "cudnn").rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        if module in top or module == "cudnn":
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                names = [".".join([*base, node.module] if node.module else base)]
                if names == ["cudnn"]:  # `from cudnn import ops` imports the subpackage, a name the package itself
                    names = [f"cudnn.{a.name}" if _is_submodule(src, a.name) else "cudnn" for a in node.names]
            else:
                continue
            offenders += [f"{module}:{node.lineno}" for name in names if name == "cudnn"]
    assert offenders == []


def test_readme_test_command_keeps_the_setup_commands_cudnn() -> None:
    setup, tests = _readme_commands()
    added = _extras_of(tests) - _extras_of(setup)
    assert _extras_of(setup) <= _extras_of(tests)
    for extra in added:
        assert not [r for r in EXTRAS[extra] if r.name.startswith(("nvidia-", "cuda-"))], extra


def test_every_documentation_page_in_the_nav_exists() -> None:
    text = (ROOT / "mkdocs.yml").read_text()
    pages = re.findall(r":\s+([\w/.-]+\.md)\s*$", text, re.MULTILINE)
    assert len(pages) >= 15
    missing = [p for p in pages if not (ROOT / "docs" / p).is_file()]
    assert missing == []
