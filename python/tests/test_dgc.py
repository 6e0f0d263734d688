# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Deep Gradient Compression through the binding: the pipeline, its state, the warm-up."""

from __future__ import annotations

import numpy as np
import pytest

import commpress as cp


def step(pipe, state, g, t):
    out = np.zeros(pipe.max_payload_bytes(g.size), np.uint8)
    r = cp.encode(pipe, state, cp.context(seed=1, step=t, tensor_id=2), g, out)
    y = np.empty_like(g)
    cp.decode(pipe, pipe.make_receiver_state(g.size), out, y)
    return y, r


def test_momentum_correction_and_masking_with_top_k():
    rng = np.random.default_rng(3)
    pipe = cp.pipeline(cp.dgc(momentum=0.5), cp.top_k(fraction=0.1))
    st = pipe.make_state(200)
    u_prev = np.zeros(200, np.float32)
    v_prev = np.zeros(200, np.float32)
    for t in range(5):
        g = rng.standard_normal(200).astype(np.float32)
        y, _ = step(pipe, st, g, t)
        u_new = np.float32(0.5) * u_prev + g
        h = u_new + v_prev
        sent = y != 0
        assert sent.sum() == 20
        np.testing.assert_array_equal(y[sent], h[sent])  # fp32 values: the sent h exactly
        np.testing.assert_array_equal(st.momentum()[sent], 0)  # masked
        np.testing.assert_array_equal(st.velocity()[sent], 0)
        np.testing.assert_array_equal(st.momentum()[~sent], u_new[~sent])
        np.testing.assert_array_equal(st.velocity()[~sent], h[~sent])
        u_prev, v_prev = st.momentum().copy(), st.velocity().copy()


def test_without_momentum_it_is_error_feedback():
    rng = np.random.default_rng(4)
    dgc = cp.pipeline(cp.dgc(momentum=0.0), cp.quantize(bits=2, group=32))
    ef = cp.pipeline(cp.ef(), cp.quantize(bits=2, group=32))
    sd, se = dgc.make_state(100), ef.make_state(100)
    for t in range(3):
        g = rng.standard_normal(100).astype(np.float32)
        yd, _ = step(dgc, sd, g, t)
        ye, _ = step(ef, se, g, t)
        np.testing.assert_array_equal(yd, ye)
        np.testing.assert_array_equal(sd.velocity(), se.residual())


def test_state_checkpoint_and_warmup():
    pipe = cp.pipeline(cp.dgc(), cp.top_k(fraction=0.25))
    st = pipe.make_state(16)
    step(pipe, st, np.arange(16, dtype=np.float32), 0)
    blob = st.save(2)
    other = pipe.make_state(16)
    other.load(blob, 2)
    np.testing.assert_array_equal(other.momentum(), st.momentum())
    np.testing.assert_array_equal(other.velocity(), st.velocity())
    with pytest.raises(cp.Error) as e:
        pipe.make_state(17).load(blob, 2)
    assert e.value.code == cp.errc.size_mismatch
    w = cp.dgc_warmup()
    assert [w.density(e) for e in range(6)] == pytest.approx([0.25, 0.0625, 0.015625, 0.00390625, 0.001, 0.001])
    assert w.epochs() == 4
    with pytest.raises(cp.Error):
        cp.dgc_warmup(factor=1.5).density(0)
    with pytest.raises(cp.Error):
        step(cp.pipeline(cp.dgc(momentum=1.0), cp.top_k()), pipe.make_state(16), np.ones(16, np.float32), 0)
