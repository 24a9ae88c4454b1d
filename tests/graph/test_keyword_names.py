"""A keyword a public callable does not take is refused with the closest one it takes, in one
format everywhere: op methods, ``cudnn.pygraph(...)``, its other methods, ``cudnn.tensor(...)``
and ``cudnn.Graph(...)``. The class is TypeError, as Python's and the official's."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

import cudnn
from cudnn._graph.methods import method_table as oplib

HALF = cudnn.data_type.HALF


def _graph() -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=HALF)
    g.relu(g.tensor([2, 3], name="x"), name="r").set_output(True)
    return g


def _refusal(name: str, keyword: str, close: str | None) -> str:
    """The start of the message for ``keyword``, as op methods word it."""
    hint = f"; did you mean {close!r}\\?" if close else ""
    return rf"^{re.escape(name)}\(\): {keyword!r} is not an argument of {re.escape(name)}{hint} \(its arguments: "


# the callables users spell keywords for, a misspelt keyword and the suggestion
MISSPELT: list[tuple[str, Any, str, str]] = [
    ("pygraph", lambda: cudnn.pygraph(io_dtype=HALF), "io_dtype", "io_data_type"),
    ("pygraph", lambda: cudnn.pygraph(compute_type=HALF), "compute_type", "compute_data_type"),
    ("pygraph.tensor", lambda: _graph().tensor(dims=[2, 3]), "dims", "dim"),
    ("pygraph.tensor", lambda: _graph().tensor([2, 3], dtype=HALF), "dtype", "data_type"),
    ("pygraph.tensor_like", lambda: _graph().tensor_like(templat=None), "templat", "template"),
    ("pygraph.build", lambda: _graph().build(heur_mode=[cudnn.heur_mode.A]), "heur_mode", "heur_modes"),
    ("pygraph.build_plans", lambda: _graph().build_plans(polcy=None), "polcy", "policy"),
    ("pygraph.create_execution_plans", lambda: _graph().create_execution_plans(heuristic=[]), "heuristic",
     "heuristics"),
    ("pygraph.serialize", lambda: _graph().serialize(as_byte=True), "as_byte", "as_bytes"),
    ("pygraph.deserialize", lambda: _graph().deserialize(b"", enforce_precompile=True), "enforce_precompile",
     "enforce_precompiled"),
    ("pygraph.execute_plan_at_index", lambda: _graph().execute_plan_at_index({}, indx=0), "indx", "index"),
    ("pygraph.autotune", lambda: _graph().autotune({}, warmups=1), "warmups", "warmup"),
    ("cudnn.tensor", lambda: cudnn.tensor(dims=[2]), "dims", "dim"),
    ("cudnn.Graph", lambda: cudnn.Graph(io_type=HALF), "io_type", "io_data_type"),
    ("cudnn.Graph", lambda: cudnn.Graph(hueristics=[]), "hueristics", "heuristics"),
    ("cudnn.Graph.set_io_tuples", lambda: cudnn.Graph().set_io_tuples(input=[], outputs=[]), "input", "inputs"),
]


@pytest.mark.parametrize(("name", "call", "keyword", "close"), MISSPELT, ids=[f"{m[0]}-{m[2]}" for m in MISSPELT])
def test_a_misspelt_keyword_is_named_with_the_closest_argument(name: str, call: Any, keyword: str,
                                                               close: str) -> None:
    with pytest.raises(TypeError, match=_refusal(name, keyword, close)):
        call()


def test_the_message_is_the_op_methods_one() -> None:
    g = _graph()
    with pytest.raises(TypeError) as op_error:
        g.relu(g.tensor([2, 3], name="y"), nmae="r2")
    with pytest.raises(TypeError) as tensor_error:
        g.tensor(dims=[2, 3])
    shape = r"^(\S+)\(\): '(\w+)' is not an argument of \1; did you mean '(\w+)'\? \(its arguments: [\w, ]+\)$"
    assert re.match(shape, str(op_error.value)).groups() == ("relu", "nmae", "name")  # type: ignore[union-attr]
    assert re.match(shape, str(tensor_error.value)).groups() == ("pygraph.tensor", "dims", "dim")  # type: ignore[union-attr]
    assert "its arguments: dim, stride, data_type, is_virtual" in str(tensor_error.value)


def _public_methods() -> list[str]:
    """pygraph's own public methods (those of the classes it is made of too), less the op methods."""
    return sorted({name for cls in cudnn.pygraph.__mro__ for name, value in vars(cls).items()
                   if inspect.isfunction(value) and not name.startswith("_") and not oplib.is_op(name)})


@pytest.mark.parametrize("method", [m for m in _public_methods() if m != "execute"])
def test_every_pygraph_method_names_an_unknown_keyword(method: str) -> None:
    with pytest.raises(TypeError, match=_refusal(f"pygraph.{method}", "not_an_argument", None)):
        getattr(_graph(), method)(not_an_argument=1)


def test_execute_is_left_as_it_is_and_python_names_the_keyword() -> None:
    """The hot path gets no wrapper (see cudnn._graph.model.keywords): Python's own error, which names
    the keyword, without a suggestion."""
    assert "execute" in _public_methods()
    assert not hasattr(cudnn.pygraph.execute, "__wrapped__")
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'worksapce'"):
        _graph().execute({}, worksapce=None)


def test_wrapped_callables_keep_their_signatures_and_their_own_type_errors() -> None:
    assert list(inspect.signature(cudnn.pygraph.tensor).parameters)[:3] == ["self", "dim", "stride"]
    assert "io_data_type" in inspect.signature(cudnn.pygraph).parameters
    assert "dim" in inspect.signature(cudnn.tensor).parameters
    with pytest.raises(TypeError, match=r"^pygraph.tensor: name: expected a str, got 5$"):
        _graph().tensor([2], name=5)  # a TypeError of the method itself passes through as it was
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'index'"):
        _graph().build_plan_at_index()  # Python's own, with every keyword right
    assert cudnn.pygraph.relu is oplib.OPS["relu"]  # op methods: oplib's, not wrapped twice


def test_keywords_that_are_right_still_work() -> None:
    g = cudnn.pygraph(name="g", io_data_type=HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(dim=[2, 3], stride=[3, 1], data_type=HALF, name="x")
    like = g.tensor_like(template=x, name="x2")
    t = cudnn.tensor(name="t", dim=[4], data_type=HALF)
    assert (g.name, x.get_dim(), like.get_name(), t.get_dim()) == ("g", [2, 3], "x2", [4])
