"""A seeded random sweep of attention configurations, forward and backward, on the GPU.

Each configuration is small (so hundreds run in minutes) and drawn over batch, heads (MHA,
GQA, MQA), sequence lengths (1 to 2048, odd, s_q != s_kv), head dims (8 to 256, d_qk != d_v),
masks (causal, bottom-right, sliding window, bias, ALiBi, padding), dropout, sink tokens, paged
K/V and ragged (THD) layouts. A configuration runs and matches the float32 reference, or is
refused with a clear exception (GraphError in validate, cudnnGraphNotSupportedError from the
backend); a wrong result fails, and so does any other exception.
The counts (ran / refused by reason) and the slowest configurations are printed and, with
SDPA_SWEEP_OUT set, written as JSON with the seconds of every configuration (named by its index,
so that two runs can be compared one configuration at a time).
SDPA_SWEEP_N (default 500) sets the number of configurations per direction; SDPA_SWEEP_SHARDS /
SDPA_SWEEP_SHARD split them over processes (the draws stay the same).
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import time

import torch
from test_sdpa_gpu import Case, check_backward, check_forward

import cudnn

N = int(os.environ.get("SDPA_SWEEP_N", "500"))
SHARDS = int(os.environ.get("SDPA_SWEEP_SHARDS", "1"))  # run configs i with i % SHARDS == SHARD
SHARD = int(os.environ.get("SDPA_SWEEP_SHARD", "0"))


def draw(rng: random.Random, backward: bool) -> Case:
    hq = rng.choice([1, 2, 4, 8])
    hk = rng.choice([h for h in (1, 2, 4, 8) if hq % h == 0])
    small = rng.random() < 0.8
    lengths = [1, 7, 16, 33, 64, 100, 128, 255, 256, 333, 512] if small else [777, 1024, 1500, 2048]
    sq, skv = rng.choice(lengths), rng.choice(lengths)
    dqk = rng.choice([8, 32, 64, 64, 96, 128, 128, 192, 256])
    dv = dqk if rng.random() < 0.7 else rng.choice([32, 64, 128])
    b = rng.choice([1, 2, 3]) if small else 1
    mask = rng.choice(["none", "causal", "causal_br", "window", "none"])
    c = Case(b=b, hq=hq, hk=hk, hv=hk, sq=sq, skv=skv, dqk=dqk, dv=dv,
             dtype=rng.choice([torch.float16, torch.bfloat16]), seed=rng.randrange(1 << 30),
             layout=rng.choice(["bhsd", "bshd"]))
    if mask == "causal":
        c.causal = True
    elif mask == "causal_br":
        c.causal_br = True
    elif mask == "window":
        c.causal, c.window = True, rng.choice([1, 8, 64, 200])
    c.bias = rng.random() < 0.15
    c.alibi = rng.random() < 0.1 and c.causal
    c.padding = rng.random() < 0.25
    c.dropout = rng.choice(["none"] * 6 + ["philox", "mask"])
    if not backward and c.padding and rng.random() < 0.3:
        c.paged = rng.choice([16, 32, 64])
    elif rng.random() < 0.1:
        c.ragged = True  # packed BSHD tokens with ragged offsets (implies per-batch lengths)
    c.sink = rng.random() < 0.05
    if backward and c.bias and rng.random() < 0.5:
        c.extra = {"dbias": True}
    return c


def reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+", "#", text)
    return f"{type(exc).__name__}: {text[:140]}"


def sweep(backward: bool) -> dict:
    rng = random.Random(1234 if backward else 4321)
    counts: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    errors: list[str] = []
    took: list[tuple[float, str]] = []  # seconds per configuration: the slowest printed, all in the JSON
    t0 = time.time()
    for i in range(N):
        c = draw(rng, backward)
        if i % SHARDS != SHARD:
            continue
        started = time.time()
        try:
            (check_backward if backward else check_forward)(c)
            counts["ran"] += 1
        except (cudnn.GraphError, cudnn.cudnnGraphNotSupportedError, cudnn.FeatureUnavailableError) as exc:
            counts["refused: " + reason(exc)] += 1
        except AssertionError as exc:
            wrong.append(f"{c}: {str(exc).splitlines()[0]}")
        except Exception as exc:  # noqa: BLE001 - any other exception is a failure too, reported at the end
            errors.append(f"{c}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        finally:
            took.append((round(time.time() - started, 3), f"{i}: {c}"))
            torch.cuda.empty_cache() if i % 50 == 49 else None
    summary = {"direction": "backward" if backward else "forward", "configs": len(range(SHARD, N, SHARDS)), "seconds": round(time.time() - t0, 1),
               "ran": counts.pop("ran", 0), "wrong": len(wrong), "errors": len(errors), "refused": dict(counts.most_common()),
               "wrong_examples": wrong[:10], "error_examples": errors[:10], "slowest": sorted(took, reverse=True)[:5]}
    print(json.dumps(summary, indent=1))
    out = os.environ.get("SDPA_SWEEP_OUT")
    if out:
        with open(os.path.join(out, f"sweep_{summary['direction']}_{SHARD}.json"), "w") as f:
            json.dump({**summary, "seconds_per_config": took}, f, indent=1)
    return summary


def test_forward_sweep() -> None:
    s = sweep(backward=False)
    assert not s["wrong"], s["wrong_examples"]
    assert not s["errors"], s["error_examples"]
    assert s["ran"] >= s["configs"] // 2, s


def test_backward_sweep() -> None:
    s = sweep(backward=True)
    assert not s["wrong"], s["wrong_examples"]
    assert not s["errors"], s["error_examples"]
    assert s["ran"] >= s["configs"] // 3, s
