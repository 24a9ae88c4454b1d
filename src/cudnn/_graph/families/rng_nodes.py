"""Random number generation (Philox): Y ~ distribution, from a seed and an offset.

Attention's dropout draws its keep-mask with BERNOULLI(1 - p); the seed and offset are
[1, 1, 1, 1] tensors (INT64 or INT32) in device memory, so a training loop can advance the
offset without rebuilding the graph.
"""

from __future__ import annotations

from typing import Any

from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.enums import data_type, rng_distribution
from ...backend.descriptor import Descriptor
from ..model.graph_errors import GraphError
from ..model.lower import Lowering
from ..model.node import Context, Node
from ..model.tensor import Tensor, nhwc


class Rng(Node):
    """Y = random tensor of Y's (preset) dims; SEED/OFFSET all-ones-shaped tensors. Unset strides
    of Y are channels last (NHWC order) and an unset type the graph's, as the official infers
    (FLOAT where the graph has none for a graph output)."""

    op, tag = "rng", "RNG"

    def __init__(self, name: str, seed: Tensor, offset: Tensor,
                 distribution: rng_distribution = rng_distribution.BERNOULLI,
                 bernoulli_probability: float | None = None) -> None:
        super().__init__(name)
        self.inputs = {"Seed": seed, "Offset": offset}
        self.distribution = rng_distribution(distribution)
        if self.distribution == rng_distribution.BERNOULLI and (
                bernoulli_probability is None or not 0.0 <= float(bernoulli_probability) <= 1.0):
            raise GraphError(f"{self.label()}: bernoulli_probability must be in [0, 1], "
                             f"got {bernoulli_probability!r}")
        self.probability = None if bernoulli_probability is None else float(bernoulli_probability)

    def infer(self, ctx: Context) -> None:
        super().infer(ctx)
        for port, t in self.inputs.items():
            if any(d != 1 for d in t.get_dim()):
                raise GraphError(f"{self.at(port)}: must hold one value (all dims 1), got dims {t.get_dim()}")
            if t.get_data_type() not in (data_type.INT64, data_type.INT32):
                raise GraphError(f"{self.at(port)}: expected INT64 or INT32, got {t.get_data_type().name}")
        y = self.outputs["Y"]
        if not y.get_dim():
            raise GraphError(f"{self.at('Y')}: the output's dims must be set (an RNG has no shaped input)")
        if y.get_data_type() == data_type.NOT_SET and not y.get_is_virtual() and ctx.io_data_type == data_type.NOT_SET:
            y.set_data_type(data_type.FLOAT)
        self.set_output("Y", y, ctx, y.get_dim(), nhwc(y.get_dim()))

    def attributes(self) -> dict[str, Any]:
        return {"distribution": self.distribution.name, "bernoulli_probability": self.probability}

    def lower(self, lw: Lowering) -> list[Descriptor]:
        rng = lw.descriptor(D.CUDNN_BACKEND_RNG_DESCRIPTOR, self.name)
        rng.set(A.CUDNN_ATTR_RNG_DISTRIBUTION, self.distribution)
        if self.probability is not None:
            rng.set(A.CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, self.probability, T.CUDNN_TYPE_DOUBLE)
        rng.finalize()
        op = lw.descriptor(D.CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, self.name)
        op.set(A.CUDNN_ATTR_OPERATION_RNG_YDESC, lw.tensor(self.outputs["Y"]))
        op.set(A.CUDNN_ATTR_OPERATION_RNG_SEED, lw.tensor(self.inputs["Seed"]))
        op.set(A.CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, lw.tensor(self.inputs["Offset"]))
        op.set(A.CUDNN_ATTR_OPERATION_RNG_DESC, rng)
        return [op.finalize()]
