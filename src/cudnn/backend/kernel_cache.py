"""A kernel cache: compiled kernels of runtime-fusion engines shared across plans.

Bound to the first operation graph a plan is built for (the backend requires one), then
reused by plans of other graphs with the same structure and other shapes, which is what
makes a rebuild for a new shape skip compilation. Needs cuDNN >= 9.4; its JSON form (what
``save``/``load`` and the on-disk plan cache keep) needs cuDNN >= 9.10. cuDNN documents the
cache for operation graphs with dynamic shapes enabled; for a static graph (9.19) it stays
empty, so a static runtime-fused plan still compiles in each new process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .._lib import loader
from .._lib.attributes import A
from .._lib.enums import cudnnBackendAttributeType_t as T
from .._lib.enums import cudnnBackendDescriptorType_t as D
from .._lib.status import FeatureUnavailableError, version_string
from .descriptor import Descriptor

SINCE = 90400
SERIALIZE_SINCE = 91000
FILE_FORMAT = "cudnn-py-kernel-cache"
FILE_VERSION = 1


class KernelCacheFileError(ValueError, RuntimeError):
    """A kernel-cache file that cannot be used here: damaged, or made by another cuDNN or GPU (a
    ``ValueError`` as before, and a ``RuntimeError`` as the official's errors for data it cannot read)."""


def require_serializable(what: str) -> int:
    """The loaded cuDNN version; raises FeatureUnavailableError below 9.10."""
    version = loader.report().version
    if version < SERIALIZE_SINCE:
        raise FeatureUnavailableError(what, SERIALIZE_SINCE, version)
    return version


def descriptor_from_json(text: str, label: str = "kernel cache") -> Descriptor:
    """A finalized KERNEL_CACHE filled from its JSON; cuDNN refuses damaged text (CudnnBadParamError)."""
    desc = Descriptor(D.CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, label)
    try:
        desc.set(A.CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, text.encode() + b"\0", T.CUDNN_TYPE_CHAR)
        return desc.finalize()
    except BaseException:
        desc.close()
        raise


def descriptor_for_graph(op_graph: Descriptor, label: str = "kernel cache") -> Descriptor:
    """A finalized, empty KERNEL_CACHE bound to ``op_graph``."""
    version = loader.report().version
    if version < SINCE:
        raise FeatureUnavailableError("kernel cache", SINCE, version)
    desc = Descriptor(D.CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, label)
    desc.set(A.CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, op_graph)
    return desc.finalize()


def descriptor_json(desc: Descriptor) -> str:
    """The backend's JSON text of a finalized kernel cache ("" when cuDNN gives none)."""
    values = desc.get_array(A.CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, T.CUDNN_TYPE_CHAR)
    return values[0] if values else ""


def current_device_identity() -> tuple[str, list[int]]:
    """(name, [major, minor]) of the current CUDA device."""
    from .._lib import cuda

    info = cuda.device_info(cuda.current_device())
    return info.name, list(info.compute_capability)


def file_bytes(text: str, version: int, device: tuple[str, list[int]], key: str = "") -> bytes:
    """The on-disk form: cuDNN's JSON with what it is valid for (cuDNN version, GPU, graph key)."""
    return json.dumps({"format": FILE_FORMAT, "format_version": FILE_VERSION, "cudnn_version": version,
                       "device_name": device[0], "compute_capability": list(device[1]), "key": key,
                       "kernels": text}).encode()


def parse_file(data: bytes, version: int, device: tuple[str, list[int]] | None, key: str = "") -> str:
    """cuDNN's JSON from ``file_bytes`` output, checked against this cuDNN, GPU and key."""
    try:
        raw: Any = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KernelCacheFileError(f"not a kernel-cache file (damaged or truncated: {exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FILE_FORMAT:
        raise KernelCacheFileError("not a cudnn-py kernel-cache file (no 'format' marker)")
    if raw.get("format_version") != FILE_VERSION:
        raise KernelCacheFileError(f"kernel-cache file format {raw.get('format_version')!r} is not {FILE_VERSION}")
    text, made_by = raw.get("kernels"), raw.get("cudnn_version")
    if not isinstance(text, str) or not text:
        raise KernelCacheFileError("kernel-cache file holds no kernels")
    if made_by != version:
        made = version_string(made_by) if isinstance(made_by, int) else repr(made_by)
        raise KernelCacheFileError(f"kernel-cache file made by cuDNN {made}; this process runs cuDNN "
                                   f"{version_string(version)}")
    if device is not None and (raw.get("device_name") != device[0]
                               or list(raw.get("compute_capability") or []) != list(device[1])):
        raise KernelCacheFileError(f"kernel-cache file made on {raw.get('device_name')} (sm "
                                   f"{raw.get('compute_capability')}); this is {device[0]} (sm {list(device[1])})")
    if key and raw.get("key") != key:
        raise KernelCacheFileError(f"kernel-cache file is for entry {raw.get('key')!r}, not {key!r}")
    return text


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file and os.replace: readers see all or nothing."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class KernelCache:
    """``cudnn.create_kernel_cache()``: pass it to ``pygraph(kernel_cache=...)``; ``save`` and
    ``load`` keep its compiled kernels across processes (cuDNN >= 9.10)."""

    def __init__(self) -> None:
        self._desc: Descriptor | None = None
        self._json: str | None = None

    def descriptor_for(self, op_graph: Descriptor) -> Descriptor:
        """The finalized backend cache, bound to ``op_graph`` on first use (or filled from loaded JSON)."""
        if self._desc is None:
            version = loader.report().version
            if version < SINCE:
                raise FeatureUnavailableError("kernel cache", SINCE, version)
            if self._json is not None:
                self._desc = descriptor_from_json(self._json)
            else:
                self._desc = descriptor_for_graph(op_graph)
        return self._desc

    def serialize(self) -> str:
        """The cache as JSON text (cuDNN >= 9.10), to restore in another process."""
        if self._desc is None:
            return self._json or ""
        require_serializable("kernel cache serialization")
        return descriptor_json(self._desc)

    def deserialize(self, text: str) -> None:
        """Load a serialized cache; applies when the cache is first used."""
        if self._desc is not None:
            raise ValueError("this kernel cache is already in use; deserialize into a new one")
        self._json = str(text)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the compiled kernels to ``path`` atomically, marked with this cuDNN and GPU."""
        version = require_serializable("kernel cache save")
        text = self.serialize()
        if not text:
            raise ValueError("kernel cache save: the cache holds nothing yet; build a graph with it first")
        write_atomic(Path(path), file_bytes(text, version, current_device_identity()))

    def load(self, path: str | os.PathLike[str]) -> KernelCache:
        """Read kernels that ``save`` wrote; raises KernelCacheFileError for a damaged file or one
        from another cuDNN version or GPU. Applies when the cache is first used; returns self."""
        version = require_serializable("kernel cache load")
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KernelCacheFileError(f"kernel cache load: cannot read {path}: {exc}") from None
        try:
            text = parse_file(data, version, current_device_identity())
        except KernelCacheFileError as exc:
            raise KernelCacheFileError(f"kernel cache load: {path}: {exc}") from None
        self.deserialize(text)
        return self

    @property
    def in_use(self) -> bool:
        return self._desc is not None

    def __repr__(self) -> str:
        state = "in use" if self._desc is not None else ("loaded" if self._json else "empty")
        return f"<cudnn kernel cache ({state})>"


def create_kernel_cache() -> KernelCache:
    """A new, empty kernel cache to give ``pygraph(kernel_cache=...)`` (``save``/``load`` keep it on disk)."""
    return KernelCache()
