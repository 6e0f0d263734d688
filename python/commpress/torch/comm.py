# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""A communicator (C++ ``comm/communicator.hpp`` concept) over a torch.distributed process
group, for the library's own collective classes bound in commpress (``commpress.onebit_adam``).
Every method works in place on the NumPy views the library hands it."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.distributed as dist


class TorchCommunicator:
    """rank(), size(), all_gather, all_to_all, send, recv, all_reduce_sum and barrier over
    `group` (default: the world), for host tensors (gloo)."""

    def __init__(self, group: Optional[dist.ProcessGroup] = None) -> None:
        self.group = group

    def rank(self) -> int:
        return dist.get_rank(self.group)

    def size(self) -> int:
        return dist.get_world_size(self.group)

    def all_gather(self, mine: np.ndarray, everyone: np.ndarray) -> None:
        # Block r of `everyone` receives rank r's `mine`: chunks are views of that buffer.
        out = torch.from_numpy(everyone)
        dist.all_gather(list(out.chunk(self.size())), torch.from_numpy(mine), group=self.group)

    def all_to_all(self, send: np.ndarray, recv: np.ndarray) -> None:
        dist.all_to_all_single(torch.from_numpy(recv), torch.from_numpy(send), group=self.group)

    def send(self, buf: np.ndarray, peer: int, tag: int) -> None:
        dist.send(torch.from_numpy(buf), peer, group=self.group, tag=tag)

    def recv(self, buf: np.ndarray, peer: int, tag: int) -> None:
        dist.recv(torch.from_numpy(buf), peer, group=self.group, tag=tag)

    def all_reduce_sum(self, values: np.ndarray) -> None:
        dist.all_reduce(torch.from_numpy(values), group=self.group)

    def barrier(self) -> None:
        dist.barrier(group=self.group)
