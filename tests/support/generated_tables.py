"""The installed cuDNN headers that the generated tables under src/cudnn/_lib are checked against.

The tables are generated from one cuDNN release's headers (the `gen` extra pins that wheel) and
record it: ``enums.HEADER_VERSION`` and ``enums.HEADER_DIGEST``, a digest of what the headers
declare (tools/gen_enums.py). Installed headers with that digest, the same release or a patch
release that declares the same things (what ``.[cu13]`` installs as patch releases come out),
must give the committed tables exactly, written with the committed version. Headers that
declare other things (another minor release) skip the comparison, saying which versions differ:
the `gen` extra installs the tables' own headers, where it always runs (.ci/run, step 3)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cudnn._lib import enums
from cudnn._lib.status import version_string

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str) -> ModuleType:
    """tools/<name>.py, imported (the generators import tools/cheader.py as `cheader`)."""
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tables_version() -> tuple[int, int, int]:
    """The version of the headers the committed tables were generated from: (9, 28, 0)."""
    v = enums.HEADER_VERSION
    return v // 10000, v // 100 % 100, v % 100


def headers_of_the_tables() -> Path:
    """The installed headers' include folder, where they declare what the tables' headers do;
    otherwise the test skips, saying why."""
    include = tool("cheader").find_include_dir()
    if include is None:
        pytest.skip("nvidia-cudnn wheel headers are not installed")
    major, minor, patch = tool("cheader").header_version(include)
    installed = version_string(major * 10000 + minor * 100 + patch)
    if installed != version_string(enums.HEADER_VERSION) and \
            tool("gen_enums").header_digest(include) != enums.HEADER_DIGEST:
        pytest.skip(f"the installed cuDNN {installed} headers declare other things than the cuDNN "
                    f"{version_string(enums.HEADER_VERSION)} headers the tables were generated from; "
                    "install the gen extra (pip install -e '.[gen]') to compare them with their own headers")
    return include


def generated(name: str, include: Path) -> dict[Path, str]:
    """What tools/<name>.py writes from ``include``, with the version the tables are written with."""
    return tool(name).generate(include, tables_version())
