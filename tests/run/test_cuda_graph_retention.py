"""``pygraph(cuda_graph_retention=...)`` reaches cuDNN: from 9.28 the value given is set on every
execution plan the graph builds (CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION, before
finalization, also on a plan restored from serialized data); below 9.28, where the attribute
does not exist, nothing is set and get_cuda_graph_retention still reports the value asked for.
Without a GPU: the loaded cuDNN's version is the loader's report, and the plan descriptors are
real (libcudnn takes their attributes; nothing is finalized)."""

from __future__ import annotations

from typing import Any

import pytest

import cudnn
from cudnn._graph.build import pipeline as pipeline_module
from cudnn._graph.build.pipeline import Pipeline
from cudnn._graph.plans.candidates import Candidate
from cudnn._lib.enums import cudnnBackendAttributeName_t as Attr
from cudnn._lib.enums import cudnnBackendAttributeType_t as AttrType
from cudnn._lib.enums import cudnnBackendDescriptorType_t as DescType
from cudnn.backend import descriptor
from cudnn.backend import plan as backend_plan
from cudnn.backend.descriptor import Descriptor

RETENTION = Attr.CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION
NONE, PER_GRAPH = cudnn.cuda_graph_retention.NONE, cudnn.cuda_graph_retention.PER_GRAPH


@pytest.fixture
def version(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set the loaded cuDNN's version as the pipeline reads it."""
    real = pipeline_module.loader.report()

    def set_version(v: int) -> None:
        monkeypatch.setattr(pipeline_module.loader, "report", lambda: real.replace(version=v))
    monkeypatch.delenv("CUDNN_CUDA_GRAPH_RETENTION", raising=False)
    return set_version


@pytest.fixture
def attributes_set(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any, Any]]:
    """(attribute, value, type) of every Descriptor.set, each passed on to the real one."""
    seen: list[tuple[Any, Any, Any]] = []
    real = descriptor.Descriptor.set

    def spy(self: Descriptor, attr: Any, values: Any, attr_type: Any = None) -> Descriptor:
        seen.append((attr, values, attr_type))
        return real(self, attr, values, attr_type)

    monkeypatch.setattr(descriptor.Descriptor, "set", spy)
    return seen


def relu_graph(**kw: Any) -> cudnn.pygraph:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT, **kw)
    g.relu(g.tensor(name="x", dim=[8, 8]), name="r").set_output(True)
    g.validate()
    return g


def retention_set(seen: list[tuple[Any, Any, Any]]) -> list[tuple[Any, Any]]:
    return [(values, attr_type) for attr, values, attr_type in seen if attr == RETENTION]


@pytest.mark.parametrize("given, want", [(NONE, 1), (PER_GRAPH, 0), ("none", 1)])
def test_the_value_given_is_the_plans_from_9_28(version: Any, given: Any, want: int) -> None:
    g = relu_graph(cuda_graph_retention=given)  # a pipeline refers to its graph weakly: the test holds it
    version(92800)
    assert Pipeline(g).plan_retention() == want
    version(93000)
    assert Pipeline(g).plan_retention() == want


@pytest.mark.parametrize("v", [91900, 92700])
def test_below_9_28_nothing_is_set_and_the_value_is_still_reported(version: Any, v: int) -> None:
    version(v)
    g = relu_graph(cuda_graph_retention=NONE)
    assert Pipeline(g).plan_retention() is None
    assert g.get_cuda_graph_retention() is NONE


def test_without_a_value_cuda_decides(version: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, the plan carries no retention: cuDNN reads CUDNN_CUDA_GRAPH_RETENTION itself, the
    rule get_cuda_graph_retention reports by."""
    version(92800)
    monkeypatch.setenv("CUDNN_CUDA_GRAPH_RETENTION", "none")
    g = relu_graph()
    assert Pipeline(g).plan_retention() is None and g.get_cuda_graph_retention() is NONE


@pytest.mark.parametrize("v, given, want", [(92800, NONE, [(1, AttrType.CUDNN_TYPE_CUDA_GRAPH_RETENTION)]),
                                            (92800, PER_GRAPH, [(0, AttrType.CUDNN_TYPE_CUDA_GRAPH_RETENTION)]),
                                            (92800, None, []), (91900, NONE, [])])
def test_a_candidate_builds_its_plan_descriptor_with_the_graphs_retention(
        version: Any, attributes_set: list[tuple[Any, Any, Any]], v: int, given: Any, want: list[Any]) -> None:
    """Through the plan set to the EXECUTION_PLAN descriptor cuDNN is given (set before the
    engine config; the descriptor is not finalized here)."""
    version(v)
    g = relu_graph(cuda_graph_retention=given)
    p = Pipeline(g)
    config = Descriptor(DescType.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "cfg")
    cand = Candidate(config, 7, {}, source="manual")  # engine and knobs given: nothing read from the config
    p.add_manual(cand)
    assert p.plans().all[-1] is cand and cand.retention == (None if not want else want[0][0])
    plan = cand.start_build(0, "relu graph")
    assert plan is not None and not plan.finalized and cand.error is None
    assert retention_set(attributes_set) == want
    order = [attr for attr, _, _ in attributes_set]
    if want:
        assert order.index(RETENTION) < order.index(Attr.CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)
    plan.close()
    config.close()


def test_the_heuristics_candidates_get_the_graphs_retention(version: Any) -> None:
    version(92800)
    g = relu_graph(cuda_graph_retention=NONE)
    p = Pipeline(g)
    plans = p.planset()
    assert plans.retention == 1
    config = Descriptor(DescType.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "cfg")
    plans.add([config], "A")
    assert [c.retention for c in plans.all] == [1]
    config.close()


def test_a_plan_restored_from_its_json_is_given_the_retention(attributes_set: list[tuple[Any, Any, Any]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan JSON does not hold the retention (it describes the process using the plan): it is
    set on the restored descriptor before finalization, and not at all when None."""
    monkeypatch.setattr(Descriptor, "finalize", lambda self: self)  # what finalizing would do is cuDNN's, on a GPU
    for retention, want in ((1, [(1, AttrType.CUDNN_TYPE_CUDA_GRAPH_RETENTION)]), (None, [])):
        attributes_set.clear()
        plan = backend_plan.plan_from_json(0, "{}", "restored", retention=retention)
        assert retention_set(attributes_set) == want
        order = [attr for attr, _, _ in attributes_set]
        assert order[-1] == Attr.CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION
        plan.close()


def test_restoring_a_serialized_plan_passes_the_graphs_retention(version: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnn._graph.records import plan_reuse as plan_store
    from cudnn._graph.records.plan_bytes import PlanRecord

    given: list[Any] = []
    monkeypatch.setattr(plan_store.backend_plan, "plan_from_json",
                        lambda handle, text, label, props=None, kernels=None, retention=None: given.append(retention))
    rec = PlanRecord("eng0", "{}", 0, [], 92800, "GPU", [9, 0])
    for v, want in ((92800, 1), (91900, None)):
        version(v)
        g = cudnn.pygraph(handle=1, cuda_graph_retention=NONE)
        p = Pipeline(g)
        plan_store.plan_from_record(p, rec)
        assert given.pop() == want
