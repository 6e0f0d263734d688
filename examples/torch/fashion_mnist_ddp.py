#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Fashion-MNIST with DistributedDataParallel on gloo processes, uncompressed and with the
commpress hook (4-bit LoCo: loco with an int8 error store, beta 0.8, 4-bit block quantization).

Prints each run's test accuracy and the bytes its gradients took on the wire. The data comes
from Debian's dataset-fashion-mnist package (IDX files, gzip), never from the network:

    .venv/bin/python examples/torch/fashion_mnist_ddp.py            # 4 processes, both runs
    .venv/bin/python examples/torch/fashion_mnist_ddp.py --epochs 1 --ranks 2
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing as mp
import os
import socket
import struct
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import commpress as cp
from commpress.torch import CompressionHook

DATA_DIR = Path(os.environ.get("COMMPRESS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip or not): unsigned bytes with big-endian dimensions."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    magic, = struct.unpack(">I", raw[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    prefix = "train" if split == "train" else "t10k"
    for suffix in (".gz", ""):
        images = DATA_DIR / f"{prefix}-images-idx3-ubyte{suffix}"
        labels = DATA_DIR / f"{prefix}-labels-idx1-ubyte{suffix}"
        if images.exists() and labels.exists():
            x = torch.from_numpy(read_idx(images).reshape(-1, 784).astype(np.float32) / 255.0)
            return x, torch.from_numpy(read_idx(labels).astype(np.int64))
    raise SystemExit(f"Fashion-MNIST not found in {DATA_DIR}: apt-get install dataset-fashion-mnist")


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )


def loco4() -> cp.pipeline:
    return cp.pipeline(
        cp.loco(beta=0.8, reset_every=0, storage=cp.store_int8),
        cp.quantize(bits=4, granularity=cp.scale_granularity.block, group=128),
    )


def worker(rank: int, world: int, port: int, compressed: bool, args: argparse.Namespace, q: "mp.Queue") -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x, y = load("train")
    if args.train_limit:
        x, y = x[: args.train_limit], y[: args.train_limit]
    model = DDP(make_model())
    hook = CompressionHook(model, loco4(), seed=1).register(model) if compressed else None
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(42)
    uncompressed_bytes = 0
    start = time.monotonic()
    for _ in range(args.epochs):
        order = torch.randperm(len(x), generator=g)  # the same order on every rank
        mine = order[rank::world]
        for i in range(0, len(mine) - args.batch + 1, args.batch):
            idx = mine[i : i + args.batch]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            # A ring fp32 all-reduce sends 2 (N-1)/N of the gradient's bytes per rank.
            uncompressed_bytes += 2 * (world - 1) * 4 * sum(p.numel() for p in model.parameters()) // world
    seconds = time.monotonic() - start
    result: Optional[Dict[str, float]] = None
    if rank == 0:
        tx, ty = load("test")
        with torch.no_grad():
            accuracy = (model(tx).argmax(1) == ty).float().mean().item()
        sent = hook.totals.bytes_sent if hook else uncompressed_bytes
        result = {"accuracy": accuracy, "sent": sent, "uncompressed": uncompressed_bytes, "seconds": seconds}
    q.put(result)
    dist.destroy_process_group()


def run(compressed: bool, args: argparse.Namespace) -> Dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=worker, args=(r, args.ranks, port, compressed, args, q)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    results = [q.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    return next(r for r in results if r is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-limit", type=int, default=0, help="use the first N training images (0: all)")
    args = ap.parse_args()
    plain = run(False, args)
    loco = run(True, args)
    mib = 1 << 20
    print(f"DDP on {args.ranks} gloo processes, {args.epochs} epochs, batch {args.batch} per rank")
    print(f"  uncompressed : accuracy {100 * plain['accuracy']:.2f}%  sent {plain['sent'] / mib:8.1f} MiB per rank  ({plain['seconds']:.0f} s)")
    print(
        f"  4-bit LoCo   : accuracy {100 * loco['accuracy']:.2f}%  sent {loco['sent'] / mib:8.1f} MiB per rank  ({loco['seconds']:.0f} s)"
        f"  -> {loco['uncompressed'] / loco['sent']:.1f}x fewer bytes, {(loco['uncompressed'] - loco['sent']) / mib:.1f} MiB saved"
    )
    print(f"  accuracy difference: {100 * (loco['accuracy'] - plain['accuracy']):+.2f} points")


if __name__ == "__main__":
    main()
