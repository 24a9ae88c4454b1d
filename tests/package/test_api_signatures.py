"""Every official signature (official_signatures.py) against cudnn-py's, through inspect.signature:
positional order, keyword names, defaults. A drift from the official API fails here."""

from __future__ import annotations

import inspect
from enum import Enum
from typing import Any

import pytest
from support.official_signatures import (
    ANY,
    ANY_DEFAULT,
    CUDNN_PY_DEFAULTS,
    DATATYPES,
    KNOB,
    NODE,
    NODE_ATTRIBUTES,
    OFFICIAL_PYGRAPH_MEMBERS,
    PENDING_PYGRAPH,
    PENDING_TOP_LEVEL,
    PYGRAPH,
    PYGRAPH_PROPERTIES,
    REQUIRED,
    TENSOR,
    TENSOR_ATTRIBUTES,
    TOP_LEVEL,
    VAR_KEYWORD_OK,
    WRAPPER,
    Either,
    Sig,
)

import cudnn

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)


def _same(ours: Any, official: Any) -> bool:
    if official is ANY_DEFAULT:
        return True
    if isinstance(official, Either):
        return any(_same(ours, o) for o in official.options)
    if official is REQUIRED:
        return ours is P.empty
    if isinstance(official, Enum) or isinstance(ours, Enum):  # data_type.FLOAT == 0 == False: compare exactly
        return type(ours) is type(official) and ours == official
    return type(ours) is type(official) and ours == official


def _required_official(official: Any) -> bool:
    return official is REQUIRED or (isinstance(official, Either) and REQUIRED in official.options)


def mismatches(label: str, fn: Any, sig: Sig, lenient: set[int] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """What differs between ``fn``'s signature (self excluded) and the official ``sig``."""
    params = [p for p in inspect.signature(fn).parameters.values()]
    if params and params[0].name == "self":
        params = params[1:]
    out: list[str] = []
    positional = [p for p in params if p.kind in POSITIONAL]
    has_var_positional = any(p.kind == P.VAR_POSITIONAL for p in params)
    if len(positional) < len(sig.params) and not has_var_positional:
        out.append(f"{label}: {len(positional)} positional parameters, the official API has {len(sig.params)} "
                   f"({[n for n, _ in sig.params]})")
    seen_default = False
    for i, ((name, official), ours) in enumerate(zip(sig.params, positional)):
        where = f"{label} parameter {i} ({name if name != ANY else ours.name})"
        if name != ANY and ours.name != name:
            out.append(f"{where}: named {ours.name!r}, officially {name!r}")
        ok = _same(ours.default, official)
        if not ok and _required_official(official) and seen_default and ours.default is None:
            ok = True  # required after defaulted parameters: Python needs a default; None, then refused
        if not ok and i in lenient:
            ok = ours.default is not P.empty
        if not ok:
            shown = "none" if ours.default is P.empty else repr(ours.default)
            out.append(f"{where}: default {shown}, officially {official!r}")
        seen_default = seen_default or ours.default is not P.empty
    for extra in positional[len(sig.params):]:
        if extra.name not in sig.keywords:
            out.append(f"{label}: extra positional parameter {extra.name!r} (cudnn-py's extras are keyword-only)")
    by_name = {p.name: p for p in params}
    for name, official in sig.keywords.items():
        ours = by_name.get(name)
        if ours is None or ours.kind == P.POSITIONAL_ONLY:
            out.append(f"{label}: no keyword {name!r} (1.32 name)")
        elif not _same(ours.default, official):
            out.append(f"{label} keyword {name!r}: default {ours.default!r}, officially {official!r}")
    if any(p.kind == P.VAR_KEYWORD for p in params) and label.split(".")[-1] not in VAR_KEYWORD_OK:
        out.append(f"{label}: takes **kwargs (misspelt keywords would pass silently)")
    for p in params:
        if p.kind in POSITIONAL and p.default is P.empty and params.index(p) >= len(sig.params):
            out.append(f"{label}: extra required parameter {p.name!r}")
        if p.kind == P.KEYWORD_ONLY and p.default is P.empty:
            out.append(f"{label}: required keyword-only parameter {p.name!r}")
    return out


GRAPH = cudnn.pygraph()


@pytest.mark.parametrize("method", sorted(PYGRAPH))
def test_pygraph_method_signature(method: str) -> None:
    fn = cudnn.pygraph.__init__ if method == "__init__" else getattr(GRAPH, method, None)
    assert fn is not None, f"pygraph.{method} is missing"
    lenient = {i for m, i in CUDNN_PY_DEFAULTS if m == method}
    assert mismatches(f"pygraph.{method}", fn, PYGRAPH[method], lenient) == []


@pytest.mark.parametrize("method", sorted(PENDING_PYGRAPH))
def test_pending_pygraph_method_signature(method: str) -> None:
    fn = getattr(GRAPH, method, None)
    if fn is None:
        pytest.skip(f"pygraph.{method} is not implemented yet")
    assert mismatches(f"pygraph.{method}", fn, PENDING_PYGRAPH[method]) == []


@pytest.mark.parametrize("method", sorted(TENSOR))
def test_tensor_method_signature(method: str) -> None:
    fn = cudnn.tensor.__init__ if method == "__init__" else getattr(cudnn.tensor(), method, None)
    assert fn is not None, f"cudnn.tensor.{method} is missing"
    sig = TENSOR[method]
    if method == "__init__":  # cudnn.tensor() takes no arguments officially: ours must all be optional
        params = list(inspect.signature(fn).parameters.values())[1:]
        assert all(p.default is not P.empty for p in params)
        return
    assert mismatches(f"tensor.{method}", fn, sig) == []


def test_knob_signature() -> None:
    assert mismatches("knob", cudnn.knob.__init__, KNOB) == []


@pytest.mark.parametrize("name", sorted(TOP_LEVEL))
def test_top_level_signature(name: str) -> None:
    fn = getattr(cudnn, name)
    target = fn.__init__ if isinstance(fn, type) else fn
    assert mismatches(name, target, TOP_LEVEL[name]) == []


@pytest.mark.parametrize("name", sorted(PENDING_TOP_LEVEL))
def test_pending_top_level_signature(name: str) -> None:
    fn = getattr(cudnn, name, None)
    if fn is None:
        pytest.skip(f"cudnn.{name} is not implemented yet")
    assert mismatches(name, fn, PENDING_TOP_LEVEL[name]) == []


@pytest.mark.parametrize("name", sorted(WRAPPER))
def test_wrapper_module_signature(name: str) -> None:
    assert mismatches(f"wrapper.{name}", getattr(cudnn.wrapper, name), WRAPPER[name]) == []


@pytest.mark.parametrize("name", sorted(DATATYPES))
def test_datatypes_module_signature(name: str) -> None:
    assert mismatches(f"datatypes.{name}", getattr(cudnn.datatypes, name), DATATYPES[name]) == []


def test_the_table_covers_every_official_pygraph_method() -> None:
    """Appendix A: 120 names, of which the attention family (6 + 2 aliases) is tested elsewhere;
    and every member of 1.32's pygraph is in the tables (or is a property, checked below)."""
    attention = {"sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward", "sdpa_mxfp8", "sdpa_mxfp8_backward",
                 "scaled_dot_product_flash_attention", "scaled_dot_product_flash_attention_backward"}
    covered = set(PYGRAPH) | set(PENDING_PYGRAPH) | PYGRAPH_PROPERTIES
    assert sorted(OFFICIAL_PYGRAPH_MEMBERS - covered - attention) == []
    appendix_a = (set(PYGRAPH) | set(PENDING_PYGRAPH)) - set(NEW_IN_132) - {"__init__"}
    assert len(appendix_a) + len(attention) == 120


# pygraph members 1.32 added (beyond Appendix A's v1.23 surface)
NEW_IN_132 = ("select_plan", "backend_plan_entries", "get_engine_and_knobs_at_index", "get_cuda_graph_retention",
              "find_tensor", "get_node", "get_inputs", "get_outputs", "inspect", "rope", "rope_backward",
              *(f"{family}{part}" for family in ("gdn", "gdn2", "kda", "gdp", "mamba2")
                for part in ("", "_bwd", "_summary", "_summary_bwd")))


@pytest.mark.parametrize("name", sorted(PYGRAPH_PROPERTIES))
def test_pygraph_property(name: str) -> None:
    """1.32's pygraph properties are properties here too (read as attributes, never called)."""
    assert isinstance(getattr(cudnn.pygraph, name, None), property), f"pygraph.{name} is not a property"


@pytest.mark.parametrize("name", sorted(TENSOR_ATTRIBUTES))
def test_tensor_attribute(name: str) -> None:
    """1.32's plain attributes of cudnn.Tensor read on a tensor of ours."""
    getattr(cudnn.Tensor(), name)


@pytest.mark.parametrize("method", sorted(NODE))
def test_node_method_signature(method: str) -> None:
    assert mismatches(f"Node.{method}", getattr(cudnn.Node, method), NODE[method]) == []


def test_node_attributes() -> None:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF)
    g.relu(g.tensor([2, 3], name="x"), name="r")
    node = g.get_node("r")
    for name in NODE_ATTRIBUTES:
        getattr(node, name)


def test_the_checker_catches_drift() -> None:
    """The checker itself: a swapped order, a renamed keyword and a changed default all show."""
    def swapped(input, compute_data_type=None, swish_beta=None, name=""):  # type: ignore[no-untyped-def]
        pass

    def renamed(input, swish_beta=None, compute_type=None, name=""):  # type: ignore[no-untyped-def]
        pass

    def changed(input, swish_beta=1.0, compute_data_type=None, name=""):  # type: ignore[no-untyped-def]
        pass

    sig = PYGRAPH["swish"]
    assert any("named 'compute_data_type', officially 'swish_beta'" in m for m in mismatches("s", swapped, sig))
    assert any("named 'compute_type'" in m for m in mismatches("s", renamed, sig))
    assert any("default 1.0, officially None" in m for m in mismatches("s", changed, sig))
    assert mismatches("s", lambda input, swish_beta=None, compute_data_type=None, name="": None, sig) == []
