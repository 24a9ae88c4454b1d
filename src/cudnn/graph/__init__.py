"""The graph builder (``cudnn.pygraph``) and its tensors (``cudnn.tensor``)."""

from .errors import ExecutionInputError, GraphError, GraphStateError
from .graph import pygraph
from .tensor import Tensor

__all__ = ["ExecutionInputError", "GraphError", "GraphStateError", "Tensor", "pygraph"]
