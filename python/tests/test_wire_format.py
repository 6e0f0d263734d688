# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""docs/wire-format.md is complete: a decoder written from it alone (wire_decoder.py) decodes
payloads of every codec configuration (reference.CODECS: each codec's examples(), and the rotated
codecs') to the library's bits, refuses what the library refuses with the same error, and, for quantize,
re-encodes the library's bytes from the document's encoding rules (stochastic rounding and
the random words included)."""

from __future__ import annotations

import numpy as np
import pytest

import commpress as cp
import wire_decoder as wire
from reference import CODECS

F32 = np.float32
MAX = np.finfo(F32).max


def inputs(n: int, seed: int):
    """(name, x, finite) for the tensors every configuration is run on."""
    rng = np.random.default_rng(seed)
    smooth = rng.standard_normal(n).astype(F32)
    heavy = (rng.standard_normal(n) / (0.01 + rng.random(n) ** 2)).astype(F32)
    cases = [
        ("smooth", smooth, True),
        ("heavy", heavy, True),
        ("zeros", np.zeros(n, F32), True),
        ("constant", np.full(n, F32(-0.625)), True),
    ]
    tiny = (rng.standard_normal(n) * 1e-39).astype(F32)  # subnormal magnitudes
    cases.append(("subnormal", tiny, True))
    near_max = (rng.uniform(-1, 1, n) * MAX).astype(F32)
    if n > 2:
        near_max[0], near_max[1] = MAX, -MAX  # every group's range may overflow
    cases.append(("near_max", near_max, True))
    one_sided = (rng.uniform(0.9, 1, n) * MAX).astype(F32)
    cases.append(("near_max_one_sided", one_sided, True))
    special = heavy.copy()
    for j, v in enumerate([np.nan, np.inf, -np.inf, -0.0, 1e-40, MAX]):
        if n:
            special[(j * 977 + 13) % n] = v
    cases.append(("special", special, False))
    return cases


SIZES = [0, 1, 7, 8, 33, 100, 1000, 4099]
CONTEXTS = [
    cp.context(seed=42, step=3, tensor_id=7),
    cp.context(seed=2**40 + 5, step=2**33 + 1, tensor_id=2**31 + 9),
    cp.context(seed=0, step=0, tensor_id=0),
]


def bits(x) -> np.ndarray:
    return np.asarray(x, F32).view(np.uint32)


def payloads(codec, i):
    """(description, input, whether it is finite, payload) for every size, input, input dtype
    (f32, f16) and context."""
    for n in SIZES:
        if not cp.can_implement(codec, n):
            continue
        for name, x32, finite in inputs(n, seed=n + 17 * i):
            with np.errstate(over="ignore"):  # f16 inputs: values past 65504 become infinities
                x16 = x32.astype(np.float16)
            for x in (x32, x16):
                for ctx in CONTEXTS:
                    yield f"{codec!r} n={n} {name} {x.dtype}", x, finite and np.isfinite(x).all(), np.asarray(
                        cp.compress(codec, x, ctx)
                    )


@pytest.mark.parametrize("i", range(len(CODECS)))
def test_independent_decoder_matches_the_library(i):
    codec = CODECS[i]
    checked = 0
    for what, x, finite, payload in payloads(codec, i):
        ours = wire.decode(payload.tobytes())
        lib = np.asarray(cp.decompress(codec, payload))
        assert ours.shape == lib.shape
        bad = np.nonzero(bits(ours) != bits(lib))[0]
        assert bad.size == 0, (
            f"{what}: element {bad[0]}: document {ours[bad[0]]!r} ({bits(ours)[bad[0]]:#x}), "
            f"library {lib[bad[0]]!r} ({bits(lib)[bad[0]]:#x})"
        )
        if finite:  # no finite input decodes to a non-finite value
            assert np.isfinite(lib).all(), f"{what}: non-finite output"
        checked += 1
    assert checked > 0


QUANTIZE = [i for i, c in enumerate(CODECS) if isinstance(c, cp.quantize)]


@pytest.mark.parametrize("i", QUANTIZE)
def test_quantize_bytes_follow_the_encoding_rules(i):
    codec = CODECS[i]
    for n in SIZES:
        if not cp.can_implement(codec, n):
            continue
        for name, x, finite in inputs(n, seed=3 * n + i):
            if not finite:
                continue
            for ctx in CONTEXTS:
                payload = np.asarray(cp.compress(codec, x, ctx)).tobytes()
                header = wire.read_header(payload)
                assert (header.seed, header.step, header.tensor_id) == (ctx.seed, ctx.step, ctx.tensor_id)
                want = wire.encode_quantize_body(header.params, x, header)
                assert payload[64:] == want, f"{codec!r} n={n} {name}: body differs"


# random_k with quantized kept values: those of CODECS, and more ranges, roundings and groups.
RANDOM_K_QUANTIZED = [c for c in CODECS if isinstance(c, cp.random_k) and c.value_quantizer is not None] + [
    cp.random_k(
        fraction=f,
        unbiased=unbiased,
        value_quantizer=cp.quantize(
            bits=b,
            granularity=cp.scale_granularity.block if group else cp.scale_granularity.tensor,
            group=group,
            range=rng,
            round=rnd,
        ),
    )
    for f, unbiased, b, group, rng, rnd in [
        (0.1, False, 4, 16, cp.quant_range.symmetric, cp.rounding.stochastic),
        (0.3, True, 8, 0, cp.quant_range.asymmetric, cp.rounding.nearest),
        (1.0, False, 1, 64, cp.quant_range.asymmetric, cp.rounding.stochastic),
    ]
]


@pytest.mark.parametrize("i", range(len(RANDOM_K_QUANTIZED)))
def test_random_k_quantized_bytes_follow_the_encoding_rules(i):
    """The body is the quantize body of the kept values, in stratum order, its stochastic
    rounding drawn at stream index 2^63 + j; the decoder reads every such payload back."""
    codec = RANDOM_K_QUANTIZED[i]
    checked = 0
    for n in SIZES:
        if not cp.can_implement(codec, n):
            continue
        for name, x, finite in inputs(n, seed=5 * n + i):
            for ctx in CONTEXTS:
                payload = np.asarray(cp.compress(codec, x, ctx)).tobytes()
                lib = np.asarray(cp.decompress(codec, payload))
                assert (bits(wire.decode(payload)) == bits(lib)).all(), f"{codec!r} n={n} {name}: decoded"
                if not finite:
                    continue
                header = wire.read_header(payload)
                assert header.params[2] == codec.value_quantizer.bits
                idx, _ = wire.random_k_selection(header.params, header)
                quantizer = wire.top_k_value_quantizer(header.params)
                want = wire.encode_quantize_body(quantizer, x[idx], header, wire.RANDOM_K_ROUNDING_INDEX)
                assert payload[64:] == want, f"{codec!r} n={n} {name}: body differs"
                checked += 1
    assert checked > 0
    # Without the quantizer the header's params differ only in bytes 2 and 3.
    plain = cp.random_k(fraction=codec.fraction, count=codec.count, unbiased=codec.unbiased)
    x = inputs(100, 1)[0][1]
    a = wire.read_header(np.asarray(cp.compress(codec, x, CONTEXTS[0])).tobytes()).params
    b = wire.read_header(np.asarray(cp.compress(plain, x, CONTEXTS[0])).tobytes()).params
    assert a[:2] == b[:2] and a[4:] == b[4:] and b[2:4] == bytes(2)


def test_refusals_follow_the_validation_order():
    x = np.random.default_rng(1).standard_normal(300).astype(F32)
    checked = 0
    for codec in CODECS:
        if not cp.can_implement(codec, x.size):
            continue
        good = np.asarray(cp.compress(codec, x, CONTEXTS[0])).tobytes()
        variants = [good[:63], good[:-1] if len(good) > 64 else good[:63]]
        for pos in (0, 4, 5, 6, 7, 9, 20, 45, 61, len(good) - 1):
            if pos < len(good):
                b = bytearray(good)
                b[pos] ^= 0x01
                variants.append(bytes(b))
        for v in variants:
            try:
                wire.decode(v)
                ours = "ok"
            except wire.WireError as e:
                ours = e.code
            try:
                cp.decompress(codec, np.frombuffer(v, np.uint8), x.size)
                lib = "ok"
            except cp.Error as e:
                lib = e.code.name
            # The document's decoder knows every codec, the library decodes with one: a payload of
            # another codec is the library's codec_mismatch and the document's valid payload.
            if lib == "codec_mismatch" and ours == "ok":
                continue
            assert ours == lib, f"{codec!r}: document {ours}, library {lib}"
            checked += 1
    assert checked > 100

