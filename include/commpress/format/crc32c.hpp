// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every payload.
///
/// Uses the `crc32` instruction of SSE4.2 (x86-64, chosen at run time, so no compiler flag is
/// needed) or of the ARMv8 CRC extension (when the compiler targets it), and slicing-by-8 tables
/// otherwise; all give the same value (tests/format/crc32c_test.cpp checks the RFC 3720 vectors
/// on each path).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define COMMPRESS_CRC32C_X86 1
#endif
#if defined(__ARM_FEATURE_CRC32)
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

#if defined(__ARM_FEATURE_CRC32)
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

/// Continues a CRC32C over `n` bytes. Start with `crc = 0`; the result is final (the
/// pre- and post-inversion are applied inside), so calls chain: crc(a ++ b) ==
/// crc32c_update(crc32c_update(0, a), b).
inline std::uint32_t crc32c_update(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(COMMPRESS_CRC32C_X86)
  if (cpu_has_sse42())
    return ~crc32c_sse42(~crc, p, n);
#elif defined(__ARM_FEATURE_CRC32)
  return ~crc32c_armv8(~crc, p, n);
#endif
  return ~crc32c_portable(~crc, p, n);
}

inline std::uint32_t crc32c(const void* data, std::size_t n) {
  return crc32c_update(0, data, n);
}

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

/// CRC32C of three buffers of n bytes each, out[j] = crc32c(buffer j). One `crc32` chain is
/// limited by the instruction's 3-cycle latency; three independent chains issue one per cycle,
/// which lets the payload checksum keep up with memory bandwidth (issue 7).
inline void crc32c_x3(const void* a, const void* b, const void* c, std::size_t n,
                      std::uint32_t* out) {
#if defined(COMMPRESS_CRC32C_X86)
  if (cpu_has_sse42()) {
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
