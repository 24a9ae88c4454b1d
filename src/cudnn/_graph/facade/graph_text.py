"""``pygraph`` read back: its tensors and nodes, its JSON (what ``str(graph)`` prints), its
structure key, its pictures and the table of its candidate plans. ``pygraph`` is made of this
class; what a first graph does not need is imported by the method that uses it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..._lib import loader
from ..._lib.status import version_string
from ..._version import __version__
from ..build.pipeline import all_tensors, structure_key
from ..model import keywords
from ..model.graph_errors import GraphError
from ..model.json_layout import dumps
from ..model.node import Node
from ..model.tensor import NOT_SET, Tensor
from .graph_state import GraphState

if TYPE_CHECKING:
    from ..build.plan_report import PlanReport

_VERSION_INT = int("".join(f"{int(p):02d}" for p in __version__.split(".")[:3]))


class GraphText(GraphState):
    """The introspection, JSON and pictures of ``pygraph``."""

    def _graph(self) -> Any:
        """This graph as the text stage's functions take it: the whole ``pygraph``, which this
        class is a part of (typed Any here, below the class)."""
        return self

    # -- introspection ----------------------------------------------------------------------

    @property
    def tensors(self) -> dict[str, Tensor]:
        """The graph's tensors by name (a copy); a name several tensors share is left out
        (``find_tensor`` by uid finds those)."""
        from ..text import inspection

        return inspection.by_name(self._nodes)[0]

    def find_tensor(self, name_or_uid: str | int) -> Tensor | None:
        """The tensor named ``name_or_uid`` (a str) or with that uid (an int; uids are assigned at
        build unless given); None if no tensor has it. A name several tensors share raises ValueError."""
        from ..text import inspection

        return inspection.find_tensor(self._nodes, name_or_uid)

    def get_node(self, name: str) -> Node | None:
        """The node called ``name``, or None."""
        return next((n for n in self._nodes if n.name == name), None)

    def get_inputs(self) -> list[Tensor]:
        """The tensors execute binds that no node produces (graph inputs), in node order."""
        from ..text import inspection

        return inspection.inputs(self._nodes)

    def get_outputs(self) -> list[Tensor]:
        """The non-virtual tensors nodes produce (graph outputs), in node order."""
        from ..text import inspection

        return inspection.outputs(self._nodes)

    def inspect(self) -> dict[str, Any]:
        """The graph's structure as a dict: context, nodes (name, type, inputs, outputs, params)
        and tensors by name (dim, stride, dtype, is_virtual, uid)."""
        from ..text import inspection

        return inspection.inspect(self._graph())

    def query_tensor_attributes_of_uid(self, uid: int) -> Tensor:
        """The tensor of this graph with ``uid`` (GraphError if none)."""
        tensors = all_tensors(self._nodes) + [b.tensor for b in self._pipeline.bindings()] \
            if self._pipeline.has_plans() else all_tensors(self._nodes)
        for t in tensors:
            if t.has_uid() and t.get_uid() == uid:
                return t
        raise GraphError(f"no tensor of this graph has uid {uid}")

    def to_json(self) -> dict[str, Any]:
        """The graph as a JSON-ready dict: context, nodes, tensors (what ``str(graph)`` prints)."""
        ctx = self._context
        tensors: dict[str, Any] = {}
        keys: dict[int, str] = {}  # a second tensor of one name is keyed "name#2"
        for t in all_tensors(self._nodes):  # ragged offsets too: the tensors that use them name them
            key, n = t.get_name(), 1
            while key in tensors:
                n += 1
                key = f"{t.get_name()}#{n}"
            keys[id(t)] = key
            tensors[key] = t.to_dict()
        try:
            backend = version_string(loader.report().version)
        except Exception:  # noqa: BLE001 - no loadable libcudnn here: the JSON names no backend version
            backend = None
        return {
            "context": {
                "compute_data_type": None if ctx.compute_data_type == NOT_SET else ctx.compute_data_type.name,
                "intermediate_data_type": None if ctx.intermediate_data_type == NOT_SET
                else ctx.intermediate_data_type.name,
                "io_data_type": None if ctx.io_data_type == NOT_SET else ctx.io_data_type.name,
                "name": self.name,
                "sm_count": -1 if self.sm_count is None else self.sm_count,
            },
            "cudnn_backend_version": backend,
            "cudnn_frontend_version": _VERSION_INT,
            "json_version": "1.0",
            "nodes": [node.to_json(keys) for node in self._nodes],
            "tensors": tensors,
        }

    def __str__(self) -> str:
        return dumps(self.to_json())

    __repr__ = __str__

    def key(self) -> int:
        """A stable 63-bit hash of what the graph computes (ops, attributes, shapes, types);
        names do not enter it, so equal graphs built by different code share plans."""
        return structure_key(self._nodes, self._context, self.sm_count)

    # -- pictures and the plan report ---------------------------------------------------------

    def to_dot(self, expand: bool = False) -> str:
        """The graph as Graphviz DOT text: ops and the tensors bound at execute as nodes,
        virtual tensors as dashed edges labelled with name, dims and type. ``expand=True``
        draws composites (attention, norms that expand) as the primitive ops they become."""
        from ..text import diagram

        return diagram.from_graph(self._graph(), expand).dot()

    def save_picture(self, path: str, expand: bool = False) -> str:
        """Draw the graph into ``path``: ``.svg`` (drawn by cudnn-py, no Graphviz needed) or
        ``.dot`` / ``.gv``; returns the path. ``expand`` as in `to_dot`."""
        from ..text import diagram

        return str(diagram.save(diagram.from_graph(self._graph(), expand), path))

    def _repr_svg_(self) -> str:
        """Jupyter shows a graph as its diagram."""
        from ..text import diagram

        return diagram.from_graph(self._graph()).svg()

    def describe_plans(self, report: Sequence[Any] | None = None) -> PlanReport:
        """The candidate plans (after ``create_execution_plans`` or ``build``) as a table: index,
        engine, knobs, notes, workspace, status and, after ``autotune``, the median times (or
        those of ``report``, a table ``autotune`` returned). Prints as text, shows as HTML in Jupyter."""
        from ..build import plan_report

        return plan_report.describe(self._pipeline, report)


# as every public method of pygraph: an unknown keyword is refused by name
keywords.name_unknown_keywords(GraphText, "pygraph")
