"""The plan cache's storage rules and identity, without a GPU: atomic files, damaged entries, limits."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import cudnn
from cudnn import SerializationError
from cudnn._graph.records.plan_bytes import PlanRecord, TensorRecord
from cudnn._graph.records.plan_cache import PlanCache, default_directory


def _record(name: str = "eng1") -> PlanRecord:
    t = TensorRecord(1, "X", [2, 3], [3, 1], "HALF", False, None, "conv_fprop '0'", "X")
    return PlanRecord(name, '{"plan": 1}', 128, [t], 91900, "NVIDIA H200", [9, 0])


def test_store_then_read_back_from_disk(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    key = cache.key("graph", 1)
    cache.store(key, _record(), plan=object())  # type: ignore[arg-type]
    cache.flush()  # the file is written by the cache's writer thread
    files = list((tmp_path / "plans").iterdir())
    assert [f.name for f in files] == [f"{key}.json"]  # no temp file left behind
    again = PlanCache(tmp_path, enabled=True).lookup_disk(key)
    assert again is not None and again.plan_name == "eng1" and again.tensors[0].dim == [2, 3]


def test_damaged_entries_are_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    key = cache.key("damaged")
    path = tmp_path / "plans" / f"{key}.json"
    path.parent.mkdir(parents=True)
    for junk in (b"{corrupt", b'{"format": "other"}', b'{"format": "cudnn-py-plan", "format_version": 1}'):
        path.write_bytes(junk)
        with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
            assert cache.lookup_disk(key) is None
    assert "ignoring" in caplog.text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_unwritable_directory_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        cache = PlanCache(ro / "sub", enabled=True)
        record, plan = _record(), object()
        with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
            cache.store("k", record, plan=plan)  # type: ignore[arg-type]
            cache.flush()
        assert "cannot write" in caplog.text
        assert cache.lookup_memory("k") == (record, plan)  # still cached in memory
    finally:
        ro.chmod(0o700)


def test_file_in_place_of_the_directory_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    cache = PlanCache(blocker, enabled=True)
    with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
        cache.store("k", _record(), plan=object())  # type: ignore[arg-type]
        cache.flush()
    assert "cannot write" in caplog.text


def test_disabled_cache_stores_nothing(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=False)
    cache.store("k", _record(), plan=object())  # type: ignore[arg-type]
    assert cache.lookup_memory("k") is None and cache.lookup_disk("k") is None
    assert not (tmp_path / "plans").exists()


def test_memory_is_bounded_least_recently_used(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    cache.max_in_memory = 2
    entries = {k: (_record(k), object()) for k in ("a", "b", "c")}
    for k in ("a", "b"):
        cache.remember(k, *entries[k])  # type: ignore[arg-type]
    assert cache.lookup_memory("a") == entries["a"]  # a is now the most recently used
    cache.remember("c", *entries["c"])  # type: ignore[arg-type]
    assert cache.lookup_memory("b") is None
    assert cache.lookup_memory("a") == entries["a"] and cache.lookup_memory("c") == entries["c"]


def test_environment_chooses_directory_and_switch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUDNN_PY_CACHE_DIR", str(tmp_path / "x"))
    assert default_directory() == tmp_path / "x"
    monkeypatch.setenv("CUDNN_PY_PLAN_CACHE", "0")
    assert not PlanCache().enabled


def test_record_round_trip_and_refusals() -> None:
    rec = _record()
    assert PlanRecord.from_bytes(rec.to_bytes()) == rec
    assert PlanRecord.from_bytes(list(rec.to_bytes())) == rec  # the documented list-of-ints form
    with pytest.raises(SerializationError, match="graph's JSON"):
        PlanRecord.from_bytes(b'{"nodes": [], "tensors": {}}')
    with pytest.raises(SerializationError, match="format 7"):
        PlanRecord.from_bytes(rec.to_bytes().replace(b'"format_version": 1', b'"format_version": 7'))


def test_the_plan_identity_sees_what_an_expansion_builds() -> None:
    """Two attention graphs alike but for their score_mod lower to different operation graphs:
    the plan cache's identity (the key of the lowered nodes) tells them apart."""
    from cudnn._graph.build.pipeline import Pipeline, structure_key

    def attention(score_mod: Any) -> cudnn.pygraph:
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
        q, k, v = (g.tensor([1, 2, 64, 64], name=n) for n in "qkv")
        o, _ = g.sdpa(q, k, v, is_inference=True, attn_scale=0.125, score_mod=score_mod, name="attn")
        o.set_output(True)
        g.validate()
        return g

    doubled = attention(lambda sub, score: sub.mul(score, 2.0))
    shifted = attention(lambda sub, score: sub.add(score, 2.0))
    keys = [structure_key(Pipeline(g).lowered().nodes, g.context, None) for g in (doubled, shifted)]
    assert keys[0] != keys[1]
    again = attention(lambda sub, score: sub.mul(score, 2.0))
    assert structure_key(Pipeline(again).lowered().nodes, again.context, None) == keys[0]


def test_a_build_works_out_the_plan_identity_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build that misses the plan cache looks the graph up and then stores its plan, both under
    the identity of the lowered graph: it is worked out once per pipeline, and again only for a
    lowering put in place of the pipeline's (a plan restored with its record's bindings)."""
    from cudnn._graph.build import pipeline as pipeline_module

    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    g.relu(g.tensor([2, 3, 4], name="x")).set_output(True)
    g.validate()
    worked_out: list[object] = []
    identity = pipeline_module.lowered_identity
    monkeypatch.setattr(pipeline_module, "lowered_identity", lambda p: worked_out.append(p) or identity(p))
    p = pipeline_module.Pipeline(g)
    assert p.identity() == p.identity() == identity(p)
    assert worked_out == [p]
    restored = p.lowered()  # what a record would bring: bindings of another lowering (here alike)
    p.adopt(object(), 0, "eng0", lowered=restored)  # type: ignore[arg-type]
    assert p.identity() == identity(p) and worked_out == [p, p]


def test_a_ragged_tensor_keeps_its_offset_through_a_record() -> None:
    """A plan record names each ragged tensor's offset by uid, so a graph made only to run the
    plan binds a packed buffer to it (held to one token, not to dims x strides); records written
    before the field existed load with none."""
    import json

    from cudnn._graph.records.plan_bytes import record_tensors
    from cudnn._graph.run.bindings import Binding, token_bytes

    q = TensorRecord(1, "Q", [2, 4, 64, 32], [8192, 32, 128, 1], "HALF", False, None, "sdpa 'a'", "Q",
                     ragged_offset_uid=7)
    off = TensorRecord(7, "q_off", [3, 1, 1, 1], [1, 1, 1, 1], "INT32", False, None, "sdpa 'a'", "Q::ragged")
    again = PlanRecord.from_bytes(PlanRecord("eng", "{}", 0, [q, off], 91900, "NVIDIA H100", [9, 0]).to_bytes())
    tq, toff = record_tensors(again.tensors)
    assert tq.get_ragged_offset() is toff and toff.get_ragged_offset() is None
    b = Binding(1, tq, "sdpa 'a'", "Q")
    assert b.ragged and b.needed == token_bytes(tq) < 2 * 4 * 64 * 32 * 2
    old = json.loads(again.to_bytes())
    for t in old["tensors"]:
        del t["ragged_offset_uid"]
    assert PlanRecord.from_bytes(json.dumps(old)).tensors[0].ragged_offset_uid is None


# -- the writer thread --------------------------------------------------------------------------

def _held_record(release: threading.Event, started: threading.Event) -> PlanRecord:
    """A record whose serialization, on the writer thread, waits for ``release``."""
    rec = _record("held")
    real = rec.to_bytes

    class Held(PlanRecord):
        __slots__ = ()

        def to_bytes(self) -> bytes:
            started.set()
            assert release.wait(30)
            return real()

    rec.__class__ = Held
    return rec


def test_store_does_not_wait_for_the_disk_and_a_lookup_waits_for_its_own_write(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    release, started = threading.Event(), threading.Event()
    cache.store("k", _held_record(release, started), plan=object())  # type: ignore[arg-type]
    assert started.wait(30) and not (tmp_path / "plans" / "k.json").exists()  # store returned first
    threading.Timer(0.2, release.set).start()
    got = cache.lookup_disk("k")  # waits for the write queued by this cache
    assert got is not None and got.plan_name == "held"


def test_a_store_s_file_is_made_on_the_writer_thread_and_the_memory_keeps_the_record(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    record, plan = _record("mem"), object()
    made_on: list[threading.Thread] = []

    def produce() -> bytes:
        made_on.append(threading.current_thread())
        cache.flush()  # the writer's own thread does not wait for itself (a handle released there)
        return record.replace(plan_json='{"read": "late"}').to_bytes()

    cache.store("k", record, plan, produce)  # type: ignore[arg-type]
    waiter = threading.Thread(target=cache.flush, daemon=True)
    waiter.start()
    waiter.join(30)
    assert not waiter.is_alive(), "the writer thread waited for itself"
    assert made_on and made_on[0] is not threading.current_thread()
    assert made_on[0].name == "cudnn-py plan cache writer"
    assert cache.lookup_memory("k") == (record, plan) and record.plan_json == '{"plan": 1}'
    got = PlanCache(tmp_path, enabled=True).lookup_disk("k")
    assert got is not None and got.plan_json == '{"read": "late"}' and got.plan_name == "mem"


def test_clear_drops_queued_writes(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    release, started = threading.Event(), threading.Event()
    cache.store("a", _held_record(release, started), plan=object())  # type: ignore[arg-type]
    assert started.wait(30)
    cache.store("b", _record("b"), plan=object())  # type: ignore[arg-type]  # queued behind "a"
    threading.Timer(0.2, release.set).start()
    cache.clear(disk=True)  # drops "b", waits for "a", then removes the files
    cache.flush()
    assert list((tmp_path / "plans").glob("*.json")) == []
    assert cache.lookup_disk("a") is None and cache.lookup_disk("b") is None


def test_the_interpreter_writes_what_is_queued_before_it_exits(tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    code = (f"import sys; sys.path.insert(0, {src!r})\n"
            "from cudnn._graph.records.plan_cache import PlanCache\n"
            "from cudnn._graph.records.plan_bytes import PlanRecord, TensorRecord\n"
            "t = TensorRecord(1, 'X', [2], [1], 'HALF', False, None, 'n', 'X')\n"
            f"cache = PlanCache({str(tmp_path)!r}, enabled=True)\n"
            "for i in range(20):\n"
            "    cache.store(f'k{i}', PlanRecord('eng', 'x' * 100_000, 0, [t], 91900, 'GPU', [9, 0]), plan=None)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert sorted(p.name for p in (tmp_path / "plans").iterdir()) == sorted(f"k{i}.json" for i in range(20))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_child_forked_while_a_write_is_under_way_writes_its_own(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    release, started = threading.Event(), threading.Event()
    cache.store("parent", _held_record(release, started), plan=object())  # type: ignore[arg-type]
    assert started.wait(30)  # the writer thread is in the middle of a write, holding its record
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running: on purpose
        pid = os.fork()
    if pid == 0:  # the child: its own write lands; nothing waits for the parent's thread
        code = 1
        try:
            cache.store("child", _record("child"), plan=object())  # type: ignore[arg-type]
            cache.flush()
            code = 0 if (tmp_path / "plans" / "child.json").is_file() else 2
        finally:
            os._exit(code)
    release.set()
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    cache.flush()
    assert sorted(p.name for p in (tmp_path / "plans").iterdir()) == ["child.json", "parent.json"]


def test_a_cache_is_made_where_fork_has_no_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no os.register_at_fork: the cache and its writer work without it."""
    monkeypatch.delattr(os, "register_at_fork", raising=False)
    cache = PlanCache(tmp_path, enabled=True)
    cache.store("k", _record("w"), plan=object())  # type: ignore[arg-type]
    cache.flush()
    got = PlanCache(tmp_path, enabled=True).lookup_disk("k")
    assert got is not None and got.plan_name == "w"
