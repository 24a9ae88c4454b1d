"""Recording ops for ``cudnn.Graph`` and resolving the names users give to tensors.

While the ``with`` block runs, each op call is recorded: framework tensors (anything with
``__dlpack__``, ``__cuda_array_interface__``, a torch tensor ...) become graph tensors through
``tensor_like``, one per object, and every tensor argument and result is registered under the
names of seed 000:

- ``"node::port"`` for a keyword argument, ``"node::0"`` for the first positional one;
- ``"node::Y"`` (the tensor's own name) for results, ``"node::i"`` for unnamed results;
- unnamed nodes are named ``"op.N"`` (``"conv_fprop.0"``), N counting calls of that op.

A positional argument's name (``"relu.0::0"``) names the node's input, not its result
(``"relu.0::OUT_0"``): ``port_of`` and ``instead`` say so in messages.

``resolve`` turns any reference into the graph tensor: a registered name, a name given with
``set_name``, an int uid (once assigned), a ``cudnn.tensor``, or the very object used to build.
Nothing here needs a GPU or libcudnn.
"""

from __future__ import annotations

import inspect
import numbers
import weakref
from collections.abc import Iterator
from typing import Any

from .._graph.model.graph_errors import GraphError
from .._graph.model.tensor import Tensor
from .._graph.pygraph import pygraph
from ..interop.tensors import is_tensor_like


class UidNotAssigned(GraphError):
    """An int uid that no tensor has yet: uids are assigned when the ``with`` block ends."""


def show(ref: Any) -> str:
    """How a reference reads in a message."""
    if isinstance(ref, str):
        return repr(ref)
    if isinstance(ref, Tensor):
        return f"cudnn.tensor {ref.label()}"
    if isinstance(ref, int) and not isinstance(ref, bool):
        return f"uid {ref}"
    shape = getattr(ref, "shape", None)
    return f"a {type(ref).__module__}.{type(ref).__qualname__}" + (f" of shape {tuple(shape)}" if shape else "")


class Recorder:
    """The names, objects and tensors of one ``cudnn.Graph`` under construction."""

    def __init__(self, graph: pygraph) -> None:
        self.graph = graph
        self.names: dict[str, Tensor] = {}  # registered "node::port" names
        self.first_name: dict[int, str] = {}  # id(tensor) -> the first name registered for it
        self.declared: list[Tensor] = []  # from graph.tensor() / tensor_like()
        self._objects: dict[int, tuple[Any, Tensor]] = {}  # id(object) -> (weakref or object, tensor)
        self._counts: dict[str, int] = {}
        self._signatures: dict[str, inspect.Signature] = {}

    # -- recording --------------------------------------------------------------------------

    def declare(self, t: Tensor) -> Tensor:
        self.declared.append(t)
        return t

    def op(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the pygraph op ``method`` with framework tensors replaced, and register names."""
        fn = getattr(self.graph, method)
        count = self._counts.get(method, 0)
        self._counts[method] = count + 1
        sig = self._signature(method, fn)
        try:
            given = sig.bind(*args, **kwargs).arguments.get("name") if sig is not None else None
        except TypeError as exc:
            raise TypeError(f"{method}(): {exc}") from None
        node = str(given) if given else f"{method}.{count}"
        if any(n.name == node for n in self.graph.nodes):
            raise GraphError(f"{method}: node name {node!r} is already used in this graph; node names must be unique")
        pending: list[tuple[str, Tensor]] = []
        made: dict[int, tuple[Any, Tensor]] = {}
        new_args = [self._convert(a, f"{node}::{i}", pending, made) for i, a in enumerate(args)]
        new_kwargs = {k: self._convert(v, f"{node}::{k}", pending, made) for k, v in kwargs.items()}
        if sig is not None and "name" in sig.parameters:
            position = list(sig.parameters).index("name")
            if position < len(new_args):
                new_args[position] = node
            else:
                new_kwargs["name"] = node
        result = fn(*new_args, **new_kwargs)
        for key, entry in made.items():  # committed only once the op accepted its arguments
            self._remember(key, *entry)
        for name, t in pending:
            self._register(name, t)
        outputs = result if isinstance(result, (list, tuple)) else [result]
        for i, t in enumerate(outputs):
            if isinstance(t, Tensor):
                self._register(t.get_name() or f"{node}::{i}", t)
        return result

    def _signature(self, method: str, fn: Any) -> inspect.Signature | None:
        if method not in self._signatures:
            try:
                self._signatures[method] = inspect.signature(fn)
            except (TypeError, ValueError):  # pragma: no cover - every pygraph op has one
                return None
        return self._signatures[method]

    def _convert(self, value: Any, name: str, pending: list[tuple[str, Tensor]],
                 made: dict[int, tuple[Any, Tensor]]) -> Any:
        """A graph tensor for a framework tensor (or a list of them); anything else unchanged."""
        if isinstance(value, Tensor):
            pending.append((name, value))
            return value
        if isinstance(value, (list, tuple)):
            if not any(isinstance(v, Tensor) or _is_buffer(v) for v in value):
                return value
            items = [self._convert(v, f"{name}[{j}]", pending, made) for j, v in enumerate(value)]
            return type(value)(items) if isinstance(value, tuple) else items
        if not _is_buffer(value):
            return value
        t = self.tensor_of(value) or (made[id(value)][1] if id(value) in made else None)
        if t is None:
            t = self.graph.tensor_like(value).set_name(name)  # the name errors will show
            made[id(value)] = (value, t)
        pending.append((name, t))
        return t

    def _remember(self, key: int, obj: Any, t: Tensor) -> None:
        """Map ``obj`` to ``t`` by identity; weakly where the object allows, so that a dead
        object's id, reused by a new one, never resolves."""
        try:
            ref: Any = weakref.ref(obj, lambda _: self._objects.pop(key, None))
        except TypeError:
            ref = obj  # kept alive: its id stays its own
        self._objects[key] = (ref, t)

    def _register(self, name: str, t: Tensor) -> None:
        other = self.names.setdefault(name, t)
        if other is not t:
            raise GraphError(f"the name {name!r} already refers to another tensor of this graph")
        self.first_name.setdefault(id(t), name)

    def tensor_of(self, obj: Any) -> Tensor | None:
        """The graph tensor made from ``obj`` (by identity), if any."""
        entry = self._objects.get(id(obj))
        if entry is None:
            return None
        ref, t = entry
        held = ref() if isinstance(ref, weakref.ref) else ref
        return t if held is obj else None

    # -- the graph's tensors ----------------------------------------------------------------

    def tensors(self) -> Iterator[Tensor]:
        """Each tensor attached to a node port, once, in node order."""
        seen: set[int] = set()
        for node in self.graph.nodes:
            for t in (*node.inputs.values(), *node.outputs.values()):
                if id(t) not in seen:
                    seen.add(id(t))
                    yield t

    def name_of(self, t: Tensor) -> str:
        """The name messages and dict results use for ``t``."""
        return self.first_name.get(id(t)) or t.get_name() or f"uid {t.get_uid()}"

    def io(self) -> tuple[list[Tensor], list[Tensor]]:
        """The graph's buffers: non-virtual inputs (not graph-carried constants) and outputs."""
        produced = {id(t) for node in self.graph.nodes for t in node.outputs.values()}
        inputs: list[Tensor] = []
        outputs: list[Tensor] = []
        seen: set[int] = set()
        for node in self.graph.nodes:
            for t in node.inputs.values():
                if id(t) in produced or id(t) in seen or t.get_is_virtual() or t.get_value() is not None:
                    continue
                seen.add(id(t))
                inputs.append(t)
            for t in node.outputs.values():
                if not t.get_is_virtual() and id(t) not in seen:
                    seen.add(id(t))
                    outputs.append(t)
        return inputs, outputs

    # -- resolution -------------------------------------------------------------------------

    def resolve(self, ref: Any) -> Tensor:
        """The graph tensor ``ref`` refers to; GraphError (UidNotAssigned for early uids) if none."""
        if isinstance(ref, Tensor):
            if any(t is ref for t in self.tensors()):
                return ref
            why = "declared with graph.tensor() but used by no op" if any(t is ref for t in self.declared) \
                else "not a tensor of this graph"
            raise GraphError(f"{show(ref)} is {why}")
        if isinstance(ref, str):
            return self._by_name(ref)
        if isinstance(ref, int) and not isinstance(ref, bool):
            return self._by_uid(ref)
        t = self.tensor_of(ref)
        if t is not None:
            return t
        if _is_buffer(ref):
            raise GraphError(f"{show(ref)} was not used to build this graph: tensor objects are matched by "
                             "identity (the very object given to an op); refer to others by name")
        raise GraphError(f"cannot refer to a tensor with {show(ref)}: use a name ('node::port'), a uid, "
                         "a cudnn.tensor or an object used to build the graph")

    def _by_name(self, name: str) -> Tensor:
        t = self.names.get(name)
        if t is not None:
            return t
        matches = [t for t in self.tensors() if t.get_name() == name]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise GraphError(f"the name {name!r} is ambiguous: {len(matches)} tensors of this graph have it; "
                             "use 'node::port' names, uids or tensor objects")
        known = sorted(set(self.names) | {t.get_name() for t in self.tensors() if t.get_name()})
        raise GraphError(f"no tensor of this graph is named {name!r}; known names: {known}")

    def port_of(self, ref: Any, t: Tensor) -> str:
        """The node port ``ref`` resolved to: "relu.0's input IN_0"; the node a 'node::port' name
        names is preferred, then the producing node."""
        node_name = ref.split("::")[0] if isinstance(ref, str) and "::" in ref else None
        ports = [(n.name, "output", p) for n in self.graph.nodes for p, u in n.outputs.items() if u is t]
        ports += [(n.name, "input", p) for n in self.graph.nodes for p, u in n.inputs.items() if u is t]
        if not ports:
            return "no node's port"
        node, kind, port = next((x for x in ports if x[0] == node_name), ports[0])
        positional = isinstance(ref, str) and node == node_name and ref.split("::", 1)[1].isdigit()
        why = f" ({ref!r} names its positional argument {ref.split('::', 1)[1]})" \
            if positional and kind == "input" else ""
        return f"{node}'s {kind} {port}{why}"

    def instead(self, ref: Any, t: Tensor, want: str, wanted: list[Tensor]) -> str:
        """What to write instead of ``ref`` where a graph ``want`` ('input' or 'output') is needed:
        the names of that node's tensors of that kind, or '' when none is near."""
        node_name = ref.split("::")[0] if isinstance(ref, str) and "::" in ref else None
        nodes = [n for n in self.graph.nodes if n.name == node_name] or \
            [n for n in self.graph.nodes if any(u is t for u in (*n.inputs.values(), *n.outputs.values()))]
        ids = {id(u) for u in wanted}
        names = [self.name_of(u) for n in nodes[:1]
                 for u in (n.outputs if want == "output" else n.inputs).values() if id(u) in ids]
        if not names:
            return ""
        several = len(names) > 1
        return (f"; {nodes[0].name}'s {want}{'s are' if several else ' is'} {', '.join(repr(n) for n in names)}: "
                f"write {'those' if several else 'that'} in {want}s")

    def _by_uid(self, uid: int) -> Tensor:
        matches = [t for t in self.tensors() if t.has_uid() and t.get_uid() == uid]
        if matches:
            return matches[0]
        assigned = sorted(t.get_uid() for t in self.tensors() if t.has_uid())
        if not assigned or len(assigned) < sum(1 for _ in self.tensors()):
            raise UidNotAssigned(f"no tensor has uid {uid} (uids are assigned when the `with` block ends; "
                                 f"assigned so far: {assigned})")
        raise GraphError(f"no tensor of this graph has uid {uid}; its uids are {assigned}")


def _is_buffer(value: Any) -> bool:
    """A framework tensor the wrapper turns into a graph tensor (not a number, string or enum)."""
    if value is None or isinstance(value, (numbers.Number, str, bytes, slice)):
        return False
    return is_tensor_like(value)
