"""Real models with cudnn-py inside against the same models in torch, side by side in one run:

- ResNet-50 inference (random weights, fp16, channels-last, eval): images per second of torch
  eager, torch.compile, `cudnn.nn.convert` (conv + batch norm [+ ReLU] folded into cuDNN
  graphs) and convert + torch.compile. torchvision's model when torchvision is installed,
  else the same network from examples/torch_models.py.
- GPT stack (examples/torch_models.py: d_model 2048, 16 heads, seq 2048, bf16 weights) forward
  and backward (the training step without the optimizer): ms per step of torch eager with the
  flash attention backend, torch eager with torch's cuDNN attention backend, torch.compile,
  the model with cudnn ops for layer norm and attention, and that model under torch.compile.

    PYTHONPATH=src python benchmarks/bench_models.py [--no-compile] [--batch 128] [--gpt-batch 2]
                                                     [--layers 4] [--repeats 5] [--only resnet|gpt]

Ratios are against torch eager (above 1: faster than torch eager). GPU time by CUDA events
around back-to-back calls (benchmarks/_timing.py), after a warm-up that builds cuDNN graphs and
compiles. Never asserts on time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from _timing import gpu_time

import cudnn.nn as cnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import torch_models as tm

DEV = "cuda"


def resnet50() -> tuple[torch.nn.Module, str]:
    try:
        import torchvision

        return torchvision.models.resnet50(weights=None), "torchvision"
    except ImportError:
        return tm.ResNet50(cudnn=False), "examples/torch_models.py"


def bench_resnet(batch: int, repeats: int, compile_: bool) -> None:
    torch.manual_seed(0)
    model, origin = resnet50()
    model = model.eval().to(DEV, torch.float16).to(memory_format=torch.channels_last)
    converted = cnn.convert(model)
    x = torch.randn(batch, 3, 224, 224, device=DEV, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"torch eager": model,
                                                                   "cudnn.nn.convert": converted}
    if compile_:
        variants["torch.compile"] = torch.compile(model)
        variants["cudnn.nn.convert + torch.compile"] = torch.compile(converted)
    print(f"\nResNet-50 ({origin}) inference, batch {batch}, fp16 NHWC, eval: images per second")
    base = None
    with torch.no_grad():
        for name, fn in variants.items():
            t = gpu_time(lambda fn=fn: fn(x), 10, repeats)
            base = base or t
            print(f"  {name:34} {batch / t:9.0f} img/s  {t * 1e3:8.2f} ms  x{base / t:5.2f}", flush=True)


def bench_gpt(batch: int, layers: int, repeats: int, compile_: bool) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ours, theirs = tm.gpt_twins(torch.bfloat16, layers=layers)
    g = torch.Generator(device=DEV).manual_seed(0)
    tokens = torch.randint(0, 8192, (batch, 2049), device=DEV, generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step(model: torch.nn.Module, loss: Callable[..., torch.Tensor],
             backend: SDPBackend = SDPBackend.FLASH_ATTENTION) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            with sdpa_kernel(backend):
                loss(x, y).backward()
        return run

    variants = {"torch eager (flash attention)": step(theirs, theirs.loss),
                "torch eager (torch's cuDNN attention)": step(theirs, theirs.loss, SDPBackend.CUDNN_ATTENTION),
                "cudnn ops (layer norm, attention)": step(ours, ours.loss)}
    if compile_:
        variants["torch.compile (flash attention)"] = step(theirs, torch.compile(theirs.loss))
        variants["cudnn ops + torch.compile"] = step(ours, torch.compile(ours.loss, fullgraph=True))
    print(f"\nGPT stack ({layers} blocks, d_model 2048, 16 heads, seq 2048, batch {batch}, bf16): "
          "forward + backward, ms per step")
    base = None
    for name, fn in variants.items():
        try:
            t = gpu_time(fn, 3, repeats)
        except RuntimeError as e:  # a backend torch cannot run here (its message says why)
            print(f"  {name:40} unavailable: {str(e).splitlines()[0][:80]}")
            continue
        base = base or t
        print(f"  {name:40} {t * 1e3:8.2f} ms  x{base / t:5.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--batch", type=int, default=128, help="ResNet-50 images per call")
    ap.add_argument("--gpt-batch", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=("resnet", "gpt"))
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    if args.only != "gpt":
        bench_resnet(args.batch, args.repeats, not args.no_compile)
    if args.only != "resnet":
        bench_gpt(args.gpt_batch, args.layers, args.repeats, not args.no_compile)


if __name__ == "__main__":
    main()
