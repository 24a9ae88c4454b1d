"""Seed 000 (shared/seeds/000_9fd78a8f81f20250.txt), the notebook "Overview of the cuDNN Wrapper":
its code cells verbatim, in order; only the "In [None]:" markers and the markdown prose are left out.
Run as a script by tests/wrapper/test_wrapper_gpu.py (it needs a GPU, PyTorch and CuPy)."""

# --- cell (seed lines 12-12) ---
# get_ipython().system('nvidia-smi')

# --- cell (seed lines 17-19) ---
# get_ipython().system('pip install nvidia-cudnn-cu12')
# get_ipython().system('pip install nvidia-cudnn-frontend')
# get_ipython().system('pip3 install --pre torch --index-url https://download.pytorch.org/whl/nightly/cu128')

# --- cell (seed lines 26-27) ---
import torch

import cudnn

# --- cell (seed lines 30-60) ---
device = torch.device("cuda")

handle = cudnn.create_handle()

# Create NCHW tensor but physical layout is NHWC
X_gpu = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
W_gpu = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)

with cudnn.Graph(
    name="graph_0",
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
) as graph:
    Y = graph.conv_fprop(
        image=X_gpu,  # referencing tensor layout and type only
        weight=W_gpu,  # referencing tensor layout and type only
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True).set_name("conv_out")

graph.set_io_tuples(["conv2d::image", "conv2d::weight"], ["conv_out"])
Y_gpu = graph(
    X_gpu, W_gpu, handle=handle
)  # reading the tensor values to execute the graph

# --- cell (seed lines 71-90) ---
with cudnn.Graph(
    name="graph_0",
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
    inputs=["conv2d::image", "conv2d::weight"],
    outputs=["conv_out"],
) as graph:
    Y = graph.conv_fprop(
        image=X_gpu,  # referencing tensor layout and type only
        weight=W_gpu,  # referencing tensor layout and type only
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True).set_name("conv_out")

Y_gpu = graph(
    X_gpu, W_gpu, handle=handle
)  # reading the tensor values to execute the graph

# --- cell (seed lines 99-116) ---
with cudnn.Graph(
    inputs=["conv2d::image", "conv2d::weight"],
    outputs=["conv_out"],
) as graph:
    Y = graph.conv_fprop(
        image=X_gpu,  # referencing tensor layout and type only
        weight=W_gpu,  # referencing tensor layout and type only
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        compute_data_type=cudnn.data_type.FLOAT,
        name="conv2d",
    )
    Y.set_data_type(cudnn.data_type.HALF).set_output(True).set_name("conv_out")

Y_gpu = graph(
    X_gpu, W_gpu, handle=handle
)  # reading the tensor values to execute the graph

# --- cell (seed lines 127-163) ---
with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
    inputs=["conv2d::image", "conv2d::weight"],
    outputs=["conv_out"],
) as graph:
    X = graph.tensor(
        name="X",
        dim=[8, 64, 56, 56],
        stride=[56 * 56 * 64, 1, 56 * 64, 64],
        data_type=cudnn.data_type.HALF,
    )
    W = graph.tensor(
        name="W",
        dim=[32, 64, 3, 3],
        stride=[64 * 3 * 3, 1, 64 * 3, 64],
    )
    Y = graph.conv_fprop(
        image=X,  # using a cuDNN tensor object for layout and type
        weight=W,  # using a cuDNN tensor object for layout and type
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True).set_name("conv_out")

device = torch.device("cuda")
X_gpu = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
W_gpu = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
Y_gpu = graph(
    X_gpu, W_gpu, handle=handle
)  # using dlpack tensors for values to execute the graph

# --- cell (seed lines 172-196) ---
import cupy as cp

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
        image=X_cupy,  # using a CuPy array for layout and type
        weight=W_cupy,  # using a CuPy array for layout and type
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True).set_name("conv_out")

Y_gpu = graph(
    X_cupy, W_cupy, handle=handle
)  # using CuPy arrays for values to execute the graph

# --- cell (seed lines 203-207) ---
X_ref = torch.tensor(X_cupy)
W_ref = torch.tensor(W_cupy)
Y_ref = torch.nn.functional.conv2d(X_ref, W_ref, padding=1)

torch.testing.assert_close(Y_gpu, Y_ref, atol=5e-3, rtol=3e-3)

# --- cell (seed lines 216-243) ---
X_gpu = torch.randn(8, 56, 56, 64, device=device, dtype=torch.float16).permute(
    0, 3, 1, 2
)
W_gpu = torch.randn(32, 3, 3, 64, device=device, dtype=torch.float16).permute(
    0, 3, 1, 2
)

with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT
) as graph:
    Y = graph.conv_fprop(
        image=X_gpu,
        weight=W_gpu,
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True)

# allocate the output tensor
Y_gpu = torch.zeros(8, 56, 56, 32, device=device, dtype=torch.float16).permute(
    0, 3, 1, 2
)
# execute the graph with a dictionary, output tensors will be updated in place
output = graph(
    {"conv2d::image": X_gpu, "conv2d::weight": W_gpu, "conv2d::Y": Y_gpu}, handle=handle
)

# --- cell (seed lines 252-253) ---
Y_ref = torch.nn.functional.conv2d(X_gpu, W_gpu, padding=1)
torch.testing.assert_close(Y_gpu, Y_ref, atol=5e-3, rtol=3e-3)

# --- cell (seed lines 258-281) ---
X2_gpu = torch.randn(8, 56, 56, 64, device=device, dtype=torch.float16).permute(
    0, 3, 1, 2
)
W2_gpu = torch.randn(32, 3, 3, 64, device=device, dtype=torch.float16).permute(
    0, 3, 1, 2
)

# Same graph as before will be reused
# with cudnn.Graph(
#     io_data_type=cudnn.data_type.HALF,
#     compute_data_type=cudnn.data_type.FLOAT
# ) as graph:
#    Y = graph.conv_fprop(
#        image=X_gpu,
#        weight=W_gpu,
#        padding=[1, 1],
#        stride=[1, 1],
#        dilation=[1, 1],
#        name="conv2d",
#    )
#    Y.set_output(True)

output = graph({"conv2d::image": X2_gpu, "conv2d::weight": W2_gpu}, handle=handle)
Y2_gpu = output["conv2d::Y"]  # new key is created in dict for the outputs

# --- cell (seed lines 286-287) ---
Y2_ref = torch.nn.functional.conv2d(X2_gpu, W2_gpu, padding=1)
torch.testing.assert_close(Y2_gpu, Y2_ref, atol=5e-3, rtol=3e-3)

# --- cell (seed lines 299-325) ---
X_gpu = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
W_gpu = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)

with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
) as graph:
    Y = graph.conv_fprop(
        X_gpu,  # tensor in a positional argument
        weight=W_gpu,  # tensor in a keyword argument
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
        name="conv2d",
    )
    Y.set_output(True)

# specify the input and output tensors and then execute the graph
graph.set_io_tuples(["conv2d::0", "conv2d::weight"], [Y])
Y_gpu = graph(X_gpu, W_gpu, handle=handle)

Y_ref = torch.nn.functional.conv2d(X_gpu, W_gpu, padding=1)
torch.testing.assert_close(Y_gpu, Y_ref, atol=5e-3, rtol=3e-3)

# --- cell (seed lines 334-358) ---
X_gpu = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
W_gpu = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)

with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
) as graph:
    Y = graph.conv_fprop(
        X_gpu,
        weight=W_gpu,
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
    )
    Y.set_output(True)

graph.set_io_tuples(["conv_fprop.0::0", "conv_fprop.0::weight"], ["conv_fprop.0::Y"])
Y_gpu = graph(X_gpu, W_gpu, handle=handle)

Y_ref = torch.nn.functional.conv2d(X_gpu, W_gpu, padding=1)
torch.testing.assert_close(Y_gpu, Y_ref, atol=5e-3, rtol=3e-3)

# --- cell (seed lines 365-390) ---
X_gpu = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
W_gpu = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)

with cudnn.Graph(
    io_data_type=cudnn.data_type.HALF,
    compute_data_type=cudnn.data_type.FLOAT,
) as graph:
    Y = graph.conv_fprop(
        X_gpu,
        weight=W_gpu,
        padding=[1, 1],
        stride=[1, 1],
        dilation=[1, 1],
    )
    Y.set_output(True)

# specify the input and output tensors using tensor objects
graph.set_io_tuples([W_gpu, X_gpu], [Y])
Y_gpu = graph(W_gpu, X_gpu, handle=handle)

Y_ref = torch.nn.functional.conv2d(X_gpu, W_gpu, padding=1)
torch.testing.assert_close(Y_gpu, Y_ref, atol=5e-3, rtol=3e-3)

# --- cell (seed lines 403-475) ---
cache = {}  # global cache for the decorator


def cached_graph_factory(func):
    """Decorator for the factory function to cache Graph objects."""

    def wrapper(*args):
        key = [func.__name__]
        for arg in args:
            key.extend([arg.shape, arg.stride(), arg.dtype])
        key = tuple(key)
        if key not in cache:
            print("Creating new graph:", key)
            cache[key] = func(*args)
        return cache[key]

    return wrapper


@cached_graph_factory
def conv(x, w):
    with cudnn.Graph(
        io_data_type=cudnn.data_type.HALF,
        compute_data_type=cudnn.data_type.FLOAT,
    ) as graph:
        Y = graph.conv_fprop(
            image=x,
            weight=w,
            padding=[1, 1],
            stride=[1, 1],
            dilation=[1, 1],
            name="conv",
        )
        Y.set_output(True)

    graph.set_io_tuples(["conv::image", "conv::weight"], ["conv::Y"])
    return graph


def call_conv(x, w):
    g = conv(x, w)
    return g(x, w, handle=handle)


# Call it the first time
print("First call")
x1 = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
w1 = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
y1 = call_conv(x1, w1)

# Call it the second time with argument of the same shape
print("Second call")
x2 = torch.randn(8, 64, 56, 56, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
w2 = torch.randn(32, 64, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
y2 = call_conv(x2, w2)

# Call it the third time with argument of different shape
print("Third call")
x3 = torch.randn(8, 20, 60, 60, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
w3 = torch.randn(30, 20, 3, 3, device=device, dtype=torch.float16).to(
    memory_format=torch.channels_last
)
y3 = call_conv(x3, w3)

# --- cell (seed lines 482-482) ---
cudnn.destroy_handle(handle)
