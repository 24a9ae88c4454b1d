"""What the tests share: fake backends and plan stand-ins for the tests without a GPU, the tables
the official signatures are checked against, the replay check of the GPU tests, and the scripts
some tests run in a new process (seed notebooks, wrapper variants)."""
