"""The conv example of seed 000 with CuPy alone (PyTorch never imported), run by test_wrapper_gpu.py.

Checks that outputs come back as CuPy arrays with the graph's layout, that a dict call
allocates in CuPy, and that the call runs on CuPy's current stream; saves inputs and results
to the .npz named on the command line for the test to compare with PyTorch.
"""

import sys

import cupy as cp
import numpy as np

import cudnn

# Create tensors with physical layout NHWC and logical layout NCHW
X_cupy = cp.random.randn(8, 56, 56, 64).astype(cp.float16).transpose(0, 3, 1, 2)
W_cupy = cp.random.randn(32, 3, 3, 64).astype(cp.float16).transpose(0, 3, 1, 2)

with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
    inputs=["conv2d::image", "conv2d::weight"],
    outputs=["conv_out"],
) as graph:
    Y = graph.conv_fprop(
        image=X_cupy,
        weight=W_cupy,
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True).set_name("conv_out")

Y_cupy = graph(X_cupy, W_cupy)  # default handle, CuPy's current stream
assert isinstance(Y_cupy, cp.ndarray), type(Y_cupy)
assert Y_cupy.shape == (8, 32, 56, 56) and Y_cupy.dtype == cp.float16
assert Y_cupy.strides == tuple(2 * s for s in Y.get_stride()), (Y_cupy.strides, Y.get_stride())

out = graph({"conv2d::image": X_cupy, "conv2d::weight": W_cupy})
assert isinstance(out["conv2d::Y"], cp.ndarray)

# on a non-blocking CuPy stream: the input is written there after a long spin; a call that
# ran anywhere else would read the zeros
spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}''', "spin")
X_late = cp.zeros_like(X_cupy)
cp.cuda.Device().synchronize()
side = cp.cuda.Stream(non_blocking=True)
with side:
    spin((1,), (1,), (np.int64(300_000_000),))
    X_late[...] = X_cupy
    Y_side = graph(X_late, W_cupy)
side.synchronize()

assert "torch" not in sys.modules, "cudnn imported torch"
np.savez(sys.argv[1], x=cp.asnumpy(X_cupy), w=cp.asnumpy(W_cupy), y=cp.asnumpy(Y_cupy),
         y_dict=cp.asnumpy(out["conv2d::Y"]), y_side=cp.asnumpy(Y_side))
print("ok")
