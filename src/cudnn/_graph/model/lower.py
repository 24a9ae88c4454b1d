"""Lowering: graph tensors and nodes -> backend descriptors, gated on the loaded version.

One `Lowering` per build: it makes each tensor's descriptor once (nodes share them by
identity) and refuses descriptor types and attributes newer than the loaded libcudnn with
a message that names the node and the version needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._lib import attributes, enums
from ..._lib.attributes import A
from ..._lib.enums import cudnnBackendAttributeType_t as T
from ..._lib.enums import cudnnBackendDescriptorType_t as D
from ..._lib.status import FeatureUnavailableError
from ...backend.descriptor import Descriptor, type_label
from .tensor import LOWERED_EXTRAS, NOT_SET, Tensor

_SINCE_TYPE = enums.SINCE.get("cudnnBackendDescriptorType_t", {})
_SINCE_ATTR = enums.SINCE.get("cudnnBackendAttributeName_t", {})
_SINCE_DTYPE = enums.SINCE.get("cudnnDataType_t", {})


# (table, enum class, member) -> @since, looked up by name once. The class is part of the key:
# members of two enums with one value are equal, and their names differ.
_SINCE_OF: dict[tuple[int, type, Any], int | None] = {}


def _since(table: dict[str, int], member: Any) -> int | None:
    """The header's @since version of an enum member, or of an attribute (an int, see
    `attributes`); None when it has always been there."""
    key = (id(table), type(member), member)
    try:
        return _SINCE_OF[key]
    except KeyError:
        if table is _SINCE_ATTR:
            name = attributes.name(member) or ""
        else:
            name = member.name if table is not _SINCE_DTYPE else f"CUDNN_DATA_{member.name}"
        since = _SINCE_OF[key] = table.get(name)
        return since


def since_type(desc_type: D) -> int | None:
    """The cuDNN version that brought the descriptor (operation) type (None: always there)."""
    return _since(_SINCE_TYPE, desc_type)


MIN_RANK = 3


def backend_layout(dims: list[int], strides: list[int]) -> tuple[list[int], list[int]]:
    """Dims and strides as the backend gets them: rank < 3 gains leading unit dims.

    cuDNN's engines take tensors of rank >= 3; a 2-D pointwise graph finalizes but the
    runtime-fusion kernel then covers only the first row (seen on 9.19). A leading dim of
    size 1 changes no element's address, so the user's view stays 2-D."""
    if len(dims) >= MIN_RANK:
        return dims, strides
    extent = max([d * s for d, s in zip(dims, strides)] + [1])
    pad = MIN_RANK - len(dims)
    return [1] * pad + list(dims), [extent] * pad + list(strides)


class Lowering:
    """State of one build: the handle, the backend version, the tensor descriptors made."""

    # tensor attributes beyond dims/strides/type that `tensor` passes to the backend (a tensor
    # refuses to be given one that is not listed here, rather than have it silently ignored)
    TENSOR_EXTRAS = LOWERED_EXTRAS

    def __init__(self, handle: int, version: int) -> None:
        self.handle = handle
        self.version = version
        self._tensors: dict[int, Descriptor] = {}
        self.tensor_objects: list[Tensor] = []

    def require(self, what: str | Callable[[], str], since: int | None) -> None:
        """Raise FeatureUnavailableError when the loaded cuDNN predates ``since`` (``what``
        names the feature; a callable is asked only then)."""
        if since and self.version < since:
            raise FeatureUnavailableError(what if isinstance(what, str) else what(), since, self.version)

    def descriptor(self, desc_type: D, label: str) -> Descriptor:
        self.require(lambda: f"{label}: {type_label(desc_type)}", _since(_SINCE_TYPE, desc_type))
        return Descriptor(desc_type, label)

    def set(self, desc: Descriptor, attr: int, value: Any, attr_type: T | None = None) -> Descriptor:
        """``desc.set`` with the attribute (an ``A.`` value) gated on the loaded version."""
        self.require(lambda: f"{desc.label}: {attributes.name(attr)}", _since(_SINCE_ATTR, attr))
        return desc.set(attr, value, attr_type)

    def tensor(self, t: Tensor) -> Descriptor:
        """The finalized TENSOR descriptor of ``t`` (made on first use)."""
        desc = self._tensors.get(id(t))
        if desc is not None:
            return desc
        dtype = t.get_data_type()
        if dtype == NOT_SET:
            raise ValueError(f"tensor {t.label()} reached lowering without a data type")
        self.require(lambda: f"tensor {t.label()}: data type {dtype.name}", _since(_SINCE_DTYPE, dtype))
        user_dims = t.get_dim()
        dims, strides = backend_layout(user_dims, t.get_stride())
        pad = len(dims) - len(user_dims)  # leading unit dims backend_layout added
        desc = Descriptor(D.CUDNN_BACKEND_TENSOR_DESCRIPTOR, t.get_name())
        desc.set(A.CUDNN_ATTR_TENSOR_UNIQUE_ID, t.get_uid())
        desc.set(A.CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        desc.set(A.CUDNN_ATTR_TENSOR_STRIDES, strides)
        desc.set(A.CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)
        desc.set(A.CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment(t))
        desc.set(A.CUDNN_ATTR_TENSOR_IS_VIRTUAL, t.get_is_virtual())
        if t.get_is_pass_by_value():
            desc.set(A.CUDNN_ATTR_TENSOR_IS_BY_VALUE, True)
        if t.get_reordering_type() != enums.tensor_reordering.NONE:
            desc.set(A.CUDNN_ATTR_TENSOR_REORDERING_MODE, t.get_reordering_type())
        ragged = t.get_ragged_offset()
        if ragged is not None:
            desc.set(A.CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, self.tensor(ragged))
        if t.get_vector_count() != 1:
            if t.get_vector_dimension() < 0:
                raise ValueError(f"tensor {t.label()}: vector count {t.get_vector_count()} needs a vectorized "
                                 "dimension (set_vector_count_and_dimension(count, dim))")
            self.set(desc, A.CUDNN_ATTR_TENSOR_VECTOR_COUNT, t.get_vector_count())
            self.set(desc, A.CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION, t.get_vector_dimension() + pad)
        if t.get_ragged_offset_multiplier() != 1:
            if ragged is None:
                raise ValueError(f"tensor {t.label()}: ragged_offset_multiplier={t.get_ragged_offset_multiplier()} "
                                 "needs a ragged offset (set_ragged_offset)")
            self.set(desc, A.CUDNN_ATTR_TENSOR_RAGGED_OFFSET_MULTIPLIER, t.get_ragged_offset_multiplier())
        desc.finalize()
        self._tensors[id(t)] = desc
        self.tensor_objects.append(t)  # keeps ids stable while descriptors are cached
        return desc

    def scalar_type(self, compute: enums.data_type) -> T:
        """Attribute type for alpha/beta style scalars: double for double math, else float."""
        return T.CUDNN_TYPE_DOUBLE if compute == enums.data_type.DOUBLE else T.CUDNN_TYPE_FLOAT


def alignment(t: Tensor) -> int:
    """The byte alignment cuDNN is told: the tensor's; for a window into another tensor's buffer
    (`Tensor.window_of`), no more than its offset and that tensor's alignment guarantee."""
    window = t.window_of()
    if window is None:
        return t.get_alignment()
    source, offset = window
    guaranteed = min(t.get_alignment(), source.get_alignment())
    return min(guaranteed, offset & -offset) if offset else guaranteed
