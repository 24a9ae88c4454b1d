"""The backend calls a Runner makes, replaced by recorders (no GPU): making a variant pack
(`PackLayout`), destroying one, cudnnBackendExecute, and capturing a pack's execute for
replay. Each test then sees exactly which uid -> address binding would reach cuDNN. Also the
graph most of those tests run: C = A - B."""

from __future__ import annotations

from typing import Any

import pytest

import cudnn
from cudnn._graph.build.pipeline import all_tensors, assign_uids, make_bindings
from cudnn._graph.run import runner as runner_module
from cudnn._graph.run.runner import Runner
from cudnn.backend import plan as backend_plan


class Pack:
    """Stands in for a backend descriptor: an address."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class Replay:
    """Stands in for backend.replay.Replay: records its launches in the backend."""

    def __init__(self, backend: Backend, pack: int) -> None:
        self.backend, self.pack = backend, pack

    def launch(self, handle: int, stream: int | None = None) -> bool:
        if not self.backend.launches:
            return False
        self.backend.replayed.append(self.backend.packs[self.pack])
        self.backend.launch_streams.append(stream)
        return True


class Backend:
    """Records every pack made (address -> its uid -> pointer binding), destroyed, executed,
    captured and replayed. Captures fail (False) unless ``captures`` is set to True or None."""

    def __init__(self) -> None:
        self.packs: dict[int, dict[int, int]] = {}
        self.executed: list[dict[int, int]] = []
        self.layouts: list[tuple[int, ...]] = []
        self.destroyed: list[int] = []
        self.captured: list[dict[int, int]] = []
        self.replayed: list[dict[int, int]] = []
        self.launch_streams: list[int | None] = []  # the stream each replay was given (None: ask cuDNN)
        self.captures: bool | None = False  # what a capture gives: a Replay (True), False, or None (not now)
        self.launches = True  # what a Replay's launch says

    def variant_pack(self, uids: list[int], ptrs: list[int]) -> Pack:
        pack = Pack(len(self.packs) + 1)
        self.packs[pack.ptr] = dict(zip(uids, ptrs))
        return pack

    def layout(self, uids: list[int], label: str = "") -> Any:
        """Stands in for backend_plan.PackLayout: its packs record the binding they would finalize."""
        backend, order = self, list(uids)
        backend.layouts.append(tuple(order))

        class Layout:
            def make(self, ptrs: list[int], workspace: int = 0) -> int:
                return backend.variant_pack(order, ptrs).ptr

            def make_owned(self, ptrs: list[int], workspace: int = 0) -> Pack:
                return backend.variant_pack(order, ptrs)

        return Layout()

    def execute(self, handle: int, plan: int, pack: int) -> int:
        self.executed.append(self.packs[pack])
        return 0

    def capture(self, plan: int, pack: int, handle: int, device: int | None, label: str = "") -> Any:
        """Stands in for backend.replay.capture."""
        self.captured.append(self.packs[pack])
        return Replay(self, pack) if self.captures else self.captures

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make the Runners created from now on (until the test ends) use these recorders."""
        monkeypatch.setattr(backend_plan, "PackLayout", self.layout)
        monkeypatch.setattr(backend_plan, "destroy_pack", self.destroyed.append)
        monkeypatch.setattr(runner_module, "capture", self.capture)

    def runner(self, graph: cudnn.pygraph) -> Runner:
        """A Runner of ``graph``'s tensors whose executes are recorded here."""
        r = Runner("graph", Pack(99), 0, make_bindings(graph.nodes), 1, None)
        r.backend_execute = self.execute
        return r


def sub_graph(shape: tuple[int, ...]) -> tuple[cudnn.pygraph, cudnn.tensor, cudnn.tensor, cudnn.tensor]:
    """C = A - B over float32 tensors of ``shape``, validated, with uids."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A, B = g.tensor(list(shape), name="A"), g.tensor(list(shape), name="B")
    C = g.sub(A, B, name="sub").set_output(True)
    g.validate()
    assign_uids(all_tensors(g.nodes))
    return g, A, B, C
