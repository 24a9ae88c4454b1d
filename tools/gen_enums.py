"""Generate src/cudnn/_lib/enums.py and legacy_enums.py from the installed wheel's headers.

    python tools/gen_enums.py            # write the files
    python tools/gen_enums.py --check    # exit 1 if a committed file is stale

Every enum of cudnn_graph_v9.h (cudnn_backend_v9.h is an alias of it) is written as a table
under its C name (C member names, exact values), with tables of deprecated members and of
the version each newer member appeared in. The public enums under the documented Python
names (``cudnn.data_type.HALF``) are derived from them by the table PUBLIC below: same
values as the backend, so lowering is ``int(member)``.

The modules hold tables, not classes: each table becomes an IntEnum the first time its name
is read (``cudnn._lib.lazy_enums``), so importing them builds nothing and a program pays
only for the enums it uses.

legacy_enums.py holds the enums of the classic C API headers (cudnn_ops_v9.h, cudnn_cnn_v9.h,
cudnn_adv_v9.h; their initializers may name graph-header members) and the numeric
``#define`` constants of all four headers (``CUDNN_SEV_ERROR_EN``, ``CUDNN_RNN_PADDED_IO_ENABLED``).

enums.py records where the tables come from: HEADER_VERSION, the headers' version, and
HEADER_DIGEST, a digest of what the four headers declare (their text, patch-level numbers left
out). Another patch release's headers that declare the same things have the same digest and
generate the same tables but for the version written in them (tests/lib/test_enums.py).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cheader import (  # noqa: E402
    Enum,
    _eval_int,
    header_version,
    parse_defines,
    parse_enums,
    preamble,
    run_generator,
)

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "src" / "cudnn" / "_lib" / "enums.py"
HEADERS = ("cudnn_graph_v9.h",)
LEGACY_OUTPUT = ROOT / "src" / "cudnn" / "_lib" / "legacy_enums.py"
LEGACY_HEADERS = ("cudnn_ops_v9.h", "cudnn_cnn_v9.h", "cudnn_adv_v9.h")
_VERSION_DEFINE = re.compile(r"_(MAJOR|MINOR|PATCH|PATCHLEVEL)$")
# A header's patch-level number (`#define CUDNN_GRAPH_PATCH 1`): the one line a patch release
# changes in headers that declare the same things; left out of HEADER_DIGEST.
_PATCH_LINE = re.compile(r"^(#define\s+CUDNN_\w*_PATCH(?:LEVEL)?)\s+\d+[ \t]*$", re.MULTILINE)

# The official frontend numbers members of its own, with no backend counterpart, from 1000 (its
# FRONTEND_KNOB_TYPE_BASE); cudnn-py's public enums keep the backend's values below that.
FRONTEND_BASE = 1000
# Public name -> (C enum, member prefix to strip, extra members). An extra member with a negative
# value leads the header's members: "NOT_SET" (-1) marks an attribute the user left for inference;
# it never reaches the backend. One from FRONTEND_BASE up follows them: heur_mode.OPENSOURCE asks
# the official frontend for engines of its own, not libcudnn (the graph pipeline refuses it).
PUBLIC: dict[str, tuple[str, str, dict[str, int]]] = {
    "data_type": ("cudnnDataType_t", "CUDNN_DATA_", {"NOT_SET": -1}),
    "heur_mode": ("cudnnBackendHeurMode_t", "CUDNN_HEUR_MODE_", {"OPENSOURCE": FRONTEND_BASE}),
    "tensor_reordering": ("cudnnBackendTensorReordering_t", "CUDNN_TENSOR_REORDERING_", {}),
    "norm_forward_phase": ("cudnnBackendNormFwdPhase_t", "CUDNN_NORM_FWD_", {"NOT_SET": -1}),
    "norm_mode": ("cudnnBackendNormMode_t", "CUDNN_", {}),
    "reduction_mode": ("cudnnReduceTensorOp_t", "CUDNN_REDUCE_TENSOR_", {"NOT_SET": -1}),
    "behavior_note": ("cudnnBackendBehaviorNote_t", "CUDNN_BEHAVIOR_NOTE_", {}),
    "numerical_note": ("cudnnBackendNumericalNote_t", "CUDNN_NUMERICAL_NOTE_", {}),
    "knob_type": ("cudnnBackendKnobType_t", "CUDNN_KNOB_TYPE_", {"NOT_SET": -1}),
    "layout_type": ("cudnnBackendLayoutType_t", "CUDNN_LAYOUT_TYPE_", {}),
    "convolution_mode": ("cudnnConvolutionMode_t", "CUDNN_", {}),
    "pointwise_mode": ("cudnnPointwiseMode_t", "CUDNN_POINTWISE_", {}),
    "resample_mode": ("cudnnResampleMode_t", "CUDNN_RESAMPLE_", {}),
    "padding_mode": ("cudnnPaddingMode_t", "CUDNN_", {}),
    "rng_distribution": ("cudnnRngDistribution_t", "CUDNN_RNG_DISTRIBUTION_", {}),
    "reshape_mode": ("cudnnBackendReshapeMode_t", "CUDNN_RESHAPE_", {}),
}
# Enums of the documented Python API with no backend counterpart.
FRONTEND_ONLY: dict[str, dict[str, int]] = {
    "build_plan_policy": {"HEURISTICS_CHOICE": 0, "ALL": 1},
}
# The count sentinel closing some enums (CUDNN_KNOB_TYPE_COUNTS, CUDNN_LAYOUT_TYPE_COUNT): a name
# like this holding the enum's largest value. A real member may end in COUNT (CTA_COUNT).
_COUNT_MEMBER = re.compile(r"(^|_)(TYPE_)?COUNTS?$")


def _is_count_sentinel(name: str, value: int, values: list[int]) -> bool:
    return bool(_COUNT_MEMBER.search(name)) and value == max(values)


def header_digest(include_dir: Path) -> str:
    """sha256 of the headers every table is generated from (the graph header and the classic
    API's), each with its name, their patch-level numbers left out."""
    digest = hashlib.sha256()
    for header in HEADERS + LEGACY_HEADERS:
        text = _PATCH_LINE.sub(r"\1", (include_dir / header).read_text())
        digest.update(f"{header}\n{text}\n".encode())
    return digest.hexdigest()


def collect(include_dir: Path) -> list[Enum]:
    known: dict[str, int] = {}
    enums: list[Enum] = []
    for header in HEADERS:
        enums += parse_enums((include_dir / header).read_text(), header, known)
    return enums


def collect_legacy(include_dir: Path) -> tuple[list[Enum], dict[str, int | float]]:
    """Enums of the classic API headers, and the numeric #define constants of all four."""
    known: dict[str, int] = {}
    for header in HEADERS:
        parse_enums((include_dir / header).read_text(), header, known)
    enums: list[Enum] = []
    for header in LEGACY_HEADERS:
        enums += parse_enums((include_dir / header).read_text(), header, known)
    constants: dict[str, int | float] = {}
    for header in HEADERS + LEGACY_HEADERS:
        for name, text in parse_defines((include_dir / header).read_text()).items():
            if _VERSION_DEFINE.search(name) or not text:
                continue
            try:
                constants[name] = _eval_int(text, known)
            except ValueError:
                try:
                    constants[name] = float(text)
                except ValueError:
                    continue  # attributes, calling conventions, type casts
    return enums, constants


def _table(name: str, members: list[tuple[str, int]], comment: str = "") -> list[str]:
    """One enum's entry of a table literal: its name, then one member per line."""
    out = [f"    {name!r}: {{{f'  # {comment}' if comment else ''}"]
    out += [f"        {member!r}: {value!r}," for member, value in members]
    return out + ["    },"]


def _c_enums(enums: list[Enum]) -> list[str]:
    """The C_ENUMS table (C name -> members, header order), then the DEPRECATED table."""
    out = ["# Every enum of the headers under its C name: member -> value, in header order.",
           "C_ENUMS: dict[str, dict[str, int]] = {"]
    for enum in enums:
        out += _table(enum.name, [(m.name, m.value) for m in enum.members])
    out += ["}", "", "# Members the headers mark deprecated (enum name -> member names).",
            "DEPRECATED: dict[str, frozenset[str]] = {"]
    for enum in enums:
        names = [m.name for m in enum.members if m.deprecated or enum.deprecated]
        if names:
            out.append(f"    {enum.name!r}: frozenset({sorted(names)!r}),")
    return out + ["}"]


def _lazy_enums(tables: str, docs: str, by_name: str = "") -> list[str]:
    """The closing lines that turn the tables into the module's IntEnums, built on first read;
    the enums of ``by_name`` print as the documented API's do (``data_type.HALF``)."""
    named = f", printed_by_name={by_name}" if by_name else ""
    return ["", "# The tables above become IntEnums the first time a name is read (PEP 562 __getattr__):",
            "# importing this module builds none of them.",
            f"_enums = LazyEnums(__name__, {tables}, {docs}{named})",
            "__getattr__ = _enums.build",
            "__dir__ = _enums.dir",
            ""]


def render_legacy(enums: list[Enum], constants: dict[str, int | float], version: tuple[int, int, int]) -> str:
    v = "%d.%d.%d" % version
    out = preamble(f"cuDNN {v} classic-API enums and constants, GENERATED by tools/gen_enums.py from\n"
                   f"{', '.join(LEGACY_HEADERS)} (constants also from {', '.join(HEADERS)}).",
                   ("from .lazy_enums import LazyEnums",))
    out += _c_enums(enums)
    out += ["", "# Numeric #define constants of the headers.", "CONSTANTS: dict[str, int | float] = {"]
    out += [f"    {name!r}: {value!r}," for name, value in constants.items()]
    out += ["}"]
    out += _lazy_enums("C_ENUMS", "{}")
    return "\n".join(out)


def render(enums: list[Enum], version: tuple[int, int, int], digest: str) -> str:
    v = "%d.%d.%d" % version
    out = preamble(f"cuDNN {v} enums, GENERATED by tools/gen_enums.py from {', '.join(HEADERS)}.",
                   ("from .lazy_enums import LazyEnums",))
    out += [f"HEADER_VERSION = {version[0] * 10000 + version[1] * 100 + version[2]}",
            f"# sha256 of {', '.join(HEADERS + LEGACY_HEADERS)}, patch-level numbers left out",
            f"HEADER_DIGEST = {digest!r}", ""]
    out += _c_enums(enums)
    out += ["", "# Backend version that introduced each member newer than 9.0.0.", "SINCE: dict[str, dict[str, int]] = {"]
    for enum in enums:
        newer = {m.name: m.since for m in enum.members if m.since and m.since > 90000}
        if newer:
            out.append(f"    {enum.name!r}: {newer!r},")
    out += ["}"]

    by_name = {e.name: e for e in enums}
    docs: dict[str, str] = {}
    out += ["", "# Public enums under the documented Python names; values are the backend's.",
            "PUBLIC_ENUMS: dict[str, dict[str, int]] = {"]
    for public, (cname, prefix, extra) in PUBLIC.items():
        members = [(name, value) for name, value in extra.items() if value < 0]
        values = [m.value for m in by_name[cname].members]
        for m in by_name[cname].members:
            if m.name.startswith(prefix) and not _is_count_sentinel(m.name, m.value, values):
                members.append((m.name[len(prefix):], m.value))
        members += [(name, value) for name, value in extra.items() if value >= 0]
        out += _table(public, members, cname)
        docs[public] = f"{cname} under its documented Python name."
    for public, frontend_members in FRONTEND_ONLY.items():
        out += _table(public, list(frontend_members.items()), "frontend-only")
        docs[public] = "Frontend-only: no backend counterpart."
    out += ["}", "", "# Public enum -> (C enum, stripped prefix).", "PUBLIC_SOURCE: dict[str, tuple[str, str]] = {"]
    out += [f"    {p!r}: ({c!r}, {pre!r})," for p, (c, pre, _) in PUBLIC.items()]
    out += ["}", "", "# Docstrings of the public enums.", "DOCS: dict[str, str] = {"]
    out += [f"    {name!r}: {doc!r}," for name, doc in docs.items()]
    out += ["}"]
    out += _lazy_enums("{**C_ENUMS, **PUBLIC_ENUMS}", "DOCS", "PUBLIC_ENUMS")
    return "\n".join(out)


def generate(include_dir: Path, version: tuple[int, int, int] | None = None) -> dict[Path, str]:
    """The generated files' text; ``version``: the version written in them (default: the headers')."""
    version = version or header_version(include_dir)
    return {
        OUTPUT: render(collect(include_dir), version, header_digest(include_dir)),
        LEGACY_OUTPUT: render_legacy(*collect_legacy(include_dir), version),
    }


def committed_version(include_dir: Path) -> tuple[int, int, int] | None:
    """The version the committed tables are stamped with, where ``include_dir``'s headers declare
    what theirs did (the same HEADER_DIGEST: a patch release); else None."""
    text = OUTPUT.read_text() if OUTPUT.exists() else ""
    version = re.search(r"^HEADER_VERSION = (\d+)$", text, re.M)
    digest = re.search(r"^HEADER_DIGEST = '(\w+)'$", text, re.M)
    if version is None or digest is None or digest.group(1) != header_digest(include_dir):
        return None
    v = int(version.group(1))
    return v // 10000, v // 100 % 100, v % 100


def main() -> int:
    return run_generator(__doc__, generate, ROOT, committed_version)


if __name__ == "__main__":
    raise SystemExit(main())
