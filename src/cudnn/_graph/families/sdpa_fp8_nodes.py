"""FP8 attention with per-tensor scales: sdpa_fp8 (forward) and sdpa_fp8_backward.

Q, K, V (and O, dO in backward) are FP8_E4M3 or FP8_E5M2 with one FLOAT scale each: a
``descale_x`` turns stored values back into real ones, a ``scale_x`` maps a real result into
FP8 range before it is stored, and every FP8 result reports its ``Amax`` (the largest
magnitude before scaling) so the caller can pick the next step's scale. Both directions are
composite graphs in the official frontend's order (reference section 5.3 steps 4, 13, 16 and
section 5.6): the backend's FP8 flash-attention engines recognise them by pattern. P (forward)
and dS (backward) are quantized on the way into the second matmuls: scale, then FP8.
"""

from __future__ import annotations

from typing import Any

from ..._lib.enums import data_type, reduction_mode
from ..._lib.status import FeatureUnavailableError, version_string
from ..model.expander import Expander, swapped
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.node import Context, Node, packed_in_order, stride_order
from ..model.sdpa_enums import diagonal_alignment
from ..model.tensor import NOT_SET, Tensor
from .rng_nodes import Rng
from .sdpa_common import HALF_TYPES, Dims, SdpaBase, loaded_version
from .sdpa_masks import FLOAT, Builder, apply_score_mod, band_masks, padding_mask, softmax
from .sdpa_nodes import forward_dropout, keys_transposed, values

FP8_TYPES = (data_type.FP8_E4M3, data_type.FP8_E5M2)
FP8_SINCE = 90100
FP8_HALF_OUT_SINCE = 91300  # fp16/bf16 O, dQ, dK, dV (Blackwell only)
BOTTOM_RIGHT_SINCE = 90700
UNIT = [1, 1, 1, 1]

FWD_SCALES = {"Descale_Q": "descale_q", "Descale_K": "descale_k", "Descale_V": "descale_v",
              "Descale_S": "descale_s", "Scale_S": "scale_s", "Scale_O": "scale_o"}
BWD_SCALES = {"Descale_Q": "descale_q", "Descale_K": "descale_k", "Descale_V": "descale_v",
              "Descale_O": "descale_o", "Descale_dO": "descale_dO", "Descale_S": "descale_s",
              "Descale_dP": "descale_dP", "Scale_S": "scale_s", "Scale_dQ": "scale_dQ", "Scale_dK": "scale_dK",
              "Scale_dV": "scale_dV", "Scale_dP": "scale_dP"}


def device_sm() -> int | None:
    """The current GPU's SM version (90 for Hopper), or None where no GPU can be asked."""
    try:
        from ..._lib import cuda

        major, minor = cuda.device_info(cuda.current_device()).compute_capability
    except Exception:  # noqa: BLE001 - no driver / no device: checks that need the SM wait
        return None
    return 10 * major + minor


def check_per_tensor_scales(node: Node, ports: dict[str, str]) -> None:
    """Every descale/scale is present and one FLOAT value ([1, 1, 1, 1])."""
    for port, arg in ports.items():
        t = node.inputs.get(port)
        if t is None:
            raise GraphError(f"{node.at(arg)}: is required (a FLOAT [1, 1, 1, 1] tensor)")
        if t.get_dim() != UNIT or t.get_data_type() != data_type.FLOAT:
            raise GraphError(f"{node.at(arg)}: a per-tensor scale must be FLOAT with dims [1, 1, 1, 1], got "
                             f"{t.get_data_type().name} {t.get_dim()}")


def amax_output(node: Node, port: str, ctx: Context) -> None:
    """An Amax output: FLOAT [1, 1, 1, 1]."""
    t = node.outputs[port]
    if t.get_data_type() == NOT_SET:
        t.set_data_type(data_type.FLOAT)
    if t.get_data_type() != data_type.FLOAT:
        raise GraphError(f"{node.at(port)}: must be FLOAT, got {t.get_data_type().name}")
    node.set_output(port, t, ctx, UNIT, UNIT)


def check_fp8_version(node: Node) -> None:
    version = loaded_version()
    if version is None:
        return
    if version < FP8_SINCE:
        raise FeatureUnavailableError(f"{node.label()}: FP8 attention", FP8_SINCE, version)
    if version == 91000:
        raise GraphNotSupportedError(f"{node.label()}: FP8 attention is broken in cuDNN 9.10.0 (the loaded libcudnn is "
                                     f"{version_string(version)}); use another version")


def check_fp8_head_dims(node: SdpaBase, p: Dims) -> None:
    for arg, d in (("d_qk", p.d_qk), ("d_v", p.d_v)):
        if d % 16 or d > 256:
            raise GraphNotSupportedError(f"{node.at('q' if arg == 'd_qk' else 'v')}: FP8 attention needs "
                                         f"head dims that are multiples of 16 and at most 256, got {arg}={d}")


def check_sm(node: SdpaBase, p: Dims, backward: bool, version: int) -> None:
    """The architecture rules of the FP8 engines (reference section 5.7), checked at build."""
    sm = device_sm()
    if sm is None:
        return
    if sm < 90:
        raise GraphNotSupportedError(f"{node.label()}: FP8 attention needs a Hopper GPU or newer (SM 90+); "
                                     f"this is SM {sm}")
    blackwell = 100 <= sm < 110
    if not blackwell and backward and (p.d_qk != 128 or p.d_v != 128):
        raise GraphNotSupportedError(f"{node.label()}: FP8 attention backward on SM {sm} needs d_qk = d_v = 128, got "
                                     f"d_qk={p.d_qk}, d_v={p.d_v}")
    if blackwell and (p.d_qk > 128 or p.d_v > 128) and not (p.d_qk == 192 and p.d_v == 128 and version >= 91900):
        raise GraphNotSupportedError(f"{node.label()}: FP8 attention on SM {sm} needs head dims <= 128 (or "
                                     f"d_qk=192 with d_v=128 on cuDNN >= 9.19), got d_qk={p.d_qk}, "
                                     f"d_v={p.d_v}")
    o = node.opts
    banded = o.left_bound is not None or o.right_bound is not None
    if o.alignment == diagonal_alignment.BOTTOM_RIGHT and banded and (not blackwell or version < BOTTOM_RIGHT_SINCE):
        raise GraphNotSupportedError(f"{node.at('diagonal_alignment')}: BOTTOM_RIGHT masks in FP8 attention need a "
                                     f"Blackwell GPU (SM 100) and cuDNN >= 9.7; this is SM {sm}, cuDNN "
                                     f"{version_string(version)}")
    outs = ("O",) if not backward else ("dQ", "dK", "dV")
    for port in outs:
        if node.outputs[port].get_data_type() in HALF_TYPES and not (blackwell and version >= FP8_HALF_OUT_SINCE):
            raise GraphNotSupportedError(f"{node.at(port)}: a {node.outputs[port].get_data_type().name} "
                                         "output of FP8 attention needs a Blackwell GPU (SM 100) and cuDNN "
                                         f">= 9.13; this is SM {sm}; give an FP8 type")


def out_type(node: Node, port: str, like: Tensor) -> None:
    t = node.outputs[port]
    if t.get_data_type() == NOT_SET:
        t.set_data_type(like.get_data_type())
    if t.get_data_type() not in FP8_TYPES + HALF_TYPES:
        raise GraphNotSupportedError(f"{node.at(port)}: must be FP8_E4M3, FP8_E5M2, HALF or BFLOAT16, got "
                                     f"{t.get_data_type().name}")


class SDPAFP8(SdpaBase):
    """FP8 attention forward: O (scaled FP8), Stats, Amax_S and Amax_O."""

    op, tag = "sdpa_fp8", "SDPA_FP8_FWD"
    io_types = FP8_TYPES
    bound_args = ("left_bound", "right_bound")
    nonpositive_left_since = 0  # the official checks no sign here: cuDNN decides
    io_hint = " (fp16/bf16 attention is sdpa)"

    def infer(self, ctx: Context) -> None:
        check_fp8_version(self)
        check_per_tensor_scales(self, FWD_SCALES)
        if "Bias" in self.inputs or self.opts.alibi:
            arg = "bias" if "Bias" in self.inputs else "use_alibi_mask"
            raise GraphNotSupportedError(f"{self.at(arg)}: FP8 attention takes no bias or ALiBi (the FP8 "
                                         "engines have none)")
        p = self.problem(ctx)
        self.dims = p
        check_fp8_head_dims(self, p)
        self.check_common(p)
        q, o = self.inputs["Q"], self.outputs["O"]
        out_type(self, "O", q)
        o_dims = [p.b, p.h_q, p.s_q, p.d_v]
        self.set_output("O", o, ctx, o_dims, packed_in_order(o_dims, stride_order(q.get_dim(), q.get_stride())))
        self.check_4d("O", o)
        if "Stats" in self.outputs:
            self.stats_like("Stats", self.outputs["Stats"], p, ctx)
        for port in ("Amax_S", "Amax_O"):
            amax_output(self, port, ctx)
        if self.opts.score_mod is not None:
            self.check_score_mod(self.opts.score_mod, "fn", [p.b, p.h_q, p.s_q, p.s_kv], ctx)

    def attributes(self) -> dict[str, Any]:
        return {**super().attributes(), "generate_stats": self.opts.generate_stats}

    def expand(self, ex: Expander) -> list[Node]:
        check_sm(self, self.dims, False, ex.version)
        return fp8_forward(self, ex)


def fp8_scores(bld: Builder, node: SdpaBase, s: Tensor, ex: Expander) -> Tensor:
    """attn scale, descale Q, descale K, [fn], [padding], [bands]: the FP8 graphs' order."""
    o, ins = node.opts, node.inputs
    if "Attn_scale" in ins:
        s = bld.pw("mul", s, ins["Attn_scale"], name="attn_scale")
    elif o.attn_scale_value is not None:
        s = bld.pw("mul", s, bld.const(o.attn_scale_value, FLOAT, "attn_scale_value"), name="attn_scale")
    s = bld.pw("mul", s, ins["Descale_Q"], name="descale_q")
    s = bld.pw("mul", s, ins["Descale_K"], name="descale_k")
    if o.score_mod is not None:
        s, nodes = apply_score_mod(node, o.score_mod, "fn", s, ex.ctx)
        bld.append(nodes)
    if o.padding:
        s = padding_mask(bld, s, ins["SEQ_LEN_Q"], ins["SEQ_LEN_KV"])
    if o.left_bound is not None or o.right_bound is not None:
        p = node.dims
        s = band_masks(bld, s, o.alignment, o.left_bound, o.right_bound, p.s_q, p.s_kv,
                       ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV"))
    return s


def matmul_fp8(bld: Builder, a: Tensor, b: Tensor, descale_a: Tensor, descale_b: Tensor, scale_c: Tensor,
               c: Tensor, amax_c: Tensor, name: str, m: Tensor | None = None, n: Tensor | None = None,
               k: Tensor | None = None) -> None:
    """C = FP8(A @ B * descale_a * descale_b * scale_c) and Amax_C = amax before scale_c; a
    head-group sum (GQA) when A and B have more heads than C (the official matmul_fp8)."""
    a_dims, b_dims, c_dims = a.get_dim(), b.get_dim(), c.get_dim()
    full = [a_dims[0], max(a_dims[1], b_dims[1]), a_dims[2], b_dims[3]]
    if a_dims[1] == b_dims[1] and a_dims[1] != c_dims[1]:
        whole = bld.matmul(a, b, f"{name}_matmul", full, m=m, n=n, k=k)
        acc = bld.reduce(whole, reduction_mode.ADD, f"{name}_gqa", c_dims)
    else:
        acc = bld.matmul(a, b, f"{name}_matmul", full, m=m, n=n, k=k)
    acc = bld.pw("mul", acc, descale_a, name=f"{name}_descale_a")
    acc = bld.pw("mul", acc, descale_b, name=f"{name}_descale_b")
    bld.pw("mul", acc, scale_c, name=f"{name}_scale_c", out=c)
    bld.reduce(acc, reduction_mode.AMAX, f"{name}_amax_c", UNIT, out=amax_c)


def fp8_forward(node: SDPAFP8, ex: Expander) -> list[Node]:
    p, o, ins, outs = node.dims, node.opts, node.inputs, node.outputs
    bld = Builder(ex, node.name, node.compute_data_type)
    q = ins["Q"]
    seq_q, seq_kv = ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")
    s_dims = [p.b, p.h_q, p.s_q, p.s_kv]
    s = bld.matmul(q, keys_transposed(bld, node, ex), "bmm1", s_dims, m=seq_q, n=seq_kv,
                   padding=0.0 if o.padding else None)
    s = fp8_scores(bld, node, s, ex)
    # the FP8 engines' softmax always produces Stats: a virtual one when the caller wants none
    stats = outs.get("Stats") or ex.virtual(f"{node.name}::stats", [p.b, p.h_q, p.s_q, 1], FLOAT,
                                            [p.h_q * p.s_q, p.s_q, 1, 1])
    probs = forward_dropout(bld, node, ex, softmax(bld, s, stats, None, None, None), s_dims)
    bld.reduce(probs, reduction_mode.AMAX, "amax_s", UNIT, out=outs["Amax_S"])
    p8 = bld.pw("mul", probs, ins["Scale_S"], name="scale_s", dtype=q.get_data_type())
    matmul_fp8(bld, p8, values(bld, node, ex), ins["Descale_S"], ins["Descale_V"], ins["Scale_O"], outs["O"],
               outs["Amax_O"], "bmm2", m=seq_q, k=seq_kv)
    return bld.nodes


class SDPAFP8Backward(SdpaBase):
    """FP8 attention backward: dQ, dK, dV (scaled FP8) and Amax_dQ/dK/dV/dP."""

    backward = True

    op, tag = "sdpa_fp8_backward", "SDPA_FP8_BWD"
    io_types = FP8_TYPES
    bound_args = ("left_bound", "right_bound")
    io_hint = " (fp16/bf16 attention is sdpa_backward)"

    def infer(self, ctx: Context) -> None:
        check_fp8_version(self)
        check_per_tensor_scales(self, BWD_SCALES)
        p = self.problem(ctx)
        self.dims = p
        check_fp8_head_dims(self, p)
        if p.s_q == 1 and p.s_kv == 1:
            raise GraphNotSupportedError(f"{self.label()}: s_q = s_kv = 1 is not supported by the backward engines")
        self.check_common(p)
        od = [p.b, p.h_q, p.s_q, p.d_v]
        for port in ("O", "dO"):
            t = self.inputs[port]
            self.check_4d(port, t)
            if t.get_dim() != od or t.get_data_type() not in FP8_TYPES:
                raise GraphError(f"{self.at(port)}: must be FP8_E4M3 or FP8_E5M2 with dims [b, h_q, s_q, d_v] = "
                                 f"{od}, got {t.get_data_type().name} {t.get_dim()}")
        self.check_stats_input(p)
        for grad, src in (("dQ", "Q"), ("dK", "K"), ("dV", "V")):
            t, like = self.outputs[grad], self.inputs[src]
            out_type(self, grad, like)
            dims = like.get_dim()
            self.set_output(grad, t, ctx, dims, packed_in_order(dims, stride_order(dims, like.get_stride())))
            self.check_4d(grad, t)
        for port in ("Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"):
            amax_output(self, port, ctx)

    def attributes(self) -> dict[str, Any]:
        return {**super().attributes(), "is_deterministic_algorithm": self.opts.deterministic}

    def expand(self, ex: Expander) -> list[Node]:
        check_sm(self, self.dims, True, ex.version)
        return fp8_backward(self, ex)


def fp8_backward(node: SDPAFP8Backward, ex: Expander) -> list[Node]:
    """The official FP8 backward graph (reference section 5.6, per-tensor)."""
    p, o, ins, outs = node.dims, node.opts, node.inputs, node.outputs
    bld = Builder(ex, node.name, node.compute_data_type)
    q, k, d_o, stats = ins["Q"], ins["K"], ins["dO"], ins["Stats"]
    kt, vt = swapped(k), swapped(ins["V"])
    seq_q, seq_kv = ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")
    full = [p.b, p.h_q, p.s_q, p.s_kv]
    mask = scale = scale_inv = None
    if o.dropout_p is not None:
        mask = ex.virtual(f"{node.name}::dropout_mask", full, FLOAT)
        bld.add(Rng(f"{node.name}.rng", ins["Seed"], ins["Offset"], bernoulli_probability=1.0 - o.dropout_p), "Y", mask)
        scale = bld.const(1.0 / (1.0 - o.dropout_p), FLOAT, "dropout_scale")
        scale_inv = bld.const(1.0 - o.dropout_p, FLOAT, "dropout_scale_inv")
    elif "Dropout_mask" in ins:
        mask, scale, scale_inv = ins["Dropout_mask"], ins["Dropout_scale"], ins["Dropout_scale_inv"]
    # softmax_sum = rowsum(dO * O) * descale_dO * descale_O [* dropout scale_inv]
    row = [p.b, p.h_q, p.s_q, 1]
    prod = bld.pw("mul", d_o, ins["O"], name="mul_dO_O")
    total = bld.reduce(prod, reduction_mode.ADD, "reduce_dO", row)
    total = bld.pw("mul", total, ins["Descale_dO"], name="descale_dO_sum")
    softmax_sum = bld.pw("mul", total, ins["Descale_O"], name="descale_O")
    if scale_inv is not None:
        softmax_sum = bld.pw("mul", softmax_sum, scale_inv, name="scale_dropout_inv")
    # P recomputed, then quantized with scale_s
    s = bld.matmul(q, kt, "bmm_Q_K", full, m=seq_q, n=seq_kv)
    s = fp8_scores(bld, node, s, ex)
    s = bld.pw("sub", s, stats, name="sub_s_stats")
    exp_s = bld.pw("exp", s, name="exp_s")
    probs = exp_s
    if mask is not None:
        probs = bld.pw("mul", probs, mask, name="mul_p_dropout_mask")
    if scale is not None:
        probs = bld.pw("mul", probs, scale, name="mul_p_dropout_scale")
    io, grad_io = q.get_data_type(), d_o.get_data_type()
    p8 = bld.pw("mul", probs, ins["Scale_S"], name="scale_s", dtype=io)
    transposed = [p.h_q * p.s_q * p.s_kv, p.s_q * p.s_kv, 1, p.s_kv]
    pt = bld.reshape(p8, "s_transpose", [p.b, p.h_q, p.s_kv, p.s_q], transposed, io)
    matmul_fp8(bld, pt, d_o, ins["Descale_S"], ins["Descale_dO"], ins["Scale_dV"], outs["dV"], outs["Amax_dV"],
               "bmm_S_T_dO", m=seq_kv, k=seq_q)
    # dS = P * (dO Vᵀ * descales - softmax_sum) [* dropout scale] [* attn scale], quantized with scale_dP
    dp = bld.matmul(d_o, vt, "bmm_dO_V_T", full, m=seq_q, n=seq_kv)
    dp = bld.pw("mul", dp, ins["Descale_dO"], name="descale_dO")
    dp = bld.pw("mul", dp, ins["Descale_V"], name="descale_V")
    ds = bld.pw("mul", bld.pw("sub", dp, softmax_sum, name="sub_dP_softmax_sum"), exp_s, name="mul_dP_exp_s")
    if scale is not None:
        ds = bld.pw("mul", ds, scale, name="mul_dS_dropout_scale")
    if "Attn_scale" in ins:
        ds = bld.pw("mul", ds, ins["Attn_scale"], name="mul_dS_attn_scale")
    elif o.attn_scale_value is not None:
        ds = bld.pw("mul", ds, bld.const(o.attn_scale_value, FLOAT, "attn_scale_value_dS"), name="mul_dS_attn_scale")
    bld.reduce(ds, reduction_mode.AMAX, "amax_dP", UNIT, out=outs["Amax_dP"])
    ds8 = bld.pw("mul", ds, ins["Scale_dP"], name="scale_dP", dtype=grad_io)
    k_view = bld.reshape(kt, "reshape_k", k.get_dim(), k.get_stride(), k.get_data_type())
    matmul_fp8(bld, ds8, k_view, ins["Descale_dP"], ins["Descale_K"], ins["Scale_dQ"], outs["dQ"], outs["Amax_dQ"],
               "bmm_dP_K", m=seq_q, k=seq_kv)
    dst = bld.reshape(ds8, "dP_T", [p.b, p.h_q, p.s_kv, p.s_q], transposed, grad_io)
    matmul_fp8(bld, dst, q, ins["Descale_dP"], ins["Descale_Q"], ins["Scale_dK"], outs["dK"], outs["Amax_dK"],
               "bmm_dP_T_Q", m=seq_kv, k=seq_q)
    return bld.nodes
