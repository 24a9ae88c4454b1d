"""Operation graphs, heuristics, engines, engine configs, knobs and notes.

Each function is one backend concept and a few descriptor calls; the graph layer composes
them. Engine configs come back from heuristics as finalized descriptors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._lib.enums import cudnnBackendAttributeName_t as A
from .._lib.enums import cudnnBackendAttributeType_t as T
from .._lib.enums import cudnnBackendBehaviorNote_t, cudnnBackendKnobType_t, cudnnBackendNumericalNote_t
from .._lib.enums import cudnnBackendDescriptorType_t as D
from .descriptor import Descriptor
from .handle import Handle


def operation_graph(handle: Handle | int, operations: Sequence[Descriptor], label: str = "",
                    dynamic_shape: bool = False) -> Descriptor:
    """A finalized OPERATIONGRAPH of ``operations`` (finalized operation descriptors).
    ``dynamic_shape`` lets plans share compiled kernels through a kernel cache."""
    graph = Descriptor(D.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, label)
    graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_HANDLE, int(handle), T.CUDNN_TYPE_HANDLE)
    graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_OPS, list(operations))
    if dynamic_shape:
        graph.set(A.CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, True)
    return graph.finalize()


def engine_count(op_graph: Descriptor) -> int:
    """How many engines the backend has for this operation graph (global indices 0..n-1)."""
    return int(op_graph.get(A.CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, T.CUDNN_TYPE_INT64))


def heuristic_configs(op_graph: Descriptor, mode: int, sm_count: int | None = None,
                      label: str = "") -> list[Descriptor]:
    """Engine configs ranked by the heuristic ``mode`` (finalized ENGINECFG descriptors)."""
    heur = Descriptor(D.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, label)
    heur.set(A.CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph)
    heur.set(A.CUDNN_ATTR_ENGINEHEUR_MODE, int(mode), T.CUDNN_TYPE_HEUR_MODE)
    if sm_count is not None and sm_count > 0:
        heur.set(A.CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, int(sm_count), T.CUDNN_TYPE_INT32)
    heur.finalize()
    configs = heur.get_array(A.CUDNN_ATTR_ENGINEHEUR_RESULTS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             None, D.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
    heur.close()
    return configs


def engine(op_graph: Descriptor, global_index: int, sm_count: int | None = None,
           label: str = "") -> Descriptor:
    """A finalized ENGINE by global index."""
    eng = Descriptor(D.CUDNN_BACKEND_ENGINE_DESCRIPTOR, label)
    eng.set(A.CUDNN_ATTR_ENGINE_OPERATION_GRAPH, op_graph)
    eng.set(A.CUDNN_ATTR_ENGINE_GLOBAL_INDEX, int(global_index))
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


def global_index(eng: Descriptor) -> int:
    return int(eng.get(A.CUDNN_ATTR_ENGINE_GLOBAL_INDEX, T.CUDNN_TYPE_INT64))


def numerical_notes(eng: Descriptor) -> list[cudnnBackendNumericalNote_t]:
    return eng.get_array(A.CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, T.CUDNN_TYPE_NUMERICAL_NOTE)


def behavior_notes(eng: Descriptor) -> list[cudnnBackendBehaviorNote_t]:
    return eng.get_array(A.CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, T.CUDNN_TYPE_BEHAVIOR_NOTE)


@dataclass(frozen=True)
class KnobInfo:
    """One tunable knob of an engine: the values it takes are minimum..maximum by stride.

    ``min_value`` / ``max_value`` are the documented API's names for the bounds."""

    type: cudnnBackendKnobType_t | int
    minimum: int
    maximum: int
    stride: int
    default: int | None = None

    @property
    def min_value(self) -> int:
        return self.minimum

    @property
    def max_value(self) -> int:
        return self.maximum

    def allows(self, value: int) -> bool:
        return self.minimum <= value <= self.maximum and (value - self.minimum) % max(self.stride, 1) == 0


def knob_infos(eng: Descriptor) -> list[KnobInfo]:
    infos = eng.get_array(A.CUDNN_ATTR_ENGINE_KNOB_INFO, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, None,
                          D.CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR)
    out = []
    for info in infos:
        out.append(KnobInfo(
            info.get(A.CUDNN_ATTR_KNOB_INFO_TYPE, T.CUDNN_TYPE_KNOB_TYPE),
            int(info.get(A.CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, T.CUDNN_TYPE_INT64)),
            int(info.get(A.CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, T.CUDNN_TYPE_INT64)),
            int(info.get(A.CUDNN_ATTR_KNOB_INFO_STRIDE, T.CUDNN_TYPE_INT64)),
        ))
        info.close()
    return out


def knob_choices(cfg: Descriptor) -> dict[int, int]:
    """Knob type -> value chosen in an engine config."""
    choices = cfg.get_array(A.CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, None,
                            D.CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)
    out = {}
    for c in choices:
        out[int(c.get(A.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, T.CUDNN_TYPE_KNOB_TYPE))] = int(
            c.get(A.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, T.CUDNN_TYPE_INT64))
        c.close()
    return out
