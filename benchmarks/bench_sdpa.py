"""Attention forward and backward: cudnn-py's sdpa graphs against PyTorch's flash and cuDNN
attention backends (torch.nn.attention.sdpa_kernel), GPU time, TFLOP/s and ratios.

    PYTHONPATH=src python benchmarks/bench_sdpa.py            # both cases, forward and backward
    PYTHONPATH=src python benchmarks/bench_sdpa.py --quick    # fewer repeats
    PYTHONPATH=src python benchmarks/bench_sdpa.py --provider # cudnn.torch's provider only
    PYTHONPATH=src python benchmarks/bench_sdpa.py --provider --other SITE_DIR  # and the official's provider

Cases (bf16, BHSD layout): b4 h16 s4096 d128 causal, and b8 h16 s1024 d64 without mask; and a
decode step: s_q = 1 against a paged K/V cache of s_kv 8192 (GQA, 64-token pages in a shuffled
block order), cudnn-py's unified and composite lowerings against torch's SDPA backends on the same
K/V stored contiguously (torch has no paged cache).
FLOPs: forward 4*b*h*s_q*s_kv*d (halved for causal), backward 2.5x the forward. Decode is bound by
reading K and V, so its rows print the K/V bytes read per second as well.
Build times of the forward graph: cold (first graph of the process), warm (a second identical
graph: the plan cache in memory) and in a new process (the plan cache on disk, in a fresh
directory per run). The autotuned row times every plan of both lowerings (unified SDPA_FWD and
the composite graph) and runs the fastest; the line before it gives each lowering's best plan.

Provider rows (``--provider`` or ``--only provider``): ``F.scaled_dot_product_attention`` under
``sdpa_kernel([CUDNN_ATTENTION])`` with ``cudnn.torch.install_sdpa_overrides()`` (PyTorch's cuDNN
attention served by cudnn-py) against torch's own cuDNN and flash backends, forward and backward,
and ``torch.nn.attention.varlen.varlen_attn`` (packed THD) where torch has it; GPU time, the
ratio to the provider, and host time per call (back-to-back calls without synchronizing, on a
small case as well, where launching is the cost). Also a decode step (b32, 32 query heads over 4
K/V heads with ``enable_gqa``, s_q 1 against s_kv 4096, d128, forward only) against the same two
backends, and a padded batch (b8 h16 s1024 d64, each row with its own key length) whose boolean
``attn_mask`` is causal and padded, forward and backward, against torch's cuDNN, efficient and math
backends (flash takes no mask).

Timing: CUDA events around back-to-back calls after warm-up; the median of the repeats.
Never asserts on time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from _timing import gpu_time, host_time, kernel_time
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudnn

dt = cudnn.data_type


@dataclass
class Case:
    b: int
    h: int
    s: int
    d: int
    causal: bool

    @property
    def label(self) -> str:
        return f"b{self.b} h{self.h} s{self.s} d{self.d}{' causal' if self.causal else ''}"

    def flops(self, backward: bool) -> float:
        f = 4.0 * self.b * self.h * self.s * self.s * self.d * (0.5 if self.causal else 1.0)
        return f * 2.5 if backward else f


def tensor(g: cudnn.pygraph, t: torch.Tensor, name: str) -> cudnn.tensor:
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()),
                    data_type={torch.bfloat16: dt.BFLOAT16, torch.float32: dt.FLOAT}[t.dtype])


def forward_graph(c: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  stats: torch.Tensor) -> tuple[cudnn.pygraph, dict[Any, torch.Tensor]]:
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    tq, tk, tv = tensor(g, q, "q"), tensor(g, k, "k"), tensor(g, v, "v")
    to, ts = g.sdpa(tq, tk, tv, generate_stats=True, attn_scale=1.0 / math.sqrt(c.d), use_causal_mask=c.causal)
    to.set_output(True)
    ts.set_output(True).set_data_type(dt.FLOAT)
    return g, {tq: q, tk: k, tv: v, to: o, ts: stats}


def lowering(g: cudnn.pygraph) -> str:
    """The lowering of the selected plan, as its serialized record names it (only one: none named)."""
    return json.loads(g.serialize(as_bytes=True))["extra"].get("lowering") or "only lowering"


def cudnn_forward(c: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  stats: torch.Tensor) -> tuple[Callable[[], None], float, str]:
    t0 = time.perf_counter()
    g, pack = forward_graph(c, q, k, v, o, stats)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    g.execute(pack, ws)
    torch.cuda.synchronize()
    return (lambda: g.execute(pack, ws)), time.perf_counter() - t0, lowering(g).lower()


def cudnn_forward_tuned(c: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                        stats: torch.Tensor) -> tuple[Callable[[], None], str]:
    """Autotuned over every plan of every lowering; prints the best time of each lowering."""
    g, pack = forward_graph(c, q, k, v, o, stats)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    report = g.autotune(pack, None, warmup=2, repeats=5)
    best: dict[str, float] = {}
    for r in report:
        if r.time_ms is not None:
            best.setdefault(r.lowering or "only lowering", r.time_ms)
    print(f"{c.label:30} autotune: best plan per lowering " +
          ", ".join(f"{name} {ms * 1e3:.1f} us" for name, ms in best.items()))
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    return (lambda: g.execute(pack, ws)), lowering(g).lower()


def build_in_new_process(c: Case) -> float:
    """Seconds a new process takes to build the forward graph (the plan cache on disk is warm)."""
    here = str(Path(__file__).parent)
    code = (f"import sys, time, torch; sys.path.insert(0, {here!r}); import bench_sdpa as b\n"
            f"c = b.Case({c.b}, {c.h}, {c.s}, {c.d}, {c.causal!r})\n"
            "q = torch.empty(c.b, c.h, c.s, c.d, device='cuda', dtype=torch.bfloat16)\n"
            "stats = torch.empty(c.b, c.h, c.s, 1, device='cuda')\n"
            "g, pack = b.forward_graph(c, q, q, q, torch.empty_like(q), stats)\n"
            "t0 = time.perf_counter(); g.build([b.cudnn.heur_mode.A, b.cudnn.heur_mode.FALLBACK])\n"
            "print(time.perf_counter() - t0, b.cudnn.plan_cache.disk_hits)")
    cudnn.plan_cache.flush()  # the child reads what this process's writer thread wrote
    env = {**os.environ, "CUDNN_PY_CACHE_DIR": str(cudnn.plan_cache.directory)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    secs, hits = res.stdout.split()[-2:]
    if hits != "1":
        print(f"{c.label:30} (the new process missed the plan cache)")
    return float(secs)


def cudnn_backward(c: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   d_o: torch.Tensor, stats: torch.Tensor) -> tuple[Callable[[], None], float]:
    t0 = time.perf_counter()
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    ins = [tensor(g, t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (d_o, "dO"), (stats, "stats"))]
    grads = [torch.empty_like(t) for t in (q, k, v)]
    outs = g.sdpa_backward(*ins, attn_scale=1.0 / math.sqrt(c.d), use_causal_mask=c.causal)
    for t, buf in zip(outs, grads):
        t.set_output(True).set_dim(list(buf.shape)).set_stride(list(buf.stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    pack = dict(zip(ins, (q, k, v, o, d_o, stats))) | dict(zip(outs, grads))
    g.execute(pack, ws)
    torch.cuda.synchronize()
    return (lambda: g.execute(pack, ws)), time.perf_counter() - t0


def torch_fns(backend: SDPBackend, c: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              d_o: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
    qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=c.causal)
            out.backward(d_o)
    except RuntimeError:
        return None

    def fwd() -> Any:
        with sdpa_kernel(backend), torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=c.causal)

    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=c.causal)

    def bwd() -> Any:
        return torch.autograd.grad(out, (qq, kk, vv), d_o, retain_graph=True)

    return fwd, bwd


@dataclass
class Decode:
    b: int = 16
    h_q: int = 32
    h_kv: int = 8
    s_kv: int = 8192
    d: int = 128
    block: int = 64

    @property
    def label(self) -> str:
        return f"decode b{self.b} h{self.h_q}/{self.h_kv} s_kv{self.s_kv} d{self.d} paged{self.block}"

    def flops(self) -> float:
        return 4.0 * self.b * self.h_q * self.s_kv * self.d

    def kv_bytes(self) -> float:
        return 2.0 * self.b * self.h_kv * self.s_kv * self.d * 2  # K and V, bf16


def paged(t: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[b, h, s, d] -> (container [b * s / block, h, block, d] in a shuffled block order, page table)."""
    b, h, s, d = t.shape
    nblk = s // block
    blocks = t.view(b, h, nblk, block, d).permute(0, 2, 1, 3, 4).reshape(b * nblk, h, block, d)
    perm = torch.randperm(b * nblk, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    container = torch.empty_like(blocks)
    container[perm] = blocks
    return container, perm.view(b, 1, nblk, 1).to(torch.int32).contiguous()


def cudnn_decode(c: Decode, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 implementation: Any) -> tuple[Callable[[], None], float, str]:
    """sdpa inference of one query token per sequence over the paged cache of k, v."""
    t0 = time.perf_counter()
    (kc, kt), (vc, vt) = paged(k, c.block), paged(v, c.block)
    seq_q = torch.ones(c.b, 1, 1, 1, dtype=torch.int32, device="cuda")
    seq_kv = torch.full((c.b, 1, 1, 1), c.s_kv, dtype=torch.int32, device="cuda")
    g = cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
    bufs = {"q": q, "k_cache": kc, "v_cache": vc, "k_table": kt, "v_table": vt, "seq_q": seq_q, "seq_kv": seq_kv}
    ts = {name: g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()),
                         data_type={torch.bfloat16: dt.BFLOAT16, torch.int32: dt.INT32}[t.dtype])
          for name, t in bufs.items()}
    to, _ = g.sdpa(ts["q"], ts["k_cache"], ts["v_cache"], is_inference=True, attn_scale=1.0 / math.sqrt(c.d),
                   use_padding_mask=True, seq_len_q=ts["seq_q"], seq_len_kv=ts["seq_kv"],
                   paged_attention_k_table=ts["k_table"], paged_attention_v_table=ts["v_table"],
                   paged_attention_max_seq_len_kv=c.s_kv, implementation=implementation)
    to.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    pack = {ts[name]: t for name, t in bufs.items()} | {to: o}
    g.execute(pack, ws)
    torch.cuda.synchronize()
    from cudnn._graph.model.expand import expand

    nodes, _ = expand(g.nodes, g.context, cudnn.backend_version())
    how = "unified" if [n.op for n in nodes] == ["sdpa_fwd"] else "composite"
    return (lambda: g.execute(pack, ws)), time.perf_counter() - t0, how


def decode_rows(calls: int, repeats: int) -> None:
    """The decode case: cudnn-py (both lowerings) and torch's backends; O checked against torch's math."""
    c = Decode()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(c.b, c.h_q, 1, c.d, generator=gen, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(c.b, c.h_kv, c.s_kv, c.d, generator=gen, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    with sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    rows = []
    for implementation in (cudnn.attention_implementation.AUTO, cudnn.attention_implementation.COMPOSITE):
        o = torch.empty_like(q)
        try:
            fn, build, how = cudnn_decode(c, q, k, v, o, implementation)
        except (cudnn.GraphError, cudnn.cudnnGraphNotSupportedError) as exc:
            print(f"{c.label:44} cudnn-py {implementation.name}: refused ({str(exc).splitlines()[0][:120]})")
            continue
        err = float((o.float() - want).abs().max())
        rows.append((f"cudnn-py ({how})", gpu_time(fn, calls, repeats)))
        print(f"{c.label:44} cudnn-py ({how}): build {build:.2f} s, max abs err vs float32 {err:.2g}")
    for name, backend in (("torch flash", SDPBackend.FLASH_ATTENTION),
                          ("torch efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("torch cudnn", SDPBackend.CUDNN_ATTENTION), ("torch math", SDPBackend.MATH)):
        def fn(backend: SDPBackend = backend) -> Any:
            with sdpa_kernel(backend), torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        try:
            fn()
        except RuntimeError:
            print(f"{c.label:44} {name} unavailable for this case")
            continue
        rows.append((name, gpu_time(fn, calls, repeats)))
    if not rows:
        return
    ours = rows[0][1]
    for name, secs in rows:
        print(f"{c.label:44} {name:22} {secs * 1e6:9.1f} us {c.flops() / secs / 1e12:7.2f} TFLOP/s "
              f"{c.kv_bytes() / secs / 1e12:6.2f} TB/s {ours / secs:10.2f}x")


@dataclass
class ProviderCase:
    """A provider case, bf16, BSHD memory: Q [b, h, s_q, d] against K and V [b, h_kv, s, d]
    (``h_kv`` below ``h``: GQA; 0 means ``h``; ``s_q`` 0 means ``s``). ``kv_lens``: a boolean
    attn_mask [b, 1, s_q, s], causal and each batch row's keys cut at its length (a padded batch);
    ``backward``: whether a backward row is measured; ``impls``: the rows."""
    b: int
    h: int
    s: int
    d: int
    causal: bool = False
    h_kv: int = 0
    s_q: int = 0
    kv_lens: tuple[int, ...] | None = None
    backward: bool = True
    impls: tuple[str, ...] = ("provider", "torch cudnn", "torch flash")

    def __post_init__(self) -> None:
        self.h_kv = self.h_kv or self.h
        self.s_q = self.s_q or self.s

    @property
    def label(self) -> str:
        heads = f"h{self.h}" if self.h_kv == self.h else f"h{self.h}/{self.h_kv}"
        seqs = f"s{self.s}" if self.s_q == self.s else f"s_q{self.s_q} s_kv{self.s}"
        how = (" causal" if self.causal else "") + (" pad+causal mask" if self.kv_lens is not None else "")
        return f"b{self.b} {heads} {seqs} d{self.d}{how}"

    def inputs(self, device: str = "cuda") -> tuple[torch.Tensor, ...]:
        """Q, K, V and dO, random, in BSHD memory (as models make them) viewed as BHSD."""
        gen = torch.Generator(device=device).manual_seed(0)

        def bshd(s: int, h: int) -> torch.Tensor:
            return torch.randn(self.b, s, h, self.d, generator=gen, device=device,
                               dtype=torch.bfloat16).transpose(1, 2)

        return bshd(self.s_q, self.h), bshd(self.s, self.h_kv), bshd(self.s, self.h_kv), bshd(self.s_q, self.h)

    def mask(self, device: str = "cuda") -> torch.Tensor | None:
        """The boolean attn_mask of ``kv_lens`` (True: attended), as a Hugging Face decoder builds
        it for a right-padded batch: key j of query i where j <= i and j < the row's length; every
        query keeps its first key, so no row is fully masked."""
        if self.kv_lens is None:
            return None
        lens = torch.tensor(self.kv_lens, device=device).view(self.b, 1, 1, 1)
        i = torch.arange(self.s_q, device=device).view(-1, 1)
        j = torch.arange(self.s, device=device)
        return ((j <= i) & (j < lens)) | (j == 0)


def attention_fns(backend: SDPBackend, c: ProviderCase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  d_o: torch.Tensor, mask: torch.Tensor | None) -> tuple[Callable[[], Any], ...]:
    """Forward (no grad) and, where ``c.backward``, backward (of one kept forward) of
    F.scaled_dot_product_attention on ``backend`` with ``mask`` as attn_mask (and enable_gqa where
    K and V have fewer heads); the backward runs whatever kernel is registered when it is called."""
    kw: dict[str, Any] = {"attn_mask": mask, "is_causal": c.causal}
    if c.h_kv != c.h:
        kw["enable_gqa"] = True

    def fwd() -> Any:
        with sdpa_kernel(backend), torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, **kw)

    if not c.backward:
        return (fwd,)
    qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(qq, kk, vv, **kw)
    return fwd, lambda: torch.autograd.grad(out, (qq, kk, vv), d_o, retain_graph=True)


def varlen_fns(lens: list[int], h: int, d: int) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
    """Forward and backward of torch's varlen_attn (causal) on packed [T, H, D] bf16 tensors."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(sum(lens), h, d, generator=gen, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    n = max(lens)
    causal = {"window_size": (-1, 0)} if "window_size" in inspect.signature(varlen_attn).parameters \
        else {"is_causal": True}
    out = varlen_attn(q, k, v, cu, cu, n, n, **causal)
    d_o = torch.randn_like(out)

    def fwd() -> Any:
        with torch.no_grad():
            return varlen_attn(q, k, v, cu, cu, n, n, **causal)

    return fwd, lambda: torch.autograd.grad(out, (q, k, v), d_o, retain_graph=True)


PROVIDER_CASES = (
    ProviderCase(4, 16, 4096, 128, True), ProviderCase(8, 16, 1024, 64), ProviderCase(1, 8, 128, 64, True),
    ProviderCase(32, 32, 4096, 128, h_kv=4, s_q=1, backward=False),  # a decode step, GQA 8
    ProviderCase(8, 16, 1024, 64, kv_lens=(1024, 900, 768, 1000, 512, 1024, 640, 333),
                 impls=("provider", "torch cudnn", "torch efficient", "torch math")))
# the backend each row runs under; the provider's row with cudnn.torch's overrides installed
PROVIDER_BACKENDS = {"provider": SDPBackend.CUDNN_ATTENTION, "torch cudnn": SDPBackend.CUDNN_ATTENTION,
                     "torch flash": SDPBackend.FLASH_ATTENTION, "torch efficient": SDPBackend.EFFICIENT_ATTENTION,
                     "torch math": SDPBackend.MATH}
VARLEN_LENS = [1024, 300, 2048, 17, 700, 1100, 4096, 811]


def provider_measure(impls: tuple[str, ...], calls: int, repeats: int) -> dict[str, list[float]]:
    """"case|impl|pass" -> [GPU seconds (host hidden), host seconds, busy seconds (events around
    back-to-back calls)] per call, for each case's implementations that are among ``impls``
    ("provider": whatever package ``cudnn`` is here; the others: PROVIDER_BACKENDS); the
    provider's rows also note calls it handed back. A row torch refuses is left out."""
    from cudnn.torch import calls as served
    from cudnn.torch import install_sdpa_overrides

    Make = Callable[[], tuple[Callable[[], Any], ...] | None]
    rows: list[tuple[str, str, Make]] = []
    for c in PROVIDER_CASES:
        q, k, v, d_o = c.inputs()
        mask = c.mask()
        rows += [(c.label, impl, partial(attention_fns, PROVIDER_BACKENDS[impl], c, q, k, v, d_o, mask))
                 for impl in c.impls if impl in impls]
    varlen = f"varlen b{len(VARLEN_LENS)} h16 T{sum(VARLEN_LENS)} d128 causal"
    rows += [(varlen, impl, lambda: varlen_fns(VARLEN_LENS, 16, 128)) for impl in ("provider", "torch flash")
             if impl in impls]
    out: dict[str, list[float]] = {}
    for case, impl, make in rows:
        provider = impl == "provider"
        handle = install_sdpa_overrides() if provider else None  # the backward runs what is installed then
        try:
            before = dict(served)
            try:
                fns = make()
            except RuntimeError as exc:
                print(f"{case:36} {impl}: unavailable ({str(exc).splitlines()[0]})", file=sys.stderr)
                continue
            if fns is None:
                continue
            for direction, fn in zip(("fwd", "bwd"), fns):
                try:
                    fn()  # a forward-only case runs nothing in make(): torch may refuse it here
                except RuntimeError as exc:
                    print(f"{case:36} {impl} {direction}: unavailable ({str(exc).splitlines()[0]})",
                          file=sys.stderr)
                    break
                host = host_time(fn)
                out[f"{case}|{impl}|{direction}"] = [kernel_time(fn, calls, repeats, host), host,
                                                     gpu_time(fn, calls, repeats)]
            if provider:
                fell_back = {k: served[k] - before[k] for k in ("fwd_cpp", "bwd_cpp", "fwd_fa2", "bwd_fa2")}
                if any(fell_back.values()):
                    print(f"{case:36} note: calls the provider handed to torch's kernels: {fell_back}",
                          file=sys.stderr)
        finally:
            if handle is not None:
                handle.remove()
    return out


def provider_rows(calls: int, repeats: int, other: str | None) -> None:
    """cudnn.torch's provider against torch's own attention backends (each case's), and against the
    official package's provider (``other``: run in a child process; see the module's note)."""
    ours = provider_measure(tuple(PROVIDER_BACKENDS), calls, repeats)
    theirs: dict[str, list[float]] | str = {}
    if other is not None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(other), str(Path(__file__).parent)])
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--provider-child", str(calls),
                               str(repeats)], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
        theirs = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() \
            else f"failed: {done.stderr.strip().splitlines()[-1:]}"
    print(f"{'case':36} {'pass':4} {'impl':18} {'GPU us':>9} {'host us':>8} {'busy us':>8} {'GPU vs provider':>15} "
          f"{'busy vs provider':>16}")
    rows: list[tuple[str, str, str, list[float]]] = []  # the official's provider just before ours
    for key, figures in ours.items():
        case, impl, direction = key.split("|")
        if impl == "provider" and isinstance(theirs, dict) and key in theirs:
            rows.append((case, "official provider", direction, theirs[key]))
        rows.append((case, "cudnn-py provider" if impl == "provider" else impl, direction, figures))
    for case, name, direction, (gpu, host, busy) in rows:
        mine = ours.get(f"{case}|provider|{direction}", [float("nan")] * 3)
        print(f"{case:36} {direction:4} {name:18} {gpu * 1e6:9.1f} {host * 1e6:8.1f} {busy * 1e6:8.1f} "
              f"{mine[0] / gpu:14.3f}x {mine[2] / busy:15.3f}x")
    if isinstance(theirs, str):
        print(f"official provider: {theirs}")
    print("GPU us: kernel time per call, the batch queued behind a GPU spin so issuing it costs nothing; "
          "host us: Python and launch time per call, not synchronized; busy us: events around back-to-back "
          "calls (the larger of the two); 'GPU vs provider' = the cudnn-py provider's GPU time / that row's "
          "(above 1: the provider's kernels take longer); 'busy vs provider' the same for busy time (above 1: "
          "back-to-back calls through the provider take longer)")


def provider_child(calls: int, repeats: int) -> None:
    """In a process whose ``cudnn`` is another package (the official frontend): its provider's rows."""
    print(json.dumps(provider_measure(("provider",), calls, repeats)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["prefill", "decode", "provider"], help="run one group of cases")
    ap.add_argument("--provider", action="store_true", help="the same as --only provider")
    ap.add_argument("--no-tune", action="store_true", help="skip the autotuned forward rows")
    ap.add_argument("--other", metavar="SITE_DIR", help="also the official package's provider, installed there")
    if sys.argv[1:2] == ["--provider-child"]:
        provider_child(int(sys.argv[2]), int(sys.argv[3]))
        return
    args = ap.parse_args()
    if args.provider:
        args.only = "provider"
    cudnn.plan_cache.directory = Path(tempfile.mkdtemp(prefix="bench_sdpa_"))  # cold builds are cold
    calls, repeats = (5, 3) if args.quick else (20, 7)
    print(f"{torch.cuda.get_device_name()}, cuDNN {cudnn.backend_version_string()}, torch {torch.__version__}")
    if args.only in (None, "provider"):
        provider_rows(calls, repeats, args.other)
    if args.only == "provider":
        return
    if args.only != "prefill":
        decode_rows(calls, repeats)
    if args.only == "decode":
        return
    cases = [Case(4, 16, 4096, 128, True), Case(8, 16, 1024, 64, False)]
    print(f"{'case':30} {'pass':4} {'impl':26} {'time us':>9} {'TFLOP/s':>8} {'vs cudnn-py':>11}")
    for c in cases:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, d_o = (torch.randn(c.b, c.h, c.s, c.d, generator=gen, device="cuda", dtype=torch.bfloat16)
                        for _ in range(4))
        o = torch.empty_like(q)
        stats = torch.empty(c.b, c.h, c.s, 1, device="cuda")
        fwd, build_f, how = cudnn_forward(c, q, k, v, o, stats)
        t0 = time.perf_counter()
        cudnn_forward(c, q, k, v, o, stats)
        build_warm = time.perf_counter() - t0
        build_new = build_in_new_process(c)
        bwd, build_b = cudnn_backward(c, q, k, v, o, d_o, stats)
        rows = {"fwd": [(f"cudnn-py ({how})", gpu_time(fwd, calls, repeats))],
                "bwd": [("cudnn-py (composite)", gpu_time(bwd, calls, repeats))]}
        if not args.no_tune:
            tuned, won = cudnn_forward_tuned(c, q, k, v, o, stats)
            rows["fwd"].append((f"cudnn-py tuned ({won})", gpu_time(tuned, calls, repeats)))
        for name, backend in (("torch flash", SDPBackend.FLASH_ATTENTION), ("torch cudnn", SDPBackend.CUDNN_ATTENTION)):
            fns = torch_fns(backend, c, q, k, v, d_o)
            if fns is None:
                print(f"{c.label:30} {name} unavailable for this case")
                continue
            rows["fwd"].append((name, gpu_time(fns[0], calls, repeats)))
            rows["bwd"].append((name, gpu_time(fns[1], calls, repeats)))
        for direction, entries in rows.items():
            ours = entries[0][1]
            for name, secs in entries:
                tflops = c.flops(direction == "bwd") / secs / 1e12
                print(f"{c.label:30} {direction:4} {name:26} {secs * 1e6:9.1f} {tflops:8.1f} {ours / secs:10.2f}x")
        print(f"{c.label:30} build forward: cold {build_f * 1e3:.1f} ms (first in process), warm "
              f"{build_warm * 1e3:.2f} ms (same process), new process {build_new * 1e3:.2f} ms (plan cache "
              f"on disk); backward cold {build_b * 1e3:.1f} ms")
    print("'vs cudnn-py' = cudnn-py time / that row's time (below 1: cudnn-py is faster)")


if __name__ == "__main__":
    main()
