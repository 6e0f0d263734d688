# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The codecs through the Python binding, against PyTorch in the same run.

Times commpress encode and decode on CPU tensors (one thread: cpu.seq, and torch set to one
thread; each codec's workspace allocated once) with two baselines: a copy of the tensor
(``y.copy_(x)``, the memory floor) and ``torch.topk(x.abs(), k, sorted=False)`` (what a PyTorch
top-k compressor calls). A codec with a workspace is also timed without ``workspace=``, where
each call allocates a temporary. GB/s count 4 bytes per fp32 input element, as the C++
benchmarks do.
Run it with the environment scripts/setup.sh makes:

    .venv/bin/python bench/python/binding_bench.py [--sizes 1048576 16777216] [--repeats 20]

It prints one row per operation and size: best and median GB/s over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

import commpress as cp


def timings(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # first touch and warm caches
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 1 << 24])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ctx = cp.context()
    codecs = {
        "top_k 1%": cp.top_k(fraction=0.01),
        "quantize 4-bit, blocks of 128": cp.quantize(bits=4, group=128),
        "sign, one scale": cp.sign(),
    }
    print(f"{'elements':>9}  {'operation':44s} {'best GB/s':>9} {'median GB/s':>11}")
    for n in args.sizes:
        x = torch.randn(n)
        y = torch.empty_like(x)
        k = round(0.01 * n)
        rows: dict[str, Callable[[], object]] = {
            "copy (y.copy_(x))": lambda: y.copy_(x),
            "torch.topk(x.abs(), 1%)": lambda: torch.topk(x.abs(), k, sorted=False),
        }
        for name, c in codecs.items():
            payload = torch.empty(cp.max_payload_bytes(c, n), dtype=torch.uint8)
            # Reused, as a trainer would: without workspace= each call allocates its own.
            ws = torch.empty(cp.workspace_bytes(c, n), dtype=torch.uint8)
            used = cp.encode(c, ctx, x, payload, ws).bytes
            rows[f"commpress encode, {name}"] = lambda c=c, p=payload, w=ws: cp.encode(
                c, ctx, x, p, w
            )
            if ws.numel() != 0:  # what a call without workspace= pays for its temporary
                rows[f"commpress encode, {name}, no workspace="] = (
                    lambda c=c, p=payload: cp.encode(c, ctx, x, p)
                )
            rows[f"commpress decode, {name}"] = lambda c=c, p=payload[:used]: cp.decode(c, p, y)
        for name, fn in rows.items():
            t = timings(fn, args.repeats)
            rate = lambda s: 4 * n / s / 1e9  # noqa: E731
            print(f"{n:>9}  {name:44s} {rate(min(t)):9.2f} {rate(statistics.median(t)):11.2f}")


if __name__ == "__main__":
    main()
