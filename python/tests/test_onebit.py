# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""C++ onebit_adam through the binding, over TorchCommunicator on 2 gloo processes."""

from __future__ import annotations

import numpy as np
import pytest

import commpress as cp
from dist_util import run_ranks
from commpress.torch.sharded import rank_weight
from workers import make_net, onebit, onebit_elias, onebit_elias_grads, onebit_elias_pipeline, onebit_torch


def test_warmup_is_adamw_on_the_rank_ordered_mean():
    steps, world = 3, 2
    res = run_ranks(onebit, world, "ef_sign", 100, steps)
    assert res[0]["params"] == res[1]["params"]
    # Replay: mean = 0 + w g_0 + w g_1 (decode_accumulate of identity payloads), then adamw.
    cfg = cp.onebit_adam_config(lr=0.01, freeze_step=100)
    adamw = cfg.warmup_optimizer()
    st = adamw.make_state(300)
    params = np.linspace(-1, 1, 300, dtype=np.float32)
    w = np.float32(1) / np.float32(world)
    for s in range(steps):
        mean = np.zeros(300, np.float32)
        for r in range(world):
            mean = (mean + w * np.frombuffer(res[r]["grads"][s], np.float32)).astype(np.float32)
        adamw.step(st, params, mean)
    assert params.tobytes() == res[0]["params"]


def test_compression_stage_sends_one_bit():
    res = run_ranks(onebit, 2, "ef_sign", 2, 5)
    assert res[0]["params"] == res[1]["params"]
    # compressing() after each step: the state's step count reaches freeze_step after step 1.
    assert res[0]["compressing"] == [False, True, True, True, True]
    assert res[0]["sent"][1] == res[0]["sent"][0] and res[0]["sent"][2] == res[0]["sent"][4]
    warm, compressed = res[0]["sent"][0], res[0]["sent"][-1]
    assert warm == 64 + 4 * 300 and compressed == 64 + 4 + (300 + 7) // 8
    with pytest.raises(cp.Error):
        cp.onebit_adam(object(), cp.pipeline(cp.ef21(), cp.sign()), cp.onebit_adam_config(), 10)


def test_torch_optimizer_agrees_across_ranks_and_resumes():
    steps, freeze, save_at = 8, 3, 5
    res = run_ranks(onebit_torch, 2, steps, freeze, save_at)
    assert res[0]["params"] == res[1]["params"]
    assert res[0]["compressing"]
    # A run restored from the state_dict at step 5 ends with the same bits.
    assert res[0]["resumed"] == res[0]["params"] and res[1]["resumed"] == res[1]["params"]
    # Warm-up steps send fp32 gradients (N - 1 = 1 payload), compressed ones a sign payload.
    n = sum(p.numel() for p in make_net().parameters())
    warm, compressed = res[0]["sent"][0], res[0]["sent"][-1]
    assert warm == 64 + 4 * n and compressed == 64 + 4 + (n + 7) // 8
    assert res[0]["sent"][:freeze] == [warm] * freeze and res[0]["sent"][freeze:] == [compressed] * (steps - freeze)
    assert res[0]["refused"] == [True] * 4


def test_torch_optimizer_sharded_exchange():
    """DeepSpeed's two-error exchange: all ranks agree, a restored run continues bit for bit,
    and the compressed steps send about two payloads per rank instead of N - 1."""
    steps, freeze, save_at, world = 7, 2, 4, 3
    res = run_ranks(onebit_torch, world, steps, freeze, save_at, "sharded")
    gathered = run_ranks(onebit_torch, world, steps, freeze, save_at, "gather")
    assert res[0]["params"] == res[1]["params"] == res[2]["params"]
    assert all(r["resumed"] == r["params"] for r in res)
    assert res[0]["params"] != gathered[0]["params"]  # a second compression: other bits
    assert res[0]["refused"] == [True] * 4
    n = sum(p.numel() for p in make_net().parameters())
    warm = res[0]["sent"][0]
    assert warm == gathered[0]["sent"][0] == (world - 1) * (64 + 4 * n)
    sharded, gather = res[0]["sent"][-1], gathered[0]["sent"][-1]
    assert gather == (world - 1) * (64 + 4 + (n + 7) // 8)
    # Each rank sends a worker slot to each of the N - 1 peers, then its server slot to each:
    # slots are the largest sign payload over the chunk lengths (C++ sharded_plan).
    pipe = cp.pipeline(cp.ef(), cp.sign(scale=cp.sign_scale.rms))
    lay = cp.chunk_layout(n, world, int(cp.chunk_alignment(pipe.codec)))
    slot = max(int(pipe.max_payload_bytes(lay.length(j))) for j in range(world))
    assert sharded == 2 * (world - 1) * slot
    assert sharded < gather and sharded < 2 * (64 + 4 + (n + 7) // 8)


@pytest.mark.parametrize("world", [2, 4])
def test_gather_exchange_sends_elias_payloads_at_their_length(world):
    """QSGD's Elias body through the gather exchange: every rank ends each step with the momentum
    of the one-process replay in rank order, and sends its payload's length and a block as long
    as the longest payload of the step instead of the worst-case slot."""
    steps = 3
    res = run_ranks(onebit_elias, world, steps)
    pipe = onebit_elias_pipeline()
    n = len(onebit_elias_grads(0, 0))
    cfg = cp.onebit_adam_config(lr=0.01, freeze_step=0)
    beta1 = np.float32(cfg.beta1)
    slot = int(pipe.max_payload_bytes(n))
    states = [pipe.make_state(n) for _ in range(world)]
    m = np.zeros(n, np.float32)
    w = rank_weight(world)
    differ = False  # whether the ranks' payload lengths differed in some step
    for step in range(steps):
        avg = np.zeros(n, np.float32)
        lengths = []
        for r in range(world):
            local = (beta1 * m + (np.float32(1) - beta1) * onebit_elias_grads(r, step)).astype(np.float32)
            out = np.zeros(slot, np.uint8)
            enc = cp.encode(pipe, states[r], cp.context(seed=3, step=step, tensor_id=1), local, out)
            lengths.append(int(enc.bytes))
            cp.decode_accumulate(pipe, out[: enc.bytes], avg, w)
        m = avg
        differ = differ or len(set(lengths)) > 1
        for r in range(world):
            assert res[r]["momenta"][step] == m.tobytes(), (step, r)
            assert res[r]["payload"][step] == lengths[r]
            assert res[r]["wire"][step] == (world - 1) * (8 + max(lengths)) < (world - 1) * slot
    assert differ  # the padding is exercised
