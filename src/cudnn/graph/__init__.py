"""The graph builder (``cudnn.pygraph``) and its tensors (``cudnn.tensor``)."""

from .cache import PlanCache, plan_cache
from .errors import (
    ExecutionInputError,
    ExecutionInputWarning,
    GraphError,
    GraphStateError,
    SerializationError,
)
from .graph import pygraph
from .tensor import Tensor

__all__ = ["ExecutionInputError", "ExecutionInputWarning", "GraphError", "GraphStateError", "PlanCache",
           "SerializationError", "Tensor", "plan_cache", "pygraph"]
