"""Device probe: where a clipped leaky ReLU differs from the documented formula."""
import torch, cudnn

cudnn.plan_cache.enabled = False
x = torch.randn(8, 256, device="cuda") * 4
g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
X = g.tensor_like(x)
Y = g.relu(X, lower_clip=-1.0, upper_clip=2.0, negative_slope=0.25).set_output(True)
g.build()
y = torch.full_like(x, float("nan"))
g.execute({X: x, Y: y}, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8))
torch.cuda.synchronize()
ref = torch.where(x < -1.0, -1.0 + 0.25 * (x + 1.0), torch.clamp(x, max=2.0))
bad = (y - ref).abs() > 1e-4
print("plan", g.get_plan_name_at_index(0), "mismatches", int(bad.sum()))
for xi, yi, ri in zip(x[bad].tolist(), y[bad].tolist(), ref[bad].tolist()):
    print(f"x={xi:.5f} cudnn={yi:.5f} ref={ri:.5f}")
