"""The conv example of seed 000 with JAX arrays as inputs, run by test_wrapper_gpu.py.

JAX arrays are row-major (NCHW here) and immutable, so the outputs are allocated by PyTorch,
which this script imports only after the graph has run, to compare.
"""

import sys

import jax
import jax.numpy as jnp

import cudnn

kx, kw = jax.random.split(jax.random.PRNGKey(0))
X_jax = jax.random.normal(kx, (8, 64, 56, 56), dtype=jnp.float16)
W_jax = jax.random.normal(kw, (32, 64, 3, 3), dtype=jnp.float16)
assert X_jax.devices().pop().platform == "gpu"

with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
    inputs=["conv2d::image", "conv2d::weight"],
    outputs=["conv_out"],
) as graph:
    Y = graph.conv_fprop(
        image=X_jax,  # using a JAX array for layout and type
        weight=W_jax,
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True).set_name("conv_out")

Y_gpu = graph(X_jax, W_jax)
out = graph({"conv2d::image": X_jax, "conv2d::weight": W_jax})

import torch  # only now, to compare

assert "torch" in sys.modules and isinstance(Y_gpu, torch.Tensor), type(Y_gpu)
assert Y_gpu.is_cuda and Y_gpu.dtype == torch.float16 and list(Y_gpu.stride()) == Y.get_stride()
X_ref = torch.from_dlpack(X_jax)
W_ref = torch.from_dlpack(W_jax)
Y_ref = torch.nn.functional.conv2d(X_ref, W_ref, padding=1)
torch.cuda.synchronize()
torch.testing.assert_close(Y_gpu, Y_ref, atol=5e-3, rtol=3e-3)
torch.testing.assert_close(out["conv2d::Y"], Y_ref, atol=5e-3, rtol=3e-3)
print("ok")
