"""Scaled dot-product attention backward: dQ, dK, dV (and dBias, dSink) from Q, K, V, O, dO, Stats.

Always composite (as in the official frontend, reference section 5.5): P is recomputed from
Q Kᵀ and the forward's Stats, dV = Pᵀ dO, dS = P * (dO Vᵀ - rowsum(dO * O)), dK = dSᵀ Q,
dQ = dS K. A user dropout mask scales dP instead of dS (see composite_backward: the official
graph is wrong on cuDNN 9.19), so its scale_inverse is accepted but not used. Two tensors live
in workspace scratch: softmax_sum (rowsum(dO * O), FLOAT) and, unless dBias or the deterministic
algorithm ask for the dP-workspace path, dQ_accum (FLOAT).
For GQA/MQA the head-group sums of dK/dV are reductions over full-head matmul outputs.
"""

from __future__ import annotations

import struct
from typing import Any

from ..._lib.enums import data_type, reduction_mode
from ..model.expander import Expander, swapped
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.node import Context, Node, packed_in_order, stride_order
from ..model.tensor import NOT_SET, Tensor
from .rng_nodes import Rng
from .sdpa_common import SdpaBase
from .sdpa_masks import FLOAT, Builder, apply_score_mod
from .sdpa_nodes import score_chain

GRADS = (("dQ", "Q"), ("dK", "K"), ("dV", "V"))


class SDPABackward(SdpaBase):
    """Attention backward; the forward's options (masks, scale, dropout) must be repeated."""

    backward = True

    op, tag = "sdpa_backward", "SDPA_BWD"

    def infer(self, ctx: Context) -> None:
        p = self.problem(ctx)
        self.dims = p
        if p.s_q == 1 and p.s_kv == 1:
            raise GraphNotSupportedError(f"{self.label()}: s_q = s_kv = 1 is not supported by the backward engines")
        self.check_common(p)
        od = [p.b, p.h_q, p.s_q, p.d_v]
        for port in ("O", "dO"):
            self.check_4d(port, self.inputs[port])
            if self.inputs[port].get_dim() != od:
                raise GraphError(f"{self.at(port)}: dims must be [b, h_q, s_q, d_v] = {od}, got "
                                 f"{self.inputs[port].get_dim()}")
        self.check_stats_input(p)
        for grad, src in GRADS:
            t, like = self.outputs[grad], self.inputs[src]
            if t.get_data_type() == NOT_SET:
                t.set_data_type(like.get_data_type())
            dims = like.get_dim()
            self.set_output(grad, t, ctx, dims, packed_in_order(dims, stride_order(dims, like.get_stride())))
            self.check_4d(grad, t)
        if "dBias" in self.outputs:
            if "Bias" not in self.inputs:
                raise GraphError(f"{self.at('dBias')}: dBias needs a bias")
            bias, db = self.inputs["Bias"], self.outputs["dBias"]
            if db.get_data_type() == NOT_SET:
                db.set_data_type(bias.get_data_type())
            self.set_output("dBias", db, ctx, bias.get_dim(), bias.get_stride())
        if "DSINK_TOKEN" in self.outputs:
            if "SINK_TOKEN" not in self.inputs:
                raise GraphError(f"{self.at('dSink_token')}: dSink_token needs a sink_token")
            ds = self.outputs["DSINK_TOKEN"]
            if ds.get_data_type() == NOT_SET:
                ds.set_data_type(FLOAT)
            self.set_output("DSINK_TOKEN", ds, ctx, [1, p.h_q, 1, 1], [p.h_q, 1, 1, 1])
        ragged = any(t.get_ragged_offset() is not None for t in self.inputs.values())
        for arg, value in (("max_total_seq_len_q", self.opts.max_total_seq_len_q),
                           ("max_total_seq_len_kv", self.opts.max_total_seq_len_kv)):
            if value is not None and not ragged:
                raise GraphNotSupportedError(f"{self.at(arg)}: only meaningful with ragged (THD) tensors")
        if self.opts.score_mod is not None:
            self.check_score_mod(self.opts.score_mod, "score_mod", [p.b, p.h_q, p.s_q, p.s_kv], ctx)
        if self.opts.score_mod_bprop is not None:
            self.check_score_mod(self.opts.score_mod_bprop, "score_mod_bprop", [p.b, p.h_q, p.s_q, p.s_kv], ctx)

    def attributes(self) -> dict[str, Any]:
        return {**super().attributes(), "is_deterministic_algorithm": self.opts.deterministic,
                "score_mod_bprop": self.opts.score_mod_bprop is not None}

    def expand(self, ex: Expander) -> list[Node]:
        return composite_backward(self, ex)


def composite_backward(node: SDPABackward, ex: Expander) -> list[Node]:
    p, o, ins, outs = node.dims, node.opts, node.inputs, node.outputs
    bld = Builder(ex, node.name, node.compute_data_type)
    q, k, v, d_o, stats = ins["Q"], ins["K"], ins["V"], ins["dO"], ins["Stats"]
    io = q.get_data_type()
    full = [p.b, p.h_q, p.s_q, p.s_kv]
    seq_q, seq_kv = ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")
    if ex.version <= 91500 and p.s_kv % 128 and not o.padding and not any(
            t.get_ragged_offset() is not None for t in ins.values()):
        # cuDNN <= 9.15.0 needs a padding mask when s_kv % 128 != 0: lengths of our own, in scratch.
        seq_q, seq_kv = (_lengths(ex, f"{node.name}::{n}", p.b, s) for n, s in (("seq_q", p.s_q), ("seq_kv", p.s_kv)))
        node = _with_padding(node, seq_q, seq_kv)
    if o.attn_scale_value is not None and "Attn_scale" not in ins:
        # one by-value scale for the scores and for dS, as the official's graph has it
        node = _with_inputs(node, Attn_scale=bld.const(o.attn_scale_value, FLOAT, "attn_scale_value"))
    ins = node.inputs
    kt, vt = swapped(k), swapped(v)
    use_dp_workspace = "dBias" in outs or o.deterministic
    mask = scale = scale_inv = None
    user_mask = "Dropout_mask" in ins
    if o.dropout_p is not None:
        mask = outs.get("RNG_DUMP") or ex.virtual(f"{node.name}::dropout_mask", full, FLOAT)
        bld.add(Rng(f"{node.name}.rng", ins["Seed"], ins["Offset"], bernoulli_probability=1.0 - o.dropout_p), "Y", mask)
        scale = bld.const(1.0 / (1.0 - o.dropout_p), FLOAT, "dropout_scale")
        scale_inv = bld.const(1.0 - o.dropout_p, FLOAT, "dropout_scale_inv")
    elif user_mask:
        mask, scale = ins["Dropout_mask"], ins["Dropout_scale"]  # scale_inverse is not needed: see below
    # softmax_sum = rowsum(dO * O) (* Philox dropout's 1 - p), FLOAT scratch
    row = [p.b, p.h_q, p.s_q, 1]
    prod = bld.pw("mul", d_o, ins["O"], name="mul_dO_O")
    prod.set_dim([p.b, p.h_q, p.s_q, p.d_v]).set_stride(  # the official's strides for this virtual product
        [p.h_q * p.s_q * p.d_v, p.s_q * p.d_v, p.h_q * p.d_v, 1])
    total = bld.reduce(prod, reduction_mode.ADD, "reduce_dO_O", row)
    if "DSINK_TOKEN" in outs:
        e = bld.pw("exp", bld.pw("sub", ins["SINK_TOKEN"], stats, name="sub_sink"), name="exp_sink")
        per_token = bld.pw("mul", e, total, name="mul_exp_sink")
        bld.reduce(per_token, reduction_mode.ADD, "reduce_dsink", [1, p.h_q, 1, 1], out=outs["DSINK_TOKEN"])
    softmax_sum = Tensor(f"{node.name}::softmax_sum", row, [p.h_q * p.s_q, p.s_q, 1, 1], FLOAT, is_virtual=False)
    ex.add_scratch(softmax_sum)
    bld.pw("mul", total, scale_inv if scale_inv is not None else bld.const(1.0, FLOAT, "one"),
           name="scale_dropout_inv", out=softmax_sum)
    # P recomputed: exp(scores - Stats), masked
    s = bld.matmul(q, kt, "matmul_Q_KT", full, m=seq_q, n=seq_kv)
    s = score_chain(bld, node, s, ex, stats=stats)
    exp_s = bld.pw("exp", s, name="exp_s")
    probs = exp_s
    if mask is not None:
        probs = bld.pw("mul", probs, mask, name="mul_p_dropout_mask")
    if scale is not None:
        probs = bld.pw("mul", probs, scale, name="mul_p_dropout_scale")
    transposed = [p.h_q * p.s_q * p.s_kv, p.s_q * p.s_kv, 1, p.s_kv]
    pt = bld.reshape(probs, "reshape_p", [p.b, p.h_q, p.s_kv, p.s_q], transposed, io)
    _grad(bld, pt, d_o, outs["dV"], p.h_v, p.h_q, "matmul_pT_dO", "red_dV_head", seq_kv, seq_q, io)
    # dS = P * (dO Vᵀ [* mask] - softmax_sum) [* dropout scale] [* attn scale]. With a user mask the
    # official graph (softmax_sum = rowsum(dO * O) * scale_inverse, scale after the product) comes out
    # wrong on cuDNN 9.19: its engines ignore a scale_inverse *tensor* there (Philox's by-value 1 - p
    # is honoured), giving dQ/dK off by up to ~2. The same gradient, P * (dP * mask * scale - rowsum),
    # needs no scale_inverse, so nothing the engine might ignore is left in the graph.
    dp = bld.matmul(d_o, vt, "matmul_dO_VT", full, m=seq_q, n=seq_kv)
    if mask is not None:
        dp = bld.pw("mul", dp, mask, name="dP_dropout_mask")
    if user_mask and scale is not None:  # scale: the user's Dropout_scale
        dp = bld.pw("mul", dp, scale, name="dP_dropout_scale")
    ds = bld.pw("mul", bld.pw("sub", dp, softmax_sum, name="sub_dP_softmax_sum"), exp_s, name="mul_dP_exp_s")
    if scale is not None and not user_mask:
        ds = bld.pw("mul", ds, scale, name="mul_dS_dropout_scale")
    if "dBias" in outs:
        bld.reduce(ds, reduction_mode.ADD, "red_dP_dBias", outs["dBias"].get_dim(), out=outs["dBias"])
    if o.score_mod_bprop is not None:
        ds, nodes = apply_score_mod(node, o.score_mod_bprop, "score_mod_bprop", ds, ex.ctx)
        bld.append(nodes)
    if "Attn_scale" in ins:
        ds = bld.pw("mul", ds, ins["Attn_scale"], name="mul_dS_attn_scale")
    dst = bld.reshape(ds, "reshape_dS", [p.b, p.h_q, p.s_kv, p.s_q], transposed, io)
    _grad(bld, dst, q, outs["dK"], p.h_k, p.h_q, "matmul_dST_Q", "red_dK_head", seq_kv, seq_q, io)
    k_view = bld.reshape(kt, "reshape_k", k.get_dim(), k.get_stride(), bld.inter)  # typed as the official's
    if use_dp_workspace:
        bld.matmul(ds, k_view, "matmul_dS_K", out=outs["dQ"], m=seq_q, k=seq_kv)
    else:
        dims = [p.b, p.h_q, p.s_q, p.d_qk]
        acc = Tensor(f"{node.name}::dQ_accum", dims, [p.h_q * p.s_q * p.d_qk, p.s_q * p.d_qk, p.d_qk, 1], FLOAT,
                     is_virtual=False)
        ex.add_scratch(acc, zero=ex.version < 90600)
        bld.matmul(ds, k_view, "matmul_dS_K", out=acc, m=seq_q, k=seq_kv)
        bld.pw("identity", acc, name="identity_dQ", out=outs["dQ"])
    return bld.nodes


def _grad(bld: Builder, a: Tensor, b: Tensor, out: Tensor, h: int, h_q: int, mm: str, red: str,
          m: Tensor | None, k: Tensor | None, io: data_type) -> None:
    """out = a @ b, summed over head groups (GQA/MQA) through a full-head intermediate."""
    if h == h_q:
        bld.matmul(a, b, mm, out=out, m=m, k=k)
        return
    dims = out.get_dim()
    full = [dims[0], h_q, dims[2], dims[3]]
    whole = bld.matmul(a, b, mm, full, m=m, k=k, dtype=io)
    bld.reduce(whole, reduction_mode.ADD, red, dims, out=out)


def _lengths(ex: Expander, name: str, b: int, value: int) -> Tensor:
    t = Tensor(name, [b, 1, 1, 1], [1, 1, 1, 1], data_type.INT32, is_virtual=False)
    return ex.add_scratch(t, fill=struct.pack(f"<{b}i", *([value] * b)))


def _with_padding(node: SDPABackward, seq_q: Tensor, seq_kv: Tensor) -> SDPABackward:
    """A shallow copy of ``node`` with a padding mask over the given lengths (9.15 workaround)."""
    twin = _with_inputs(node, SEQ_LEN_Q=seq_q, SEQ_LEN_KV=seq_kv)
    twin.opts.padding = True
    return twin


def _with_inputs(node: SDPABackward, **inputs: Tensor) -> SDPABackward:
    """A shallow copy of ``node`` (its options copied too) with ``inputs`` added to its own."""
    import copy

    twin = copy.copy(node)
    twin.opts = copy.copy(node.opts)
    twin.inputs = {**node.inputs, **inputs}
    return twin
