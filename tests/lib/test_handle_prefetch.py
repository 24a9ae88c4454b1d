"""`backend.handle.prefetch_default_handle` without a GPU: when it starts a helper, what the helper
does (cudnnCreate in the asking thread's context, then cuDNN's engine libraries opened) and how `default_handle` takes,
refuses or replaces what it made. cudnnCreate and the CUDA context calls are stand-ins that
record their calls (the real ones run in tests/lib/test_startup_gpu.py); nothing here reaches
cuDNN or CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.libcudnn_marks import needs_libcudnn

from cudnn import CudnnError
from cudnn._lib import cuda, marshal, release
from cudnn.backend import handle

SRC = str(Path(__file__).resolve().parents[2] / "src")
CONTEXT = 0xC0


class FakeCuda:
    """The calling thread's current context per thread, and each cudnnCreate: the thread that
    called it and the context current there. Handles are 0x5000, 0x5001, ..."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, status: int = 0) -> None:
        self.current: dict[int, int | None] = {threading.get_ident(): CONTEXT}
        self.creates: list[tuple[str, int | None]] = []
        self.destroyed: list[int] = []
        self.opened: list[str] = []  # the threads that opened cuDNN's engine libraries
        self.status = status
        monkeypatch.setattr(cuda, "live_context", lambda: self.current.get(threading.get_ident()))
        monkeypatch.setattr(cuda, "make_current", self.make_current)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)
        monkeypatch.setattr(marshal, "create_handle", self.create)
        monkeypatch.setattr(handle, "_open_engine_libraries",
                            lambda: self.opened.append(threading.current_thread().name))
        graph_calls = SimpleNamespace(cudnnCreate=object(), cudnnDestroy=self.destroyed.append)
        monkeypatch.setattr(handle, "capi", SimpleNamespace(graph=graph_calls))
        # a process of its own: no handle made yet, no prefetch, no default handles
        monkeypatch.setattr(handle, "_prefetched", [False])
        monkeypatch.setattr(handle, "_alive", [0])
        monkeypatch.setattr(handle, "_created", [False])
        monkeypatch.setattr(handle, "_local", threading.local())

    def make_current(self, context: int) -> bool:
        self.current[threading.get_ident()] = context
        return True

    def create(self) -> tuple[int, int]:
        ctx = self.current.get(threading.get_ident())
        self.creates.append((threading.current_thread().name, ctx))
        return (self.status, 0) if self.status else (0, 0x5000 + len(self.creates) - 1)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    return FakeCuda(monkeypatch)


def test_the_helper_makes_the_handle_that_default_handle_takes(fake: FakeCuda) -> None:
    handle.prefetch_default_handle()
    h = handle.default_handle()
    try:
        assert fake.creates == [("cudnn-py handle", CONTEXT)]  # on the helper, in the asker's context
        assert fake.opened == ["cudnn-py handle"]  # then the engine libraries, there too
        assert h.ptr == 0x5000 and h.device == 0 and handle.live_handle_count() == 1
        assert handle.default_handle() is h  # kept as this thread's default handle
        handle.prefetch_default_handle()  # a process with a handle: no second helper
        assert len(fake.creates) == 1
    finally:
        h.close()
    assert fake.destroyed == [0x5000] and handle.live_handle_count() == 0


def test_create_handle_takes_the_handle_made_ahead_and_the_default_is_made_later(fake: FakeCuda) -> None:
    """The graph layer imported, then ``cudnn.create_handle()`` (to pass as ``handle=``): the
    handle made ahead is that one, not a second handle beside it."""
    handle.prefetch_default_handle()
    mine = handle.create_handle()
    later = handle.default_handle()
    try:
        assert mine.ptr == 0x5000 and later.ptr == 0x5001 and later is not mine
        assert [name for name, _ in fake.creates] == ["cudnn-py handle", threading.current_thread().name]
    finally:
        mine.close()
        later.close()


def test_a_context_changed_before_the_build_gets_a_handle_of_its_own(fake: FakeCuda) -> None:
    handle.prefetch_default_handle()
    fake.current[threading.get_ident()] = 0xC1  # e.g. the caller made another context current
    h = handle.default_handle()
    try:
        assert [ctx for _, ctx in fake.creates] == [CONTEXT, 0xC1] and h.ptr == 0x5001
        release.drain()
        assert fake.destroyed == [0x5000]  # the prefetched one, released at a release point
    finally:
        h.close()


def test_a_failed_prefetch_is_made_again_where_it_is_needed_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCuda(monkeypatch, status=4)  # CUDNN_STATUS_INTERNAL_ERROR on every cudnnCreate
    handle.prefetch_default_handle()
    with pytest.raises(CudnnError, match="creating a cuDNN handle"):
        handle.default_handle()
    assert [name for name, _ in fake.creates] == ["cudnn-py handle", threading.current_thread().name]
    assert fake.destroyed == [] and fake.opened == []  # no handle, so no libraries opened ahead either


def test_no_helper_without_a_context_or_once_a_handle_exists(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.current.clear()  # this thread has no current context
    handle.prefetch_default_handle()
    assert fake.creates == [] and getattr(handle._local, "prefetch", None) is None
    fake.current[threading.get_ident()] = CONTEXT
    monkeypatch.setattr(handle, "_alive", [1])  # cudnn.create_handle() was called already
    handle.prefetch_default_handle()
    assert fake.creates == []


def test_the_first_graph_declared_is_the_last_try(fake: FakeCuda) -> None:
    """The graph layer's import asks, and so does the first pygraph(): later graphs do not pay
    for asking the driver again."""
    fake.current.clear()
    handle.prefetch_default_handle()  # the import: no context yet, asked again later
    handle.prefetch_default_handle(last_try=True)  # the first pygraph(): still none
    fake.current[threading.get_ident()] = CONTEXT
    handle.prefetch_default_handle(last_try=True)
    handle.prefetch_default_handle()
    assert fake.creates == []


def test_a_prefetch_never_taken_is_released_when_its_thread_ends(fake: FakeCuda) -> None:
    def declare_only() -> None:
        fake.current[threading.get_ident()] = CONTEXT
        handle.prefetch_default_handle()
        handle._local.prefetch._thread.join()

    t = threading.Thread(target=declare_only)
    t.start()
    t.join()
    del t
    import gc

    gc.collect()
    release.drain()
    assert fake.destroyed == [0x5000]


def test_destroy_all_handles_destroys_one_made_ahead_and_not_taken(fake: FakeCuda) -> None:
    handle.prefetch_default_handle()
    assert handle.destroy_all_handles() == 1 and fake.destroyed == [0x5000]
    h = handle.default_handle()  # the thread's first build after that makes a new one
    try:
        assert h.ptr == 0x5001 and [name for name, _ in fake.creates][1] == threading.current_thread().name
    finally:
        h.close()


def _fresh(code: str) -> Any:
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


FIRST_HANDLE = """
import json, sys, threading
from types import SimpleNamespace
from cudnn._lib import cuda, marshal
from cudnn.backend import handle
made = []
def create():
    made.append(threading.current_thread().name)
    return 0, 0x5000 + len(made) - 1
cuda.live_context = lambda: {context}
cuda.make_current = lambda context: True
cuda.current_device = lambda: 0
marshal.create_handle = create
handle._open_engine_libraries = lambda: None
handle.capi = SimpleNamespace(graph=SimpleNamespace(cudnnCreate=object(), cudnnDestroy=lambda ptr: None))
import cudnn
before = "cudnn._graph.pygraph" in sys.modules
h = cudnn.create_handle()
print(json.dumps({{"made": made, "ptr": h.ptr, "before": before, "after": "cudnn._graph.pygraph" in sys.modules}}))
"""


@pytest.mark.parametrize(("context", "thread"), [("0xC0", "cudnn-py handle"), ("None", "MainThread")])
def test_cudnn_create_handle_imports_the_graph_layer_first(context: str, thread: str) -> None:
    """The official samples' way, a handle made before the first graph: ``cudnn.create_handle()``
    imports the graph layer first. With CUDA live, that import starts the helper and the call
    takes its handle (one cudnnCreate, made while the layer imported); without a context yet
    (cudnnCreate will initialise CUDA), the handle is made on the calling thread."""
    result = _fresh(FIRST_HANDLE.format(context=context))
    assert result["made"] == [thread] and result["ptr"] == 0x5000
    assert result["before"] is False and result["after"] is True


def test_a_process_without_cuda_starts_no_helper_and_opens_no_library() -> None:
    result = _fresh(
        "import json, threading, cudnn\n"
        "g = cudnn.pygraph()\n"
        "names = [t.name for t in threading.enumerate()]\n"
        "maps = open('/proc/self/maps').read() if __import__('sys').platform == 'linux' else ''\n"
        "print(json.dumps({'threads': names, 'libcudnn': 'libcudnn' in maps}))\n"
    )
    assert "cudnn-py handle" not in result["threads"]
    assert result["libcudnn"] is False


@needs_libcudnn
def test_opening_the_engine_libraries_finalizes_one_tensor_and_destroys_it() -> None:
    """The helper's second step against the real libcudnn (no GPU here, so cuDNN fails to open
    the libraries and the finalize reports it): a float tensor of dims [1, 1, 1, 1] is finalized,
    then destroyed, and nothing is raised."""
    result = _fresh(
        "import json, logging, cudnn\n"
        "records = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): records.append(record.getMessage())\n"
        "logging.getLogger('cudnn.libcudnn').addHandler(Keep())\n"
        "cudnn.set_log_level('INFO')\n"
        "from cudnn.backend import handle\n"
        "cudnn.backend_version(); records.clear()\n"
        "handle._open_engine_libraries()\n"
        "calls = [m.split('function ', 1)[1].split('(', 1)[0] for m in records if 'function ' in m]\n"
        "final = [m for m in records if 'cudnnBackendFinalize' in m]\n"
        "print(json.dumps({'calls': calls, 'final': final[0] if final else ''}))\n"
    )
    calls = [c for c in result["calls"] if c.startswith("cudnnBackend")]
    assert calls[0] == "cudnnBackendCreateDescriptor" and calls[-1] == "cudnnBackendDestroyDescriptor"
    assert calls.count("cudnnBackendSetAttribute") >= 5 and "cudnnBackendFinalize" in calls
    final = result["final"]
    assert "CUDNN_BACKEND_TENSOR_DESCRIPTOR" in final and "CUDNN_DATA_FLOAT" in final
    assert "dimA: type=int; val=[1,1,1,1]" in final and "uid: type=int64_t; val=1" in final
