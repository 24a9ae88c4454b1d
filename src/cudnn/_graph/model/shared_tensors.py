"""Tensors shared between graphs: each graph fills in its own.

A tensor declared in one graph may be used in another (the official frontend accepts it). What
a graph fills in where the user left an attribute unset (inferred dims, strides and data types,
a generated name, a uid) must stay that graph's, or building one graph changes another: a uid
the second assigns collides in the first, a data type the first infers is the second's. The
first live graph that uses a tensor, its home, fills it in place, so that its getters show what
that graph inferred, as for a tensor of one graph. Every other graph works on a copy of what the
user gave (`Tensor.given_copy`), made again at each of its ``validate()`` calls so that what the
user sets later reaches it too; at execute the user's tensor binds to that copy's uid.

A sub-graph whose nodes join a graph (the child pygraph an attention ``score_mod`` callback
builds on) is no graph of its own here: it shares that graph's homes and copies (`joined`), so
the user's tensors it uses are bound at that graph's execute like any other of its tensors.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .tensor import FILLABLE, Tensor, filling

if TYPE_CHECKING:
    from .node import Node

# tensor -> the SharedTensors of its home graph (the first live graph that used it)
_HOME: weakref.WeakKeyDictionary[Tensor, weakref.ref[SharedTensors]] = weakref.WeakKeyDictionary()

# what validate() fills in again; a uid a build assigned stays until the next build assigns afresh
REFILLED = tuple(attr for attr in FILLABLE if attr != "uid")


class SharedTensors:
    """One graph's side of sharing: the tensors it fills in place (those it is home to) and its
    copies of the others. Owned by the graph; the graph's nodes only ever hold its own tensors."""

    def __init__(self) -> None:
        self._copies: dict[int, tuple[Tensor, Tensor]] = {}  # id(user's tensor) -> (it, this graph's copy)
        self._users: dict[int, tuple[Tensor, Tensor]] = {}  # id(copy) -> (it, the user's tensor)
        self._joined: dict[int, Tensor] = {}  # id(user's tensor) -> it: used by joined sub-graphs
        self._ref = weakref.ref(self)

    @staticmethod
    def of(node: Node) -> SharedTensors | None:
        """The sharing of the live graph ``node`` is in (the home of its ports' tensors: the
        user's it is home to, its copies, its nodes' outputs), or None for a node of none."""
        for t in (*node.inputs.values(), *node.outputs.values()):
            home = _HOME.get(t)
            owner = home() if home is not None else None
            if owner is not None:
                return owner
        return None

    def joined(self) -> SharedTensors:
        """The sharing of a sub-graph whose nodes join this graph: this graph's homes and copies
        (the user's tensors its nodes use are this graph's, bound at its execute)."""
        return _Joined(self)

    def claim(self, t: Tensor, take: bool = True) -> bool:
        """Whether this graph is ``t``'s home; with ``take`` it becomes so where no live graph is."""
        home = _HOME.get(t)
        owner = home() if home is not None else None
        if owner is None and take:
            _HOME[t] = self._ref
            return True
        return owner is self

    def take(self, node: Node) -> None:
        """``node``'s ports on this graph's tensors, as the graph adds it. Another graph's output
        is left for `hygiene.adopt` to refuse."""
        done: dict[int, Tensor] = {}
        self._point(node, lambda t: t if t.producer is not None and not self.claim(t)
                    else self._mine(t, done, refresh=False))

    def prepare(self, nodes: Sequence[Node]) -> None:
        """Before validate() infers: tensors this graph is home to go back to what the user gave,
        copies are made again from the user's tensors, every port is on this graph's tensor."""
        done: dict[int, Tensor] = {}
        for node in nodes:
            self._point(node, lambda t: self._mine(t, done, refresh=True))
        # what joined sub-graphs used, the nodes do not reach: made again when they are (as the
        # attention node that calls the sub-graph's callback validates)
        joined, self._joined = self._joined, {}
        for key, user in joined.items():
            if key in done:
                continue
            if self.claim(user, take=False):
                user.forget_filled(REFILLED)
            elif (entry := self._copies.pop(key, None)) is not None:
                del self._users[id(entry[1])]

    def user_tensor(self, t: Tensor) -> Tensor | None:
        """The user's tensor that ``t`` is this graph's copy of (None where ``t`` is no copy)."""
        entry = self._users.get(id(t))
        return None if entry is None else entry[1]

    def note_joined(self, node: Node) -> None:
        """``node`` of a joined sub-graph is in: the user's tensors it reads, for `prepare`."""
        for t in node.inputs.values():
            for x in (t, t.get_ragged_offset()):
                if x is not None:
                    user = self.user_tensor(x)
                    user = x if user is None else user
                    self._joined[id(user)] = user

    # -- helpers ------------------------------------------------------------------------------------

    @staticmethod
    def _point(node: Node, mine: Callable[[Tensor], Tensor]) -> None:
        for ports in (node.inputs, node.outputs):
            for port, t in list(ports.items()):
                own = mine(t)
                if own is not t:
                    ports[port] = own

    def _mine(self, t: Tensor, done: dict[int, Tensor], refresh: bool, take: bool = True) -> Tensor:
        """This graph's tensor for ``t`` (the user's, or a copy of ours standing for it), and
        for its ragged offset; with ``refresh``, as the user gave them. Without ``take`` (a
        tensor reached through a copy) this graph does not become ``t``'s home."""
        user = self.user_tensor(t)
        user = t if user is None else user
        own = done.get(id(user))
        if own is not None:
            return own
        if self.claim(user, take):
            own = user
            if refresh:
                user.forget_filled(REFILLED)
        else:
            own = self._copy(user, refresh)
        done[id(user)] = own
        ragged = own.get_ragged_offset()
        if ragged is not None:
            ours = self._mine(ragged, done, refresh, take=own is user)
            if ours is not ragged:
                with filling([own]):  # seen through our copy: the user's link stays theirs
                    own.set_ragged_offset(ours)
        return own

    def _copy(self, user: Tensor, refresh: bool) -> Tensor:
        """Our copy of ``user`` (a tensor another graph is home to), made again with ``refresh``;
        a uid our build assigned stays until the next build."""
        entry = self._copies.get(id(user))
        old = None if entry is None else entry[1]
        if old is not None and not refresh:
            return old
        copy = user.given_copy()
        if old is not None:
            del self._users[id(old)]
            if old.is_filled("uid") and not copy.has_uid():
                with filling([copy]):
                    copy.set_uid(old.get_uid())
        self._copies[id(user)] = (user, copy)
        self._users[id(copy)] = (copy, user)
        _HOME[copy] = self._ref  # a copy that reaches another graph is copied there in turn
        return copy


class _Joined(SharedTensors):
    """A joined sub-graph's side of sharing: its graph's (``parent``), whose homes and copies its
    nodes' tensors are; it records what they use, for the graph's next `prepare`."""

    def __init__(self, parent: SharedTensors) -> None:
        self.parent = parent

    def claim(self, t: Tensor, take: bool = True) -> bool:
        return self.parent.claim(t, take)

    def take(self, node: Node) -> None:
        self.parent.take(node)
        self.parent.note_joined(node)

    def prepare(self, nodes: Sequence[Node]) -> None:
        """Nothing: what the sub-graph uses is made again as its graph validates."""

    def user_tensor(self, t: Tensor) -> Tensor | None:
        return self.parent.user_tensor(t)

    def joined(self) -> SharedTensors:
        return self.parent.joined()
