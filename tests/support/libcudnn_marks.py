"""The skip mark of CPU tests that call into the real libcudnn (loading it, its log, its errors
without a GPU): skipped where the library cannot be loaded."""

from __future__ import annotations

import pytest

import cudnn


def libcudnn_loads() -> bool:
    try:
        cudnn.backend_version()
    except cudnn.LibraryNotFoundError:
        return False
    return True


needs_libcudnn = pytest.mark.skipif(not libcudnn_loads(), reason="libcudnn cannot be loaded here")
