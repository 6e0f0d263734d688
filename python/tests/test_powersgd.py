# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""PowerSGD through the binding (commpress.powersgd_round) and through the DDP hook, against
PyTorch's own powerSGD_hook on the same least-squares problem with real gloo processes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import commpress as cp
from dist_util import run_ranks
import workers


def one_rank_step(plan, state, g, step=0):
    rnd = cp.powersgd_round(plan, state, cp.context(seed=1, step=step, tensor_id=3), g)
    rnd.project()  # one rank: the sums are the arrays themselves
    rnd.back_project()
    out = np.empty_like(g)
    return out, rnd.finish(out)


def test_a_rank_r_matrix_comes_back_exactly_and_the_error_is_what_was_left():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((40, 3)) @ rng.standard_normal((3, 25))).astype(np.float32).reshape(-1)
    plan = cp.powersgd_plan(cp.powersgd(rank=3), 40, 25, 1)
    state = plan.make_state()
    out, res = one_rank_step(plan, state, g)
    assert np.max(np.abs(out - g)) < 1e-5 * np.max(np.abs(g))
    assert res.payload_bytes == 4 * (40 + 25) * 3
    np.testing.assert_array_equal(state.residual(), g - out)
    assert state.has_q


def test_state_checkpoints_and_refuses_another_tensor():
    plan = cp.powersgd_plan(cp.powersgd(rank=2), 8, 6, 1)
    a = plan.make_state()
    g = np.linspace(-1, 1, 48, dtype=np.float32)
    one_rank_step(plan, a, g)
    blob = a.save(7)
    b = plan.make_state()
    b.load(blob, 7)
    np.testing.assert_array_equal(a.residual(), b.residual())
    np.testing.assert_array_equal(a.q(), b.q())
    with pytest.raises(cp.Error) as e:
        plan.make_state().load(blob, 8)
    assert e.value.code == cp.errc.stream_mismatch


def test_refuses_wrong_sizes_and_dtypes():
    plan = cp.powersgd_plan(cp.powersgd(rank=1), 4, 4, 1)
    state = plan.make_state()
    with pytest.raises(cp.Error) as e:
        cp.powersgd_round(plan, state, cp.context(), np.zeros(15, np.float32))
    assert e.value.code == cp.errc.size_mismatch
    with pytest.raises(cp.Error) as e:
        cp.powersgd_round(plan, state, cp.context(), np.zeros(16, np.float64))
    assert e.value.code == cp.errc.invalid_argument
    with pytest.raises(cp.Error) as e:
        cp.powersgd_plan(cp.powersgd(rank=0), 4, 4, 1)
    assert e.value.code == cp.errc.invalid_argument


def test_ddp_hook_converges_like_pytorchs_powersgd_hook():
    steps, r, world = 150, 2, 2
    runs = {which: run_ranks(workers.powersgd_least_squares, world, which, steps, r, 2.0) for which in ("fp32", "torch", "commpress")}
    fp32, ours, theirs = (runs[w][0]["losses"] for w in ("fp32", "commpress", "torch"))
    start = fp32[0]
    # Both compressed runs make the same progress: the same algorithm from different random Q.
    assert ours[-1] < 0.05 * start and theirs[-1] < 0.05 * start
    assert 0.67 < ours[-1] / theirs[-1] < 1.5
    # ... and rank 2 of a rank-8 problem is not the uncompressed run.
    assert ours[-1] > 1.05 * fp32[-1]
    # The first two steps are uncompressed in both (start_iter = 2): the same losses as fp32.
    assert ours[:2] == pytest.approx(fp32[:2], rel=1e-6) and theirs[:2] == pytest.approx(fp32[:2], rel=1e-6)
    # Bytes: 2 warm-up steps of the 64 x 32 weight, then (64 + 32) * r floats per step, each
    # through a ring all-reduce, 2 (N - 1) / N * 4 bytes per float.
    per_float = 2 * (world - 1) * 4 // world
    assert runs["commpress"][0]["sent"] == 2 * 64 * 32 * per_float + (steps - 2) * (64 + 32) * r * per_float
