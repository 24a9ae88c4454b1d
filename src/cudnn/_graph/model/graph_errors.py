"""Errors the graph layer raises before anything reaches cuDNN.

The classes are the official package's: an invalid graph raises an exception that is both a
``ValueError`` and a ``RuntimeError`` (the official raises either, by cause: pybind11 turns the
C++ frontend's ATTRIBUTE_NOT_SET into ``ValueError`` and its INVALID_VALUE into
``RuntimeError``, and its Python layer raises ``ValueError``), so an ``except`` clause for
either catches ours. A graph that is valid but not supported here raises a
``cudnnGraphNotSupportedError``. Both bases of the pairs below are plain exception classes with
no instance layout of their own, so Python allows the multiple inheritance.
"""

from __future__ import annotations

from ..._lib.status import cudnnGraphNotSupportedError


class GraphError(ValueError, RuntimeError):
    """A graph is malformed: a shape, dtype, name or attribute is wrong or missing.

    The message names the node and the tensor port (``conv_fprop 'conv2d': W``) and says
    what was expected and what was given. A ``ValueError`` (as it always was) and a
    ``RuntimeError`` (as the official's invalid-graph errors are).
    """


class GraphNotSupportedError(GraphError, cudnnGraphNotSupportedError):
    """The graph is valid but not supported here: by the loaded cuDNN, by this GPU, by the fused
    engines' rules, or by cudnn-py (a configuration it does not build, or one it refuses because
    engines were seen computing it wrongly).

    A ``cudnnGraphNotSupportedError``, the class code written for the official catches to skip
    or fall back; also a ``GraphError``, as these refusals were before. Put an ``except
    cudnn.cudnnGraphNotSupportedError`` before an ``except ValueError`` or ``RuntimeError``.
    """

    def __init__(self, message: str) -> None:
        cudnnGraphNotSupportedError.__init__(self, message)


class GraphNotImplementedError(NotImplementedError, cudnnGraphNotSupportedError):
    """A valid graph or call that cudnn-py does not pass to cuDNN yet (an attribute lowering does
    not emit, execute-time shape overrides). A ``NotImplementedError``, as these refusals were
    before, and a ``cudnnGraphNotSupportedError``: the official's engines decline with either."""

    def __init__(self, message: str) -> None:
        cudnnGraphNotSupportedError.__init__(self, message)


class GraphStateError(RuntimeError):
    """A pipeline step was called out of order (e.g. execute before build); a ``RuntimeError``,
    as the official's ("Call build() first")."""


class ExecutionInputError(ValueError):
    """A variant pack or workspace given to execute does not fit the built graph; a
    ``ValueError``, as the official's (its INVALID_VARIANT_PACK and its Python layer's)."""


class ExecutionInputWarning(UserWarning):
    """A buffer's shape, strides or dtype differ from its tensor's, but cuDNN reads and writes
    only inside it (``cudnn.set_execute_checks("strict")`` makes this an error)."""


class SerializationError(ValueError, RuntimeError):
    """Serialized plan data is damaged, of another format, or from another cuDNN or GPU.

    A ``ValueError`` (as it always was) and a ``RuntimeError`` (as the official's errors for
    data it cannot parse)."""


class SerializationNotSupportedError(SerializationError, cudnnGraphNotSupportedError):
    """Sound serialized data that cannot be used here: of another format version, from another
    cuDNN or GPU, not precompiled where ``enforce_precompiled=True`` asks for it, or holding a
    node cudnn-py does not rebuild. A ``cudnnGraphNotSupportedError``, as the official reports
    an unsupported graph format."""

    def __init__(self, message: str) -> None:
        cudnnGraphNotSupportedError.__init__(self, message)
