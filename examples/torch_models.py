"""Two real models with cudnn-py inside, each also buildable from plain torch modules with the
same parameters (same state-dict keys), so the two can be compared and timed side by side:

- `GPT`: a GPT-style decoder stack (pre-norm blocks: layer norm, causal self-attention, MLP,
  learned positions, a language-model head). ``cudnn=True``: its layer norms are
  `cudnn.nn.LayerNorm` and its attention `cudnn.ops.scaled_dot_product_attention`;
  ``cudnn=False``: ``nn.LayerNorm`` and ``F.scaled_dot_product_attention``.
- `ResNet50`: ResNet-50's bottleneck layout (3, 4, 6, 3 blocks of widths 64 to 512) for
  training. ``cudnn=True``: every convolution a `cudnn.nn.Conv2dBiasAct` graph and every batch
  norm `cudnn.ops.batch_norm`; ``cudnn=False``: ``nn.Conv2d`` / ``nn.BatchNorm2d``. Plain torch
  ones are what ``cudnn.nn.convert`` folds for inference.

Run as a script, it trains nothing: it runs the GPT stack (d_model 2048, 16 heads, seq 2048,
bf16) forward and backward with cudnn ops and with torch's (flash attention), both against a
float32 run of the same weights, and prints per tensor OK when cudnn's error is within twice
torch's own bf16 error (plus a small floor), MISMATCH otherwise.

    PYTHONPATH=src python examples/torch_models.py [--layers 2] [--batch 2]

Needs: an NVIDIA GPU (Ampere or newer: bf16 attention), PyTorch with CUDA, cuDNN 9.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

from _needs import need_gpu_and_torch, need_torch, parser, positive_int


def arguments() -> argparse.ArgumentParser:
    """The command line of the script: the size of the GPT stack compared."""
    ap = parser(__doc__)
    ap.add_argument("--layers", type=positive_int, default=2, help="decoder blocks (default 2)")
    ap.add_argument("--batch", type=positive_int, default=2, help="sequences of 2048 tokens (default 2)")
    return ap


if __name__ == "__main__":
    ARGS = arguments().parse_args()  # --help and a mistyped option answer before PyTorch is looked for

torch = need_torch(__file__)  # without PyTorch: one line naming it, exit status 1

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import cudnn.nn as cnn  # noqa: E402
from cudnn import ops  # noqa: E402

# -- GPT ------------------------------------------------------------------------------------------


class Block(nn.Module):
    """One pre-norm decoder block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, d: int, heads: int, cudnn: bool = True) -> None:
        super().__init__()
        norm = cnn.LayerNorm if cudnn else nn.LayerNorm
        self.ln1, self.ln2 = norm(d), norm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads
        self.attend: Callable[..., torch.Tensor] = (ops.scaled_dot_product_attention if cudnn
                                                    else F.scaled_dot_product_attention)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal self-attention then the MLP, each with a residual connection."""
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = self.attend(q, k, v, is_causal=True)  # [B, H, S, D] views of the packed projection
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final layer norm and the head."""

    def __init__(self, vocab: int = 8192, d: int = 2048, heads: int = 16, layers: int = 4, seq: int = 2048,
                 cudnn: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, cudnn) for _ in range(layers)])
        self.ln = (cnn.LayerNorm if cudnn else nn.LayerNorm)(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [B, S, vocab] of the next token at every position."""
        return self.head(self.ln(self.blocks(self.emb(tokens) + self.pos[: tokens.shape[1]])))

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross entropy (computed in float32)."""
        logits = self(tokens)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt_twins(dtype: torch.dtype = torch.bfloat16, device: str = "cuda", **sizes: int) -> tuple[GPT, GPT]:
    """The cudnn GPT and the torch GPT with the same weights, on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    theirs = GPT(cudnn=False, **sizes)
    ours = GPT(cudnn=True, **sizes)
    ours.load_state_dict(theirs.state_dict())
    return ours.to(device, dtype), theirs.to(device, dtype)


# -- ResNet-50 ----------------------------------------------------------------------------------


class BatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` through `cudnn.ops.batch_norm` (training updates the running
    statistics as torch does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Batch norm of x with batch statistics in training, running statistics in eval."""
        use_batch = self.training or self.running_mean is None
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        return ops.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_batch,
                              0.1 if self.momentum is None else self.momentum, self.eps)


def _conv(cudnn: bool, cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    if cudnn:
        return cnn.Conv2dBiasAct(cin, cout, k, stride, k // 2, bias=False)
    return nn.Conv2d(cin, cout, k, stride, k // 2, bias=False)


def _bn(cudnn: bool, c: int) -> nn.BatchNorm2d:
    return BatchNorm2d(c) if cudnn else nn.BatchNorm2d(c)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (strided) -> 1x1 convolutions with batch norms, and the shortcut."""

    def __init__(self, cin: int, width: int, stride: int, cudnn: bool) -> None:
        super().__init__()
        cout = 4 * width
        self.conv1, self.bn1 = _conv(cudnn, cin, width, 1), _bn(cudnn, width)
        self.conv2, self.bn2 = _conv(cudnn, width, width, 3, stride), _bn(cudnn, width)
        self.conv3, self.bn3 = _conv(cudnn, width, cout, 1), _bn(cudnn, cout)
        self.down = (nn.Sequential(_conv(cudnn, cin, cout, 1, stride), _bn(cudnn, cout))
                     if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """relu(main path + shortcut)."""
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """ResNet-50: a 7x7 stem, max pool, 16 bottleneck blocks, global average pool, classifier."""

    def __init__(self, classes: int = 1000, cudnn: bool = True) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(cudnn, 3, 64, 7, 2), _bn(cudnn, 64)
        blocks: list[nn.Module] = []
        cin = 64
        for i, (n, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
            for j in range(n):
                blocks.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1, cudnn))
                cin = 4 * width
        self.body = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits of a batch of images [N, 3, H, W]."""
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        return self.fc(self.body(x).mean(dim=(2, 3)))


# -- the comparison the script runs -------------------------------------------------------------


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in float64 (1.0 when ref is all zeros and got is not)."""
    g, r = got.double(), ref.double()
    den = float(r.norm())
    return float((g - r).norm()) / den if den else float(g.norm() != 0)


def gpt_errors(layers: int = 2, batch: int = 2, seq: int = 2048, d: int = 2048, heads: int = 16,
               vocab: int = 8192) -> dict[str, tuple[float, float]]:
    """One forward and backward of the bf16 GPT stack with cudnn ops and with torch's (flash
    attention), each compared with a float32 torch run of the same weights: per name ("loss",
    then every parameter's gradient), (cudnn's relative error, torch bf16's relative error)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ours, theirs = gpt_twins(torch.bfloat16, layers=layers, seq=seq, d=d, heads=heads, vocab=vocab)
    ref = copy.deepcopy(theirs).float()
    g = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device="cuda", generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    losses = {}
    for name, model in (("cudnn", ours), ("torch", theirs), ("ref", ref)):
        backend = SDPBackend.FLASH_ATTENTION if name == "torch" else SDPBackend.EFFICIENT_ATTENTION
        with sdpa_kernel(backend):  # the cudnn model calls no torch attention
            loss = model.loss(x, y)
            loss.backward()
        losses[name] = loss.detach().double()
    out = {"loss": (abs(float(losses["cudnn"] - losses["ref"])) / abs(float(losses["ref"])),
                    abs(float(losses["torch"] - losses["ref"])) / abs(float(losses["ref"])))}
    params = zip(ours.named_parameters(), theirs.parameters(), ref.parameters())
    for (n, p), q, r in params:
        assert p.grad is not None and q.grad is not None and r.grad is not None, n
        out[f"d{n}"] = (rel_err(p.grad, r.grad), rel_err(q.grad, r.grad))
    return out


def within(ours: float, theirs: float, factor: float = 2.0, floor: float = 2e-3) -> bool:
    """cudnn's error is at most ``factor`` x torch's own bf16 error plus ``floor``."""
    return ours <= factor * theirs + floor


def main(args: argparse.Namespace) -> None:
    need_gpu_and_torch(__file__)
    errors = gpt_errors(args.layers, args.batch)
    print(f"{'tensor':32} {'cudnn err':>10} {'torch err':>10}")
    for name, (ours, theirs) in errors.items():
        verdict = "OK" if within(ours, theirs) else "MISMATCH"
        print(f"{name:32} {ours:10.2e} {theirs:10.2e}  {verdict}")
    if not all(within(*e) for e in errors.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main(ARGS)
