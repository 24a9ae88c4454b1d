"""Real models with cudnn-py inside (examples/torch_models.py) against the same torch models,
and torch.compile(mode="reduce-overhead") (CUDA graphs through inductor) over cudnn ops.

Tolerances. GPT stack (d_model 2048, 16 heads, seq 2048, bf16, 2 blocks, batch 2) and the
ResNet-50 training step (bf16 autocast): cudnn's model and torch's bf16 model are each
compared with a float32 torch run of the same weights; per tensor (the loss, every parameter's
gradient) cudnn's relative error ||g - g32|| / ||g32|| must be at most FACTOR x torch's own
relative error plus FLOOR (torch's bf16 error is the measure of what bf16 costs here).
reduce-overhead against eager on the same weights and inputs: loss within 5e-3 relative,
gradients and outputs within 2e-2 relative (inductor fuses the elementwise work differently
in bf16 / fp16), and no CUDA-graph skip reported by inductor.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import cudnn.nn as cnn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import torch_models as tm

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _check(errors: dict[str, tuple[float, float]], factor: float, floor: float) -> None:
    bad = {n: e for n, e in errors.items() if not tm.within(*e, factor=factor, floor=floor)}
    ratio = max(errors.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1e-12))
    largest = max(errors.items(), key=lambda kv: kv[1][0])
    print(f"{len(errors)} tensors (cudnn err, torch bf16 err): largest cudnn error {largest}, "
          f"largest ratio {ratio}")
    assert not bad, f"cudnn error above {factor} x torch's + {floor}: {bad}"


def test_gpt_stack_bf16_loss_and_gradients_match_torch() -> None:
    errors = tm.gpt_errors(layers=2, batch=2, seq=2048, d=2048, heads=16)
    assert len(errors) == 1 + 2 * 12 + 5  # loss, 12 tensors per block, emb/pos/ln/head
    _check(errors, factor=2.0, floor=2e-3)


def test_resnet50_training_step_matches_torch() -> None:
    """One bf16-autocast training step (batch statistics) of the cudnn ResNet-50 (cudnn conv
    and batch-norm graphs) against torch's: loss, every gradient, the running statistics."""
    torch.manual_seed(0)
    theirs = tm.ResNet50(classes=100, cudnn=False)
    ours = tm.ResNet50(classes=100, cudnn=True)
    ours.load_state_dict(theirs.state_dict())
    ref = copy.deepcopy(theirs)
    cl = torch.channels_last
    ours, theirs, ref = (m.to(DEV).to(memory_format=cl).train() for m in (ours, theirs, ref))
    g = torch.Generator(device=DEV).manual_seed(3)
    x = torch.randn(16, 3, 112, 112, device=DEV, generator=g).contiguous(memory_format=cl)
    y = torch.randint(0, 100, (16,), device=DEV, generator=g)
    losses = {}
    for name, model in (("cudnn", ours), ("torch", theirs), ("ref", ref)):
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=name != "ref"), \
                torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # a float32 reference
            loss = nn.functional.cross_entropy(model(x).float(), y)
            loss.backward()
        losses[name] = float(loss.detach())
    errors = {"loss": (abs(losses["cudnn"] - losses["ref"]) / losses["ref"],
                       abs(losses["torch"] - losses["ref"]) / losses["ref"])}
    for (n, p), q, r in zip(ours.named_parameters(), theirs.parameters(), ref.parameters()):
        errors[f"d{n}"] = (tm.rel_err(p.grad, r.grad), tm.rel_err(q.grad, r.grad))
    for (n, b), c, r in zip(ours.named_buffers(), theirs.buffers(), ref.buffers()):
        if b.is_floating_point():
            errors[n] = (tm.rel_err(b, r), tm.rel_err(c, r))
    _check(errors, factor=3.0, floor=5e-3)


def test_convert_resnet50_fp16_eval_matches_torch() -> None:
    """cudnn.nn.convert on the example's torch ResNet-50 (53 conv + batch-norm [+ ReLU] chains
    folded into Conv2dBiasAct graphs): logits within 2e-2 x max |logit| of torch's."""
    torch.manual_seed(0)
    model = tm.ResNet50(cudnn=False)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.0)
                m.bias.uniform_(-0.1, 0.1)
    model = model.eval().to(DEV, torch.float16).to(memory_format=torch.channels_last)
    converted = cnn.convert(model)
    assert sum(isinstance(m, cnn.Conv2dBiasAct) for m in converted.modules()) == 53
    x = torch.randn(8, 3, 224, 224, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        ref, got = model(x).float(), converted(x).float()
    assert float((got - ref).abs().max()) <= 2e-2 * float(ref.abs().max())


# -- torch.compile(mode="reduce-overhead") -------------------------------------------------------


def _skips() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def test_reduce_overhead_gpt_training_matches_eager() -> None:
    """A small cudnn GPT (cudnn layer norm and attention, bf16) compiled with CUDA graphs:
    forward and backward of three steps (warm-up, record, replay) on fresh tokens each, against
    eager runs of a copy with the same weights."""
    torch.manual_seed(0)
    sizes = {"vocab": 512, "d": 256, "heads": 4, "layers": 2, "seq": 256}
    model = tm.GPT(cudnn=True, **sizes).to(DEV, torch.bfloat16)
    eager = copy.deepcopy(model)
    step = torch.compile(model.loss, mode="reduce-overhead", fullgraph=True)
    skips = _skips()
    for i in range(3):
        tokens = torch.randint(0, 512, (4, 257), device=DEV, generator=torch.Generator(DEV).manual_seed(i))
        x, y = tokens[:, :-1], tokens[:, 1:]
        torch.compiler.cudagraph_mark_step_begin()
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
        loss = step(x, y)
        loss.backward()
        got_loss, got = float(loss), [p.grad.clone() for p in model.parameters()]
        ref_loss = eager.loss(x, y)
        ref_loss.backward()
        assert abs(got_loss - float(ref_loss)) <= 5e-3 * abs(float(ref_loss)), (i, got_loss, float(ref_loss))
        for (n, p), g in zip(eager.named_parameters(), got):
            assert tm.rel_err(g, p.grad) <= 2e-2, (i, n, tm.rel_err(g, p.grad))
    assert _skips() == skips, "inductor skipped CUDA graphs (see the cudagraphs log)"


def test_reduce_overhead_converted_convnet_inference_matches_eager() -> None:
    """A converted conv net (Conv2dBiasAct graphs from folded conv + batch norm [+ ReLU]) in
    fp16 eval, compiled with CUDA graphs: three calls against eager."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                        tm.Bottleneck(64, 16, 1, cudnn=False), tm.Bottleneck(64, 32, 2, cudnn=False))
    net = cnn.convert(net.eval().to(DEV, torch.float16).to(memory_format=torch.channels_last))
    assert sum(isinstance(m, cnn.Conv2dBiasAct) for m in net.modules()) == 8
    compiled = torch.compile(net, mode="reduce-overhead", fullgraph=True)
    skips = _skips()
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(8, 3, 32, 32, device=DEV, dtype=torch.float16,
                            generator=torch.Generator(DEV).manual_seed(i)).contiguous(memory_format=torch.channels_last)
            torch.compiler.cudagraph_mark_step_begin()
            got = compiled(x).clone()
            assert tm.rel_err(got, net(x)) <= 2e-2, i
    assert _skips() == skips, "inductor skipped CUDA graphs (see the cudagraphs log)"
