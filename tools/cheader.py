"""A small parser for the cuDNN C headers: enums, structs, prototypes, #define constants.

The cuDNN headers are regular enough that a tokenizer plus a few rules covers them; a real
C front end would be a heavy dependency for what is a table extraction. The parser keeps
the doc comments' ``@since cuDNN X.Y.Z`` and ``@deprecated`` markers, because the library
uses them to gate features on the installed backend version.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_SINCE = re.compile(r"@since\s+cuDNN\s+(\d+)\.(\d+)\.(\d+)")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_MARK = "\x00"


@dataclass
class EnumMember:
    name: str
    value: int
    deprecated: bool = False
    since: int | None = None  # encoded as MAJOR*10000 + MINOR*100 + PATCH


@dataclass
class Enum:
    name: str
    members: list[EnumMember] = field(default_factory=list)
    deprecated: bool = False
    header: str = ""


@dataclass
class Field:
    ctype: str  # normalised C type of one element, e.g. "cudnnStatus_t"
    name: str
    count: int | None = None  # array length for ``int reserved[3]``, None for a scalar


@dataclass
class Struct:
    name: str  # the typedef name, e.g. "cudnnConvolutionFwdAlgoPerf_t"
    fields: list[Field] = field(default_factory=list)
    deprecated: bool = False
    header: str = ""


@dataclass
class Param:
    ctype: str  # normalised C type, e.g. "const int64_t *"
    name: str


@dataclass
class Function:
    name: str
    restype: str
    params: list[Param]
    deprecated: bool = False
    since: int | None = None
    header: str = ""


def _since(text: str) -> int | None:
    m = _SINCE.search(text)
    return int(m[1]) * 10000 + int(m[2]) * 100 + int(m[3]) if m else None


def _strip_preprocessor(text: str) -> str:
    """Blank out preprocessor lines (with continuations), keeping line structure."""
    out, cont = [], False
    for line in text.splitlines():
        is_pp = cont or line.lstrip().startswith("#")
        cont = is_pp and line.rstrip().endswith("\\")
        out.append("" if is_pp else line)
    return "\n".join(out)


def _eval_int(expr: str, known: dict[str, int]) -> int:
    """Evaluate an enum initializer: literals, earlier member names, + - * / << | ( )."""
    expr = re.sub(r"(?<=\d)[uUlL]+\b", "", expr.strip())
    if not re.fullmatch(r"[\w\s+\-*/()<>|&~^]+", expr):
        raise ValueError(f"unsupported enum expression {expr!r}")
    names = set(re.findall(r"[A-Za-z_]\w*", expr))
    missing = names - known.keys()
    if missing:
        raise ValueError(f"enum expression {expr!r} refers to unknown {sorted(missing)}")
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(known)))  # noqa: S307


def parse_enums(text: str, header: str = "", known: dict[str, int] | None = None) -> list[Enum]:
    """Every ``typedef enum { ... } name_t;`` of a header, in order."""
    known = {} if known is None else known
    text = _strip_preprocessor(text)
    enums = []
    pattern = re.compile(r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*(CUDNN_DEPRECATED)?\s*;", re.S)
    for m in pattern.finditer(text):
        enum = Enum(m[2], deprecated=bool(m[3]), header=header)
        enum.members = _parse_enum_body(m[1], known)
        enums.append(enum)
    return enums


def _parse_enum_body(body: str, known: dict[str, int]) -> list[EnumMember]:
    comments: list[str] = []

    def stash(m: re.Match[str]) -> str:
        comments.append(m[0])
        return f" {_MARK}{len(comments) - 1}{_MARK} "

    marked = _COMMENT.sub(stash, body)
    members: list[EnumMember] = []
    previous_value = -1
    for chunk in marked.split(","):
        parts = re.split(f"{_MARK}(\\d+){_MARK}", chunk)
        code = "".join(parts[0::2]).strip()
        notes = [comments[int(i)] for i in parts[1::2]]
        # A trailing "/**<" comment before this entry's code documents the previous entry.
        head = chunk.split(code.split()[0], 1)[0] if code else chunk
        for i in re.findall(f"{_MARK}(\\d+){_MARK}", head):
            note = comments[int(i)]
            if note.startswith(("/**<", "//!<")) and members:
                _apply_note(members[-1], note, trailing=True)
                notes.remove(note)
        if not code:
            continue
        m = re.fullmatch(r"(\w+)\s*(CUDNN_DEPRECATED_ENUM)?\s*(?:=\s*(.+))?", code, re.S)
        if not m:
            raise ValueError(f"cannot parse enum entry {code!r}")
        value = _eval_int(m[3], known) if m[3] else previous_value + 1
        member = EnumMember(m[1], value, deprecated=bool(m[2]))
        for note in notes:
            _apply_note(member, note, trailing=note.startswith(("/**<", "//!<")))
        known[member.name] = previous_value = value
        members.append(member)
    return members


def _apply_note(member: EnumMember, note: str, trailing: bool) -> None:
    since = _since(note)
    if since is not None and (trailing or member.since is None):
        member.since = since
    if trailing and "@deprecated" in note:
        member.deprecated = True


def parse_structs(text: str, header: str = "") -> list[Struct]:
    """Every ``typedef struct tag { fields } name_t;`` of a header (opaque structs skipped)."""
    text = _COMMENT.sub(" ", _strip_preprocessor(text))
    structs = []
    pattern = re.compile(r"typedef\s+struct\s*\w*\s*\{(.*?)\}\s*(\w+)\s*(CUDNN_DEPRECATED)?\s*;", re.S)
    for m in pattern.finditer(text):
        struct = Struct(m[2], deprecated=bool(m[3]), header=header)
        for decl in filter(None, (d.strip() for d in m[1].split(";"))):
            fm = re.fullmatch(r"(.*?)(\w+)\s*(?:\[\s*(\d+)\s*\])?", " ".join(decl.split()))
            if not fm or not fm[1].strip():
                raise ValueError(f"cannot parse field {decl!r} of {struct.name}")
            count = int(fm[3]) if fm[3] else None
            struct.fields.append(Field(_normalise_type(fm[1]), fm[2], count))
        structs.append(struct)
    return structs


def parse_opaque_types(text: str) -> list[str]:
    """Typedef names of opaque pointers: ``typedef struct tag *name_t;``, ``typedef void *name_t;``."""
    text = _COMMENT.sub(" ", _strip_preprocessor(text))
    pattern = re.compile(r"typedef\s+(?:struct\s+\w+|void)\s*\*\s*(\w+)\s*(?:CUDNN_DEPRECATED)?\s*;")
    return [m[1] for m in pattern.finditer(text)]


def parse_functions(text: str, header: str = "") -> list[Function]:
    """Every exported ``ret CUDNNWINAPI name(params);`` prototype, with its doc's @since."""
    text = _strip_preprocessor(text)
    functions = []
    pattern = re.compile(
        r"(/\*\*(?:(?!\*/).)*\*/\s*(?:/\*(?:(?!\*/).)*\*/\s*)*)?"  # leading doc comment(s)
        r"((?:CUDNN_DEPRECATED\s+)?[\w\s\*]+?)\s*\bCUDNNWINAPI\s+(\w+)\s*\(([^;]*?)\)\s*"
        r"(CUDNN_DEPRECATED)?\s*;",
        re.S,
    )
    for m in pattern.finditer(text):
        doc, ret, name, params = m[1] or "", m[2], m[3], _COMMENT.sub(" ", m[4])
        deprecated = "CUDNN_DEPRECATED" in ret or bool(m[5]) or "@deprecated" in doc
        ret = _normalise_type(ret.replace("CUDNN_DEPRECATED", ""))
        functions.append(
            Function(name, ret, _parse_params(params), deprecated, _since(doc), header)
        )
    return functions


def _parse_params(params: str) -> list[Param]:
    params = " ".join(params.split())
    if params in ("", "void"):
        return []
    out = []
    for i, p in enumerate(params.split(",")):
        p = p.strip()
        array = p.endswith("]")
        if array:
            p = p[: p.index("[")].strip()
        m = re.fullmatch(r"(.*?)(\w+)", p)
        if not m or not m[1].strip() or m[1].strip() == "const":
            # Unnamed parameter: the whole text is the type.
            ctype, pname = p, f"arg{i}"
        else:
            ctype, pname = m[1], m[2]
        ctype = _normalise_type(ctype) + (" *" if array else "")
        out.append(Param(_normalise_type(ctype), pname))
    return out


def _normalise_type(ctype: str) -> str:
    """'const  int64_t*const' -> 'const int64_t *'; one space before each star."""
    ctype = re.sub(r"\*\s*const\b", "*", ctype)
    ctype = re.sub(r"\bconst\s*$", "", ctype.strip())
    ctype = " ".join(ctype.replace("*", " * ").split())
    return ctype.replace("* *", "**")


def parse_defines(text: str) -> dict[str, str]:
    """Object-like ``#define NAME value`` lines (macros with arguments are skipped)."""
    out = {}
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)[ \t]+([^\n]+)$", text, re.M):
        out[m[1]] = _COMMENT.sub("", m[2]).strip()
    return out


def header_version(include_dir: Path) -> tuple[int, int, int]:
    """(major, minor, patch) from cudnn_version_v9.h (or cudnn_version.h)."""
    for name in ("cudnn_version_v9.h", "cudnn_version.h"):
        path = include_dir / name
        if path.exists():
            d = parse_defines(path.read_text())
            return int(d["CUDNN_MAJOR"]), int(d["CUDNN_MINOR"]), int(d["CUDNN_PATCHLEVEL"])
    raise FileNotFoundError(f"no cudnn_version header in {include_dir}")


def find_include_dir() -> Path | None:
    """The include/ folder of the installed nvidia-cudnn wheel, or None."""
    try:
        import nvidia.cudnn  # type: ignore[import-not-found]
    except ImportError:
        return None
    for root in nvidia.cudnn.__path__:
        inc = Path(root) / "include"
        if (inc / "cudnn_graph_v9.h").exists():
            return inc
    return None


# -- shared by the generators ------------------------------------------------------------------

def preamble(first_line: str, imports: tuple[str, ...] = ()) -> list[str]:
    """Opening lines of a generated module: its docstring, formatter pragmas, imports."""
    lines = [f'"""{first_line}', "", "Do not edit: change the generator and run it again.", '"""', "",
             "# fmt: off", "# ruff: noqa: E501", "from __future__ import annotations", ""]
    return lines + ([*imports, ""] if imports else [])


def run_generator(doc: str, generate: Callable[[Path, tuple[int, int, int] | None], dict[Path, str]], root: Path,
                  checked_version: Callable[[Path], tuple[int, int, int] | None] = lambda include: None) -> int:
    """Command line of a generator: write its outputs, or with --check report stale ones (exit 1).
    ``checked_version``: the version --check compares the committed files as stamped with (None:
    the headers' own), so that a patch release declaring the same things finds them current."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--include", type=Path, help="cuDNN include folder (default: the wheel's)")
    ap.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    args = ap.parse_args()
    include = args.include or find_include_dir()
    if include is None:
        ap.error("no cuDNN headers found: pip install nvidia-cudnn-cu13, or pass --include")
    stale = 0
    for path, text in generate(include, checked_version(include) if args.check else None).items():
        rel = path.relative_to(root)
        if args.check:
            is_stale = not path.exists() or path.read_text() != text
            stale |= is_stale
            print(f"{rel} is {'STALE' if is_stale else 'current'}")
        else:
            path.write_text(text)
            print(f"wrote {rel}")
    return int(stale)
