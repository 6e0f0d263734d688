#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Fashion-MNIST with DistributedDataParallel on gloo processes, uncompressed and with the
commpress hook (by default 4-bit LoCo: loco with an int8 error store, beta 0.8, 4-bit block
quantization; --codec and --feedback choose any other codec and feedback).

Prints each run's test accuracy, the bits per gradient element its payloads took and the bytes
on the wire. The data comes from Debian's dataset-fashion-mnist package (IDX files, gzip),
never from the network:

    .venv/bin/python examples/torch/fashion_mnist_ddp.py            # 4 processes, both runs
    .venv/bin/python examples/torch/fashion_mnist_ddp.py --epochs 1 --ranks 2
    .venv/bin/python examples/torch/fashion_mnist_ddp.py --codec terngrad,qsgd4 --feedback ef

One rank per process, for ranks started elsewhere (another host, a network namespace: see
scripts/slow_link.py). Every rank gets the same flags but --rank; --codec takes one name, or
none for uncompressed DDP; GLOO_SOCKET_IFNAME picks the interface gloo binds to:

    .venv/bin/python examples/torch/fashion_mnist_ddp.py --rank 0 --world-size 2 \
        --master-addr 10.77.0.1 --master-port 29500 --codec q4 --report-json rank0.json

--report-json writes rank 0's measurements: the median time per step after --warmup-steps
steps, the wall time, test accuracy at every evaluation (each epoch, and every --eval-every
steps, on the first --eval-limit test images) with the training time up to it, and the bytes
per step on the wire.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import socket
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import commpress as cp
from commpress.torch import CompressionHook, OnebitAdam, matrix_shape
from fashion_mnist import augment, images, load
from resnet import resnet18


def make_model(args: argparse.Namespace) -> torch.nn.Module:
    """--model mlp: 784-256-128-10; resnet: the CIFAR-style ResNet-18 at --width, with BatchNorm."""
    torch.manual_seed(args.seed - 1)
    if args.model == "resnet":
        return resnet18(args.width)
    return torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )


def load_split(split: str, args: argparse.Namespace) -> Tuple[torch.Tensor, torch.Tensor]:
    return images(split) if args.model == "resnet" else load(split)


# --codec NAME: every codec family, in a configuration a trainer would start from.
CODECS = {
    "q4": lambda: cp.quantize(bits=4, granularity=cp.scale_granularity.block, group=128),
    "q2": lambda: cp.quantize(bits=2, granularity=cp.scale_granularity.block, group=128),
    "q4-stochastic": lambda: cp.quantize(
        bits=4, granularity=cp.scale_granularity.block, group=128, round=cp.rounding.stochastic
    ),
    "bf16": lambda: cp.cast(to=cp.dtype.bf16),
    "topk10": lambda: cp.top_k(fraction=0.1),
    # chunked top-k with quantized values: 2 of every 64 elements (3.1%), 2-bit values, 1-byte indices
    "ctopk3q2": lambda: cp.top_k(
        count=2,
        row_length=64,
        value_quantizer=cp.quantize(bits=2, group=64, range=cp.quant_range.asymmetric),
    ),
    "topk10q4": lambda: cp.top_k(
        fraction=0.1, value_quantizer=cp.quantize(bits=4, group=128, range=cp.quant_range.asymmetric)
    ),
    "randomk10": lambda: cp.random_k(fraction=0.1, unbiased=True),
    # the same selection with 4-bit stochastically rounded values (unbiased, docs/methods.md 3.5);
    # the hook gathers its payloads
    "randomk10q4": lambda: cp.random_k(
        fraction=0.1,
        unbiased=True,
        value_quantizer=cp.quantize(
            bits=4, group=128, range=cp.quant_range.asymmetric, round=cp.rounding.stochastic
        ),
    ),
    "sign": lambda: cp.sign(scale=cp.sign_scale.rms),
    "fp8": lambda: cp.fp8(),
    "mxfp8": lambda: cp.mxfp8(),
    "mxfp4": lambda: cp.mxfp4(),
    "nvfp4": lambda: cp.nvfp4(),
    "terngrad": lambda: cp.terngrad(block=512, clip_sigmas=2.5),
    "natural": lambda: cp.natural(block=512),
    "qsgd8": lambda: cp.qsgd8(block=512),
    "qsgd4": lambda: cp.qsgd4(block=512),
    "qsgd2": lambda: cp.qsgd2(block=512),
    # the same levels in the paper's Elias coding: a body whose length varies with the levels
    "qsgd8e": lambda: cp.qsgd8(block=512, coding=cp.qsgd_coding.elias),
    "qsgd4e": lambda: cp.qsgd4(block=512, coding=cp.qsgd_coding.elias),
    "qsgd2e": lambda: cp.qsgd2(block=512, coding=cp.qsgd_coding.elias),
    # the randomized Hadamard rotation in windows of 256 before the quantizer
    "rq4": lambda: cp.rotated(cp.quantize(bits=4, granularity=cp.scale_granularity.block, group=128), 8),
    "rq2": lambda: cp.rotated(cp.quantize(bits=2, granularity=cp.scale_granularity.block, group=128), 8),
    "rmxfp4": lambda: cp.rotated(cp.mxfp4(), 8),
    # PowerSGD at rank 1 and 4 (its own error feedback: --feedback does not apply)
    "powersgd1": lambda: cp.powersgd(rank=1),
    "powersgd4": lambda: cp.powersgd(rank=4),
}
FEEDBACK = {
    "none": lambda: cp.none(),
    "ef": lambda: cp.ef(),
    "loco": lambda: cp.loco(beta=0.8, reset_every=0, storage=cp.store_int8),
    # Deep Gradient Compression: the momentum moves into the feedback, the optimizer runs without
    "dgc": lambda: cp.dgc(momentum=0.9),
}


# One-rank mode's objects that must outlive train() (see its end).
_KEEP_ALIVE: List[Any] = []


def make_pipeline(codec: str, feedback: str) -> Any:
    """The hook's pipeline, or the commpress.powersgd that replaces one."""
    c = CODECS[codec]()
    return c if isinstance(c, cp.powersgd) else cp.pipeline(FEEDBACK[feedback](), c)


def train(rank: int, world: int, init_method: str, codec: Optional[str], args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """One rank's run; rank 0 returns its results (the others None)."""
    torch.set_num_threads(1)
    started = time.monotonic()
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.timeout))
    x, y = load_split("train", args)
    if args.train_limit:
        x, y = x[: args.train_limit], y[: args.train_limit]
    report = bool(args.report_json)
    tx, ty = load_split("test", args) if rank == 0 else (None, None)
    net = make_model(args)
    onebit = args.optimizer == "onebit_adam"
    # 1-bit Adam exchanges and updates in one: no DDP, no hook.
    model = net if onebit else DDP(net)
    hook = (CompressionHook(model, make_pipeline(codec, args.feedback), seed=args.seed, collective=args.collective)
            .register(model) if codec and not onebit else None)
    if onebit:
        steps_per_epoch = len(x) // world // args.batch
        cfg = cp.onebit_adam_config(lr=args.lr, freeze_step=max(1, round(args.freeze_fraction * args.epochs * steps_per_epoch)),
                                    variance_floor=args.variance_floor)
        opt: torch.optim.Optimizer = OnebitAdam(net.parameters(), cfg, make_pipeline(codec, args.feedback),
                                                seed=args.seed, exchange=args.onebit_exchange)
    elif args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        # DGC keeps the momentum itself (momentum correction): the optimizer must not add its own.
        momentum = 0.0 if codec and args.feedback == "dgc" else 0.9
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=momentum)
    g = torch.Generator().manual_seed(41 + args.seed)
    augment_gen = torch.Generator().manual_seed(1000 * args.seed + rank)  # each rank its own crops and flips
    uncompressed_bytes = 0
    step_seconds: List[float] = []
    evals: List[Dict[str, float]] = []
    eval_seconds = 0.0

    def evaluate(epoch: int) -> None:  # rank 0 only; its time is kept out of the training time
        nonlocal eval_seconds
        t0 = time.monotonic()
        n = args.eval_limit or len(tx)
        accuracy = test_accuracy(net, tx[:n], ty[:n])
        t1 = time.monotonic()
        evals.append({"epoch": epoch, "step": len(step_seconds), "seconds": t0 - start - eval_seconds,
                      "accuracy": accuracy})
        eval_seconds += t1 - t0

    start = time.monotonic()
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=g)  # the same order on every rank
        mine = order[rank::world]
        for i in range(0, len(mine) - args.batch + 1, args.batch):
            idx = mine[i : i + args.batch]
            t0 = time.perf_counter()
            opt.zero_grad()
            batch = augment(x[idx], augment_gen) if args.model == "resnet" else x[idx]
            F.cross_entropy(model(batch), y[idx]).backward()
            opt.step()
            step_seconds.append(time.perf_counter() - t0)
            # A ring fp32 all-reduce sends 2 (N-1)/N of the gradient's bytes per rank.
            uncompressed_bytes += 2 * (world - 1) * 4 * sum(p.numel() for p in model.parameters()) // world
            if report and rank == 0 and args.eval_every and len(step_seconds) % args.eval_every == 0:
                evaluate(epoch + 1)
        if report and rank == 0 and (not evals or evals[-1]["step"] != len(step_seconds)):
            evaluate(epoch + 1)
    seconds = time.monotonic() - start - eval_seconds
    result: Optional[Dict[str, Any]] = None
    if rank == 0:
        accuracy = test_accuracy(net, tx, ty)
        sent = hook.totals.bytes_sent if hook else opt.bytes_sent if onebit else uncompressed_bytes
        result = {"accuracy": accuracy, "sent": sent, "uncompressed": uncompressed_bytes, "seconds": seconds,
                  "steps": len(step_seconds),
                  # what rank 0's encodes wrote below their worst case (variable-length bodies)
                  "payload_bytes": hook.totals.payload_bytes if hook else 0,
                  "payload_max_bytes": hook.totals.payload_max_bytes if hook else 0}
        if report:
            timed = step_seconds[args.warmup_steps :] or step_seconds
            steps = len(step_seconds)
            result.update({
                "codec": codec or "none", "feedback": args.feedback if codec else "none", "ranks": world,
                "model": args.model, "seed": args.seed, "optimizer": args.optimizer, "collective": args.collective,
                "onebit_exchange": args.onebit_exchange if onebit else None,
                "epochs": args.epochs, "batch": args.batch, "lr": args.lr, "train_limit": args.train_limit,
                "steps": steps, "warmup_steps": args.warmup_steps,
                "step_seconds_median": statistics.median(timed), "step_seconds_mean": statistics.fmean(timed),
                "step_seconds_min": min(timed), "step_seconds_max": max(timed),
                "bytes_per_step": sent / steps if steps else 0.0,
                "uncompressed_bytes_per_step": uncompressed_bytes / steps if steps else 0.0,
                "payload_bits": None if onebit else payload_bits(codec, args, result) if codec else 32.0,
                "buckets": len(hook.buckets) if hook else None,
                "evals": evals, "eval_seconds": eval_seconds, "eval_images": args.eval_limit or len(tx),
                "wall_seconds": time.monotonic() - started,
            })
    # Freeing the DDP model lets its reducer destroy the process group while this thread holds
    # the GIL, and torch 1.13's gloo worker threads may need the GIL then (a deadlock at exit):
    # every rank keeps everything alive and leaves through os._exit (see worker).
    _KEEP_ALIVE.append((model, hook, opt))
    dist.destroy_process_group()
    return result


def test_accuracy(model: torch.nn.Module, tx: torch.Tensor, ty: torch.Tensor) -> float:
    """In eval mode (BatchNorm's running statistics), 1000 images at a time. `model` is the module
    DDP wraps: DDP's own forward would broadcast the buffers, a collective rank 0 runs alone."""
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(tx[i : i + 1000]).argmax(1) == ty[i : i + 1000]).sum()) for i in range(0, len(tx), 1000))
    model.train()
    return correct / len(tx)


def worker(rank: int, world: int, port: int, codec: Optional[str], args: argparse.Namespace, q: "mp.Queue") -> None:
    q.put(train(rank, world, f"tcp://127.0.0.1:{port}", codec, args))
    q.close()
    q.join_thread()  # the result is in the pipe: leave without the interpreter's teardown (train)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def payload_bits(codec: str, args: argparse.Namespace, result: Dict[str, Any]) -> float:
    """Bits per gradient element of one payload per parameter tensor, headers included. A
    fixed-length codec's payload is max_payload_bytes; a variable-length body (QSGD's Elias
    coding) is shorter by what rank 0's encodes saved against that worst case, averaged over
    the steps (tensors the hook sends uncompressed, the biases, count at their worst case)."""
    params = list(make_model(args).parameters())
    c = CODECS[codec]()
    if isinstance(c, cp.powersgd):  # P and Q of each matrix view, no header
        total = sum(4 * c.message_floats(*matrix_shape(p)) for p in params)
    else:
        total = sum(cp.max_payload_bytes(c, p.numel()) for p in params)
        if result["steps"]:
            total -= (result["payload_max_bytes"] - result["payload_bytes"]) / result["steps"]
    return 8 * total / sum(p.numel() for p in params)


def bits_label(codec: str, args: argparse.Namespace, result: Dict[str, Any]) -> str:
    """The bits per element of the hook's payloads; 1-bit Adam sends one flat tensor, fp32 while
    warming up, so its figure is the bytes line's."""
    if args.optimizer == "onebit_adam":
        return "1-bit Adam      "
    return f"{payload_bits(codec, args, result):5.2f} bits/element"


def run(codec: Optional[str], args: argparse.Namespace) -> Dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=worker, args=(r, args.ranks, port, codec, args, q)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    results = []
    while len(results) < len(procs):
        try:
            results.append(q.get(timeout=5))
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:  # a rank died: the others would wait in a collective forever
                for p in procs:
                    p.kill()
                raise SystemExit(f"a worker exited with code {failed[0]} (its traceback is above)")
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
    ap.add_argument("--codec", default="q4", help="comma-separated, of: none, " + ", ".join(CODECS))
    ap.add_argument("--feedback", default="loco", choices=sorted(FEEDBACK))
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the uncompressed run (it runs when --codec lists none)")
    ap.add_argument("--model", choices=("mlp", "resnet"), default="mlp",
                    help="resnet: ResNet-18 with BatchNorm at --width on 32 x 32 images, augmented")
    ap.add_argument("--width", type=int, default=8, help="the ResNet's base width")
    ap.add_argument("--seed", type=int, default=1, help="the model's initialisation, data order and hook stream")
    ap.add_argument("--optimizer", choices=("sgd", "adam", "onebit_adam"), default="sgd",
                    help="sgd: momentum 0.9 (0 under dgc); adam: PyTorch's defaults but --lr; onebit_adam: "
                         "commpress.torch.OnebitAdam with --codec and --feedback (sign and ef), no DDP")
    ap.add_argument("--freeze-fraction", type=float, default=0.2, help="onebit_adam: share of the steps in warm-up")
    ap.add_argument("--variance-floor", type=float, default=0.0, help="onebit_adam: the frozen variance's floor")
    ap.add_argument("--onebit-exchange", choices=("gather", "sharded"), default="gather",
                    help="onebit_adam: all-gather of the momenta, or DeepSpeed's worker + server error exchange")
    ap.add_argument("--collective", choices=("auto", "all_gather", "all_reduce", "sharded"), default="auto",
                    help="sharded: reduce-scatter with the worker error, all-gather with a server error")
    one = ap.add_argument_group("one rank per process (all four, or none)")
    one.add_argument("--rank", type=int, default=None, help="run this rank only; --codec: one name, or none")
    one.add_argument("--world-size", type=int, default=None)
    one.add_argument("--master-addr", default=None, help="rank 0's address")
    one.add_argument("--master-port", type=int, default=None)
    rep = ap.add_argument_group("report")
    rep.add_argument("--report-json", default=None, help="write rank 0's measurements here")
    rep.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps (0: each epoch)")
    rep.add_argument("--eval-limit", type=int, default=0,
                     help="those evaluations use the first N test images (0: all); the final accuracy all")
    rep.add_argument("--warmup-steps", type=int, default=10, help="steps left out of the time per step")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a collective may wait for a rank")
    args = ap.parse_args()
    if args.optimizer == "onebit_adam":
        names = args.codec.split(",")
        if (args.rank is None and not args.no_baseline) or "none" in names or any(
                isinstance(CODECS[c](), cp.powersgd) for c in names if c in CODECS):
            ap.error("--optimizer onebit_adam compresses by itself: give it a --codec other than none "
                     "and powersgd (sign, DeepSpeed's), and --no-baseline")
        if args.feedback not in ("none", "ef"):
            ap.error("--optimizer onebit_adam: --feedback none or ef (the worker error)")
        if args.collective != "auto":
            ap.error("--optimizer onebit_adam runs its own exchange: --onebit-exchange, not --collective")
    single = [args.rank, args.world_size, args.master_addr, args.master_port]
    if any(v is not None for v in single):
        if any(v is None for v in single):
            ap.error("--rank, --world-size, --master-addr and --master-port go together")
        if not 0 <= args.rank < args.world_size:
            ap.error(f"--rank {args.rank}: not in [0, {args.world_size})")
        if args.codec != "none" and args.codec not in CODECS:
            ap.error(f"--codec {args.codec}: one of none, {', '.join(CODECS)} with --rank")
        codec = None if args.codec == "none" else args.codec
        r = train(args.rank, args.world_size, f"tcp://{args.master_addr}:{args.master_port}", codec, args)
        if r is not None:
            label = "uncompressed" if codec is None else f"{codec} + {args.feedback}"
            print(f"rank 0 of {args.world_size}, {label}: accuracy {100 * r['accuracy']:.2f}%  "
                  f"sent {r['sent']} bytes  ({r['seconds']:.1f} s)", flush=True)
            if args.report_json:
                Path(args.report_json).write_text(json.dumps(r, indent=1) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    codecs = [c for c in args.codec.split(",") if c != "none"]
    for c in codecs:
        if c not in CODECS:
            ap.error(f"--codec {c}: not one of none, {', '.join(CODECS)}")
    mib = 1 << 20
    print(f"DDP on {args.ranks} gloo processes, {args.model}, {args.epochs} epochs, batch {args.batch} per rank, "
          f"{args.optimizer} lr {args.lr}, collective {args.collective}")
    plain = None
    reports = []
    if not args.no_baseline or "none" in args.codec.split(","):
        plain = run(None, args)
        reports.append(plain)
        print(f"  {'uncompressed':28s}: accuracy {100 * plain['accuracy']:.2f}%  32.00 bits/element  "
              f"sent {plain['sent'] / mib:8.1f} MiB per rank  ({plain['seconds']:.0f} s)", flush=True)
    for c in codecs:
        r = run(c, args)
        reports.append(r)
        label = f"{c} + {args.feedback}"
        versus = f", {100 * (r['accuracy'] - plain['accuracy']):+.2f} points" if plain else ""
        print(
            f"  {label:28s}: accuracy {100 * r['accuracy']:.2f}%  {bits_label(c, args, r)}  "
            f"sent {r['sent'] / mib:8.1f} MiB per rank  ({r['seconds']:.0f} s)  -> "
            f"{r['uncompressed'] / r['sent']:.1f}x fewer bytes{versus}",
            flush=True,
        )
    if args.report_json:
        Path(args.report_json).write_text(json.dumps({"runs": reports}, indent=1) + "\n")


if __name__ == "__main__":
    main()
