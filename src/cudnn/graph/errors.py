"""Errors the graph layer raises before anything reaches cuDNN."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph is malformed: a shape, dtype, name or attribute is wrong or missing.

    The message names the node and the tensor port (``conv_fprop 'conv2d': W``) and says
    what was expected and what was given.
    """


class GraphStateError(RuntimeError):
    """A pipeline step was called out of order (e.g. execute before build)."""


class ExecutionInputError(ValueError):
    """A variant pack or workspace given to execute does not fit the built graph."""


class ExecutionInputWarning(UserWarning):
    """A buffer's shape, strides or dtype differ from its tensor's, but cuDNN reads and writes
    only inside it (``cudnn.set_execute_checks("strict")`` makes this an error)."""


class SerializationError(ValueError):
    """Serialized plan data is damaged, of another format, or from another cuDNN or GPU."""
