"""The persistent plan cache: the chosen plan of each graph, kept in memory and on disk.

A build looks here after validation: a hit skips lowering, heuristics and tuning. Keys
cover what the graph computes (structure, shapes, types, uids), the GPU and the cuDNN
version. The directory is ``$CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn-py``, else
``~/.cache/cudnn-py``; ``CUDNN_PY_PLAN_CACHE=0`` turns the cache off. Files are written
atomically (temp file + rename), so concurrent processes never read half a file; a file
that does not parse or no longer fits is ignored and replaced, never trusted. A build that
stores a plan does not wait for its file: a thread of the cache's own writes it, and the
interpreter waits for what it has queued before it exits (``plan_cache.flush()`` waits now).

Beside each plan of a graph that uses a kernel cache (dynamic shapes), ``kernels/<key>.json``
keeps cuDNN's compiled kernels, so a new process restores the plan without compiling. Kernel
files are bounded in total size (``$CUDNN_PY_KERNEL_CACHE_MAX_MB``, default 512; oldest go
first) and are ignored, logged once on the ``cudnn.cache`` logger, and rewritten when they
are damaged or come from another cuDNN or GPU.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ...backend import handle
from ...backend.descriptor import Descriptor
from ..model.graph_errors import SerializationError
from .plan_bytes import PlanRecord

if TYPE_CHECKING:
    import logging


def log() -> logging.Logger:
    """The ``cudnn.plan_cache`` logger (logging is imported on first use)."""
    import logging

    return logging.getLogger("cudnn.plan_cache")


def kernel_log() -> logging.Logger:
    """The ``cudnn.cache`` logger: why stored kernels were not used."""
    import logging

    return logging.getLogger("cudnn.cache")


def default_directory() -> Path:
    env = os.environ.get("CUDNN_PY_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudnn-py"


class FileWriter:
    """Files written atomically on a thread of their own, oldest first, so that whoever asks
    for a write does not wait for the disk. A newer write of a file replaces one still queued.
    The thread starts with the first write and then waits for the next; before the interpreter
    exits, what is queued is written (an ``atexit`` handler waits for it). ``on_error(path,
    exc)`` hears of each write that failed (the writer goes on with the next)."""

    def __init__(self, on_error: Callable[[Path, BaseException], None]) -> None:
        self._on_error = on_error
        self._cond = threading.Condition()
        self._queue: OrderedDict[Path, Callable[[], bytes]] = OrderedDict()
        self._busy: Path | None = None  # the file being written now
        self._thread: threading.Thread | None = None
        me = weakref.ref(self)
        if hasattr(os, "register_at_fork"):  # POSIX
            os.register_at_fork(after_in_child=functools.partial(_forked, me))
        atexit.register(_drain, me)

    def put(self, path: Path, produce: Callable[[], bytes]) -> None:
        """Queue ``produce()``'s bytes for ``path``."""
        with self._cond:
            self._queue[path] = produce
            self._queue.move_to_end(path)
            if self._thread is not None:
                self._cond.notify_all()
                return
            thread = threading.Thread(target=self._run, name="cudnn-py plan cache writer", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no new thread now (the interpreter is shutting down): written here
                del self._queue[path]
            else:
                self._thread = thread
                return
        self._write(path, produce)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._busy = None
                    self._cond.notify_all()
                    self._cond.wait_for(lambda: bool(self._queue))
                    path, produce = self._queue.popitem(last=False)
                    self._busy = path
                self._write(path, produce)
        finally:  # whatever ends the thread, no waiter is left waiting for it
            with self._cond:
                self._busy = self._thread = None
                self._cond.notify_all()

    def _write(self, path: Path, produce: Callable[[], bytes]) -> None:
        from ...backend.kernel_cache import write_atomic

        try:
            write_atomic(path, produce())
        except BaseException as exc:  # noqa: BLE001 - reported, and the writer goes on with the next file
            self._on_error(path, exc)

    def _idle(self, path: Path | None) -> bool:
        if self._thread is None:
            return True  # nothing is writing (nor will, until the next put)
        if path is None:
            return not self._queue and self._busy is None
        return path not in self._queue and self._busy != path

    def wait(self, path: Path | None = None) -> None:
        """Return once ``path`` (every file, for None) is neither queued nor being written (at
        once on the writer's own thread, which cannot wait for itself)."""
        if threading.current_thread() is self._thread:
            return
        with self._cond:
            self._cond.wait_for(lambda: self._idle(path))

    def discard(self, path: Path | None = None) -> None:
        """Drop the queued write of ``path`` (of every file, for None) and wait for one under way."""
        with self._cond:
            if path is None:
                self._queue.clear()
            else:
                self._queue.pop(path, None)
        self.wait(path)

    def forked(self) -> None:
        """In a child made by fork: the parent's thread is not here, and the parent writes its queue."""
        self._cond = threading.Condition()
        self._queue.clear()
        self._busy = self._thread = None


def _forked(writer: weakref.ref[FileWriter]) -> None:
    w = writer()
    if w is not None:
        w.forked()


def _drain(writer: weakref.ref[FileWriter]) -> None:
    w = writer()
    if w is not None:
        w.wait()


class PlanCache:
    """Process-wide store of chosen plans (``cudnn.plan_cache``)."""

    def __init__(self, directory: Path | str | None = None, enabled: bool | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        if enabled is None:
            enabled = os.environ.get("CUDNN_PY_PLAN_CACHE", "1").lower() not in ("0", "off", "false", "no")
        self.enabled = enabled
        self._memory: OrderedDict[str, tuple[PlanRecord, Descriptor]] = OrderedDict()
        self.max_in_memory = 256  # least recently used plans beyond this are dropped (disk keeps them)
        self._lock = threading.Lock()
        self.hits = self.misses = self.disk_hits = 0
        self.kernel_hits = 0
        self.max_kernel_bytes = int(float(os.environ.get("CUDNN_PY_KERNEL_CACHE_MAX_MB", "512")) * 2**20)
        self._logged: set[tuple[str, str]] = set()
        self._writer = FileWriter(self._write_failed)

    @staticmethod
    def key(*parts: object) -> str:
        import hashlib

        return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / "plans" / f"{key}.json"

    def lookup_memory(self, key: str) -> tuple[PlanRecord, Descriptor] | None:
        if not self.enabled:
            return None
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self._memory.move_to_end(key)
            return hit

    def lookup_disk(self, key: str) -> PlanRecord | None:
        if not self.enabled:
            return None
        path = self._path(key)
        self._writer.wait(path)  # this process's own write of it, if one is queued, first
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log().warning("plan cache: cannot read %s (%s); building instead", path, exc)
            return None
        try:
            return PlanRecord.from_bytes(data)
        except (SerializationError, RecursionError) as exc:  # RecursionError: JSON nested too deep
            log().warning("plan cache: ignoring %s (%s); it will be rewritten", path, exc)
            return None

    def remember(self, key: str, record: PlanRecord, plan: Descriptor) -> None:
        if self.enabled:
            with self._lock:
                self._memory[key] = (record, plan)
                self._memory.move_to_end(key)
                while len(self._memory) > self.max_in_memory:
                    self._memory.popitem(last=False)

    def store(self, key: str, record: PlanRecord, plan: Descriptor,
              produce: Callable[[], bytes] | None = None) -> None:
        """Keep in memory now, and have the writer write it to disk atomically: the bytes of
        ``produce()``, run on the writer's thread (``record.to_bytes`` when None; ``record`` is
        not changed after this); disk failures are logged, not raised."""
        if not self.enabled:
            return
        self.remember(key, record, plan)
        self._writer.put(self._path(key), produce if produce is not None else record.to_bytes)

    def _write_failed(self, path: Path, exc: BaseException) -> None:
        log().warning("plan cache: cannot write %s (%s); the plan stays cached in memory only", path, exc)

    def flush(self) -> None:
        """Wait until every plan stored so far is on disk (or its write has failed, logged)."""
        self._writer.wait()

    # -- compiled kernels beside the plans --------------------------------------------------

    def _kernel_path(self, key: str) -> Path:
        return self.directory / "kernels" / f"{key}.json"

    def log_once(self, kind: str, key: str, message: str, *args: object) -> None:
        """Warn on ``cudnn.cache`` once per (kind, entry): a bad file is not reported at every build."""
        with self._lock:
            if (kind, key) in self._logged:
                return
            self._logged.add((kind, key))
        kernel_log().warning(message, *args)

    def lookup_kernels(self, key: str, version: int, device: tuple[str, list[int]]) -> str | None:
        """cuDNN's kernel-cache JSON stored for ``key``, or None (missing, unreadable, damaged, foreign)."""
        from ...backend.kernel_cache import KernelCacheFileError, parse_file

        if not self.enabled:
            return None
        path = self._kernel_path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.log_once("read", key, "kernel cache: cannot read %s (%s); compiling instead", path, exc)
            return None
        try:
            return parse_file(data, version, device, key)
        except KernelCacheFileError as exc:
            self.log_once("bad", key, "kernel cache: ignoring %s (%s); compiling, and it will be rewritten",
                          path, exc)
            self.forget_kernels(key)
            return None

    def store_kernels(self, key: str, text: str, version: int, device: tuple[str, list[int]]) -> bool:
        """Write the kernels of ``key`` atomically; False (logged once) when the disk refuses or
        the entry alone exceeds the size bound. Older entries go when the total exceeds it."""
        from ...backend.kernel_cache import file_bytes, write_atomic

        if not self.enabled or not text:
            return False
        data = file_bytes(text, version, device, key)
        path = self._kernel_path(key)
        if len(data) > self.max_kernel_bytes:
            self.log_once("size", key, "kernel cache: %s would take %d bytes, over the %d-byte bound; not stored",
                          path, len(data), self.max_kernel_bytes)
            return False
        try:
            write_atomic(path, data)
        except OSError as exc:
            self.log_once("write", key, "kernel cache: cannot write %s (%s); kernels compile in each new process",
                          path, exc)
            return False
        self._trim_kernels(keep=path)
        return True

    def _trim_kernels(self, keep: Path) -> None:
        """Drop the least recently written kernel files until the total fits the bound."""
        folder = keep.parent
        try:
            entries = [(p.stat().st_mtime, p.stat().st_size, p) for p in folder.glob("*.json")]
        except OSError:
            return
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_kernel_bytes:
                break
            if p == keep:
                continue
            try:
                p.unlink()
                total -= size
            except OSError:
                pass

    def forget_kernels(self, key: str) -> None:
        try:
            self._kernel_path(key).unlink()
        except OSError:
            pass

    def forget(self, key: str) -> None:
        with self._lock:
            self._memory.pop(key, None)
        self._writer.discard(self._path(key))
        try:
            self._path(key).unlink()
        except OSError:
            pass
        self.forget_kernels(key)

    def clear(self, disk: bool = True) -> None:
        """Drop every entry from memory (and from disk when ``disk``)."""
        with self._lock:
            self._memory.clear()
        if disk:
            self._writer.discard()
            for sub in ("plans", "kernels"):
                folder = self.directory / sub
                for p in folder.glob("*.json") if folder.is_dir() else ():
                    try:
                        p.unlink()
                    except OSError:
                        pass

    def __repr__(self) -> str:
        state = "on" if self.enabled else "off"
        return (f"<cudnn plan cache {state} at {self.directory}: {len(self._memory)} in memory, "
                f"{self.hits} hits ({self.disk_hits} from disk, {self.kernel_hits} with stored kernels), "
                f"{self.misses} misses>")


plan_cache = PlanCache()


def _flush_before_handle_destroy() -> None:
    """A plan the writer still serializes (`plan_reuse.file_bytes`) may have been built with the
    handle being destroyed. (Not once the interpreter finalizes: what was queued is written by
    then, and the writer thread no longer runs.)"""
    if not sys.is_finalizing():
        plan_cache.flush()


handle.before_destroy(_flush_before_handle_destroy)
