"""A kernel cache: compiled kernels of runtime-fusion engines shared across plans.

Bound to the first operation graph a plan is built for (the backend requires one), then
reused by plans of other graphs with the same structure and other shapes, which is what
makes a rebuild for a new shape skip compilation. Needs cuDNN >= 9.4.
"""

from __future__ import annotations

from .._lib import loader
from .._lib.enums import cudnnBackendAttributeName_t as A
from .._lib.enums import cudnnBackendAttributeType_t as T
from .._lib.enums import cudnnBackendDescriptorType_t as D
from .._lib.errors import FeatureUnavailableError
from .descriptor import Descriptor

SINCE = 90400
SERIALIZE_SINCE = 91000


class KernelCache:
    """``cudnn.create_kernel_cache()``: pass it to ``pygraph(kernel_cache=...)``."""

    def __init__(self) -> None:
        self._desc: Descriptor | None = None
        self._json: str | None = None

    def descriptor_for(self, op_graph: Descriptor) -> Descriptor:
        """The finalized backend cache, bound to ``op_graph`` on first use."""
        if self._desc is None:
            version = loader.report().version
            if version < SINCE:
                raise FeatureUnavailableError("kernel cache", SINCE, version)
            desc = Descriptor(D.CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, "kernel cache")
            if self._json is not None:
                desc.set(A.CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, self._json.encode() + b"\0",
                         T.CUDNN_TYPE_CHAR)
            else:
                desc.set(A.CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, op_graph)
            self._desc = desc.finalize()
        return self._desc

    def serialize(self) -> str:
        """The cache as JSON text (cuDNN >= 9.10), to restore in another process."""
        if self._desc is None:
            return self._json or ""
        version = loader.report().version
        if version < SERIALIZE_SINCE:
            raise FeatureUnavailableError("kernel cache serialization", SERIALIZE_SINCE, version)
        values = self._desc.get_array(A.CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, T.CUDNN_TYPE_CHAR)
        return values[0] if values else ""

    def deserialize(self, text: str) -> None:
        """Load a serialized cache; applies when the cache is first used."""
        if self._desc is not None:
            raise ValueError("this kernel cache is already in use; deserialize into a new one")
        self._json = str(text)

    @property
    def in_use(self) -> bool:
        return self._desc is not None


def create_kernel_cache() -> KernelCache:
    return KernelCache()
