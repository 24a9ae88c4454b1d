"""A data type is taken under the names users type, in any case, by one rule at every entry
point (pygraph's io / intermediate / compute types, g.tensor, cudnn.tensor, set_data_type, an
op's compute_data_type, cudnn.Graph): the cudnn.data_type members and their names, framework
dtypes and their names, and the short names 'fp16', 'bf16', 'fp32', 'fp64'. A name it does not
know is refused with what is taken and the closest name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnn
from cudnn.interop import framework_dtypes as dtypes

D = cudnn.data_type

SPELLINGS: dict[str, Any] = {
    "fp16": D.HALF, "FP16": D.HALF, "half": D.HALF, "HALF": D.HALF, "Half": D.HALF, "float16": D.HALF,
    "Float16": D.HALF, "torch.float16": D.HALF, "data_type.HALF": D.HALF,
    "bf16": D.BFLOAT16, "BF16": D.BFLOAT16, "bfloat16": D.BFLOAT16, "BFLOAT16": D.BFLOAT16,
    "fp32": D.FLOAT, "float32": D.FLOAT, "float": D.FLOAT, "FLOAT": D.FLOAT,
    "fp64": D.DOUBLE, "float64": D.DOUBLE, "double": D.DOUBLE, "DOUBLE": D.DOUBLE,
    "int8": D.INT8, "INT8": D.INT8, "uint8": D.UINT8, "int32": D.INT32, "int64": D.INT64,
    "int8x4": D.INT8x4, "INT8X4": D.INT8x4,
    "fp8_e4m3": D.FP8_E4M3, "FP8_E4M3": D.FP8_E4M3, "float8_e4m3fn": D.FP8_E4M3, "fp8_e4m3fn": D.FP8_E4M3,
    "fp8_e5m2": D.FP8_E5M2, "float8_e5m2": D.FP8_E5M2, "fp8_e8m0": D.FP8_E8M0, "float8_e8m0fnu": D.FP8_E8M0,
    "fp4_e2m1": D.FP4_E2M1, "float4_e2m1fn": D.FP4_E2M1, "boolean": D.BOOLEAN, "BOOLEAN": D.BOOLEAN,
}


@pytest.mark.parametrize(("name", "member"), SPELLINGS.items(), ids=list(SPELLINGS))
def test_each_spelling_is_its_member(name: str, member: Any) -> None:
    assert dtypes.from_string(name) is member
    assert cudnn.pygraph(io_data_type=name).context.io_data_type is member


def test_a_framework_bool_is_a_framework_bool_and_boolean_the_packed_bits() -> None:
    assert dtypes.from_string("bool") is dtypes.data_type_of(np.dtype(bool))
    assert dtypes.from_string("boolean") is D.BOOLEAN


class Stop(Exception):
    """Leaves a cudnn.Graph block before it builds (a build needs a GPU)."""


def _graph_wrapper_type(value: Any) -> Any:
    """The io type of a cudnn.Graph's pygraph; a bad one is refused by cudnn.Graph(...) itself."""
    graph = cudnn.Graph(io_data_type=value)
    with pytest.raises(Stop), graph:
        taken = graph.pygraph.context.io_data_type
        raise Stop
    return taken


def _entry_points() -> dict[str, Any]:
    """Each place a data type is given, as a function of the value given."""
    def op_compute(value: Any) -> Any:
        g = cudnn.pygraph(io_data_type=D.HALF)
        return g.relu(g.tensor([2, 2], name="x"), compute_data_type=value, name="r").producer.compute_data_type

    return {
        "pygraph io_data_type": lambda v: cudnn.pygraph(io_data_type=v).context.io_data_type,
        "pygraph intermediate_data_type":
            lambda v: cudnn.pygraph(intermediate_data_type=v).context.intermediate_data_type,
        "pygraph compute_data_type": lambda v: cudnn.pygraph(compute_data_type=v).context.compute_data_type,
        "pygraph.tensor": lambda v: cudnn.pygraph().tensor([2], data_type=v).get_data_type(),
        "cudnn.tensor": lambda v: cudnn.tensor(data_type=v).get_data_type(),
        "set_data_type": lambda v: cudnn.tensor().set_data_type(v).get_data_type(),
        "op compute_data_type": op_compute,
        "cudnn.Graph io_data_type": _graph_wrapper_type,
    }


ENTRY_POINTS = _entry_points()


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_one_rule_at_every_entry_point(entry: str) -> None:
    take = ENTRY_POINTS[entry]
    for value, member in (("fp16", D.HALF), ("BF16", D.BFLOAT16), ("float32", D.FLOAT), ("HALF", D.HALF),
                          ("half", D.HALF), (D.FP8_E4M3, D.FP8_E4M3), (np.float16, D.HALF),
                          (np.dtype("int32"), D.INT32)):
        assert take(value) is member, (entry, value)
    with pytest.raises(TypeError, match=r"expected a cudnn\.data_type, a framework dtype .* or a data type's name "
                                        r"in any case: a cudnn\.data_type member name \('HALF', 'BFLOAT16', .*\), a "
                                        r"framework dtype name \('float16', 'bfloat16', .*\) or 'fp16', 'bf16', "
                                        r"'fp32', 'fp64'; got 'fp17'; did you mean 'fp16'\?$"):
        take("fp17")
    with pytest.raises(TypeError, match=r"got 'tf32'; did you mean 'fp32'\?$"):  # a math mode, stored as fp32
        take("tf32")
    with pytest.raises(TypeError, match=r"got 'quaternion'$"):  # no name is close
        take("quaternion")
    with pytest.raises(TypeError, match=r"got 3\.5$"):
        take(3.5)


def test_the_message_names_where_the_type_was_given() -> None:
    for call, where in ((lambda: cudnn.pygraph(io_data_type="fp61"), "io_data_type: "),
                        (lambda: cudnn.pygraph().tensor([2], name="x", data_type="fp61"),
                         "pygraph.tensor('x'): data_type: "),
                        (lambda: cudnn.tensor(data_type="fp61"), "cudnn.tensor: data_type: "),
                        (lambda: cudnn.tensor().set_data_type("fp61"), "set_data_type: "),
                        (lambda: cudnn.Graph(compute_data_type="fp61"), "cudnn.Graph: compute_data_type: ")):
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value).startswith(where + "expected a cudnn.data_type"), str(info.value)


def test_the_raw_setter_takes_members_only_and_says_what_the_public_one_takes() -> None:
    t = cudnn.tensor()
    assert t._set_data_type(D.HALF).get_data_type() is D.HALF
    with pytest.raises(TypeError, match=r"^_set_data_type: expected a cudnn\.data_type, got 'fp16'; set_data_type\(\) "
                                        r"also takes framework dtypes and data type names \('fp16', 'bfloat16', "
                                        r"'HALF', \.\.\.\)$"):
        t._set_data_type("fp16")


def test_what_was_taken_before_is_still_taken() -> None:
    assert cudnn.pygraph(io_data_type=None).context.io_data_type is D.NOT_SET
    assert cudnn.pygraph(io_data_type="NOT_SET").context.io_data_type is D.NOT_SET
    for value, member in ((D.HALF, D.HALF), ("BFLOAT16", D.BFLOAT16), ("torch.bfloat16", D.BFLOAT16),
                          (np.dtype("float64"), D.DOUBLE), (np.zeros(2, np.float32), D.FLOAT)):
        assert cudnn.pygraph(io_data_type=value).context.io_data_type is member
    assert cudnn.datatypes._library_type("fp16") is D.HALF  # the datatypes helpers read names the same way


def test_every_name_listed_is_taken() -> None:
    names = dtypes.string_names()
    assert {"fp16", "bf16", "fp32", "fp64", "half", "float16", "bfloat16", "fp8_e4m3"} <= set(names)
    for name in names:
        assert dtypes.from_string(name) is not D.NOT_SET, name
        assert dtypes.from_string(name.upper()) is dtypes.from_string(name), name


def test_a_name_given_by_position_reads_as_a_data_type() -> None:
    """1.32's order (name, then compute_data_type) is told from v1.23's by the argument types: a
    data type's name is a data type there too."""
    g = cudnn.pygraph(io_data_type=D.HALF)
    x = g.tensor([2, 2], name="x")
    node = g.relu(x, None, None, None, "r", "fp16").producer
    assert (node.name, node.compute_data_type) == ("r", D.HALF)
    with pytest.raises(TypeError, match=r"can be read two ways: as compute_data_type='fp32', name='half' \(v1\.23's "
                                        r"order\) or as name='fp32', compute_data_type='half' \(1\.32's order\)"):
        g.relu(x, None, None, None, "fp32", "half")
