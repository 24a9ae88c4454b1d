"""The C boundary: loading libcudnn, generated enums and signatures, status -> exception.

Nothing here opens a library at import time; `loader.lib()` does, on first use.
"""

from . import cuda as _cuda  # noqa: F401  (registers the no-GPU hint for status errors)
