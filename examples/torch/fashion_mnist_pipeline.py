#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Model-parallel compression on a ResNet with BatchNorm (Rudakov et al., docs/methods.md
section 4): a CIFAR-style ResNet-18 (examples/torch/resnet.py) trains on Fashion-MNIST padded to
32 x 32 while each of its three stage boundaries (after layer1, layer2 and layer3) sends the
activations forward and their gradients backward through a commpress StageBoundary, each
direction with its own pipeline and state. Every epoch the test set is evaluated twice: with the
forward codec applied at every boundary (no feedback state), and without it.

    .venv/bin/python examples/torch/fashion_mnist_pipeline.py --act q2 --grad q8
    .venv/bin/python examples/torch/fashion_mnist_pipeline.py --act topk10 --grad topk10 --feedback ef21
    .venv/bin/python examples/torch/fashion_mnist_pipeline.py --act q4 --grad q4 --feedback aq_sgd:int8

SPEC (--act, --grad): fp32 | q<bits> (Rudakov's quantize_custom: per-tensor min-max, nearest)
| q<bits>:channel (min-max per sample and channel) | topk<percent> (per sample). --feedback sets
both directions, except aq_sgd[:f32|bf16|int8|int4], a forward (activation) method: the
gradients go without feedback, and its per-sample buffers fill during a first epoch sent
uncompressed.

Writes one CSV row per epoch (--csv): epoch, mean train loss, test accuracy with compressed and
uncompressed inference (--eval last: nan before the last epoch), payload bytes per step since
the first step (all boundaries, both directions; a running mean), wall seconds, and the bytes of
the feedback state after the last epoch (the checkpoint of every channel end: AQ-SGD's buffers;
nan in the other rows). A run whose loss turns NaN stops after that epoch, its accuracies nan.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

import commpress as cp
from commpress.torch import StageBoundary
from fashion_mnist import augment, images
from resnet import boundary_shapes, resnet18, stages

AQ_STORAGE = {"f32": cp.store_f32, "bf16": cp.store_bf16, "int8": cp.store_int8, "int4": cp.store_int4}


def make_codec(spec: str, sample_shape: Sequence[int]) -> Optional[Any]:
    """The codec of SPEC at a boundary whose samples have shape (C, H, W); None for fp32."""
    c, h, w = sample_shape
    if spec == "fp32":
        return None
    if spec.startswith("topk"):
        return cp.top_k(fraction=float(spec[4:]) / 100.0, row_length=c * h * w)
    if spec.startswith("q"):
        bits, _, scope = spec[1:].partition(":")
        if scope not in ("", "channel"):
            raise SystemExit(f"--act/--grad {spec}: the scope is ':channel' or nothing")
        return cp.quantize(
            bits=int(bits),
            granularity=cp.scale_granularity.block if scope else cp.scale_granularity.tensor,
            group=h * w if scope else 0,
            range=cp.quant_range.asymmetric,
        )
    raise SystemExit(f"unknown codec spec {spec!r}: fp32, q<bits>[:channel] or topk<percent>")


def make_pipeline(feedback: Any, codec: Optional[Any]) -> Any:
    return cp.pipeline(feedback, codec if codec is not None else cp.identity())


class Boundaries:
    """The three stage boundaries and the stateless codecs of compressed inference."""

    def __init__(self, args: argparse.Namespace, samples: int, steps_per_epoch: int) -> None:
        kind, _, storage = args.feedback.partition(":")
        self.keyed = kind == "aq_sgd"
        self.ends: List[StageBoundary] = []
        self.inference: List[Optional[Any]] = []
        for i, shape in enumerate(boundary_shapes(args.width)):
            d = int(np.prod(shape))
            act_codec, grad_codec = make_codec(args.act, shape), make_codec(args.grad, shape)
            if self.keyed:
                aq = cp.aq_sgd(samples=samples, sample_size=d, warmup_steps=steps_per_epoch,
                               storage=AQ_STORAGE[storage or "f32"])
                act, grad = make_pipeline(aq, act_codec), make_pipeline(cp.none(), grad_codec)
            else:
                fb = {"none": cp.none, "ef": cp.ef, "ef21": cp.ef21}[kind]
                act, grad = make_pipeline(fb(), act_codec), make_pipeline(fb(), grad_codec)
            self.ends.append(StageBoundary(act, grad, (args.batch, d), seed=args.seed, tensor_id=10 * i))
            self.inference.append(act_codec)

    def cross(self, i: int, h: torch.Tensor, ids: Optional[torch.Tensor]) -> torch.Tensor:
        flat = h.flatten(1)
        return self.ends[i](flat, ids if self.keyed else None).view(h.shape)

    def lossy(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """The forward codec alone (no feedback state): compressed inference."""
        codec = self.inference[i]
        if codec is None:
            return h
        x = h.contiguous().view(-1).numpy()
        return torch.from_numpy(cp.decompress(codec, cp.compress(codec, x))).view(h.shape)

    def payload_bytes(self) -> int:
        return sum(b.bytes_forward + b.bytes_backward for b in self.ends)

    def state_bytes(self) -> int:
        return sum(len(blob) for b in self.ends for blob in b.state_dict_blobs().values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--act", default="fp32", help="activation codec SPEC")
    ap.add_argument("--grad", default="fp32", help="gradient codec SPEC")
    ap.add_argument("--feedback", default="none", help="none | ef | ef21 | aq_sgd[:f32|bf16|int8|int4]")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--train-subset", type=int, default=12800, help="first N training images (0: all)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1, help="peak learning rate, cosine to 0 per step")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--width", type=int, default=8, help="ResNet-18 base width (64: the original)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--eval", choices=("all", "last"), default="all",
                    help="evaluate after every epoch, or after the last only (earlier rows: nan)")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    kind = args.feedback.partition(":")[0]
    if kind not in ("none", "ef", "ef21", "aq_sgd") or (
        kind != "aq_sgd" and ":" in args.feedback) or args.feedback.partition(":")[2] not in ("", *AQ_STORAGE):
        ap.error(f"--feedback {args.feedback}: none, ef, ef21 or aq_sgd[:f32|bf16|int8|int4]")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = images("train")
    if args.train_subset:
        x, y = x[: args.train_subset], y[: args.train_subset]
    tx, ty = images("test")
    model = resnet18(args.width)
    parts = stages(model)
    steps_per_epoch = len(x) // args.batch
    if kind == "aq_sgd" and len(x) % args.batch:
        # The last partial batch is dropped: its samples would miss the warm-up epoch and start
        # compressing against an empty buffer.
        ap.error(f"--feedback aq_sgd: --train-subset {len(x)} is not a multiple of --batch {args.batch}")
    bounds = Boundaries(args, len(x), steps_per_epoch)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * steps_per_epoch)
    order_gen = torch.Generator().manual_seed(args.seed)
    aug_gen = torch.Generator().manual_seed(args.seed + 1000)

    def forward(batch: torch.Tensor, ids: Optional[torch.Tensor], mode: str) -> torch.Tensor:
        h = batch
        for i in range(3):
            h = parts[i](h)
            h = bounds.cross(i, h, ids) if mode == "train" else bounds.lossy(i, h) if mode == "compressed" else h
        return parts[3](h)

    def evaluate(mode: str) -> float:
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(tx), args.batch):
                correct += int((forward(tx[i : i + args.batch], None, mode).argmax(1) == ty[i : i + args.batch]).sum())
        model.train()
        return correct / len(tx)

    out = open(args.csv, "w") if args.csv else None
    if out:
        out.write("epoch,train_loss,test_acc_compressed,test_acc_uncompressed,bytes_per_step,wall_s,"
                  "feedback_state_bytes\n")
    print(f"ResNet-18 width {args.width}, {len(x)} training images, {args.epochs} epochs, batch {args.batch}: "
          f"act {args.act}, grad {args.grad}, feedback {args.feedback}, seed {args.seed}", flush=True)
    start = time.monotonic()
    steps = 0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x), generator=order_gen)
        total, count = 0.0, 0
        for s in range(steps_per_epoch):
            ids = order[s * args.batch : (s + 1) * args.batch]
            loss = F.cross_entropy(forward(augment(x[ids], aug_gen), ids, "train"), y[ids])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item()
            count += 1
            steps += 1
        train_loss = total / count
        diverged = not math.isfinite(train_loss)
        last = epoch == args.epochs or diverged
        if diverged:
            acc_c = acc_u = math.nan
        elif last or args.eval == "all":
            acc_c, acc_u = evaluate("compressed"), evaluate("uncompressed")
        else:
            acc_c = acc_u = math.nan
        wall = time.monotonic() - start
        state = bounds.state_bytes() if last else math.nan
        print(f"epoch {epoch}: train loss {train_loss:.4f}  test acc {100 * acc_c:.2f}% compressed / "
              f"{100 * acc_u:.2f}% uncompressed  {bounds.payload_bytes() / steps / 1024:.1f} KiB/step  "
              f"({wall:.0f} s)", flush=True)
        if out:
            out.write(f"{epoch},{train_loss:.6f},{acc_c:.6f},{acc_u:.6f},{bounds.payload_bytes() / steps:.1f},"
                      f"{wall:.2f},{state}\n")
            out.flush()
        if diverged:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
