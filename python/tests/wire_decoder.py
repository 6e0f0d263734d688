# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""A decoder of commpress payloads written from docs/wire-format.md alone, with NumPy and the
standard library: it imports nothing of commpress. test_wire_format.py checks it against the
library on payloads of every codec configuration; where the two disagree, the document or the
library is wrong.

decode(payload) reads the header, validates it in the document's order, and returns the
decoded tensor as float32, its NaNs as the document says: widened as they are from identity,
cast, top_k and (biased) random_k values, the canonical quiet NaN 0x7FC00000 from arithmetic.
It raises WireError(code) with the document's error code for a payload the document says to
refuse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np

F32 = np.float32
CANONICAL_NAN = np.uint32(0x7FC00000).view(np.float32)


class WireError(Exception):
    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


# --- CRC32C ("Checksum") ------------------------------------------------------------------------
def _crc_table() -> list:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def payload_crc(header: bytes, body: bytes) -> int:
    digests = b"".join(struct.pack("<I", crc32c(body[off : off + 65536])) for off in range(0, len(body), 65536))
    return crc32c(header[:60] + digests)


# --- the header ------------------------------------------------------------------------------------
@dataclass
class Header:
    codec: int
    element: int
    count: int
    body_bytes: int
    seed: int
    step: int
    tensor_id: int
    params: bytes
    transform: int = 0


def read_header(payload: bytes) -> Header:
    """The header's fields, after the envelope checks of "Validation order" (those that do not
    depend on the decoding codec)."""
    if len(payload) < 64:
        raise WireError("truncated")
    if payload[0:4] != b"CPRS":
        raise WireError("bad_magic")
    if payload[4] != 1:
        raise WireError("bad_version")
    transform = payload[7]
    if transform != 0 and not (transform >> 4 == 1 and 3 <= (transform & 15) <= 12):
        raise WireError("corrupt")
    count, body_bytes, seed, step = struct.unpack_from("<QQQQ", payload, 8)
    (tensor_id,) = struct.unpack_from("<I", payload, 40)
    if body_bytes > len(payload) - 64:
        raise WireError("truncated")
    (crc,) = struct.unpack_from("<I", payload, 60)
    if crc != payload_crc(payload[:64], payload[64 : 64 + body_bytes]):
        raise WireError("checksum_mismatch")
    if payload[6] not in (1, 2, 3):
        raise WireError("corrupt")
    return Header(payload[5], payload[6], count, body_bytes, seed, step, tensor_id, payload[44:60], transform)


# --- shared pieces -------------------------------------------------------------------------------
def unpack_codes(data: bytes, n: int, bits: int) -> np.ndarray:
    """Codes of "Bit packing": code i at stream bits [i b, i b + b), LSB first."""
    if n == 0:
        return np.zeros(0, np.uint32)
    stream = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
    idx = np.arange(n)[:, None] * bits + np.arange(bits)[None, :]
    return (stream[idx].astype(np.uint32) << np.arange(bits, dtype=np.uint32)).sum(axis=1).astype(np.uint32)


def canonical(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F32).copy()
    x[np.isnan(x)] = CANONICAL_NAN
    return x


def values_of(dt: int, words: np.ndarray) -> np.ndarray:
    """f32 (1), f16 (2) or bf16 (3) words as float32."""
    if dt == 1:
        return words.astype(np.uint32).view(F32)
    if dt == 2:
        return words.astype(np.uint16).view(np.float16).astype(F32)
    return (words.astype(np.uint32) << 16).view(F32)


def value_bytes(dt: int) -> int:
    return 4 if dt == 1 else 2


def read_words(body: bytes, offset: int, count: int, width: int) -> np.ndarray:
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
    return np.frombuffer(body, dtype=np.dtype(dtype).newbyteorder("<"), count=count, offset=offset).astype(np.uint64)


def keep_count(fraction: float, count: int, d: int) -> int:
    """k of "Rows and k"."""
    if count > 0:
        return min(count, d)
    p = float(F32(fraction)) * d
    if not p > 0:
        return 0
    if p >= d:
        return d
    return max(1, int(np.floor(p + 0.5)))


# --- Philox4x32-10 ("Random numbers") --------------------------------------------------------------
M32 = 0xFFFFFFFF


def philox(c0, c1, c2, c3, k0: int, k1: int):
    """Vectorized over uint64 arrays holding u32 words."""
    c = [np.asarray(v, np.uint64) & M32 for v in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [
            ((p1 >> np.uint64(32)) ^ c[1] ^ k0) & M32,
            p1 & M32,
            ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & M32,
            p0 & M32,
        ]
        k0 = (k0 + np.uint64(0x9E3779B9)) & np.uint64(M32)
        k1 = (k1 + np.uint64(0xBB67AE85)) & np.uint64(M32)
    return c


def tensor_key(seed: int, tensor_id: int):
    v = philox([tensor_id], [0x636F6D6D], [0x70726573], [0], seed & M32, seed >> 32)
    return int(v[0][0]), int(v[1][0])


def random_u32(key, step: int, idx: np.ndarray) -> np.ndarray:
    idx = np.asarray(idx, np.uint64)
    b = idx >> np.uint64(2)
    words = philox(
        b & np.uint64(M32), b >> np.uint64(32), np.full_like(b, step & M32), np.full_like(b, step >> 32), *key
    )
    stacked = np.stack(words, axis=0)
    return stacked[(idx & np.uint64(3)).astype(np.int64), np.arange(idx.size)].astype(np.uint64)


def rotation_key(seed: int, tensor_id: int):
    v = philox([tensor_id], [0x726F7461], [0x74696F6E], [0], seed & M32, seed >> 32)
    return int(v[0][0]), int(v[1][0])


def uniform(u: np.ndarray) -> np.ndarray:
    return (np.asarray(u, np.uint64) >> np.uint64(8)).astype(F32) * F32(2.0**-24)


# --- codecs ---------------------------------------------------------------------------------------
def levels(rng: int, b: int) -> int:
    return (1 << (b - 1)) - 1 if rng == 0 else (1 << b) - 1


def quantize_groups(params: bytes, n: int):
    bits, gran, rng, rnd = params[0], params[1], params[2], params[3]
    (group,) = struct.unpack_from("<I", params, 4)
    if n == 0:
        groups = 0
    elif gran == 0:
        groups = 1
    elif gran == 1:
        groups = -(-n // group)
    else:
        groups = group
    if gran == 0:
        group_of = np.zeros(n, np.int64)
    elif gran == 1:
        group_of = np.arange(n) // group
    else:
        group_of = np.arange(n) % group
    return bits, gran, rng, rnd, group, groups, group_of


def quantize_body_bytes(params: bytes, n: int) -> int:
    bits, _, rng, _, _, groups, _ = quantize_groups(params, n)
    return groups * (4 if rng == 0 else 8) + -(-n * bits // 8)


def decode_quantize(params: bytes, n: int, body: bytes) -> np.ndarray:
    bits, _, rng, _, _, groups, group_of = quantize_groups(params, n)
    rec = 4 if rng == 0 else 8
    records = np.frombuffer(body, "<f4", count=groups * rec // 4).astype(F32)
    codes = unpack_codes(body[groups * rec :], n, bits)
    with np.errstate(all="ignore"):
        if rng == 0:
            scale = records[group_of]
            return canonical((codes.astype(np.int64) - levels(0, bits)).astype(F32) * scale)
        lo, step = records[0::2][group_of], records[1::2][group_of]
        normal = lo + codes.astype(F32) * step
        # A negative step marks a wide group: its lo and hi differ by more than the largest
        # float, and it decodes as 2 (lo / 2 + code * |step|).
        wide = F32(2) * (F32(0.5) * lo + codes.astype(F32) * -step)
        return canonical(np.where(step < 0, wide, normal))


def top_k_layout(params: bytes, n: int):
    values = params[0]
    from_count = params[1] == 1
    (row_length,) = struct.unpack_from("<I", params, 4)
    if from_count:
        (count,) = struct.unpack_from("<Q", params, 8)
        fraction = 0.0
    else:
        (fraction,) = struct.unpack_from("<f", params, 8)
        count = 0
    d = row_length if row_length else n
    rows = n // d if row_length else 1
    k = keep_count(fraction, count, d)
    width = 1 if d <= 256 else (2 if d <= 65536 else 4)
    bitmap = -(-d // 8) < k * width
    index_bytes = -(-d // 8) if bitmap else k * width
    return values, d, rows, k, width, bitmap, index_bytes


def top_k_value_quantizer(params: bytes) -> bytes | None:
    """The quantize params of the kept values (bytes 2 and 3), or None when they are sent as a
    dtype: bits, then range (bit 0), rounding (bit 1), group code (bits 2-7: 0 for one scale,
    else log2(group) + 1)."""
    bits, packed = params[2], params[3]
    if bits == 0:
        if packed != 0:  # byte 3 is zero when byte 2 is
            raise WireError("corrupt")
        return None
    group_code = packed >> 2
    granularity, group = (0, 0) if group_code == 0 else (1, 1 << (group_code - 1))
    return bytes([bits, granularity, packed & 1, (packed >> 1) & 1]) + struct.pack("<I", group)


def top_k_body_bytes(params: bytes, n: int) -> int:
    values, d, rows, k, _, _, index_bytes = top_k_layout(params, n)
    quantizer = top_k_value_quantizer(params)
    if quantizer is not None:
        return rows * index_bytes + quantize_body_bytes(quantizer, rows * k)
    return rows * (index_bytes + k * value_bytes(values))


def decode_top_k(params: bytes, n: int, body: bytes) -> np.ndarray:
    values, d, rows, k, width, bitmap, index_bytes = top_k_layout(params, n)
    out = np.zeros(n, F32)
    vb = value_bytes(values)
    value_base = rows * index_bytes
    quantizer = top_k_value_quantizer(params)
    if quantizer is not None:  # the kept values, row after row, as one quantize body
        kept = decode_quantize(quantizer, rows * k, body[value_base:])
    for r in range(rows):
        section = body[r * index_bytes : (r + 1) * index_bytes]
        if bitmap:
            bits = np.unpackbits(np.frombuffer(section, np.uint8), bitorder="little")
            if bits[d:].any() or bits.sum() != k:
                raise WireError("corrupt")
            idx = np.nonzero(bits[:d])[0]
        else:
            idx = read_words(section, 0, k, width).astype(np.int64)
            if (idx >= d).any() or (np.diff(idx) <= 0).any():
                raise WireError("corrupt")
        if quantizer is not None:
            out[r * d + idx] = kept[r * k : (r + 1) * k]
        else:
            words = read_words(body, value_base + r * k * vb, k, vb)
            out[r * d + idx] = values_of(values, words)
    return out


def random_k_params(params: bytes):
    values, unbiased = params[0], params[1]
    (fraction,) = struct.unpack_from("<f", params, 4)
    (count,) = struct.unpack_from("<Q", params, 8)
    return values, unbiased, fraction, count


# Stream index of random_k's quantized kept value 0: stochastic rounding of kept value j draws
# the word at 2^63 + j, apart from the selection's words 0 .. k - 1.
RANDOM_K_ROUNDING_INDEX = 1 << 63


def random_k_body_bytes(params: bytes, n: int) -> int:
    values, _, fraction, count = random_k_params(params)
    k = keep_count(fraction, count, n)
    quantizer = top_k_value_quantizer(params)  # bytes 2 and 3 are laid out as top_k's
    if quantizer is not None:
        return quantize_body_bytes(quantizer, k)
    return k * value_bytes(values)


def random_k_selection(params: bytes, header: Header):
    """(index_j, size_j) of the k strata, from the header's seed, step and tensor id."""
    _, _, fraction, count = random_k_params(params)
    n = header.count
    k = keep_count(fraction, count, n)
    if k == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    j = np.arange(k + 1, dtype=object)
    start = np.array([int(v) for v in (j * n) // k], dtype=np.uint64)  # exact integers
    size = start[1:] - start[:-1]
    u = random_u32(tensor_key(header.seed, header.tensor_id), header.step, np.arange(k, dtype=np.uint64))
    idx = np.array([int(s) + (int(w) * int(z) >> 32) for s, w, z in zip(start[:-1], u, size)], dtype=np.int64)
    return idx, size


def decode_random_k(params: bytes, header: Header, body: bytes) -> np.ndarray:
    values, unbiased, _, _ = random_k_params(params)
    out = np.zeros(header.count, F32)
    idx, size = random_k_selection(params, header)
    k = idx.size
    if k == 0:
        return out
    quantizer = top_k_value_quantizer(params)
    if quantizer is not None:  # the kept values, in stratum order, as one quantize body
        v = decode_quantize(quantizer, k, body)
    else:
        v = values_of(values, read_words(body, 0, k, value_bytes(values)))
    if unbiased:
        with np.errstate(all="ignore"):
            scaled = v * size.astype(F32)
        # A finite value whose product overflows saturates; a NaN product is canonical.
        overflow = np.isfinite(v) & ~np.isfinite(scaled)
        v = canonical(np.where(overflow, np.copysign(np.finfo(F32).max, scaled), scaled).astype(F32))
    out[idx] = v
    return out


def sign_layout(params: bytes, n: int):
    gran, scale_kind = params[0], params[1]
    (block,) = struct.unpack_from("<I", params, 4)
    groups = (1 if n else 0) if gran == 0 else -(-n // block)
    length = n if gran == 0 else block
    return groups, length


def sign_body_bytes(params: bytes, n: int) -> int:
    groups, _ = sign_layout(params, n)
    return 4 * groups + -(-n // 8)


def decode_sign(params: bytes, n: int, body: bytes) -> np.ndarray:
    groups, length = sign_layout(params, n)
    scales = np.frombuffer(body, "<f4", count=groups).astype(F32)
    bits = unpack_codes(body[4 * groups :], n, 1)
    s = scales[np.arange(n) // max(length, 1)] if n else scales[:0]
    return canonical(np.where(bits == 1, -s, s))


# The block-scaled codecs ("Wire format: the block-scaled codecs").
MINIFLOAT = {1: (4, 3, 7), 2: (5, 2, 15), 3: (2, 1, 1)}  # format byte: E, M, B


def minifloat_value(fmt: int, code: np.ndarray) -> np.ndarray:
    e_bits, m_bits, bias = MINIFLOAT[fmt]
    code = np.asarray(code, np.int64)
    width = e_bits + m_bits
    sign = np.where((code >> width) & 1, -1.0, 1.0)
    mag = code & ((1 << width) - 1)
    e = mag >> m_bits
    m = (mag & ((1 << m_bits) - 1)) / float(1 << m_bits)
    v = np.where(e == 0, np.ldexp(m, 1 - bias), np.ldexp(1.0 + m, e - bias)) * sign
    if fmt == 1:
        v = np.where(mag == 0x7F, np.nan, v)
    if fmt == 2:
        v = np.where(mag == 0x7C, sign * np.inf, np.where(mag > 0x7C, np.nan, v))
    return v.astype(F32)  # exact: every code is a float


def e8m0_value(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, np.int64)
    return np.where(q == 255, np.nan, np.ldexp(1.0, q - 127)).astype(F32)


SCALED = {  # codec id: (element format byte or None, block or None, scale bytes, tensor scale bytes, code bits)
    7: None,
    8: (1, 32, 1, 0, 8),
    9: (2, 32, 1, 0, 8),
    10: (3, 32, 1, 0, 4),
    11: (3, 16, 1, 4, 4),
}


def scaled_layout(codec: int, params: bytes, n: int):
    if codec == 7:
        fmt, gran = params[0], params[1]
        (group,) = struct.unpack_from("<I", params, 4)
        block = n if gran == 0 else group
        return fmt, block, 4, 0, 8
    return SCALED[codec]


def scaled_body_bytes(codec: int, params: bytes, n: int) -> int:
    if n == 0:
        return 0
    fmt, block, sb, tb, bits = scaled_layout(codec, params, n)
    return tb + -(-n // block) * sb + -(-n * bits // 8)


def decode_scaled(codec: int, params: bytes, n: int, body: bytes) -> np.ndarray:
    if n == 0:
        return np.zeros(0, F32)
    fmt, block, sb, tb, bits = scaled_layout(codec, params, n)
    groups = -(-n // block)
    scale_bytes = np.frombuffer(body, np.uint8, count=groups * sb, offset=tb)
    codes = unpack_codes(body[tb + groups * sb :], n, bits)
    value = minifloat_value(fmt, codes)
    g = np.arange(n) // block
    with np.errstate(all="ignore"):
        if codec == 7:
            factor = scale_bytes.view("<f4").astype(F32)
        elif codec == 11:
            t = np.frombuffer(body, "<f4", count=1)[0]
            factor = minifloat_value(1, scale_bytes) * F32(t)
        else:
            factor = e8m0_value(scale_bytes)
        return canonical(value * factor[g])


# --- terngrad, natural and qsgd, from "the stochastic block-scaled codecs" ------------------------
QSGD_BITS = {14: 8, 15: 4, 16: 2}


def stochastic_layout(codec: int, params: bytes, n: int):
    """(B, scale bytes, code bits) of codec 12 to 16."""
    (block,) = struct.unpack_from("<I", params, 0)
    scale_bytes = 1 if codec == 13 else 4
    code_bits = {12: 2, 13: 8}.get(codec) or QSGD_BITS[codec]
    return (block if block else n), scale_bytes, code_bits


def stochastic_body_bytes(codec: int, params: bytes, n: int) -> int:
    """The body's length; for qsgd's Elias body (params byte 8 = 1) its largest."""
    if n == 0:
        return 0
    block, sb, bits = stochastic_layout(codec, params, n)
    groups = -(-n // block)
    if qsgd_elias(codec, params):
        (levels,) = struct.unpack_from("<I", params, 4)
        return groups * 4 + -(-(n * (2 + gamma_bits(levels)) + groups) // 8)
    return groups * sb + -(-n * bits // 8)


def qsgd_elias(codec: int, params: bytes) -> bool:
    """Whether a qsgd payload has the Elias body (params byte 8: 0 fixed-width codes, 1 Elias;
    the document defines no other value)."""
    if codec not in QSGD_BITS:
        return False
    if params[8] > 1:
        raise WireError("corrupt")
    return params[8] == 1


def gamma_bits(v: int) -> int:
    """Length of Elias-gamma(v): 2 floor(log2 v) + 1."""
    return 2 * (v.bit_length() - 1) + 1


def qsgd_elias_codes(params: bytes, n: int, body: bytes, bits: int) -> np.ndarray:
    """"qsgd, Elias body": the fixed coding's code of every element, read from the stream
    group by group; WireError("corrupt") for a stream no encoder writes."""
    (block,) = struct.unpack_from("<I", params, 0)
    (levels,) = struct.unpack_from("<I", params, 4)
    block = block if block else n
    groups = -(-n // block)
    if len(body) < 4 * groups:
        raise WireError("corrupt")
    stream = body[4 * groups :]
    total = 8 * len(stream)
    pos = 0

    def bit() -> int:
        nonlocal pos
        if pos >= total:
            raise WireError("corrupt")
        b = (stream[pos >> 3] >> (pos & 7)) & 1
        pos += 1
        return b

    def gamma() -> int:
        zeros = 0
        while bit() == 0:
            zeros += 1
            if zeros > 63:
                raise WireError("corrupt")
        v = 1
        for _ in range(zeros):
            v = (v << 1) | bit()
        return v

    codes = np.zeros(n, np.int64)
    for g in range(groups):
        first = g * block
        m = min(n, first + block) - first
        previous = 0
        while True:
            gap = gamma()
            position = previous + gap
            if position > m + 1:
                raise WireError("corrupt")
            if position == m + 1:
                break
            sign = bit()
            level = gamma()
            if level > levels:
                raise WireError("corrupt")
            codes[first + position - 1] = (sign << (bits - 1)) | level
            previous = position
    if -(-pos // 8) != len(stream):
        raise WireError("corrupt")
    if pos % 8 and stream[-1] >> (pos % 8):
        raise WireError("corrupt")
    return codes


def decode_stochastic(codec: int, params: bytes, n: int, body: bytes) -> np.ndarray:
    if n == 0:
        return np.zeros(0, F32)
    block, sb, bits = stochastic_layout(codec, params, n)
    groups = -(-n // block)
    if qsgd_elias(codec, params):
        codes = qsgd_elias_codes(params, n, body, bits)
    else:
        codes = unpack_codes(body[groups * sb :], n, bits).astype(np.int64)
    g = np.arange(n) // block
    with np.errstate(all="ignore"):
        if codec in QSGD_BITS:
            (levels,) = struct.unpack_from("<I", params, 4)
            r = np.frombuffer(body, "<f4", count=groups).astype(F32)
            d = r / F32(levels)
            # r / s, one unit in the last place lower where s of it overflows
            d = np.where(np.isfinite(r) & ~np.isfinite(d * F32(levels)), np.nextafter(d, F32(0)), d)
            sign_bit = 1 << (bits - 1)
            magnitude = (codes & (sign_bit - 1)).astype(F32) * d[g]
            return canonical(np.where(codes & sign_bit, -magnitude, magnitude))
        if codec == 12:
            s = np.frombuffer(body, "<f4", count=groups)[g].astype(F32)
            unit = np.where(codes == 1, 1.0, np.where(codes == 3, -1.0, 0.0)).astype(F32)
            return canonical(unit * s)
        q = np.frombuffer(body, np.uint8, count=groups)[g].astype(np.int64)
        m = codes & 127
        e = q - 127 + 1 - m
        mag = np.where(
            e >= -126,
            (np.clip(e, -126, 127) + 127) << 23,
            np.where(e >= -149, np.left_shift(1, np.clip(e + 149, 0, 22)), 0),
        )
        bits_out = ((codes >> 7) << 31) | np.where(m == 0, 0, mag)
        value = bits_out.astype(np.uint32).view(F32)
        return canonical(np.where(q == 0xFF, F32(np.nan), value))


# --- the entry point ------------------------------------------------------------------------------
def body_bytes_for(codec: int, params: bytes, n: int) -> Optional[int]:
    if codec == 1:
        return 4 * n
    if codec == 2:
        return 2 * n
    if codec == 3:
        return quantize_body_bytes(params, n)
    if codec == 4:
        return top_k_body_bytes(params, n)
    if codec == 5:
        return random_k_body_bytes(params, n)
    if codec == 6:
        return sign_body_bytes(params, n)
    if codec in (7, 8, 9, 10, 11):
        return scaled_body_bytes(codec, params, n)
    if codec in (12, 13, 14, 15, 16):
        return stochastic_body_bytes(codec, params, n)
    return None


def orthonormal_hadamard(rows: np.ndarray) -> np.ndarray:
    """(1/sqrt(m)) H_m times each row of a (k, m) float64 array, m a power of two: the
    butterflies of stride 1, 2, 4, ..., each pairing the halves of groups of 2 * stride."""
    k, m = rows.shape
    h = 1
    while h < m:
        g = rows.reshape(k, -1, 2, h)
        rows = np.stack([g[:, :, 0, :] + g[:, :, 1, :], g[:, :, 0, :] - g[:, :, 1, :]], axis=2).reshape(k, m)
        h *= 2
    return rows * (1.0 / np.sqrt(np.float64(m)))


def inverse_rotation(values: np.ndarray, h: Header) -> np.ndarray:
    """"Transform byte": the randomized Hadamard rotation undone, window by window."""
    n = values.size
    window = 1 << (h.transform & 15)
    y = values.astype(np.float64)
    full = n // window * window
    if full:
        y[:full] = orthonormal_hadamard(y[:full].reshape(-1, window)).reshape(-1)
    at = full
    while at < n:  # the short last window: the pieces of its length's binary digits
        m = 1 << ((n - at).bit_length() - 1)
        y[at : at + m] = orthonormal_hadamard(y[at : at + m].reshape(1, m)).reshape(-1)
        at += m
    idx = np.arange(n, dtype=np.uint64)
    words = random_u32(rotation_key(h.seed, h.tensor_id), h.step, idx >> np.uint64(5))
    negative = (words >> (idx & np.uint64(31))) & np.uint64(1)
    y = np.where(negative == 1, -y, y)
    largest = float(np.finfo(F32).max)
    y = np.where(np.isfinite(y) & (np.abs(y) > largest), np.copysign(largest, y), y)  # saturate
    return canonical(y.astype(F32))


def decode(payload: bytes) -> np.ndarray:
    h = read_header(bytes(payload))
    values = decode_values(payload, h)
    return inverse_rotation(values, h) if h.transform else values


def decode_values(payload: bytes, h: Header) -> np.ndarray:
    expected = body_bytes_for(h.codec, h.params, h.count)
    if expected is None:
        raise WireError("codec_mismatch")
    if h.body_bytes > expected if qsgd_elias(h.codec, h.params) else h.body_bytes != expected:
        raise WireError("corrupt")  # the Elias body's length varies: at most the largest
    body = bytes(payload[64 : 64 + h.body_bytes])
    n = h.count
    if h.codec == 1:
        return np.frombuffer(body, "<f4").astype(F32)
    if h.codec == 2:
        return values_of(h.params[0], read_words(body, 0, n, 2))
    if h.codec == 3:
        return decode_quantize(h.params, n, body)
    if h.codec == 4:
        return decode_top_k(h.params, n, body)
    if h.codec == 5:
        return decode_random_k(h.params, h, body)
    if h.codec == 6:
        return decode_sign(h.params, n, body)
    if h.codec in (12, 13, 14, 15, 16):
        return decode_stochastic(h.codec, h.params, n, body)
    return decode_scaled(h.codec, h.params, n, body)


# --- an encoder of quantize, from "Encoding" ---------------------------------------------------
def encode_quantize_body(params: bytes, x: np.ndarray, header: Header, first_index: int = 0) -> bytes:
    """The body quantize writes for a finite f32 tensor x (the document's encoding rules);
    stochastic rounding draws element i's word at stream index first_index + i (random_k's
    quantized values: RANDOM_K_ROUNDING_INDEX)."""
    bits, gran, rng, rnd, group, groups, group_of = quantize_groups(params, x.size)
    x = np.asarray(x, F32)
    n = x.size
    L = F32(levels(rng, bits))
    finf = F32(np.inf)
    records = []
    codes = np.zeros(n, np.int64)
    u = (
        uniform(
            random_u32(
                tensor_key(header.seed, header.tensor_id),
                header.step,
                np.uint64(first_index) + np.arange(n, dtype=np.uint64),
            )
        )
        if rnd == 1
        else None
    )
    with np.errstate(all="ignore"):
        for g in range(groups):
            sel = group_of == g
            v = x[sel]
            if rng == 0:
                amax = np.max(np.abs(v)) if v.size else F32(0)
                scale = amax / L
                if not np.isfinite(L * scale):
                    scale = np.nextafter(scale, F32(0))
                inv = L / amax
                inv = F32(0) if inv == finf else inv
                y = v * inv
                records.append(struct.pack("<f", scale))
                offset, top = L, F32(2) * L
            else:
                lo, hi = np.min(v), np.max(v)
                lo = lo + F32(0)  # -0 becomes +0
                span = hi - lo
                if np.isinf(span):  # wide: halves, and a negative step
                    hl = F32(0.5) * lo
                    hspan = F32(0.5) * hi - hl
                    inv = L / hspan
                    step = hspan / L
                    while not np.isfinite(F32(2) * (hl + L * step)):
                        step = np.nextafter(step, F32(0))
                    y = (F32(0.5) * v - hl) * inv
                    records.append(struct.pack("<ff", lo, -step))
                else:
                    inv = L / span
                    inv = F32(0) if inv == finf else inv
                    step = span / L
                    while not (np.isfinite(L * step) and np.isfinite(lo + L * step)):
                        step = np.nextafter(step, F32(0))
                    y = (v - lo) * inv
                    records.append(struct.pack("<ff", lo, step))
                offset, top = F32(0), L
            if rnd == 0:
                q = np.round(y)  # NumPy rounds half to even
            else:
                f = np.floor(y)
                q = np.where(u[sel] < (y - f), f + F32(1), f)
            c = np.clip(q + offset, 0, top)
            codes[sel] = c.astype(np.int64)
    packed = np.zeros(-(-n * bits // 8) * 8, np.uint8)
    for b in range(bits):
        packed[np.arange(n) * bits + b] = (codes >> b) & 1
    return b"".join(records) + np.packbits(packed, bitorder="little").tobytes()
