# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The fp8 and fp4 conversions of the block-scaled codecs against ml_dtypes, an implementation of
the OCP formats independent of commpress.

A group whose largest magnitude is the format's largest finite value F gets the scale 1 (fp8:
s = F / F; MX: 2^0), so its codes are the plain conversions of its elements: they must be the
codes ml_dtypes gives for every value of the format, every midpoint between neighbouring values
(ties to even), the floats on either side of each midpoint, and random values in [-F, F]; and
they must decode to ml_dtypes' values."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import commpress as cp

FORMATS = {  # name: (commpress format, ml_dtypes type, F, code bits)
    "e4m3": (cp.minifloat.e4m3, ml_dtypes.float8_e4m3fn, 448.0, 8),
    "e5m2": (cp.minifloat.e5m2, ml_dtypes.float8_e5m2, 57344.0, 8),
    "e2m1": (cp.minifloat.e2m1, ml_dtypes.float4_e2m1fn, 6.0, 4),
}


def value_of(codes: np.ndarray, ml_type) -> np.ndarray:
    """ml_dtypes' value of each code (one code per byte)."""
    return codes.astype(np.uint8).view(ml_type).astype(np.float32)


def probe(ml_type, bits: int, top: float) -> np.ndarray:
    """Values whose conversion decides a rounding: every value, every midpoint and the floats
    next to it, and random values; all in [-F, F]."""
    v = value_of(np.arange(1 << bits), ml_type)
    v = np.unique(v[np.isfinite(v)])
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    near = [np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))]
    rand = np.random.default_rng(7).uniform(-top, top, 4000).astype(np.float32)
    x = np.concatenate([v, mids, *near, rand]).astype(np.float32)
    return x[np.abs(x) <= top]


def check_codes(x: np.ndarray, codes: np.ndarray, ml_type) -> None:
    want = x.astype(ml_type).view(np.uint8)
    bad = np.nonzero(codes != want)[0]
    assert bad.size == 0, f"x={x[bad[0]]!r}: commpress {codes[bad[0]]:#x}, ml_dtypes {want[bad[0]]:#x}"


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_fp8_codes_are_ml_dtypes_conversions(name):
    fmt, ml_type, top, bits = FORMATS[name]
    x = np.concatenate([[np.float32(top)], probe(ml_type, bits, top)]).astype(np.float32)
    codec = cp.fp8(format=fmt, granularity=cp.scale_granularity.tensor, group=0)
    payload = np.asarray(cp.compress(codec, x))
    body = payload[64:]
    assert body[:4].view(np.float32)[0] == 1.0  # s = F / F
    codes = body[4:]
    check_codes(x, codes, ml_type)
    np.testing.assert_array_equal(np.asarray(cp.decompress(codec, payload)), value_of(codes, ml_type))


def test_mxfp4_codes_are_ml_dtypes_conversions():
    _, ml_type, top, bits = FORMATS["e2m1"]
    x = probe(ml_type, bits, top)
    x = x[: x.size // 31 * 31].reshape(-1, 31)
    x = np.concatenate([np.full((x.shape[0], 1), top, np.float32), x], axis=1).reshape(-1)
    blocks = x.size // 32
    payload = np.asarray(cp.compress(cp.mxfp4(), x))
    body = payload[64:]
    assert (body[:blocks] == 127).all()  # amax / F = 1: the scale 2^0
    packed = body[blocks:]
    codes = np.stack([packed & 0xF, packed >> 4], axis=1).reshape(-1)[: x.size]
    check_codes(x, codes, ml_type)
    np.testing.assert_array_equal(np.asarray(cp.decompress(cp.mxfp4(), payload)), value_of(codes, ml_type))


@pytest.mark.parametrize("k", [-100, -30, -8, 0, 5, 40, 100])
def test_mx_scale_bytes_are_ml_dtypes_e8m0(k):
    # A block whose amax is F 2^k has the scale 2^k exactly: ml_dtypes' E8M0 code of 2^k.
    x = np.full(32, np.float32(448.0 * 2.0**k) / 3, np.float32)
    x[5] = np.float32(448.0 * 2.0**k)
    payload = np.asarray(cp.compress(cp.mxfp8(), x))
    assert payload[64] == np.array([2.0**k], np.float32).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)[0]
