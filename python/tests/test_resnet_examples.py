# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The ResNet examples: lossless boundaries leave the network's outputs and gradients bit for
bit, the model-parallel example writes its CSV with the payload and buffer sizes the codecs
imply, and the DDP example trains the ResNet with Adam through the sharded collective."""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "torch"
sys.path.insert(0, str(EXAMPLES))

from fashion_mnist import MEAN, STD, augment  # noqa: E402
from fashion_mnist_pipeline import Boundaries  # noqa: E402
from resnet import boundary_shapes, resnet18, stages  # noqa: E402

HAVE_DATA = Path(os.environ.get("COMMPRESS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")).is_dir()
needs_data = pytest.mark.skipif(not HAVE_DATA, reason="dataset-fashion-mnist is not installed")
BATCH, WIDTH = 16, 4


def _args(act: str, grad: str, feedback: str = "none") -> argparse.Namespace:
    return argparse.Namespace(act=act, grad=grad, feedback=feedback, width=WIDTH, batch=BATCH, seed=3)


def _loss_and_grads(model, x, y, bounds=None, ids=None):
    model.zero_grad()
    h = x
    parts = stages(model)
    for i in range(3):
        h = parts[i](h)
        if bounds is not None:
            h = bounds.cross(i, h, ids)
    loss = F.cross_entropy(parts[3](h), y)
    loss.backward()
    return loss.detach().clone(), [p.grad.clone() for p in model.parameters()]


def test_stage_cut_is_the_network():
    model = resnet18(WIDTH)
    x = torch.randn(2, 1, 32, 32)
    h = x
    for i, part in enumerate(stages(model)):
        h = part(h)
        if i < 3:
            assert tuple(h.shape[1:]) == boundary_shapes(WIDTH)[i]
    assert torch.equal(h, model(x))


def test_lossless_boundaries_change_no_bit():
    torch.manual_seed(0)
    model = resnet18(WIDTH)
    x, y = torch.randn(BATCH, 1, 32, 32), torch.randint(0, 10, (BATCH,))
    loss, grads = _loss_and_grads(model, x, y)
    bounds = Boundaries(_args("fp32", "fp32"), samples=BATCH, steps_per_epoch=1)
    loss_b, grads_b = _loss_and_grads(model, x, y, bounds)
    assert torch.equal(loss, loss_b)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_b))
    # fp32 payloads: 4 bytes per element plus one header per message
    sizes = [int(np.prod(s)) * BATCH for s in boundary_shapes(WIDTH)]
    assert bounds.payload_bytes() >= 2 * 4 * sum(sizes)
    assert bounds.payload_bytes() < 2 * 4 * sum(sizes) + 6 * 256


def test_lossy_boundaries_reach_every_stage():
    torch.manual_seed(0)
    model = resnet18(WIDTH)
    x, y = torch.randn(BATCH, 1, 32, 32), torch.randint(0, 10, (BATCH,))
    loss, grads = _loss_and_grads(model, x, y)
    bounds = Boundaries(_args("q4:channel", "topk30", "ef21"), samples=BATCH, steps_per_epoch=1)
    loss_b, grads_b = _loss_and_grads(model, x, y, bounds)
    assert not torch.equal(loss, loss_b) and abs(loss.item() - loss_b.item()) < 0.5
    # The first stage's weights see the gradient through all three compressed boundaries.
    first = next(iter(model.parameters()))
    g0, g1 = grads[0], grads_b[0]
    assert first.shape == g0.shape and not torch.equal(g0, g1)
    cos = F.cosine_similarity(g0.flatten(), g1.flatten(), dim=0).item()
    assert cos > 0.3, cos
    sizes = [int(np.prod(s)) * BATCH for s in boundary_shapes(WIDTH)]
    assert bounds.payload_bytes() < 0.6 * 2 * 4 * sum(sizes)


def test_augment_crops_and_flips_each_image():
    batch = torch.randn(16, 2, 32, 32)
    got = augment(batch, torch.Generator().manual_seed(7))
    # The same draws, one image at a time: a 32 x 32 window of the image padded by 4 (with the
    # normalised black), mirrored left-right where drawn.
    g = torch.Generator().manual_seed(7)
    dy, dx = torch.randint(0, 9, (16,), generator=g), torch.randint(0, 9, (16,), generator=g)
    flip = torch.rand(16, generator=g) < 0.5
    padded = F.pad(batch, (4, 4, 4, 4), value=-MEAN / STD)
    assert 0 < int(flip.sum()) < 16 and len(set(dy.tolist())) > 1
    for i in range(16):
        crop = padded[i, :, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32]
        assert torch.equal(got[i], crop.flip(-1) if flip[i] else crop), i


def test_unknown_specs_are_refused():
    with pytest.raises(SystemExit, match="unknown codec spec"):
        Boundaries(_args("int3", "fp32"), samples=BATCH, steps_per_epoch=1)
    with pytest.raises(SystemExit, match="scope"):
        Boundaries(_args("q4:row", "fp32"), samples=BATCH, steps_per_epoch=1)


@needs_data
def test_pipeline_example_writes_its_csv(tmp_path):
    out = tmp_path / "run.csv"
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "fashion_mnist_pipeline.py"), "--act", "q4", "--grad", "q4",
         "--feedback", "aq_sgd:int4", "--epochs", "2", "--train-subset", "256", "--batch", "64",
         "--width", str(WIDTH), "--eval", "last", "--csv", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = list(csv.DictReader(out.open()))
    assert [int(row["epoch"]) for row in rows] == [1, 2]
    assert rows[0]["test_acc_compressed"] == "nan"
    last = rows[-1]
    assert 0.0 < float(last["test_acc_compressed"]) <= 1.0 and 0.0 < float(last["test_acc_uncompressed"]) <= 1.0
    elems = sum(int(np.prod(s)) for s in boundary_shapes(WIDTH))
    # AQ-SGD's buffers: one int4 row per sample on each side, plus per-row scales and headers.
    state = int(last["feedback_state_bytes"])
    assert 2 * 256 * elems // 2 <= state < 2 * 256 * elems, state
    # epoch 1 is AQ-SGD's warm-up (fp32 activations), epoch 2 sends 4-bit deltas: on average
    # well under the fp32 activations plus 4-bit gradients
    per_step = float(last["bytes_per_step"])
    assert per_step < 64 * elems * (4 + 0.5) * 0.75


@needs_data
def test_ddp_example_trains_the_resnet_sharded_with_adam():
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "fashion_mnist_ddp.py"), "--ranks", "2", "--epochs", "1",
         "--train-limit", "640", "--model", "resnet", "--width", str(WIDTH), "--optimizer", "adam",
         "--lr", "0.001", "--codec", "q4", "--feedback", "loco", "--collective", "sharded"],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resnet" in r.stdout and "collective sharded" in r.stdout
    fewer = [float(v) for v in re.findall(r"-> (\d+\.\d+)x fewer bytes", r.stdout)]
    assert len(fewer) == 1 and fewer[0] > 3.0, r.stdout
