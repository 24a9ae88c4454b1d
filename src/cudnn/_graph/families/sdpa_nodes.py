"""Scaled dot-product attention forward: O = softmax(Q Kᵀ * scale + masks) V, and Stats.

A composite node. ``expand`` picks the lowering: the backend's single SDPA_FWD operation
(``sdpa_unified``) when ``implementation`` is UNIFIED, or AUTO and the loaded cuDNN accepts
every requested feature; else the composite graph of matmuls, pointwise and reduction ops
(the official frontend's CompositeSDPANode). The official frontend makes the AUTO choice when
``sdpa()`` is called; cudnn-py makes it at build, against the cuDNN actually loaded.
"""

from __future__ import annotations

from typing import Any

from ..._lib.enums import data_type
from ..model.expander import Expander, swapped
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.node import Context, Node, packed_in_order, row_major, stride_order
from ..model.sdpa_enums import attention_implementation as impl
from ..model.tensor import NOT_SET, Tensor
from .paged_nodes import PagedCacheLoad
from .rng_nodes import Rng
from .sdpa_common import NONPOSITIVE_LEFT_SINCE, Dims, SdpaBase
from .sdpa_masks import FLOAT, Builder, alibi, apply_score_mod, band_masks, padding_mask, softmax

STAT_PORTS = ("Stats", "Max", "Sum_exp")


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive ints."""
    return -(-a // b)


class SDPA(SdpaBase):
    """Attention forward over Q, K, V (+ optional scale, bias, masks, dropout, paging)."""

    op, tag = "sdpa", "SDPA_FWD"
    optional_outputs = frozenset({"Stats"})  # generate_stats=True with Stats left unused
    nonpositive_left_since = NONPOSITIVE_LEFT_SINCE

    def infer(self, ctx: Context) -> None:
        p = self.problem(ctx)
        self.dims = p
        self.check_common(p)
        if self.opts.dropout_p is not None and "RNG_DUMP" in self.outputs:
            if p.s_q == 1:
                raise GraphNotSupportedError(f"{self.at('rng_dump')}: not supported with s_q = 1 (decode): the decode "
                                             "engines (seen on cuDNN 9.19) leave elements of kept scores unwritten; "
                                             "drop rng_dump")
            t = self.outputs["RNG_DUMP"]
            full = [p.b, p.h_q, p.s_q, p.s_kv]
            if not t.get_dim():
                t.set_dim(full).set_stride(row_major(full))
            if t.get_data_type() == NOT_SET:
                t.set_data_type(FLOAT)
            self.set_output("RNG_DUMP", t, ctx, full, t.get_stride())
        q = self.inputs["Q"]
        o_dims = [p.b, p.h_q, p.s_q, p.d_v]
        o = self.outputs["O"]
        if o.get_data_type() == NOT_SET:
            o.set_data_type(q.get_data_type())
        self.set_output("O", o, ctx, o_dims, packed_in_order(o_dims, stride_order(q.get_dim(), q.get_stride())))
        self.check_4d("O", o)
        for port in STAT_PORTS:
            if port in self.outputs:
                self.stats_like(port, self.outputs[port], p, ctx)
        if ("Max" in self.outputs) != ("Sum_exp" in self.outputs):
            raise GraphError(f"{self.at('score_max')}: score_max and score_sum_exp must be given together")
        if p.s_q == 1 and "SINK_TOKEN" in self.inputs:
            raise GraphNotSupportedError(f"{self.at('sink_token')}: a sink token is not supported with s_q = "
                                         "1 (decode)")
        if self.opts.score_mod is not None:
            self.check_score_mod(self.opts.score_mod, "score_mod", [p.b, p.h_q, p.s_q, p.s_kv], ctx)
        if "Block_mask" in self.inputs:
            self.check_block_mask(p)
        if self.opts.implementation == impl.UNIFIED or "Block_mask" in self.inputs:
            from .sdpa_unified_nodes import unified_refusal

            why = unified_refusal(self, ctx, None)
            if why:
                arg = "block_mask" if "Block_mask" in self.inputs else "implementation"
                raise GraphNotSupportedError(f"{self.at(arg)}: the unified SDPA_FWD lowering cannot express "
                                             f"this call: {why}")

    def check_block_mask(self, p: Dims) -> None:
        t = self.inputs["Block_mask"]
        want = [p.b, p.h_q, ceil_div(p.s_q, 128), ceil_div(ceil_div(p.s_kv, 128), 8)]
        if t.get_data_type() != data_type.UINT8 or t.get_dim() != want:
            raise GraphError(f"{self.at('block_mask')}: must be UINT8 [b, h_q, ceil(s_q/128), ceil(ceil(s_kv/128)/8)] "
                             f"= {want}, got {t.get_data_type().name} {t.get_dim()}")

    def attributes(self) -> dict[str, Any]:
        return {**super().attributes(), "generate_stats": self.opts.generate_stats,
                "implementation": self.opts.implementation.name, "unfuse_fma": self.opts.unfuse_fma}

    # -- lowering choice -------------------------------------------------------------------------

    def expand(self, ex: Expander) -> list[Node]:
        from .sdpa_unified_nodes import UnifiedSDPA, unified_refusal

        self.check_left_bound(ex.version)  # the gate validate could not apply without a library
        choice = self.opts.implementation
        if choice == impl.AUTO:  # the unified operation where it accepts the call; autotune may try both
            if unified_refusal(self, ex.ctx, ex.version):
                choice = impl.COMPOSITE
            elif "Block_mask" in self.inputs:
                choice = impl.UNIFIED
            else:
                choice = ex.choose(impl.UNIFIED, (impl.UNIFIED, impl.COMPOSITE))
        if choice == impl.UNIFIED:
            why = unified_refusal(self, ex.ctx, ex.version)
            if why:
                raise GraphNotSupportedError(f"{self.at('implementation')}: UNIFIED cannot be used: {why}")
            return UnifiedSDPA.from_node(self, ex).parts()
        if "Block_mask" in self.inputs:
            raise GraphNotSupportedError(f"{self.at('block_mask')}: only the unified lowering supports a block mask")
        return composite_forward(self, ex)


def composite_forward(node: SDPA, ex: Expander) -> list[Node]:
    """The official frontend's composite forward graph (reference section 5.3)."""
    p, o, ins = node.dims, node.opts, node.inputs
    bld = Builder(ex, node.name, node.compute_data_type)
    q = ins["Q"]
    seq_q, seq_kv = ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")
    kt = keys_transposed(bld, node, ex)
    s_dims = [p.b, p.h_q, p.s_q, p.s_kv]
    s = bld.matmul(q, kt, "bmm1", s_dims, m=seq_q, n=seq_kv, padding=0.0 if o.padding else None)
    s = score_chain(bld, node, s, ex)
    stats = node.wanted("Stats")
    if stats is None and "Max" not in node.outputs:
        # inference: cuDNN's fused attention engines take the composite forward only with a
        # statistics output, so Stats goes to workspace scratch the caller never sees
        stats = ex.add_scratch(Tensor(f"{node.name}::Stats_scratch", [p.b, p.h_q, p.s_q, 1],
                                      row_major([p.b, p.h_q, p.s_q, 1]), FLOAT))
    probs = softmax(bld, s, stats, node.outputs.get("Max"), node.outputs.get("Sum_exp"), ins.get("SINK_TOKEN"))
    probs = forward_dropout(bld, node, ex, probs, s_dims)
    probs.set_data_type(q.get_data_type())  # the backend takes bmm2's A operand in the I/O type
    bld.matmul(probs, values(bld, node, ex), "bmm2", out=node.outputs["O"], m=seq_q, k=seq_kv)
    return bld.nodes


def forward_dropout(bld: Builder, node: SdpaBase, ex: Expander, probs: Tensor, s_dims: list[int]) -> Tensor:
    """P after dropout (reference section 5.3 step 12): Philox's mask (into RNG_DUMP when asked
    for) and 1 / (1 - p), or the user's scale and mask; P unchanged without dropout."""
    o, ins = node.opts, node.inputs
    if o.dropout_p is not None and o.dropout_p > 0.0:
        mask = node.outputs.get("RNG_DUMP") or ex.virtual(f"{node.name}::dropout_mask", s_dims, FLOAT)
        bld.add(Rng(f"{node.name}.rng", ins["Seed"], ins["Offset"], bernoulli_probability=1.0 - o.dropout_p),
                "Y", mask)
        probs = bld.pw("mul", probs, mask, name="dropout_mask_mul")
        probs = bld.pw("mul", probs, bld.const(1.0 / (1.0 - o.dropout_p), FLOAT, "dropout_scale"), name="dropout_scale")
    elif "Dropout_mask" in ins:
        probs = bld.pw("mul", probs, ins["Dropout_scale"], name="dropout_scale_mul")
        probs = bld.pw("mul", probs, ins["Dropout_mask"], name="dropout_mask_mul")
    return probs


def keys_transposed(bld: Builder, node: SdpaBase, ex: Expander) -> Tensor:
    """Kᵀ [b, h_k, d_qk, s_kv] for bmm1: a transposed view of K, or loaded from a paged K cache."""
    p, ins = node.dims, node.inputs
    if not node.paged_k:
        return swapped(ins["K"])
    kt = ex.virtual(f"{node.name}::K_T", [p.b, p.h_k, p.d_qk, p.s_kv], ins["K"].get_data_type(),
                    [p.d_qk * p.s_kv * p.h_k, p.d_qk * p.s_kv, 1, p.d_qk])
    bld.add(PagedCacheLoad(f"{node.name}.paged_k_cache", ins["K"], ins["SEQ_LEN_KV"], ins["Page_table_K"]), "Y", kt)
    return kt


def values(bld: Builder, node: SdpaBase, ex: Expander) -> Tensor:
    """V [b, h_v, s_kv, d_v] for bmm2: V itself, or loaded from a paged V cache."""
    p, ins = node.dims, node.inputs
    if not node.paged_v:
        return ins["V"]
    vv = ex.virtual(f"{node.name}::V_loaded", [p.b, p.h_v, p.s_kv, p.d_v], ins["V"].get_data_type(),
                    [p.d_v * p.s_kv * p.h_v, p.d_v * p.s_kv, p.d_v, 1])
    bld.add(PagedCacheLoad(f"{node.name}.paged_v_cache", ins["V"], ins["SEQ_LEN_KV"], ins["Page_table_V"]), "Y", vv)
    return vv


def score_chain(bld: Builder, node: SdpaBase, s: Tensor, ex: Expander, stats: Tensor | None = None) -> Tensor:
    """Scale, score_mod, bias, ALiBi, padding [, - Stats for backward], band masks: in the
    official order (forward has no Stats step; backward subtracts Stats before the bands)."""
    p, o, ins = node.dims, node.opts, node.inputs
    if "Attn_scale" in ins:
        s = bld.pw("mul", s, ins["Attn_scale"], name="attn_scale")
    elif o.attn_scale_value is not None:
        s = bld.pw("mul", s, bld.const(o.attn_scale_value, FLOAT, "attn_scale_value"), name="attn_scale")
    if o.score_mod is not None:
        s, nodes = apply_score_mod(node, o.score_mod, "score_mod", s, ex.ctx)
        bld.append(nodes)
    if "Bias" in ins:
        s = bld.pw("add", s, ins["Bias"], name="bias_add")
    if o.alibi:
        s = alibi(bld, s, p.h_q)
    if stats is not None:
        s = bld.pw("sub", s, stats, name="sub_s_m")
    if o.padding:
        s = padding_mask(bld, s, ins["SEQ_LEN_Q"], ins["SEQ_LEN_KV"])
    if o.left_bound is not None or o.right_bound is not None:
        s = band_masks(bld, s, o.alignment, o.left_bound, o.right_bound, p.s_q, p.s_kv,
                       ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV"))
    return s
