"""Generated enums: current with the installed headers, exact values, documented names.

The comparisons with the headers run where the installed headers declare what the tables'
headers do (generated_tables.py): on the README's set-up as cuDNN patch releases come out."""

from __future__ import annotations

import re
from enum import Enum, IntEnum
from pathlib import Path

import pytest
from support.generated_tables import generated, headers_of_the_tables, tables_version, tool

import cudnn
from cudnn._lib import enums


@pytest.mark.parametrize("name", ["gen_enums", "gen_api"])
def test_generated_files_are_current(name: str) -> None:
    include = headers_of_the_tables()
    for path, text in generated(name, include).items():
        assert Path(path).read_text() == text, f"{path} is stale: run python tools/{name}.py"


def test_classic_api_tables_are_among_the_checked_outputs() -> None:
    include = headers_of_the_tables()
    enum_outputs = {Path(p).name for p in generated("gen_enums", include)}
    api_outputs = {Path(p).name for p in generated("gen_api", include)}
    assert enum_outputs == {"enums.py", "legacy_enums.py"}
    assert api_outputs == {"api_graph.py", "api_legacy.py", "structs.py"}


def test_the_header_digest_covers_every_header_the_tables_are_made_from() -> None:
    gen_enums, gen_api = tool("gen_enums"), tool("gen_api")
    digested = set(gen_enums.HEADERS + gen_enums.LEGACY_HEADERS)
    assert {h for headers in gen_api.OUTPUTS.values() for h in headers} | set(gen_api.TYPES_HEADERS) <= digested
    assert re.fullmatch("[0-9a-f]{64}", enums.HEADER_DIGEST)


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def _release(tmp_path: Path, version: tuple[int, int, int], new_member: bool) -> Path:
    """A copy of the installed headers as another release: ``version`` in every version line,
    and one more pointwise mode where ``new_member``."""
    include = headers_of_the_tables()
    names = [*tool("gen_enums").HEADERS, *tool("gen_enums").LEGACY_HEADERS, "cudnn_version_v9.h"]
    out = tmp_path / "include"
    out.mkdir()
    for name in names:
        text = (include / name).read_text()
        for key, value in zip(("MAJOR", "MINOR", "PATCH"), version):
            define = rf"^(#define CUDNN_(?:\w+_)?{key}(?:LEVEL)?) \d+$"
            text = re.sub(define, rf"\g<1> {value}", text, flags=re.MULTILINE)
        if new_member and name == "cudnn_graph_v9.h":
            text = text.replace("CUDNN_POINTWISE_ADD ", "CUDNN_POINTWISE_NEW = 99,\n    CUDNN_POINTWISE_ADD ", 1)
        (out / name).write_text(text)
    assert tool("cheader").header_version(out) == version
    return out


def test_a_patch_release_that_declares_the_same_gives_the_committed_tables(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    major, minor, patch = tables_version()
    other = _release(tmp_path, (major, minor, patch + 97), new_member=False)
    monkeypatch.setattr(tool("cheader"), "find_include_dir", lambda: other)
    assert headers_of_the_tables() == other
    for name in ("gen_enums", "gen_api"):
        for path, text in generated(name, other).items():
            assert Path(path).read_text() == text, path
    own = tool("gen_enums").generate(other)[tool("gen_enums").OUTPUT]  # stamped with its own version
    assert f"cuDNN {major}.{minor}.{patch + 97} enums" in own
    assert tool("gen_enums").committed_version(other) == (major, minor, patch)  # what --check compares with
    (tmp_path / "new").mkdir()
    assert tool("gen_enums").committed_version(_release(tmp_path / "new", (major, minor, patch + 97), True)) is None


@pytest.mark.parametrize(("release", "new_member"), [("next minor", False), ("patch", True)])
def test_headers_that_declare_other_things_skip_naming_both_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str, new_member: bool) -> None:
    major, minor, patch = tables_version()
    version = (major, minor + 1, 0) if release == "next minor" else (major, minor, patch + 97)
    other = _release(tmp_path, version, new_member)
    monkeypatch.setattr(tool("cheader"), "find_include_dir", lambda: other)
    with pytest.raises(pytest.skip.Exception) as skipped:
        headers_of_the_tables()
    assert skipped.value.msg == (
        f"the installed cuDNN {_dotted(version)} headers declare other things than the cuDNN "
        f"{_dotted(tables_version())} headers the tables were generated from; install the gen extra "
        "(pip install -e '.[gen]') to compare them with their own headers")


def test_every_header_enum_is_there_with_exact_values() -> None:
    include = headers_of_the_tables()
    cheader = tool("cheader")
    parsed = cheader.parse_enums((include / "cudnn_graph_v9.h").read_text())
    assert len(parsed) >= 30
    for enum in parsed:
        cls = getattr(enums, enum.name)
        for member in enum.members:
            assert cls[member.name] == member.value, f"{enum.name}.{member.name}"


def test_explicit_and_out_of_order_values() -> None:
    pw = enums.cudnnPointwiseMode_t
    assert pw.CUDNN_POINTWISE_ADD == 0 and pw.CUDNN_POINTWISE_MUL == 1 and pw.CUDNN_POINTWISE_SQRT == 4
    assert pw.CUDNN_POINTWISE_RELU_FWD == 100 and pw.CUDNN_POINTWISE_BINARY_SELECT == 601
    heur = enums.cudnnBackendHeurMode_t
    assert (heur.CUDNN_HEUR_MODE_INSTANT, heur.CUDNN_HEUR_MODE_B, heur.CUDNN_HEUR_MODE_FALLBACK,
            heur.CUDNN_HEUR_MODE_A) == (0, 1, 2, 3)
    status = enums.cudnnStatus_t
    # Deprecated aliases keep the value they alias.
    assert status.CUDNN_STATUS_ALLOC_FAILED == status.CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED == 4003
    assert status.CUDNN_STATUS_INVALID_VALUE == 2001
    assert enums.cudnnResampleMode_t.CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING == 2


def test_deprecated_members_and_versions_are_recorded() -> None:
    assert "CUDNN_DATA_INT8x4" in enums.DEPRECATED["cudnnDataType_t"]
    assert "CUDNN_STATUS_ALLOC_FAILED" in enums.DEPRECATED["cudnnStatus_t"]
    assert "CUDNN_KNOB_TYPE_SPLIT_K" in enums.DEPRECATED["cudnnBackendKnobType_t"]
    assert "CUDNN_DATA_HALF" not in enums.DEPRECATED["cudnnDataType_t"]
    assert enums.SINCE["cudnnDataType_t"]["CUDNN_DATA_FP8_E8M0"] == 90700
    assert enums.SINCE["cudnnBackendDescriptorType_t"]["CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR"] == 92200


def test_documented_public_names() -> None:
    dt = cudnn.data_type
    assert (dt.FLOAT, dt.DOUBLE, dt.HALF, dt.INT8, dt.BFLOAT16, dt.FP8_E4M3, dt.FP8_E5M2) == (0, 1, 2, 3, 9, 12, 13)
    assert dt.NOT_SET < 0
    assert cudnn.heur_mode.A == enums.cudnnBackendHeurMode_t.CUDNN_HEUR_MODE_A
    assert {m.name for m in cudnn.heur_mode} >= {"A", "B", "FALLBACK"}
    assert cudnn.tensor_reordering.F16x16 == 2
    assert cudnn.norm_forward_phase.TRAINING == 1 and cudnn.norm_forward_phase.INFERENCE == 0
    assert cudnn.reduction_mode.ADD == 0 and cudnn.reduction_mode.AMAX == enums.cudnnReduceTensorOp_t.CUDNN_REDUCE_TENSOR_AMAX
    assert cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API == 3
    assert cudnn.numerical_note.TENSOR_CORE == 0
    assert cudnn.knob_type.TILE_SIZE == 2
    assert {m.name for m in cudnn.build_plan_policy} == {"HEURISTICS_CHOICE", "ALL"}
    # Sentinel counts are not user-facing members.
    assert "TYPE_COUNT" not in cudnn.numerical_note.__members__
    assert "COUNTS" not in cudnn.knob_type.__members__


def test_unknown_enum_name_is_a_clear_error() -> None:
    with pytest.raises(KeyError):
        cudnn.data_type["HALFF"]
    from cudnn.backend import Descriptor

    with pytest.raises(ValueError, match="unknown cudnnBackendDescriptorType_t name 'NOT_A_DESCRIPTOR'"):
        Descriptor("NOT_A_DESCRIPTOR")


def test_public_enums_print_by_name_and_format_numbers() -> None:
    import cudnn

    half = cudnn.data_type.HALF
    # the official's enums (pybind11 native enums) print 'data_type.HALF' for str, repr and format
    assert (str(half), f"{half}", repr(half)) == ("data_type.HALF", "data_type.HALF", "data_type.HALF")
    assert (f"{half:>16}", f"{half:03}", f"{[half]}") == ("  data_type.HALF", "data_type.HALF", "[data_type.HALF]")
    # numeric specs, which the official refuses, format the value (the members are ints)
    assert (f"{half:d}", f"{half:03d}", "%d" % half, int(half)) == ("2", "002", "2", 2)
    assert str(cudnn.heur_mode.A) == "heur_mode.A"
    assert str(enums.cudnnDataType_t.CUDNN_DATA_HALF) == "2"  # C enums stay int-like


# The official 1.32 package's enums (cudnn/__init__.py of its wheel), and graph_types.NodeType.
OFFICIAL_ENUMS = ("data_type", "tensor_reordering", "heur_mode", "knob_type", "norm_forward_phase", "reduction_mode",
                  "build_plan_policy", "numerical_note", "behavior_note", "reshape_mode", "diagonal_alignment",
                  "attention_implementation", "moe_grouped_matmul_mode", "scalar_type", "cuda_graph_retention",
                  "NodeType")


def _public_enums() -> list[str]:
    return [name for name in cudnn.__all__
            if isinstance(value := getattr(cudnn, name), type) and issubclass(value, Enum)]


def test_the_officials_enums_are_public() -> None:
    assert set(OFFICIAL_ENUMS) <= set(_public_enums())


@pytest.mark.parametrize("name", _public_enums())
def test_every_public_enum_prints_as_the_officials(name: str) -> None:
    """str, repr and format give 'EnumName.MEMBER' for every member of every public enum,
    generated (data_type) or written by hand (diagonal_alignment), and the members stay ints."""
    for member in getattr(cudnn, name):
        printed = f"{name}.{member.name}"
        assert (str(member), repr(member), format(member), f"{member}") == (printed,) * 4
        assert f"{member:>60}" == printed.rjust(60) and f"{member:d}" == str(int(member))
        assert isinstance(member, IntEnum)


@pytest.mark.parametrize("value", [*cudnn.diagonal_alignment, *cudnn.attention_implementation, cudnn.heur_mode.A])
def test_pytest_ids_of_enum_values_read_as_the_officials(request: pytest.FixtureRequest, value: Enum) -> None:
    assert request.node.callspec.id == f"{type(value).__name__}.{value.name}"
    # ids the official suite builds in f-strings (test_mhas: diagonal_alignment_TOP_LEFT)
    assert f"diagonal_alignment_{cudnn.diagonal_alignment.TOP_LEFT}".replace("diagonal_alignment.", "") == \
        "diagonal_alignment_TOP_LEFT"


def test_heur_mode_opensource_is_a_frontend_member() -> None:
    """The official's HeurMode_t has OPENSOURCE (its own engines); no cuDNN header does. It takes
    the official's band for frontend-only members (FRONTEND_KNOB_TYPE_BASE = 1000), after the
    header's modes, so it is no alias of a backend mode."""
    opensource = cudnn.heur_mode.OPENSOURCE
    assert int(opensource) == 1000 and list(cudnn.heur_mode)[-1] is opensource
    assert opensource not in set(enums.cudnnBackendHeurMode_t)
    assert str(opensource) == "heur_mode.OPENSOURCE"


def test_attribute_names_are_ints_and_their_enum_is_built_only_for_a_reader() -> None:
    """Every node module and the lowering name attributes by the ints of `cudnn._lib.attributes`;
    a descriptor takes an attribute as an int, a member or a member name, and refuses one the
    headers do not have by its enum's name, all without building that enum."""
    import subprocess
    import sys

    code = (
        "import cudnn, cudnn._lib.enums as e\n"
        "from cudnn._graph.methods import method_table as oplib\n"
        "oplib.load_all()\n"
        "import cudnn._graph.model.lower, cudnn.backend.engine, cudnn.backend.plan, cudnn.backend.kernel_cache\n"
        "from cudnn.backend import Descriptor, attr_label\n"
        "from cudnn._lib.attributes import A\n"
        "d = Descriptor('CUDNN_BACKEND_TENSOR_DESCRIPTOR', 't')\n"
        "class Index:  # another integer type (numpy's ints are such)\n"
        "    def __index__(self) -> int:\n"
        "        return int(A.CUDNN_ATTR_TENSOR_DATA_TYPE)\n"
        "d.set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, [2, 3, 4]).set('CUDNN_ATTR_TENSOR_STRIDES', [12, 4, 1])\n"
        "d.set(Index(), e.data_type.HALF)\n"
        "refused = []\n"
        "for bad in (10**6, 'CUDNN_ATTR_NO_SUCH', 2.0):\n"
        "    try:\n"
        "        d.set(bad, 1)\n"
        "    except (TypeError, ValueError) as exc:\n"
        "        refused.append(f'{type(exc).__name__}: {exc}')\n"
        "out = {'built': 'cudnnBackendAttributeName_t' in vars(e), 'label': attr_label(A.CUDNN_ATTR_TENSOR_STRIDES),\n"
        "       'kind': type(A.CUDNN_ATTR_TENSOR_DIMENSIONS).__name__, 'refused': refused}\n"
        "out['member'] = d.set(e.cudnnBackendAttributeName_t.CUDNN_ATTR_TENSOR_UNIQUE_ID, 7) is d  # a member\n"
        "print(repr(out))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    got = eval(out)  # noqa: S307 - a dict printed by the child above
    assert got["built"] is False and got["kind"] == "int"
    assert got["label"] == "CUDNN_ATTR_TENSOR_STRIDES"
    assert got["refused"] == ["ValueError: 1000000 is not a valid cudnnBackendAttributeName_t",
                              "ValueError: unknown cudnnBackendAttributeName_t name 'CUDNN_ATTR_NO_SUCH'",
                              "TypeError: an attribute is an int, a cudnnBackendAttributeName_t member or a member "
                              "name, got float"]
    assert got["member"] is True


def test_descriptor_import_builds_no_enum_tables() -> None:
    import subprocess
    import sys

    code = ("import cudnn.backend.descriptor, cudnn._lib.enums as e, cudnn._lib.marshal as m; "
            "print(sorted(n for n in vars(e) if n in e.C_ENUMS or n in e.PUBLIC_ENUMS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    built = eval(out)  # noqa: S307 - a list of names printed by the child above
    # only the two the module names itself; the value enums of ~30 attribute types wait for use, and
    # attribute names are ints (cudnn._lib.attributes): their ~400-member enum is built for who reads it
    assert built == ["cudnnBackendAttributeType_t", "cudnnBackendDescriptorType_t"]
