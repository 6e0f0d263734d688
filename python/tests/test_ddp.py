# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The DDP hook on real gloo processes (2 and 4 ranks), against rank-ordered references,
stock DDP and single-process replays of the same steps."""

from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest
import torch

import commpress as cp
from commpress.torch import tensor_id_of
from commpress.torch.sharded import rank_weight
from dist_util import run_ranks
from workers import SEED, ddp_checkpoint, ddp_identity, ddp_mismatch, ddp_train, loss_of, make_net, pipelines

STEPS = 4


def _f32(b: bytes) -> np.ndarray:
    return np.frombuffer(b, np.float32)


@pytest.fixture(scope="module", params=[2, 4])
def identity_run(request):
    world = request.param
    return world, run_ranks(ddp_identity, world)


def test_identity_hook_is_the_rank_ordered_sum(identity_run):
    world, results = identity_run
    w = np.float32(1) / np.float32(world)
    for name in results[0]["local"]:
        total = _f32(results[0]["local"][name]).copy()
        for r in range(1, world):
            total = (total + _f32(results[r]["local"][name])).astype(np.float32)
        want = (total * w).astype(np.float32)
        for r in range(world):
            assert _f32(results[r]["hooked"][name]).tobytes() == want.tobytes(), (name, r)


def test_identity_hook_matches_stock_ddp_within_reassociation(identity_run):
    world, results = identity_run
    for r in range(world):
        for name, g in results[r]["stock"].items():
            np.testing.assert_allclose(_f32(results[r]["hooked"][name]), _f32(g), rtol=1e-5, atol=1e-7)


def replay(pipe_name: str, collective: str, world: int, steps: int) -> Dict[str, bytes]:
    """The run of ddp_train in this one process: every rank's gradient, compressed with that
    rank's own state, aggregated as the collective does, then the same SGD step."""
    torch.set_num_threads(1)
    pipe = pipelines()[pipe_name]
    model = make_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    states: List[Dict] = [{n: pipe.make_state(p.numel()) for n, p in model.named_parameters()} for _ in range(world)]
    w = rank_weight(world)
    for step in range(steps):
        grads = []
        for r in range(world):
            model.zero_grad()
            loss_of(model, r, step).backward()
            grads.append({n: p.grad.detach().clone().reshape(-1) for n, p in model.named_parameters()})
        for name, p in model.named_parameters():
            ctx = cp.context(seed=SEED, step=step, tensor_id=tensor_id_of(name))
            n = p.numel()
            payloads = []
            for r in range(world):
                out = np.zeros(pipe.max_payload_bytes(n), np.uint8)
                cp.encode(pipe, states[r][name], ctx, grads[r][name].numpy(), out)
                payloads.append(out)
            if collective == "all_gather":
                mean = np.zeros(n, np.float32)
                for r in range(world):
                    cp.decode_accumulate(pipe, payloads[r], mean, w)
            else:  # random_k values summed in rank order, decoded once, times 1/N
                total = cp.random_k_values(pipe.codec, payloads[0]).copy()
                for r in range(1, world):
                    total = (total + cp.random_k_values(pipe.codec, payloads[r])).astype(np.float32)
                mean = np.zeros(n, np.float32)
                cp.random_k_decode_sum(pipe.codec, ctx, total, mean)
                mean = (mean * np.float32(w)).astype(np.float32)
            p.grad = torch.from_numpy(mean).view_as(p).clone()
        opt.step()
    return {n: p.detach().numpy().tobytes() for n, p in model.named_parameters()}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("pipe_name,collective", [("loco4", "all_gather"), ("ef_random_k", "all_reduce")])
def test_lossy_hook_equals_single_process_replay(world, pipe_name, collective):
    results = run_ranks(ddp_train, world, pipe_name, "auto", STEPS)
    want = replay(pipe_name, collective, world, STEPS)
    for r in range(world):
        assert results[r]["params"] == want, f"rank {r}"
        assert results[r]["compressed"] == 6 * STEPS  # every tensor, every step
        assert results[r]["ratio"] > 1.5


@pytest.mark.parametrize("world", [2, 4])
def test_variable_length_payloads_travel_at_their_length(world):
    """QSGD's Elias body is shorter than its worst case: the hook sends each payload at the
    length encode wrote, and every rank decodes the same bytes into the same mean."""
    from workers import GaussianGrads, ddp_elias, elias_grads, elias_pipeline

    results = run_ranks(ddp_elias, world)
    pipe = elias_pipeline()
    names = list(GaussianGrads.SHAPES)
    # Each rank's payloads, encoded here as the hook does (step 0, fresh error-feedback state).
    payloads: List[Dict[str, np.ndarray]] = []
    for r in range(world):
        mine = {}
        for name, g in elias_grads(r).items():
            ctx = cp.context(seed=SEED, step=0, tensor_id=tensor_id_of(name))
            out = np.zeros(pipe.max_payload_bytes(g.numel()), np.uint8)
            res = cp.encode(pipe, pipe.make_state(g.numel()), ctx, g.reshape(-1).numpy(), out)
            mine[name] = out[: res.bytes]
        payloads.append(mine)
    slots = sum(pipe.max_payload_bytes(g.numel()) for g in elias_grads(0).values())
    totals = [sum(p.size for p in mine.values()) for mine in payloads]
    assert len(set(totals)) > 1, totals  # the ranks' buffers differ: the padding is exercised
    for r in range(world):
        s = results[r]
        assert s["compressed"] == len(names)
        assert s["payload_bytes"] == totals[r] < s["payload_max_bytes"] == slots
        # N - 1 copies of the lengths (one int64 per tensor) and of the longest rank's payloads.
        assert s["bytes_sent"] == (world - 1) * (8 * len(names) + max(totals)), (s, totals)
        assert s["bytes_sent"] < (world - 1) * slots
    w = rank_weight(world)
    for name in names:
        mean = np.zeros(elias_grads(0)[name].numel(), np.float32)
        for r in range(world):
            cp.decode_accumulate(pipe, payloads[r][name], mean, w)
        for r in range(world):
            assert results[r]["grads"][name] == mean.tobytes(), (name, r)


def test_bucket_rebuild_keeps_feedback_state():
    world = 2
    results = run_ranks(ddp_train, world, "loco4", "auto", STEPS)
    buckets = results[0]["buckets"]
    # DDP rebuilt its buckets after the first step: other parameters share a bucket now.
    assert buckets[0] != buckets[1], buckets
    assert buckets[1] == buckets[STEPS - 1]
    # ... and the run still equals the replay, which has no buckets: no state was reset.
    assert results[0]["params"] == replay("loco4", "all_gather", world, STEPS)


def test_sharded_identity_is_the_exact_rank_ordered_mean():
    # With identity at both error-feedback points the sharded path returns the rank-ordered
    # mean (C++ sharded_all_reduce_compressed): the same run as the identity all-reduce.
    sharded = run_ranks(ddp_train, 2, "identity", "sharded", 2)
    reduced = run_ranks(ddp_train, 2, "identity", "all_reduce", 2)
    assert sharded[0]["params"] == reduced[0]["params"] == sharded[1]["params"]


@pytest.mark.parametrize("world", [2, 4])
def test_checkpoint_resume_is_bit_identical(tmp_path, world):
    full = run_ranks(ddp_checkpoint, world, str(tmp_path), "full", 6, 3)
    resumed = run_ranks(ddp_checkpoint, world, str(tmp_path), "resume", 6, 3)
    for r in range(world):
        assert resumed[r] == full[r], f"rank {r}"
    # The feedback state mattered: resuming without it diverges.
    for r in range(world):
        ck = torch.load(tmp_path / f"rank{r}.pt")
        ck["hook"]["states"] = {}
        torch.save(ck, tmp_path / f"rank{r}.pt")
    fresh = run_ranks(ddp_checkpoint, world, str(tmp_path), "resume", 6, 3)
    assert fresh[0] != full[0]


@pytest.mark.parametrize("world", [2, 4])
def test_mismatched_codec_fails_every_rank_quickly(world):
    errors = run_ranks(ddp_mismatch, world, timeout=120)
    for r, text in enumerate(errors):
        assert "codec mismatch" in text and "quantize(bits=8" in text, f"rank {r}: {text}"
        assert float(text.split("s ", 1)[0]) < 60.0


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_functions_equal_the_cpp_collective(ref, ref_file, world):
    from reference import SHARDED, SHARDED_STEPS
    from workers import sharded_pair

    for name in SHARDED:
        worker, server = SHARDED[name]
        variable = cp.has_variable_body(worker.codec) or cp.has_variable_body(server.codec)
        results = run_ranks(sharded_pair, world, str(ref_file), name)
        for r in range(world):
            for s in range(SHARDED_STEPS):
                base = f"sharded/{name}/{world}/{r}/{s}"
                got = results[r][s]
                assert got["shard"] == ref[base + "/shard"], base
                assert got["out"] == ref[base + "/out"], base
                # The same bytes on the wire as the C++ collective: its fixed slots, or for
                # variable-length payloads the lengths and blocks of the longest payload.
                assert got["wire"] == list(np.frombuffer(ref[base + "/wire"], "<u8")), base
                if variable:
                    assert got["wire"][0] < got["worst"][0] and got["wire"][1] < got["worst"][1], base
                else:
                    assert got["wire"] == got["worst"], base


def sharded_replay(world: int) -> Dict[str, Any]:
    """The hook's sharded collective on GaussianGrads with QSGD's Elias body (step 0, fresh
    states), in this one process: every rank's chunk payloads, the owners' means and server
    payloads, the decoded means, and the bytes a rank sends: the lengths and blocks as long as
    the longest payload of each half (all the same on every rank), and the fixed slots' figure."""
    from commpress.torch import make_sharded_state
    from workers import GaussianGrads, elias_grads, elias_pipeline

    pipe = elias_pipeline()
    w = rank_weight(world)
    means: Dict[str, bytes] = {}
    sent = slots = 0
    for name in GaussianGrads.SHAPES:
        ctx = cp.context(seed=SEED, step=0, tensor_id=tensor_id_of(name))
        grads = [elias_grads(r)[name].reshape(-1).numpy() for r in range(world)]
        n = grads[0].size
        states = [make_sharded_state(pipe, n, world, r) for r in range(world)]
        lay = states[0].layout
        payloads = [[None] * world for _ in range(world)]  # [sender][chunk]
        for r in range(world):
            for j in range(world):
                off, length = lay.offset(j), lay.length(j)
                out = np.zeros(pipe.max_payload_bytes(length), np.uint8)
                res = cp.encode(pipe, states[r].worker[j], ctx, grads[r][off : off + length], out)
                payloads[r][j] = out[: res.bytes]
        mean = np.zeros(n, np.float32)
        server = []
        for j in range(world):
            off, length = lay.offset(j), lay.length(j)
            shard = np.zeros(length, np.float32)
            for r in range(world):
                cp.decode_accumulate(pipe, payloads[r][j], shard, w)
            out = np.zeros(pipe.max_payload_bytes(length), np.uint8)
            res = cp.encode(pipe, states[j].server, ctx, shard, out)
            server.append(out[: res.bytes])
            cp.decode(pipe.codec, server[j], mean[off : off + length])
        means[name] = mean.tobytes()
        worker_block = max(p.size for row in payloads for p in row)
        server_block = max(p.size for p in server)
        assert len({p.size for row in payloads for p in row}) > 1  # the padding is exercised
        sent += (world - 1) * (8 * world + worker_block) + (world - 1) * (8 + server_block)
        slots += (world - 1) * (states[0].worker_slot + states[0].server_slot)
    return {"grads": means, "bytes_sent": sent, "slots": slots}


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_variable_length_payloads_travel_at_their_length(world):
    """The sharded collective with QSGD's Elias body sends each half's payloads in blocks as long
    as the longest of the call, after their lengths: fewer bytes than the fixed slots, and the
    same mean as the one-process replay on every rank."""
    from workers import ddp_elias

    results = run_ranks(ddp_elias, world, "sharded")
    want = sharded_replay(world)
    for r in range(world):
        assert results[r]["compressed"] == 3
        assert results[r]["bytes_sent"] == want["bytes_sent"] < want["slots"], (results[r], want)
        for name, mean in want["grads"].items():
            assert results[r]["grads"][name] == mean, (name, r)


def test_sharded_bad_peer_length_is_corrupt_on_every_rank():
    from workers import sharded_bad_length

    for r, text in enumerate(run_ranks(sharded_bad_length, 2)):
        assert text.startswith("corrupt") and "rank 1 reports a payload of 5000 bytes" in text, (r, text)


def test_layer_policy_warmup_and_statistics():
    from workers import ddp_policy

    stats = run_ranks(ddp_policy, 2)
    for r in range(2):
        s0, s1, s2 = stats[r]
        assert [s["step"] for s in stats[r]] == [0, 1, 2]
        # Warm-up: all six tensors plain, as DDP's own all-reduce.
        assert s0["compressed"] == 0 and s0["plain"] == 6 and s0["bytes_sent"] == s0["bytes_uncompressed"]
        # After it: inp.weight and hidden.weight compressed; biases and out.* (excluded) plain.
        assert s1["compressed"] == 2 and s1["plain"] == 4 and s1["bytes_sent"] < s1["bytes_uncompressed"]
        assert s1["nonfinite"] == 0 and s1["held"] == 0
    # Rank 0's NaN is counted where it entered; the NaN block's state is held, not poisoned.
    assert stats[0][2]["nonfinite"] == 1 and stats[0][2]["held"] > 0
    assert stats[1][2]["nonfinite"] == 0


def test_auto_collective_gathers_quantized_random_k():
    """random_k sums its values by all-reduce, but quantized values would be decoded and sent as
    fp32: the hook gathers their payloads instead."""
    from commpress.torch.ddp import CompressionHook

    net = torch.nn.Linear(4, 3)
    q4 = cp.quantize(bits=4, group=128, range=cp.quant_range.asymmetric, round=cp.rounding.stochastic)
    plain = cp.pipeline(cp.none(), cp.random_k(fraction=0.1, unbiased=True))
    quantized = cp.pipeline(cp.none(), cp.random_k(fraction=0.1, unbiased=True, value_quantizer=q4))
    assert CompressionHook(net, plain).collective == "all_reduce"
    assert CompressionHook(net, quantized).collective == "all_gather"
    assert CompressionHook(net, quantized, collective="all_reduce").collective == "all_reduce"
