"""The graph builder (``cudnn.pygraph``) and its tensors (``cudnn.tensor``).

Importing it means a graph is about to be declared. So before the rest of the graph layer is
imported, a process with no cuDNN handle yet starts making this thread's default handle on a
helper thread, when the thread has a CUDA context already (`backend.handle.prefetch_default_handle`):
cudnnCreate, and cuDNN's opening of its engine libraries, then run while Python imports the
modules below.
"""

from ..backend.handle import prefetch_default_handle

prefetch_default_handle()

# the graph layer, imported after the prefetch started
from .cache import PlanCache, plan_cache  # noqa: E402
from .errors import (  # noqa: E402
    ExecutionInputError,
    ExecutionInputWarning,
    GraphError,
    GraphNotImplementedError,
    GraphNotSupportedError,
    GraphStateError,
    SerializationError,
    SerializationNotSupportedError,
)
from .graph import pygraph  # noqa: E402
from .tensor import Tensor  # noqa: E402

__all__ = ["ExecutionInputError", "ExecutionInputWarning", "GraphError", "GraphNotImplementedError",
           "GraphNotSupportedError", "GraphStateError", "PlanCache", "SerializationError",
           "SerializationNotSupportedError", "Tensor", "plan_cache", "pygraph"]
