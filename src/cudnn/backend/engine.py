"""Operation graphs, heuristics, engines, engine configs, knobs and notes.

Each function is one backend concept and a few descriptor calls; the graph layer composes
them. Engine configs come back from heuristics as finalized descriptors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._lib.attributes import A
from .._lib.enums import C_ENUMS, cudnnBackendBehaviorNote_t, cudnnBackendNumericalNote_t, knob_type
from .._lib.enums import cudnnBackendAttributeType_t as T
from .._lib.enums import cudnnBackendDescriptorType_t as D
from .descriptor import Descriptor
from .handle import Handle

knob_type_enum = knob_type  # the constructor's parameter of the documented name shadows the enum


def operation_graph(handle: Handle | int, operations: Sequence[Descriptor], label: str = "",
                    dynamic_shape: bool = False, override_shape: bool = False) -> Descriptor:
    """A finalized OPERATIONGRAPH of ``operations`` (finalized operation descriptors).
    ``dynamic_shape`` lets plans share compiled kernels through a kernel cache;
    ``override_shape`` lets execute override tensor shapes (cuDNN >= 9.21, checked by the caller).
    A ``handle`` of 0 sets none (a build for described device properties)."""
    graph = Descriptor(D.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, label)
    if int(handle):
        graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_HANDLE, int(handle), T.CUDNN_TYPE_HANDLE)
    graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_OPS, list(operations))
    if dynamic_shape:
        graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, True)
    if override_shape:
        graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED, True)
    return graph.finalize()


def engine_count(op_graph: Descriptor) -> int:
    """How many engines the backend has for this operation graph (global indices 0..n-1)."""
    return int(op_graph.get(A.CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, T.CUDNN_TYPE_INT64))


def heuristics(op_graph: Descriptor, mode: int, sm_count: int | None = None, label: str = "",
               device_property: Descriptor | None = None) -> Descriptor:
    """A finalized ENGINEHEUR of ``mode`` for the device ``device_property`` describes when given
    (a DEVICEPROP descriptor); `ranked_configs` reads what it ranked."""
    heur = Descriptor(D.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, label)
    heur.set(A.CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph)
    heur.set(A.CUDNN_ATTR_ENGINEHEUR_MODE, int(mode), T.CUDNN_TYPE_HEUR_MODE)
    if device_property is not None:
        heur.set(A.CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, device_property)
    if sm_count is not None and sm_count > 0:
        heur.set(A.CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, int(sm_count), T.CUDNN_TYPE_INT32)
    return heur.finalize()


def ranked_configs(heur: Descriptor, count: int | None = None) -> list[Descriptor]:
    """The first ``count`` (None: all) engine configs a finalized ENGINEHEUR ranks, as finalized
    ENGINECFG descriptors. cuDNN makes each config as it is read (tens of microseconds each, a
    fused conv has dozens), so a caller that needs only the best asks for one."""
    return heur.get_array(A.CUDNN_ATTR_ENGINEHEUR_RESULTS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                          D.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)


def heuristic_configs(op_graph: Descriptor, mode: int, sm_count: int | None = None,
                      label: str = "", device_property: Descriptor | None = None) -> list[Descriptor]:
    """Every engine config the heuristic ``mode`` ranks, best first (finalized ENGINECFG descriptors)."""
    heur = heuristics(op_graph, mode, sm_count, label, device_property)
    try:
        return ranked_configs(heur)
    finally:
        heur.close()


def engine(op_graph: Descriptor, global_index: int, sm_count: int | None = None,
           label: str = "", device_property: Descriptor | None = None) -> Descriptor:
    """A finalized ENGINE by global index (for the described device when ``device_property`` is given)."""
    eng = Descriptor(D.CUDNN_BACKEND_ENGINE_DESCRIPTOR, label)
    eng.set(A.CUDNN_ATTR_ENGINE_OPERATION_GRAPH, op_graph)
    eng.set(A.CUDNN_ATTR_ENGINE_GLOBAL_INDEX, int(global_index))
    if device_property is not None:
        eng.set(A.CUDNN_ATTR_ENGINE_DEVICEPROP, device_property)
    if sm_count is not None and sm_count > 0:
        eng.set(A.CUDNN_ATTR_ENGINE_SM_COUNT_TARGET, int(sm_count), T.CUDNN_TYPE_INT32)
    return eng.finalize()


def engine_config(eng: Descriptor, knobs: dict[int, int] | None = None, label: str = "") -> Descriptor:
    """A finalized ENGINECFG of ``eng`` with the given knob choices (knob type -> value)."""
    cfg = Descriptor(D.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, label)
    cfg.set(A.CUDNN_ATTR_ENGINECFG_ENGINE, eng)
    if knobs:
        choices = []
        for knob, value in knobs.items():
            choice = Descriptor(D.CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, label)
            choice.set(A.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, int(knob), T.CUDNN_TYPE_KNOB_TYPE)
            choice.set(A.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, int(value))
            choices.append(choice.finalize())
        cfg.set(A.CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, choices)
    return cfg.finalize()


def config_engine(cfg: Descriptor) -> Descriptor:
    """The ENGINE descriptor an engine config was made from."""
    return cfg.get(A.CUDNN_ATTR_ENGINECFG_ENGINE, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, D.CUDNN_BACKEND_ENGINE_DESCRIPTOR)


def config_engine_index(cfg: Descriptor) -> int:
    """The global index of an engine config's engine (read without an ENGINE object of its own)."""
    records = cfg.get_records(A.CUDNN_ATTR_ENGINECFG_ENGINE, D.CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1,
                              [(A.CUDNN_ATTR_ENGINE_GLOBAL_INDEX, T.CUDNN_TYPE_INT64)], grow=False)
    return int(records[0][0])


def global_index(eng: Descriptor) -> int:
    return int(eng.get(A.CUDNN_ATTR_ENGINE_GLOBAL_INDEX, T.CUDNN_TYPE_INT64))


def numerical_notes(eng: Descriptor) -> list[cudnnBackendNumericalNote_t]:
    return eng.get_array(A.CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, T.CUDNN_TYPE_NUMERICAL_NOTE)


def behavior_notes(eng: Descriptor) -> list[cudnnBackendBehaviorNote_t]:
    return eng.get_array(A.CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, T.CUDNN_TYPE_BEHAVIOR_NOTE)


class KnobInfo:
    """One tunable knob of an engine (``cudnn.knob``): the values it takes are
    min_value..max_value by stride.

    The constructor is the documented one, max before min: ``knob(knob_type, max_value,
    min_value, stride)``; the attributes are read-only. ``minimum`` / ``maximum`` are the
    same bounds under the names the plan code uses."""

    __slots__ = ("_max", "_min", "_stride", "_type")
    _type: knob_type | int
    _max: int | None
    _min: int | None
    _stride: int | None

    def __init__(self, knob_type: knob_type | int = knob_type.NOT_SET, max_value: int | None = None,
                 min_value: int | None = None, stride: int | None = None) -> None:
        if isinstance(knob_type, bool) or not isinstance(knob_type, int):
            raise TypeError(f"knob: knob_type: expected a cudnn.knob_type, got {knob_type!r}")
        try:
            kind: int = knob_type_enum(int(knob_type))  # a knob_type member (an int)
        except ValueError:
            kind = int(knob_type)  # a knob of a newer cuDNN than the generated enum knows
        object.__setattr__(self, "_type", kind)
        for slot, arg, value in (("_max", "max_value", max_value), ("_min", "min_value", min_value),
                                 ("_stride", "stride", stride)):
            if value is not None and (isinstance(value, bool) or not hasattr(value, "__index__")):
                raise TypeError(f"knob: {arg}: expected an int or None, got {value!r}")
            object.__setattr__(self, slot, None if value is None else int(value))
        if max_value is not None and min_value is not None and int(min_value) > int(max_value):
            raise ValueError(f"knob: min_value {min_value} is above max_value {max_value} "
                             "(the documented order is knob(knob_type, max_value, min_value, stride))")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cudnn.knob attributes are read-only (tried to set {name!r})")

    @property
    def type(self) -> knob_type | int:
        """The knob's type (a cudnn.knob_type, or an int for a knob newer than the enum)."""
        return self._type

    @property
    def max_value(self) -> int | None:
        """The largest value the knob takes (None if unknown)."""
        return self._max

    @property
    def min_value(self) -> int | None:
        """The smallest value the knob takes (None if unknown)."""
        return self._min

    @property
    def stride(self) -> int | None:
        """The step between the values the knob takes (None if unknown)."""
        return self._stride

    @property
    def minimum(self) -> int:
        """``min_value`` under the name the plan code uses."""
        return 0 if self._min is None else self._min

    @property
    def maximum(self) -> int:
        """``max_value`` under the name the plan code uses."""
        return 0 if self._max is None else self._max

    def allows(self, value: int) -> bool:
        """Whether ``value`` is one the knob takes (within its bounds, on its stride)."""
        step = max(self._stride or 1, 1)
        return self.minimum <= value <= self.maximum and (value - self.minimum) % step == 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KnobInfo):
            return NotImplemented
        return (int(self._type), self._max, self._min, self._stride) == \
            (int(other._type), other._max, other._min, other._stride)

    def __hash__(self) -> int:
        return hash((int(self._type), self._max, self._min, self._stride))

    def __repr__(self) -> str:
        """The official JSON form: {"knob_type":"TILE_M","max_value":8,"min_value":1,"stride":1}."""
        return json.dumps({"knob_type": getattr(self._type, "name", self._type), "max_value": self._max,
                           "min_value": self._min, "stride": self._stride}, separators=(",", ":"))


def knob_infos(eng: Descriptor) -> list[KnobInfo]:
    """The tunable knobs of an engine (type, bounds, stride)."""
    records = eng.get_records(A.CUDNN_ATTR_ENGINE_KNOB_INFO, D.CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, _knob_slots(),
                              [(A.CUDNN_ATTR_KNOB_INFO_TYPE, T.CUDNN_TYPE_KNOB_TYPE),
                               (A.CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, T.CUDNN_TYPE_INT64),
                               (A.CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, T.CUDNN_TYPE_INT64),
                               (A.CUDNN_ATTR_KNOB_INFO_STRIDE, T.CUDNN_TYPE_INT64)])
    return [KnobInfo(int(t), max_value=int(hi), min_value=int(lo), stride=int(step)) for t, hi, lo, step in records]


def knob_choices(cfg: Descriptor) -> dict[int, int]:
    """Knob type -> value chosen in an engine config."""
    records = cfg.get_records(A.CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, D.CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                              _knob_slots(), [(A.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, T.CUDNN_TYPE_KNOB_TYPE),
                                              (A.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, T.CUDNN_TYPE_INT64)])
    return {int(t): int(v) for t, v in records}


def _knob_slots() -> int:
    """How many knob descriptors to offer when reading an engine's knobs or a config's choices:
    one per knob type. cuDNN answers a count query for these attributes with 0, so a caller that
    asks first reads no knobs at all."""
    return C_ENUMS["cudnnBackendKnobType_t"]["CUDNN_KNOB_TYPE_COUNTS"]  # the table: no enum is built
