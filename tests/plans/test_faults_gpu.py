"""Faults on the GPU: plan-cache entries truncated, corrupted, from another cuDNN, swapped with
another graph's, lying about their workspace, unreadable, in a read-only or full directory; a
KeyboardInterrupt during build and during autotune; a destroyed handle. Every build falls back
to building (and computes the right result), never crashes; errors are cudnn exceptions.

Read-only and full directories are small tmpfs mounts (root on the device); where mount is not
allowed those two cases skip, and the size-limited write of tests/plans/test_faults.py stands in.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudnn
import cudnn.backend.plan as backend_plan
from cudnn._graph.build.autotune import _Timer
from cudnn._graph.records.plan_bytes import PlanRecord

HEUR = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def conv_graph(c: int = 32, h: int = 16, handle: Any = None) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor],
                                                                        torch.Tensor, torch.Tensor]:
    torch.manual_seed(c + h)
    x = torch.randn(4, c, h, h, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = (torch.randn(64, c, 3, 3, device="cuda") / c).half().to(memory_format=torch.channels_last)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=torch.float16)
    g = cudnn.pygraph(io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT, handle=handle)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1]), B)).set_output(True)
    g.validate()
    y = torch.empty_strided(Y.get_dim(), Y.get_stride(), device="cuda", dtype=torch.float16)
    ref = torch.relu(F.conv2d(x.double(), w.double(), padding=1) + b.double())
    return g, {X: x, W: w, B: b, Y: y}, y, ref


def run_and_check(g: cudnn.pygraph, pack: dict[Any, torch.Tensor], y: torch.Tensor, ref: torch.Tensor) -> None:
    y.fill_(float("nan"))
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), ref, atol=2e-2, rtol=1e-2)


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Any]:
    pc = cudnn.plan_cache
    saved = pc.directory, pc.enabled
    pc.directory, pc.enabled = tmp_path / "cache", True
    pc.clear(disk=False)
    yield pc
    pc.clear(disk=False)
    pc.directory, pc.enabled = saved


def entries(pc: Any) -> list[Path]:
    pc.flush()  # the cache's writer thread writes the files
    folder = Path(pc.directory) / "plans"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def edit(field: str, value: Any) -> Callable[[Path, Path], None]:
    def apply(path: Path, _other: Path) -> None:
        raw = json.loads(path.read_bytes())
        raw[field] = value
        path.write_text(json.dumps(raw))
    return apply


FAULTS: dict[str, Callable[[Path, Path], None]] = {
    "truncated": lambda p, _: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "garbage": lambda p, _: p.write_bytes(bytes(range(256)) * 16),
    "other_cudnn_version": edit("cudnn_version", 90000),
    "other_gpu": edit("compute_capability", [7, 0]),
    "plan_json_damaged": edit("plan_json", '{"not": "a plan"}'),
    "plan_json_wrong_type": edit("plan_json", 12),
    "workspace_understated": edit("workspace", 0),
    "tensors_damaged": edit("tensors", [{"uid": "x"}]),
    "swapped_with_another_graph": lambda p, other: p.write_bytes(other.read_bytes()),
    "unreadable": lambda p, _: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_damaged_cache_entry_falls_back_to_building(fault: str, cache: Any, caplog: pytest.LogCaptureFixture) -> None:
    g, pack, y, ref = conv_graph()
    g.build(HEUR)
    run_and_check(g, pack, y, ref)
    workspace = g.get_workspace_size()
    (mine,) = entries(cache)
    other_graph = conv_graph(16, 12)[0]
    other_graph.build(HEUR)
    (other,) = [p for p in entries(cache) if p != mine]
    FAULTS[fault](mine, other)
    cache.clear(disk=False)  # as in a new process: only the disk is left
    with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
        g2, pack2, y2, ref2 = conv_graph()
        g2.build(HEUR)
        run_and_check(g2, pack2, y2, ref2)
    assert g2.get_workspace_size() == workspace
    if fault == "workspace_understated":
        assert "plan cache" not in caplog.text  # a readable entry of this graph: used, with the plan's workspace
    else:
        assert "plan cache" in caplog.text, f"the damaged entry was used silently ({fault})"
    if fault != "unreadable":  # rewritten whole: the next process reads it
        cache.flush()  # the rewrite is the writer thread's
        PlanRecord.from_bytes(mine.read_bytes()).check_compatible(torch.cuda.current_device())


def mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); tests/plans/test_faults.py covers a "
                    "size-limited write")


@pytest.mark.parametrize("kind", ["read_only", "full"])
def test_unwritable_cache_directory_is_logged_and_the_build_works(kind: str, cache: Any, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    where = tmp_path / "mnt"
    mount_tmpfs(where, "ro,size=1m" if kind == "read_only" else "size=64k")
    try:
        if kind == "full":
            with open(where / "filler", "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass
        cache.directory = where
        with caplog.at_level(logging.WARNING, logger="cudnn.plan_cache"):
            g, pack, y, ref = conv_graph()
            g.build(HEUR)
            run_and_check(g, pack, y, ref)
            cache.flush()
        assert "cannot write" in caplog.text
        assert not list(where.glob("plans/*.json")) and not list(where.glob("plans/.*.tmp"))
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_keyboard_interrupt_during_build_leaves_the_graph_cleanly_unbuilt(cache: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real = backend_plan.plan_descriptor  # a candidate's build: its plan descriptor, then the finalize

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    g, pack, y, ref = conv_graph()
    monkeypatch.setattr(backend_plan, "plan_descriptor", interrupted)
    with pytest.raises(KeyboardInterrupt):
        g.build(HEUR)
    with pytest.raises(cudnn.GraphStateError):
        g.execute(pack, torch.empty(1 << 20, device="cuda", dtype=torch.uint8))  # nothing half-built runs
    assert entries(cache) == []  # nothing cached from the interrupted build
    monkeypatch.setattr(backend_plan, "plan_descriptor", real)
    g.build(HEUR)
    run_and_check(g, pack, y, ref)


def test_keyboard_interrupt_during_autotune_keeps_the_built_plan(cache: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    g, pack, y, ref = conv_graph()
    g.build(HEUR)
    real = _Timer.median_ms
    calls = [0]

    def interrupted(self: _Timer, run: Any, repeats: int) -> float:
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(self, run, repeats)

    monkeypatch.setattr(_Timer, "median_ms", interrupted)
    ws = torch.empty(max(g.get_workspace_size(), 1 << 22), device="cuda", dtype=torch.uint8)
    with pytest.raises(KeyboardInterrupt):
        g.autotune(pack, ws)
    assert calls[0] >= 1
    run_and_check(g, pack, y, ref)  # the plan selected by build still runs
    monkeypatch.setattr(_Timer, "median_ms", real)
    g.autotune(pack, ws)  # and tuning again completes
    run_and_check(g, pack, y, ref)


def test_destroyed_handle_is_a_clear_error(cache: Any) -> None:
    handle = cudnn.create_handle()
    g, pack, y, ref = conv_graph(handle=handle)
    g.build(HEUR)
    run_and_check(g, pack, y, ref)
    cudnn.destroy_handle(handle)
    cudnn.destroy_handle(handle)  # idempotent
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    with pytest.raises(cudnn.DescriptorClosedError, match="destroyed"):
        g.execute(pack, ws)
    with pytest.raises(cudnn.DescriptorClosedError, match="destroyed"):
        g.build(HEUR)
    other, pack2, y2, ref2 = conv_graph()
    other.build(HEUR)
    with pytest.raises(cudnn.DescriptorClosedError, match="destroyed"):
        other.execute(pack2, ws, handle=handle)
    run_and_check(other, pack2, y2, ref2)  # the graph itself is unharmed
