# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The sharded compressed all-reduce over a torch.distributed process group.

This is the protocol of the C++ ``collective/reduce_scatter.hpp`` (docs/collectives.md), with
the same chunk layout, slot sizes, zero padding, rank order and 1/N weight, so a rank's bytes on
the wire are the C++ collective's bytes for the same tensor:

1. :func:`reduce_scatter_compressed`: rank i encodes chunk j of its tensor with worker state j
   (the first error-feedback point) into slot j; an all-to-all sends slot j to owner j; owner j
   decodes its N slots in rank order into the mean of its shard. Alone, this is the FSDP / ZeRO
   gradient path: a trainer's own sharding, or FSDP2's ``set_custom_reduce_scatter`` in torch
   releases that have it, can call it.
2. :func:`all_gather_shard_compressed`: the owner encodes its shard with the server pipeline and
   its server state (the second error-feedback point); an all-gather; every rank decodes chunk j
   from owner j's payload.

Where a pipeline's payloads vary in length (``commpress.has_variable_body`` of its codec: QSGD's
Elias coding), its half first all-gathers the lengths its encodes wrote (int64, a rank's N
lengths for the all-to-all, its one length for the all-gather) and then sends blocks zero-padded
to the longest payload of the call instead of the fixed slots; each payload is decoded at the
length its sender reported. Fixed-length payloads take the one collective, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Optional

import numpy as np
import torch
import torch.distributed as dist

from .. import _commpress as _cp
from .. import errc, error

_HEADER = 64  # payload header bytes (docs/wire-format.md): the shortest valid payload
_LENGTH_BYTES = 8  # one payload length in the length exchange (int64)


@dataclass
class ShardedState:
    """One rank's sharded-path state for one tensor (C++ ``sharded_plan::state_type`` plus the
    plan's layout and slot sizes)."""

    worker_pipe: Any
    server_pipe: Any
    layout: Any  #: commpress.chunk_layout
    rank: int
    worker_slot: int  #: all-to-all slot per peer: the largest worker payload over the chunks
    server_slot: int  #: all-gather slot per rank: the largest server payload over the chunks
    worker: List[Any] = field(default_factory=list)  #: a worker state per destination chunk
    server: Any = None  #: the server state of the shard this rank owns

    @property
    def shard_size(self) -> int:
        return int(self.layout.length(self.rank))

    @property
    def worker_variable(self) -> bool:
        """Whether the worker payloads vary in length (C++ ``sharded_plan::worker_variable``)."""
        return bool(_cp.has_variable_body(self.worker_pipe.codec))

    @property
    def server_variable(self) -> bool:
        """Whether the server payloads vary in length (C++ ``sharded_plan::server_variable``)."""
        return bool(_cp.has_variable_body(self.server_pipe.codec))

    def reduce_scatter_wire_bytes(self) -> int:
        """Bytes a rank sends in the reduce-scatter half: N - 1 slots. Exact for fixed-length
        worker payloads; for variable ones the worst case, (N - 1) (8 N + slot): a call sends its
        N lengths and blocks as long as that call's longest payload (its CollectiveStats)."""
        world = self.layout.ranks
        lengths = _LENGTH_BYTES * world if self.worker_variable else 0
        return (world - 1) * (lengths + self.worker_slot)

    def all_gather_wire_bytes(self) -> int:
        """Bytes a rank sends in the all-gather half: N - 1 slots. Exact for fixed-length server
        payloads; for variable ones the worst case, (N - 1) (8 + slot)."""
        length = _LENGTH_BYTES if self.server_variable else 0
        return (self.layout.ranks - 1) * (length + self.server_slot)

    def save(self, tensor_id: int) -> dict:
        return {
            "worker": [s.save(tensor_id) for s in self.worker],
            "server": self.server.save(tensor_id),
        }

    def load(self, blobs: dict, tensor_id: int) -> None:
        if len(blobs["worker"]) != len(self.worker):
            raise error(errc.size_mismatch, "sharded: the checkpoint was made for another world size")
        # Load into fresh copies first, so a bad blob leaves this state untouched.
        worker = [self.worker_pipe.make_state(self.layout.length(j)) for j in range(len(self.worker))]
        for s, b in zip(worker, blobs["worker"]):
            s.load(b, tensor_id)
        server = self.server_pipe.make_state(self.shard_size)
        server.load(blobs["server"], tensor_id)
        self.worker, self.server = worker, server


def make_sharded_state(
    worker_pipe: Any,
    n: int,
    world_size: int,
    rank: int,
    server_pipe: Any = None,
    align: int = 0,
) -> ShardedState:
    """The state and layout of C++ ``sharded_plan(worker, server, n, ranks, {align})``.

    ``align`` 0 takes the least common multiple of both codecs' ``chunk_alignment``, so no
    block, column or row straddles two chunks. Raises commpress.Error when a pipeline cannot
    run on some chunk length (as the C++ plan's constructor)."""
    server_pipe = worker_pipe if server_pipe is None else server_pipe
    if align == 0:
        align = math.lcm(
            int(_cp.chunk_alignment(worker_pipe.codec)), int(_cp.chunk_alignment(server_pipe.codec))
        )
    layout = _cp.chunk_layout(n, world_size, align)
    worker_slot = server_slot = 0
    for j in range(world_size):
        length = layout.length(j)
        for p in (worker_pipe, server_pipe):
            ok = p.can_implement(length)
            if not ok:
                raise error(ok.code, f"collective: sharded: {ok.message}")
        worker_slot = max(worker_slot, worker_pipe.max_payload_bytes(length))
        server_slot = max(server_slot, server_pipe.max_payload_bytes(length))
    return ShardedState(
        worker_pipe,
        server_pipe,
        layout,
        rank,
        worker_slot,
        server_slot,
        [worker_pipe.make_state(layout.length(j)) for j in range(world_size)],
        server_pipe.make_state(layout.length(rank)),
    )


def rank_weight(world_size: int, mean: bool = True) -> float:
    """The weight of each rank's contribution: float32(1) / float32(N) (C++ rank_weight)."""
    return float(np.float32(1.0) / np.float32(world_size)) if mean else 1.0


@dataclass
class CollectiveStats:
    """What one call did on this rank (C++ collective_result)."""

    payload_bytes: int = 0
    #: bytes this rank sent: slots or blocks, and the lengths of variable-length payloads
    wire_bytes: int = 0
    nonfinite: int = 0
    held: int = 0


def _exchange_lengths(mine: List[int], slot: int, group: Optional[dist.ProcessGroup]) -> List[List[int]]:
    """Every rank's payload lengths (C++ ``detail::exchange_lengths``): all-gathers `mine`, checks
    that each length lies between the header and `slot` (they slice the received bytes), and
    returns them per rank. Raises commpress.Error (corrupt) naming a rank that reported a bad
    one."""
    t = torch.tensor(mine, dtype=torch.int64)
    theirs = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(theirs, t, group=group)
    lengths = [ls.tolist() for ls in theirs]
    for r, ls in enumerate(lengths):
        for n in ls:
            if not _HEADER <= n <= slot:
                raise error(
                    errc.corrupt,
                    f"collective: rank {r} reports a payload of {n} bytes, outside the header's "
                    f"{_HEADER} and the slot's {slot}",
                )
    return lengths


def reduce_scatter_compressed(
    input: torch.Tensor,
    state: ShardedState,
    ctx: Any,
    group: Optional[dist.ProcessGroup] = None,
    *,
    mean: bool = True,
    stats: Optional[CollectiveStats] = None,
) -> torch.Tensor:
    """The mean (or sum) over ranks of the decoded chunk this rank owns, added in rank order:
    C++ ``reduce_scatter_compressed``. `input` is this rank's full tensor (host memory, float32 /
    float16 / bfloat16, contiguous); the result is a new float32 shard of
    ``state.shard_size`` elements. Every rank calls it with the same layout and context."""
    lay = state.layout
    world = lay.ranks
    flat = input.reshape(-1)
    if flat.numel() != lay.n:
        raise error(errc.size_mismatch, f"collective: input has {flat.numel()} elements, the plan {lay.n}")
    slot = state.worker_slot
    send = torch.zeros(world * slot, dtype=torch.uint8)  # zero tails: defined wire bytes
    lengths = []
    for j in range(world):
        off, length = lay.offset(j), lay.length(j)
        r = _cp.encode(
            state.worker_pipe, state.worker[j], ctx, flat[off : off + length], send[j * slot : (j + 1) * slot]
        )
        lengths.append(int(r.bytes))
        if stats is not None:
            stats.payload_bytes += r.bytes
            stats.nonfinite += r.nonfinite
            stats.held += r.held
    # The block each rank sends each peer: the slot, or the longest payload of this call over
    # every rank (all_to_all_single takes blocks of one size), so the lengths go first.
    block, wire = slot, 0
    theirs: List[List[int]] = []
    if state.worker_variable:
        theirs = _exchange_lengths(lengths, slot, group)
        block = max(max(ls) for ls in theirs)
        send = send.view(world, slot)[:, :block].reshape(-1)  # payload j and its zero tail
        wire += (world - 1) * _LENGTH_BYTES * world
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    wire += (world - 1) * block
    shard = torch.zeros(state.shard_size, dtype=torch.float32)
    w = rank_weight(world, mean)
    for k in range(world):
        # rank k's payload for this rank's chunk: the state.rank-th of its lengths
        n = theirs[k][state.rank] if state.worker_variable else block
        _cp.decode_accumulate(state.worker_pipe, recv[k * block : k * block + n], shard, w)
    if stats is not None:
        stats.wire_bytes += wire
    return shard


def all_gather_shard_compressed(
    shard: torch.Tensor,
    state: ShardedState,
    ctx: Any,
    group: Optional[dist.ProcessGroup] = None,
    *,
    out: Optional[torch.Tensor] = None,
    stats: Optional[CollectiveStats] = None,
) -> torch.Tensor:
    """C++ ``all_gather_shard_compressed``: encodes this rank's `shard` with the server pipeline
    and state, all-gathers the payloads and decodes chunk j of the result from owner j's. Every
    rank ends with the same bits. Returns `out` (a new float32 tensor by default)."""
    lay = state.layout
    if shard.numel() != state.shard_size:
        raise error(errc.size_mismatch, f"collective: shard has {shard.numel()} elements, expected {state.shard_size}")
    payload = torch.zeros(state.server_slot, dtype=torch.uint8)
    r = _cp.encode(state.server_pipe, state.server, ctx, shard.reshape(-1), payload)
    # The block every rank sends: the slot, or the longest payload of this call.
    block, wire = state.server_slot, 0
    lengths: List[int] = []
    if state.server_variable:
        lengths = [ls[0] for ls in _exchange_lengths([int(r.bytes)], state.server_slot, group)]
        block = max(lengths)
        payload = payload[:block]
        wire += (lay.ranks - 1) * _LENGTH_BYTES
    gathered = [torch.empty_like(payload) for _ in range(lay.ranks)]
    dist.all_gather(gathered, payload, group=group)
    wire += (lay.ranks - 1) * block
    out = torch.empty(lay.n, dtype=torch.float32) if out is None else out
    flat = out.reshape(-1)
    receiver = state.server_pipe.make_receiver_state(0)  # none, ef, loco: the receiver keeps nothing
    for j in range(lay.ranks):
        off, length = lay.offset(j), lay.length(j)
        n = lengths[j] if state.server_variable else block
        _cp.decode(state.server_pipe, receiver, gathered[j][:n], flat[off : off + length])
    if stats is not None:
        stats.payload_bytes += r.bytes
        stats.nonfinite += r.nonfinite
        stats.held += r.held
        stats.wire_bytes += wire
    return out


def sharded_all_reduce_compressed(
    input: torch.Tensor,
    state: ShardedState,
    ctx: Any,
    group: Optional[dist.ProcessGroup] = None,
    *,
    stats: Optional[CollectiveStats] = None,
) -> torch.Tensor:
    """Both halves (C++ ``sharded_all_reduce_compressed``): the compressed mean of `input` over
    ranks, with error feedback at the worker and at the server."""
    shard = reduce_scatter_compressed(input, state, ctx, group, stats=stats)
    return all_gather_shard_compressed(shard, state, ctx, group, stats=stats)
