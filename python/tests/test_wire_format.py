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


# qsgd's Elias body: those of CODECS, and every code width with few and many levels, one norm
# per tensor and blocks that do and do not divide the sizes.
QSGD_ELIAS = [
    c for c in CODECS if isinstance(c, (cp.qsgd8, cp.qsgd4, cp.qsgd2)) and c.coding == cp.qsgd_coding.elias
] + [
    kind(block=block, levels=levels, coding=cp.qsgd_coding.elias)
    for kind, levels in [(cp.qsgd8, 127), (cp.qsgd8, 1), (cp.qsgd4, 7), (cp.qsgd4, 3), (cp.qsgd2, 1)]
    for block in (0, 5, 64)
]


def elias_stream(codes: np.ndarray, block: int, bits: int) -> bytes:
    """The document's Elias stream of the fixed coding's codes, written from "qsgd, Elias
    body": per group, gamma(gap), sign, gamma(level) for each nonzero level, then the closing
    gap; zero bits to a byte boundary."""
    out = []

    def gamma(v: int):
        n = v.bit_length() - 1
        out.extend([0] * n)
        out.extend((v >> k) & 1 for k in range(n, -1, -1))

    n = codes.size
    mask = (1 << (bits - 1)) - 1
    for first in range(0, n, block):
        m = min(n, first + block) - first
        previous = 0
        for j in np.nonzero(codes[first : first + m] & mask)[0]:
            position = int(j) + 1
            code = int(codes[first + j])
            gamma(position - previous)
            out.append(code >> (bits - 1))
            gamma(code & mask)
            previous = position
        gamma(m + 1 - previous)
    out.extend([0] * (-len(out) % 8))
    return bytes(sum(b << k for k, b in enumerate(out[i : i + 8])) for i in range(0, len(out), 8))


@pytest.mark.parametrize("i", range(len(QSGD_ELIAS)))
def test_qsgd_elias_body_follows_the_document(i):
    """The Elias body carries the fixed coding's norms and codes (the same random words):
    written from the document out of the fixed payload's codes it equals the library's bytes,
    and both payloads decode to the same bits, here and in the library."""
    codec = QSGD_ELIAS[i]
    fixed = type(codec)(block=codec.block, levels=codec.levels)
    width = {cp.qsgd8: 8, cp.qsgd4: 4, cp.qsgd2: 2}[type(codec)]
    checked = 0
    for n in SIZES:
        for name, x, finite in inputs(n, seed=7 * n + i):
            for ctx in CONTEXTS:
                pe = np.asarray(cp.compress(codec, x, ctx)).tobytes()
                pf = np.asarray(cp.compress(fixed, x, ctx)).tobytes()
                he, hf = wire.read_header(pe), wire.read_header(pf)
                assert he.params[8] == 1 and hf.params[8] == 0 and he.params[:8] == hf.params[:8]
                assert len(pe) == 64 + he.body_bytes
                assert he.body_bytes <= wire.stochastic_body_bytes(he.codec, he.params, n)
                lib = bits(np.asarray(cp.decompress(codec, pe)))
                assert lib.size == n
                assert (bits(wire.decode(pe)) == lib).all(), f"{codec!r} n={n} {name}: decoded"
                assert (bits(np.asarray(cp.decompress(fixed, pf))) == lib).all(), f"{codec!r} n={n} {name}: fixed"
                if n == 0:
                    assert he.body_bytes == 0
                    continue
                block = codec.block or n
                groups = -(-n // block)
                codes = wire.unpack_codes(pf[64 + 4 * groups :], n, width).astype(np.int64)
                want = pf[64 : 64 + 4 * groups] + elias_stream(codes, block, width)
                assert pe[64:] == want, f"{codec!r} n={n} {name}: body differs"
                # The whole max-size slot decodes too; bytes past body_bytes are not the body.
                slot = pe + bytes(cp.max_payload_bytes(codec, n) - len(pe))
                assert (bits(np.asarray(cp.decompress(codec, np.frombuffer(slot, np.uint8)))) == lib).all()
                checked += 1
    assert checked > 0


def test_qsgd_elias_malformed_streams_are_refused():
    """The document's refusals of a stream no encoder writes: the library and the decoder
    written from the document both answer corrupt."""
    codec = cp.qsgd4(block=3, levels=3, coding=cp.qsgd_coding.elias)
    good = np.asarray(cp.compress(codec, np.array([0, 3, 0, -1, 0, 0], F32), CONTEXTS[0])).tobytes()
    h = wire.read_header(good)
    norms = good[64 : 64 + 8]

    def sealed(body: bytes) -> bytes:
        header = bytearray(good[:64])
        header[16:24] = len(body).to_bytes(8, "little")
        header[60:64] = bytes(4)
        header[60:64] = wire.payload_crc(bytes(header), body).to_bytes(4, "little")
        return bytes(header) + body

    def stream(*fields) -> bytes:
        out = []
        for kind, v in fields:
            if kind == "g":
                n = v.bit_length() - 1
                out += [0] * n + [(v >> k) & 1 for k in range(n, -1, -1)]
            else:
                out.append(v)
        out += [0] * (-len(out) % 8)
        return bytes(sum(b << k for k, b in enumerate(out[i : i + 8])) for i in range(0, len(out), 8))

    assert h.body_bytes == len(good) - 64
    cases = {
        "gap past the end": norms + stream(("g", 5)),
        "level above s": norms + stream(("g", 1), ("b", 0), ("g", 4), ("g", 3), ("g", 4)),
        "ends early": norms + stream(("g", 2), ("b", 0), ("g", 3)),
        "trailing byte": good[64:] + b"\0",
        "norms cut": norms[:4],
    }
    for what, body in cases.items():
        payload = sealed(body)
        with pytest.raises(wire.WireError) as e:
            wire.decode(payload)
        assert e.value.code == "corrupt", what
        with pytest.raises(cp.Error) as e:
            cp.decompress(codec, np.frombuffer(payload, np.uint8))
        assert e.value.code == cp.errc.corrupt, what


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

