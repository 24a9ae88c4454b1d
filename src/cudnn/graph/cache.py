"""The persistent plan cache: the chosen plan of each graph, kept in memory and on disk.

A build looks here after validation: a hit skips lowering, heuristics and tuning. Keys
cover what the graph computes (structure, shapes, types, uids), the GPU and the cuDNN
version. The directory is ``$CUDNN_PY_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn-py``, else
``~/.cache/cudnn-py``; ``CUDNN_PY_PLAN_CACHE=0`` turns the cache off. Files are written
atomically (temp file + rename), so concurrent processes never read half a file; a file
that does not parse or no longer fits is ignored and replaced, never trusted.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from ..backend.descriptor import Descriptor
from .errors import SerializationError
from .serialize import PlanRecord

if TYPE_CHECKING:
    import logging



def log() -> logging.Logger:
    """The ``cudnn.plan_cache`` logger (logging is imported on first use)."""
    import logging

    return logging.getLogger("cudnn.plan_cache")


def default_directory() -> Path:
    env = os.environ.get("CUDNN_PY_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudnn-py"


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
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log().warning("plan cache: cannot read %s (%s); building instead", path, exc)
            return None
        try:
            return PlanRecord.from_bytes(data)
        except SerializationError as exc:
            log().warning("plan cache: ignoring %s (%s); it will be rewritten", path, exc)
            return None

    def remember(self, key: str, record: PlanRecord, plan: Descriptor) -> None:
        if self.enabled:
            with self._lock:
                self._memory[key] = (record, plan)
                self._memory.move_to_end(key)
                while len(self._memory) > self.max_in_memory:
                    self._memory.popitem(last=False)

    def store(self, key: str, record: PlanRecord, plan: Descriptor) -> None:
        """Keep in memory and write to disk atomically; disk failures are logged, not raised."""
        if not self.enabled:
            return
        self.remember(key, record, plan)
        import tempfile

        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(record.to_bytes())
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as exc:
            log().warning("plan cache: cannot write %s (%s); the plan stays cached in memory only", path, exc)

    def forget(self, key: str) -> None:
        with self._lock:
            self._memory.pop(key, None)
        try:
            self._path(key).unlink()
        except OSError:
            pass

    def clear(self, disk: bool = True) -> None:
        """Drop every entry from memory (and from disk when ``disk``)."""
        with self._lock:
            self._memory.clear()
        if disk:
            folder = self.directory / "plans"
            for p in folder.glob("*.json") if folder.is_dir() else ():
                try:
                    p.unlink()
                except OSError:
                    pass

    def __repr__(self) -> str:
        state = "on" if self.enabled else "off"
        return (f"<cudnn plan cache {state} at {self.directory}: {len(self._memory)} in memory, "
                f"{self.hits} hits ({self.disk_hits} from disk), {self.misses} misses>")


plan_cache = PlanCache()
