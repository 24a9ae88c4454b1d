"""Training with cudnn.nn modules under torchrun + DistributedDataParallel: a small transformer
(cudnn LayerNorm and attention) and a small ResNet-style network (cudnn Conv2dBiasAct and
batch norm), printing the loss curve and the step time.

    torchrun --nproc-per-node 1 examples/torch_ddp_train.py            # one GPU
    torchrun --nproc-per-node 2 examples/torch_ddp_train.py            # two GPUs, same global batch

The global batch is fixed; each of the N processes takes 1/N of it, so the loss curves of the
one- and two-GPU runs should agree within fp rounding, and the step time shows the scaling.
NCCL does all communication (DDP's gradient all-reduce); cudnn-py adds none of its own.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import cudnn.nn as cnn
from cudnn import ops


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = cnn.LayerNorm(d), cnn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 4096, d: int = 512, heads: int = 8, layers: int = 4, seq: int = 512) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = cnn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.blocks(self.emb(tokens) + self.pos[: tokens.shape[1]])))


class ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = cnn.Conv2dBiasAct(c, c, 3, padding=1, act="relu")
        self.conv2 = cnn.Conv2dBiasAct(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(self.conv1(x))
        y = ops.batch_norm(y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, self.training)
        return F.relu(x + y)


class TinyResNet(nn.Module):
    def __init__(self, c: int = 64, blocks: int = 4, classes: int = 100) -> None:
        super().__init__()
        self.stem = cnn.Conv2dBiasAct(3, c, 3, padding=1, act="relu")
        self.body = nn.Sequential(*[ResBlock(c) for _ in range(blocks)])
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(self.stem(x)).mean(dim=(2, 3)))


def batches(kind: str, steps: int, global_batch: int, rank: int, world: int, device: torch.device):  # type: ignore[no-untyped-def]
    """The same global batches whatever the world size (seeded per step), this rank's slice."""
    per = global_batch // world
    for step in range(steps):
        g = torch.Generator(device="cpu").manual_seed(1000 + step)
        if kind == "gpt":
            tokens = torch.randint(0, 4096, (global_batch, 513), generator=g)
            part = tokens[rank * per:(rank + 1) * per].to(device)
            yield part[:, :-1], part[:, 1:]
        else:
            images = torch.randn(global_batch, 3, 32, 32, generator=g)
            labels = torch.randint(0, 100, (global_batch,), generator=g)
            yield (images[rank * per:(rank + 1) * per].to(device).contiguous(memory_format=torch.channels_last),
                   labels[rank * per:(rank + 1) * per].to(device))


def train(kind: str, steps: int, global_batch: int, rank: int, world: int, device: torch.device) -> None:
    torch.manual_seed(0)  # the same initial weights on every rank and world size
    model = (TinyGPT() if kind == "gpt" else TinyResNet().to(memory_format=torch.channels_last)).to(device)
    model = DDP(model, device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    times = []
    for step, (x, y) in enumerate(batches(kind, steps, global_batch, rank, world, device)):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = F.cross_entropy(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        if rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"{kind} step {step:3d} loss {float(mean_loss) / world:.4f}  step {times[-1] * 1e3:.1f} ms", flush=True)
    if rank == 0:
        steady = sorted(times[5:])[len(times[5:]) // 2] if len(times) > 5 else times[-1]
        print(f"{kind}: world {world}, global batch {global_batch}, median step {steady * 1e3:.2f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--models", default="gpt,resnet")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    for kind in args.models.split(","):
        train(kind, args.steps, 16 if kind == "gpt" else 256, rank, world, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
