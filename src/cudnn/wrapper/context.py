"""``cudnn.Graph``: a pygraph that takes real tensors, builds itself, and is called like a function.

::

    with cudnn.Graph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT,
                     inputs=["conv2d::image", "conv2d::weight"], outputs=["conv2d::Y"]) as graph:
        Y = graph.conv_fprop(image=x, weight=w, padding=[1, 1], name="conv2d")
        Y.set_output(True)
    y = graph(x, w)                       # positional, in the order of the io tuples
    out = graph({"conv2d::image": x, "conv2d::weight": w})   # dict; out["conv2d::Y"] allocated

Leaving the block validates, assigns uids and resolves the io tuples (all without a GPU), then
builds with the given heuristics; an error inside the block or while building leaves the Graph
unusable (``state == "failed"``) rather than half-built.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal

from .._graph.build.pipeline import DEFAULT_HEURISTICS, all_tensors, assign_uids
from .._graph.methods.method_table import is_op
from .._graph.model.arguments import as_enum_list
from .._graph.model.graph_errors import ExecutionInputError, GraphError, GraphStateError
from .._graph.model.keywords import name_unknown_keywords, unknown_keyword
from .._graph.model.tensor import Tensor, as_data_type
from .._graph.pygraph import pygraph
from .._lib.enums import data_type, heur_mode
from .calls import OUTPUT_FRAMEWORKS, Executor, IoPlan, OutSpec
from .names import Recorder, show

# pygraph methods that stay reachable through the wrapper; its other methods (build steps,
# execute, plan selection) are the wrapper's job and refused. Ops are pygraph's registered
# op methods (_graph/methods/method_table.py): each adds a node.
_PASS_THROUGH = frozenset({"get_workspace_size", "get_workspace_size_plan_at_index", "serialize", "deserialize",
                           "query_tensor_attributes_of_uid", "to_json", "to_dot", "save_picture",
                           "describe_plans", "find_tensor", "get_node", "get_inputs", "get_outputs", "inspect",
                           "get_cuda_graph_retention"})
_PYGRAPH_PARAMS = inspect.signature(pygraph).parameters
_DATA_TYPES = ("io_data_type", "intermediate_data_type", "compute_data_type")


class Graph:
    """A context manager around a ``cudnn.pygraph`` (see the module docstring)."""

    def __init__(self, *, handle: Any = None, heuristics: Sequence[heur_mode] | None = None,
                 inputs: Sequence[Any] | None = None, outputs: Sequence[Any] | None = None,
                 workspace_alloc: bool = True, output_framework: str = "auto", **kwargs: Any) -> None:
        for what, value in (("inputs", inputs), ("outputs", outputs), ("heuristics", heuristics)):
            if value is not None and not isinstance(value, (list, tuple)):
                raise ValueError(f"cudnn.Graph: {what} must be a list or tuple, got {type(value).__name__}")
        if (inputs is None) != (outputs is None):
            raise ValueError("cudnn.Graph: give both inputs= and outputs=, or neither")
        if output_framework not in OUTPUT_FRAMEWORKS:
            raise ValueError(f"cudnn.Graph: output_framework must be one of {OUTPUT_FRAMEWORKS}, "
                             f"got {output_framework!r}")
        for key in kwargs:
            if key not in _PYGRAPH_PARAMS:
                raise unknown_keyword("cudnn.Graph", key, [*_OWN_PARAMS, *(p for p in _PYGRAPH_PARAMS
                                                                            if p != "handle")])
        for key in _DATA_TYPES:  # what pygraph() would refuse when the block starts, refused now
            if key in kwargs:
                kwargs[key] = as_data_type(kwargs[key], f"cudnn.Graph: {key}")
        self._handle = None if isinstance(handle, str) and handle == "auto" else handle
        self._heuristics = (as_enum_list(heuristics, heur_mode, "cudnn.Graph", "heuristics") if heuristics is not None
                            else list(DEFAULT_HEURISTICS))
        self._kwargs = kwargs
        self._pending_io: tuple[list[Any], list[Any]] | None = \
            (list(inputs), list(outputs)) if inputs is not None and outputs is not None else None
        self._workspace_alloc = bool(workspace_alloc)
        self._output_framework = output_framework
        self._state = "new"  # -> "recording" -> "built" | "failed"
        self._failure = ""
        self._pygraph: pygraph | None = None
        self._recorder: Recorder | None = None
        self._executor: Executor | None = None
        self._io: IoPlan | None = None  # positional calls (set_io_tuples)
        self._all_io: IoPlan | None = None  # dict calls
        self._uids: dict[Any, int] = {}  # dict keys (names, uids) resolved before

    # -- the block ----------------------------------------------------------------------------

    def __enter__(self) -> Graph:
        if self._state != "new":
            raise GraphStateError(f"this cudnn.Graph is {self._state}; a Graph is built once: make a new one")
        self._pygraph = pygraph(handle=self._handle, **self._kwargs)
        self._recorder = Recorder(self._pygraph)
        self._state = "recording"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> Literal[False]:
        if exc_type is not None:
            self._discard(f"the with-block raised {exc_type.__name__}: {exc}")
            return False
        try:
            self._finish()
        except BaseException as error:
            self._discard(f"building raised {type(error).__name__}: {error}")
            raise
        return False

    def _finish(self) -> None:
        """Settle uids and io tuples first (no GPU needed: bad names fail fast), then build."""
        g = self._graph()
        g.validate()
        assign_uids(all_tensors(g.nodes))
        rec = self._rec()
        ins, outs = rec.io()
        self._all_io = self._plan(ins, outs, [rec.name_of(t) for t in ins])
        if self._pending_io is not None:
            self._io = self._io_plan(*self._pending_io)
        self._build_plans()
        self._state = "built"
        self._executor = Executor(g, self._handle, self._output_framework, self._workspace_alloc)

    def _build_plans(self) -> None:
        """The steps that need cuDNN and a GPU."""
        g = self._graph()
        g.build_operation_graph()
        g.create_execution_plans(self._heuristics)
        g.check_support()
        g.build_plans()

    def _discard(self, why: str) -> None:
        self._state, self._failure = "failed", why
        self._pygraph = self._recorder = self._executor = None
        self._io = self._all_io = None
        self._uids = {}

    def _graph(self) -> pygraph:
        if self._pygraph is None:
            raise GraphStateError(self._state_message())
        return self._pygraph

    def _rec(self) -> Recorder:
        if self._recorder is None:
            raise GraphStateError(self._state_message())
        return self._recorder

    def _state_message(self) -> str:
        if self._state == "new":
            return "this cudnn.Graph has no graph yet: record ops inside `with cudnn.Graph(...) as graph:`"
        if self._state == "failed":
            return f"this cudnn.Graph failed and holds nothing ({self._failure}); make a new one"
        return f"this cudnn.Graph is {self._state}"

    # -- recording ----------------------------------------------------------------------------

    def tensor(self, *args: Any, **kwargs: Any) -> Tensor:
        """Declare a graph tensor (``pygraph.tensor``) to use in place of a framework tensor."""
        return self._rec_open().declare(self._graph().tensor(*args, **kwargs))

    def tensor_like(self, *args: Any, **kwargs: Any) -> Tensor:
        """Declare a graph tensor shaped like a framework tensor (``pygraph.tensor_like``)."""
        return self._rec_open().declare(self._graph().tensor_like(*args, **kwargs))

    def _rec_open(self) -> Recorder:
        if self._state != "recording":
            raise GraphStateError(f"ops and tensors are recorded inside `with cudnn.Graph(...) as graph:`; "
                                  f"{self._state_message()}")
        return self._rec()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _PASS_THROUGH:
            return getattr(self._graph(), name)
        if is_op(name):
            def op(*args: Any, **kwargs: Any) -> Any:
                return self._rec_open().op(name, args, kwargs)

            op.__name__ = op.__qualname__ = name
            op.__doc__ = getattr(pygraph, name).__doc__
            return op
        if callable(getattr(pygraph, name, None)):
            raise GraphStateError(f"calling {name} via cudnn.Graph is not allowed: the wrapper validates, builds "
                                  "and executes the graph itself (use cudnn.pygraph for step-by-step control)")
        raise AttributeError(f"cudnn.Graph has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | _PASS_THROUGH | {n for n in dir(pygraph) if is_op(n)})

    # -- inputs and outputs -------------------------------------------------------------------

    def set_io_tuples(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        """Fix the order of positional calls: ``graph(*inputs)`` returns ``outputs``.

        Each entry is a name ("node::port", or one given with set_name), an int uid, a
        cudnn.tensor, or an object used to build the graph. Inside the block they are kept
        and checked when the block ends.
        """
        for what, value in (("inputs", inputs), ("outputs", outputs)):
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"set_io_tuples: {what} must be a list or tuple, got {type(value).__name__}")
        if self._state == "recording":
            self._pending_io = (list(inputs), list(outputs))
            return
        if self._state != "built":
            raise GraphStateError(self._state_message())
        self._io = self._io_plan(inputs, outputs)
        self._executor.forget()  # type: ignore[union-attr]

    def _io_plan(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> IoPlan:
        in_t, out_t = self._check_io(inputs, outputs)
        names = [ref if isinstance(ref, str) else self._rec().name_of(t) for ref, t in zip(inputs, in_t)]
        return self._plan(in_t, out_t, names)

    def _check_io(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[list[Tensor], list[Tensor]]:
        """Resolve and check io tuples: known, distinct, the right kind, and complete."""
        rec = self._rec()
        graph_ins, graph_outs = rec.io()
        kinds = {id(t): "input" for t in graph_ins} | {id(t): "output" for t in graph_outs}
        resolved: dict[str, list[Tensor]] = {"inputs": [], "outputs": []}
        seen: dict[int, str] = {}
        for what, refs in (("inputs", inputs), ("outputs", outputs)):
            for i, ref in enumerate(refs):
                where = f"set_io_tuples: {what}[{i}] ({show(ref)})"
                try:
                    t = rec.resolve(ref)
                except GraphError as exc:
                    raise GraphError(f"{where}: {exc}") from None
                kind = kinds.get(id(t))
                hint = "" if kind == what[:-1] else \
                    rec.instead(ref, t, what[:-1], graph_ins if what == "inputs" else graph_outs)
                if id(t) in seen:
                    raise GraphError(f"{where} names the same tensor as {seen[id(t)]}: {rec.port_of(ref, t)}; "
                                     f"a tensor may appear once{hint}")
                seen[id(t)] = f"{what}[{i}] ({show(ref)})"
                if kind != what[:-1]:
                    raise GraphError(f"{where} is {_kind_text(t, kind)}, not a graph {what[:-1]}: "
                                     f"{rec.port_of(ref, t)}{hint}")
                resolved[what].append(t)
        for what, everything in (("inputs", graph_ins), ("outputs", graph_outs)):
            left = [rec.name_of(t) for t in everything if id(t) not in seen]
            if left:
                raise GraphError(f"set_io_tuples: the graph {what} {left} are missing from {what}; list "
                                 f"every non-virtual {what[:-1]}")
        return resolved["inputs"], resolved["outputs"]

    def _plan(self, ins: list[Tensor], outs: list[Tensor], in_names: list[str]) -> IoPlan:
        rec = self._rec()
        specs = tuple(OutSpec(t.get_uid(), rec.name_of(t), tuple(t.get_dim()), tuple(t.get_stride()),
                              t.get_data_type()) for t in outs)
        for spec in specs:
            if spec.dtype == data_type.NOT_SET:  # pragma: no cover - validate() infers every output type
                raise GraphError(f"output {spec.name} has no data type")
        device_inputs = tuple(i for i, t in enumerate(ins) if not t.get_is_pass_by_value())
        return IoPlan(tuple(t.get_uid() for t in ins), tuple(in_names), specs, device_inputs)

    # -- calls --------------------------------------------------------------------------------

    def __call__(self, *args: Any, handle: Any = None, workspace: Any = None, stream: Any = None) -> Any:
        """``graph(x, w, ...)`` after set_io_tuples, or ``graph({name: tensor, ...})``.

        ``handle``: a cudnn handle to run on, used as given (its stream too); by default the
        Graph's handle, else this thread's handle for the inputs' device set to the inputs'
        framework's current stream. ``stream``: run on this stream instead. ``workspace``: a
        buffer to use instead of the one the Graph keeps.
        """
        executor = self._executor
        if executor is not None and workspace is None:
            known = executor.known.get(tuple(map(id, args)))
            if known is not None:  # the inputs of an earlier call: the short path
                return executor.call_known(known, args, handle, stream)
        io = self._io
        if io is not None and len(args) == len(io.in_uids) and (not args or type(args[0]) is not dict):
            return executor.call(io, args, handle, workspace, stream)  # type: ignore[union-attr]
        if self._state != "built":
            if self._state == "recording":
                raise GraphStateError("the graph is built when the `with` block ends: call it after the block")
            raise GraphStateError(self._state_message())
        if len(args) == 1 and isinstance(args[0], dict):
            return self._executor.call_dict(self._all_io, args[0], self._uid_of,  # type: ignore[union-attr,arg-type]
                                            handle, workspace, stream)
        if io is None:
            raise ExecutionInputError("this graph has no io tuples: call set_io_tuples(inputs, outputs) (or give "
                                      "cudnn.Graph inputs= and outputs=) to call it positionally, or call it "
                                      "with a dict {name: tensor}")
        raise ExecutionInputError(f"this graph takes {len(io.in_uids)} positional inputs {list(io.in_names)}, "
                                  f"got {len(args)}")

    def autotune(self, *args: Any, handle: Any = None, warmup: int = 3, repeats: int = 10) -> Any:
        """Time every candidate plan on these inputs (positional, as in a call) and keep the
        fastest for later calls and for the plan cache; returns the table, fastest first."""
        if self._state != "built":
            raise GraphStateError(self._state_message())
        if self._io is None or len(args) != len(self._io.in_uids):
            raise ExecutionInputError("autotune takes the graph's positional inputs (set_io_tuples first)")
        return self._executor.autotune(self._io, args, handle, warmup, repeats)  # type: ignore[union-attr]

    def _uid_of(self, key: Any) -> int:
        """The uid of a dict key; names and uids are resolved once."""
        if isinstance(key, (str, int)) and not isinstance(key, bool):
            uid = self._uids.get(key)
            if uid is not None:
                return uid
        try:
            t = self._rec().resolve(key)
        except GraphError as exc:
            raise ExecutionInputError(f"dict key {show(key)}: {exc}") from None
        if t.get_is_virtual():
            raise ExecutionInputError(f"dict key {show(key)} is an intermediate (virtual) tensor; it has no buffer")
        if isinstance(key, (str, int)) and not isinstance(key, bool):
            self._uids[key] = t.get_uid()
        return t.get_uid()

    # -- introspection ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """Where the Graph is: "new", "recording" (in the block), "built" or "failed" (holds nothing)."""
        return self._state

    def resolve(self, ref: Any) -> Tensor:
        """The graph tensor ``ref`` refers to, as io tuples and dict calls resolve it: a name, an
        int uid (uids are assigned when the block ends), a cudnn.tensor or an object used to build."""
        return self._rec().resolve(ref)

    @property
    def input_names(self) -> tuple[str, ...] | None:
        """The inputs of positional calls in order (as given, or the tensor's name); None until
        set_io_tuples (or inputs=) is resolved at the end of the block."""
        return None if self._io is None else self._io.in_names

    @property
    def output_names(self) -> tuple[str, ...] | None:
        """The outputs of positional calls in order, by the names dict calls return them under."""
        return None if self._io is None else tuple(o.name for o in self._io.outs)

    @property
    def pygraph(self) -> pygraph:
        """The underlying ``cudnn.pygraph`` (for inspection; build and execute go through the wrapper)."""
        return self._graph()

    def __str__(self) -> str:
        return str(self._pygraph) if self._pygraph is not None else repr(self)

    def __repr__(self) -> str:
        io = "" if self._io is None else f" inputs={list(self._io.in_names)} outputs={[o.name for o in self._io.outs]}"
        return f"<cudnn.Graph {self._state}{io}>"


def _kind_text(t: Tensor, kind: str | None) -> str:
    if kind is not None:
        return f"a graph {kind}"
    if t.get_is_virtual():
        return "an intermediate (virtual) tensor"
    if t.get_value() is not None:
        return "a constant the graph carries"
    return "not an input or output of the graph"


_OWN_PARAMS = [p for p in inspect.signature(Graph).parameters if p != "kwargs"]
name_unknown_keywords(Graph, "cudnn.Graph")
