# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The CIFAR-style ResNet-18 of the model-parallel experiments, at a chosen width.

He et al.'s ResNet-18 as it is trained on 32 x 32 images: a 3 x 3 stem without pooling, then
four layers of two BasicBlocks (3 x 3 convolutions, BatchNorm, an identity or 1 x 1 projection
shortcut) at widths w, 2w, 4w, 8w, the last three halving the resolution, then global average
pooling and a linear classifier. w = 64 is the network of Rudakov et al.'s CIFAR-10 runs;
the examples use a narrower one (``width``) so that a run fits a 2-core machine.

``stages(model)`` cuts it where Rudakov et al. put their boundaries, after layer1, layer2 and
layer3: four pipeline stages whose outputs are w x 32 x 32, 2w x 16 x 16 and 4w x 8 x 8 per
sample.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


def _layer(cin: int, cout: int, stride: int, blocks: int = 2) -> nn.Sequential:
    return nn.Sequential(BasicBlock(cin, cout, stride), *(BasicBlock(cout, cout, 1) for _ in range(blocks - 1)))


def resnet18(width: int = 64, in_channels: int = 1, classes: int = 10) -> nn.Sequential:
    """ResNet-18 for 32 x 32 inputs; children: stem, layer1..layer4, head."""
    w = width
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(in_channels, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()),
        _layer(w, w, 1),
        _layer(w, 2 * w, 2),
        _layer(2 * w, 4 * w, 2),
        _layer(4 * w, 8 * w, 2),
        nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, classes)),
    )


def stages(model: nn.Sequential) -> List[nn.Sequential]:
    """The four pipeline stages: stem + layer1 | layer2 | layer3 | layer4 + head."""
    stem, l1, l2, l3, l4, head = model.children()
    return [nn.Sequential(stem, l1), nn.Sequential(l2), nn.Sequential(l3), nn.Sequential(l4, head)]


def boundary_shapes(width: int) -> List[Tuple[int, int, int]]:
    """Per-sample shapes (C, H, W) of the three stage outputs that cross a boundary."""
    return [(width, 32, 32), (2 * width, 16, 16), (4 * width, 8, 8)]
