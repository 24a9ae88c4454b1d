"""Training with cudnn-py inside under torchrun, one process per GPU, with DistributedDataParallel
or (``--fsdp``) FSDP's ``fully_shard``: the GPT stack of examples/torch_models.py (cudnn layer
norm and attention; d_model 2048, 16 heads, seq 2048) and its ResNet-50 (cudnn convolution and
batch-norm graphs, 224x224 images), bf16 autocast over float32 weights, AdamW.
``--torch-modules`` trains the same models built from torch's own modules, to compare.

    torchrun --nproc-per-node 1 examples/torch_ddp_train.py [--fsdp] --jsonl runs.jsonl   # one GPU
    torchrun --nproc-per-node 2 examples/torch_ddp_train.py [--fsdp] --jsonl runs.jsonl   # two GPUs
    python examples/torch_ddp_train.py --report runs.jsonl     # loss curves and scaling, 1 vs N

The global batch is fixed (``--gpt-batch`` sequences, ``--resnet-batch`` images) and drawn the
same whatever the world size (seeded per step); each of the N processes trains on 1/N of it.
So the loss curves of the one- and N-GPU runs agree up to rounding (and, for ResNet, batch norm
statistics taken per GPU), and the median step time shows the scaling. NCCL does all
communication (gradient all-reduce, FSDP's all-gather / reduce-scatter); cudnn-py adds none.

Scaling shows where each GPU's share of the batch keeps it busy. A step launches a few hundred
kernels from Python; with a small share per GPU (ResNet-50 at 128 images) the step takes as
long as that host work, with torch's modules as with cudnn's, and a second GPU saves little.
The defaults (1024 images, 32 sequences) give each GPU enough work for the GPU to set the pace.
``--tune-plans`` sets ``torch.backends.cudnn.benchmark``: the first step times the heuristics'
leading candidate plans of each cuDNN graph and keeps the fastest (at ResNet-50's deeper shapes
the first batch-norm plan is not the fastest). That first step then takes minutes, as batch
norm's plans are compiled to be timed; the plan cache keeps the choices, so later runs start
at once with them.

Needs: NVIDIA GPUs (Ampere or newer), PyTorch with CUDA and NCCL, cuDNN 9; run under torchrun
(``--report`` needs PyTorch only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator

from _needs import need_gpu_and_torch, need_torch, parser, positive_int

MODELS = ("gpt", "resnet")


def model_list(text: str) -> list[str]:
    """An argparse type: comma-separated names among MODELS."""
    names = [m for m in text.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown model(s) {', '.join(unknown) or repr(text)}; "
                                         f"choose from {', '.join(MODELS)}")
    return names


def arguments() -> argparse.ArgumentParser:
    """The command line: what to train, how, and where the results go."""
    ap = parser(__doc__)
    ap.add_argument("--steps", type=positive_int, default=25, help="training steps per model (default 25)")
    ap.add_argument("--models", type=model_list, default=list(MODELS), help="gpt, resnet or gpt,resnet (default)")
    ap.add_argument("--fsdp", action="store_true", help="FSDP (fully_shard per block) instead of DDP")
    ap.add_argument("--layers", type=positive_int, default=4, help="GPT blocks")
    ap.add_argument("--gpt-batch", type=positive_int, default=32, help="global batch of 2048-token sequences")
    ap.add_argument("--resnet-batch", type=positive_int, default=1024, help="global batch of images")
    ap.add_argument("--image", type=positive_int, default=224, help="image side for ResNet-50")
    ap.add_argument("--torch-modules", action="store_true", help="the models from torch's modules, not cudnn's")
    ap.add_argument("--broadcast-buffers", action="store_true",
                    help="DDP broadcasts rank 0's buffers (batch-norm statistics) before every forward")
    ap.add_argument("--tune-plans", action="store_true",
                    help="torch.backends.cudnn.benchmark: time candidate plans at the first step, keep the fastest")
    ap.add_argument("--jsonl", help="append one JSON line per model (rank 0) to this file")
    ap.add_argument("--report", metavar="JSONL", help="print the 1-vs-N comparison of a log and exit")
    return ap


if __name__ == "__main__":
    ARGS = arguments().parse_args()  # --help and a mistyped option answer before PyTorch is looked for

torch = need_torch(__file__)  # without PyTorch: one line naming it, exit status 1

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch_models import GPT, Block, Bottleneck, ResNet50  # noqa: E402

VOCAB, SEQ = 8192, 2048


def batches(kind: str, steps: int, global_batch: int, rank: int, world: int, device: torch.device,
            image: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The same global batches whatever the world size (drawn on the GPU from a per-step seed),
    this rank's slice."""
    per = global_batch // world
    part = slice(rank * per, (rank + 1) * per)
    for step in range(steps):
        g = torch.Generator(device=device).manual_seed(1000 + step)
        if kind == "gpt":
            tokens = torch.randint(0, VOCAB, (global_batch, SEQ + 1), device=device, generator=g)[part]
            yield tokens[:, :-1], tokens[:, 1:]
        else:
            images = torch.randn(global_batch, 3, image, image, device=device, generator=g)
            labels = torch.randint(0, 1000, (global_batch,), device=device, generator=g)
            yield images[part].contiguous(memory_format=torch.channels_last), labels[part]


def build(kind: str, layers: int, fsdp: bool, device: torch.device, cudnn: bool = True,
          broadcast_buffers: bool = False) -> nn.Module:
    """The model on ``device`` (cudnn-py inside, or torch's modules), the same initial weights on
    every rank and world size, wrapped for data parallelism: DDP, or fully_shard per block and
    then the root.

    Under DDP each rank keeps the batch-norm running statistics of its own share of the batch
    (``broadcast_buffers=False``): a training step normalises with batch statistics, so the
    loss does not depend on them, and DDP's default would broadcast rank 0's buffers at the
    start of every forward, a collective that makes every rank wait for rank 0 there too."""
    torch.manual_seed(0)
    model: nn.Module = GPT(VOCAB, 2048, 16, layers, SEQ, cudnn=cudnn) if kind == "gpt" else ResNet50(cudnn=cudnn)
    model = model.to(device)
    if not fsdp:
        if kind == "resnet":  # NHWC weights, as the images; FSDP shards only contiguous parameters
            model = model.to(memory_format=torch.channels_last)
        return DDP(model, device_ids=[device.index], broadcast_buffers=broadcast_buffers)
    from torch.distributed.fsdp import fully_shard

    for m in model.modules():
        if isinstance(m, (Block, Bottleneck)):
            fully_shard(m)
    fully_shard(model)
    return model


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One optimizer step on a batch (bf16 autocast forward, cross entropy); returns the loss."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def train(kind: str, args: argparse.Namespace, rank: int, world: int, device: torch.device) -> dict:
    """Train ``args.steps`` steps; the mean loss of every step and the median step time."""
    global_batch = args.gpt_batch if kind == "gpt" else args.resnet_batch
    model = build(kind, args.layers, args.fsdp, device, cudnn=not args.torch_modules,
                  broadcast_buffers=args.broadcast_buffers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times, losses = [], []
    for step, (x, y) in enumerate(batches(kind, args.steps, global_batch, rank, world, device, args.image)):
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = train_step(model, opt, x, y)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        losses.append(float(mean_loss) / world)
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"{kind} step {step:3d} loss {losses[-1]:.4f}  step {times[-1] * 1e3:.1f} ms", flush=True)
    warm = times[min(5, len(times) - 1):]  # the first steps build cuDNN graphs and warm the allocator
    result = {"model": kind, "modules": "torch" if args.torch_modules else "cudnn",
              "wrap": "fsdp" if args.fsdp else "ddp", "world": world, "global_batch": global_batch,
              "layers": args.layers if kind == "gpt" else None, "image": args.image if kind == "resnet" else None,
              "median_step_ms": statistics.median(warm) * 1e3, "losses": losses,
              "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}
    if rank == 0:
        print(f"{kind} ({result['modules']} modules): {result['wrap']}, world {world}, global batch {global_batch}, "
              f"median step {result['median_step_ms']:.2f} ms, peak memory {result['max_memory_gib']:.1f} GiB",
              flush=True)
    del model, opt
    torch.cuda.empty_cache()
    return result


def compare(path: str) -> list[dict]:
    """Per model, modules and wrapper, one row per world size: the median step time, the scaling
    (one-GPU step time over this one's) and the largest loss difference between the curves,
    relative to the one-GPU loss (both None for the one-GPU row, or without one)."""
    runs: dict[tuple, dict[int, dict]] = defaultdict(dict)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            runs[(r["model"], r.get("modules", "cudnn"), r["wrap"], r["global_batch"])][r["world"]] = r
    rows = []
    for (model, modules, wrap, batch), by_world in sorted(runs.items()):
        one = by_world.get(1)
        for world, r in sorted(by_world.items()):
            scaling = diff = None
            if one is not None and world != 1:
                scaling = one["median_step_ms"] / r["median_step_ms"]
                n = min(len(one["losses"]), len(r["losses"]))
                diff = max(abs(a - b) / abs(a) for a, b in zip(one["losses"][:n], r["losses"][:n]))
            rows.append({"model": model, "modules": modules, "wrap": wrap, "global_batch": batch, "world": world,
                         "median_step_ms": r["median_step_ms"], "scaling": scaling, "max_rel_dloss": diff,
                         "losses": r["losses"]})
    return rows


def report(path: str) -> None:
    """Print `compare`'s rows and each one-GPU loss curve."""
    print(f"{'model':7} {'modules':7} {'wrap':5} {'batch':>5} {'world':>5} {'step ms':>9} {'scaling':>8} "
          f"{'max |dloss|/loss':>17}")
    for r in compare(path):
        scaling = "" if r["scaling"] is None else f"{r['scaling']:.2f}x"
        diff = "" if r["max_rel_dloss"] is None else f"{r['max_rel_dloss']:.2e}"
        print(f"{r['model']:7} {r['modules']:7} {r['wrap']:5} {r['global_batch']:5d} {r['world']:5d} "
              f"{r['median_step_ms']:9.2f} {scaling:>8} {diff:>17}")
        if r["world"] == 1:
            print("  loss curve: " + " ".join(f"{v:.3f}" for v in r["losses"][::5]))


def main(args: argparse.Namespace) -> None:
    if args.report:
        report(args.report)
        return
    need_gpu_and_torch(__file__)
    if "LOCAL_RANK" not in os.environ:
        sys.exit("torch_ddp_train.py needs torchrun to start it: torchrun --nproc-per-node 1 "
                 "examples/torch_ddp_train.py")
    # cudnn.ops graphs and torch's own cuDNN convolutions alike time their candidates once per shape
    torch.backends.cudnn.benchmark = args.tune_plans
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    for kind in args.models:
        result = train(kind, args, rank, world, device)
        if rank == 0 and args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(ARGS)
