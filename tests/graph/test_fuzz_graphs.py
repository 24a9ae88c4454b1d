"""Property-based fuzzing of pygraph on CPU: random graphs, well-formed and
deliberately malformed, through ``validate()``, ``str(graph)`` and ``json.loads``.

Every op family that validates without a GPU takes part: convolution forward / dgrad / wgrad
(2-D, 3-D, grouped), matmul with batch broadcasting, every row of the pointwise table (unary,
binary, ternary, broadcast, Python numbers), reductions, reshape and the structural ops, the
norms and their backward, and attention (``sdpa`` / ``sdpa_backward``). A graph is a short chain:
one node of the family under test, then up to two consumers of its output drawn from any family.
Faults are injected with small probabilities: wrong ranks, zero or negative dims, dims that do
not broadcast, mismatched or missing data types, wrong argument types, None, duplicate tensor
names, a tensor produced by another graph, a Python number where a tensor is needed.

The only allowed outcomes:

- a valid graph: its inferred dims satisfy each op's rules (checked here from the inputs, not
  from the node's own arithmetic), every tensor has dims, strides and a data type, the printed
  JSON parses and holds every tensor of the graph once, and validating again changes nothing;
- a refusal: ``cudnn.GraphError``, ``TypeError`` or ``ValueError`` whose message names the node
  (``'conv_3'``); refusals the rules require (duplicate names, unused virtual outputs, another
  graph's tensor) must happen.

A graph built without faults must validate. Profiles: ``ci`` (default; fixed seed, >= 2,000
graphs) and ``long`` (100,000 graphs, random seed): ``CUDNN_PY_FUZZ=long python -m pytest -q
tests/graph/test_fuzz_graphs.py``; ``CUDNN_PY_FUZZ=<number>`` runs that many graphs in all. A
failing example prints the ``@reproduce_failure`` blob that replays it.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import cudnn
from cudnn._graph.families.pointwise_nodes import REQUIRED, TABLE

DT = cudnn.data_type
NOT_SET = DT.NOT_SET
ALLOWED = (cudnn.GraphError, TypeError, ValueError)

# -- profiles -----------------------------------------------------------------------------------

# Graphs per test in the ci profile (their sum is the graphs per run).
SHARES = {"conv": 400, "matmul": 250, "pointwise": 400, "reduce_reshape": 250, "norm": 380, "sdpa": 320}
CI_TOTAL = sum(SHARES.values())
LONG_TOTAL = 100_000
_COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                              HealthCheck.large_base_example],
}
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", derandomize=False, **_COMMON)

_MODE = os.environ.get("CUDNN_PY_FUZZ", "ci").strip() or "ci"
if _MODE == "ci":
    PROFILE, TOTAL = "ci", CI_TOTAL
elif _MODE == "long":
    PROFILE, TOTAL = "long", LONG_TOTAL
elif _MODE.isdigit() and int(_MODE) > 0:
    PROFILE, TOTAL = "long", int(_MODE)
else:
    raise pytest.UsageError(f"CUDNN_PY_FUZZ must be 'ci', 'long' or a number of graphs, got {_MODE!r}")


def fuzz_settings(family: str) -> settings:
    share = math.ceil(SHARES[family] * TOTAL / CI_TOTAL)
    return settings(settings.get_profile(PROFILE), max_examples=share)


OUTCOMES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """One line after the module: graphs tried, valid, refused by exception type."""
    yield
    tried = OUTCOMES["graphs"]
    if not tried:
        return
    refused = ", ".join(f"{k[8:]} {v}" for k, v in sorted(OUTCOMES.items()) if k.startswith("refused:"))
    line = (f"graph fuzz ({PROFILE}, {TOTAL} planned): {tried} graphs, {OUTCOMES['valid']} valid, "
            f"{tried - OUTCOMES['valid']} refused ({refused}); {OUTCOMES['faulty']} with injected faults")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)


# -- the case: one graph under construction -----------------------------------------------------

class Refused(Exception):
    """An op call was refused cleanly (message checked); the graph is built no further."""


@dataclass
class Src:
    """A tensor a later node may consume, with the dims validate should give it."""

    t: Any
    dims: list[int]


FLOATS = (DT.HALF, DT.BFLOAT16, DT.FLOAT)
ODD_TYPES = (DT.INT8, DT.INT32, DT.INT64, DT.BOOLEAN, DT.DOUBLE, DT.FP8_E4M3, DT.UINT8)
BAD_VALUES: tuple[Any, ...] = ("bogus", 2.5, [1, 2], {"a": 1}, object(), b"x", True)


class Case:
    """Draws, fault bookkeeping and the graph of one example."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.faults: list[str] = []
        self.faulty = self.draw(st.integers(0, 99)) >= 60  # 40 % of the graphs get faults (shrinks to none)
        self.n = 0
        self.io = self.pick([DT.HALF, DT.BFLOAT16, DT.FLOAT, NOT_SET])
        inter = self.pick([DT.FLOAT, NOT_SET, DT.HALF])
        compute = self.pick([DT.FLOAT, NOT_SET])
        self.g = cudnn.pygraph(io_data_type=self.io, intermediate_data_type=inter, compute_data_type=compute)
        self.pool: list[Src] = []
        self.outputs: list[Any] = []  # tensors to mark as graph outputs at the end
        self.explicit_names: list[str] = []
        self.must_refuse_call: str | None = None
        self.must_refuse: list[str] = []

    # -- draws ------------------------------------------------------------------------------

    def draw(self, strategy: st.SearchStrategy[Any], label: str | None = None) -> Any:
        return self.data.draw(strategy, label=label)

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def pick(self, seq: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(tuple(seq)))

    def coin(self, pct: int = 50) -> bool:
        return self.draw(st.integers(0, 99)) >= 100 - pct

    def fault(self, pct: int, what: str) -> bool:
        """In a faulty graph, inject the fault ``what`` with probability 4 * ``pct`` % (shrinks
        towards no fault); a clean graph draws nothing here."""
        if self.faulty and self.draw(st.integers(0, 999)) >= 1000 - 40 * pct:
            self.faults.append(what)
            event(f"fault: {what}")
            return True
        return False

    def bad_value(self) -> Any:
        return self.pick(BAD_VALUES + (None,))

    def node_name(self, op: str) -> str:
        if self.coin(10):
            return ""  # the graph names it by its index
        self.n += 1
        return f"{op}_{self.n}"

    # -- tensors ----------------------------------------------------------------------------

    def dtype(self, wanted: Sequence[Any] = FLOATS) -> Any:
        """A data type for a new tensor: one of ``wanted``, or NOT_SET (the io type) where that is one."""
        if self.fault(2, "odd data type"):
            return self.pick(ODD_TYPES)
        if self.io in wanted and self.coin(30):
            return NOT_SET
        if self.io == NOT_SET and self.fault(1, "no data type and no io_data_type"):
            return NOT_SET
        return self.pick(wanted)

    def strides(self, dims: list[int], last_unit: bool = False) -> list[int] | None:
        """A layout: default (row-major), packed in a random dim order, or padded rows."""
        rank = len(dims)
        if self.fault(1, "strides of the wrong length"):
            return [1] * (rank + self.pick([-1, 1])) if rank > 1 else [1, 1]
        if self.fault(1, "negative stride"):
            s = _row_major(dims)
            s[self.int(0, rank - 1)] = -1
            return s
        style = self.pick(["default", "order", "padded"])
        if style == "default" or rank == 0:
            return None
        if style == "order":
            order = self.draw(st.permutations(list(range(rank))))  # fastest first
            if last_unit:
                order = [rank - 1] + [i for i in order if i != rank - 1]
            return _packed(dims, order)
        s = _row_major(dims)  # padded: each row holds a few elements more than it uses
        acc = max(dims[-1], 1) + self.int(1, 3)
        for i in range(rank - 2, -1, -1):
            s[i] = acc
            acc *= max(dims[i], 1)
        return s

    def tensor(self, dims: Sequence[int], wanted: Sequence[Any] = FLOATS, dtype: Any = None,
               last_unit: bool = False, bad_dims: bool = True) -> Any:
        dims = [int(d) for d in dims]
        if bad_dims and dims and self.fault(2, "zero or negative dim"):
            i = self.int(0, len(dims) - 1)
            dims[i] = self.pick([0, -1, -dims[i]])
        strides = self.strides(dims, last_unit)
        name = ""
        if self.explicit_names and self.fault(2, "duplicate tensor name"):
            name = self.pick(self.explicit_names)
        elif self.coin(60):
            name = f"t{len(self.explicit_names)}_{self.n}"
            self.explicit_names.append(name)
        dt = self.dtype(wanted) if dtype is None else dtype
        return self.g.tensor(dim=dims, stride=strides, data_type=dt, name=name)

    def foreign(self, dims: Sequence[int]) -> Any:
        """The output of a node of another graph (must be refused as an input here)."""
        other = cudnn.pygraph(io_data_type=DT.HALF)
        x = other.tensor(dim=list(dims), data_type=DT.HALF, name="foreign_x")
        return other.identity(x, name="foreign_node")

    def take(self, pred: Callable[[Src], bool]) -> Src | None:
        """An unconsumed pool tensor satisfying ``pred`` (chaining), or None."""
        choices = [s for s in self.pool if pred(s)]
        if not choices or not self.coin(70):
            return None
        src = self.pick(choices)
        self.pool.remove(src)
        return src

    def maybe_foreign(self, t: Any, dims: Sequence[int]) -> Any:
        if self.fault(1, "another graph's tensor"):
            self.must_refuse_call = "another graph's output"
            return self.foreign(dims)
        return t

    # -- calls ------------------------------------------------------------------------------

    def call(self, method: str, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call an op; a refusal must be clean and name the node (then Refused)."""
        node = name or str(len(self.g.nodes))
        must, self.must_refuse_call = self.must_refuse_call, None
        before = list(self.g.nodes)
        try:
            out = getattr(self.g, method)(*args, name=name, **kwargs)
        except ALLOWED as exc:
            check_message(exc, [node], f"{method}() call")
            assert self.g.nodes == before, f"the refused {method}() call left its node in the graph"
            OUTCOMES[f"refused:{type(exc).__name__}@call"] += 1
            event(f"refused at the call: {type(exc).__name__}")
            raise Refused from exc
        assert must is None, f"{method} {node!r} accepted {must}"
        return out

    def produced(self, t: Any, dims: list[int], main: bool = True) -> None:
        """Register an output: the main one may be consumed later, others become graph outputs."""
        if main:
            self.pool.append(Src(t, list(dims)))
        else:
            self.outputs.append(t)


def _row_major(dims: Sequence[int]) -> list[int]:
    out, acc = [0] * len(dims), 1
    for i in range(len(dims) - 1, -1, -1):
        out[i] = acc
        acc *= max(int(dims[i]), 1)
    return out


def _packed(dims: Sequence[int], order: Sequence[int]) -> list[int]:
    out, acc = [0] * len(dims), 1
    for i in order:
        out[i] = acc
        acc *= max(int(dims[i]), 1)
    return out


def check_message(exc: BaseException, names: Sequence[str], where: str) -> None:
    msg = str(exc)
    assert any(repr(n) in msg for n in names), (
        f"{where}: {type(exc).__name__} does not name the node (one of {names}): {msg!r}")


# -- families ------------------------------------------------------------------------------------

def conv(c: Case, src: Src | None = None) -> None:
    kind = "conv_fprop" if src is not None else c.pick(["conv_fprop", "conv_dgrad", "conv_wgrad"])
    nsp = len(src.dims) - 2 if src is not None else c.pick([2, 2, 3])
    if src is None and c.fault(2, "convolution rank"):
        nsp = c.pick([0, 1, 4])
    groups = c.int(1, 3)
    if src is not None:
        n, ch = src.dims[0], src.dims[1]
        divisors = [g for g in range(1, 4) if ch % g == 0]
        groups = c.pick(divisors)
        cpg = ch // groups
    else:
        n, cpg = c.int(1, 3), c.int(1, 4)
        ch = groups * cpg
    kpg = c.int(1, 3)
    k_out = groups * kpg
    if groups > 1 and c.fault(3, "output channels not a multiple of the groups"):
        k_out += 1
    ks = [c.int(1, 3) for _ in range(nsp)]
    pre = [c.int(0, 2) for _ in range(nsp)]
    post = [c.int(0, 2) for _ in range(nsp)]
    stride = [c.int(1, 3) for _ in range(nsp)]
    dil = [c.int(1, 2) for _ in range(nsp)]
    style = c.pick(["none", "padding", "pre_post"])
    if style == "none":
        pre = post = [0] * nsp
    elif style == "padding":
        post = pre
    if c.coin(30):
        stride = [1] * nsp
    spans = [d * (k - 1) + 1 for d, k in zip(dil, ks)]
    if src is not None:
        x_sp = src.dims[2:]
        if any(x + a + b < s for x, a, b, s in zip(x_sp, pre, post, spans)):  # filter too big: shrink it
            ks, dil = [1] * nsp, [1] * nsp
            spans = [1] * nsp
    else:
        x_sp = [max(1, s - a - b + c.int(0, 4)) for s, a, b in zip(spans, pre, post)]
        if c.fault(2, "filter larger than the padded image"):
            x_sp = [max(1, s - a - b - 1) for s, a, b in zip(spans, pre, post)] or [1]
    out_sp = [(x + a + b - s) // st_ + 1 for x, a, b, s, st_ in zip(x_sp, pre, post, spans, stride)]
    x_dims, w_dims, y_dims = [n, ch, *x_sp], [k_out, cpg, *ks], [n, k_out, *out_sp]
    if c.fault(2, "filter channels do not divide the image's"):
        w_dims[1] = cpg + 1 if cpg > 1 or ch == 1 else ch + 1
    kw: dict[str, Any] = {}
    if style == "padding" or (style == "none" and c.coin(30)):
        kw["padding"] = pre
    elif style == "pre_post":
        kw["pre_padding"], kw["post_padding"] = pre, post
    if stride != [1] * nsp or c.coin(50):
        kw["stride"] = stride
    if dil != [1] * nsp or c.coin(50):
        kw["dilation"] = dil
    for arg in ("padding", "stride", "dilation"):
        if c.fault(1, f"bad {arg}"):
            kw[arg] = c.pick([c.bad_value(), [-1] * nsp, [0] * nsp, [1] * (nsp + 1), 3])
    if "padding" in kw and c.fault(1, "padding with pre_padding"):
        kw["pre_padding"] = pre
    if c.fault(1, "bad convolution_mode"):
        kw["convolution_mode"] = c.pick(["SIDEWAYS", 7, None])
    elif c.coin(20):
        kw["convolution_mode"] = c.pick([cudnn.convolution_mode.CONVOLUTION, "CROSS_CORRELATION"])
    if c.fault(1, "bad compute_data_type"):
        kw["compute_data_type"] = c.pick(["float", 3.5, object()])
    elif c.coin(30):
        kw["compute_data_type"] = c.pick([DT.FLOAT, DT.HALF])
    name = c.node_name(kind)

    def number_or_none(port: str) -> Any:
        if c.fault(1, f"{kind} {port} is a Python number"):
            c.must_refuse.append(f"a Python number as {kind}'s {port}")
            return 3
        if c.fault(1, f"{kind} {port} is None"):
            return None
        if c.fault(1, f"{kind} {port} has a wrong type"):
            return c.pick(BAD_VALUES)
        return ...

    if kind == "conv_fprop":
        x = src.t if src is not None else c.tensor(x_dims)
        x = c.maybe_foreign(x, x_dims)
        w = number_or_none("weight")
        w = c.tensor(w_dims) if w is ... else w
        y = c.call("conv_fprop", name, x, w, **kw)
        c.produced(y, y_dims)
    elif kind == "conv_dgrad":
        dy = c.maybe_foreign(c.tensor(y_dims), y_dims)
        w = number_or_none("filter")
        w = c.tensor(w_dims) if w is ... else w
        dx = c.call("conv_dgrad", name, dy, w, **kw)
        if stride != [1] * nsp and c.fault(3, "strided dgrad without DX dims"):
            c.must_refuse.append("a strided dgrad without DX dims")
            dims = x_dims
        elif stride != [1] * nsp or groups > 1 or c.coin(30):
            dx.set_dim(x_dims)
            dims = x_dims
        else:
            dims = [n, cpg, *x_sp]
        c.produced(dx, dims)
    else:
        x = c.tensor(x_dims)
        dy = number_or_none("loss")
        dy = c.maybe_foreign(c.tensor(y_dims), y_dims) if dy is ... else dy
        dw = c.call("conv_wgrad", name, x, dy, **kw)
        if stride != [1] * nsp or groups > 1 or c.coin(30):
            dw.set_dim(w_dims)
            dims = w_dims
        else:
            dims = [k_out, ch, *ks]
        c.produced(dw, dims)


def matmul(c: Case, src: Src | None = None) -> None:
    if src is not None:
        a_dims = list(src.dims)
        rank = len(a_dims)
    else:
        rank = c.int(2, 5)
        if c.fault(2, "matmul rank < 2"):
            rank = 1
        a_dims = [c.int(1, 6) for _ in range(rank)]
    b_dims = []
    for i in range(rank - 2):
        a = a_dims[i]
        pattern = c.pick(["same", "one", "group"])
        b_dims.append(a if pattern == "same" else 1 if pattern == "one" else
                      c.pick([d for d in range(1, a + 1) if a % d == 0]))
    k = a_dims[-1]
    b_dims += [k, c.int(1, 6)] if rank >= 2 else [k]
    if src is None and c.coin(20):  # A broadcast over B's batch dims
        for i in range(rank - 2):
            if b_dims[i] == a_dims[i] and c.coin(30):
                a_dims[i], b_dims[i] = 1, c.int(1, 4)
    if rank >= 2 and c.fault(2, "matmul K mismatch"):
        b_dims[-2] = k + 1
    if rank > 2 and c.fault(2, "matmul batch dims do not broadcast"):
        if src is None and a_dims[0] < 2:
            a_dims[0] = 3
        b_dims[0] = a_dims[0] + 1
    if c.fault(1, "matmul ranks differ"):
        b_dims = b_dims[1:] if len(b_dims) > 2 else [1] + b_dims
    a = src.t if src is not None else c.tensor(a_dims)
    a = c.maybe_foreign(a, a_dims)
    if c.fault(1, "matmul B is a Python number"):
        c.must_refuse.append("a Python number as matmul's B")
        b = 2.0
    elif c.fault(1, "matmul B is None or of a wrong type"):
        b = c.bad_value()
    else:
        b = c.tensor(b_dims)
    kw: dict[str, Any] = {}
    if c.coin(20):
        kw["padding"] = c.pick([0.0, 1.5, -3, float("inf"), float("nan")])
    if c.fault(1, "bad matmul padding"):
        kw["padding"] = c.pick(["zero", [1.0], object()])
    if c.coin(20):
        kw["compute_data_type"] = c.pick([DT.FLOAT, DT.INT32])
    out = c.call("matmul", c.node_name("matmul"), a, b, **kw)
    batch = [max(x, y) for x, y in zip(a_dims[:-2], b_dims[:-2])]
    c.produced(out, batch + [a_dims[-2], b_dims[-1]] if rank >= 2 else [])


POINTWISE = sorted(TABLE)


def pointwise(c: Case, src: Src | None = None) -> None:
    spec = TABLE[c.pick(POINTWISE)]
    if src is not None:
        shape = list(src.dims)
    else:
        shape = [c.int(1, 5) for _ in range(c.int(1, 5))]
    rank = len(shape)
    args: dict[str, Any] = {}
    tensors_given = 0
    for i, port in enumerate(spec.tensors):
        if i == 0 and src is not None:
            args[port] = c.maybe_foreign(src.t, shape)
            tensors_given += 1
            continue
        if len(spec.tensors) > 1 and c.coin(15):
            args[port] = c.pick([0.5, 2, -1.25, 3.0])
            continue
        dims = [d if c.coin(70) else 1 for d in shape]
        if c.fault(2, "pointwise dims do not broadcast"):
            big = [j for j, d in enumerate(shape) if d > 1]
            j = c.pick(big) if big else 0
            dims[j] = shape[j] + 1
        if c.fault(1, "pointwise ranks differ"):
            dims = dims + [1] if c.coin() or rank == 1 else dims[1:]
        if c.fault(1, f"pointwise {port} is None or of a wrong type"):
            args[port] = c.bad_value()
            continue
        t = c.tensor(dims, wanted=FLOATS + ((DT.BOOLEAN,) if "logical" in spec.method else ()))
        args[port] = c.maybe_foreign(t, dims) if i == 0 else t
        tensors_given += 1
    if tensors_given == 0:
        c.faults.append("pointwise with only Python numbers")
    # an input's dims may all be 1 where the output is wider: only inputs decide the output
    given_dims = [t.get_dim() for t in args.values() if isinstance(t, cudnn.tensor)]
    out_dims = [max(ds) for ds in zip(*given_dims)] if given_dims and len({len(d) for d in given_dims}) == 1 \
        else shape
    for attr, default in spec.attrs + spec.keyword_attrs:
        if attr == "axis":
            value = c.int(0, max(rank - 1, 0))
            if c.fault(2, "gen_index axis out of range"):
                value = c.pick([rank, -1, 99])
            elif c.fault(1, "gen_index axis of a wrong type"):
                value = c.pick([1.0, "0", True])
            args[attr] = value
            continue
        if default is REQUIRED or c.coin(40):
            args[attr] = c.pick([0.0, 0.01, 1.0, -2.5, 6, 1e30])
        if c.fault(1, f"pointwise {attr} of a wrong type"):
            args[attr] = c.pick(["slope", [0.1], object()])
    if c.coin(30):
        args["compute_data_type"] = c.pick([DT.FLOAT, DT.HALF, DT.DOUBLE])
    if c.fault(1, "bad compute_data_type"):
        args["compute_data_type"] = c.pick(["FLOATY", 1.5])
    out = c.call(spec.method, c.node_name(spec.method), **args)
    c.produced(out, out_dims)


REDUCTION_MODES = [m for m in cudnn.reduction_mode if m != cudnn.reduction_mode.NOT_SET]


def reduce_reshape(c: Case, src: Src | None = None) -> None:
    kind = c.pick(["reduction", "reduction", "reshape", "transpose", "slice", "concatenate", "genstats"])
    if src is not None:
        x_dims = list(src.dims)
    else:
        x_dims = [c.int(1, 6) for _ in range(c.int(1, 5))]
    rank = len(x_dims)
    x = src.t if src is not None else c.tensor(x_dims)
    x = c.maybe_foreign(x, x_dims)
    name = c.node_name(kind)
    if kind == "reduction":
        y_dims = [c.pick([d, 1] + [q for q in range(2, d) if d % q == 0]) for d in x_dims]
        mode = c.pick(REDUCTION_MODES + ["ADD", "AMAX"])
        if c.fault(1, "bad reduction mode"):
            mode = c.pick([cudnn.reduction_mode.NOT_SET, "SUMMIT", 3, None])
        if c.fault(2, "reduction output dims do not divide X"):
            j = c.int(0, rank - 1)
            y_dims[j] = x_dims[j] + 1
        if c.fault(1, "reduction output rank differs"):
            y_dims = y_dims + [1]
        y = c.call("reduction", name, x, mode, is_deterministic=c.coin(20))
        if y_dims != x_dims or c.coin(30):
            y.set_dim(y_dims)
        c.produced(y, y_dims)
    elif kind == "reshape":
        count = math.prod(x_dims)
        new = [1] * c.int(1, 5)
        for p in _factors(count):
            new[c.int(0, len(new) - 1)] *= p
        if c.fault(2, "reshape changes the element count"):
            new[0] += 1
        y = c.call("reshape", name, x)
        if c.fault(2, "reshape without output dims"):
            c.must_refuse.append("a reshape without output dims")
        else:
            y.set_dim(new)
        c.produced(y, new)
    elif kind == "transpose":
        perm = c.draw(st.permutations(list(range(rank))))
        if c.fault(2, "not a permutation"):
            perm = c.pick([list(perm) + [0], [0] * rank, None, "01"])
        y = c.call("transpose", name, x, perm)
        valid = isinstance(perm, list) and sorted(perm) == list(range(rank))
        c.produced(y, [x_dims[p] for p in perm] if valid else x_dims)
    elif kind == "slice":
        slices = []
        for d in x_dims[: c.int(0, rank)]:
            start = c.int(0, d - 1)
            stop = c.int(start + 1, d)
            slices.append(slice(start, stop, c.pick([None, 1, 2])))
        if c.fault(2, "bad slice"):
            too_many = slices + [slice(0, 1)] * (rank + 1 - len(slices))
            slices = c.pick([too_many, [slice(0, 1, 0)], [slice(2, 1)], None, [3], [slice(0, 1, -1)]])
        y = c.call("slice", name, x, slices)
        dims = list(x_dims)
        if isinstance(slices, list) and all(isinstance(s, slice) for s in slices) and len(slices) <= rank:
            try:
                dims = [len(range(*s.indices(d))) for s, d in zip(slices, x_dims)] + x_dims[len(slices):]
            except ValueError:
                pass
        c.produced(y, dims)
    elif kind == "concatenate":
        axis = c.int(0, rank - 1)
        parts, total = [x], x_dims[axis]
        for _ in range(c.int(0, 2)):
            dims = list(x_dims)
            dims[axis] = c.int(1, 4)
            if c.fault(2, "concatenate dims differ off the axis"):
                j = c.int(0, rank - 1)
                dims[j] += 1
            total += dims[axis]
            parts.append(c.tensor(dims))
        if c.fault(1, "concatenate axis out of range"):
            axis = c.pick([rank, -1])
        y = c.call("concatenate", name, parts, axis)
        dims = list(x_dims)
        if 0 <= axis < rank:
            dims[axis] = total
        c.produced(y, dims)
    else:
        if rank < 2:
            c.faults.append("genstats of rank < 2")
        s, sq = c.call("genstats", name, x)
        ch = x_dims[1] if rank >= 2 else 1
        dims = [1, ch] + [1] * (rank - 2)
        c.produced(s, dims)
        c.produced(sq, dims, main=False)


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


NORMS = ["layernorm", "rmsnorm", "instancenorm", "batchnorm", "batchnorm_inference", "adalayernorm",
         "layernorm_backward", "rmsnorm_backward", "instancenorm_backward", "batchnorm_backward",
         "adalayernorm_backward"]
LAYOUT = {"layernorm": "feature", "rmsnorm": "feature", "adalayernorm": "sample", "instancenorm": "instance",
          "batchnorm": "batch", "batchnorm_inference": "batch"}


def norm(c: Case, src: Src | None = None) -> None:
    op = c.pick(NORMS)
    base = op.replace("_backward", "")
    layout = LAYOUT[base]
    if src is not None:
        x_dims = list(src.dims)
        if x_dims[-1] < 2 and layout in ("feature", "sample"):
            x_dims = None  # type: ignore[assignment]
    else:
        x_dims = None  # type: ignore[assignment]
    if x_dims is None:
        if src is not None:
            c.pool.append(src)  # not a fit after all: it stays a graph output
        src = None
        rank = c.int(2, 5) if layout in ("feature", "sample") else c.int(3, 5)
        x_dims = [c.int(1, 4) for _ in range(rank)]
        x_dims[-1] = c.int(2, 8)
        x_dims[1] = max(x_dims[1], 2)
    rank = len(x_dims)
    if layout in ("feature", "sample"):
        k = c.int(1, rank - 1)
        while math.prod(x_dims[k:]) < 2:
            k -= 1
        s_dims = [1] * k + x_dims[k:]
        if layout == "sample" and c.coin():
            s_dims[0] = x_dims[0]
        stats = [d if s == 1 else 1 for d, s in zip(x_dims, s_dims)]
        if layout == "sample":
            stats[0] = x_dims[0]
    else:
        s_dims = [1, x_dims[1]] + [1] * (rank - 2)
        stats = [x_dims[0], x_dims[1]] + [1] * (rank - 2) if layout == "instance" else list(s_dims)
    if c.fault(2, "norm SCALE does not fit X"):
        s_dims = c.pick([s_dims[1:] or [2], [d + 1 for d in s_dims], [x_dims[0] + 1] + s_dims[1:]])
    if c.fault(2, "norm statistics of the wrong dims"):
        stats = [d + 1 for d in stats]
    x = src.t if src is not None else c.tensor(x_dims)
    x = c.maybe_foreign(x, x_dims)
    name = c.node_name(op)

    def eps() -> Any:
        if c.fault(1, "bad epsilon"):
            return c.pick(["tiny", None, [1e-5]])
        if c.fault(1, "epsilon not a scalar"):
            return c.tensor([2] * rank, dtype=DT.FLOAT)
        if c.coin(20):
            t = c.tensor([1] * rank, dtype=DT.FLOAT, bad_dims=False)
            t.set_is_pass_by_value(True)
            return t
        return c.pick([1e-5, 1e-3, 0.0])

    scale = c.tensor(s_dims)
    zc = c.coin(20) if base in ("layernorm", "rmsnorm", "adalayernorm") else False
    kw: dict[str, Any] = {}
    if zc:
        kw["zero_centered_gamma"] = True
        if c.fault(1, "zero_centered_gamma not a bool"):
            kw["zero_centered_gamma"] = "yes"
    if c.coin(20):
        kw["compute_data_type"] = DT.FLOAT
    if op in ("layernorm", "rmsnorm", "instancenorm", "adalayernorm"):
        phase = c.pick([cudnn.norm_forward_phase.TRAINING, cudnn.norm_forward_phase.INFERENCE, "TRAINING"])
        if c.fault(1, "bad norm phase"):
            phase = c.pick(["LEARNING", 3, None, cudnn.norm_forward_phase.NOT_SET])
        training = getattr(phase, "name", phase) == "TRAINING"
        optional_bias = op in ("rmsnorm", "adalayernorm")
        bias = None if optional_bias and c.coin() else c.tensor(s_dims)
        if not optional_bias and c.fault(1, "norm bias None"):
            bias = None
        outs = c.call(op, name, phase, x, scale, bias, eps(), **kw)
        c.produced(outs[0], x_dims)
        for t in outs[1:]:
            if t is not None:
                c.produced(t, stats, main=False)
        if training and c.fault(1, "norm statistics never used nor marked"):
            c.must_refuse.append("an unused statistics output")
            c.outputs = [t for t in c.outputs if t is not outs[1]]
    elif op == "batchnorm":
        running = c.coin()
        args: list[Any] = [x, scale, c.tensor(s_dims)]
        if running:
            args += [c.tensor(stats, wanted=(DT.FLOAT,)), c.tensor(stats, wanted=(DT.FLOAT,)), eps(), 0.1]
        else:
            args += [None, None, eps(), None]
        if c.fault(1, "half of the running statistics"):
            args[3] = None if running else c.tensor(stats)
        outs = c.call("batchnorm", name, *args, **kw)
        c.produced(outs[0], x_dims)
        for t in outs[1:]:
            if t is not None:
                c.produced(t, stats, main=False)
    elif op == "batchnorm_inference":
        stat = [c.tensor(stats, wanted=(DT.FLOAT,)) for _ in range(2)]
        y = c.call("batchnorm_inference", name, x, stat[0], stat[1], scale, c.tensor(s_dims), **kw)
        c.produced(y, x_dims)
    else:
        dy = c.tensor(x_dims)
        if c.fault(1, "norm grad of another shape"):
            dy = c.tensor([d + 1 for d in x_dims])
        mean = c.tensor(stats, wanted=(DT.FLOAT,))
        inv = c.tensor(stats, wanted=(DT.FLOAT,))
        if op == "rmsnorm_backward":
            has_dbias = c.coin()
            if c.fault(1, "has_dbias not a bool"):
                has_dbias = "no"
            outs = c.call(op, name, dy, x, scale, inv, has_dbias, **kw)
        elif op == "instancenorm_backward":
            if c.coin(30):
                outs = c.call(op, name, dy, x, scale, epsilon=eps(), **kw)
            else:
                outs = c.call(op, name, dy, x, scale, mean, inv, **kw)
        elif op == "batchnorm_backward":
            outs = c.call(op, name, dy, x, scale, mean, inv, **kw)
        else:
            outs = c.call(op, name, dy, x, scale, mean, inv, **kw)
        c.produced(outs[0], x_dims)
        for t in outs[1:]:
            if t is not None:
                c.produced(t, s_dims, main=False)


def sdpa(c: Case, src: Src | None = None) -> None:
    backward = c.coin(35)
    op = "sdpa_backward" if backward else "sdpa"
    b, h_k = c.int(1, 2), c.int(1, 2)
    h_q = h_k * c.int(1, 3)
    h_v = c.pick([h for h in (1, h_k, h_q) if h_q % h == 0])
    s_q, s_kv = c.int(1, 9), c.int(1, 9)
    if backward and s_q == 1 and s_kv == 1:
        s_kv = 2
    d_qk, d_v = c.pick([8, 16, 64, 128]), c.pick([8, 16, 64])
    dt = c.pick([DT.HALF, DT.BFLOAT16])
    if c.fault(2, "attention head dim not a multiple of 8"):
        d_qk += c.pick([1, 4])
    if c.fault(2, "attention h_q not a multiple of h_k"):
        h_k, h_q = 2, 3
    if c.fault(2, "attention data type"):
        dt = c.pick([DT.FLOAT, DT.INT8])
    q_dims, k_dims, v_dims = [b, h_q, s_q, d_qk], [b, h_k, s_kv, d_qk], [b, h_v, s_kv, d_v]
    if c.fault(2, "attention K/V batch or sequence mismatch"):
        k_dims = [b + 1, h_k, s_kv, d_qk] if c.coin() else k_dims
        v_dims = [b, h_v, s_kv + 1, d_v] if k_dims[0] == b else v_dims
    if c.fault(1, "attention rank"):
        q_dims = q_dims[1:]

    def qkv(dims: list[int]) -> Any:
        return c.tensor(dims, wanted=(dt,), dtype=dt if c.io not in (dt,) or c.coin() else NOT_SET,
                        last_unit=True)

    q, k, v = qkv(q_dims), qkv(k_dims), qkv(v_dims)
    if c.fault(1, "attention Q, K, V of different data types"):
        v = c.tensor(v_dims, dtype=DT.BFLOAT16 if dt == DT.HALF else DT.HALF, last_unit=True)
    q = c.maybe_foreign(q, q_dims)
    name = c.node_name(op)
    kw: dict[str, Any] = {}
    if c.coin(40):
        kw["attn_scale"] = c.pick([0.125, 1, "tensor"])
        if kw["attn_scale"] == "tensor":
            t = c.tensor([1, 1, 1, 1], dtype=DT.FLOAT, bad_dims=False)
            kw["attn_scale"] = t.set_is_pass_by_value(True)
    full = [b, h_q, s_q, s_kv]
    if c.coin(25):
        # SdpaBase.check_common refuses a bias whose last dim has a stride other than 1
        kw["bias"] = c.tensor([d if c.coin(60) else 1 for d in full], wanted=(dt,), last_unit=True)
        if c.fault(2, "attention bias does not broadcast"):
            kw["bias"] = c.tensor([d + 1 for d in full], wanted=(dt,), last_unit=True)
        if backward and c.coin(30):
            kw["dBias"] = c.g.tensor(dim=kw["bias"].get_dim(), stride=kw["bias"].get_stride(), data_type=dt,
                                     name=f"{name or 'x'}_dbias")
    padding = c.coin(20)
    if padding:
        kw["use_padding_mask"] = True
        kw["seq_len_q"] = c.tensor([b, 1, 1, 1], dtype=DT.INT32, bad_dims=False)
        kw["seq_len_kv"] = c.tensor([b, 1, 1, 1], dtype=DT.INT32, bad_dims=False)
        if c.fault(2, "sequence lengths of the wrong type"):
            kw["seq_len_q"] = c.tensor([b, 1, 1, 1], dtype=DT.FLOAT, bad_dims=False)
    # BOTTOM_RIGHT masks take no bias, ALiBi or dropout; band masks need s_q <= s_kv without padding
    mask = c.pick(["none", "causal", "causal_br", "window", "band"] if "bias" not in kw else
                  ["none", "causal", "window", "band"])
    if mask in ("causal_br", "window", "band") and s_q > s_kv and not padding:
        c.faults.append("s_q > s_kv with a band mask and no padding mask")
    if mask == "causal":
        kw["use_causal_mask"] = True
    elif mask == "causal_br":
        kw["use_causal_mask_bottom_right"] = True
    elif mask == "window":
        kw["use_causal_mask"] = True
        kw["sliding_window_length"] = c.int(1, 4)
    elif mask == "band":
        kw["diagonal_band_left_bound"] = c.int(1, 4)
        kw["diagonal_band_right_bound"] = c.int(0, 3)
    if c.fault(1, "both causal flags"):
        kw["use_causal_mask"] = kw["use_causal_mask_bottom_right"] = True
    if mask in ("causal", "window") and "bias" not in kw and c.coin(20):
        kw["use_alibi_mask"] = True
    if c.fault(1, "ALiBi without a causal mask"):
        kw["use_alibi_mask"] = True
        kw.pop("use_causal_mask", None)
        kw.pop("sliding_window_length", None)
    if c.coin(15) and mask != "causal_br":
        seed = c.tensor([1, 1, 1, 1], dtype=DT.INT64, bad_dims=False)
        offset = c.tensor([1, 1, 1, 1], dtype=DT.INT64, bad_dims=False)
        kw["dropout"] = (c.pick([0.0, 0.1, 0.5]), seed, offset)
        if c.fault(1, "dropout probability out of range"):
            kw["dropout"] = (c.pick([1.0, -0.1, "half"]), seed, offset)
        if c.fault(1, "dropout tuple of a wrong length"):
            kw["dropout"] = kw["dropout"][:1]
    if c.fault(1, "score_mod not callable"):
        kw["score_mod"] = 3
    if c.coin(20):
        kw["compute_data_type"] = DT.FLOAT
    if not backward:
        if c.coin():
            kw["is_inference"] = c.coin()
        else:
            kw["generate_stats"] = c.coin()
        if c.fault(1, "is_inference and generate_stats both or neither"):
            kw["is_inference"] = kw["generate_stats"] = None if c.coin() else True
        if c.coin(20):
            kw["implementation"] = c.pick([cudnn.attention_implementation.COMPOSITE,
                                           cudnn.attention_implementation.AUTO])
        if c.fault(1, "attention user output of a wrong type"):
            kw[c.pick(["score_max", "score_sum_exp", "rng_dump"])] = c.pick(["max", 3, [1]])
        o, stats = c.call("sdpa", name, q, k, v, **kw)
        c.produced(o, [b, h_q, s_q, d_v])
        if stats is not None:
            c.produced(stats, [b, h_q, s_q, 1], main=False)
        return
    o = c.tensor([b, h_q, s_q, d_v], wanted=(dt,), dtype=dt, last_unit=True)
    d_o = c.tensor([b, h_q, s_q, d_v], wanted=(dt,), dtype=dt, last_unit=True)
    stats = c.tensor([b, h_q, s_q, 1], dtype=DT.FLOAT)
    if c.fault(1, "attention stats of a wrong type"):
        stats = c.tensor([b, h_q, s_q, 1], dtype=dt)
    if c.coin(20):
        kw["use_deterministic_algorithm"] = True
    dq, dk, dv = c.call("sdpa_backward", name, q, k, v, o, d_o, stats, **kw)
    c.produced(dq, q_dims)
    c.produced(dk, k_dims, main=False)
    c.produced(dv, v_dims, main=False)
    if "dBias" in kw:
        c.outputs.append(kw["dBias"])


FAMILIES: dict[str, Callable[[Case, Src | None], None]] = {
    "conv": conv, "matmul": matmul, "pointwise": pointwise, "reduce_reshape": reduce_reshape, "norm": norm,
    "sdpa": sdpa,
}

# Which families may consume a pool tensor of these dims.
CONSUMERS: dict[str, Callable[[list[int]], bool]] = {
    "pointwise": lambda d: len(d) >= 1,
    "reduce_reshape": lambda d: len(d) >= 1,
    "matmul": lambda d: len(d) >= 2,
    "conv": lambda d: len(d) in (4, 5),
    "norm": lambda d: len(d) >= 2,
}


# -- the oracle ----------------------------------------------------------------------------------

def run_case(c: Case, first: str) -> None:
    """Build a chain starting with ``first``, then validate, print and check."""
    try:
        FAMILIES[first](c, None)
        for _ in range(c.int(0, 2)):
            family = c.pick(sorted(CONSUMERS))
            src = c.take(lambda s, f=family: all(d > 0 for d in s.dims) and CONSUMERS[f](s.dims))
            if src is None:
                break
            FAMILIES[family](c, src)
    except Refused:
        OUTCOMES.update(["graphs", "faulty"])
        assert c.faults, "a graph built without faults was refused at the call"
        print_parses(c.g)
        return
    for s in c.pool:
        c.outputs.append(s.t)
    for t in c.outputs:
        t.set_output(True)
    OUTCOMES["graphs"] += 1
    if c.faults:
        OUTCOMES["faulty"] += 1
    expected_refusals = c.must_refuse + required_refusals(c.g)
    try:
        c.g.validate()
    except ALLOWED as exc:
        check_message(exc, [n.name for n in c.g.nodes], "validate()")
        OUTCOMES[f"refused:{type(exc).__name__}@validate"] += 1
        event(f"refused at validate: {type(exc).__name__}")
        assert c.faults, f"a graph built without faults was refused: {exc}"
        print_parses(c.g)
        return
    assert not expected_refusals, f"validate() accepted {expected_refusals}"
    OUTCOMES["valid"] += 1
    event("valid")
    check_valid(c.g)


def required_refusals(g: Any) -> list[str]:
    """Refusals the graph rules require, read from the built graph."""
    out = []  # two tensors of one name are fine, as in the official
    consumed = {id(t) for n in g.nodes for t in n.inputs.values()}
    for n in g.nodes:
        for t in n.outputs.values():
            if t.get_is_virtual() and id(t) not in consumed:
                out.append(f"{n.name}'s unused virtual output")
    return out


def all_tensors(g: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for n in g.nodes:
        for t in (*n.inputs.values(), *n.outputs.values()):
            seen.setdefault(id(t), t)
    return list(seen.values())


def print_parses(g: Any) -> dict[str, Any]:
    text = str(g)
    doc = json.loads(text)
    assert isinstance(doc, dict) and isinstance(doc["nodes"], list) and isinstance(doc["tensors"], dict)
    return doc


def check_valid(g: Any) -> None:
    doc = print_parses(g)
    tensors = all_tensors(g)
    assert len(doc["tensors"]) == len(tensors), "the printed JSON lost a tensor"
    for t in tensors:
        dims, strides = t.get_dim(), t.get_stride()
        assert dims and all(d > 0 for d in dims), f"tensor {t.get_name()!r}: dims {dims}"
        assert len(strides) == len(dims) and min(strides) >= 0, f"{t.get_name()!r}: strides {strides}"
        assert t.get_data_type() != NOT_SET, f"tensor {t.get_name()!r} has no data type"

    def entry_of(key: str, t: Any) -> None:  # a second tensor of one name is keyed "name#2"
        assert key == t.get_name() or key.startswith(t.get_name() + "#"), (key, t.get_name())
        entry = doc["tensors"][key]
        assert (entry["name"], entry["dim"], entry["stride"], entry["data_type"]) == (
            t.get_name(), t.get_dim(), t.get_stride(), t.get_data_type().name)

    for n, jn in zip(g.nodes, doc["nodes"]):
        assert jn["name"] == n.name
        for port, t in n.inputs.items():
            entry_of(jn["inputs"][port], t)
        for port, t in n.outputs.items():
            entry_of(jn["outputs"][port], t)
            if port != "dBias":  # every output but the user's dBias has inferred strides: no element twice
                # (packed, or the layout of an input view it takes, as the official infers)
                assert _non_overlapping(t.get_dim(), t.get_stride()), (n.name, port, t.get_dim(), t.get_stride())
        RULES.get(n.tag, lambda n, j: None)(n, jn)
    before = str(g)
    g.validate()  # validating again changes nothing
    assert str(g) == before
    assert isinstance(g.key(), int)


def _dims(n: Any, port: str) -> list[int]:
    return n.inputs[port].get_dim() if port in n.inputs else n.outputs[port].get_dim()


def _is_packed(dims: list[int], strides: list[int]) -> bool:
    acc = 1
    for i in sorted(range(len(dims)), key=lambda i: (strides[i], -i)):
        if dims[i] == 1:
            continue
        if strides[i] != acc:
            return False
        acc *= dims[i]
    return True


def _non_overlapping(dims: list[int], strides: list[int]) -> bool:
    """No two elements at one address: each stride passes the span of the faster dims."""
    span = 0
    for i in sorted((i for i in range(len(dims)) if dims[i] != 1), key=lambda i: strides[i]):
        if strides[i] <= span:
            return False
        span += (dims[i] - 1) * strides[i]
    return True


def conv_rule(x_port: str, w_port: str, y_port: str) -> Callable[[Any, dict[str, Any]], None]:
    def check(n: Any, j: dict[str, Any]) -> None:
        x, w, y = _dims(n, x_port), _dims(n, w_port), _dims(n, y_port)
        r = len(x)
        assert r >= 3 and len(w) == r and len(y) == r, (x, w, y)
        pre, post, stride, dil = j["pre_padding"], j["post_padding"], j["stride"], j["dilation"]
        assert len(pre) == len(post) == len(stride) == len(dil) == r - 2
        assert min(pre + post) >= 0 and min(stride + dil) > 0
        assert x[1] % w[1] == 0, f"{n.name}: {x[1]} channels, filter {w[1]}"
        groups = x[1] // w[1]
        assert w[0] % groups == 0, f"{n.name}: {w[0]} output channels with {groups} groups"
        span = [dil[i - 2] * (w[i] - 1) + 1 for i in range(2, r)]
        want = [x[0], w[0]] + [(x[i] + pre[i - 2] + post[i - 2] - span[i - 2]) // stride[i - 2] + 1
                               for i in range(2, r)]
        assert y == want, f"{n.name}: {y_port} {y}, rule gives {want}"
        out = n.outputs[next(iter(n.outputs))]
        assert _is_packed(out.get_dim(), out.get_stride()) or n.tag != "CONV_FPROP"
    return check


def matmul_rule(n: Any, j: dict[str, Any]) -> None:
    a, b, c = _dims(n, "A"), _dims(n, "B"), _dims(n, "C")
    assert len(a) == len(b) == len(c) >= 2 and a[-1] == b[-2]
    for x, y, z in zip(a[:-2], b[:-2], c[:-2]):
        assert max(x, y) % min(x, y) == 0 and z == max(x, y), (a, b, c)
    assert c[-2:] == [a[-2], b[-1]]


def broadcast_dims(shapes: list[list[int]]) -> list[int]:
    assert len({len(s) for s in shapes}) == 1, shapes
    out = []
    for sizes in zip(*shapes):
        big = set(sizes) - {1}
        assert len(big) <= 1, shapes
        out.append(big.pop() if big else 1)
    return out


def pointwise_rule(n: Any, j: dict[str, Any]) -> None:
    ins = [t.get_dim() for t in n.inputs.values()]
    out = n.outputs["OUT_0"]
    assert out.get_dim() == broadcast_dims(ins)
    # the official's strides: those of the last input of the output's dims, else IN_0's order packed
    like = [t for t in n.inputs.values() if t.get_dim() == out.get_dim()]
    if like:
        assert out.get_stride() == like[-1].get_stride()
    else:
        assert _is_packed(out.get_dim(), out.get_stride())
    if j.get("axis") is not None:
        assert 0 <= j["axis"] < len(out.get_dim())


def reduction_rule(n: Any, j: dict[str, Any]) -> None:
    x, y = _dims(n, "X"), _dims(n, "Y")
    assert len(x) == len(y) and all(a % b == 0 for a, b in zip(x, y)), (x, y)
    assert j["mode"] != "NOT_SET"


def reshape_rule(n: Any, j: dict[str, Any]) -> None:
    assert math.prod(_dims(n, "X")) == math.prod(_dims(n, "Y"))


def transpose_rule(n: Any, j: dict[str, Any]) -> None:
    x, perm = _dims(n, "X"), j["permutation"]
    assert sorted(perm) == list(range(len(x))) and _dims(n, "Y") == [x[p] for p in perm]


def slice_rule(n: Any, j: dict[str, Any]) -> None:
    x, y = _dims(n, "X"), _dims(n, "Y")
    assert len(x) == len(y) == len(j["slices"])
    for d, e, (a, b), s in zip(x, y, j["slices"], j["strides"]):
        assert s > 0 and 0 <= a < b <= d and e == len(range(a, b, s)), (x, y, j["slices"])


def concat_rule(n: Any, j: dict[str, Any]) -> None:
    shapes = [t.get_dim() for t in n.inputs.values()]
    axis, y = j["axis"], _dims(n, "Y")
    assert 0 <= axis < len(y) and all(len(s) == len(y) for s in shapes)
    for i in range(len(y)):
        want = sum(s[i] for s in shapes) if i == axis else shapes[0][i]
        assert y[i] == want and all(s[i] == want for s in shapes if i != axis), (shapes, y)


def genstats_rule(n: Any, j: dict[str, Any]) -> None:
    x = _dims(n, "X")
    for port in ("SUM", "SQ_SUM"):
        assert _dims(n, port) == [1, x[1]] + [1] * (len(x) - 2)


def norm_rule(layout: str) -> Callable[[Any, dict[str, Any]], None]:
    def check(n: Any, j: dict[str, Any]) -> None:
        x, s = _dims(n, "X"), _dims(n, "SCALE")
        r = len(x)
        assert len(s) == r >= 2
        if layout in ("instance", "batch"):
            assert s == [1, x[1]] + [1] * (r - 2)
            stats = [x[0], x[1]] + [1] * (r - 2) if layout == "instance" else s
        else:
            assert all(a in (1, b) for a, b in zip(s, x)) and (s[0] == 1 or layout == "sample")
            stats = [b if a == 1 else 1 for a, b in zip(s, x)]
            if layout == "sample":
                stats[0] = x[0]
        for port in ("Y", "DX", "DY"):
            if port in n.inputs or port in n.outputs:
                assert _dims(n, port) == x, (port, _dims(n, port), x)
        for port in ("BIAS", "DSCALE", "DBIAS"):
            if port in n.inputs or port in n.outputs:
                assert _dims(n, port) == s, (port, _dims(n, port), s)
        for port in ("MEAN", "INV_VARIANCE", "PREV_RUNNING_MEAN", "PREV_RUNNING_VAR", "NEXT_RUNNING_MEAN",
                     "NEXT_RUNNING_VAR"):
            if port in n.inputs or port in n.outputs:
                assert _dims(n, port) == stats, (port, _dims(n, port), stats)
        for port in ("EPSILON", "MOMENTUM", "SCALE_OFFSET"):
            if port in n.inputs:
                assert math.prod(_dims(n, port)) == 1
    return check


def sdpa_rule(n: Any, j: dict[str, Any]) -> None:
    q, k, v = _dims(n, "Q"), _dims(n, "K"), _dims(n, "V")
    assert len(q) == len(k) == len(v) == 4
    b, h_q, s_q, d = q
    assert k[0] == v[0] == b and k[3] == d and k[2] == v[2] and h_q % k[1] == 0 and h_q % v[1] == 0
    assert d % 8 == 0 and v[3] % 8 == 0
    for t in (n.inputs["Q"], n.inputs["K"], n.inputs["V"]):
        assert t.get_data_type() in (DT.HALF, DT.BFLOAT16) and t.get_stride()[3] == 1
    if n.tag == "SDPA_FWD":
        assert _dims(n, "O") == [b, h_q, s_q, v[3]]
        if "Stats" in n.outputs:
            assert _dims(n, "Stats") == [b, h_q, s_q, 1] and n.outputs["Stats"].get_data_type() == DT.FLOAT
    else:
        assert (_dims(n, "dQ"), _dims(n, "dK"), _dims(n, "dV")) == (q, k, v)
        assert _dims(n, "Stats") == [b, h_q, s_q, 1]


RULES: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "CONV_FPROP": conv_rule("X", "W", "Y"), "CONV_DGRAD": conv_rule("DX", "W", "DY"),
    "CONV_WGRAD": conv_rule("X", "DW", "DY"), "MATMUL": matmul_rule, "POINTWISE": pointwise_rule,
    "REDUCTION": reduction_rule, "RESHAPE": reshape_rule, "TRANSPOSE": transpose_rule, "SLICE": slice_rule,
    "CONCATENATE": concat_rule, "GENSTATS": genstats_rule,
    "LAYER_NORM": norm_rule("feature"), "RMS_NORM": norm_rule("feature"),
    "ADA_LAYER_NORM": norm_rule("sample"),
    "INSTANCE_NORM": norm_rule("instance"), "BATCHNORM": norm_rule("batch"),
    "BATCHNORM_INFERENCE": norm_rule("batch"), "LAYER_NORM_BPROP": norm_rule("feature"),
    "RMS_NORM_BPROP": norm_rule("feature"), "ADA_LAYER_NORM_BPROP": norm_rule("sample"),
    "INSTANCE_NORM_BPROP": norm_rule("instance"), "DBN": norm_rule("batch"),
    "SDPA_FWD": sdpa_rule, "SDPA_BWD": sdpa_rule,
}


# -- the tests -----------------------------------------------------------------------------------

def _fuzz(family: str) -> Callable[..., None]:
    @fuzz_settings(family)
    @given(st.data())
    def test(data: st.DataObject) -> None:
        run_case(Case(data), family)

    test.__name__ = f"test_fuzz_{family}"
    test.__doc__ = (f"Random {family} graphs (then up to two consumers): valid by the op's rules, or "
                    "refused naming the node.")
    return test


test_fuzz_conv = _fuzz("conv")
test_fuzz_matmul = _fuzz("matmul")
test_fuzz_pointwise = _fuzz("pointwise")
test_fuzz_reduce_reshape = _fuzz("reduce_reshape")
test_fuzz_norm = _fuzz("norm")
test_fuzz_sdpa = _fuzz("sdpa")
