"""MXFP8 attention (block-scaled FP8, Blackwell only): sdpa_mxfp8 and sdpa_mxfp8_backward.

Q, K, V (and the transposed copies and dO of the backward) are FP8 with one FP8_E8M0 scale
per 32 elements, stored in the F8_128x4 reordered layout. The graphs validate, infer their
outputs and print on any machine; building needs an SM 10.x GPU and cuDNN >= 9.21, and is
refused before any backend call on anything else: "needs a Blackwell GPU (SM 100 or newer)".
"""

from __future__ import annotations

from typing import Any

from ..._lib.enums import data_type, tensor_reordering
from ..._lib.status import FeatureUnavailableError
from ..model.expander import Expander
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.node import Context, Node, packed_in_order, stride_order
from ..model.tensor import NOT_SET
from .sdpa_common import HALF_TYPES, SdpaBase
from .sdpa_fp8_nodes import FP8_TYPES, amax_output, device_sm

MXFP8_SINCE = 92100
BLOCK = 32


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_scale_factor(node: SdpaBase, port: str, arg: str, b: int, h: int, axis: int, minimum: int) -> None:
    """An MX scale factor: FP8_E8M0, F8_128x4 reordering, 4-D, batch/heads as its tensor's and at
    least ``minimum`` scales along ``axis`` (2: the sequence, 3: the head dim)."""
    t = node.inputs.get(port)
    if t is None:
        raise GraphError(f"{node.at(arg)}: is required (an FP8_E8M0 scale-factor tensor)")
    dims = t.get_dim()
    if t.get_data_type() != data_type.FP8_E8M0:
        raise GraphError(f"{node.at(arg)}: MX scale factors must be FP8_E8M0, got {t.get_data_type().name}")
    if t.get_reordering_type() != tensor_reordering.F8_128x4:
        raise GraphError(f"{node.at(arg)}: MX scale factors need reordering_type F8_128x4, got "
                         f"{t.get_reordering_type().name}")
    if len(dims) != 4 or dims[0] != b or dims[1] != h or dims[axis] < minimum:
        where = "sequence (dim 2)" if axis == 2 else "head dim (dim 3)"
        raise GraphError(f"{node.at(arg)}: dims must be [{b}, {h}, ., .] with at least {minimum} scales along the "
                         f"{where}, got {dims}")
    if axis == 3 and t.get_stride()[3] != 1:
        raise GraphError(f"{node.at(arg)}: the last dim must have stride 1, got strides {t.get_stride()}")


def refuse_build(node: Node, ex: Expander) -> None:
    """Building is for Blackwell with cuDNN >= 9.21; say which of the two is missing."""
    sm = device_sm()
    if sm is not None and not 100 <= sm < 110:
        raise GraphNotSupportedError(f"{node.label()}: MXFP8 attention needs a Blackwell GPU (SM 100 or "
                                     f"newer); this is SM {sm}")
    if ex.version < MXFP8_SINCE:
        raise FeatureUnavailableError(f"{node.label()}: MXFP8 attention", MXFP8_SINCE, ex.version)
    raise GraphNotSupportedError(f"{node.label()}: cudnn-py does not lower MXFP8 attention to backend operations yet "
                                 "(no Blackwell GPU was available to check the graph against)")


class SDPAMXFP8(SdpaBase):
    """MXFP8 attention forward: O (fp16/bf16 or FP8), Stats, Amax_O."""

    op, tag = "sdpa_mxfp8", "SDPA_MXFP8_FWD"
    io_types = FP8_TYPES
    nonpositive_left_since = 0  # the official checks no sign here: cuDNN decides
    io_hint = " (fp16/bf16 attention is sdpa)"

    def infer(self, ctx: Context) -> None:
        p = self.problem(ctx)
        self.dims = p
        self.check_common(p)
        check_scale_factor(self, "Descale_Q", "descale_q", p.b, p.h_q, 3, ceil_div(p.d_qk, BLOCK))
        check_scale_factor(self, "Descale_K", "descale_k", p.b, p.h_k, 3, ceil_div(p.d_qk, BLOCK))
        check_scale_factor(self, "Descale_V", "descale_v", p.b, p.h_v, 2, ceil_div(p.s_kv, BLOCK))
        q, o = self.inputs["Q"], self.outputs["O"]
        if o.get_data_type() == NOT_SET:
            o.set_data_type(ctx.io_data_type if ctx.io_data_type in HALF_TYPES else data_type.BFLOAT16)
        if o.get_data_type() not in HALF_TYPES + FP8_TYPES:
            raise GraphNotSupportedError(f"{self.at('O')}: must be HALF, BFLOAT16 or FP8, got {o.get_data_type().name}")
        o_dims = [p.b, p.h_q, p.s_q, p.d_v]
        self.set_output("O", o, ctx, o_dims, packed_in_order(o_dims, stride_order(q.get_dim(), q.get_stride())))
        if "Stats" in self.outputs:
            self.stats_like("Stats", self.outputs["Stats"], p, ctx)
        amax_output(self, "Amax_O", ctx)

    def attributes(self) -> dict[str, Any]:
        return {**super().attributes(), "generate_stats": self.opts.generate_stats}

    def expand(self, ex: Expander) -> list[Node]:
        refuse_build(self, ex)
        return []


BWD_FACTORS = (  # port, argument, tensor it scales, axis of the blocks
    ("Descale_Q", "descale_q", "Q", 3), ("Descale_Q_T", "descale_q_T", "Q_T", 2),
    ("Descale_K", "descale_k", "K", 3), ("Descale_K_T", "descale_k_T", "K_T", 2),
    ("Descale_V", "descale_v", "V", 3), ("Descale_dO", "descale_dO", "dO", 3),
    ("Descale_dO_T", "descale_dO_T", "dO_T", 2))


class SDPAMXFP8Backward(SdpaBase):
    """MXFP8 attention backward: dQ, dK, dV and their Amax."""

    backward = True

    op, tag = "sdpa_mxfp8_backward", "SDPA_MXFP8_BWD"
    io_types = FP8_TYPES
    bound_args = ("left_bound", "right_bound")
    io_hint = " (fp16/bf16 attention is sdpa_backward)"

    def infer(self, ctx: Context) -> None:
        p = self.problem(ctx)
        self.dims = p
        self.check_common(p)
        like = {"Q": "Q", "Q_T": "Q", "K": "K", "K_T": "K", "V": "V", "dO": "O", "dO_T": "O"}
        shapes = {"Q": [p.b, p.h_q, p.s_q, p.d_qk], "K": [p.b, p.h_k, p.s_kv, p.d_qk],
                  "V": [p.b, p.h_v, p.s_kv, p.d_v], "O": [p.b, p.h_q, p.s_q, p.d_v]}
        for port in ("Q_T", "K_T", "dO", "dO_T", "O", "dO_f16"):
            t = self.inputs[port]
            want = shapes[like.get(port, "O")]
            types = HALF_TYPES if port in ("O", "dO_f16") else FP8_TYPES
            if t.get_dim() != want or t.get_data_type() not in types:
                arg = {"O": "o_f16"}.get(port, port)
                raise GraphError(f"{self.at(arg)}: must be {' or '.join(x.name for x in types)} with dims {want}, "
                                 f"got {t.get_data_type().name} {t.get_dim()}")
        for port, arg, of, axis in BWD_FACTORS:
            dims = shapes[like[of]]
            check_scale_factor(self, port, arg, p.b, dims[1], axis, ceil_div(dims[axis], BLOCK))
        self.check_stats_input(p)
        for grad, src in (("dQ", "Q"), ("dK", "K"), ("dV", "V")):
            t, src_t = self.outputs[grad], self.inputs[src]
            if t.get_data_type() == NOT_SET:
                t.set_data_type(self.inputs["O"].get_data_type())
            dims = src_t.get_dim()
            self.set_output(grad, t, ctx, dims, packed_in_order(dims, stride_order(dims, src_t.get_stride())))
        for port in ("Amax_dQ", "Amax_dK", "Amax_dV"):
            amax_output(self, port, ctx)

    def expand(self, ex: Expander) -> list[Node]:
        refuse_build(self, ex)
        return []
