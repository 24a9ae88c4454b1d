"""Kernel-cache files without a GPU: the on-disk form, what is refused (damaged, truncated,
another cuDNN or GPU, another entry), the size bound, unwritable folders, concurrent writers,
and KernelCache.save/load. cuDNN's own acceptance of the kernels is checked on the GPU
(tests/plans/test_kernel_cache_gpu.py)."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

import cudnn
from cudnn._graph.records.plan_cache import PlanCache
from cudnn.backend import kernel_cache as kc

DEVICE = ("NVIDIA H200", [9, 0])
OTHER = ("NVIDIA A100", [8, 0])
VERSION = 91900
KERNELS = json.dumps({"cudnnVersion": VERSION, "kernels": ["x" * 100]})


def test_file_round_trip() -> None:
    data = kc.file_bytes(KERNELS, VERSION, DEVICE, "k1")
    assert kc.parse_file(data, VERSION, DEVICE, "k1") == KERNELS


@pytest.mark.parametrize(("data", "why"), [
    (b"", "damaged or truncated"),
    (b"\xff\xfe not utf-8", "damaged or truncated"),
    (kc.file_bytes(KERNELS, VERSION, DEVICE, "k1")[:40], "damaged or truncated"),
    (b'{"format": "something else"}', "no 'format' marker"),
    (b"[1, 2]", "no 'format' marker"),
    (kc.file_bytes(KERNELS, VERSION, DEVICE, "k1").replace(b'"format_version": 1', b'"format_version": 7'), "format 7"),
    (kc.file_bytes("", VERSION, DEVICE, "k1"), "holds no kernels"),
    (kc.file_bytes(KERNELS, 91000, DEVICE, "k1"), "cuDNN 9.10.0"),
    (kc.file_bytes(KERNELS, VERSION, OTHER, "k1"), "NVIDIA A100"),
    (kc.file_bytes(KERNELS, VERSION, DEVICE, "k2"), "'k2'"),
])
def test_refused_files_say_why(data: bytes, why: str) -> None:
    with pytest.raises(kc.KernelCacheFileError, match=why.replace("(", r"\(").replace(".", r"\.")):
        kc.parse_file(data, VERSION, DEVICE, "k1")


def test_store_and_lookup(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    assert cache.lookup_kernels("k1", VERSION, DEVICE) is None
    assert cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
    assert cache.lookup_kernels("k1", VERSION, DEVICE) == KERNELS
    assert (tmp_path / "kernels" / "k1.json").is_file()
    assert not list((tmp_path / "kernels").glob(".*.tmp"))  # the temp file was renamed, not left
    cache.forget("k1")  # forgetting a plan forgets its kernels
    assert not (tmp_path / "kernels" / "k1.json").exists()


def test_disabled_cache_stores_nothing(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=False)
    assert not cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
    assert not (tmp_path / "kernels").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign_version", "foreign_gpu", "swapped"])
def test_bad_entries_are_ignored_logged_once_and_removed(tmp_path: Path, damage: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
    path = tmp_path / "kernels" / "k1.json"
    good = path.read_bytes()
    path.write_bytes({
        "truncated": good[: len(good) // 2],
        "garbage": b"\x00\x01garbage",
        "foreign_version": kc.file_bytes(KERNELS, 92800, DEVICE, "k1"),
        "foreign_gpu": kc.file_bytes(KERNELS, VERSION, OTHER, "k1"),
        "swapped": kc.file_bytes(KERNELS, VERSION, DEVICE, "k2"),
    }[damage])
    with caplog.at_level(logging.WARNING, logger="cudnn.cache"):
        assert cache.lookup_kernels("k1", VERSION, DEVICE) is None
        assert not path.exists()  # removed, to be rewritten by the next build
        path.write_bytes(b"garbage again")
        assert cache.lookup_kernels("k1", VERSION, DEVICE) is None
    records = [r for r in caplog.records if r.name == "cudnn.cache"]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert "ignoring" in records[0].getMessage()
    assert cache.store_kernels("k1", KERNELS, VERSION, DEVICE)  # rewritten
    assert cache.lookup_kernels("k1", VERSION, DEVICE) == KERNELS


def test_unreadable_entry_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    (tmp_path / "kernels" / "k1.json").mkdir(parents=True)  # a folder where the file should be
    with caplog.at_level(logging.WARNING, logger="cudnn.cache"):
        assert cache.lookup_kernels("k1", VERSION, DEVICE) is None
    assert "cannot read" in caplog.text


def test_unwritable_directory_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = PlanCache(blocker, enabled=True)  # kernels/ cannot be made under a file
    with caplog.at_level(logging.WARNING, logger="cudnn.cache"):
        assert not cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
        assert not cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
    assert caplog.text.count("cannot write") == 1


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root writes into read-only folders")
def test_read_only_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "kernels").mkdir()
    os.chmod(tmp_path / "kernels", 0o500)
    try:
        cache = PlanCache(tmp_path, enabled=True)
        with caplog.at_level(logging.WARNING, logger="cudnn.cache"):
            assert not cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
        assert "cannot write" in caplog.text
    finally:
        os.chmod(tmp_path / "kernels", 0o700)


def test_size_bound_evicts_oldest_and_refuses_oversized(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    one = len(kc.file_bytes(KERNELS, VERSION, DEVICE, "k0"))
    cache.max_kernel_bytes = 3 * one + 10
    for i in range(5):
        assert cache.store_kernels(f"k{i}", KERNELS, VERSION, DEVICE)
        path = tmp_path / "kernels" / f"k{i}.json"
        os.utime(path, (1000 + i, 1000 + i))  # distinct ages whatever the clock's resolution
    left = sorted(p.stem for p in (tmp_path / "kernels").glob("*.json"))
    assert left == ["k2", "k3", "k4"]
    cache.max_kernel_bytes = one - 1
    with caplog.at_level(logging.WARNING, logger="cudnn.cache"):
        assert not cache.store_kernels("big", KERNELS, VERSION, DEVICE)
    assert "bound" in caplog.text


def test_concurrent_writers_leave_a_whole_file(tmp_path: Path) -> None:
    texts = [json.dumps({"writer": i, "pad": "y" * (20000 + i)}) for i in range(8)]
    caches = [PlanCache(tmp_path, enabled=True) for _ in texts]
    threads = [threading.Thread(target=c.store_kernels, args=("k1", t, VERSION, DEVICE)) for c, t in zip(caches, texts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert PlanCache(tmp_path, enabled=True).lookup_kernels("k1", VERSION, DEVICE) in texts
    assert not list((tmp_path / "kernels").glob(".*.tmp"))


def test_clear_removes_kernels(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path, enabled=True)
    cache.store_kernels("k1", KERNELS, VERSION, DEVICE)
    cache.clear()
    assert not list((tmp_path / "kernels").glob("*.json"))


# -- KernelCache.save / load -----------------------------------------------------------------------

@pytest.fixture
def on_h200(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device identity and cuDNN version a save/load sees (no GPU here)."""
    monkeypatch.setattr(kc, "current_device_identity", lambda: DEVICE)
    monkeypatch.setattr(kc, "require_serializable", lambda what: VERSION)


def test_save_load_round_trip(tmp_path: Path, on_h200: None) -> None:
    cache = cudnn.create_kernel_cache()
    cache.deserialize(KERNELS)  # as if it held kernels
    cache.save(tmp_path / "k.json")
    loaded = cudnn.create_kernel_cache().load(tmp_path / "k.json")
    assert loaded.serialize() == KERNELS
    assert not loaded.in_use  # applied when a graph first uses it
    assert "loaded" in repr(loaded)


def test_save_of_an_empty_cache_is_refused(tmp_path: Path, on_h200: None) -> None:
    with pytest.raises(ValueError, match="holds nothing"):
        cudnn.create_kernel_cache().save(tmp_path / "k.json")
    assert not (tmp_path / "k.json").exists()


def test_load_refuses_foreign_and_damaged_files(tmp_path: Path, on_h200: None) -> None:
    path = tmp_path / "k.json"
    path.write_bytes(kc.file_bytes(KERNELS, VERSION, OTHER))
    with pytest.raises(kc.KernelCacheFileError, match="NVIDIA A100"):
        cudnn.create_kernel_cache().load(path)
    path.write_bytes(kc.file_bytes(KERNELS, 92800, DEVICE))
    with pytest.raises(kc.KernelCacheFileError, match="9.28.0"):
        cudnn.create_kernel_cache().load(path)
    path.write_bytes(b'{"format": "cudnn-py-kernel-cache", "format_')
    with pytest.raises(kc.KernelCacheFileError, match="truncated"):
        cudnn.create_kernel_cache().load(path)
    with pytest.raises(kc.KernelCacheFileError, match="cannot read"):
        cudnn.create_kernel_cache().load(tmp_path / "missing.json")


def test_load_into_a_cache_in_use_is_refused(tmp_path: Path, on_h200: None) -> None:
    path = tmp_path / "k.json"
    path.write_bytes(kc.file_bytes(KERNELS, VERSION, DEVICE))
    cache = cudnn.create_kernel_cache()
    cache._desc = object()  # type: ignore[assignment]  # as if a graph had bound it
    with pytest.raises(ValueError, match="already in use"):
        cache.load(path)


def test_save_load_need_cudnn_9_10(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cudnn._lib import loader

    class Report:
        version = 90800

    monkeypatch.setattr(loader, "report", lambda: Report())
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.10\.0; the loaded libcudnn is 9\.8\.0"):
        cudnn.create_kernel_cache().load(tmp_path / "k.json")
