"""The C boundary: loading libcudnn, generated enums and signatures, status -> exception.

Nothing here opens a library at import time; `loader.lib()` does, on first use. Importing
this package imports none of its modules: each is imported where it is used, so that
`import cudnn` stays cheap.
"""
