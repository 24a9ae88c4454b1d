"""A fresh process on the GPU: building a graph from plain dims imports no framework; the first graph
of a process whose CUDA is live builds on the handle made while the graph layer imported; and every
case of benchmarks/bench_startup.py (matmul + bias, layer norm, dynamic-shape conv) built from
the disk cache in a new process gives PyTorch's result (bf16 matmul atol 5e-1 rtol 2e-2 over
1024-term sums of unit normals; layer norm bf16 atol 1e-1 rtol 4e-2; fp16 conv atol 2e-1
rtol 2e-2, fp32 references on the same inputs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

NO_FRAMEWORK = """
import sys
import cudnn
dt = cudnn.data_type
g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
X = g.tensor(name="X", dim=[8, 64, 28, 28], stride=[64 * 28 * 28, 1, 28 * 64, 64])
W = g.tensor(name="W", dim=[64, 64, 3, 3], stride=[64 * 9, 1, 3 * 64, 64])
Y = g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
print(sorted(m for m in ("torch", "cupy", "jax", "numpy") if m in sys.modules))
"""


@pytest.mark.gpu
def test_building_from_dims_imports_no_framework() -> None:
    out = subprocess.run([sys.executable, "-c", NO_FRAMEWORK], env={**os.environ, "PYTHONPATH": SRC},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
import torch
import bench_startup as b
import cudnn
res = {{}}
for case, tol in (("matmul", (5e-1, 2e-2)), ("layernorm", (1e-1, 4e-2)), ("conv_dynamic", (2e-1, 2e-2))):
    g, pack, ref = b.CASES[case]()
    g.build(b.HEUR)
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    out = list(pack.values())[-1]
    out.fill_(float("nan"))
    g.execute(pack, ws)
    expected = ref().float()
    ok = torch.allclose(out.float(), expected, atol=tol[0], rtol=tol[1])
    res[case] = [bool(ok), float((out.float() - expected).abs().max())]
res["disk_hits"] = cudnn.plan_cache.disk_hits
res["kernel_hits"] = cudnn.plan_cache.kernel_hits
print(json.dumps(res))
"""


@pytest.mark.gpu
def test_bench_cases_from_the_disk_cache_in_a_new_process(tmp_path: Path) -> None:
    bench = str(Path(__file__).resolve().parents[2] / "benchmarks")
    env = {**os.environ, "PYTHONPATH": SRC, "CUDNN_PY_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):  # the first writes the cache, the second reads it
        out = subprocess.run([sys.executable, "-c", CHILD.format(bench=bench)], env=env, capture_output=True,
                             text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for res in runs:
        for case in ("matmul", "layernorm", "conv_dynamic"):
            assert res[case][0], (case, res[case])
    assert (runs[0]["disk_hits"], runs[1]["disk_hits"]) == (0, 3)
    assert runs[1]["kernel_hits"] == 1  # the dynamic-shape conv's kernels came from disk


PREFETCH = """
import json, threading
import torch
import cudnn._lib.marshal as marshal
real, made = marshal.create_handle, []
def counted():  # the real cudnnCreate, each call's thread noted
    made.append(threading.current_thread().name)
    return real()
marshal.create_handle = counted
torch.manual_seed(0)
x = torch.randn(8, 64, 28, 28, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
{before}
import cudnn
from cudnn.backend.handle import live_handle_count
dt = cudnn.data_type
g = cudnn.pygraph(io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT{handle})
X, W = g.tensor_like(x), g.tensor_like(w)
Y = g.relu(g.conv_fprop(X, W, padding=[1, 1])).set_output(True)
g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
y = torch.empty_like(x)
g.execute({{X: x, W: w, Y: y}}, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8))
ref = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), padding=1))
print(json.dumps({{"made": made, "handles": live_handle_count(), "ok": bool(torch.allclose(y.float(), ref, atol=2e-1, rtol=2e-2)),
                  "err": float((y.float() - ref).abs().max())}}))
"""


def _prefetch_child(before: str = "", handle: str = "") -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PREFETCH.format(before=before, handle=handle)],
                         env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.gpu
def test_the_first_graph_builds_on_the_handle_made_while_the_graph_layer_imported() -> None:
    """CUDA is live (torch made its context) when the graph layer is first imported: cudnnCreate
    runs once, on the helper, and the graph runs on that handle (fp16 conv, atol 2e-1 rtol 2e-2
    against an fp32 reference on the same inputs)."""
    res = _prefetch_child()
    assert res["ok"], res
    assert res["made"] == ["cudnn-py handle"] and res["handles"] == 1


@pytest.mark.gpu
def test_a_process_that_made_its_handle_first_gets_no_second_one() -> None:
    """The official samples' way: a handle first, then the graph on it. ``cudnn.create_handle()``
    imports the graph layer, whose helper makes the handle meanwhile: one cudnnCreate in all."""
    res = _prefetch_child(before="import cudnn\nh = cudnn.create_handle()", handle=", handle=h")
    assert res["ok"], res
    assert res["made"] == ["cudnn-py handle"] and res["handles"] == 1


@pytest.mark.gpu
def test_a_handle_made_after_the_graph_layer_imported_is_the_one_made_ahead() -> None:
    """The graph layer imported with CUDA live, then a handle made to pass as ``handle=``:
    create_handle takes the handle made ahead, so one cudnnCreate in all (on the helper)."""
    res = _prefetch_child(before="import cudnn\ncudnn.pygraph\nh = cudnn.create_handle()", handle=", handle=h")
    assert res["ok"], res
    assert res["made"] == ["cudnn-py handle"] and res["handles"] == 1


ENGINES_AHEAD = """
import json, threading, torch
torch.zeros(1, device="cuda")
import cudnn
g = cudnn.pygraph()  # the first graph, CUDA live: the helper starts (no import starts a thread)
for t in threading.enumerate():
    if t.name == "cudnn-py handle":
        t.join()
maps = open("/proc/self/maps").read().splitlines()
print(json.dumps(sorted({line.rsplit("/", 1)[-1] for line in maps if "libcudnn_engines" in line})))
"""


@pytest.mark.gpu
def test_the_helper_opens_the_engine_libraries_before_the_first_graph_is_lowered() -> None:
    out = subprocess.run([sys.executable, "-c", ENGINES_AHEAD], env={**os.environ, "PYTHONPATH": SRC},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]), "no libcudnn_engines_* library open after the helper"


NO_CONTEXT = """
import json, threading, torch, cudnn
cudnn.pygraph
g = cudnn.pygraph()
print(json.dumps({"initialized": torch.cuda.is_initialized(), "threads": [t.name for t in threading.enumerate()]}))
"""


@pytest.mark.gpu
def test_declaring_a_graph_before_cuda_starts_initialises_nothing() -> None:
    out = subprocess.run([sys.executable, "-c", NO_CONTEXT], env={**os.environ, "PYTHONPATH": SRC},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["initialized"] is False and "cudnn-py handle" not in res["threads"]
