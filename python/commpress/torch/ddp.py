# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""A DistributedDataParallel communication hook for any commpress pipeline.

The collective follows from the codec, as in the C++ collective layer (``codec_aggregation``,
exposed as :func:`commpress.sum_compatible`):

- ``all_reduce`` for codecs whose payloads sum (identity; random_k, whose ranks share the seed,
  step and tensor id and so keep the same indices): the value arrays are summed in rank order
  (all-gather rounds, as C++ ``all_reduce_options::rank_ordered``) and decoded once, times 1/N;
- ``all_gather`` of the payloads otherwise: every rank decodes every rank's payload in rank
  order into the mean (C++ ``all_gather_compressed``). Each payload travels at the length its
  encode wrote (a variable-length body, QSGD's Elias coding, is shorter than its worst case;
  a fixed-length one fills its slot): a small all-gather of the lengths, then one of the
  payloads back to back, padded to the longest rank's total;
- ``sharded`` on request: reduce-scatter plus all-gather with the two error-feedback points
  (C++ ``sharded_all_reduce_compressed``, see :mod:`commpress.torch.sharded`);
- ``powersgd`` when the hook is given a :class:`commpress.powersgd` instead of a pipeline:
  PowerSGD's two all-reduces (of every compressed tensor's P, then of every Q) with the
  orthogonalisation between them (C++ ``powersgd_round``), each parameter viewed as
  shape[0] x the rest, as PyTorch's ``powerSGD_hook`` does.

Feedback state is kept per parameter name (each parameter is its own tensor, with tensor id
crc32(name)), so DDP's bucket rebuild changes nothing. A layer policy sends small, 1-D and
excluded tensors uncompressed through a plain all-reduce, and the first ``warmup_steps`` steps
go uncompressed. Every call starts with a small all-gather of each rank's configuration, step
and bucket, so a rank configured differently fails on every rank with commpress.Error instead
of hanging in a collective of another size.
"""

# No `from __future__ import annotations`: DDP checks __call__'s annotations as objects.
import hashlib
import zlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .. import _commpress as _cp
from .. import errc, error
from .sharded import CollectiveStats, ShardedState, make_sharded_state, rank_weight
from .sharded import all_gather_shard_compressed, reduce_scatter_compressed

_HEADER = 64  # payload header bytes (docs/wire-format.md)
_CONFIG_BYTES = 512  # the configuration text every rank compares, zero-padded


def tensor_id_of(name: str) -> int:
    """The stable tensor id of a parameter: crc32 of its name (the same on every rank and run)."""
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


@dataclass(frozen=True)
class LayerPolicy:
    """Which parameters are compressed; the others go through a plain fp32 all-reduce. The
    rules are the C++ ``layer_policy``'s (``commpress.layer_policy``), checked in this order."""

    min_numel: int = 1024  #: tensors with fewer elements are sent uncompressed
    compress_1d: bool = False  #: 1-D tensors (biases, norms) are sent uncompressed unless True
    exclude: Tuple[str, ...] = ()  #: glob patterns (``*``, ``?``) of parameter names sent uncompressed
    #: tensors whose fp32 bytes over the pipeline's payload bytes fall below this are sent
    #: uncompressed (PyTorch PowerSGD's ``min_compression_rate``; 0: no such rule)
    min_compression_rate: float = 0.0

    def verdict(self, name: str, p: torch.Tensor, pipe: Any) -> "_cp.layer_verdict":
        """The C++ layer_policy's verdict on parameter `p` compressed with `pipe` (a pipeline
        or a :class:`commpress.powersgd`)."""
        policy = _cp.layer_policy(
            min_elements=self.min_numel,
            compress_1d=self.compress_1d,
            min_compression_rate=self.min_compression_rate,
            exclude=list(self.exclude),
        )
        element = _DTYPES.get(p.dtype, _cp.dtype.f32)
        return policy.decide(name, list(p.shape), element, _payload_bytes(pipe, p))

    def compressed(self, name: str, p: torch.Tensor, pipe: Any) -> bool:
        return self.verdict(name, p, pipe) == _cp.layer_verdict.compress


_DTYPES = {torch.float16: _cp.dtype.f16, torch.bfloat16: _cp.dtype.bf16}


def matrix_shape(p: torch.Tensor) -> Tuple[int, int]:
    """PowerSGD's matrix view of a parameter: shape[0] x the rest (a 1-D tensor is n x 1)."""
    rows = p.shape[0] if p.dim() > 0 else 1
    return rows, (p.numel() // rows if rows else 0)


def _payload_bytes(pipe: Any, p: torch.Tensor) -> int:
    """Bytes one rank contributes for `p`: a payload, or PowerSGD's P and Q."""
    if isinstance(pipe, _cp.powersgd):
        return 4 * pipe.message_floats(*matrix_shape(p))
    return int(_cp.max_payload_bytes(pipe, p.numel()))


@dataclass
class StepStats:
    """What the hook did in one step (or, summed, over a run) on this rank."""

    step: int = 0
    bytes_sent: int = 0  #: bytes this rank sent, under each collective's bandwidth-optimal schedule
    bytes_uncompressed: int = 0  #: what a ring fp32 all-reduce of the same gradients sends
    nonfinite: int = 0  #: NaN/Inf gradient elements seen by the encoders
    held: int = 0  #: feedback state elements kept because their update was non-finite
    compressed: int = 0  #: tensors sent compressed
    plain: int = 0  #: tensors sent uncompressed (layer policy, warm-up)
    #: bytes encode wrote for the payloads of the all_gather and all_reduce collectives
    payload_bytes: int = 0
    #: the same payloads' worst case, max_payload_bytes (equal to payload_bytes unless a body's
    #: length varies, as QSGD's Elias coding does)
    payload_max_bytes: int = 0

    @property
    def ratio(self) -> float:
        """Compression ratio: uncompressed bytes over bytes sent."""
        return self.bytes_uncompressed / self.bytes_sent if self.bytes_sent else 1.0

    @property
    def bytes_saved(self) -> int:
        return self.bytes_uncompressed - self.bytes_sent

    def add(self, other: "StepStats") -> None:
        for f in ("bytes_sent", "bytes_uncompressed", "nonfinite", "held", "compressed", "plain", "payload_bytes",
                  "payload_max_bytes"):
            setattr(self, f, getattr(self, f) + getattr(other, f))


class CompressionHook:
    """``hook.register(ddp)``, or ``ddp.register_comm_hook(None, hook.hook)``, for a pipeline.

    Args:
        model: the module DDP wraps (or the DDP object): names its parameters.
        pipe: a ``commpress.pipeline`` whose receiver keeps no state (feedback none, ef, loco or
            dgc), or a ``commpress.powersgd`` (its collective is ``"powersgd"``).
        process_group: the group DDP uses (default: the world).
        seed: the random stream of every encode (random_k indices, stochastic rounding).
        collective: ``"auto"`` (from the codec), ``"all_reduce"``, ``"all_gather"``,
            ``"sharded"`` or ``"powersgd"``.
        server: the second error-feedback point's pipeline of ``"sharded"`` (default: `pipe`).
        layer_policy: which tensors go uncompressed.
        warmup_steps: steps sent uncompressed before compression starts.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        pipe: Any,
        *,
        process_group: Optional[dist.ProcessGroup] = None,
        seed: int = 0,
        collective: str = "auto",
        server: Any = None,
        layer_policy: LayerPolicy = LayerPolicy(),
        warmup_steps: int = 0,
    ) -> None:
        module = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        self._names: Dict[int, str] = {id(p): n for n, p in module.named_parameters()}
        self._numel: Dict[str, int] = {n: p.numel() for n, p in module.named_parameters()}
        self._matrix: Dict[str, Tuple[int, int]] = {n: matrix_shape(p) for n, p in module.named_parameters()}
        self._plans: Dict[str, Any] = {}
        if isinstance(pipe, _cp.powersgd):
            if collective not in ("auto", "powersgd"):
                raise error(errc.invalid_argument, f"ddp: powersgd runs its own collective, not {collective!r}")
            collective = "powersgd"
        elif not isinstance(pipe.make_receiver_state(0), _cp.no_state):
            raise error(
                errc.invalid_argument,
                "ddp: the pipeline's receiver keeps state (ef21, aq_sgd); data parallelism needs "
                "feedback none, ef or loco",
            )
        if collective == "auto":
            # random_k with quantized values all-reduces its decoded values as fp32, which sends
            # more than gathering the quantized payloads (docs/methods.md 3.5)
            quantized_random_k = isinstance(pipe.codec, _cp.random_k) and pipe.codec.value_quantizer is not None
            collective = "all_reduce" if _cp.sum_compatible(pipe.codec) and not quantized_random_k else "all_gather"
        if collective not in ("all_reduce", "all_gather", "sharded", "powersgd"):
            raise error(errc.invalid_argument, f"ddp: unknown collective {collective!r}")
        if collective == "powersgd" and not isinstance(pipe, _cp.powersgd):
            raise error(errc.invalid_argument, "ddp: the powersgd collective takes a commpress.powersgd")
        if collective == "all_reduce" and not _cp.sum_compatible(pipe.codec):
            raise error(
                errc.invalid_argument,
                f"ddp: {pipe.codec!r} payloads do not sum; use all_gather or sharded",
            )
        self.pipe = pipe
        self.server = pipe if server is None else server
        self.collective = collective
        self.seed = int(seed)
        self.layer_policy = layer_policy
        self.warmup_steps = int(warmup_steps)
        self.group = process_group
        self.step = 0  #: optimizer steps seen (buckets of one backward pass share a step)
        self.stats = StepStats()  #: the last completed step
        self.totals = StepStats()  #: summed over the run
        self._current = StepStats()
        self._states: Dict[str, Any] = {}
        self._config = (
            f"commpress.ddp/1 pipe={pipe!r} server={self.server!r} collective={collective} "
            f"seed={self.seed} warmup={self.warmup_steps} policy={layer_policy!r}"
        )
        self.buckets: List[List[str]] = []  #: parameter names of each bucket of the last step

    # --- public API ----------------------------------------------------------------------------

    def register(self, ddp: torch.nn.parallel.DistributedDataParallel) -> "CompressionHook":
        ddp.register_comm_hook(None, self.hook)
        return self

    def state_dict(self) -> Dict[str, Any]:
        """This rank's hook state: the step and every parameter's feedback state blob."""
        states: Dict[str, Any] = {}
        for name, st in self._states.items():
            tid = tensor_id_of(name)
            states[name] = st.save(tid)
        return {"config": self._config, "step": self.step, "states": states}

    def load_state_dict(self, d: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict`; raises commpress.Error (and changes nothing) for a
        checkpoint of another configuration or a corrupted blob."""
        if d.get("config") != self._config:
            raise error(
                errc.codec_mismatch,
                f"ddp: checkpoint made with {d.get('config')!r}, this hook is {self._config!r}",
            )
        states: Dict[str, Any] = {}
        for name, blob in d["states"].items():
            if name not in self._numel:
                raise error(errc.size_mismatch, f"ddp: checkpoint has state for unknown parameter {name}")
            st = self._make_state(name)
            st.load(blob, tensor_id_of(name))
            states[name] = st
        self._states = states
        self.step = int(d["step"])

    def hook(self, _state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """The communication hook: ``ddp.register_comm_hook(None, hook.hook)``."""
        world = dist.get_world_size(self.group)
        params = bucket.parameters()
        grads = bucket.gradients()
        names = [self._names[id(p)] for p in params]
        if bucket.index() == 0 or not self.buckets:
            self.buckets = []
        self.buckets.append(names)
        self._check_peers(names)

        stats = self._current
        plain: List[Tuple[str, torch.Tensor]] = []
        packed: List[Tuple[str, torch.Tensor]] = []
        for name, p, g in zip(names, params, grads):
            if self.step >= self.warmup_steps and self.layer_policy.compressed(name, p, self.pipe):
                packed.append((name, g))
            else:
                plain.append((name, g))
        for _, g in plain + packed:
            stats.bytes_uncompressed += 2 * (world - 1) * 4 * g.numel() // world
        self._plain_all_reduce(plain, world, stats)
        if packed:
            if self.collective == "all_gather":
                self._all_gather(packed, world, stats)
            elif self.collective == "all_reduce":
                self._all_reduce(packed, world, stats)
            elif self.collective == "powersgd":
                self._powersgd(packed, world, stats)
            else:
                self._sharded(packed, world, stats)

        if bucket.is_last():
            stats.step = self.step
            self.stats = stats
            self.totals.add(stats)
            self.totals.step = self.step
            self._current = StepStats()
            self.step += 1
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    # --- the collectives -----------------------------------------------------------------------

    def _ctx(self, name: str) -> Any:
        return _cp.context(seed=self.seed, step=self.step, tensor_id=tensor_id_of(name))

    def _plan(self, name: str) -> Any:
        plan = self._plans.get(name)
        if plan is None:
            rows, columns = self._matrix[name]
            plan = self._plans[name] = _cp.powersgd_plan(self.pipe, rows, columns, dist.get_world_size(self.group))
        return plan

    def _make_state(self, name: str) -> Any:
        n = self._numel[name]
        if self.collective == "powersgd":
            return self._plan(name).make_state()
        if self.collective == "sharded":
            world = dist.get_world_size(self.group)
            rank = dist.get_rank(self.group)
            return make_sharded_state(self.pipe, n, world, rank, self.server)
        return self.pipe.make_state(n)

    def _state(self, name: str) -> Any:
        st = self._states.get(name)
        if st is None:
            st = self._states[name] = self._make_state(name)
        return st

    def _check_peers(self, names: Sequence[str]) -> None:
        """All-gathers (configuration, step, bucket) and refuses to go on, on every rank, when
        any rank differs: the collectives that follow would otherwise mismatch or hang."""
        text = self._config.encode()[:_CONFIG_BYTES]
        mine = torch.zeros(_CONFIG_BYTES + 16, dtype=torch.uint8)
        mine[: len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        digest = hashlib.sha256("\0".join(names).encode()).digest()[:8]
        tail = self.step.to_bytes(8, "little") + digest
        mine[_CONFIG_BYTES:] = torch.frombuffer(bytearray(tail), dtype=torch.uint8)
        world = dist.get_world_size(self.group)
        everyone = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine, group=self.group)
        me = dist.get_rank(self.group)
        for r, theirs in enumerate(everyone):
            if torch.equal(theirs, mine):
                continue
            other = bytes(theirs[:_CONFIG_BYTES].tolist()).rstrip(b"\0").decode(errors="replace")
            if other != self._config:
                raise error(
                    errc.codec_mismatch,
                    f"ddp: rank {r} is configured as [{other}] but rank {me} as [{self._config}]",
                )
            step = int.from_bytes(bytes(theirs[_CONFIG_BYTES : _CONFIG_BYTES + 8].tolist()), "little")
            if step != self.step:
                raise error(errc.stream_mismatch, f"ddp: rank {r} is at step {step}, rank {me} at {self.step}")
            raise error(errc.size_mismatch, f"ddp: rank {r} reduces another bucket of parameters than rank {me}")

    def _plain_all_reduce(self, items: List[Tuple[str, torch.Tensor]], world: int, stats: StepStats) -> None:
        """Uncompressed, as DDP's default hook: divide by N, then all-reduce."""
        if not items:
            return
        flat = torch.cat([g.reshape(-1) for _, g in items]).div_(world)
        dist.all_reduce(flat, group=self.group)
        off = 0
        for _, g in items:
            g.copy_(flat[off : off + g.numel()].view_as(g))
            off += g.numel()
        stats.plain += len(items)
        stats.bytes_sent += 2 * (world - 1) * flat.element_size() * flat.numel() // world

    def _encode_all(
        self, items: List[Tuple[str, torch.Tensor]], stats: StepStats
    ) -> Tuple[torch.Tensor, List[int], List[int]]:
        """Every tensor's payload, back to back in one buffer, each as long as its encode wrote;
        those lengths; and each tensor's slot, max_payload_bytes. Encode needs a whole slot to
        write into; each payload starts where the previous one ended, so every slot still fits
        inside the sum of the slots."""
        slots = [int(self.pipe.max_payload_bytes(g.numel())) for _, g in items]
        send = torch.zeros(sum(slots), dtype=torch.uint8)
        lengths: List[int] = []
        off = 0
        for (name, g), slot in zip(items, slots):
            r = _cp.encode(self.pipe, self._state(name), self._ctx(name), g, send[off : off + slot])
            stats.nonfinite += r.nonfinite
            stats.held += r.held
            lengths.append(int(r.bytes))
            off += int(r.bytes)
        stats.compressed += len(items)
        stats.payload_bytes += off
        stats.payload_max_bytes += sum(slots)
        return send[:off], lengths, slots

    def _all_gather(self, items: List[Tuple[str, torch.Tensor]], world: int, stats: StepStats) -> None:
        send, lengths, slots = self._encode_all(items, stats)
        # Every rank's payload lengths first: all_gather needs one size, and the receivers need
        # each payload's offset. Fixed-length codecs take the same path (their lengths are the
        # slots), so the hook has one wire layout.
        mine = torch.tensor(lengths, dtype=torch.int64)
        theirs = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(theirs, mine, group=self.group)
        for r, ls in enumerate(theirs):
            if any(not _HEADER <= n <= slot for n, slot in zip(ls.tolist(), slots)):
                raise error(errc.corrupt, f"ddp: rank {r} reports payload lengths {ls.tolist()}, slots are {slots}")
        width = max(int(ls.sum()) for ls in theirs)
        padded = torch.zeros(width, dtype=torch.uint8)
        padded[: send.numel()] = send
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=self.group)
        offsets = [[0] + torch.cumsum(ls, 0).tolist() for ls in theirs]
        w = rank_weight(world)
        for i, (_, g) in enumerate(items):
            mean = torch.zeros(g.numel(), dtype=torch.float32)
            for r in range(world):  # rank order: every rank adds the same bytes the same way
                _cp.decode_accumulate(self.pipe, gathered[r][offsets[r][i] : offsets[r][i + 1]], mean, w)
            g.copy_(mean.view_as(g))
        stats.bytes_sent += (world - 1) * (mine.element_size() * mine.numel() + width)

    def _all_reduce(self, items: List[Tuple[str, torch.Tensor]], world: int, stats: StepStats) -> None:
        send, lengths, _ = self._encode_all(items, stats)
        codec = self.pipe.codec
        is_random_k = isinstance(codec, _cp.random_k)
        values: List[torch.Tensor] = []
        off = 0
        for length in lengths:
            payload = send[off : off + length]
            if is_random_k:
                values.append(torch.from_numpy(_cp.random_k_values(codec, payload)))
            else:  # identity: the body is the tensor as fp32 (docs/wire-format.md)
                values.append(payload[_HEADER:].view(torch.float32))
            off += length
        flat = torch.cat(values) if values else torch.zeros(0)
        # Rank order, x_0 + x_1 + ... + x_{N-1}: the same bits on every rank and every run.
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat, group=self.group)
        total = gathered[0].clone()
        for r in range(1, world):
            total += gathered[r]
        w = rank_weight(world)
        off = 0
        for (name, g), v in zip(items, values):
            part = total[off : off + v.numel()]
            if is_random_k:
                out = torch.empty(g.numel(), dtype=torch.float32)
                _cp.random_k_decode_sum(codec, self._ctx(name), part, out)
            else:
                out = part.clone()
            if w != 1.0:
                out.mul_(w)
            g.copy_(out.view_as(g))
            off += v.numel()
        stats.bytes_sent += (world - 1) * 4 * flat.numel()

    def _powersgd(self, items: List[Tuple[str, torch.Tensor]], world: int, stats: StepStats) -> None:
        """PowerSGD: every tensor's P in one all-reduce, then every Q in another, as PyTorch's
        hook batches them; each round orthogonalises its summed P in between."""
        rounds = [
            _cp.powersgd_round(self._plan(name), self._state(name), self._ctx(name), g.reshape(-1).float())
            for name, g in items
        ]
        for phase in ("project", "back_project"):
            parts = [torch.from_numpy(getattr(r, phase)()) for r in rounds]
            flat = torch.cat(parts) if parts else torch.zeros(0)
            if flat.numel():
                dist.all_reduce(flat, group=self.group)
                stats.bytes_sent += 2 * (world - 1) * 4 * flat.numel() // world
            off = 0
            for part in parts:
                part.copy_(flat[off : off + part.numel()])
                off += part.numel()
        for (_, g), r in zip(items, rounds):
            out = torch.empty(g.numel(), dtype=torch.float32)
            res = r.finish(out)
            stats.nonfinite += res.nonfinite
            stats.held += res.held
            g.copy_(out.view_as(g))
        stats.compressed += len(items)

    def _sharded(self, items: List[Tuple[str, torch.Tensor]], world: int, stats: StepStats) -> None:
        cs = CollectiveStats()
        for name, g in items:
            st: ShardedState = self._state(name)
            ctx = self._ctx(name)
            shard = reduce_scatter_compressed(g, st, ctx, self.group, stats=cs)
            full = all_gather_shard_compressed(shard, st, ctx, self.group, stats=cs)
            g.copy_(full.view_as(g))
        stats.compressed += len(items)
        stats.nonfinite += cs.nonfinite
        stats.held += cs.held
        stats.bytes_sent += cs.wire_bytes
