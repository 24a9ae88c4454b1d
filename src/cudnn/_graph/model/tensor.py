"""Tensor attributes of a graph (``cudnn.tensor``): what a tensor is, never where it lives.

Dims, strides (in elements), data type, name, uid, and the flags the backend needs
(virtual, by-value, reordering). Setters chain, as in the documented API. Attributes left
unset (empty dims, NOT_SET data type, uid 0) are filled by ``pygraph.validate()``.

What a graph fills in is kept apart from what the user gave (the setters): a tensor shared by
several graphs gives each of them only what the user gave, to fill in its own (_graph/model/shared_tensors.py).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..._lib.enums import data_type, tensor_reordering
from .arguments import as_bool, as_int, as_int_list
from .graph_errors import GraphNotImplementedError
from .json_layout import compact
from .keywords import name_unknown_keywords

NOT_SET = data_type.NOT_SET
_data_type = data_type  # the enum, where a parameter is named data_type

# What a graph may fill in where the user left it unset: inferred dims, strides and data type, a
# generated name, an assigned uid, a ragged offset seen through the graph's own copy of it, and
# what a build makes of a slice read in place (`Tensor.window_of`): a non-virtual window.
FILLABLE = ("name", "dim", "stride", "data_type", "uid", "ragged_offset", "is_virtual", "window")


def as_data_type(value: Any, what: str = "data_type") -> data_type:
    """A cudnn.data_type from a data_type, a framework dtype (torch, numpy, ...) or a name as
    typed: "fp16", "bfloat16", "HALF", in any case (`interop.framework_dtypes.from_string`)."""
    if isinstance(value, data_type):
        return value
    if value is None:
        return NOT_SET
    if isinstance(value, str) and value in data_type.__members__:
        return data_type[value]
    from ...interop import framework_dtypes as dtypes

    try:
        return dtypes.data_type_of(value)
    except (TypeError, ValueError):
        pass
    raise TypeError(dtypes.refusal(what, value))


def _int_list(values: Any, what: str) -> list[int]:
    """Dims or strides: None is none given; else a list of ints (convert.as_int_list)."""
    if values is None:
        return []
    if type(values) is list and all(type(v) is int for v in values):  # most calls: a graph's own lists
        return values.copy()
    return as_int_list(values, "", what)


def _attribute(getter: Any, setter: Any, doc: str) -> Any:
    """A plain attribute over a getter and a chainable setter (1.32's ``tensor.dim`` beside
    ``get_dim``/``set_dim``); assigning it runs the setter's checks."""
    return property(getter, setter, doc=doc)


class Tensor:
    """Attributes of one tensor of a graph (exposed as ``cudnn.tensor``)."""

    __slots__ = ("_name", "_dim", "_stride", "_data_type", "_is_virtual", "_is_pass_by_value",
                 "_value", "_reordering", "_uid", "_uid_assigned", "_ragged_offset", "_alignment",
                 "_base", "_producer", "_vector_count", "_vector_dimension", "_ragged_multiplier",
                 "_compile_time_constant", "_window", "_given", "_alignment_value", "__weakref__")

    def __init__(self, name: str = "", dim: Sequence[int] | None = None, stride: Sequence[int] | None = None,
                 data_type: Any = NOT_SET, is_virtual: bool = False, is_pass_by_value: bool = False,
                 reordering_type: tensor_reordering = tensor_reordering.NONE, uid: int = -1) -> None:
        self._name = str(name)
        self._dim = _int_list(dim, "dim")
        self._stride = _int_list(stride, "stride")
        self._data_type = as_data_type(data_type, "cudnn.tensor: data_type")
        self._is_virtual = as_bool(is_virtual, "", "is_virtual")
        self._is_pass_by_value = as_bool(is_pass_by_value, "", "is_pass_by_value")
        self._value: int | float | None = None  # a constant carried by the graph (by-value scalar)
        self._reordering = tensor_reordering(reordering_type)
        self._uid = 0
        self._uid_assigned = False
        self._base: Tensor | None = None  # set on views: the tensor whose memory (and uid) this describes
        self._ragged_offset: Tensor | None = None
        self._alignment = 16  # the byte alignment of the buffer's address (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)
        self._alignment_value = 1  # 1.32: every value the tensor holds is a multiple of it (1: no promise)
        self._vector_count = 1  # elements per vector of a vectorized layout (1: none)
        self._vector_dimension = -1  # the dim that is vectorized (-1: none)
        self._ragged_multiplier = 1  # ragged offsets count in units of this many elements
        self._compile_time_constant = False  # a tensor_scalar(COMPILE_TIME_CONST) value
        self._window: tuple[Tensor, int] | None = None  # (tensor, byte offset) whose memory this is, see window_of
        self._producer: tuple[weakref.ref[Any], str] | None = None  # see `producer`
        self._given: dict[str, Any] = {}  # FILLABLE attribute a graph filled in -> the user's value
        if uid is not None and int(uid) >= 0:
            self.set_uid(uid)

    @property
    def producer(self) -> Any:
        """The node whose output this is (set by the graph that adds the node); None for a graph
        input, or once that node's graph is gone. Held weakly: the node holds its outputs, so a
        strong reference back would make every graph a reference cycle, freed only when the
        garbage collector next runs instead of when the graph is dropped."""
        return None if self._producer is None else self._producer[0]()

    @producer.setter
    def producer(self, node: Any) -> None:
        self._producer = None if node is None else (weakref.ref(node), node.label())

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """A deep copy whose producer is the copy of this tensor's producer (a graph copied
        whole: its own node), not this one's, which a weak reference would otherwise keep."""
        t = Tensor.__new__(Tensor)
        memo[id(self)] = t
        for slot in Tensor.__slots__:
            if slot not in ("__weakref__", "_producer"):
                setattr(t, slot, copy.deepcopy(getattr(self, slot), memo))
        node, t._producer = self.producer, self._producer
        if node is not None:  # the label is this one's: the copied node may be only half made yet
            t._producer = (weakref.ref(copy.deepcopy(node, memo)), self.producer_label)
        return t

    @property
    def producer_label(self) -> str:
        """The label of the node whose output this is, kept when the node is gone; "" for a
        graph input."""
        return "" if self._producer is None else self._producer[1]

    # -- setters (chainable) ----------------------------------------------------------------

    def set_output(self, is_output: bool) -> Tensor:
        """Mark as a graph output (non-virtual: it gets a buffer) or back to an intermediate."""
        self._is_virtual = not as_bool(is_output, "set_output", "is_output")
        self._given.pop("is_virtual", None)
        return self

    def set_name(self, name: str) -> Tensor:
        """The tensor's name (node::port names of unnamed tensors give way to it)."""
        self._name = str(name)
        self._given.pop("name", None)
        return self

    def set_data_type(self, data_type: Any = NOT_SET) -> Tensor:
        """The element type: a ``cudnn.data_type``, a framework dtype or a name such as "fp16"
        (`as_data_type`; NOT_SET: inferred)."""
        self._data_type = as_data_type(data_type, "set_data_type")
        self._given.pop("data_type", None)
        return self

    def set_dim(self, dim: Sequence[int]) -> Tensor:
        """The dimensions, outermost first."""
        self._dim = _int_list(dim, "dim")
        self._given.pop("dim", None)
        return self

    def set_stride(self, stride: Sequence[int]) -> Tensor:
        """The strides in elements, one per dimension."""
        self._stride = _int_list(stride, "stride")
        self._given.pop("stride", None)
        return self

    def set_uid(self, uid: int) -> Tensor:
        """The id the backend binds buffers by (a view sets its base's); unset uids are assigned at build."""
        value = as_int(uid, "", "uid")
        if value < 0:
            raise TypeError(f"uid: expected a non-negative int, got {uid!r}")
        if self._base is not None:
            self._base.set_uid(value)
        else:
            self._uid, self._uid_assigned = value, True
            self._given.pop("uid", None)
        return self

    def set_is_virtual(self, is_virtual: bool) -> Tensor:
        """Virtual: an intermediate that lives inside the fused graph and has no buffer."""
        self._is_virtual = as_bool(is_virtual, "set_is_virtual", "is_virtual")
        self._given.pop("is_virtual", None)
        return self

    def set_is_pass_by_value(self, is_pass_by_value: bool) -> Tensor:
        """Pass by value: a scalar given in the variant pack as a value instead of a device buffer."""
        self._is_pass_by_value = as_bool(is_pass_by_value, "set_is_pass_by_value", "is_pass_by_value")
        return self

    def set_reordering_type(self, reordering_type: tensor_reordering) -> Tensor:
        """The backend's reordering of this tensor's memory (``cudnn.tensor_reordering``)."""
        self._reordering = tensor_reordering(reordering_type)
        return self

    def set_ragged_offset(self, ragged_offset: Tensor | None) -> Tensor:
        """The tensor of per-sequence offsets of a ragged (THD) layout (None: none, not ragged)."""
        if ragged_offset is not None and not isinstance(ragged_offset, Tensor):
            raise TypeError(f"ragged_offset: expected a cudnn.tensor, got {type(ragged_offset).__name__}")
        self._ragged_offset = ragged_offset
        self._given.pop("ragged_offset", None)
        return self

    def set_alignment(self, alignment: int) -> Tensor:
        """The alignment in bytes (a power of two) the buffer's address is guaranteed to have."""
        value = as_int(alignment, "", "alignment")
        if value <= 0 or value & (value - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        self._alignment = value
        return self

    def set_alignment_value(self, value: int) -> Tensor:
        """1.32: promise that every value this tensor holds is a multiple of ``value`` (1: no
        promise). A promise about the contents (a MoE first_token_offset's offsets), not the
        address (that is `set_alignment`); no cuDNN operation reads it, and it is not checked."""
        value = as_int(value, "set_alignment_value", "value")
        if value < 1:
            raise ValueError(f"alignment_value must be >= 1, got {value}")
        self._alignment_value = value
        return self

    def _set_data_type(self, data_type: Any) -> Tensor:
        """The official binding's raw setter: a cudnn.data_type only (set_data_type also takes
        framework dtypes)."""
        if not isinstance(data_type, _data_type):
            raise TypeError(f"_set_data_type: expected a cudnn.data_type, got {data_type!r}; set_data_type() "
                            "also takes framework dtypes and data type names ('fp16', 'bfloat16', 'HALF', ...)")
        self._data_type = data_type
        self._given.pop("data_type", None)
        return self

    def set_vector_count_and_dimension(self, vector_count: int, vector_dimension: int) -> Tensor:
        """A vectorized layout: ``vector_count`` elements of dim ``vector_dimension`` packed
        together (CUDNN_ATTR_TENSOR_VECTOR_COUNT / VECTORIZED_DIMENSION). (1, -1) is none."""
        count = as_int(vector_count, "set_vector_count_and_dimension", "vector_count")
        dim = as_int(vector_dimension, "set_vector_count_and_dimension", "vector_dimension")
        if count < 1:
            raise ValueError(f"set_vector_count_and_dimension: vector_count must be >= 1, got {count}")
        if dim < -1 or (self._dim and dim >= len(self._dim)):
            raise ValueError(f"set_vector_count_and_dimension: vector_dimension {dim} is not a dim of "
                             f"tensor {self.label()} with dims {self._dim} (-1 for none)")
        if count != 1:
            _require_lowered("vector_count", f"tensor {self.label()}: a vector count of {count}")
        self._vector_count, self._vector_dimension = count, dim
        return self

    def set_ragged_offset_multiplier(self, ragged_offset_multiplier: int) -> Tensor:
        """Ragged offsets count in units of this many elements (CUDNN_ATTR_TENSOR_RAGGED_OFFSET_
        MULTIPLIER, cuDNN >= 9.24); 1, the default, means elements."""
        value = as_int(ragged_offset_multiplier, "", "ragged_offset_multiplier")
        if value < 1:
            raise ValueError(f"ragged_offset_multiplier must be >= 1, got {value}")
        if value != 1:
            _require_lowered("ragged_offset_multiplier", f"tensor {self.label()}: ragged_offset_multiplier={value}")
        self._ragged_multiplier = value
        return self

    # -- getters ----------------------------------------------------------------------------

    def get_name(self) -> str:
        """The tensor's name ('' until given or inferred)."""
        return self._name

    def get_dim(self) -> list[int]:
        """The dimensions (a copy)."""
        return list(self._dim)

    def get_stride(self) -> list[int]:
        """The strides in elements (a copy)."""
        return list(self._stride)

    def get_data_type(self) -> data_type:
        """The element type (``data_type.NOT_SET`` until given or inferred)."""
        return self._data_type

    def get_uid(self) -> int:
        """The uid (a view's is its base's)."""
        return self._uid if self._base is None else self._base.get_uid()

    def get_is_virtual(self) -> bool:
        """Whether this is a virtual (bufferless) intermediate."""
        return self._is_virtual

    def get_is_pass_by_value(self) -> bool:
        """Whether the value is passed by value in the variant pack."""
        return self._is_pass_by_value

    def get_reordering_type(self) -> tensor_reordering:
        """The reordering type."""
        return self._reordering

    def get_ragged_offset(self) -> Tensor | None:
        """The ragged-offset tensor, or None."""
        return self._ragged_offset

    def get_alignment(self) -> int:
        """The guaranteed alignment in bytes."""
        return self._alignment

    def get_vector_count(self) -> int:
        """The vector count (1: not vectorized)."""
        return self._vector_count

    def get_vector_dimension(self) -> int:
        """The vectorized dimension (-1: none)."""
        return self._vector_dimension

    def get_ragged_offset_multiplier(self) -> int:
        """The unit of ragged offsets, in elements."""
        return self._ragged_multiplier

    def get_has_compile_time_constant(self) -> bool:
        """Whether the value is baked into the graph (``tensor_scalar(v, COMPILE_TIME_CONST)``)."""
        return self._compile_time_constant

    def get_value(self) -> int | float | None:
        """The constant of a by-value scalar made from a Python number, else None."""
        return self._value

    def has_uid(self) -> bool:
        """Whether a uid was given (``set_uid``, ``uid=``) or assigned at build."""
        return self._uid_assigned if self._base is None else self._base.has_uid()

    def view(self, dim: Sequence[int], stride: Sequence[int], name: str = "") -> Tensor:
        """Another description (dims, strides) of this tensor's memory, sharing its uid: the
        backend binds buffers by uid, so a view needs no buffer of its own (Kᵀ for attention's
        first matmul is K with dims and strides 2 and 3 exchanged). This tensor is unchanged."""
        v = self.copy_attributes(name or self._name)
        v.set_dim(dim).set_stride(stride)
        v._base = self if self._base is None else self._base
        return v

    def make_window(self, source: Tensor, byte_offset: int) -> None:
        """Make this tensor a window into ``source``'s buffer: non-virtual, with a uid of its own,
        bound at execute to ``source``'s address plus ``byte_offset`` (its dims and strides say
        which elements it sees). This is how the official frontend lowers a slice on a cuDNN
        without the SLICE operation; a build fills it in (`filling`), validate forgets it."""
        self._window = (source, int(byte_offset))
        self._is_virtual = False

    def window_of(self) -> tuple[Tensor, int] | None:
        """(source tensor, byte offset) of a window (`make_window`), else None."""
        return self._window

    # -- what the user gave, and what a graph filled in -----------------------------------------

    def fillable(self) -> tuple[Any, ...]:
        """The attributes a graph may fill in (``FILLABLE``), as they are now."""
        return tuple(self._read(attr) for attr in FILLABLE)

    def mark_filled(self, before: tuple[Any, ...]) -> None:
        """What changed since ``before`` (a `fillable`) was filled in by a graph: the user's
        value is kept, for `forget_filled` and `given_copy`. A setter makes it the user's again."""
        for attr, old in zip(FILLABLE, before):
            if self._read(attr) != old:
                self._given.setdefault(attr, old)

    def forget_filled(self, attrs: Iterable[str] = FILLABLE) -> None:
        """Back to the user's values of ``attrs`` that a graph filled in."""
        for attr in attrs:
            if attr in self._given:
                self._write(attr, self._given.pop(attr))

    def is_filled(self, attr: str) -> bool:
        """Whether a graph filled ``attr`` in (the user left it unset)."""
        return attr in self._given

    def given_copy(self) -> Tensor:
        """A new tensor with what the user gave this one, what graphs filled in left out, and
        no producer: what another graph that shares this tensor fills in."""
        t = Tensor.__new__(Tensor)
        for slot in Tensor.__slots__:
            if slot != "__weakref__":
                setattr(t, slot, getattr(self, slot))
        t._given, t._producer = {}, None
        for attr, value in self._given.items():
            t._write(attr, value)
        return t

    def _read(self, attr: str) -> Any:
        return (self._uid, self._uid_assigned) if attr == "uid" else getattr(self, "_" + attr)

    def _write(self, attr: str, value: Any) -> None:
        if attr == "uid":
            self._uid, self._uid_assigned = value
        else:
            setattr(self, "_" + attr, value)

    # -- helpers ----------------------------------------------------------------------------

    @property
    def is_output(self) -> bool:
        """Whether the tensor is a graph output (not virtual)."""
        return not self._is_virtual

    def validate(self) -> None:
        """1.32's check of one tensor: dims and strides set, as many strides as dims, and not
        both virtual and by value (ValueError naming the tensor)."""
        what = f"Tensor {self.label()}"
        if not self._dim:
            raise ValueError(f"{what}: dims not set (set_dim, or let graph.validate() infer them)")
        if not self._stride:
            raise ValueError(f"{what}: strides not set (set_stride, or let graph.validate() infer them)")
        if len(self._dim) != len(self._stride):
            raise ValueError(f"{what}: {len(self._dim)} dims {self._dim} but {len(self._stride)} strides "
                             f"{self._stride}")
        if self._is_virtual and self._is_pass_by_value:
            raise ValueError(f"{what} can't be both virtual and pass_by_value")

    # -- 1.32's plain attributes: views of the fields above (reading one is its getter, assigning
    # one is its setter, with the setter's checks) -------------------------------------------------

    name = _attribute(get_name, set_name, doc="The tensor's name (get_name / set_name).")
    dim = _attribute(get_dim, set_dim, doc="The dimensions, a copy (get_dim / set_dim).")
    stride = _attribute(get_stride, set_stride, doc="The strides in elements, a copy (get_stride / set_stride).")
    data_type = _attribute(get_data_type, set_data_type, doc="The element type (get_data_type / set_data_type).")
    uid = _attribute(get_uid, set_uid, doc="The uid, 0 until given or assigned (get_uid / set_uid).")
    is_virtual = _attribute(get_is_virtual, set_is_virtual, doc="Whether it is a bufferless intermediate.")
    is_pass_by_value = _attribute(get_is_pass_by_value, set_is_pass_by_value,
                                doc="Whether its value travels in the variant pack.")
    reordering_type = _attribute(get_reordering_type, set_reordering_type, doc="The backend's reordering.")
    ragged_offset = _attribute(get_ragged_offset, set_ragged_offset, doc="The ragged-offset tensor, or None.")
    ragged_offset_multiplier = _attribute(get_ragged_offset_multiplier, set_ragged_offset_multiplier,
                                        doc="The unit of ragged offsets, in elements.")

    @property
    def uid_assigned(self) -> bool:
        """Whether the tensor has a uid (given, or assigned at build): `has_uid`."""
        return self.has_uid()

    @property
    def dim_assigned(self) -> bool:
        """Whether the dims are the user's (set, and not inferred by a graph)."""
        return bool(self._dim) and not self.is_filled("dim")

    @property
    def stride_assigned(self) -> bool:
        """Whether the strides are the user's (set, and not inferred by a graph)."""
        return bool(self._stride) and not self.is_filled("stride")

    @property
    def pass_by_value(self) -> int | float | None:
        """The constant a by-value scalar carries (a Python number given to an op,
        ``tensor_scalar``), else None: `get_value`."""
        return self._value

    @property
    def alignment_value(self) -> int:
        """The 1.32 promise that every value held is a multiple of it (`set_alignment_value`)."""
        return self._alignment_value

    @alignment_value.setter
    def alignment_value(self, value: int) -> None:
        self.set_alignment_value(value)

    @property
    def scalar_type(self) -> Any:
        """How a scalar carries its value (``cudnn.scalar_type``): COMPILE_TIME_CONST for one baked
        into the graph, RUNTIME_PARAM for another by-value constant; None for other tensors."""
        from .api_enums import scalar_type  # an import down, here: a first graph does without the API enums

        if self._compile_time_constant:
            return scalar_type.COMPILE_TIME_CONST
        return scalar_type.RUNTIME_PARAM if self._value is not None else None

    def copy_attributes(self, name: str = "") -> Tensor:
        """A new tensor with these attributes; uid cleared (``tensor_like``)."""
        t = Tensor(name, self._dim, self._stride, self._data_type, self._is_virtual,
                   self._is_pass_by_value, self._reordering)
        t._value, t._ragged_offset, t._alignment = self._value, self._ragged_offset, self._alignment
        t._vector_count, t._vector_dimension = self._vector_count, self._vector_dimension
        t._ragged_multiplier, t._compile_time_constant = self._ragged_multiplier, self._compile_time_constant
        t._alignment_value = self._alignment_value
        return t

    def element_count(self) -> int:
        """The product of the dimensions."""
        n = 1
        for d in self._dim:
            n *= d
        return n

    def key_fields(self) -> tuple[Any, ...]:
        """What a graph's key (`structure_key`) takes of this tensor: every field of `to_dict`
        but the name and the uid, the ragged offset's own fields in place of its name, and the
        alignments cuDNN is told (a plan chosen for aligned buffers must not serve unaligned ones)."""
        dt, ragged = self._data_type, self._ragged_offset
        return (None if dt == NOT_SET else dt.name, tuple(self._dim), tuple(self._stride), self._is_pass_by_value,
                self._is_virtual, self._value, self._reordering.name, self._compile_time_constant,
                self._vector_count, self._vector_dimension, self._ragged_multiplier,
                ragged.key_fields() if ragged is not None else None, self._alignment, self._alignment_value)

    def to_dict(self) -> dict[str, Any]:
        """The tensor as the official JSON fields (extra keys only where they differ from their default)."""
        dt = self._data_type
        return {
            "data_type": None if dt == NOT_SET else dt.name,
            "dim": list(self._dim),
            "is_pass_by_value": self._is_pass_by_value,
            "is_virtual": self._is_virtual,
            "name": self._name,
            "pass_by_value": self._value,
            "reordering_type": self._reordering.name,
            "stride": list(self._stride),
            "uid": self.get_uid(),
            "uid_assigned": self.has_uid(),
            # keys beyond the official ones only where they differ from their default, so the
            # JSON (and the graph key built from it) of every other tensor stays as it was
            **({"is_compile_time_constant": True} if self._compile_time_constant else {}),
            **({"vector_count": self._vector_count, "vector_dimension": self._vector_dimension}
               if self._vector_count != 1 else {}),
            **({"ragged_offset_multiplier": self._ragged_multiplier} if self._ragged_multiplier != 1 else {}),
            **({"ragged_offset": self._ragged_offset.get_name()} if self._ragged_offset is not None else {}),
        }

    def __repr__(self) -> str:
        return "[" + compact(self.to_dict()) + "]"

    __str__ = __repr__

    def label(self) -> str:
        """The name quoted, for messages ('<unnamed tensor>' without one)."""
        return repr(self._name) if self._name else "<unnamed tensor>"


@contextmanager
def filling(tensors: Sequence[Tensor]) -> Iterator[None]:
    """Inside, what changes on ``tensors`` is filled in by a graph (`Tensor.mark_filled`), even
    when the step that changes it raises."""
    before = [t.fillable() for t in tensors]
    try:
        yield
    finally:
        for t, old in zip(tensors, before):
            t.mark_filled(old)


# tensor attributes beyond dims/strides/type that lowering (`lower.Lowering.tensor`) passes to
# the backend: a tensor refuses to be given one that is not listed here, rather than have it
# silently ignored
LOWERED_EXTRAS = ("vector_count", "ragged_offset_multiplier")


def _require_lowered(feature: str, what: str) -> None:
    """Refuse a tensor attribute that lowering does not emit yet: the backend would read the
    tensor without it, a silent wrong layout. What it emits is ``LOWERED_EXTRAS``; the loaded
    cuDNN's version is checked when it is emitted."""
    if feature not in LOWERED_EXTRAS:
        raise GraphNotImplementedError(f"{what}: cudnn-py does not pass {feature} to cuDNN yet, so the "
                                       "backend would read this tensor with the wrong layout; it is refused "
                                       "rather than ignored")


def constant(name: str, value: int | float, compile_time: bool = False) -> Tensor:
    """A by-value scalar tensor carrying a Python number (its type is inferred by the node);
    ``compile_time`` marks a ``tensor_scalar(..., COMPILE_TIME_CONST)``."""
    t = Tensor(name, None, None, NOT_SET, False, True)
    t._value = value
    t._compile_time_constant = bool(compile_time)
    return t


# -- layouts, as the official frontend infers them -------------------------------------------------
# A stride order ranks the dims from the fastest (0) to the slowest; packing dims in an order
# gives dense strides. These are the official C++ frontend's helpers (graph_helpers.h), tie
# breaks included, so that what cudnn-py infers for an output is what the official infers.

def order_of(strides: Sequence[int], rank: int | None = None) -> list[int]:
    """The stride order of a layout (the official's generate_stride_order_preserving_format):
    dims ranked by stride, equal strides in dim order (the earlier dim counts as faster); dims
    beyond the strides' (``rank`` larger) follow, slowest last."""
    order = [0] * len(strides)
    for k, i in enumerate(sorted(range(len(strides)), key=lambda i: strides[i])):
        order[i] = k
    return order + list(range(len(strides), rank or 0))


def nhwc_order(rank: int) -> list[int]:
    """Channels last (generate_NHWC_stride_order): dim 1 fastest, then the last dims back to
    dim 2, dim 0 slowest; what most official nodes give an output they have no layout for."""
    if rank < 2:
        return [0] * rank
    return [rank - 1, 0, *range(rank - 2, 0, -1)]


def row_major_order(rank: int) -> list[int]:
    """The last dim fastest (generate_row_major_stride_order)."""
    return list(range(rank - 1, -1, -1))


def column_major_order(rank: int) -> list[int]:
    """Row major with the last two dims exchanged, above 2 dims (generate_column_major_stride_order)."""
    order = row_major_order(rank)
    if rank > 2:
        order[-1], order[-2] = order[-2], order[-1]
    return order


def packed(dims: Sequence[int], order: Sequence[int]) -> list[int]:
    """Dense strides of ``dims`` in the stride ``order`` (generate_stride)."""
    strides, acc = [0] * len(dims), 1
    for _, i in sorted((order[i], i) for i in range(len(dims))):
        strides[i] = acc
        acc *= dims[i]
    return strides


def nhwc(dims: Sequence[int]) -> list[int]:
    """Dense channels-last strides of ``dims``."""
    return packed(dims, nhwc_order(len(dims)))


name_unknown_keywords(Tensor, "cudnn.tensor", only=("__init__",))  # its setters take no keywords officially
