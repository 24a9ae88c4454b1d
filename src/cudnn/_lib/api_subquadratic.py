"""C functions of cudnn_subquadratic_ops_v9.h (cuDNN >= 9.22) that cudnn-py binds: the causal
conv1d pair, in the table format of the generated api_*.py files (tests/graph/test_causal_conv1d.py
checks each entry against the header with tools/cheader.py), and the header's activation enum.

The functions live in libcudnn itself, outside the graph API; ``capi.subquadratic`` binds them
on first use, so an older libcudnn fails only when one is called.
"""

# fmt: off
# ruff: noqa: E501
from __future__ import annotations

HEADER = "cudnn_subquadratic_ops_v9.h"

# name -> (return type, ((C type, parameter name), ...), since version, deprecated)
FUNCTIONS: dict[str, tuple[str, tuple[tuple[str, str], ...], int | None, bool]] = {
    'cudnnSubquadraticOpsVersionCheck': ('cudnnStatus_t', (), 92200, False),
    'cudnnCausalConv1dForward': ('cudnnStatus_t', (('cudaStream_t', 'stream'), ('const void *', 'x'), ('const void *', 'weight'), ('const void *', 'bias'), ('void *', 'y'), ('int', 'batch'), ('int', 'dim'), ('int', 'seqLen'), ('int', 'kernelSize'), ('cudnnDataType_t', 'dataType'), ('cudnnCausalConv1dActivation_t', 'activation')), 92200, False),
    'cudnnCausalConv1dBackward': ('cudnnStatus_t', (('cudaStream_t', 'stream'), ('const void *', 'x'), ('const void *', 'weight'), ('const void *', 'bias'), ('const void *', 'dy'), ('void *', 'dx'), ('void *', 'dweight'), ('void *', 'dbias'), ('int', 'batch'), ('int', 'dim'), ('int', 'seqLen'), ('int', 'kernelSize'), ('cudnnDataType_t', 'dataType'), ('cudnnDataType_t', 'dwDataType'), ('cudnnCausalConv1dActivation_t', 'activation')), 92200, False),
}

# cudnnCausalConv1dActivation_t
ENUMS: dict[str, dict[str, int]] = {
    'cudnnCausalConv1dActivation_t': {'CUDNN_CAUSAL_CONV1D_ACTIVATION_IDENTITY': 0, 'CUDNN_CAUSAL_CONV1D_ACTIVATION_SILU': 1},
}
