# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The stage boundary equals the C++ channel ends (sender_end / receiver_end) bit for bit,
forward and backward, in one process and across two torch.distributed processes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import commpress as cp
from commpress.torch import StageBoundary
from dist_util import run_ranks
from reference import CHANNEL_COLS, CHANNEL_ROWS, CHANNEL_STEPS, CHANNELS, floats
from workers import stage_pair


@pytest.mark.parametrize("name", sorted(CHANNELS))
def test_local_boundary_equals_cpp_channel_ends(ref, name):
    act, grad, keyed = CHANNELS[name]
    shape = (CHANNEL_ROWS, CHANNEL_COLS)
    b = StageBoundary(act, grad, shape, seed=9, tensor_id=100)
    for s in range(CHANNEL_STEPS + 1):
        base = f"channel/{name}/{s}"
        inference = s == CHANNEL_STEPS
        b.enabled = not inference
        x = torch.from_numpy(floats(ref[base + "/act_in"]).copy()).view(shape).requires_grad_(True)
        ids = torch.from_numpy(np.frombuffer(ref[base + "/ids"], np.int64).copy()) if keyed else None
        with torch.set_grad_enabled(not inference):
            y = b(x, ids)
        assert y.shape == x.shape
        assert y.detach().numpy().tobytes() == ref[base + "/act_out"]
        if inference:
            # Uncompressed inference: the exact input, and no state moved.
            assert torch.equal(y, x.detach())
            continue
        y.backward(torch.from_numpy(floats(ref[base + "/grad_in"]).copy()).view(shape))
        assert x.grad.numpy().tobytes() == ref[base + "/grad_out"]
    blobs = b.state_dict_blobs()
    assert blobs["act_tx"] == ref[f"channel/{name}/act_sender_blob"]
    assert blobs["act_rx"] == ref[f"channel/{name}/act_receiver_blob"]
    assert blobs["grad_tx"] == ref[f"channel/{name}/grad_sender_blob"]
    assert blobs["grad_rx"] == ref[f"channel/{name}/grad_receiver_blob"]
    assert b.bytes_forward > 0 and b.bytes_backward > 0


@pytest.mark.parametrize("name", sorted(CHANNELS))
def test_two_process_boundary_equals_cpp_channel_ends(ref, ref_file, name):
    got0, got1 = run_ranks(stage_pair, 2, str(ref_file), name, timeout=180)
    for s in range(CHANNEL_STEPS + 1):
        base = f"channel/{name}/{s}"
        assert got1[base + "/act_out"] == ref[base + "/act_out"], base
        if s < CHANNEL_STEPS:
            assert got0[base + "/grad_out"] == ref[base + "/grad_out"], base


def test_boundary_argument_errors():
    pipe = cp.pipeline(cp.ef(), cp.quantize(bits=8, group=16))
    b = StageBoundary(pipe, pipe, (2, 16))
    with pytest.raises(cp.Error) as e:
        b(torch.zeros(2, 16), ids=[0, 1])  # ids belong to aq_sgd
    assert e.value.code == cp.errc.invalid_argument
    with pytest.raises(cp.Error):
        StageBoundary(pipe, pipe, (2, 16), role="send")  # no peer
