# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""A pipeline-parallel stage boundary: activations compressed going forward, their gradients
compressed coming back, each direction with its own pipeline.

Each direction is a pair of C++ channel ends (``pipeline/channel.hpp``: ``sender_end`` and
``receiver_end``, bound as ``commpress.sender_end`` / ``commpress.receiver_end``), so a boundary
sends and reconstructs exactly what the C++ ends do, step counters and stream checks included.

- In one process (simulated stages), ``StageBoundary(...)`` is a module whose forward returns
  the receiver's reconstruction of its input and whose backward returns the reconstruction of
  the incoming gradient.
- Between stage processes, ``role="send"`` on stage i and ``role="recv"`` on stage i + 1 talk
  over torch.distributed send / recv, framed as the C++ stage channel (collective/
  stage_channel.hpp): a 16-byte frame (payload bytes, sample ids; u64 little-endian), the ids
  (AQ-SGD only), the payload.

AQ-SGD pipelines take the batch's sample ids (``forward(x, ids)``). ``enabled = False`` sends
uncompressed identity payloads and leaves every state untouched (inference).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .. import _commpress as _cp
from .. import errc, error


def _ids_array(ids: Any) -> Optional[np.ndarray]:
    if ids is None:
        return None
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(ids, dtype=np.uint64))


def _as_f32(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(torch.float32).contiguous()


class _LocalBoundary(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, boundary: "StageBoundary", ids: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.boundary = boundary
        ctx.ids = ids
        ctx.dtype = x.dtype
        wire = boundary.act_tx.send(_as_f32(x), ids=ids) if ids is not None else boundary.act_tx.send(_as_f32(x))
        boundary.bytes_forward += int(wire.size)
        y = boundary.act_rx.receive(wire, ids=ids) if ids is not None else boundary.act_rx.receive(wire)
        return torch.from_numpy(y).view(x.shape).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor):  # type: ignore[override]
        b: StageBoundary = ctx.boundary
        grad_ids = ctx.ids if b.grad_tx.keyed_by_sample else None
        gf = _as_f32(g)
        wire = b.grad_tx.send(gf, ids=grad_ids) if grad_ids is not None else b.grad_tx.send(gf)
        b.bytes_backward += int(wire.size)
        gx = b.grad_rx.receive(wire, ids=grad_ids) if grad_ids is not None else b.grad_rx.receive(wire)
        return torch.from_numpy(gx).view(g.shape).to(ctx.dtype), None, None


def _send_frame(payload: np.ndarray, ids: Optional[np.ndarray], peer: int, tag: int, group: Any) -> None:
    frame = torch.tensor([payload.size, 0 if ids is None else ids.size], dtype=torch.int64)
    dist.send(frame, peer, group=group, tag=tag)
    if ids is not None and ids.size:
        dist.send(torch.from_numpy(ids.view(np.int64)), peer, group=group, tag=tag)
    dist.send(torch.from_numpy(payload), peer, group=group, tag=tag)


def _recv_frame(peer: int, tag: int, group: Any, max_bytes: int, max_ids: int):
    frame = torch.empty(2, dtype=torch.int64)
    dist.recv(frame, peer, group=group, tag=tag)
    nbytes, nids = int(frame[0]), int(frame[1])
    # As the C++ stage_receiver: a frame that does not fit the buffers is refused.
    if nbytes > max_bytes or nids > max_ids:
        raise error(errc.size_mismatch, f"stage: frame of {nbytes} bytes and {nids} ids exceeds the channel")
    ids = None
    if nids:
        t = torch.empty(nids, dtype=torch.int64)
        dist.recv(t, peer, group=group, tag=tag)
        ids = t.numpy().view(np.uint64)
    payload = torch.empty(nbytes, dtype=torch.uint8)
    dist.recv(payload, peer, group=group, tag=tag)
    return payload.numpy(), ids


class _SendBoundary(torch.autograd.Function):
    """Stage i: forward sends the activation; backward receives and returns its gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, boundary: "StageBoundary", ids: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.boundary, ctx.ids, ctx.shape, ctx.dtype = boundary, ids, x.shape, x.dtype
        wire = boundary.act_tx.send(_as_f32(x), ids=ids) if ids is not None else boundary.act_tx.send(_as_f32(x))
        boundary.bytes_forward += int(wire.size)
        _send_frame(wire, ids, boundary.peer, boundary.tag, boundary.group)
        return x.new_zeros(())

    @staticmethod
    def backward(ctx: Any, _: torch.Tensor):  # type: ignore[override]
        b: StageBoundary = ctx.boundary
        wire, ids = _recv_frame(b.peer, b.tag + 1, b.group, b.max_payload, b.max_ids)
        gx = b.grad_rx.receive(wire, ids=ids) if b.grad_rx.keyed_by_sample else b.grad_rx.receive(wire)
        return torch.from_numpy(gx).view(ctx.shape).to(ctx.dtype), None, None


class _RecvBoundary(torch.autograd.Function):
    """Stage i + 1: forward returns the received activation; backward sends its gradient."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, y: torch.Tensor, boundary: "StageBoundary", ids: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.boundary, ctx.ids = boundary, ids
        return y.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor):  # type: ignore[override]
        b: StageBoundary = ctx.boundary
        ids = ctx.ids if b.grad_tx.keyed_by_sample else None
        gf = _as_f32(g)
        wire = b.grad_tx.send(gf, ids=ids) if ids is not None else b.grad_tx.send(gf)
        b.bytes_backward += int(wire.size)
        _send_frame(wire, ids, b.peer, b.tag + 1, b.group)
        return None, None, None, None


class StageBoundary(torch.nn.Module):
    """One boundary between stage i and stage i + 1.

    Args:
        act: the activation pipeline (e.g. ef21 + top_k, or aq_sgd + quantize).
        grad: the gradient pipeline (e.g. ef + 8-bit quantize).
        shape: the largest activation's shape (aq_sgd: rows x sample_size); sizes the ends.
        seed: the random stream of both directions.
        tensor_id: the activation channel's tensor id; the gradient channel uses tensor_id + 1.
        role: ``None`` (both stages in this process), ``"send"`` (stage i) or ``"recv"``
            (stage i + 1).
        peer: the other stage's rank (roles ``"send"`` and ``"recv"``).
        group: the torch.distributed group of `peer`.
        tag: message tag of the activations; gradients use tag + 1.
    """

    def __init__(
        self,
        act: Any,
        grad: Any,
        shape: Sequence[int],
        *,
        seed: int = 0,
        tensor_id: int = 0,
        role: Optional[str] = None,
        peer: Optional[int] = None,
        group: Any = None,
        tag: int = 0,
    ) -> None:
        super().__init__()
        if role not in (None, "send", "recv"):
            raise error(errc.invalid_argument, f"stage: role must be None, 'send' or 'recv', not {role!r}")
        if role is not None and peer is None:
            raise error(errc.invalid_argument, "stage: roles 'send' and 'recv' need peer=")
        self.shape = tuple(int(s) for s in shape)
        n = int(np.prod(self.shape))
        self.role, self.peer, self.group, self.tag = role, peer, group, tag
        act_ctx = _cp.context(seed=seed, step=0, tensor_id=tensor_id)
        grad_ctx = _cp.context(seed=seed, step=0, tensor_id=tensor_id + 1)
        # Each process holds only its own ends; one process (role None) holds all four.
        self.act_tx = _cp.sender_end(act, n, act_ctx) if role in (None, "send") else None
        self.act_rx = _cp.receiver_end(act, n, act_ctx) if role in (None, "recv") else None
        self.grad_tx = _cp.sender_end(grad, n, grad_ctx) if role in (None, "recv") else None
        self.grad_rx = _cp.receiver_end(grad, n, grad_ctx) if role in (None, "send") else None
        self.max_payload = max(
            int(p.max_payload_bytes(n)) for p in (act, grad, _cp.pipeline(_cp.none(), _cp.identity()))
        )
        self.max_ids = int(self.shape[0]) if self.shape else 0
        self.bytes_forward = 0  #: payload bytes sent forward so far
        self.bytes_backward = 0  #: payload bytes sent backward so far
        self._enabled = True

    @property
    def enabled(self) -> bool:
        """False: activations travel uncompressed (identity payloads), states untouched."""
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._enabled = bool(on)
        for end in (self.act_tx, self.act_rx):
            if end is not None:
                end.enabled = self._enabled

    def forward(self, x: torch.Tensor, ids: Any = None) -> torch.Tensor:
        """Role None: the reconstruction of `x`. Role "send": sends `x` and returns a scalar
        whose ``backward()`` receives the gradient and propagates it into `x`."""
        if self.role == "recv":
            raise error(errc.invalid_argument, "stage: the receiving stage calls receive()")
        ids_np = _ids_array(ids)
        end = self.act_tx
        if end.keyed_by_sample != (ids_np is not None):
            raise error(errc.invalid_argument, "stage: aq_sgd activations need ids=, others must not pass them")
        if self.role is None:
            return _LocalBoundary.apply(x, self, ids_np)
        return _SendBoundary.apply(x, self, ids_np)

    def receive(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Role "recv": the next activation (shape: `shape`, or fewer rows for a partial
        aq_sgd batch); its backward sends the gradient to stage i."""
        if self.role != "recv":
            raise error(errc.invalid_argument, "stage: receive() belongs to role 'recv'")
        wire, ids = _recv_frame(self.peer, self.tag, self.group, self.max_payload, self.max_ids)
        y = self.act_rx.receive(wire, ids=ids) if self.act_rx.keyed_by_sample else self.act_rx.receive(wire)
        rows = y.size // int(np.prod(self.shape[1:])) if len(self.shape) > 1 else y.size
        out = torch.from_numpy(y).view((rows,) + self.shape[1:] if len(self.shape) > 1 else (rows,)).to(dtype)
        self.last_ids = ids
        anchor = torch.zeros((), requires_grad=True)
        return _RecvBoundary.apply(anchor, out, self, ids)

    def state_dict_blobs(self) -> dict:
        """Checkpoint of this process's channel ends (C++ save() of each end)."""
        return {k: getattr(self, k).save() for k in ("act_tx", "act_rx", "grad_tx", "grad_rx") if getattr(self, k) is not None}

    def load_state_dict_blobs(self, blobs: dict) -> None:
        for k, blob in blobs.items():
            getattr(self, k).load(blob)
