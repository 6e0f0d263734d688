# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""commpress.rotated: the randomized Hadamard rotation before a codec, from Python (C++
rotated<C>; docs/methods.md section 16)."""

from __future__ import annotations

import numpy as np
import pytest

import commpress as cp

F32 = np.float32


def outliers(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(n).astype(F32)
    x[100::200] = 40.0
    return x


def relative_error(codec, x: np.ndarray) -> float:
    y = np.asarray(cp.decompress(codec, cp.compress(codec, x, cp.context(seed=3))))
    return float(np.sum((y.astype(np.float64) - x) ** 2) / np.sum(x.astype(np.float64) ** 2))


def test_rotation_lowers_the_4bit_error_on_outliers():
    x = outliers(1 << 14, 1)
    q = cp.quantize(bits=4, granularity=cp.scale_granularity.block, group=256)
    plain, rotated = relative_error(q, x), relative_error(cp.rotated(q, 8), x)
    assert plain / rotated > 3.0, (plain, rotated)


def test_payload_is_the_inner_codecs_size_with_the_rotation_in_its_header():
    q = cp.quantize(bits=4)
    r = cp.rotated(q, 6)
    assert r == cp.rotated(q, 6) and r != cp.rotated(q, 7)
    assert cp.max_payload_bytes(r, 1000) == cp.max_payload_bytes(q, 1000)
    payload = cp.compress(r, outliers(1000, 2))
    assert payload[7] == 0x16  # kind 1, window 2^6


def test_a_rotated_payload_needs_the_same_rotation():
    x = outliers(1000, 3)
    q = cp.quantize(bits=4)
    payload = cp.compress(cp.rotated(q, 6), x)
    for decoder in (q, cp.rotated(q, 7)):
        with pytest.raises(cp.Error) as e:
            cp.decompress(decoder, payload)
        assert e.value.code == cp.errc.codec_mismatch
    with pytest.raises(cp.Error) as e:
        cp.decompress(cp.rotated(q, 6), cp.compress(q, x))
    assert e.value.code == cp.errc.codec_mismatch


def test_refused_configurations():
    with pytest.raises(cp.Error) as e:
        cp.rotated(cp.top_k(fraction=0.1))
    assert e.value.code == cp.errc.invalid_argument
    assert not cp.can_implement(cp.rotated(cp.sign(), 2), 100)
    assert not cp.can_implement(cp.rotated(cp.sign(), 13), 100)


@pytest.mark.parametrize("feedback", [cp.none(), cp.ef(), cp.loco(beta=0.8)])
def test_pipelines_take_a_rotated_codec(feedback):
    n = 777
    pipe = cp.pipeline(feedback, cp.rotated(cp.sign(), 7))
    state, receiver = pipe.make_state(n), pipe.make_receiver_state(n)
    x = outliers(n, 4)
    y = cp.decompress(pipe, cp.compress(pipe, x, cp.context(step=1), state=state), state=receiver)
    assert np.isfinite(np.asarray(y)).all()
    assert np.asarray(y).shape == (n,)
