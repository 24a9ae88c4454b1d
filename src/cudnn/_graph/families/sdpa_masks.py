"""Building blocks of attention's composite lowering: a small node builder and the score
modifiers (scale, bias, ALiBi, padding mask, causal / sliding-window bands, softmax).

The pointwise chains follow the official frontend's (the fused-attention engines recognise
graphs by pattern, so the order and types of the operations matter): index tensors are INT32,
comparisons BOOLEAN, scores FLOAT, masked scores -inf. cuDNN before 9.21 has no native
DIAGONAL_BAND_MASK or SOFTMAX operation, so both are expressed here as pointwise/reduction ops.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from ..._lib.enums import data_type, reduction_mode
from ..model.expand import attrs_of, inferred
from ..model.expander import Expander
from ..model.graph_errors import GraphError
from ..model.graph_view import new_graph
from ..model.node import Context, Node, row_major
from ..model.sdpa_enums import diagonal_alignment
from ..model.shared_tensors import SharedTensors
from ..model.tensor import NOT_SET, Tensor, filling
from .matmul_nodes import Matmul
from .pointwise_nodes import TABLE, Pointwise
from .structural_nodes import Reduction, Reshape

FLOAT, INT32, BOOLEAN = data_type.FLOAT, data_type.INT32, data_type.BOOLEAN
NEG_INF = -math.inf


class Builder:
    """Makes inferred primitive nodes for one composite; ``nodes`` in the order made."""

    def __init__(self, ex: Expander, prefix: str, compute: data_type) -> None:
        self.ex, self.prefix = ex, prefix
        self.compute = compute if compute != NOT_SET else (ex.ctx.compute_data_type
                                                           if ex.ctx.compute_data_type != NOT_SET else FLOAT)
        self.inter = ex.ctx.intermediate_data_type if ex.ctx.intermediate_data_type != NOT_SET else FLOAT
        self.nodes: list[Node] = []

    def _out(self, name: str, out: Tensor | None, dtype: data_type | None, dims: list[int] | None = None) -> Tensor:
        if out is None:
            out = Tensor(f"{self.prefix}::{name}", dims, None, dtype or self.inter, is_virtual=True)
        elif dtype is not None and out.get_data_type() == NOT_SET:
            out.set_data_type(dtype)
        return out

    def add(self, node: Node, port: str, out: Tensor) -> Tensor:
        self.nodes.append(inferred(node, self.ex.ctx, {port: out}))
        return out

    def const(self, value: float, dtype: data_type, name: str) -> Tensor:
        return self.ex.constant(value, dtype, f"{self.prefix}::{name}")

    def pw(self, method: str, *ins: Tensor, name: str, out: Tensor | None = None, dtype: data_type | None = None,
           compute: data_type | None = None, axis: int | None = None) -> Tensor:
        node = Pointwise(f"{self.prefix}.{name}", TABLE[method], list(ins), attrs_of(axis=axis),
                         compute if compute is not None else self.compute)
        return self.add(node, "OUT_0", self._out(name, out, dtype))

    def matmul(self, a: Tensor, b: Tensor, name: str, dims: list[int] | None = None, out: Tensor | None = None,
               m: Tensor | None = None, n: Tensor | None = None, k: Tensor | None = None,
               padding: float | None = None, dtype: data_type | None = None,
               strides: list[int] | None = None) -> Tensor:
        node = Matmul(f"{self.prefix}.{name}", a, b, self.compute, padding,
                      {"M_OVERRIDE": m, "N_OVERRIDE": n, "K_OVERRIDE": k})
        t = self._out(name, out, dtype, dims)
        if strides is not None and not t.get_stride():
            t.set_stride(strides)
        return self.add(node, "C", t)

    def reduce(self, x: Tensor, mode: reduction_mode, name: str, dims: list[int], out: Tensor | None = None,
               dtype: data_type | None = None) -> Tensor:
        node = Reduction(f"{self.prefix}.{name}", x, mode, self.compute)
        t = self._out(name, out, dtype, dims)
        if not t.get_dim():
            t.set_dim(dims)
        if not t.get_stride():  # row-major, as the official's composites set them ([h s_q, s_q, 1, 1])
            t.set_stride(row_major(t.get_dim()))
        return self.add(node, "Y", t)

    def reshape(self, x: Tensor, name: str, dims: list[int], strides: list[int], dtype: data_type) -> Tensor:
        out = Tensor(f"{self.prefix}::{name}", dims, strides, dtype, is_virtual=True)
        return self.add(Reshape(f"{self.prefix}.{name}", x), "Y", out)

    def append(self, nodes: list[Node]) -> None:
        self.nodes += nodes


# -- score modifiers ---------------------------------------------------------------------------

def alibi_slopes(h: int) -> bytes:
    """ALiBi slopes 2^(-8 i / n) for h heads (interpolated when h is not a power of two)."""
    def powers(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    n = 2 ** math.floor(math.log2(h))
    slopes = powers(n)
    if n < h:
        slopes += powers(2 * n)[0::2][: h - n]
    return struct.pack(f"<{h}f", *slopes)


def alibi(bld: Builder, s: Tensor, h_q: int) -> Tensor:
    """S + (col - row) * slope[head]; the slopes are workspace scratch filled from the host."""
    row = bld.pw("gen_index", s, name="gen_row_idx_alibi", dtype=INT32, compute=INT32, axis=2)
    col = bld.pw("gen_index", s, name="gen_col_idx_alibi", dtype=INT32, compute=INT32, axis=3)
    diff = bld.pw("sub", col, row, name="sub_col_row_alibi", dtype=INT32, compute=INT32)
    slopes = Tensor(f"{bld.prefix}::alibi_slopes", [1, h_q, 1, 1], [h_q, 1, 1, 1], FLOAT, is_virtual=False)
    bld.ex.add_scratch(slopes, fill=alibi_slopes(h_q))
    bias = bld.pw("mul", diff, slopes, name="mul_slope_alibi")
    return bld.pw("add", s, bias, name="add_alibi")


def padding_mask(bld: Builder, s: Tensor, seq_q: Tensor, seq_kv: Tensor, tag: str = "padding") -> Tensor:
    """S where row < seq_len_q[b] and col < seq_len_kv[b], else -inf."""
    row = bld.pw("gen_index", s, name=f"gen_row_idx_{tag}", dtype=INT32, compute=INT32, axis=2)
    col = bld.pw("gen_index", s, name=f"gen_col_idx_{tag}", dtype=INT32, compute=INT32, axis=3)
    row_ok = bld.pw("cmp_lt", row, seq_q, name=f"lt_row_sq_{tag}", dtype=BOOLEAN, compute=BOOLEAN)
    col_ok = bld.pw("cmp_lt", col, seq_kv, name=f"lt_col_skv_{tag}", dtype=BOOLEAN, compute=BOOLEAN)
    keep = bld.pw("logical_and", row_ok, col_ok, name=f"and_row_col_{tag}", dtype=BOOLEAN, compute=BOOLEAN)
    return bld.pw("binary_select", s, bld.const(NEG_INF, FLOAT, f"neg_inf_{tag}"), keep, name=f"select_{tag}")


def band_masks(bld: Builder, s: Tensor, alignment: diagonal_alignment, left: int | None, right: int | None,
               s_q: int, s_kv: int, seq_q: Tensor | None, seq_kv: Tensor | None) -> Tensor:
    """Causal / sliding-window masks as pointwise chains (cuDNN < 9.21 has no band-mask op).

    Right bound: keep col <= row + (s_kv - s_q if BOTTOM_RIGHT) + right. Left bound: keep
    col + window (- s_kv + s_q if BOTTOM_RIGHT) > row. Bottom-right shifts use the per-batch
    sequence lengths when given, else the maximum lengths."""
    bottom = alignment == diagonal_alignment.BOTTOM_RIGHT
    if right is not None:
        row = bld.pw("gen_index", s, name="gen_row_index_r", dtype=INT32, axis=2)
        col = bld.pw("gen_index", s, name="gen_col_index_r", dtype=INT32, axis=3)
        if bottom:
            skv = seq_kv if seq_kv is not None else bld.const(s_kv, INT32, "s_kv_r")
            sq = seq_q if seq_q is not None else bld.const(s_q, INT32, "s_q_r")
            row = bld.pw("add", row, skv, name="row_plus_skv", dtype=INT32, compute=INT32, axis=3)
            row = bld.pw("sub", row, sq, name="row_minus_sq", dtype=INT32, compute=INT32, axis=3)
        if right:
            shift = bld.const(right, INT32, "right_bound")
            row = bld.pw("add", row, shift, name="row_plus_right", dtype=INT32, compute=INT32, axis=3)
        keep = bld.pw("cmp_ge", row, col, name="row_ge_col", dtype=BOOLEAN, compute=BOOLEAN)
        s = bld.pw("binary_select", s, bld.const(NEG_INF, FLOAT, "neg_inf_right"), keep, name="select_right")
    if left is not None:
        row = bld.pw("gen_index", s, name="gen_row_index_l", dtype=INT32, axis=2)
        col = bld.pw("gen_index", s, name="gen_col_index_l", dtype=INT32, axis=3)
        if not bottom:
            window = bld.const(float(left), FLOAT, "left_bound")
        elif seq_q is None and seq_kv is None:
            window = bld.const(float(left - s_kv + s_q), FLOAT, "left_bound")
        else:
            window = bld.const(left, INT32, "left_bound")
        wtype = window.get_data_type()
        col = bld.pw("add", col, window, name="col_plus_window", dtype=wtype, compute=wtype, axis=3)
        if bottom and (seq_q is not None or seq_kv is not None):
            skv = seq_kv if seq_kv is not None else bld.const(s_kv, INT32, "s_kv_l")
            sq = seq_q if seq_q is not None else bld.const(s_q, INT32, "s_q_l")
            col = bld.pw("sub", col, skv, name="col_minus_skv", dtype=INT32, compute=INT32, axis=3)
            col = bld.pw("add", col, sq, name="col_plus_sq", dtype=INT32, compute=INT32, axis=3)
        keep = bld.pw("cmp_gt", col, row, name="col_gt_row", dtype=BOOLEAN, compute=BOOLEAN)
        s = bld.pw("binary_select", s, bld.const(NEG_INF, FLOAT, "neg_inf_left"), keep, name="select_left")
    return s


def softmax(bld: Builder, s: Tensor, stats: Tensor | None, smax: Tensor | None, ssum: Tensor | None,
            sink: Tensor | None) -> Tensor:
    """P = softmax(S) over the last dim with optional Stats = max + log(sum) (natural log),
    or Max and Sum_exp (the legal combinations before cuDNN 9.21)."""
    b, h, s_q, _ = s.get_dim()
    stat_dims = [b, h, s_q, 1]
    if sink is not None:
        raw = bld.reduce(s, reduction_mode.MAX, "s_max", stat_dims)
        m = bld.pw("max", raw, sink, name="max_sink", out=smax)
    else:
        m = bld.reduce(s, reduction_mode.MAX, "max", stat_dims, out=smax)
    e = bld.pw("exp", bld.pw("sub", s, m, name="sub_max"), name="exp_sub_max")
    if sink is not None:
        exp_sink = bld.pw("exp", bld.pw("sub", sink, m, name="sub_sink"), name="exp_sink")
        part = bld.reduce(e, reduction_mode.ADD, "sum_exp_elements", stat_dims)
        total = bld.pw("add", part, exp_sink, name="add_sink", out=ssum)
    else:
        total = bld.reduce(e, reduction_mode.ADD, "sum_exp", stat_dims, out=ssum)
    if stats is not None:
        bld.pw("add", m, bld.pw("log", total, name="log_sum"), name="stats", out=stats)
    return bld.pw("div", e, total, name="softmax")


# -- score_mod callables --------------------------------------------------------------------------

def apply_score_mod(node: Node, fn: Callable[..., Any], arg: str, score: Tensor,
                    ctx: Context) -> tuple[Tensor, list[Node]]:
    """Call ``fn(sub_graph, score)`` on a child pygraph sharing ``ctx``; return its result and
    the child's nodes (inferred, names prefixed with the attention node's). The child's nodes
    join the attention node's graph, and so do the tensors they use (the graph's own, or its
    copies of tensors another graph is home to): they bind at that graph's execute."""
    child = new_graph(f"{node.name}::{arg}", ctx)
    sharing = SharedTensors.of(node)
    if sharing is not None:
        child.shared = sharing.joined()
    try:
        result = fn(child, score)
    except GraphError as exc:
        raise GraphError(f"{node.at(arg)}: the callable raised: {exc}") from exc
    if not isinstance(result, Tensor):
        raise GraphError(f"{node.at(arg)}: must return a cudnn.tensor (the modified score), got "
                         f"{type(result).__name__}")
    nodes = list(child.nodes)
    with filling(_tensors(nodes)):  # what inference sets on the user's tensors is the graph's, not theirs
        for sub in nodes:
            sub.name = f"{node.name}::{arg}::{sub.name}"
            sub.infer(ctx)
    if result.get_dim() != score.get_dim():
        raise GraphError(f"{node.at(arg)}: must return a tensor of the score's shape {score.get_dim()}, got "
                         f"{result.get_dim()}")
    return result, nodes


def _tensors(nodes: list[Node]) -> list[Tensor]:
    """Every tensor the nodes' ports hold, ragged offsets included, each once."""
    seen: dict[int, Tensor] = {}
    for n in nodes:
        for t in (*n.inputs.values(), *n.outputs.values()):
            for x in (t, t.get_ragged_offset()):
                if x is not None:
                    seen.setdefault(id(x), x)
    return list(seen.values())
