"""Faults without a GPU: damaged, foreign and unreadable plan-cache files, directories that cannot
be written or are full, interrupts while storing or validating, concurrent writers, and use of a
graph after it failed. The only allowed outcomes: the entry is ignored (and logged) and a build
would proceed, or a clear cudnn exception. The GPU half (real builds falling back, interrupts
during build and autotune, destroyed handles) is tests/plans/test_faults_gpu.py.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import cudnn
from cudnn._graph.records.plan_bytes import PlanRecord, TensorRecord
from cudnn._graph.records.plan_cache import PlanCache

SRC = str(Path(__file__).resolve().parents[2] / "src")


def record(name: str = "eng1", pad: int = 0) -> PlanRecord:
    t = TensorRecord(1, "X", [2, 3], [3, 1], "HALF", False, None, "conv_fprop '0'", "X")
    return PlanRecord(name, '{"plan": "' + "x" * pad + '"}', 128, [t], 91900, "NVIDIA H200", [9, 0])


def entry(tmp_path: Path, data: bytes) -> tuple[PlanCache, str]:
    cache = PlanCache(tmp_path, enabled=True)
    key = cache.key("fault")
    path = tmp_path / "plans" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return cache, key


GOOD = record().to_bytes()
DAMAGED = {
    "truncated": GOOD[: len(GOOD) // 2],
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "bit_flipped": GOOD.replace(b'"format"', b'"formbt"'),
    "nested_too_deep": b"[" * 200_000,
    "wrong_types": GOOD.replace(b'"tensors": [', b'"tensors": [7, '),
    "missing_field": GOOD.replace(b'"plan_json"', b'"plan_jsoN"'),
    "other_format_version": GOOD.replace(b'"format_version": 1', b'"format_version": 99'),
    "graph_json": b'{"nodes": [], "tensors": {}}',
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_damaged_entry_is_ignored_and_logged(kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache, key = entry(tmp_path, DAMAGED[kind])
    with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
        assert cache.lookup_disk(key) is None
    assert "ignoring" in caplog.text
    cache.store(key, record(), plan=object())  # type: ignore[arg-type]  # and it is replaced by a good one
    cache.flush()
    assert PlanCache(tmp_path, enabled=True).lookup_disk(key) == record()


def test_entry_from_another_cudnn_parses_and_is_refused_by_check_compatible(tmp_path: Path) -> None:
    """A readable record of another cuDNN: the cache returns it, check_compatible (run by the
    build, which then rebuilds: tests/plans/test_faults_gpu.py) refuses it by version."""
    other = record()
    other.cudnn_version = 90000
    cache, key = entry(tmp_path, other.to_bytes())
    got = cache.lookup_disk(key)
    assert got is not None and got.cudnn_version == 90000
    with pytest.raises(cudnn.SerializationError, match="cuDNN 9.0.0"):
        got.check_compatible(0)


def test_unreadable_entry_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A folder where the file should be: reading fails with an OSError (as an unreadable file
    does for a non-root user), the build goes on; storing over it is logged, not raised."""
    cache = PlanCache(tmp_path, enabled=True)
    key = cache.key("unreadable")
    (tmp_path / "plans" / f"{key}.json").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
        assert cache.lookup_disk(key) is None
        cache.store(key, record(), plan=object())  # type: ignore[arg-type]
        cache.flush()
    assert "cannot read" in caplog.text and "cannot write" in caplog.text
    assert cache.lookup_memory(key) is not None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_entry_without_read_permission_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache, key = entry(tmp_path, GOOD)
    path = tmp_path / "plans" / f"{key}.json"
    path.chmod(0)
    try:
        with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
            assert cache.lookup_disk(key) is None
        assert "cannot read" in caplog.text
    finally:
        path.chmod(0o600)


FULL_DISK = textwrap.dedent("""
    import logging, os, resource, signal, sys
    sys.path.insert(0, {src!r})
    from cudnn._graph.records.plan_cache import PlanCache
    from cudnn._graph.records.plan_bytes import PlanRecord, TensorRecord
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
    t = TensorRecord(1, "X", [2], [1], "HALF", False, None, "n", "X")
    big = PlanRecord("eng", "x" * 4096, 0, [t], 91900, "GPU", [9, 0])
    small = PlanRecord("eng", "x", 0, [t], 91900, "GPU", [9, 0])
    cache = PlanCache({dir!r}, enabled=True)
    cache.store("big", big, plan=object())
    cache.store("small", small, plan=object())
    cache.flush()
    assert cache.lookup_memory("big")[0] == big, "kept in memory"
    print("left:", sorted(os.listdir(os.path.join({dir!r}, "plans"))))
""")


def test_full_disk_is_logged_not_raised_and_leaves_no_partial_file(tmp_path: Path) -> None:
    """A size-limited write (RLIMIT_FSIZE: a write fails with EFBIG, as ENOSPC on a full disk):
    the record too large to write is logged and kept in memory; no temp or partial file stays."""
    out = subprocess.run([sys.executable, "-c", FULL_DISK.format(src=SRC, dir=str(tmp_path))],
                         check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "cannot write" in out.stdout and "File too large" in out.stdout
    assert "left: ['small.json']" in out.stdout  # the big one left nothing behind
    assert PlanCache(tmp_path, enabled=True).lookup_disk("small") is not None


def test_a_record_that_fails_to_serialize_leaves_no_file_and_the_writer_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The writer thread serializes the record: an exception there (even a BaseException) is
    logged, leaves no file, and the next store is written."""
    cache = PlanCache(tmp_path, enabled=True)
    rec = record()

    def interrupted(self: PlanRecord) -> bytes:
        raise KeyboardInterrupt

    monkeypatch.setattr(PlanRecord, "to_bytes", interrupted)
    with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
        cache.store("k", rec, plan=object())  # type: ignore[arg-type]
        cache.flush()
    assert "cannot write" in caplog.text and cache.lookup_memory("k") is not None
    assert not (tmp_path / "plans").exists() or list((tmp_path / "plans").iterdir()) == []
    monkeypatch.undo()
    cache.store("k", rec, plan=object())  # type: ignore[arg-type]
    cache.flush()
    assert PlanCache(tmp_path, enabled=True).lookup_disk("k") == rec


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {src!r})
    from cudnn._graph.records.plan_cache import PlanCache
    from cudnn._graph.records.plan_bytes import PlanRecord, TensorRecord
    cache = PlanCache({dir!r}, enabled=True)
    t = TensorRecord(1, "X", [2], [1], "HALF", False, None, "n", "X")
    for i in range(150):
        cache.store("shared", PlanRecord(f"w{{sys.argv[1]}}-{{i}}", "x" * (i * 97 % 5000), 0, [t], 91900, "GPU",
                                         [9, 0]), plan=object())
""")


def test_concurrent_writers_never_leave_a_torn_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """4 processes rewrite one entry with records of varied sizes while this process reads it:
    every read is a whole record (or none yet); no temp file is left."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(src=SRC, dir=str(tmp_path)), str(n)])
             for n in range(4)]
    reader = PlanCache(tmp_path, enabled=True)
    seen, stop = [0, 0], threading.Event()

    def read() -> None:
        while not stop.is_set():
            rec = reader.lookup_disk("shared")
            seen[rec is not None] += 1

    with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
        thread = threading.Thread(target=read)
        thread.start()
        codes = [p.wait(timeout=120) for p in procs]
        stop.set()
        thread.join()
    assert codes == [0, 0, 0, 0]
    assert "ignoring" not in caplog.text and "cannot read" not in caplog.text, caplog.text
    assert seen[1] > 0, "the reader never saw the entry"
    assert [p.name for p in (tmp_path / "plans").iterdir()] == ["shared.json"]
    last = reader.lookup_disk("shared")
    assert last is not None and last.plan_name.endswith("-149")


# -- graphs -------------------------------------------------------------------------------------

def small_graph() -> tuple[cudnn.pygraph, cudnn.tensor]:
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(name="x", dim=[4, 8], stride=[8, 1])
    y = g.relu(g.add(x, x, name="sum"), name="act")
    y.set_output(True)
    return g, y


def test_keyboard_interrupt_during_validate_leaves_the_graph_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    g, y = small_graph()
    node = g.nodes[1]
    real = type(node).infer
    calls = [0]

    def interrupted(self, context):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 1:
            raise KeyboardInterrupt
        return real(self, context)

    monkeypatch.setattr(type(node), "infer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        g.validate()
    with pytest.raises(cudnn.GraphStateError, match="build"):
        g.execute({}, None)  # nothing half-built to run
    g.validate()  # validating again completes
    assert y.get_dim() == [4, 8] and "act" in str(g)


def test_execute_before_build_is_a_clear_error() -> None:
    g, _ = small_graph()
    with pytest.raises(cudnn.GraphStateError, match="build"):
        g.execute({}, None)
    with pytest.raises(cudnn.GraphStateError):
        g.create_execution_plans([cudnn.heur_mode.A])


def test_interrupted_wrapper_block_leaves_a_failed_graph_with_clear_errors() -> None:
    graph = cudnn.Graph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    with pytest.raises(KeyboardInterrupt), graph:
        x = graph.tensor(name="x", dim=[4, 8], stride=[8, 1])
        graph.relu(x, name="act")
        raise KeyboardInterrupt
    with pytest.raises(cudnn.GraphStateError, match="failed and holds nothing .*KeyboardInterrupt"):
        graph.to_json()
    with pytest.raises(cudnn.GraphStateError, match="failed"):
        graph.relu(x)
    with pytest.raises(cudnn.GraphStateError, match="built once"), graph:
        pass
