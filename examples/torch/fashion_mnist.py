# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Fashion-MNIST for the PyTorch examples: Debian's dataset-fashion-mnist package (IDX files,
gzip or not), never the network; $COMMPRESS_FASHION_MNIST_DIR overrides the directory.

- ``load(split)``: flat 784-pixel rows in [0, 1] and int64 labels (the MLP examples).
- ``images(split)``: 1 x 32 x 32 images, zero-padded by 2 pixels and normalised with the
  training set's mean and standard deviation (the ResNet examples).
- ``augment(batch, generator)``: the light augmentation of CIFAR-style training, a random crop
  of 32 x 32 from the image padded by 4 and a random horizontal flip, drawn from `generator`.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Tuple

import numpy as np
import torch
import torch.nn.functional as F

DATA_DIR = Path(os.environ.get("COMMPRESS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))

# Mean and standard deviation of the 60000 training images' pixels in [0, 1].
MEAN, STD = 0.2860, 0.3530


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
    """(N x 784 float32 in [0, 1], N int64 labels) of split "train" or "test"."""
    prefix = "train" if split == "train" else "t10k"
    for suffix in (".gz", ""):
        images = DATA_DIR / f"{prefix}-images-idx3-ubyte{suffix}"
        labels = DATA_DIR / f"{prefix}-labels-idx1-ubyte{suffix}"
        if images.exists() and labels.exists():
            x = torch.from_numpy(read_idx(images).reshape(-1, 784).astype(np.float32) / 255.0)
            return x, torch.from_numpy(read_idx(labels).astype(np.int64))
    raise SystemExit(f"Fashion-MNIST not found in {DATA_DIR}: apt-get install dataset-fashion-mnist")


def images(split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """(N x 1 x 32 x 32 normalised float32, N int64 labels): 28 x 28 padded with black."""
    x, y = load(split)
    x = F.pad(x.view(-1, 1, 28, 28), (2, 2, 2, 2))
    return (x - MEAN) / STD, y


def augment(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random 32 x 32 crop of each image padded by 4 (black), flipped left-right with
    probability 1/2."""
    n, c, h, w = batch.shape
    padded = F.pad(batch, (4, 4, 4, 4), value=-MEAN / STD)
    dy = torch.randint(0, 9, (n,), generator=generator)
    dx = torch.randint(0, 9, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    # One gather for the whole batch: row and column indices per image, columns reversed where
    # the image is flipped.
    rows = dy[:, None] + torch.arange(h)
    cols = dx[:, None] + torch.where(flip[:, None], torch.arange(w - 1, -1, -1), torch.arange(w))
    picked = padded.permute(0, 2, 3, 1)[torch.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
    return picked.permute(0, 3, 1, 2).contiguous()
