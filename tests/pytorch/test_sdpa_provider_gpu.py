"""``cudnn.torch``'s provider on the GPU: ``F.scaled_dot_product_attention`` under
``sdpa_kernel([SDPBackend.CUDNN_ATTENTION])`` after ``install_sdpa_overrides()`` runs through
``cudnn::sdpa_fwd`` / ``sdpa_bwd`` (counted in ``calls``), against torch's math backend in
float32; what the provider does not serve falls back to torch's own kernels; the varlen ops
where the installed torch has them; and a whole Hugging Face Llama model (built from a config,
nothing downloaded) whose logits and parameter gradients through the provider match torch's
own cuDNN attention; attention masks, dropout, a padded batch and ``generate()`` through it.

Tolerances: O and dQ/dK/dV atol 2e-2 / rtol 2e-2 (fp16, bf16), atol scaled by the reference's
magnitude where above 1. The Llama model (bf16, 2 layers): logits atol 5e-2 rtol 5e-2 against
torch's own cuDNN kernels, parameter gradients compared by relative L2 norm < 5e-2 (both sides
run bf16 attention kernels of different make, so elementwise bf16 noise is expected).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudnn.torch as ct

DEV = "cuda"
DTYPES = [torch.float16, torch.bfloat16]
IDS = ["fp16", "bf16"]


def close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float = 2e-2) -> None:
    mag = max(1.0, float(ref.detach().abs().max()))
    assert not torch.isnan(got).any(), f"{name}: NaN"
    torch.testing.assert_close(got.float(), ref.float(), atol=tol * mag, rtol=tol, msg=lambda m: f"{name}: {m}")


def grads_close(grads: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """Parameter gradients by relative L2 norm < 5e-2 (bf16 kernels of different make on each side)."""
    for name, g in grads.items():
        ref = want[name].float()
        err = float((g.float() - ref).norm() / ref.norm().clamp_min(1e-6))
        assert err < 5e-2, f"{name}: relative L2 error {err:.3g}"


@pytest.fixture
def provider() -> Iterator[ct.SdpaOverrides]:
    handle = ct.install_sdpa_overrides()
    try:
        yield handle
    finally:
        handle.remove()


def qkv(dtype: torch.dtype, b: int = 2, h: int = 8, h_kv: int = 8, s: int = 128,
        d: int = 64) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(b, s, n, d, device=DEV, dtype=dtype).transpose(1, 2).requires_grad_() for n in (h, h_kv, h_kv)]


def math_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                   **kw: object) -> tuple[torch.Tensor, ...]:
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel([SDPBackend.MATH]):
        o = F.scaled_dot_product_attention(*leaves, **kw)  # type: ignore[arg-type]
    o.backward(do.float())
    return (o, *(t.grad for t in leaves))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_through_the_provider(provider: ct.SdpaOverrides, dtype: torch.dtype, causal: bool) -> None:
    q, k, v = qkv(dtype)
    served = dict(ct.calls)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    do = torch.randn_like(o)
    o.backward(do)
    assert ct.calls["fwd"] == served["fwd"] + 1 and ct.calls["bwd"] == served["bwd"] + 1
    assert ct.calls["fwd_cpp"] == served["fwd_cpp"] and ct.calls["bwd_cpp"] == served["bwd_cpp"]
    ro, rdq, rdk, rdv = math_reference(q, k, v, do, is_causal=causal)
    close("O", o, ro)
    for name, t, r in (("dQ", q, rdq), ("dK", k, rdk), ("dV", v, rdv)):
        close(name, t.grad, r)
    assert ct.served_plan_names()


def test_inference_and_gqa(provider: ct.SdpaOverrides) -> None:
    q, k, v = qkv(torch.bfloat16, h=8, h_kv=2)
    served = ct.calls["fwd"]
    with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except RuntimeError as exc:
            pytest.skip(f"this torch's cuDNN backend does not take enable_gqa: {exc}")
    assert ct.calls["fwd"] == served + 1
    ro = math_reference(q, k, v, torch.zeros_like(q), is_causal=True, enable_gqa=True)[0]
    close("O", o, ro)


def test_remove_restores_torchs_kernels() -> None:
    handle = ct.install_sdpa_overrides()
    q, k, v = qkv(torch.bfloat16)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v)
        handle.remove()
        before = dict(ct.calls)
        o = F.scaled_dot_product_attention(q, k, v)
    assert ct.calls == before
    close("O (torch's own kernel)", o, math_reference(q, k, v, torch.zeros_like(q))[0])


def test_compile_through_the_provider(provider: ct.SdpaOverrides) -> None:
    torch._dynamo.reset()
    q, k, v = qkv(torch.bfloat16)

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    before = ct.calls["fwd"]
    o = torch.compile(f, fullgraph=True)(q, k, v)
    o.sum().backward()
    assert ct.calls["fwd"] > before
    ro, rdq, _, _ = math_reference(q, k, v, torch.ones_like(o), is_causal=True)
    close("O", o, ro)
    close("dQ", q.grad, rdq)


def test_varlen_through_the_provider(provider: ct.SdpaOverrides) -> None:
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    if not any(op.startswith("torch_attn::_varlen_attn") for op in provider.ops):
        pytest.skip("this torch has no varlen attention ops")
    lens = [100, 37, 128]
    torch.manual_seed(2)
    q, k, v = (torch.randn(sum(lens), 4, 64, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, 100, 137, 265], device=DEV, dtype=torch.int32)
    before = dict(ct.calls)
    causal = {"window_size": (-1, 0)} if "window_size" in inspect.signature(varlen.varlen_attn).parameters \
        else {"is_causal": True}
    o = varlen.varlen_attn(q, k, v, cu, cu, 128, 128, **causal)
    do = torch.randn_like(o)
    o.backward(do)
    assert ct.calls["fwd"] == before["fwd"] + 1 and ct.calls["bwd"] == before["bwd"] + 1
    start = 0
    for n in lens:
        sl = slice(start, start + n)
        parts = [t[sl].transpose(0, 1).unsqueeze(0) for t in (q, k, v)]
        ro, rdq, rdk, rdv = math_reference(*parts, do[sl].transpose(0, 1).unsqueeze(0), is_causal=True)
        close("O", o[sl], ro[0].transpose(0, 1))
        close("dQ", q.grad[sl], rdq[0].transpose(0, 1))
        close("dK", k.grad[sl], rdk[0].transpose(0, 1))
        close("dV", v.grad[sl], rdv[0].transpose(0, 1))
        start += n


def test_llama_model_through_the_provider() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                      num_hidden_layers=2, intermediate_size=512, vocab_size=1000,
                                      attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device=DEV, dtype=torch.bfloat16)
    ids = torch.randint(0, 1000, (2, 128), device=DEV)

    def step() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}

    try:
        want_logits, want_grads = step()  # torch's own cuDNN attention
    except RuntimeError as exc:
        pytest.skip(f"torch's cuDNN attention does not run this model here: {exc}")
    with ct.install_sdpa_overrides():
        before = dict(ct.calls)
        logits, grads = step()
        served = {k: ct.calls[k] - before[k] for k in ct.calls}
    # every attention call served (a causal mask tensor from transformers would show as fwd_cpp)
    assert served["fwd"] == config.num_hidden_layers and served["bwd"] == config.num_hidden_layers, served
    assert served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    close("logits", logits, want_logits, tol=5e-2)
    grads_close(grads, want_grads)


# -- masks, dropout and a padded batch through the provider ---------------------------------------

def padding_mask(lens: list[int], s: int, causal: bool = True) -> torch.Tensor:
    """A boolean keep-mask [B, 1, S, S] as Hugging Face builds it for SDPA: keys past each row's
    length masked (right padding), and the causal triangle."""
    keys = torch.arange(s, device=DEV)
    keep = (keys[None, :] < torch.tensor(lens, device=DEV)[:, None])[:, None, None, :].expand(len(lens), 1, s, s)
    if causal:
        keep = keep & torch.ones(s, s, dtype=torch.bool, device=DEV).tril()
    return keep


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("kind", ["float", "bool"])
def test_attention_masks_are_served(provider: ct.SdpaOverrides, dtype: torch.dtype, kind: str) -> None:
    """An additive float mask [B, 1, S, S] and a boolean padding + causal mask run on cudnn-py's
    graphs, forward and backward, and match torch's math backend in float32."""
    q, k, v = qkv(dtype, b=3, s=96)
    torch.manual_seed(1)
    mask = torch.randn(3, 1, 96, 96, device=DEV, dtype=dtype) if kind == "float" else padding_mask([96, 50, 7], 96)
    before = dict(ct.calls)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    do = torch.randn_like(o)
    o.backward(do)
    served = {n: ct.calls[n] - before[n] for n in ct.calls}
    assert served["fwd"] == served["bwd"] == 1 and served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    ro, rdq, rdk, rdv = math_reference(q, k, v, do, attn_mask=mask if kind == "bool" else mask.float())
    close("O", o, ro)
    for name, t, r in (("dQ", q, rdq), ("dK", k, rdk), ("dV", v, rdv)):
        close(name, t.grad, r)


def test_dropout_keeps_what_it_scales_and_the_backward_uses_the_forwards_mask(provider: ct.SdpaOverrides) -> None:
    """With V the identity (S_kv = D_v), O is the dropped-out probabilities themselves: every
    entry is 0 or P / (1 - p), about 1 - p of them kept. The gradients match torch's math
    attention under that same mask (read off O), so the backward drew the forward's mask;
    ``torch.manual_seed`` repeats the forward, another seed changes it."""
    p, b, h, s_q, s_kv = 0.3, 2, 4, 32, 64
    torch.manual_seed(3)
    q = (0.5 * torch.randn(b, h, s_q, 64, device=DEV, dtype=torch.float16)).requires_grad_()
    k = (0.5 * torch.randn(b, h, s_kv, 64, device=DEV, dtype=torch.float16)).requires_grad_()
    v = torch.eye(s_kv, device=DEV, dtype=torch.float16).expand(b, h, s_kv, s_kv).contiguous().requires_grad_()

    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p)

    before = dict(ct.calls)
    o = run(7)
    do = torch.randn_like(o)
    o.backward(do)
    assert ct.calls["fwd"] == before["fwd"] + 1 and ct.calls["bwd"] == before["bwd"] + 1
    assert ct.calls["fwd_cpp"] == before["fwd_cpp"] and ct.calls["bwd_cpp"] == before["bwd_cpp"]
    with torch.no_grad():
        probs = torch.softmax(q.float() @ k.float().transpose(-1, -2) / 8.0, dim=-1)
    kept = o.detach() != 0
    assert 0.65 < kept.float().mean().item() < 0.75
    torch.testing.assert_close(o.float()[kept], (probs / (1 - p))[kept], atol=2e-3, rtol=1e-2)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    weights = torch.softmax(leaves[0] @ leaves[1].transpose(-1, -2) / 8.0, dim=-1) * kept / (1 - p)
    (weights @ leaves[2]).backward(do.float())
    for name, t, ref in zip(("dQ", "dK", "dV"), (q, k, v), leaves):
        close(name, t.grad, ref.grad)
    with torch.no_grad():
        again = run(7)
        assert torch.equal(run(7), again) and not torch.equal(run(8), again)


def _llama(dropout: float = 0.0) -> tuple:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                      num_hidden_layers=2, intermediate_size=512, vocab_size=1000,
                                      attention_dropout=dropout, attn_implementation="sdpa", pad_token_id=0)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device=DEV, dtype=torch.bfloat16), config


def test_llama_padded_batch_every_call_served() -> None:
    """A Llama model given a batch of unequal lengths with its padding mask: every attention call,
    forward and backward, served by the provider, logits at the real tokens and parameter
    gradients matching torch's math backend; with attention dropout in training, every call
    served too."""
    model, config = _llama()
    lens = [128, 90, 33]
    ids = torch.randint(1, 1000, (3, 128), device=DEV)
    mask = (torch.arange(128, device=DEV)[None, :] < torch.tensor(lens, device=DEV)[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)

    def step(backends: list[SDPBackend]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        with sdpa_kernel(backends):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}

    want_logits, want_grads = step([SDPBackend.MATH])
    with ct.install_sdpa_overrides():
        before = dict(ct.calls)
        logits, grads = step([SDPBackend.CUDNN_ATTENTION])
        served = {n: ct.calls[n] - before[n] for n in ct.calls}
    layers = config.num_hidden_layers
    assert served["fwd"] == served["bwd"] == layers and served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    real = mask.bool()
    close("logits", logits[real], want_logits[real], tol=5e-2)
    grads_close(grads, want_grads)

    model, _ = _llama(dropout=0.1)
    model.train()
    with ct.install_sdpa_overrides(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        before = dict(ct.calls)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        served = {n: ct.calls[n] - before[n] for n in ct.calls}
    assert torch.isfinite(loss) and served["fwd"] == served["bwd"] == layers and served["fwd_cpp"] == 0, served


def test_llama_generate_with_a_kv_cache_is_served() -> None:
    """``generate()`` of 32 tokens (greedy, KV cache, a left-padded batch): every attention call
    served, prefill and decode (s_q = 1), and the tokens torch's own backends generate, or a
    first difference only where torch's top two logits were a near tie."""
    model, config = _llama()
    model.eval()
    ids = torch.randint(1, 1000, (2, 24), device=DEV)
    mask = torch.ones_like(ids)
    mask[1, :9] = 0  # left padding, as generation pads
    kw = {"attention_mask": mask, "max_new_tokens": 32, "do_sample": False, "pad_token_id": 0,
          "output_scores": True, "return_dict_in_generate": True}
    with torch.no_grad():
        want = model.generate(ids, **kw)
        with ct.install_sdpa_overrides(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            before = dict(ct.calls)
            got = model.generate(ids, **kw)
            served = {n: ct.calls[n] - before[n] for n in ct.calls}
    assert served["fwd"] == 32 * config.num_hidden_layers and served["fwd_cpp"] == 0, served
    same = (got.sequences == want.sequences).all(dim=1)
    for row in (~same).nonzero().flatten().tolist():
        step = int((got.sequences[row] != want.sequences[row]).nonzero()[0]) - ids.shape[1]
        top2 = want.scores[step][row].float().topk(2).values
        assert float(top2[0] - top2[1]) < 0.05, f"row {row}: tokens differ at step {step}, not at a near tie"


# -- torch.compile, CUDA graphs, and a long run ---------------------------------------------------

def test_llama_padded_batch_under_torch_compile() -> None:
    """The padded Llama batch through ``torch.compile``: every attention call served by the
    provider, forward and backward, logits and gradients as in eager mode through it, and a
    second step with new tokens compiles nothing new."""
    dynamo_testing = pytest.importorskip("torch._dynamo.testing")
    model, config = _llama()
    lens = [128, 90, 33]
    mask = (torch.arange(128, device=DEV)[None, :] < torch.tensor(lens, device=DEV)[:, None]).long()

    def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(1, 1000, (3, 128), device=DEV, generator=torch.Generator(DEV).manual_seed(seed))
        return ids, ids.masked_fill(mask == 0, -100)

    def step(fn: object, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = fn(input_ids=ids, attention_mask=mask, labels=labels)  # type: ignore[operator]
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}

    torch._dynamo.reset()
    counter = dynamo_testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter)
    layers = config.num_hidden_layers
    with ct.install_sdpa_overrides():
        ids, labels = batch(0)
        want_logits, want_grads = step(model, ids, labels)
        before = dict(ct.calls)
        logits, grads = step(compiled, ids, labels)
        served = {n: ct.calls[n] - before[n] for n in ct.calls}
        frames = counter.frame_count
        step(compiled, *batch(1))
        again = {n: ct.calls[n] - before[n] - served[n] for n in ct.calls}
    assert served["fwd"] == served["bwd"] == layers and served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    assert again["fwd"] == again["bwd"] == layers and again["fwd_cpp"] == again["bwd_cpp"] == 0, again
    assert counter.frame_count == frames, "the second step recompiled"
    real = mask.bool()
    close("logits", logits[real], want_logits[real], tol=5e-2)
    grads_close(grads, want_grads)


def test_mask_and_dropout_compile_fullgraph(provider: ct.SdpaOverrides) -> None:
    """A boolean mask and dropout under ``torch.compile(fullgraph=True)``: no graph break, the
    calls served, O as eager through the provider with the same seed."""
    torch._dynamo.reset()
    q, k, v = qkv(torch.bfloat16, b=3, s=96)
    mask = padding_mask([96, 50, 7], 96)

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.25)

    compiled = torch.compile(f, fullgraph=True)
    compiled(q, k, v)  # compiles
    before = dict(ct.calls)
    torch.manual_seed(11)
    o = compiled(q, k, v)
    o.sum().backward()
    served = {n: ct.calls[n] - before[n] for n in ct.calls}
    assert served["fwd"] == served["bwd"] == 1 and served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    assert q.grad is not None and torch.isfinite(q.grad).all()
    torch.manual_seed(11)
    eager = f(q, k, v)  # the same seed draws the same Philox seed and offset: the same dropout mask
    close("O (compiled against eager, one seed)", o.detach(), eager.detach())


def test_cuda_graph_capture_with_a_mask_and_dropout(provider: ct.SdpaOverrides) -> None:
    """Masked attention with dropout captured in a CUDA graph (after a warm-up that builds the
    graphs): each replay reads the inputs copied in, and draws a new dropout mask (V the
    identity, so O shows the kept probabilities: 0 or P / (1 - p), about 1 - p of them)."""
    p, b, h, s_q, s_kv = 0.3, 2, 4, 32, 64
    torch.manual_seed(5)
    q = 0.5 * torch.randn(b, h, s_q, 64, device=DEV, dtype=torch.float16)
    k = 0.5 * torch.randn(b, h, s_kv, 64, device=DEV, dtype=torch.float16)
    v = torch.eye(s_kv, device=DEV, dtype=torch.float16).expand(b, h, s_kv, s_kv).contiguous()
    keep = torch.ones(b, 1, s_q, s_kv, dtype=torch.bool, device=DEV)
    keep[1, :, :, 40:] = False  # the second batch row sees its first 40 keys

    def attend() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            attend()
    torch.cuda.current_stream().wait_stream(side)
    before = ct.calls["fwd"]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o = attend()
    assert ct.calls["fwd"] == before + 1 and ct.calls["fwd_cpp"] == 0
    replays = []
    for trial in range(2):
        q.copy_(0.5 * torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        scores = (q.float() @ k.float().transpose(-1, -2) / 8.0).masked_fill(~keep, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        kept = o != 0
        assert 0.6 < kept[keep.expand_as(kept)].float().mean().item() < 0.8, trial  # of the keys not masked
        assert not kept[1, :, :, 40:].any(), "a masked key was read"
        torch.testing.assert_close(o.float()[kept], (probs / (1 - p))[kept], atol=2e-3, rtol=1e-2)
        replays.append(kept.clone())
    assert not torch.equal(replays[0], replays[1]), "two replays drew the same dropout mask"


def test_reduce_overhead_attention_with_a_mask(provider: ct.SdpaOverrides) -> None:
    """``torch.compile(mode="reduce-overhead")`` of masked attention, forward and backward: CUDA
    graphs not skipped, every call served, O and dQ as eager through the provider."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    mask = padding_mask([96, 50, 7], 96)

    def loss(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float().square().mean()

    step = torch.compile(loss, mode="reduce-overhead", fullgraph=True)
    skips = int(counters["inductor"]["cudagraph_skips"])
    before = dict(ct.calls)
    for i in range(3):  # warm-up, record, replay
        torch.manual_seed(i)
        q, k, v = qkv(torch.bfloat16, b=3, s=96)
        torch.compiler.cudagraph_mark_step_begin()
        got = step(q, k, v)
        got.backward()
        dq = q.grad.clone()
        q.grad = None
        want = loss(q, k, v)
        want.backward()
        assert abs(float(got) - float(want)) <= 1e-2 * abs(float(want)), (i, float(got), float(want))
        close(f"dQ (step {i})", dq, q.grad)
    assert int(counters["inductor"]["cudagraph_skips"]) == skips, "inductor skipped CUDA graphs"
    assert ct.calls["fwd_cpp"] == before["fwd_cpp"] and ct.calls["bwd_cpp"] == before["bwd_cpp"]


def test_a_long_run_of_changing_shapes_holds_memory_flat(provider: ct.SdpaOverrides) -> None:
    """``CUDNN_PY_SOAK_PROVIDER_CALLS`` attention calls (100,000 by default) cycling through
    shapes, masks, dropout and backward passes: GPU memory held by torch is the same at the end
    as after the first cycle, the device's used memory moves by allocator noise only (16 MiB),
    and more distinct shapes than the graph cache keeps leave it at its bound."""
    import os

    from cudnn.ops import CACHE
    from cudnn.ops._runtime import CACHE_SIZE

    total = int(os.environ.get("CUDNN_PY_SOAK_PROVIDER_CALLS", "100000"))
    for s in range(8, 8 * (CACHE_SIZE + 12) + 1, 8):  # more shapes than the cache keeps
        q = torch.randn(1, 2, s, 64, device=DEV, dtype=torch.bfloat16)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), torch.no_grad():
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert len(CACHE) <= CACHE_SIZE * torch.cuda.device_count()
    cases = []
    for b, h, s in ((1, 8, 128), (2, 4, 256), (4, 16, 64), (1, 2, 1000)):
        q, k, v = (torch.randn(b, s, h, 64, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
                   for _ in range(3))
        cases.append((q, k, v, {"is_causal": True}))
        cases.append((q, k, v, {"attn_mask": padding_mask([s - 3 * i for i in range(b)], s)}))
        cases.append((q, k, v, {"attn_mask": padding_mask([s] * b, s, causal=False), "dropout_p": 0.1}))

    def cycle(i: int) -> None:
        q, k, v, kw = cases[i % len(cases)]
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            if i % 7:
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, **kw)  # type: ignore[arg-type]
            else:
                F.scaled_dot_product_attention(q, k, v, **kw).sum().backward()  # type: ignore[arg-type]

    for i in range(2 * len(cases) * 7):  # every case forward and backward: graphs, packs, replays made
        cycle(i)
    torch.cuda.synchronize()
    held, (free, _) = torch.cuda.memory_allocated(), torch.cuda.mem_get_info()
    before = dict(ct.calls)
    for i in range(total):
        cycle(i)
    torch.cuda.synchronize()
    served = {n: ct.calls[n] - before[n] for n in ct.calls}
    assert served["fwd"] == total and served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    assert torch.cuda.memory_allocated() == held
    moved = free - torch.cuda.mem_get_info()[0]
    assert abs(moved) <= 16 << 20, f"device memory in use moved by {moved / (1 << 20):.1f} MiB"
    assert len(CACHE) <= CACHE_SIZE * torch.cuda.device_count()
    print(f"reliability: soak provider {total} calls, {served['bwd']} backward, device memory moved "
          f"{moved / (1 << 20):.2f} MiB, graphs cached {len(CACHE)}")


def test_nested_jagged_attention_is_served(provider: ct.SdpaOverrides) -> None:
    """Attention of nested (jagged) tensors under the cuDNN backend, forward and backward: torch
    hands its packed sequences to the worker ops, which run cudnn-py's THD graphs (counted as
    served), and O and the gradients match torch's math backend sequence by sequence."""
    if not any(op == "aten::_cudnn_attention_forward" for op in provider.ops):
        pytest.skip("this torch cannot hand out its own worker kernels (torch.library.get_kernel)")
    lens, h, d = [40, 17, 64], 4, 64
    torch.manual_seed(4)
    parts = [[torch.randn(n, h, d, device=DEV, dtype=torch.bfloat16) for n in lens] for _ in range(3)]
    q, k, v = (torch.nested.nested_tensor(p, layout=torch.jagged, requires_grad=True) for p in parts)
    before = dict(ct.calls)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        except RuntimeError as exc:
            pytest.skip(f"torch's cuDNN backend does not take this nested call here: {exc}")
    o = o.transpose(1, 2)
    do = torch.randn_like(o.values())
    o.values().backward(do)
    served = {n: ct.calls[n] - before[n] for n in ct.calls}
    assert served["fwd"] == served["bwd"] == 1 and served["fwd_cpp"] == served["bwd_cpp"] == 0, served
    start = 0
    for i, n in enumerate(lens):
        one = [p[i].transpose(0, 1).unsqueeze(0) for p in parts]
        ro, rdq, rdk, rdv = math_reference(*one, do[start:start + n].transpose(0, 1).unsqueeze(0))
        close("O", o.values()[start:start + n], ro[0].transpose(0, 1))
        for name, t, r in (("dQ", q, rdq), ("dK", k, rdk), ("dV", v, rdv)):
            close(name, t.grad.values()[start:start + n], r[0].transpose(0, 1))
        start += n
