# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""commpress.layer_policy (C++ layer_policy) and the DDP hook's LayerPolicy, which asks it."""

from __future__ import annotations

import torch

import commpress as cp
from commpress.torch import LayerPolicy

V = cp.layer_verdict
Q4 = cp.pipeline(cp.ef(), cp.quantize(bits=4, group=128))


def payload(n: int) -> int:
    return cp.max_payload_bytes(Q4, n)


def test_the_rules_in_their_order():
    p = cp.layer_policy()
    assert (p.min_elements, p.compress_1d, p.min_compression_rate, p.exclude) == (1024, False, 0.0, [])
    f32 = cp.dtype.f32
    assert p.decide("conv.weight", [64, 64, 3, 3], f32, payload(36864)) == V.compress
    assert p.decide("conv.bias", [64], f32, payload(64)) == V.too_small
    assert p.decide("fc.bias", [4096], f32, payload(4096)) == V.one_dimensional
    p = cp.layer_policy(min_elements=0, compress_1d=True, exclude=["embed*", "*.norm?.weight"])
    assert p.decide("embed.weight", [1000, 64], f32, payload(64000)) == V.excluded
    assert p.decide("blocks.1.norm2.weight", [64], f32, payload(64)) == V.excluded
    assert p.decide("blocks.1.norm12.weight", [64], f32, payload(64)) == V.compress


def test_min_compression_rate_compares_uncompressed_and_payload_bytes():
    n = 256 * 256
    rate = 4 * n / payload(n)
    assert cp.layer_policy(min_compression_rate=rate).decide("w", [256, 256], cp.dtype.f32, payload(n)) == V.compress
    low = cp.layer_policy(min_compression_rate=rate * 1.001)
    assert low.decide("w", [256, 256], cp.dtype.f32, payload(n)) == V.low_compression_rate
    # bf16 tensors have half the uncompressed bytes
    half = cp.layer_policy(min_compression_rate=rate / 2 * 1.001)
    assert half.decide("w", [256, 256], cp.dtype.f32, payload(n)) == V.compress
    assert half.decide("w", [256, 256], cp.dtype.bf16, payload(n)) == V.low_compression_rate


def test_the_hooks_policy_asks_the_library():
    policy = LayerPolicy(min_numel=100, exclude=("out.*",), min_compression_rate=4.0)
    w = torch.nn.Parameter(torch.zeros(64, 32))
    assert policy.verdict("hidden.weight", w, Q4) == V.compress
    assert policy.verdict("out.weight", w, Q4) == V.excluded
    assert policy.verdict("hidden.bias", torch.nn.Parameter(torch.zeros(400)), Q4) == V.one_dimensional
    identity = cp.pipeline(cp.none(), cp.identity())  # fp32 plus a header: a rate below 1
    assert policy.verdict("hidden.weight", w, identity) == V.low_compression_rate
    assert not policy.compressed("hidden.weight", w, identity)
