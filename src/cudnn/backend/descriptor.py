"""Backend descriptors: create, set and get attributes, finalize, close.

A faithful, thin object over ``cudnnBackendDescriptor_t``. Values are converted by the
attribute *type* (the backend's ``cudnnBackendAttributeType_t``), which may be given or
inferred from the Python value. Descriptors set into another descriptor are kept alive by
it, so a plan keeps its engine config, op graph, operations and tensors; ``close()`` of a
descriptor still held by an open parent is deferred until that parent goes.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Union

from .._lib import attributes, capi, enums, marshal, release
from .._lib.enums import cudnnBackendAttributeType_t as AttrType
from .._lib.enums import cudnnBackendDescriptorType_t as DescType
from .._lib.marshal import Fraction
from .._lib.status import DescriptorClosedError, raise_status

if TYPE_CHECKING:  # at run time attributes are ints (`attributes`): the enum is built only for who reads it
    from .._lib.enums import cudnnBackendAttributeName_t as Attr

# Public enum name -> the attribute type its values are set with (the C enums' are in
# marshal.ELEMENT).
_PUBLIC_ENUM_TYPES = {
    "data_type": "CUDNN_TYPE_DATA_TYPE", "heur_mode": "CUDNN_TYPE_HEUR_MODE", "knob_type": "CUDNN_TYPE_KNOB_TYPE",
    "numerical_note": "CUDNN_TYPE_NUMERICAL_NOTE", "behavior_note": "CUDNN_TYPE_BEHAVIOR_NOTE",
    "layout_type": "CUDNN_TYPE_LAYOUT_TYPE", "convolution_mode": "CUDNN_TYPE_CONVOLUTION_MODE",
    "pointwise_mode": "CUDNN_TYPE_POINTWISE_MODE", "reduction_mode": "CUDNN_TYPE_REDUCTION_OPERATOR_TYPE",
    "tensor_reordering": "CUDNN_TYPE_TENSOR_REORDERING_MODE", "resample_mode": "CUDNN_TYPE_RESAMPLE_MODE",
    "padding_mode": "CUDNN_TYPE_PADDING_MODE", "norm_mode": "CUDNN_TYPE_NORM_MODE",
    "norm_forward_phase": "CUDNN_TYPE_NORM_FWD_PHASE", "rng_distribution": "CUDNN_TYPE_RNG_DISTRIBUTION",
    "reshape_mode": "CUDNN_TYPE_RESHAPE_MODE",
}
_TYPE_OF_CLASS: dict[type, int] = {}  # Python type -> attribute type (0: none), filled as types are seen


def _enum_attribute_type(cls: type) -> int:
    """The attribute type (as an int) that values of ``cls`` are set as when it is one of our
    enums (C or public), else 0. Found by the class's name, so no other enum gets built."""
    found = _TYPE_OF_CLASS.get(cls)
    if found is None:
        found = 0
        name = getattr(cls, "__name__", "")
        if getattr(cls, "__module__", None) == enums.__name__ and getattr(enums, name, None) is cls:
            type_name = _PUBLIC_ENUM_TYPES.get(name)
            attr_type = AttrType[type_name] if type_name else marshal.enum_attribute_types().get(name)
            found = int(attr_type) if attr_type is not None else 0
        _TYPE_OF_CLASS[cls] = found
    return found


def _type_of_enum(cls: type) -> AttrType:
    """The attribute type values of enum ``cls`` are set with (KeyError if none)."""
    found = _enum_attribute_type(cls)
    if not found:
        raise KeyError(cls)
    return AttrType(found)


Value = Union[int, float, bool, IntEnum, "Descriptor", Fraction, str, bytes]


def type_label(desc_type: DescType) -> str:
    """CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR -> 'CONVOLUTION_FORWARD operation'."""
    name = desc_type.name.removeprefix("CUDNN_BACKEND_").removesuffix("_DESCRIPTOR")
    if name.startswith("OPERATION_"):
        return f"{name.removeprefix('OPERATION_')} operation"
    return f"{name} descriptor"


def attr_label(attr: Attr | int) -> str:
    return attributes.name(attr) or f"attribute {int(attr)}"


def _coerce_enum(cls: type[IntEnum], value: Any) -> IntEnum:
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value]
        except KeyError:
            raise ValueError(f"unknown {cls.__name__} name {value!r}") from None
    return cls(value)


class Descriptor:
    """One backend descriptor. ``label`` names the user's thing in error messages."""

    __slots__ = ("_ptr", "type", "label", "finalized", "_children", "_holders", "_closing",
                 "_finalizer", "__weakref__")

    def __init__(self, desc_type: DescType | int | str, label: str = "") -> None:
        self.type = _coerce_enum(DescType, desc_type)
        self.label = label
        self.finalized = False
        self._children: list[Descriptor] = []
        self._holders = 0
        self._closing = False
        status, ptr = marshal.create_descriptor(int(self.type))
        if status:
            raise_status(status, self._context("creating"))
        self._ptr: int = ptr
        self._finalizer = weakref.finalize(self, release.later, _destroy, self._ptr, self._children)
        _live[0] += 1

    # -- identity and lifetime ------------------------------------------------------------

    @property
    def ptr(self) -> int:
        """The C pointer; raises DescriptorClosedError after close()."""
        if self._closing:
            raise DescriptorClosedError(f"{self._what()} was used after close()")
        return self._ptr

    @property
    def closed(self) -> bool:
        """Whether close() was called (the C descriptor may live on while a parent holds it)."""
        return self._closing

    @property
    def destroyed(self) -> bool:
        """Whether the C descriptor has been destroyed."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Destroy the C descriptor (deferred while an open parent still holds it)."""
        if self._closing:
            return
        self._closing = True
        if self._holders == 0:
            release.now(self._finalizer)

    def __enter__(self) -> Descriptor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _what(self) -> str:
        return f"{self.label}: {type_label(self.type)}" if self.label else type_label(self.type)

    def _context(self, doing: str, attr: Attr | int | None = None) -> str:
        where = f"{self.label}: " if self.label else ""
        text = f"{where}{doing} {type_label(self.type)}"
        return f"{text} ({attr_label(attr)})" if attr is not None else text

    def __repr__(self) -> str:
        state = "closed" if self._closing else ("finalized" if self.finalized else "open")
        label = f" {self.label!r}" if self.label else ""
        return f"<Descriptor {self.type.name}{label} {state}>"

    # -- attributes -----------------------------------------------------------------------

    def set(self, attr: Attr | int | str, values: Value | Sequence[Value],
            attr_type: AttrType | int | str | None = None) -> Descriptor:
        """Set one attribute (a value or a sequence); returns self for chaining."""
        if type(attr) is not int or attr not in attributes.VALUES:
            attr = attributes.attribute_id(attr)  # raises for an attribute the headers do not have
        ptr = self._ptr if not self._closing else self.ptr  # .ptr raises
        if self.finalized:
            raise DescriptorClosedError(
                f"{self._what()} is finalized; {attr_label(attr)} can no longer be set")
        fast = _plain_type(values, attr_type)  # ints, bools, enums, descriptors: most of a graph's attributes
        if fast:
            items = values if type(values) is list or type(values) is tuple else (values,)
            if fast == _DESCRIPTOR:
                return self._set_descriptors(ptr, attr, items)
            try:
                status = marshal.set_plain(ptr, attr, fast, items)
            except OverflowError as exc:
                raise TypeError(f"{self._context('setting', attr)} as {AttrType(fast).name}: {exc}") from None
            if status:
                raise_status(status, lambda: self._context("setting", attr))
            return self
        items = _as_list(values)
        if attr_type is None:
            attr_type = _infer_type(items, lambda: self._context("setting", attr))
        attr_type = _coerce_enum(AttrType, attr_type)
        array, count = _to_array(items, attr_type, lambda: self._context("setting", attr))
        status = marshal.set_attribute(ptr, int(attr), attr_type, array, count)
        if status:
            raise_status(status, lambda: self._context("setting", attr))
        if attr_type == AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR:
            for child in items:
                child._holders += 1
                self._children.append(child)
        return self

    def _set_descriptors(self, ptr: int, attr: int, children: Sequence[Descriptor]) -> Descriptor:
        """`set`'s fast path for descriptor values: each child is held until this one is released."""
        status = marshal.set_plain(ptr, attr, _DESCRIPTOR, [d.ptr for d in children])
        if status:
            raise_status(status, lambda: self._context("setting", attr))
        for child in children:
            child._holders += 1
            self._children.append(child)
        return self

    def get(self, attr: Attr | int | str, attr_type: AttrType | int | str,
            descriptor_type: DescType | int | str | None = None) -> Any:
        """Read a one-element attribute as a Python value (int, float, enum, Descriptor)."""
        values = self.get_array(attr, attr_type, 1, descriptor_type)
        return values[0] if values else None

    def get_array(self, attr: Attr | int | str, attr_type: AttrType | int | str,
                  count: int | None = None,
                  descriptor_type: DescType | int | str | None = None) -> list[Any]:
        """Read an attribute as a list; ``count=None`` asks the backend how many there are.

        Descriptor-valued attributes need ``descriptor_type``: cuDNN fills descriptors the
        caller created, which come back as new Descriptor objects.
        """
        attr = attributes.attribute_id(attr)
        attr_type = _coerce_enum(AttrType, attr_type)
        ptr = self.ptr

        def context() -> str:  # called only for an error
            return self._context("getting", attr)

        if count is None:
            status, count = marshal.attribute_count(ptr, int(attr), attr_type)
            if status:
                raise_status(status, context)
        if count <= 0:
            return []
        if attr_type == AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR:
            if descriptor_type is None:
                raise TypeError(f"{context()}: descriptor-valued attributes need descriptor_type=")
            out = [Descriptor(descriptor_type, self.label) for _ in range(count)]
            status, filled = marshal.get_descriptors(ptr, int(attr), [d._ptr for d in out])
            if status:
                raise_status(status, context)
            for d in out[filled:]:
                d.close()
            for d in out[:filled]:
                d.finalized = True
            return out[:filled]
        status, values = marshal.get_attribute(ptr, int(attr), attr_type, count)
        if status:
            raise_status(status, context)
        enum_cls = marshal.ELEMENT[attr_type][1]
        return [_to_enum(enum_cls, v) for v in values] if enum_cls is not None else values

    def get_records(self, attr: Attr | int, descriptor_type: DescType | int, capacity: int,
                    fields: Sequence[tuple[Attr, AttrType]], grow: bool = True) -> list[tuple[Any, ...]]:
        """Read a descriptor-valued attribute whose elements are only looked at: per element
        cuDNN fills, its one-element ``fields`` (raw values) as a tuple. ``capacity`` elements
        are offered; with ``grow``, for attributes whose length the backend does not report (an
        engine's knobs, a config's knob choices), twice as many again while all come back.
        The elements are read into bare descriptors that are reused by every such read."""
        attr = attributes.attribute_id(attr)
        desc_type = _coerce_enum(DescType, descriptor_type)
        ptr = self.ptr
        with _scratch_lock:
            while True:
                targets = _scratch_descriptors(desc_type, capacity)
                status, filled = marshal.get_descriptors(ptr, int(attr), targets)
                if status:
                    raise_status(status, lambda: self._context("getting", attr))
                if filled < capacity or not grow:
                    break
                capacity *= 2
            records = []
            for target in targets[:filled]:
                record = []
                for field, field_type in fields:
                    status, values = marshal.get_attribute(target, int(field), field_type, 1)
                    if status:
                        raise_status(status, lambda f=field: self._context("getting", f))  # type: ignore[misc]
                    record.append(values[0] if values else None)
                records.append(tuple(record))
            return records

    def finalize(self) -> Descriptor:
        """Validate and freeze the descriptor (cudnnBackendFinalize); returns self."""
        status = capi.graph.cudnnBackendFinalize(self.ptr)
        if status:
            raise_status(status, lambda: self._context("finalizing"))
        self.finalized = True
        return self


def _plain_type(values: Any, attr_type: Any) -> int:
    """`Descriptor.set`'s fast path: the attribute type (as an int) when ``values`` (one value,
    or a non-empty list or tuple of one type) are plain ints set as INT64, bools as BOOLEAN,
    Descriptors, or members of the enum that ``attr_type`` takes (or implies, when None); 0
    sends everything else the long way."""
    kind = type(values)
    if kind is list or kind is tuple:
        if not values:
            return 0
        kind = type(values[0])
        for v in values:
            if type(v) is not kind:
                return 0
    implied = _PLAIN.get(kind) or _enum_attribute_type(kind)
    return implied if attr_type is None or attr_type == implied else 0


_DESCRIPTOR = int(AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR)


def _to_enum(cls: type[IntEnum], value: int) -> Any:
    try:
        return cls(value)
    except ValueError:  # a value newer than our headers: keep the number
        return value


def _as_list(values: Any) -> list[Any]:
    if isinstance(values, (str, bytes)):
        return [values]
    if isinstance(values, Iterable):
        return list(values)
    return [values]


def _infer_type(items: list[Any], context: Callable[[], str]) -> AttrType:
    if not items:
        raise TypeError(f"{context()}: give attr_type= to set an empty attribute")
    first = items[0]
    if isinstance(first, Descriptor):
        return AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR
    if isinstance(first, bool):
        return AttrType.CUDNN_TYPE_BOOLEAN
    if isinstance(first, IntEnum):
        try:
            return _type_of_enum(type(first))
        except KeyError:
            raise TypeError(f"{context()}: cannot infer the attribute type of {type(first).__name__}; "
                            "give attr_type=") from None
    if isinstance(first, int):
        return AttrType.CUDNN_TYPE_INT64
    if isinstance(first, float):
        return AttrType.CUDNN_TYPE_DOUBLE
    if isinstance(first, (str, bytes)):
        return AttrType.CUDNN_TYPE_CHAR
    if isinstance(first, Fraction):
        return AttrType.CUDNN_TYPE_FRACTION
    if hasattr(first, "__int__") and hasattr(first, "device"):  # a Handle
        return AttrType.CUDNN_TYPE_HANDLE
    raise TypeError(f"{context()}: cannot infer an attribute type for {type(first).__name__}; give attr_type=")


def _to_array(items: list[Any], attr_type: AttrType, context: Callable[[], str]) -> tuple[Any, int]:
    """The C array for ``items``: descriptors by pointer, enum names resolved, kinds checked."""
    enum_cls = marshal.ELEMENT[attr_type][1]
    try:
        if attr_type == AttrType.CUDNN_TYPE_BACKEND_DESCRIPTOR:
            for item in items:
                if not isinstance(item, Descriptor):
                    raise TypeError(f"expected Descriptor values, got {type(item).__name__}")
            items = [d.ptr for d in items]
        elif enum_cls is not None:
            items = [i if isinstance(i, IntEnum) else _coerce_enum(enum_cls, i) for i in items]
        return marshal.pack(items, attr_type)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{context()} as {attr_type.name}: {exc}") from None


def create_raw(desc_type: DescType) -> int:
    """A new C descriptor as a bare address, for hot paths that keep no Python object per
    descriptor (a variant pack for every new set of addresses: Python objects that live a
    while each would feed the cyclic garbage collector). Its owner destroys it with
    `destroy_raw`. Counted in `live_count`."""
    status, ptr = marshal.create_descriptor(int(desc_type))
    if status:
        raise_status(status, f"creating {type_label(desc_type)}")
    _live[0] += 1
    return ptr


def destroy_raw(ptr: int) -> None:
    """Destroy a descriptor made by `create_raw`."""
    _destroy(ptr, [])


class BareDescriptor:
    """Owns a `create_raw` descriptor as an object: no label, children or deferred close; the C
    descriptor is destroyed with the object."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if self.ptr:
            release.later(destroy_raw, self.ptr)  # not here: see `cudnn._lib.release`


_live = [0]  # C descriptors created and not yet destroyed

# Bare descriptors that `Descriptor.get_records` reads elements into, per descriptor type: made
# once, filled again by every read (a config's knob choices would otherwise take dozens of
# descriptors made and destroyed per read). They last as long as the process and are not
# counted in `live_count`.
_scratch: dict[DescType, list[int]] = {}
_scratch_lock = threading.Lock()


def _new_scratch_lock() -> None:
    """In a forked child: a fresh lock (another thread of the parent may have held it at fork)."""
    global _scratch_lock
    _scratch_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_scratch_lock)


def _scratch_descriptors(desc_type: DescType, count: int) -> list[int]:
    """``count`` reusable descriptors of ``desc_type`` (the caller holds ``_scratch_lock``)."""
    pool = _scratch.setdefault(desc_type, [])
    while len(pool) < count:
        status, ptr = marshal.create_descriptor(int(desc_type))
        if status:
            raise_status(status, f"creating {type_label(desc_type)}")
        pool.append(ptr)
    return pool[:count]


def live_count() -> int:
    """How many backend descriptors exist right now (for leak checks)."""
    return _live[0]


def _destroy(ptr: int, children: list[Descriptor]) -> None:
    """A descriptor's release (by close(), or by `release.drain` once it was collected): destroy
    the C descriptor, then release the closed children it held."""
    _live[0] -= 1
    if ptr:
        try:
            capi.graph.cudnnBackendDestroyDescriptor(ptr)
        except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter shutdown)
            pass
    for child in children:
        child._holders -= 1
        if child._holders == 0 and child._closing:
            release.now(child._finalizer)
    children.clear()


# Python value type -> the attribute type `Descriptor.set` sets it as without being told
_PLAIN: dict[type, int] = {int: int(AttrType.CUDNN_TYPE_INT64), bool: int(AttrType.CUDNN_TYPE_BOOLEAN),
                           Descriptor: _DESCRIPTOR}
