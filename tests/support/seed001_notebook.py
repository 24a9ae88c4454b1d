# The code cells of seed 001 (the pygraph notebook), verbatim; only the notebook's
# "In [N]:" markers and prose are left out. Run by tests/package/test_seed001_gpu.py.
import cudnn

print(cudnn.__version__)
import torch

torch.manual_seed(42)
assert torch.cuda.is_available()

device: torch.cuda.device = torch.device("cuda")
print(f"cudnn.backend_version(): {cudnn.backend_version()}")
print(f"torch.version.cuda: {torch.version.cuda}")

handle = cudnn.create_handle()

# Defining a graph we can specify the handle (GPU device to execute on), input & output precision and intermediate data precision.
graph = cudnn.pygraph(
    handle=handle,
    name="cudnn_graph_0",
    io_data_type=cudnn.data_type.HALF, # (Optional)
    compute_data_type=cudnn.data_type.FLOAT, # (Optional)
)

X = graph.tensor(
    name="X",
    dim=[8, 64, 56, 56],
    stride=[56 * 56 * 64, 1, 56 * 64, 64],
    data_type=cudnn.data_type.HALF,
)
W = graph.tensor(name="W", dim=[32, 64, 3, 3], stride=[3 * 3 * 64, 1, 3 * 64, 64])

Y = graph.conv_fprop(
    X,
    W,
    padding=[1, 1],
    stride=[1, 1],
    dilation=[1, 1],
    compute_data_type=cudnn.data_type.FLOAT,
)

Y.set_output(True)

graph.build([cudnn.heur_mode.A])
print(graph)

import torch

X_gpu = torch.randn(
    8, 64, 56, 56, requires_grad=False, device="cuda", dtype=torch.float16
).to(memory_format=torch.channels_last)
W_gpu = torch.randn(
    32, 64, 3, 3, requires_grad=False, device="cuda", dtype=torch.float16
).to(memory_format=torch.channels_last)
Y_gpu = torch.zeros(
    8, 32, 3, 3, requires_grad=False, device="cuda", dtype=torch.float16
).to(memory_format=torch.channels_last)
workspace = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)

# Executes the graph on the GPU device
graph.execute({X: X_gpu, W: W_gpu, Y: Y_gpu}, workspace, handle=handle)

print(Y_gpu)

cudnn.destroy_handle(handle)
