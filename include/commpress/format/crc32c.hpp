// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every payload.
///
/// On x86-64 the implementation is chosen at run time, so no compiler flag is needed: buffers of
/// 256 bytes and more are folded with VPCLMULQDQ where the CPU has it with AVX-512 (faster from
/// L2 than three interleaved `crc32` chains: bench/README.md, "Payload checksum"), and
/// the `crc32` instruction of SSE4.2 hashes the rest. AArch64 uses the CRC extension when the
/// compiler targets it; slicing-by-8 tables serve everything else. All give the same value
/// (tests/format/crc32c_test.cpp checks the RFC 3720 vectors and compares every path).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/core/cpu_features.hpp"

#if defined(COMMPRESS_CRC32C_X86)
#include <immintrin.h>
#endif
#if defined(COMMPRESS_CRC32C_ARM)
#include <arm_acle.h>
#endif

namespace commpress::detail {

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc32c_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1u) ? (c >> 1) ^ crc32c_polynomial : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i)
    for (std::size_t s = 1; s < 8; ++s)
      t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

inline constexpr auto crc32c_tables = make_crc32c_tables();

/// Table-driven CRC32C on the inverted register `c` (slicing-by-8).
inline std::uint32_t crc32c_portable(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = crc32c_tables;
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint32_t lo = c ^ (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 |
                                  std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24);
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; --n, ++p)
    c = (c >> 8) ^ t[0][(c ^ *p) & 0xffu];
  return c;
}

#if defined(COMMPRESS_CRC32C_X86)
__attribute__((target("sse4.2"))) inline std::uint32_t
crc32c_sse42(std::uint32_t c, const unsigned char* p, std::size_t n) {
  std::uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
  }
  c = static_cast<std::uint32_t>(c64);
  for (; n > 0; --n, ++p)
    c = __builtin_ia32_crc32qi(c, *p);
  return c;
}

inline bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

#if defined(COMMPRESS_CRC32C_ARM)
inline std::uint32_t crc32c_armv8(std::uint32_t c, const unsigned char* p, std::size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = __crc32cd(c, w);
  }
  for (; n > 0; --n, ++p)
    c = __crc32cb(c, *p);
  return c;
}
#endif

/// a * b modulo the CRC32C polynomial, both in the CRC's reflected bit order (bit 31 is x^0),
/// as zlib's multmodp.
constexpr std::uint32_t crc32c_multmodp(std::uint32_t a, std::uint32_t b) {
  std::uint32_t m = 1u << 31;
  std::uint32_t p = 0;
  for (;;) {
    if ((a & m) != 0) {
      p ^= b;
      if ((a & (m - 1)) == 0)
        break;
    }
    m >>= 1;
    b = (b & 1u) != 0 ? (b >> 1) ^ crc32c_polynomial : b >> 1;
  }
  return p;
}

/// x^(2^k) modulo the polynomial for k = 0..66: enough to raise x to any 8 * (64-bit length).
inline constexpr auto crc32c_x2k = [] {
  std::array<std::uint32_t, 67> t{};
  t[0] = 1u << 30; // x^1
  for (std::size_t k = 1; k < t.size(); ++k)
    t[k] = crc32c_multmodp(t[k - 1], t[k - 1]);
  return t;
}();

/// x^e modulo the polynomial, in the reflected bit order of crc32c_multmodp.
constexpr std::uint32_t crc32c_xpow(std::uint64_t e) {
  std::uint32_t r = 1u << 31; // x^0
  for (std::size_t k = 0; e != 0; e >>= 1, ++k)
    if ((e & 1u) != 0)
      r = crc32c_multmodp(crc32c_x2k[k], r);
  return r;
}

#if defined(COMMPRESS_CRC32C_X86)
/// The carry-less multipliers that move a 16-byte lane `bits` further along the message
/// ("Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", Intel, 2009). A lane's two
/// little-endian quadwords q0, q1 stand for the polynomial Q0 x^64 + Q1, with the first bit of
/// the message as the highest power; a carry-less product in that bit order picks up one extra
/// factor x. So each multiplier is x^(e - 1) mod P placed in the high half of a quadword (its
/// 32 bits are the reflected remainder): `lo` (x^(64 + bits)) multiplies q0, `hi` (x^bits) q1,
/// and the two 96-bit products XOR into a lane congruent to the old one at its new place.
struct crc32c_fold_multipliers {
  std::uint64_t lo;
  std::uint64_t hi;
};

constexpr crc32c_fold_multipliers crc32c_fold_by(std::uint64_t bits) {
  return {std::uint64_t{crc32c_xpow(64 + bits - 1)} << 32,
          std::uint64_t{crc32c_xpow(bits - 1)} << 32};
}

#define COMMPRESS_CRC32C_FOLD_TARGET                                                               \
  __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))
COMMPRESS_INTRINSICS_BEGIN

COMMPRESS_CRC32C_FOLD_TARGET inline __m512i crc32c_fold4(__m512i lanes, __m512i multipliers) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(lanes, multipliers, 0x00),
                          _mm512_clmulepi64_epi128(lanes, multipliers, 0x11));
}

COMMPRESS_CRC32C_FOLD_TARGET inline __m512i crc32c_broadcast(crc32c_fold_multipliers m) {
  const auto lo = static_cast<long long>(m.lo), hi = static_cast<long long>(m.hi);
  return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

/// The four accumulators of a 256-byte stride folded into one, as the 64 bytes they follow.
COMMPRESS_CRC32C_FOLD_TARGET inline __m512i crc32c_fold_onto_last(__m512i a0, __m512i a1,
                                                                  __m512i a2, __m512i a3) {
  constexpr auto ahead64 = crc32c_fold_by(512);
  const __m512i by64 = crc32c_broadcast(ahead64);
  __m512i a = _mm512_xor_si512(crc32c_fold4(a0, by64), a1);
  a = _mm512_xor_si512(crc32c_fold4(a, by64), a2);
  return _mm512_xor_si512(crc32c_fold4(a, by64), a3);
}

/// A zmm accumulator's four lanes folded into the last: lanes 0, 1, 2 move 48, 32, 16 bytes
/// ahead.
COMMPRESS_CRC32C_FOLD_TARGET inline __m128i crc32c_last_lane(__m512i a) {
  constexpr auto by48 = crc32c_fold_by(384), by32 = crc32c_fold_by(256), by16 = crc32c_fold_by(128);
  const __m512i onto_last =
      _mm512_set_epi64(0, 0, static_cast<long long>(by16.hi), static_cast<long long>(by16.lo),
                       static_cast<long long>(by32.hi), static_cast<long long>(by32.lo),
                       static_cast<long long>(by48.hi), static_cast<long long>(by48.lo));
  const __m512i moved = crc32c_fold4(a, onto_last);
  const __m128i v =
      _mm_xor_si128(_mm512_extracti32x4_epi32(a, 3), _mm512_extracti32x4_epi32(moved, 0));
  return _mm_xor_si128(
      v, _mm_xor_si128(_mm512_extracti32x4_epi32(moved, 1), _mm512_extracti32x4_epi32(moved, 2)));
}

/// The inverted register after a message that folded to the 16-byte lane v: the `crc32`
/// instruction computes the remainder of whatever it is given, and folding keeps the message's
/// remainder unchanged.
COMMPRESS_CRC32C_FOLD_TARGET inline std::uint32_t crc32c_reduce_lane(__m128i v) {
  std::uint64_t r = __builtin_ia32_crc32di(0, static_cast<std::uint64_t>(_mm_cvtsi128_si64(v)));
  r = __builtin_ia32_crc32di(r, static_cast<std::uint64_t>(_mm_extract_epi64(v, 1)));
  return static_cast<std::uint32_t>(r);
}

/// CRC32C on the inverted register `c`, as crc32c_sse42, by folding: four zmm accumulators
/// (sixteen 16-byte lanes) each fold 256 bytes ahead per step, then fold into one zmm, one lane,
/// and the `crc32` instruction reduces the last lane to the 32-bit register.
COMMPRESS_CRC32C_FOLD_TARGET inline std::uint32_t
crc32c_vpclmul(std::uint32_t c, const unsigned char* p, std::size_t n) {
  if (n < 256)
    return crc32c_sse42(c, p, n);
  // The register's value XORs into the first four bytes of the message (a reflected CRC's
  // register is the running remainder of the bytes it has seen).
  __m512i a0 = _mm512_xor_si512(_mm512_loadu_si512(p),
                                _mm512_castsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i a1 = _mm512_loadu_si512(p + 64);
  __m512i a2 = _mm512_loadu_si512(p + 128);
  __m512i a3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  constexpr auto ahead256 = crc32c_fold_by(2048), ahead64 = crc32c_fold_by(512);
  const __m512i by256 = crc32c_broadcast(ahead256);
  for (; n >= 256; n -= 256, p += 256) {
    a0 = _mm512_xor_si512(crc32c_fold4(a0, by256), _mm512_loadu_si512(p));
    a1 = _mm512_xor_si512(crc32c_fold4(a1, by256), _mm512_loadu_si512(p + 64));
    a2 = _mm512_xor_si512(crc32c_fold4(a2, by256), _mm512_loadu_si512(p + 128));
    a3 = _mm512_xor_si512(crc32c_fold4(a3, by256), _mm512_loadu_si512(p + 192));
  }
  const __m512i by64 = crc32c_broadcast(ahead64);
  __m512i a = crc32c_fold_onto_last(a0, a1, a2, a3);
  for (; n >= 64; n -= 64, p += 64)
    a = _mm512_xor_si512(crc32c_fold4(a, by64), _mm512_loadu_si512(p));
  __m128i v = crc32c_last_lane(a);
  constexpr auto ahead16 = crc32c_fold_by(128);
  const __m128i by16 =
      _mm_set_epi64x(static_cast<long long>(ahead16.hi), static_cast<long long>(ahead16.lo));
  for (; n >= 16; n -= 16, p += 16)
    v = _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(v, by16, 0x00), _mm_clmulepi64_si128(v, by16, 0x11)),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return crc32c_sse42(crc32c_reduce_lane(v), p, n);
}

COMMPRESS_INTRINSICS_END
#undef COMMPRESS_CRC32C_FOLD_TARGET

inline bool cpu_has_vpclmul() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq") &&
                          __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

#if defined(COMMPRESS_CRC32C_STREAMING)
COMMPRESS_INTRINSICS_BEGIN
/// The CRC32C of a buffer that a kernel produces in registers, 256 bytes at a time in order, as
/// crc32c_vpclmul folds it from memory: the kernel can then write the buffer with non-temporal
/// stores instead of through the cache to hash it afterwards. Only where the compiler's flags
/// enable the instructions, as the kernels that use it.
class crc32c_streaming {
public:
  /// Appends the 256 bytes b0, b1, b2, b3 (in that order) to the message.
  void append(__m512i b0, __m512i b1, __m512i b2, __m512i b3) {
    if (empty_) { // a fresh CRC's inverted register, 0xffffffff, XORs into the first four bytes
      a0_ = _mm512_xor_si512(b0, _mm512_castsi128_si512(_mm_cvtsi32_si128(-1)));
      a1_ = b1;
      a2_ = b2;
      a3_ = b3;
      empty_ = false;
      return;
    }
    constexpr auto ahead256 = crc32c_fold_by(2048);
    const __m512i by256 = crc32c_broadcast(ahead256);
    a0_ = _mm512_xor_si512(crc32c_fold4(a0_, by256), b0);
    a1_ = _mm512_xor_si512(crc32c_fold4(a1_, by256), b1);
    a2_ = _mm512_xor_si512(crc32c_fold4(a2_, by256), b2);
    a3_ = _mm512_xor_si512(crc32c_fold4(a3_, by256), b3);
  }

  /// crc32c() of the bytes appended.
  std::uint32_t value() const {
    if (empty_)
      return 0;
    return ~crc32c_reduce_lane(crc32c_last_lane(crc32c_fold_onto_last(a0_, a1_, a2_, a3_)));
  }

private:
  __m512i a0_ = _mm512_setzero_si512(), a1_ = a0_, a2_ = a0_, a3_ = a0_;
  bool empty_ = true;
};
COMMPRESS_INTRINSICS_END
#endif

/// Continues a CRC32C over `n` bytes. Start with `crc = 0`; the result is final (the
/// pre- and post-inversion are applied inside), so calls chain: crc(a ++ b) ==
/// crc32c_update(crc32c_update(0, a), b).
inline std::uint32_t crc32c_update(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(COMMPRESS_CRC32C_X86)
  if (cpu_has_vpclmul())
    return ~crc32c_vpclmul(~crc, p, n);
  if (cpu_has_sse42())
    return ~crc32c_sse42(~crc, p, n);
#elif defined(COMMPRESS_CRC32C_ARM)
  return ~crc32c_armv8(~crc, p, n);
#endif
  return ~crc32c_portable(~crc, p, n);
}

inline std::uint32_t crc32c(const void* data, std::size_t n) {
  return crc32c_update(0, data, n);
}

/// The CRC32C of a ++ b from crc32c(a), crc32c(b) and the length of b (zlib's crc32_combine):
/// the pre- and post-inversions cancel, so crc(a) is shifted over len_b zero bytes, which is a
/// multiplication by x^(8 len_b), and added to crc(b). Lets a checksum be finished from pieces
/// hashed out of order (format/body_checksum.hpp). O(log len_b).
constexpr std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b,
                                       std::uint64_t len_b) {
  std::uint32_t shift = 1u << 31; // x^0
  for (std::size_t k = 3; len_b != 0; len_b >>= 1, ++k)
    if ((len_b & 1u) != 0)
      shift = crc32c_multmodp(crc32c_x2k[k], shift);
  return crc32c_multmodp(shift, crc_a) ^ crc_b;
}

#if defined(COMMPRESS_CRC32C_X86)
__attribute__((target("sse4.2"))) inline void crc32c_sse42_x3(const unsigned char* a,
                                                              const unsigned char* b,
                                                              const unsigned char* c, std::size_t n,
                                                              std::uint32_t* out) {
  std::uint64_t ca = ~0u, cb = ~0u, cc = ~0u;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t wa, wb, wc;
    std::memcpy(&wa, a + i, 8);
    std::memcpy(&wb, b + i, 8);
    std::memcpy(&wc, c + i, 8);
    ca = __builtin_ia32_crc32di(ca, wa);
    cb = __builtin_ia32_crc32di(cb, wb);
    cc = __builtin_ia32_crc32di(cc, wc);
  }
  out[0] = ~crc32c_sse42(static_cast<std::uint32_t>(ca), a + i, n - i);
  out[1] = ~crc32c_sse42(static_cast<std::uint32_t>(cb), b + i, n - i);
  out[2] = ~crc32c_sse42(static_cast<std::uint32_t>(cc), c + i, n - i);
}
#endif

/// CRC32C of three buffers of n bytes each, out[j] = crc32c(buffer j). One `crc32` chain is limited
/// by the instruction's 3-cycle latency; three independent chains issue one per cycle, which lets
/// the payload checksum keep up with memory bandwidth. The folding implementation has its chains
/// inside, so it takes the buffers one after another.
inline void crc32c_x3(const void* a, const void* b, const void* c, std::size_t n,
                      std::uint32_t* out) {
#if defined(COMMPRESS_CRC32C_X86)
  if (!cpu_has_vpclmul() && cpu_has_sse42()) {
    crc32c_sse42_x3(static_cast<const unsigned char*>(a), static_cast<const unsigned char*>(b),
                    static_cast<const unsigned char*>(c), n, out);
    return;
  }
#endif
  out[0] = crc32c(a, n);
  out[1] = crc32c(b, n);
  out[2] = crc32c(c, n);
}

} // namespace commpress::detail
