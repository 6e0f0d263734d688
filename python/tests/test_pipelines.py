# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Feedback pipelines through the binding equal the C++ library step by step: payloads, the
receiver's outputs, and the sender and receiver state blobs."""

from __future__ import annotations

import numpy as np
import pytest

import commpress as cp
from reference import AQ_PIPELINES, AQ_ROW, AQ_ROWS, AQ_SAMPLES, PIPELINE_N, PIPELINE_STEPS, PIPELINE_TENSOR
from reference import PIPELINES, floats


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_same_as_cpp(ref, name):
    pipe = PIPELINES[name]
    n = PIPELINE_N
    tx, rx = pipe.make_state(n), pipe.make_receiver_state(n)
    out = np.zeros(pipe.max_payload_bytes(n), np.uint8)
    y = np.zeros(n, np.float32)
    for s in range(PIPELINE_STEPS):
        base = f"pipeline/{name}/{s}"
        x = floats(ref[base + "/input"])
        ctx = cp.context(seed=5, step=s, tensor_id=PIPELINE_TENSOR)
        r = cp.encode(pipe, tx, ctx, x, out)
        assert out[: r.bytes].tobytes() == ref[base + "/payload"]
        cp.decode(pipe, rx, out[: r.bytes], y)
        assert y.tobytes() == ref[base + "/out"]
        assert tx.save(PIPELINE_TENSOR) == ref[base + "/sender_state"]
        assert rx.save(PIPELINE_TENSOR) == ref[base + "/receiver_state"]
    # A state restored from its blob is equal and continues identically.
    again = pipe.make_state(n)
    again.load(tx.save(PIPELINE_TENSOR), PIPELINE_TENSOR)
    assert again == tx


@pytest.mark.parametrize("name", sorted(AQ_PIPELINES))
def test_aq_sgd_same_as_cpp(ref, name):
    pipe = AQ_PIPELINES[name]
    n = AQ_ROWS * AQ_ROW
    tx, rx = pipe.make_state(n), pipe.make_receiver_state(n)
    out = np.zeros(pipe.max_payload_bytes(n), np.uint8)
    y = np.zeros(n, np.float32)
    for s in range(PIPELINE_STEPS):
        base = f"pipeline/{name}/{s}"
        ids = np.array([(s * 3 + r) % AQ_SAMPLES for r in range(AQ_ROWS)], np.uint64)
        ctx = cp.context(seed=5, step=s, tensor_id=PIPELINE_TENSOR)
        r = cp.encode(pipe, tx, ctx, floats(ref[base + "/input"]), out, ids=ids)
        assert out[: r.bytes].tobytes() == ref[base + "/payload"]
        cp.decode(pipe, rx, out[: r.bytes], y, ids=ids.astype(np.int64))  # int64 ids (torch) too
        assert y.tobytes() == ref[base + "/out"]
        assert tx.save(PIPELINE_TENSOR) == ref[base + "/sender_state"]
        assert rx.save(PIPELINE_TENSOR) == ref[base + "/receiver_state"]
    assert rx.sample(0).shape == (AQ_ROW,)


def test_ef21_server_mirror_accumulates():
    pipe = cp.pipeline(cp.ef21(), cp.top_k(fraction=0.5))
    n = 64
    server = pipe.make_receiver_state(n)
    x = np.linspace(-1, 1, n, dtype=np.float32)
    total = np.zeros(n, np.float32)
    for r in range(2):
        st = pipe.make_state(n)
        out = np.zeros(pipe.max_payload_bytes(n), np.uint8)
        cp.encode(pipe, st, cp.context(tensor_id=r), x * (r + 1), out)
        cp.decode_accumulate(pipe, server, out, 0.5)
        dec = np.zeros(n, np.float32)
        cp.decode(pipe.codec, out, dec)
        total = (total + np.float32(0.5) * dec).astype(np.float32)
    assert server.mirror().tobytes() == total.tobytes()


def test_states_and_results_are_inspectable():
    pipe = cp.pipeline(cp.ef(), cp.sign())
    st = pipe.make_state(10)
    assert isinstance(st, cp.ef_state) and st.size == 10
    out = np.zeros(pipe.max_payload_bytes(10), np.uint8)
    r = cp.encode(pipe, st, cp.context(), np.arange(10, dtype=np.float32), out)
    assert r.bytes == out.size and r.nonfinite == 0 and r.held == 0
    assert np.abs(st.residual()).sum() > 0  # a view of the C++ residual
    loco = cp.pipeline(cp.loco(storage=cp.store_int4), cp.quantize()).make_state(300)
    assert isinstance(loco, cp.loco_state_int4) and loco.error().shape == (300,)
    assert cp.loco(storage=cp.store_bf16).storage == cp.storage.bf16
