"""Engine configurations known to compute a graph wrongly or to fault, set aside before any is built.

cuDNN's heuristics can rank first an engine that accepts a graph and then returns wrong values
with no error, or faults on the GPU (which kills the CUDA context). Each rule here was found on
the GPU, by differential testing against a float64 reference or by a fault: it names the graph
pattern, how the engines are recognised and what was observed. A candidate a rule refuses is
never built or run; if no candidate is left, the build fails with the rule's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING

from ..._lib.enums import behavior_note, data_type
from ..._lib.record import Record
from ..model.node import stride_order

if TYPE_CHECKING:
    from ..model.node import Node
    from ..model.tensor import Tensor
    from .candidates import Candidate


REVISION = 3  # enters plan-cache keys: plans cached before a rule existed are not reused


class Rule(Record):
    """Engines (``engine``) that compute graphs matching ``pattern`` wrongly."""

    __slots__ = ("why", "pattern", "engine")
    frozen = True

    def __init__(self, why: str, pattern: Callable[[Sequence[Node]], bool],
                 engine: Callable[[Candidate], bool]) -> None:
        self.why, self.pattern, self.engine = why, pattern, engine


def channels_last(t: Tensor) -> bool:
    """A 4-D/5-D tensor whose channel dim (1) is the fastest varying: NHWC / NDHWC."""
    dims = t.get_dim()
    return len(dims) >= 4 and dims[1] > 1 and stride_order(dims, t.get_stride())[0] == 1


def channels_first(t: Tensor) -> bool:
    """A 4-D/5-D tensor with more than one channel that is not channels-last (NCHW and others)."""
    dims = t.get_dim()
    return len(dims) >= 4 and dims[1] > 1 and not channels_last(t)


def _nchw_conv_fused_into_nhwc_output(nodes: Sequence[Node]) -> bool:
    convs = [n for n in nodes if n.op == "conv_fprop"]
    if not convs or len(nodes) == len(convs):
        return False
    if not any(channels_first(n.inputs["X"]) for n in convs):
        return False
    outputs = [t for n in nodes for t in n.outputs.values() if not t.get_is_virtual()]
    return any(channels_last(t) for t in outputs)


def _pointwise_at_a_smaller_shape(nodes: Sequence[Node]) -> bool:
    """A graph of pointwise ops only, where some op computes at a shape smaller than the
    graph's largest (all its inputs broadcast), e.g. elu(v1) beside mul(v0, v1) for v1 [7, 1]."""
    from ..families.pointwise_nodes import Pointwise

    if not nodes or not all(isinstance(n, Pointwise) for n in nodes):
        return False
    sizes = [prod(t.get_dim()) for n in nodes for t in n.outputs.values()]
    return min(sizes) < max(sizes)


def _fp8_attention_with_philox_dropout(nodes: Sequence[Node]) -> bool:
    """Random numbers (attention's Philox dropout) in a graph whose matmuls take FP8 operands."""
    fp8 = (data_type.FP8_E4M3, data_type.FP8_E5M2)
    return any(n.op == "rng" for n in nodes) and any(
        n.op == "matmul" and any(t.get_data_type() in fp8 for t in n.inputs.values()) for n in nodes)


def _any_engine(c: Candidate) -> bool:
    return True


def _runtime_compiled(c: Candidate) -> bool:
    return int(behavior_note.RUNTIME_COMPILATION) in {int(n) for n in c.behavior_notes}


RULES = (
    Rule("runtime-compiled engines compute a convolution with channels-first (NCHW) input fused with "
         "pointwise ops into a channels-last (NHWC) output wrongly (observed on cuDNN 9.19, H200: relative "
         "errors near 1, no error status); give X and W channels-last strides, or the output X's layout",
         _nchw_conv_fused_into_nhwc_output, _runtime_compiled),
    Rule("in a graph of pointwise ops only, an op whose inputs are all broadcast computes at a smaller "
         "shape than the rest, which cuDNN's pointwise engines leave unwritten or wrong (observed on cuDNN "
         "9.19, H200); broadcast such a value inside an op of the full shape, or compute it in its own graph",
         _pointwise_at_a_smaller_shape, _any_engine),
    Rule("FP8 attention with Philox dropout: the forward engine faulted (illegal memory access) and the "
         "backward engine returned wrong gradients (relative error near 1) on cuDNN 9.19, H200; use a dropout "
         "mask tensor (mask, scale) instead, or bf16/fp16 attention",
         _fp8_attention_with_philox_dropout, _any_engine),
)


def guard_for(nodes: Sequence[Node]) -> Callable[[Candidate], str | None] | None:
    """A function giving the reason a candidate must not run for this graph (None: it may), or
    None when no rule matches the graph."""
    rules = [r for r in RULES if r.pattern(nodes)]
    if not rules:
        return None

    def refuse(c: Candidate) -> str | None:
        return next((r.why for r in rules if r.engine(c)), None)

    return refuse
