# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""What the multi-process tests run on each rank, and the single-process replays they are
compared with. Every rank's data is a function of (rank, step), so the test process can replay
a whole run alone with the binding's encode / decode calls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import commpress as cp
from commpress.torch import CompressionHook, LayerPolicy, StageBoundary

COMPRESS_ALL = LayerPolicy(min_numel=0, compress_1d=True)
SEED = 1234


class Net(torch.nn.Module):
    """Registered in another order than used, so DDP's rebuilt buckets (ordered by when the
    gradients become ready) differ from its first ones (reverse registration order)."""

    def __init__(self) -> None:
        super().__init__()
        self.out = torch.nn.Linear(64, 10)
        self.inp = torch.nn.Linear(20, 32)
        self.hidden = torch.nn.Linear(32, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(F.relu(self.inp(x)))))


def make_net() -> Net:
    torch.manual_seed(0)
    return Net()


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 20, generator=g), torch.randint(0, 10, (16,), generator=g)


def loss_of(model: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    x, y = batch(rank, step)
    return F.cross_entropy(model(x), y)


def pipelines() -> Dict[str, Any]:
    return {
        "identity": cp.pipeline(cp.none(), cp.identity()),
        "loco4": cp.pipeline(
            cp.loco(beta=0.8, storage=cp.store_int8), cp.quantize(bits=4, granularity=cp.scale_granularity.block, group=128)
        ),
        "ef_random_k": cp.pipeline(cp.ef(), cp.random_k(fraction=0.25)),
        "ef_sign": cp.pipeline(cp.ef(), cp.sign(scale=cp.sign_scale.rms)),
    }


def params_of(model: torch.nn.Module) -> Dict[str, bytes]:
    return {n: p.detach().numpy().tobytes() for n, p in model.named_parameters()}


def grads_of(model: torch.nn.Module) -> Dict[str, bytes]:
    return {n: p.grad.numpy().tobytes() for n, p in model.named_parameters()}


# --- DDP scenarios ------------------------------------------------------------------------------


def ddp_identity(rank: int, world: int) -> Dict[str, Any]:
    """One step: the identity hook's gradients, stock DDP's, and this rank's local gradients."""
    hooked = DDP(make_net())
    CompressionHook(hooked, pipelines()["identity"], layer_policy=COMPRESS_ALL, seed=SEED).register(hooked)
    stock = DDP(make_net())
    local = make_net()
    for m in (hooked, stock, local):
        loss_of(m, rank, 0).backward()
    return {"hooked": grads_of(hooked.module), "stock": grads_of(stock.module), "local": grads_of(local)}


def ddp_train(rank: int, world: int, pipe_name: str, collective: str, steps: int) -> Dict[str, Any]:
    """`steps` SGD steps with the hook; final parameters, bucket layouts and statistics."""
    model = DDP(make_net(), bucket_cap_mb=0.004)
    hook = CompressionHook(model, pipelines()[pipe_name], layer_policy=COMPRESS_ALL, seed=SEED, collective=collective)
    hook.register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    buckets: List[List[List[str]]] = []
    for step in range(steps):
        opt.zero_grad()
        loss_of(model, rank, step).backward()
        buckets.append([list(b) for b in hook.buckets])
        opt.step()
    return {
        "params": params_of(model.module),
        "buckets": buckets,
        "ratio": hook.totals.ratio,
        "sent": hook.totals.bytes_sent,
        "compressed": hook.totals.compressed,
    }


def ddp_checkpoint(rank: int, world: int, folder: str, phase: str, steps: int, at: int) -> Dict[str, bytes]:
    """phase "full": `steps` steps, saving a checkpoint after step `at`; "resume": new
    processes that load it and run the remaining steps."""
    model = DDP(make_net(), bucket_cap_mb=0.004)
    hook = CompressionHook(model, pipelines()["loco4"], layer_policy=COMPRESS_ALL, seed=SEED).register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    path = Path(folder) / f"rank{rank}.pt"
    first = 0
    if phase == "resume":
        ck = torch.load(path)
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        hook.load_state_dict(ck["hook"])
        first = at
    for step in range(first, steps):
        opt.zero_grad()
        loss_of(model, rank, step).backward()
        opt.step()
        if phase == "full" and step + 1 == at:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "hook": hook.state_dict()}, path)
    return params_of(model.module)


def ddp_mismatch(rank: int, world: int) -> str:
    """Rank 1 runs 8-bit quantization, the others 4-bit: every rank must fail, quickly."""
    model = DDP(make_net())
    bits = 8 if rank == 1 else 4
    CompressionHook(model, cp.pipeline(cp.ef(), cp.quantize(bits=bits)), layer_policy=COMPRESS_ALL).register(model)
    start = time.monotonic()
    try:
        loss_of(model, rank, 0).backward()
    except Exception as e:  # noqa: BLE001
        return f"{time.monotonic() - start:.1f}s {e}"
    return "no error"


class GaussianGrads(torch.nn.Module):
    """Parameters whose gradient is a fixed Gaussian draw per rank (elias_grads): the loss is
    sum(p * g), so the hook sees exactly those values. Three sizes, so that each tensor's
    payload sits at another offset in every rank's buffer."""

    SHAPES = {"a": (40, 64), "b": (3000,), "c": (64, 80)}

    def __init__(self) -> None:
        super().__init__()
        for name, shape in self.SHAPES.items():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, grads: Dict[str, torch.Tensor]) -> torch.Tensor:
        return sum((p * grads[n]).sum() for n, p in self.named_parameters())


def elias_grads(rank: int) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(500 + rank)
    return {name: torch.randn(shape, generator=g) for name, shape in GaussianGrads.SHAPES.items()}


def elias_pipeline() -> Any:
    return cp.pipeline(cp.ef(), cp.qsgd4(block=512, coding=cp.qsgd_coding.elias))


def ddp_elias(rank: int, world: int, collective: str = "auto") -> Dict[str, Any]:
    """One backward pass of GaussianGrads through the hook with QSGD's Elias body: the averaged
    gradients and the hook's statistics."""
    model = DDP(GaussianGrads())
    hook = CompressionHook(
        model, elias_pipeline(), collective=collective, layer_policy=COMPRESS_ALL, seed=SEED
    ).register(model)
    model(elias_grads(rank)).backward()  # through DDP's forward: its hook runs only then
    s = hook.stats
    return {
        "grads": grads_of(model.module),
        "bytes_sent": s.bytes_sent,
        "payload_bytes": s.payload_bytes,
        "payload_max_bytes": s.payload_max_bytes,
        "compressed": s.compressed,
    }


# --- stage boundary across two processes --------------------------------------------------------


def stage_pair(rank: int, world: int, records: str, name: str) -> Dict[str, bytes]:
    """Rank 0 is stage i (role "send"), rank 1 stage i + 1 (role "recv"); the inputs are the
    C++ reference's, the outputs what each process reconstructs."""
    from reference import CHANNEL_COLS, CHANNEL_ROWS, CHANNEL_STEPS, CHANNELS, floats, load_records

    ref = load_records(Path(records))
    act, grad, keyed = CHANNELS[name]
    shape = (CHANNEL_ROWS, CHANNEL_COLS)
    b = StageBoundary(act, grad, shape, seed=9, tensor_id=100, role="send" if rank == 0 else "recv", peer=1 - rank)
    got: Dict[str, bytes] = {}
    for s in range(CHANNEL_STEPS + 1):
        base = f"channel/{name}/{s}"
        inference = s == CHANNEL_STEPS
        b.enabled = not inference
        if rank == 0:
            x = torch.from_numpy(floats(ref[base + "/act_in"]).copy()).view(shape).requires_grad_(not inference)
            ids = np.frombuffer(ref[base + "/ids"], np.uint64) if keyed else None
            h = b(x, ids)
            if not inference:
                h.backward()
                got[base + "/grad_out"] = x.grad.numpy().tobytes()
        else:
            y = b.receive()
            got[base + "/act_out"] = y.detach().numpy().tobytes()
            if not inference:
                y.backward(torch.from_numpy(floats(ref[base + "/grad_in"]).copy()).view(shape))
    return got


# --- 1-bit Adam over a torch.distributed communicator -------------------------------------------


def onebit(rank: int, world: int, pipe_name: str, freeze: int, steps: int) -> Dict[str, Any]:
    """C++ onebit_adam over TorchCommunicator on a fixed quadratic's gradients."""
    from commpress.torch import TorchCommunicator

    n = 300
    cfg = cp.onebit_adam_config(lr=0.01, freeze_step=freeze)
    opt = cp.onebit_adam(TorchCommunicator(), pipelines()[pipe_name], cfg, n)
    st, err = opt.make_state(), opt.make_feedback_state()
    params = np.linspace(-1, 1, n, dtype=np.float32)
    grads_seen, sent, flags = [], [], []
    for step in range(steps):
        g = ((params - 0.25 * (rank + 1)) * np.float32(rank + 1)).astype(np.float32)
        grads_seen.append(g.tobytes())
        r = opt.step(cp.context(seed=3, step=step, tensor_id=1), st, err, params, g)
        sent.append(r.payload_bytes)
        flags.append(opt.compressing(st))
    return {"params": params.tobytes(), "grads": grads_seen, "sent": sent, "compressing": flags}


ONEBIT_ELIAS_N = 1500


def onebit_elias_pipeline() -> Any:
    return cp.pipeline(cp.ef(), cp.qsgd4(block=64, coding=cp.qsgd_coding.elias))


def onebit_elias_grads(rank: int, step: int) -> np.ndarray:
    return np.random.default_rng(900 + 16 * step + rank).standard_normal(ONEBIT_ELIAS_N).astype(np.float32)


def onebit_elias(rank: int, world: int, steps: int) -> Dict[str, Any]:
    """C++ onebit_adam's gather exchange with QSGD's Elias body, compressing from the first step:
    the averaged momentum and the bytes of every step."""
    from commpress.torch import TorchCommunicator

    cfg = cp.onebit_adam_config(lr=0.01, freeze_step=0)
    opt = cp.onebit_adam(TorchCommunicator(), onebit_elias_pipeline(), cfg, ONEBIT_ELIAS_N)
    st, err = opt.make_state(), opt.make_feedback_state()
    params = np.zeros(ONEBIT_ELIAS_N, np.float32)
    momenta, payload, wire = [], [], []
    for step in range(steps):
        r = opt.step(cp.context(seed=3, step=step, tensor_id=1), st, err, params, onebit_elias_grads(rank, step))
        momenta.append(np.asarray(opt.last_average()).tobytes())
        payload.append(int(r.payload_bytes))
        wire.append(int(r.wire_bytes))
    return {"momenta": momenta, "payload": payload, "wire": wire}


# --- the sharded collective against the C++ one ------------------------------------------------


def sharded_pair(rank: int, world: int, records: str, name: str) -> List[Dict[str, Any]]:
    """reduce_scatter_compressed then all_gather_shard_compressed on the C++ reference's inputs:
    the shard, the result and the bytes each half sent."""
    from commpress.torch import all_gather_shard_compressed, make_sharded_state, reduce_scatter_compressed
    from commpress.torch.sharded import CollectiveStats
    from reference import SHARDED, SHARDED_N, SHARDED_STEPS, floats, load_records

    ref = load_records(Path(records))
    worker, server = SHARDED[name]
    st = make_sharded_state(worker, SHARDED_N, world, rank, server)
    got = []
    for s in range(SHARDED_STEPS):
        x = torch.from_numpy(floats(ref[f"sharded/{name}/{world}/{rank}/{s}/in"]).copy())
        ctx = cp.context(seed=13, step=s, tensor_id=21)
        rs, ag = CollectiveStats(), CollectiveStats()
        shard = reduce_scatter_compressed(x, st, ctx, stats=rs)
        out = all_gather_shard_compressed(shard, st, ctx, stats=ag)
        got.append(
            {
                "shard": shard.numpy().tobytes(),
                "out": out.numpy().tobytes(),
                "wire": [rs.wire_bytes, ag.wire_bytes],
                "worst": [st.reduce_scatter_wire_bytes(), st.all_gather_wire_bytes()],
            }
        )
    return got


def sharded_bad_length(rank: int, world: int) -> str:
    """The sharded functions' length exchange with rank 1 reporting a length past the slot: the
    error every rank raises (each reads the same gathered lengths)."""
    from commpress.torch.sharded import _exchange_lengths

    try:
        _exchange_lengths([100, 200] if rank != 1 else [100, 5000], 1000, None)
    except cp.Error as e:
        return f"{e.code.name}: {e}"
    return "no error"


def ddp_policy(rank: int, world: int) -> List[Dict[str, Any]]:
    """Layer policy, warm-up and the statistics: biases and an excluded weight go plain, the
    first step goes uncompressed, a NaN gradient on rank 0's last step is counted."""
    model = DDP(make_net())
    policy = LayerPolicy(min_numel=100, compress_1d=False, exclude=("out.*",))
    hook = CompressionHook(model, pipelines()["loco4"], layer_policy=policy, warmup_steps=1).register(model)
    if rank == 0:
        poison = {"on": False}

        def nan_on_last_step(g: torch.Tensor) -> torch.Tensor:
            if not poison["on"]:
                return g
            g = g.clone()
            g.view(-1)[0] = float("nan")
            return g

        model.module.hidden.weight.register_hook(nan_on_last_step)
    stats = []
    for step in range(3):
        if rank == 0:
            poison["on"] = step == 2
        model.zero_grad()
        loss_of(model, rank, step).backward()
        s = hook.stats
        stats.append({k: getattr(s, k) for k in ("step", "bytes_sent", "bytes_uncompressed", "nonfinite", "held", "compressed", "plain")})
    return stats


def least_squares_data(rank: int, rows: int = 256, d_in: int = 64, d_out: int = 32):
    """Rank `rank`'s share of one least-squares problem: X W* + noise with W* of rank 8."""
    g = torch.Generator().manual_seed(99)
    w_star = torch.randn(d_in, 8, generator=g) @ torch.randn(8, d_out, generator=g) / 8.0
    gr = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(rows, d_in, generator=gr)
    return x, x @ w_star + 0.01 * torch.randn(rows, d_out, generator=gr)


def powersgd_least_squares(rank: int, world: int, which: str, steps: int, r: int, lr: float) -> Dict[str, Any]:
    """Full-batch SGD on least squares through DDP with `which` = "fp32" (stock DDP), "torch"
    (PyTorch's powerSGD_hook) or "commpress" (CompressionHook with commpress.powersgd), both at
    rank r with error feedback, warm start and compression from step 2 on; the global loss per step."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(64, 32, bias=False))
    hook = None
    if which == "torch":
        state = torch_powersgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=r, start_powerSGD_iter=2, min_compression_rate=0
        )
        model.register_comm_hook(state, torch_powersgd.powerSGD_hook)
    elif which == "commpress":
        hook = CompressionHook(
            model, cp.powersgd(rank=r, start_iter=2), layer_policy=LayerPolicy(min_numel=0), seed=SEED
        ).register(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = least_squares_data(rank)
    losses: List[float] = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        torch.distributed.all_reduce(total)
        losses.append(float(total) / world)
    out: Dict[str, Any] = {"losses": losses}
    if hook is not None:
        out["sent"] = hook.totals.bytes_sent
        out["compressed"] = hook.totals.compressed
        out["state"] = hook.state_dict()
    return out


# --- OnebitAdam, the torch optimizer over the C++ onebit_adam ----------------------------------


def onebit_torch(rank: int, world: int, steps: int, freeze: int, save_at: int, exchange: str = "gather") -> Dict[str, Any]:
    """OnebitAdam on make_net() with (rank, step)-seeded batches; at step `save_at` it saves
    its state_dict, then a second model and optimizer restored from it replay the rest."""
    from commpress.torch import OnebitAdam

    def batch(step: int):
        g = torch.Generator().manual_seed(1000 * step + rank)
        return torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)

    def run(net, opt, first: int) -> List[int]:
        sent = []
        for s in range(first, steps):
            x, y = batch(s)
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            before = opt.bytes_sent
            opt.step()
            sent.append(opt.bytes_sent - before)
            if s + 1 == save_at:
                saved["net"] = {k: v.clone() for k, v in net.state_dict().items()}
                saved["opt"] = opt.state_dict()
        return sent

    cfg = cp.onebit_adam_config(lr=0.01, freeze_step=freeze, variance_floor=1e-8)
    saved: Dict[str, Any] = {}
    net = make_net()
    opt = OnebitAdam(net.parameters(), cfg, seed=3, exchange=exchange)
    sent = run(net, opt, 0)
    final = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy().tobytes()
    net2 = make_net()
    net2.load_state_dict(saved["net"])
    opt2 = OnebitAdam(net2.parameters(), cfg, seed=3, exchange=exchange)
    opt2.load_state_dict(saved["opt"])
    run(net2, opt2, save_at)
    resumed = torch.cat([p.detach().reshape(-1) for p in net2.parameters()]).numpy().tobytes()
    refused = []
    for bad in (lambda: OnebitAdam([torch.zeros(3, dtype=torch.float64, requires_grad=True)], cfg),
                lambda: OnebitAdam(make_net().parameters(), cfg, exchange="ring"),
                lambda: opt2.load_state_dict(dict(saved["opt"], exchange="other")),
                lambda: opt2.load_state_dict(dict(saved["opt"], error=saved["opt"]["error"][:1]))):
        try:
            bad()
            refused.append(False)
        except cp.Error:
            refused.append(True)
    return {"params": final, "resumed": resumed, "sent": sent, "compressing": opt.compressing,
            "refused": refused}
