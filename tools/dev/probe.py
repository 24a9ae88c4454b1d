"""Device probe: 2-D pointwise results and plan JSON round trip."""
import ctypes, torch, cudnn
from cudnn._lib import capi
from cudnn._lib.enums import cudnnBackendAttributeName_t as A, cudnnBackendAttributeType_t as T
from cudnn.backend import plan as bp

cudnn.plan_cache.enabled = False
for shape in [(8, 256), (1, 8, 256), (8, 256, 1), (2, 8, 256)]:
    x = torch.randn(shape, device="cuda")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor_like(x)
    Y = g.abs(X).set_output(True)
    g.build()
    y = torch.full(shape, float("nan"), device="cuda")
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({X: x, Y: y}, ws)
    torch.cuda.synchronize()
    print(shape, g.get_plan_name_at_index(0), "nan:", int(torch.isnan(y).sum()), "err:", float((y - x.abs()).abs().nan_to_num(99).max()),
          "uids", X.get_uid(), Y.get_uid(), X.get_stride(), Y.get_stride())

x = torch.randn(4, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
X, W = g.tensor_like(x), g.tensor_like(w)
Y = g.relu(g.conv_fprop(X, W, padding=[1, 1])).set_output(True)
g.build()
plan = g._plans.selected.plan
n = ctypes.c_int64(0)
st = capi.graph.cudnnBackendGetAttribute(plan.ptr, int(A.CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION), int(T.CUDNN_TYPE_CHAR), 0, ctypes.byref(n), None)
print("query status", st, "count", n.value)
buf = ctypes.create_string_buffer(1 << 20)
st = capi.graph.cudnnBackendGetAttribute(plan.ptr, int(A.CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION), int(T.CUDNN_TYPE_CHAR), 1 << 20, ctypes.byref(n), buf)
print("big status", st, "count", n.value, "len", len(buf.value), buf.value[:160])
text = bp.plan_json(plan)
print("plan_json len", len(text), text[:80])
for candidate in (text, buf.value.decode()):
    try:
        p2 = bp.plan_from_json(g._handle_ptr(), candidate, "probe")
        print("plan_from_json OK", bp.workspace_size(p2))
    except Exception as e:
        print("plan_from_json failed:", e)
