# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""PyTorch adapters over the commpress binding (docs/python.md).

- :class:`CompressionHook`: a DistributedDataParallel communication hook for any pipeline.
- :class:`StageBoundary`: a pipeline-parallel stage boundary (activations forward, gradients
  back), in one process or between stage processes.
- :func:`reduce_scatter_compressed`, :func:`all_gather_shard_compressed`,
  :func:`sharded_all_reduce_compressed`: the sharded path over a process group.
- :class:`OnebitAdam`: 1-bit Adam as a torch optimizer (the exchange and the update in one).
- :class:`TorchCommunicator`: the C++ communicator concept over a process group, for
  ``commpress.onebit_adam``.
"""

from .comm import TorchCommunicator
from .ddp import CompressionHook, LayerPolicy, StepStats, matrix_shape, tensor_id_of
from .sharded import (
    CollectiveStats,
    ShardedState,
    all_gather_shard_compressed,
    make_sharded_state,
    reduce_scatter_compressed,
    sharded_all_reduce_compressed,
)
from .onebit import OnebitAdam
from .stage import StageBoundary

__all__ = [
    "CollectiveStats",
    "CompressionHook",
    "LayerPolicy",
    "OnebitAdam",
    "ShardedState",
    "StageBoundary",
    "StepStats",
    "all_gather_shard_compressed",
    "make_sharded_state",
    "matrix_shape",
    "reduce_scatter_compressed",
    "sharded_all_reduce_compressed",
    "tensor_id_of",
    "TorchCommunicator",
]
