"""The graph builder (``cudnn.pygraph``) and its tensors (``cudnn.tensor``)."""

from .cache import PlanCache, plan_cache
from .errors import (
    ExecutionInputError,
    ExecutionInputWarning,
    GraphError,
    GraphNotImplementedError,
    GraphNotSupportedError,
    GraphStateError,
    SerializationError,
    SerializationNotSupportedError,
)
from .graph import pygraph
from .tensor import Tensor

__all__ = ["ExecutionInputError", "ExecutionInputWarning", "GraphError", "GraphNotImplementedError",
           "GraphNotSupportedError", "GraphStateError", "PlanCache", "SerializationError",
           "SerializationNotSupportedError", "Tensor", "plan_cache", "pygraph"]
