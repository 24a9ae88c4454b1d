"""Layer and RMS norm of a 16-bit X with fp32 SCALE/BIAS, lowered as a unit-scale norm followed
by the affine step in fused pointwise ops.

cuDNN 9.19 has only a generic engine (eng1) for NORM_FORWARD with a bf16/fp16 X and fp32
SCALE/BIAS, much slower than its engines for SCALE/BIAS in X's dtype. The same engines
accept the norm with a unit SCALE (and zero BIAS) in X's dtype followed by Y = Yhat * SCALE +
BIAS in fused pointwise ops: the affine step stays in fp32 (no rounding of the user's
parameters), and MEAN / INV_VARIANCE do not depend on SCALE or BIAS. cuDNN refuses a unit
SCALE computed in the graph (a pointwise op feeding SCALE: NOT_SUPPORTED_GRAPH_PATTERN), so
the unit SCALE and zero BIAS are scratch tensors carved from the workspace, filled before
each execute. Figures of this and of the lowerings not taken (a separate cast of SCALE/BIAS,
a two-graph split, other views): benchmarks/bench_norm.py.

The default (``lowering="auto"``) builds the single norm, as the official frontend does:
the faster engines compile their kernel at build time, several times the build of the single
norm. The affine epilogue is the graph's alternative lowering, which autotuning times and keeps
when faster (the plan cache then remembers that choice), or ``lowering="affine_epilogue"``.
"""

from __future__ import annotations

import copy
from enum import Enum
from typing import TYPE_CHECKING

from ..._lib.enums import data_type
from ..model.expand import Expander, inferred
from ..model.tensor import Tensor

if TYPE_CHECKING:
    from ..model.node import Node
    from .norm import NormForward

FLOAT = data_type.FLOAT
VERIFIED_SINCE = 91900  # the alternative applies from the cuDNN it was measured and tested on
_ONE = {data_type.BFLOAT16: b"\x80\x3f", data_type.HALF: b"\x00\x3c"}  # 1.0, little-endian


class NormLowering(Enum):
    """How a layer or RMS norm forward reaches the backend."""

    NORM = "norm"  # one NORM_FORWARD operation with the user's SCALE and BIAS
    AFFINE_EPILOGUE = "affine_epilogue"  # unit-scale NORM_FORWARD, then * SCALE (+ BIAS) fused


LOWERINGS = {m.value: m for m in NormLowering}


def affine_refusal(node: NormForward) -> str:
    """Why the affine-epilogue lowering does not apply to ``node`` ("" when it does)."""
    ins, y = node.inputs, node.outputs["Y"]
    x, scale, bias = ins["X"], ins["SCALE"], ins.get("BIAS")
    xdt = x.get_data_type()
    if node.kind.op not in ("layernorm", "rmsnorm"):
        return f"only layer and RMS norm have it, not {node.kind.op}"
    if node.zero_centered_gamma:
        return "a zero-centered gamma already feeds SCALE from a pointwise op"
    if xdt not in _ONE:
        return f"X is {xdt.name}; the lowering is for a HALF or BFLOAT16 X"
    for port, t in (("SCALE", scale), ("BIAS", bias)):
        if t is not None and (t.get_data_type() != FLOAT or t.get_is_virtual()):
            return f"{port} must be a FLOAT tensor in memory, got {t.get_data_type().name}" + (
                " (virtual)" if t.get_is_virtual() else "")
    if y.get_data_type() != xdt:
        return f"Y is {y.get_data_type().name}; the lowering writes Y in X's type ({xdt.name})"
    tensors = node.port_tensors()
    dims = tensors["X"].get_dim()
    if len(dims) != 4 or dims[2:] != [1, 1] or tensors["SCALE"].get_dim() != [1, dims[1], 1, 1]:
        return (f"X {x.get_dim()} has no [rows, hidden, 1, 1] view here (normalized axes not trailing, a "
                "tensor not packed row-major, or one another node also uses)")
    return ""


def choose(node: NormForward, ex: Expander) -> NormLowering:
    """The lowering ``node`` builds: the one forced, else the single norm, with the affine
    epilogue as the alternative autotuning also times where it applies on a verified cuDNN."""
    forced = LOWERINGS[node.lowering] if node.lowering != "auto" else None
    if forced is not None or ex.version < VERIFIED_SINCE or affine_refusal(node):
        return forced or NormLowering.NORM
    return ex.choose(NormLowering.NORM, (NormLowering.NORM, NormLowering.AFFINE_EPILOGUE))


def affine_epilogue(node: NormForward, ex: Expander) -> list[Node]:
    """Unit-scale norm into a virtual float Yhat, then Yhat * SCALE (+ BIAS) into Y, every
    tensor in the [rows, hidden, 1, 1] view; the unit SCALE and zero BIAS are workspace scratch."""
    from .pointwise import TABLE, Pointwise

    tensors = node.port_tensors()
    x, scale, bias, y = tensors["X"], tensors["SCALE"], tensors.get("BIAS"), tensors["Y"]
    xdt, pdims, pstrides = x.get_data_type(), scale.get_dim(), scale.get_stride()
    unit = ex.add_scratch(Tensor(f"{node.name}::UNIT_SCALE", pdims, pstrides, xdt), fill=_ONE[xdt] * pdims[1])
    twin = copy.copy(node)
    twin.primitive = True
    twin.inputs = {port: tensors[port] for port in node.inputs if port != "BIAS"}
    twin.inputs["SCALE"] = unit
    if node.kind.op == "layernorm":  # a layer norm node takes a BIAS (the measured form): zero
        twin.inputs["BIAS"] = ex.add_scratch(Tensor(f"{node.name}::ZERO_BIAS", pdims, pstrides, xdt), zero=True)
    yhat = ex.virtual(f"{node.name}::NORMALIZED", x.get_dim(), FLOAT, x.get_stride())
    twin.outputs = {port: tensors[port] for port in node.outputs}
    twin.outputs["Y"] = yhat
    parts: list[Node] = [twin]
    scaled = y if bias is None else ex.virtual(f"{node.name}::SCALED", x.get_dim(), FLOAT, x.get_stride())
    mul = Pointwise(f"{node.name}.affine_scale", TABLE["mul"], [yhat, scale], {}, FLOAT)
    parts.append(inferred(mul, ex.ctx, {"OUT_0": scaled}))
    if bias is not None:
        add = Pointwise(f"{node.name}.affine_bias", TABLE["add"], [scaled, bias], {}, FLOAT)
        parts.append(inferred(add, ex.ctx, {"OUT_0": y}))
    return parts
