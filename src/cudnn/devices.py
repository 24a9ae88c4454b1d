"""1.32's device helpers: ``cudnn.DeviceInfo(ordinal)`` (a GPU's facts, each asked of the CUDA
driver once, through cudnn-py's CUDA layer, when first read; no torch) and
``cudnn.sdpa_capabilities()``."""

from __future__ import annotations

import functools
from typing import Any

from ._lib import cuda

# CU_DEVICE_ATTRIBUTE_MAX_OVERSIZED_SHARED_MEMORY_PER_BLOCK: an attribute of CUDA 13.4 drivers
_OVERSIZED_SMEM_ATTRIBUTE = 150
_OVERSIZED_SMEM_SINCE = 13040


class DeviceInfo:
    """Facts of CUDA device ``ordinal``: compute capability, SM count, shared memory limits, L2
    size, name. Each is read from the driver when first asked for and kept on the instance."""

    def __init__(self, ordinal: int) -> None:
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise TypeError(f"DeviceInfo: ordinal: expected an int, got {ordinal!r}")
        self.ordinal = int(ordinal)

    def _device(self) -> Any:
        """The driver's CUdevice for the ordinal (cuInit first; ValueError naming the count if none)."""
        drv = cuda.driver()
        cuda._rt("cuInit", drv.cuInit(0))
        count = int(cuda._rt("cuDeviceGetCount", drv.cuDeviceGetCount()))
        if not 0 <= self.ordinal < count:
            raise ValueError(f"DeviceInfo: cuda:{self.ordinal} does not exist ({count} device(s) visible)")
        return cuda._rt("cuDeviceGet", drv.cuDeviceGet(self.ordinal))

    def _attribute(self, attribute: Any) -> int:
        drv = cuda.driver()
        return int(cuda._rt("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(attribute, self._device())))

    @functools.cached_property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor)."""
        a = cuda.driver().CUdevice_attribute
        return (self._attribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                self._attribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

    @property
    def sm_version(self) -> int:
        """major * 10 + minor (90 for Hopper), from `compute_capability`."""
        major, minor = self.compute_capability
        return major * 10 + minor

    @functools.cached_property
    def sm_count(self) -> int:
        """Streaming multiprocessors."""
        return self._attribute(cuda.driver().CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)

    @functools.cached_property
    def shared_memory_per_block_optin(self) -> int:
        """Bytes of shared memory a block may opt in to."""
        a = cuda.driver().CUdevice_attribute
        return self._attribute(a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    @functools.cached_property
    def oversized_shared_memory_per_block(self) -> int:
        """Bytes of shared memory a block may have in the oversized carveout; 0 where the driver
        (older than CUDA 13.4's) has no such mode."""
        drv = cuda.driver()
        err, version = drv.cuDriverGetVersion()
        if int(err) != 0 or int(version) < _OVERSIZED_SMEM_SINCE:
            return 0
        attribute = getattr(drv.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_MAX_OVERSIZED_SHARED_MEMORY_PER_BLOCK",
                            _OVERSIZED_SMEM_ATTRIBUTE)
        try:
            return self._attribute(attribute)
        except (TypeError, ValueError, AttributeError):  # bindings too old to pass the bare attribute number
            return 0

    @functools.cached_property
    def l2_cache_bytes(self) -> int:
        """Bytes of L2 cache."""
        return self._attribute(cuda.driver().CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)

    @functools.cached_property
    def device_name(self) -> str:
        """The GPU's name, e.g. 'NVIDIA H100 80GB HBM3'."""
        name = cuda._rt("cuDeviceGetName", cuda.driver().cuDeviceGetName(256, self._device()))
        return bytes(name).split(b"\0")[0].decode(errors="replace")

    def __repr__(self) -> str:
        return f"DeviceInfo(cuda:{self.ordinal})"


def sdpa_capabilities() -> frozenset[str]:
    """1.32: names of the packed (THD) split and stride contracts that the official package's
    compiled SDPA binder (the ``supports_*`` flags of its Python engines' kernels) provides, for
    callers to test (``"stats_stride_override" in cudnn.sdpa_capabilities()``).

    cudnn-py has no such binder: its attention runs on cuDNN's own engines, whatever the loaded
    cuDNN and GPU, so the set is empty, as the official's is on a build without the binder."""
    return frozenset()
