// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Streaming inner loops of the CPU codecs, written so that the compiler vectorizes them for
/// whatever the user's flags enable (SSE2 by default on x86-64, AVX2 / AVX-512 under -march,
/// NEON on AArch64), with AVX-512 and AVX2 intrinsics where a portable loop does not vectorize
/// well enough: the code kernels (codes, packing and the fused error update in one pass), the
/// cast, Philox and the top-k candidate compress.
///
/// Every kernel computes exactly the per-element expressions of compress/*.hpp, with the same
/// roundings in the same order, so the bytes do not depend on which path ran (the codec tests
/// compare against the scalar definitions). What makes them fast (measured in bench/README.md):
/// - reductions over |x| take the maximum of the bit patterns as unsigned integers: for
///   non-negative floats the order is the same, and integer max reductions vectorize where
///   GCC leaves a float `a > m ? a : m` reduction scalar;
/// - codes are computed into a small byte buffer and packed eight at a time with the code
///   width a compile-time constant;
/// - Philox blocks are generated structure-of-arrays, 64 at a time, so the 32x32->64-bit
///   multiplies become vector multiplies;
/// - the passes that read from memory prefetch one line per 16 elements, 8 KiB ahead, so the
///   requests keep flowing across 4 KiB pages and while a block is being coded.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>

#include "commpress/compress/quantize.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/header.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

// GCC 12's AVX-512 intrinsics start from self-initialized "undefined" vectors, which
// -Wmaybe-uninitialized (or -Wuninitialized) reports where they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#define COMMPRESS_AVX512_BEGIN                                                                     \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")       \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define COMMPRESS_AVX512_END _Pragma("GCC diagnostic pop")
#else
#define COMMPRESS_AVX512_BEGIN
#define COMMPRESS_AVX512_END
#endif

namespace commpress::cpu::detail {

using commpress::detail::error_update;
using commpress::detail::round_magic;

/// Elements per chunk of the code kernels: their byte buffers stay in L1.
inline constexpr std::size_t code_chunk = 256;

/// How far ahead of the element being read the streaming kernels prefetch: 2048 floats
/// (8 KiB, two pages). Each kernel asks for one cache line per 16 elements it reads, so the
/// requests are spread evenly over the pass instead of bunched at the start of a block; the
/// hardware prefetcher alone stops at every 4 KiB page, which is exactly one block of 1024 floats
/// (bench/README.md).
inline constexpr std::size_t prefetch_ahead = 2048;

/// An array that a pass reading element i of it (or of an array it walks in step with) asks
/// to have element i + prefetch_ahead in cache, while that is below `end`. The default
/// prefetches nothing (a pass over data already in L1).
struct prefetch_stream {
  const float* base = nullptr;
  const float* end = nullptr;

  COMMPRESS_FORCEINLINE void operator()(std::size_t i) const {
#if defined(__GNUC__) || defined(__clang__)
    if (end - base > static_cast<std::ptrdiff_t>(i + prefetch_ahead))
      __builtin_prefetch(base + i + prefetch_ahead, 0, 3);
#else
    (void)i;
#endif
  }
};

/// How the two 16-lane reductions below are declared. With AVX-512 or AVX2 their lanes are
/// vectors (value_range: explicit ones) and they are inlined. Otherwise GCC 12 vectorizes their
/// array loops in a function of their own but not always where they are inlined: inside
/// quantize's batched encode it left them scalar, which made the nearest and min/max rows of a
/// default-flag build measurably slower (bench/README.md, "Default flags"). So there they stay
/// out of line.
#if !defined(__AVX512F__) && !defined(__AVX2__) && (defined(__GNUC__) || defined(__clang__))
#define COMMPRESS_CPU_REDUCTION __attribute__((noinline)) inline
#else
#define COMMPRESS_CPU_REDUCTION inline
#endif

/// Largest |x| bit pattern (x's bits with the sign cleared) of x[0..n): the key of the largest
/// magnitude, >= 0x7f800000 iff some element is NaN or Inf. Calls prefetch(i) once per 16
/// elements.
COMMPRESS_CPU_REDUCTION std::uint32_t max_magnitude_bits(const float* COMMPRESS_RESTRICT x,
                                                         std::size_t n,
                                                         prefetch_stream prefetch = {}) {
  std::uint32_t m[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    for (unsigned j = 0; j < 16; ++j) {
      std::uint32_t u;
      std::memcpy(&u, x + i + j, 4);
      u &= 0x7fffffffu;
      m[j] = u > m[j] ? u : m[j];
    }
  }
  std::uint32_t r = 0;
  for (; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    u &= 0x7fffffffu;
    r = u > r ? u : r;
  }
  for (std::uint32_t v : m)
    r = v > r ? v : r;
  return r;
}

/// What value_range found of some elements: whether all are finite, and then the least and
/// greatest value.
struct value_range_result {
  bool finite;
  float lo;
  float hi;
};

/// The least and greatest of x[0..n) (n > 0), from four integer reductions of the bit patterns
/// that vectorize where float min / max reductions do not: the greatest as a signed integer is
/// the greatest value if that is not negative, and the least unsigned is the greatest when all
/// are negative (the least magnitude) and the least when none is; the greatest unsigned is the
/// least value when some is negative. A NaN or Inf is the greatest signed (+) or unsigned (-)
/// pattern. Where -0 and +0 tie for least or greatest, this gives -0 for least and +0 for
/// greatest, not the first of them; quantize's records and coders come out the same either way,
/// as they add +0 to lo. Calls prefetch(i) once per 16 elements.
COMMPRESS_CPU_REDUCTION value_range_result value_range(const float* COMMPRESS_RESTRICT x,
                                                       std::size_t n,
                                                       prefetch_stream prefetch = {}) {
  std::int32_t max_s[16], min_s[16];
  std::uint32_t max_u[16] = {}, min_u[16];
  for (unsigned j = 0; j < 16; ++j) {
    max_s[j] = std::numeric_limits<std::int32_t>::min();
    min_s[j] = std::numeric_limits<std::int32_t>::max();
    min_u[j] = std::numeric_limits<std::uint32_t>::max();
  }
  const auto fold = [&](unsigned j, const float* v) {
    std::int32_t s;
    std::memcpy(&s, v, 4);
    const auto u = static_cast<std::uint32_t>(s);
    max_s[j] = s > max_s[j] ? s : max_s[j];
    min_s[j] = s < min_s[j] ? s : min_s[j];
    max_u[j] = u > max_u[j] ? u : max_u[j];
    min_u[j] = u < min_u[j] ? u : min_u[j];
  };
  std::size_t i = 0;
  // The 16 lanes as vectors: inlined into quantize's batched encode, GCC 12 kept the array
  // loop below in scalar registers (measured in bench/README.md).
#if defined(__AVX512F__)
  COMMPRESS_AVX512_BEGIN
  __m512i vmax_s = _mm512_loadu_si512(max_s), vmin_s = _mm512_loadu_si512(min_s);
  __m512i vmax_u = _mm512_loadu_si512(max_u), vmin_u = _mm512_loadu_si512(min_u);
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    const __m512i v = _mm512_loadu_si512(x + i);
    vmax_s = _mm512_max_epi32(vmax_s, v);
    vmin_s = _mm512_min_epi32(vmin_s, v);
    vmax_u = _mm512_max_epu32(vmax_u, v);
    vmin_u = _mm512_min_epu32(vmin_u, v);
  }
  _mm512_storeu_si512(max_s, vmax_s);
  _mm512_storeu_si512(min_s, vmin_s);
  _mm512_storeu_si512(max_u, vmax_u);
  _mm512_storeu_si512(min_u, vmin_u);
  COMMPRESS_AVX512_END
#elif defined(__AVX2__)
  __m256i vmax_s[2], vmin_s[2], vmax_u[2], vmin_u[2]; // lanes 0-7 and 8-15
  for (unsigned h = 0; h < 2; ++h) {
    vmax_s[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(max_s + 8 * h));
    vmin_s[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(min_s + 8 * h));
    vmax_u[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(max_u + 8 * h));
    vmin_u[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(min_u + 8 * h));
  }
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    for (unsigned h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8 * h));
      vmax_s[h] = _mm256_max_epi32(vmax_s[h], v);
      vmin_s[h] = _mm256_min_epi32(vmin_s[h], v);
      vmax_u[h] = _mm256_max_epu32(vmax_u[h], v);
      vmin_u[h] = _mm256_min_epu32(vmin_u[h], v);
    }
  }
  for (unsigned h = 0; h < 2; ++h) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(max_s + 8 * h), vmax_s[h]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(min_s + 8 * h), vmin_s[h]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(max_u + 8 * h), vmax_u[h]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(min_u + 8 * h), vmin_u[h]);
  }
#endif
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    for (unsigned j = 0; j < 16; ++j)
      fold(j, x + i + j);
  }
  for (; i < n; ++i)
    fold(static_cast<unsigned>(i % 16), x + i);
  for (unsigned j = 1; j < 16; ++j) {
    max_s[0] = max_s[j] > max_s[0] ? max_s[j] : max_s[0];
    min_s[0] = min_s[j] < min_s[0] ? min_s[j] : min_s[0];
    max_u[0] = max_u[j] > max_u[0] ? max_u[j] : max_u[0];
    min_u[0] = min_u[j] < min_u[0] ? min_u[j] : min_u[0];
  }
  const bool finite = max_s[0] < 0x7f800000 && max_u[0] < 0xff800000u;
  const bool some_negative = min_s[0] < 0;
  return {finite, commpress::detail::bits_to_float(some_negative ? max_u[0] : min_u[0]),
          commpress::detail::bits_to_float(max_s[0] >= 0 ? static_cast<std::uint32_t>(max_s[0])
                                                         : min_u[0])};
}

/// The level a rounded value is shifted by, and the largest code: a symmetric B-bit code is
/// round(y) + L clamped to [0, 2L], L = 2^(B-1) - 1; an asymmetric one round(y) (+ 0) clamped to
/// [0, 2^B - 1] (quantize's to_code).
template <unsigned B, bool Asym>
inline constexpr float code_offset = Asym ? 0.0f : static_cast<float>((1u << (B - 1)) - 1u);
template <unsigned B, bool Asym>
inline constexpr float code_top = Asym ? static_cast<float>((1u << B) - 1u)
                                       : 2.0f * code_offset<B, Asym>;

/// `take ? a : b` as bit operations. Written with `?:`, GCC sinks arithmetic that only one arm
/// uses into a branch (under the default -ftrapping-math it may not compute it where the branch
/// would not), and a loop with a branch does not vectorize.
COMMPRESS_FORCEINLINE float select_bits(bool take, float a, float b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(take);
  return commpress::detail::bits_to_float((commpress::detail::float_to_bits(a) & mask) |
                                          (commpress::detail::float_to_bits(b) & ~mask));
}

/// Nearest-rounding codes of m elements: quantize::encode_nearest with coder {inv, lo}, i.e.
/// clamp(round_half_even(y) + offset, 0, top), y = x * inv (symmetric) or (x - lo) * inv
/// (Asym), for finite x.
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE void codes_nearest(const float* COMMPRESS_RESTRICT x, std::size_t m,
                                         float inv, float lo,
                                         std::uint8_t* COMMPRESS_RESTRICT codes) {
  for (std::size_t i = 0; i < m; ++i) {
    const float y = Asym ? (x[i] - lo) * inv : x[i] * inv;
    const float r = (y + round_magic) - round_magic;
    float c = r + code_offset<B, Asym>;
    c = c > 0.0f ? c : 0.0f;
    c = c < code_top<B, Asym> ? c : code_top<B, Asym>;
    codes[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(c));
  }
}

/// Stochastic-rounding codes: quantize::encode_stochastic with coder {inv, lo} and uniform
/// u = uniform_from_bits(words[i]). Its two choices are select_bits: as `?:` GCC makes them
/// branches that do not vectorize, and the one on random bits mispredicts half the time (measured
/// in bench/README.md, "Figures behind the code comments").
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE void codes_stochastic(const float* COMMPRESS_RESTRICT x, std::size_t m,
                                            float inv, float lo,
                                            const std::uint32_t* COMMPRESS_RESTRICT words,
                                            std::uint8_t* COMMPRESS_RESTRICT codes) {
  for (std::size_t i = 0; i < m; ++i) {
    const float y = Asym ? (x[i] - lo) * inv : x[i] * inv;
    const float r = (y + round_magic) - round_magic;
    const float f = select_bits(r > y, r - 1.0f, r);
    const float u =
        static_cast<float>(static_cast<std::int32_t>(words[i] >> 8)) * 5.9604644775390625e-08f;
    const float q = select_bits(u < y - f, f + 1.0f, f);
    float c = q + code_offset<B, Asym>;
    c = c > 0.0f ? c : 0.0f;
    c = c < code_top<B, Asym> ? c : code_top<B, Asym>;
    codes[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(c));
  }
}

/// Packs m codes (m a multiple of 8) into m * B / 8 bytes in the layout of
/// format/bit_packing.hpp.
template <unsigned B>
COMMPRESS_FORCEINLINE void pack_codes(const std::uint8_t* COMMPRESS_RESTRICT c, std::size_t m,
                                      unsigned char* COMMPRESS_RESTRICT out) {
  if constexpr (B == 8) {
    std::memcpy(out, c, m);
  } else if constexpr (B == 4) {
    for (std::size_t j = 0; j < m / 2; ++j)
      out[j] = static_cast<unsigned char>(c[2 * j] | (c[2 * j + 1] << 4));
  } else if constexpr (B == 2) {
    for (std::size_t j = 0; j < m / 4; ++j)
      out[j] = static_cast<unsigned char>(c[4 * j] | (c[4 * j + 1] << 2) | (c[4 * j + 2] << 4) |
                                          (c[4 * j + 3] << 6));
  } else {
    for (std::size_t g = 0; g < m / 8; ++g) {
      std::uint64_t w = 0;
      for (unsigned k = 0; k < 8; ++k)
        w |= static_cast<std::uint64_t>(c[8 * g + k]) << (k * B);
      for (unsigned b = 0; b < B; ++b)
        out[g * B + b] = static_cast<unsigned char>(w >> (8 * b));
    }
  }
}

/// Unpacks m codes (m a multiple of 8, at most code_chunk) from m * B / 8 bytes.
template <unsigned B>
COMMPRESS_FORCEINLINE void unpack_codes(const unsigned char* COMMPRESS_RESTRICT in, std::size_t m,
                                        std::uint8_t* COMMPRESS_RESTRICT c) {
  if constexpr (B == 8) {
    std::memcpy(c, in, m);
  } else if constexpr (B == 4) {
    for (std::size_t j = 0; j < m / 2; ++j) {
      c[2 * j] = static_cast<std::uint8_t>(in[j] & 15u);
      c[2 * j + 1] = static_cast<std::uint8_t>(in[j] >> 4);
    }
  } else if constexpr (B == 2) {
    // Bytes into nibbles, then nibbles into codes: compilers vectorize a two-way split (into
    // unpack instructions) but leave a four-way one as byte stores, several times slower.
    std::uint8_t nibble[code_chunk / 2];
    unpack_codes<4>(in, m / 2, nibble);
    for (std::size_t j = 0; j < m / 2; ++j) {
      c[2 * j] = static_cast<std::uint8_t>(nibble[j] & 3u);
      c[2 * j + 1] = static_cast<std::uint8_t>(nibble[j] >> 2);
    }
  } else {
    constexpr std::uint64_t mask = (std::uint64_t{1} << B) - 1u;
    for (std::size_t g = 0; g < m / 8; ++g) {
      std::uint64_t w = 0;
      for (unsigned b = 0; b < B; ++b)
        w |= static_cast<std::uint64_t>(in[g * B + b]) << (8 * b);
      for (unsigned k = 0; k < 8; ++k)
        c[8 * g + k] = static_cast<std::uint8_t>((w >> (k * B)) & mask);
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define COMMPRESS_CPU_AVX512 1
COMMPRESS_AVX512_BEGIN

/// The 64 codes of four vectors of 16 int32 codes (each in [0, 255]) as 64 bytes in element
/// order: packus works within 128-bit lanes, the permute restores the order.
COMMPRESS_FORCEINLINE __m512i codes_to_bytes(__m512i c0, __m512i c1, __m512i c2, __m512i c3) {
  const __m512i bytes =
      _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), bytes);
}

/// Packs 64 byte codes (each < 2^B) into 8 * B bytes at out (format/bit_packing.hpp layout).
template <unsigned B> COMMPRESS_FORCEINLINE void store_packed64(__m512i bytes, unsigned char* out) {
  if constexpr (B == 8) {
    _mm512_storeu_si512(out, bytes);
  } else if constexpr (B == 4) { // byte j = c[2j] | c[2j + 1] << 4
    const __m512i pairs = _mm512_or_si512(bytes, _mm512_srli_epi16(bytes, 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs));
  } else { // B == 2: byte j = c[4j] | c[4j + 1] << 2 | c[4j + 2] << 4 | c[4j + 3] << 6
    const __m512i t = _mm512_or_si512(bytes, _mm512_srli_epi32(bytes, 6));
    const __m512i quads = _mm512_or_si512(t, _mm512_srli_epi32(t, 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(quads));
  }
}

/// 64 byte codes (element order) from the 8 * B packed bytes at in.
template <unsigned B> COMMPRESS_FORCEINLINE __m512i load_packed64(const unsigned char* in) {
  if constexpr (B == 8) {
    return _mm512_loadu_si512(in);
  } else if constexpr (B == 4) {
    const __m512i w =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
    // word j = byte j; its low nibble is element 2j, its high nibble element 2j + 1.
    return _mm512_and_si512(_mm512_or_si512(w, _mm512_slli_epi16(w, 4)), _mm512_set1_epi16(0x0f0f));
  } else {
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    const __m512i spread =
        _mm512_or_si512(_mm512_or_si512(d, _mm512_slli_epi32(d, 6)),
                        _mm512_or_si512(_mm512_slli_epi32(d, 12), _mm512_slli_epi32(d, 18)));
    return _mm512_and_si512(spread, _mm512_set1_epi32(0x03030303));
  }
}

/// y of 16 elements: x * inv, or (x - lo) * inv when Asym.
template <bool Asym> COMMPRESS_FORCEINLINE __m512 scaled16(const float* x, __m512 inv, __m512 lo) {
  const __m512 v = _mm512_loadu_ps(x);
  return _mm512_mul_ps(Asym ? _mm512_sub_ps(v, lo) : v, inv);
}

/// Level q + offset clamped to [0, top] as int32 lanes (vmaxps / vminps return their second
/// operand for NaN, as the scalar selects do).
template <unsigned B, bool Asym> COMMPRESS_FORCEINLINE __m512i clamped_code16(__m512 q) {
  __m512 c = _mm512_add_ps(q, _mm512_set1_ps(code_offset<B, Asym>));
  c = _mm512_max_ps(c, _mm512_setzero_ps());
  c = _mm512_min_ps(c, _mm512_set1_ps(code_top<B, Asym>));
  return _mm512_cvttps_epi32(c);
}

/// codes_nearest of 16 elements as int32 lanes: the same operations in the same order.
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE __m512i code16_nearest(const float* x, __m512 inv, __m512 lo) {
  const __m512 magic = _mm512_set1_ps(round_magic);
  const __m512 y = scaled16<Asym>(x, inv, lo);
  return clamped_code16<B, Asym>(_mm512_sub_ps(_mm512_add_ps(y, magic), magic));
}

/// codes_stochastic of 16 elements with their 16 random words.
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE __m512i code16_stochastic(const float* x, __m512 inv, __m512 lo,
                                                const std::uint32_t* words) {
  const __m512 magic = _mm512_set1_ps(round_magic);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 y = scaled16<Asym>(x, inv, lo);
  const __m512 r = _mm512_sub_ps(_mm512_add_ps(y, magic), magic);
  const __m512 f = _mm512_mask_sub_ps(r, _mm512_cmp_ps_mask(r, y, _CMP_GT_OQ), r, one);
  const __m512 u =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_loadu_si512(words), 8)),
                    _mm512_set1_ps(5.9604644775390625e-08f));
  return clamped_code16<B, Asym>(
      _mm512_mask_add_ps(f, _mm512_cmp_ps_mask(u, _mm512_sub_ps(y, f), _CMP_LT_OQ), f, one));
}

/// The codes of elements i .. i + 63 of x as four vectors of 16 int32 codes: codes_nearest,
/// or with Stochastic codes_stochastic on words[i..i + 64); prefetch(i + 16 q) before the
/// q-th vector.
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void codes64(const float* x, std::size_t i, __m512 inv, __m512 lo,
                                   const std::uint32_t* words, prefetch_stream prefetch,
                                   __m512i (&c)[4]) {
  for (unsigned q = 0; q < 4; ++q) {
    prefetch(i + 16 * q);
    if constexpr (Stochastic)
      c[q] = code16_stochastic<B, Asym>(x + i + 16 * q, inv, lo, words + i + 16 * q);
    else
      c[q] = code16_nearest<B, Asym>(x + i + 16 * q, inv, lo);
  }
}

/// Codes of m elements (m a multiple of 64) packed at out: codes_nearest (or, with words,
/// codes_stochastic) followed by pack_codes, 64 elements per step; prefetch(i) once per 16
/// elements.
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void encode64(const float* COMMPRESS_RESTRICT x, std::size_t m, float inv,
                                    float lo, const std::uint32_t* COMMPRESS_RESTRICT words,
                                    unsigned char* COMMPRESS_RESTRICT out,
                                    prefetch_stream prefetch) {
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512 vlo = _mm512_set1_ps(lo);
  for (std::size_t i = 0; i < m; i += 64) {
    __m512i c[4];
    codes64<B, Asym, Stochastic>(x, i, vinv, vlo, words, prefetch, c);
    store_packed64<B>(codes_to_bytes(c[0], c[1], c[2], c[3]), out + i / 8 * B);
  }
}

/// Symmetric encode64 fused with the state update: the fresh error h - ((code - L) * scale), the
/// operations of decode64 accumulating with weight -1 (h + (-1) * v is h - v exactly), from
/// the codes still in registers, folded into e by error_update's expressions, 16 lanes at a
/// time: e = fresh when Replace (keep == 0), else keep * e + take * fresh. CheckFresh: the
/// fresh error may be non-finite (see sym_encode_error). Returns how many elements held their e.
template <unsigned B, bool Stochastic, bool Replace, bool CheckFresh>
COMMPRESS_FORCEINLINE std::uint32_t
sym_encode_error64(const float* COMMPRESS_RESTRICT h, std::size_t m, float inv, float scale,
                   const std::uint32_t* COMMPRESS_RESTRICT words,
                   unsigned char* COMMPRESS_RESTRICT out, error_update rule,
                   float* COMMPRESS_RESTRICT e, prefetch_stream prefetch) {
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i offset = _mm512_set1_epi32((1 << (B - 1)) - 1);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 keep = _mm512_set1_ps(rule.keep);
  const __m512 take = _mm512_set1_ps(rule.take);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const auto finite = [&](__m512 v) {
    return _mm512_cmplt_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), magnitude), inf);
  };
  std::uint32_t held = 0;
  for (std::size_t i = 0; i < m; i += 64) {
    __m512i c[4];
    codes64<B, false, Stochastic>(h, i, vinv, _mm512_setzero_ps(), words, prefetch, c);
    store_packed64<B>(codes_to_bytes(c[0], c[1], c[2], c[3]), out + i / 8 * B);
    for (unsigned q = 0; q < 4; ++q) {
      const std::size_t j = i + 16 * q;
      const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c[q], offset)), vscale);
      const __m512 fresh = _mm512_sub_ps(_mm512_loadu_ps(h + j), v);
      __m512 next = fresh;
      __mmask16 ok = CheckFresh ? finite(fresh) : 0xffff;
      if constexpr (!Replace) {
        next =
            _mm512_add_ps(_mm512_mul_ps(keep, _mm512_loadu_ps(e + j)), _mm512_mul_ps(take, fresh));
        ok = static_cast<__mmask16>(ok & finite(next));
      }
      if constexpr (Replace && !CheckFresh) {
        _mm512_storeu_ps(e + j, next);
      } else {
        _mm512_mask_storeu_ps(e + j, ok, next);
        held += static_cast<std::uint32_t>(16 - std::popcount(static_cast<unsigned>(ok)));
      }
    }
  }
  return held;
}

/// v with every NaN lane replaced by the canonical NaN, as math.hpp's rounded operations return
/// (x86 passes an operand's payload through; the CUDA kernels write the canonical one).
COMMPRESS_FORCEINLINE __m512 canonical_nan16(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

/// Decodes m codes (m a multiple of 64) packed at in, in a group with record {a, b}: out =
/// decode_values, or out += weight * that when Accumulate, NaN results canonical (mul_rn,
/// add_rn); Stream writes out with non-temporal stores (out 64-byte aligned), so a large output
/// costs no read for ownership.
template <unsigned B, bool Asym, bool Accumulate, bool Stream>
COMMPRESS_FORCEINLINE void decode64(const unsigned char* COMMPRESS_RESTRICT in, std::size_t m,
                                    float a, float b, float weight, float* COMMPRESS_RESTRICT out,
                                    prefetch_stream prefetch) {
  const __m512i offset = _mm512_set1_epi32(static_cast<int>(code_offset<B, Asym>));
  const __m512 va = _mm512_set1_ps(a);
  const __m512 vb = _mm512_set1_ps(b);
  const __m512 vweight = _mm512_set1_ps(weight);
  const auto sixteen = [&](__m128i bytes, float* o) {
    const __m512i code = _mm512_cvtepu8_epi32(bytes);
    __m512 v = Asym ? _mm512_add_ps(va, _mm512_mul_ps(_mm512_cvtepi32_ps(code), vb))
                    : _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(code, offset)), va);
    if constexpr (Accumulate)
      v = _mm512_add_ps(_mm512_loadu_ps(o), _mm512_mul_ps(vweight, v));
    v = canonical_nan16(v); // a NaN anywhere above leaves a NaN here: one canonicalisation
    if constexpr (Stream)
      _mm512_stream_ps(o, v);
    else
      _mm512_storeu_ps(o, v);
  };
  for (std::size_t i = 0; i < m; i += 64) {
    for (unsigned q = 0; q < 4; ++q)
      prefetch(i + 16 * q);
    const __m512i bytes = load_packed64<B>(in + i / 8 * B);
    sixteen(_mm512_castsi512_si128(bytes), out + i);
    sixteen(_mm512_extracti32x4_epi32(bytes, 1), out + i + 16);
    sixteen(_mm512_extracti32x4_epi32(bytes, 2), out + i + 32);
    sixteen(_mm512_extracti32x4_epi32(bytes, 3), out + i + 48);
  }
}
COMMPRESS_AVX512_END
#elif defined(__AVX2__)
#define COMMPRESS_CPU_AVX2 1
// The AVX-512 kernels above at half the width, for the CPUs without AVX-512 (AMD before Zen 4,
// Intel client cores): the portable loops left quantize and the fused error feedback far from
// a copy's speed there (bench/README.md). The same operations in the same order, with
// comparisons and blends where AVX-512 has masks. encode64, decode64 and sym_encode_error64
// take m a multiple of 64, as the AVX-512 ones do, and work in steps of 32, so the drivers below
// serve both widths. The numbers in the other names count lanes (scaled8: 8 floats) or
// elements (codes32), not code bits.

/// The bytes of four vectors of 8 int32 lanes packed by two rounds of 256-bit packs, in element
/// order: the packs work within 128-bit lanes, leaving the dwords as c0 low half, c1 low, c2
/// low, c3 low, c0 high, ..., and the permute restores the order.
COMMPRESS_FORCEINLINE __m256i packed_in_order(__m256i packed) {
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// The 32 codes of four vectors of 8 int32 codes (each in [0, 255]) as 32 bytes in element
/// order.
COMMPRESS_FORCEINLINE __m256i codes_to_bytes(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  return packed_in_order(
      _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3)));
}

/// Packs 32 byte codes (each < 2^B) into 4 * B bytes at out (format/bit_packing.hpp layout).
template <unsigned B> COMMPRESS_FORCEINLINE void store_packed32(__m256i bytes, unsigned char* out) {
  if constexpr (B == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
  } else if constexpr (B == 4) { // byte j = c[2j] | c[2j + 1] << 4, the low byte of word j
    const __m256i pairs = _mm256_and_si256(_mm256_or_si256(bytes, _mm256_srli_epi16(bytes, 4)),
                                           _mm256_set1_epi16(0x00ff));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out),
        _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1)));
  } else { // B == 2: byte j = c[4j] | c[4j + 1] << 2 | c[4j + 2] << 4 | c[4j + 3] << 6
    const __m256i t = _mm256_or_si256(bytes, _mm256_srli_epi32(bytes, 6));
    const __m256i quads = _mm256_or_si256(t, _mm256_srli_epi32(t, 12));
    // The low byte of each dword into the lane's first dword, then the two lanes' together.
    const __m256i low = _mm256_shuffle_epi8(
        quads, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4,
                                8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    _mm_storel_epi64(
        reinterpret_cast<__m128i*>(out),
        _mm_unpacklo_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1)));
  }
}

/// 32 byte codes (element order) from the 4 * B packed bytes at in.
template <unsigned B> COMMPRESS_FORCEINLINE __m256i load_packed32(const unsigned char* in) {
  if constexpr (B == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
  } else if constexpr (B == 4) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    // word j = byte j; its low nibble is element 2j, its high nibble element 2j + 1.
    return _mm256_and_si256(_mm256_or_si256(w, _mm256_slli_epi16(w, 4)), _mm256_set1_epi16(0x0f0f));
  } else {
    const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
    const __m256i spread =
        _mm256_or_si256(_mm256_or_si256(d, _mm256_slli_epi32(d, 6)),
                        _mm256_or_si256(_mm256_slli_epi32(d, 12), _mm256_slli_epi32(d, 18)));
    return _mm256_and_si256(spread, _mm256_set1_epi32(0x03030303));
  }
}

/// y of 8 elements: x * inv, or (x - lo) * inv when Asym.
template <bool Asym> COMMPRESS_FORCEINLINE __m256 scaled8(const float* x, __m256 inv, __m256 lo) {
  const __m256 v = _mm256_loadu_ps(x);
  return _mm256_mul_ps(Asym ? _mm256_sub_ps(v, lo) : v, inv);
}

/// Level q + offset clamped to [0, top] as int32 lanes (vmaxps / vminps return their second
/// operand for NaN, as the scalar selects do).
template <unsigned B, bool Asym> COMMPRESS_FORCEINLINE __m256i clamped_code8(__m256 q) {
  __m256 c = _mm256_add_ps(q, _mm256_set1_ps(code_offset<B, Asym>));
  c = _mm256_max_ps(c, _mm256_setzero_ps());
  c = _mm256_min_ps(c, _mm256_set1_ps(code_top<B, Asym>));
  return _mm256_cvttps_epi32(c);
}

/// codes_nearest of 8 elements as int32 lanes: the same operations in the same order.
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE __m256i code8_nearest(const float* x, __m256 inv, __m256 lo) {
  const __m256 magic = _mm256_set1_ps(round_magic);
  const __m256 y = scaled8<Asym>(x, inv, lo);
  return clamped_code8<B, Asym>(_mm256_sub_ps(_mm256_add_ps(y, magic), magic));
}

/// codes_stochastic of 8 elements with their 8 random words.
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE __m256i code8_stochastic(const float* x, __m256 inv, __m256 lo,
                                               const std::uint32_t* words) {
  const __m256 magic = _mm256_set1_ps(round_magic);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 y = scaled8<Asym>(x, inv, lo);
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(y, magic), magic);
  const __m256 f = _mm256_blendv_ps(r, _mm256_sub_ps(r, one), _mm256_cmp_ps(r, y, _CMP_GT_OQ));
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8)),
                                 _mm256_set1_ps(5.9604644775390625e-08f));
  return clamped_code8<B, Asym>(_mm256_blendv_ps(
      f, _mm256_add_ps(f, one), _mm256_cmp_ps(u, _mm256_sub_ps(y, f), _CMP_LT_OQ)));
}

/// The codes of elements i .. i + 31 of x as four vectors of 8 int32 codes: codes_nearest, or
/// with Stochastic codes_stochastic on words[i..i + 32); prefetch(i) and prefetch(i + 16).
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void codes32(const float* x, std::size_t i, __m256 inv, __m256 lo,
                                   const std::uint32_t* words, prefetch_stream prefetch,
                                   __m256i (&c)[4]) {
  prefetch(i);
  prefetch(i + 16);
  for (unsigned q = 0; q < 4; ++q) {
    if constexpr (Stochastic)
      c[q] = code8_stochastic<B, Asym>(x + i + 8 * q, inv, lo, words + i + 8 * q);
    else
      c[q] = code8_nearest<B, Asym>(x + i + 8 * q, inv, lo);
  }
}

/// The AVX-512 encode64 in steps of 32.
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void encode64(const float* COMMPRESS_RESTRICT x, std::size_t m, float inv,
                                    float lo, const std::uint32_t* COMMPRESS_RESTRICT words,
                                    unsigned char* COMMPRESS_RESTRICT out,
                                    prefetch_stream prefetch) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 vlo = _mm256_set1_ps(lo);
  for (std::size_t i = 0; i < m; i += 32) {
    __m256i c[4];
    codes32<B, Asym, Stochastic>(x, i, vinv, vlo, words, prefetch, c);
    store_packed32<B>(codes_to_bytes(c[0], c[1], c[2], c[3]), out + i / 8 * B);
  }
}

/// The lanes of v that hold a finite float, as all-ones lanes.
COMMPRESS_FORCEINLINE __m256i finite_lanes(__m256 v) {
  return _mm256_cmpgt_epi32(
      _mm256_set1_epi32(0x7f800000),
      _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff)));
}

/// The AVX-512 sym_encode_error64 in steps of 32; an element that holds its e gets its old
/// value back by a blend (a masked store, vmaskmovps, is slow on AMD cores).
template <unsigned B, bool Stochastic, bool Replace, bool CheckFresh>
COMMPRESS_FORCEINLINE std::uint32_t
sym_encode_error64(const float* COMMPRESS_RESTRICT h, std::size_t m, float inv, float scale,
                   const std::uint32_t* COMMPRESS_RESTRICT words,
                   unsigned char* COMMPRESS_RESTRICT out, error_update rule,
                   float* COMMPRESS_RESTRICT e, prefetch_stream prefetch) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i offset = _mm256_set1_epi32((1 << (B - 1)) - 1);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 keep = _mm256_set1_ps(rule.keep);
  const __m256 take = _mm256_set1_ps(rule.take);
  std::uint32_t held = 0;
  for (std::size_t i = 0; i < m; i += 32) {
    __m256i c[4];
    codes32<B, false, Stochastic>(h, i, vinv, _mm256_setzero_ps(), words, prefetch, c);
    store_packed32<B>(codes_to_bytes(c[0], c[1], c[2], c[3]), out + i / 8 * B);
    for (unsigned q = 0; q < 4; ++q) {
      const std::size_t j = i + 8 * q;
      const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c[q], offset)), vscale);
      const __m256 fresh = _mm256_sub_ps(_mm256_loadu_ps(h + j), v);
      if constexpr (Replace && !CheckFresh) {
        _mm256_storeu_ps(e + j, fresh);
        continue;
      }
      const __m256 old = _mm256_loadu_ps(e + j);
      __m256 next = fresh;
      __m256i ok = CheckFresh ? finite_lanes(fresh) : _mm256_set1_epi32(-1);
      if constexpr (!Replace) {
        next = _mm256_add_ps(_mm256_mul_ps(keep, old), _mm256_mul_ps(take, fresh));
        ok = _mm256_and_si256(ok, finite_lanes(next));
      }
      const __m256 okf = _mm256_castsi256_ps(ok);
      _mm256_storeu_ps(e + j, _mm256_blendv_ps(old, next, okf));
      held += static_cast<std::uint32_t>(
          8 - std::popcount(static_cast<unsigned>(_mm256_movemask_ps(okf))));
    }
  }
  return held;
}

/// v with every NaN lane replaced by the canonical NaN (canonical_nan16's reason).
COMMPRESS_FORCEINLINE __m256 canonical_nan8(__m256 v) {
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                          _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/// The AVX-512 decode64 in steps of 32 (Stream: out 32-byte aligned).
template <unsigned B, bool Asym, bool Accumulate, bool Stream>
COMMPRESS_FORCEINLINE void decode64(const unsigned char* COMMPRESS_RESTRICT in, std::size_t m,
                                    float a, float b, float weight, float* COMMPRESS_RESTRICT out,
                                    prefetch_stream prefetch) {
  const __m256i offset = _mm256_set1_epi32(static_cast<int>(code_offset<B, Asym>));
  const __m256 va = _mm256_set1_ps(a);
  const __m256 vb = _mm256_set1_ps(b);
  const __m256 vweight = _mm256_set1_ps(weight);
  const auto eight = [&](__m128i bytes, float* o) { // the codes in the low 8 bytes
    const __m256i code = _mm256_cvtepu8_epi32(bytes);
    __m256 v = Asym ? _mm256_add_ps(va, _mm256_mul_ps(_mm256_cvtepi32_ps(code), vb))
                    : _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(code, offset)), va);
    if constexpr (Accumulate)
      v = _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(vweight, v));
    v = canonical_nan8(v);
    if constexpr (Stream)
      _mm256_stream_ps(o, v);
    else
      _mm256_storeu_ps(o, v);
  };
  for (std::size_t i = 0; i < m; i += 32) {
    prefetch(i);
    prefetch(i + 16);
    const __m256i bytes = load_packed32<B>(in + i / 8 * B);
    const __m128i lo = _mm256_castsi256_si128(bytes);
    const __m128i hi = _mm256_extracti128_si256(bytes, 1);
    eight(lo, out + i);
    eight(_mm_srli_si128(lo, 8), out + i + 8);
    eight(hi, out + i + 16);
    eight(_mm_srli_si128(hi, 8), out + i + 24);
  }
}

/// The largest of the eight uint32 lanes of v.
COMMPRESS_FORCEINLINE std::uint32_t reduce_max_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
}
#endif

#if defined(COMMPRESS_CPU_AVX512) || defined(COMMPRESS_CPU_AVX2)
/// The code kernels encode64, decode64 and sym_encode_error64 exist, for the code widths of
/// simd_codes.
#define COMMPRESS_CPU_CODES64 1
/// Whether the code kernels serve a code width.
template <unsigned B> inline constexpr bool simd_codes = B == 8 || B == 4 || B == 2;
#endif

/// Outputs at least this large are written with non-temporal stores where a kernel can: far
/// beyond any core's L2, and larger than the consumer could find in cache anyway (glibc's
/// memcpy switches at a similar size).
inline constexpr std::size_t streaming_store_min_bytes = std::size_t{32} << 20;

/// The random words of elements 4 * first_block .. 4 * (first_block + blocks) - 1 at `step`
/// (random_block for each block, in order), blocks <= code_chunk / 4; `words` holds
/// code_chunk words (the AVX-512 path fills whole groups of 32 blocks, the AVX2 one of 8). Philox
/// runs on structure-of-arrays lanes so the rounds vectorize across blocks.
inline void philox_words(rng_key key, std::uint64_t step, std::uint64_t first_block,
                         std::size_t blocks, std::uint32_t* COMMPRESS_RESTRICT words) {
#if defined(COMMPRESS_CPU_AVX512)
  COMMPRESS_AVX512_BEGIN
  // Eight blocks per vector, one in each 64-bit lane with its counter words in the low halves:
  // one vpmuludq gives a whole 64-bit product, whose low half is already the next round's lo
  // and whose high half a dword swap (vpshufd, off the multiplier's port) moves down for the
  // XOR. What the high halves carry is never read: vpmuludq takes only the low halves. A round
  // is a chain of multiply, swap and XOR, so four independent vectors per step keep the ports
  // busy where one or two leave them idle (measured in bench/README.md).
  constexpr unsigned vectors = 4;
  static_assert(code_chunk / 4 % (8 * vectors) == 0, "a step must not write past `words`");
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u);
  const __m512i m1 = _mm512_set1_epi64(0xCD9E8D57u);
  const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i c2_init = _mm512_set1_epi64(static_cast<long long>(step & 0xffffffffu));
  const __m512i c3_init = _mm512_set1_epi64(static_cast<long long>(step >> 32));
  // Blocks 0-3 and 4-7 of a vector in element order, from the words paired per block.
  const __m512i first_four = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i last_four = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (std::size_t b = 0; b < blocks; b += 8 * vectors) {
    __m512i c0[vectors], c1[vectors], c2[vectors], c3[vectors];
    for (unsigned v = 0; v < vectors; ++v) {
      const __m512i block = _mm512_add_epi64(
          _mm512_set1_epi64(static_cast<long long>(first_block + b + 8 * v)), lane);
      c0[v] = block;
      c1[v] = _mm512_srli_epi64(block, 32);
      c2[v] = c2_init;
      c3[v] = c3_init;
    }
    std::uint32_t k0 = key.k0, k1 = key.k1;
    for (int r = 0; r < 10; ++r) {
      const __m512i vk0 = _mm512_set1_epi32(static_cast<int>(k0));
      const __m512i vk1 = _mm512_set1_epi32(static_cast<int>(k1));
      for (unsigned v = 0; v < vectors; ++v) {
        const __m512i p0 = _mm512_mul_epu32(c0[v], m0);
        const __m512i p1 = _mm512_mul_epu32(c2[v], m1);
        // hi(p1) ^ c1 ^ k0 and hi(p0) ^ c3 ^ k1 in the low halves
        const __m512i n0 =
            _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p1, _MM_PERM_CDAB), c1[v], vk0, 0x96);
        const __m512i n2 =
            _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), c3[v], vk1, 0x96);
        c1[v] = p1;
        c3[v] = p0;
        c0[v] = n0;
        c2[v] = n2;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (unsigned v = 0; v < vectors; ++v) {
      // Per 64-bit lane: (c0, c1) and (c2, c3); then one 128-bit lane per block.
      const __m512i w01 = _mm512_mask_shuffle_epi32(c0[v], 0xAAAA, c1[v], _MM_PERM_CCAA);
      const __m512i w23 = _mm512_mask_shuffle_epi32(c2[v], 0xAAAA, c3[v], _MM_PERM_CCAA);
      const __m512i even = _mm512_unpacklo_epi64(w01, w23); // blocks 0 2 4 6
      const __m512i odd = _mm512_unpackhi_epi64(w01, w23);  // blocks 1 3 5 7
      std::uint32_t* w = words + 4 * (b + 8 * v);
      _mm512_storeu_si512(w, _mm512_permutex2var_epi64(even, first_four, odd));
      _mm512_storeu_si512(w + 16, _mm512_permutex2var_epi64(even, last_four, odd));
    }
  }
  COMMPRESS_AVX512_END
#elif defined(__AVX2__)
  // The AVX-512 kernel's layout with four blocks per vector: vpmuludq's whole products, a dword
  // swap for the high halves, and two XORs where AVX-512 has one three-way one. Compilers
  // vectorize the portable loop below with a 32 <-> 64-bit lane shuffle per product, which is
  // slower (bench/README.md, "Figures behind the code comments").
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53u);
  const __m256i m1 = _mm256_set1_epi64x(0xCD9E8D57u);
  const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
  const __m256i c2_init = _mm256_set1_epi64x(static_cast<long long>(step & 0xffffffffu));
  const __m256i c3_init = _mm256_set1_epi64x(static_cast<long long>(step >> 32));
  for (std::size_t b = 0; b < blocks; b += 8) {
    __m256i c0[2], c1[2], c2[2], c3[2];
    for (unsigned v = 0; v < 2; ++v) {
      const __m256i block = _mm256_add_epi64(
          _mm256_set1_epi64x(static_cast<long long>(first_block + b + 4 * v)), lane);
      c0[v] = block;
      c1[v] = _mm256_srli_epi64(block, 32);
      c2[v] = c2_init;
      c3[v] = c3_init;
    }
    std::uint32_t k0 = key.k0, k1 = key.k1;
    for (int r = 0; r < 10; ++r) {
      const __m256i vk0 = _mm256_set1_epi32(static_cast<int>(k0));
      const __m256i vk1 = _mm256_set1_epi32(static_cast<int>(k1));
      for (unsigned v = 0; v < 2; ++v) {
        const __m256i p0 = _mm256_mul_epu32(c0[v], m0);
        const __m256i p1 = _mm256_mul_epu32(c2[v], m1);
        const __m256i n0 = _mm256_xor_si256(
            _mm256_xor_si256(_mm256_shuffle_epi32(p1, _MM_SHUFFLE(2, 3, 0, 1)), c1[v]), vk0);
        const __m256i n2 = _mm256_xor_si256(
            _mm256_xor_si256(_mm256_shuffle_epi32(p0, _MM_SHUFFLE(2, 3, 0, 1)), c3[v]), vk1);
        c1[v] = p1;
        c3[v] = p0;
        c0[v] = n0;
        c2[v] = n2;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (unsigned v = 0; v < 2; ++v) {
      // Per 64-bit lane: (c0, c1) and (c2, c3); then one 128-bit lane per block.
      const __m256i w01 = _mm256_blend_epi32(c0[v], _mm256_slli_epi64(c1[v], 32), 0xAA);
      const __m256i w23 = _mm256_blend_epi32(c2[v], _mm256_slli_epi64(c3[v], 32), 0xAA);
      const __m256i even = _mm256_unpacklo_epi64(w01, w23); // blocks 0 2
      const __m256i odd = _mm256_unpackhi_epi64(w01, w23);  // blocks 1 3
      auto* w = reinterpret_cast<__m256i*>(words + 4 * (b + 4 * v));
      _mm256_storeu_si256(w, _mm256_permute2x128_si256(even, odd, 0x20));
      _mm256_storeu_si256(w + 1, _mm256_permute2x128_si256(even, odd, 0x31));
    }
  }
#else
  constexpr std::size_t lanes = code_chunk / 4;
  std::uint32_t c0[lanes], c1[lanes], c2[lanes], c3[lanes];
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint64_t blk = first_block + b;
    c0[b] = static_cast<std::uint32_t>(blk);
    c1[b] = static_cast<std::uint32_t>(blk >> 32);
    c2[b] = static_cast<std::uint32_t>(step);
    c3[b] = static_cast<std::uint32_t>(step >> 32);
  }
  std::uint32_t k0 = key.k0, k1 = key.k1;
  for (int r = 0; r < 10; ++r) {
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c0[b];
      const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c2[b];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[b] ^ k0;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = static_cast<std::uint32_t>(p1);
      c3[b] = static_cast<std::uint32_t>(p0);
      c0[b] = n0;
      c2[b] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    words[4 * b] = c0[b];
    words[4 * b + 1] = c1[b];
    words[4 * b + 2] = c2[b];
    words[4 * b + 3] = c3[b];
  }
#endif
}

/// The range of a kernel's Asym parameter.
template <bool Asym>
inline constexpr quant_range range_of = Asym ? quant_range::asymmetric : quant_range::symmetric;

/// Decoded values of m codes in a group with record {a, b}: quantize::decode_value, the
/// per-element definition the CUDA kernels call too. A finite record (every group without a
/// NaN or Inf) takes its select-free form. This loop is the decode in builds without AVX2 and
/// for code widths other than 2, 4 and 8. The select-free form is faster than one with the NaN
/// selects, most of all for the asymmetric range (two selects; measured in bench/README.md,
/// "Figures behind the code comments").
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE void decode_values(const std::uint8_t* COMMPRESS_RESTRICT c, std::size_t m,
                                         float a, float b, float* COMMPRESS_RESTRICT out) {
  if (commpress::detail::is_finite(a) && (!Asym || commpress::detail::is_finite(b))) {
    for (std::size_t i = 0; i < m; ++i)
      out[i] = quantize::decode_value_of_finite_record(range_of<Asym>, B, c[i], {a, b});
    return;
  }
  for (std::size_t i = 0; i < m; ++i)
    out[i] = quantize::decode_value(range_of<Asym>, B, c[i], {a, b});
}

/// acc[i] += weight * value, each operation rounded once (decode_accumulate).
template <unsigned B, bool Asym>
COMMPRESS_FORCEINLINE void accumulate_values(const std::uint8_t* COMMPRESS_RESTRICT c,
                                             std::size_t m, float a, float b, float weight,
                                             float* COMMPRESS_RESTRICT acc) {
  for (std::size_t i = 0; i < m; ++i)
    acc[i] = commpress::detail::add_rn(
        acc[i],
        commpress::detail::mul_rn(weight, quantize::decode_value(range_of<Asym>, B, c[i], {a, b})));
}

/// Signed codes of m finite elements in a store_int block (feedback/storage.hpp):
/// q[i] = clamp(round_half_even(x[i] * inv), -qmax, qmax). Returns the largest
/// |x[i] * inv - round_half_even(x[i] * inv)| as bits, which tells the caller whether a product
/// came near a rounding tie. round_half_even is the add and subtract of 1.5 * 2^23, exact for
/// |x[i] * inv| < 2^22; max and min return their second operand for NaN, as the selects do.
inline std::uint32_t int_codes(const float* COMMPRESS_RESTRICT x, std::size_t m, float inv,
                               float qmax, std::int8_t* COMMPRESS_RESTRICT q) {
  std::size_t i = 0;
  std::uint32_t farthest = 0;
#if defined(COMMPRESS_CPU_AVX512)
  COMMPRESS_AVX512_BEGIN
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512 vmagic = _mm512_set1_ps(round_magic);
  const __m512 hi = _mm512_set1_ps(qmax);
  const __m512 lo = _mm512_set1_ps(-qmax);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  __m512i far = _mm512_setzero_si512();
  const auto code16 = [&](const float* v) { // 16 codes as int32 lanes, far updated
    const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(v), vinv);
    const __m512 r = _mm512_sub_ps(_mm512_add_ps(y, vmagic), vmagic);
    const __m512i d = _mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(y, r)), magnitude);
    far = _mm512_max_epu32(far, d);
    return _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
  };
  for (; i + 64 <= m; i += 64) { // the codes fit int8, so the saturating packs are exact
    const __m512i c0 = code16(x + i), c1 = code16(x + i + 16);
    const __m512i c2 = code16(x + i + 32), c3 = code16(x + i + 48);
    const __m512i bytes =
        _mm512_packs_epi16(_mm512_packs_epi32(c0, c1), _mm512_packs_epi32(c2, c3));
    _mm512_storeu_si512(
        q + i, _mm512_permutexvar_epi32(
                   _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), bytes));
  }
  for (; i + 16 <= m; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(code16(x + i)));
  farthest = _mm512_reduce_max_epu32(far);
  COMMPRESS_AVX512_END
#elif defined(COMMPRESS_CPU_AVX2)
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 vmagic = _mm256_set1_ps(round_magic);
  const __m256 hi = _mm256_set1_ps(qmax);
  const __m256 lo = _mm256_set1_ps(-qmax);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  __m256i far = _mm256_setzero_si256();
  const auto code8 = [&](const float* v) { // 8 codes as int32 lanes, far updated
    const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(v), vinv);
    const __m256 r = _mm256_sub_ps(_mm256_add_ps(y, vmagic), vmagic);
    const __m256i d = _mm256_and_si256(_mm256_castps_si256(_mm256_sub_ps(y, r)), magnitude);
    far = _mm256_max_epu32(far, d);
    return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
  };
  for (; i + 32 <= m; i += 32) { // the codes fit int8, so the saturating packs are exact
    const __m256i c0 = code8(x + i), c1 = code8(x + i + 8);
    const __m256i c2 = code8(x + i + 16), c3 = code8(x + i + 24);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                        packed_in_order(_mm256_packs_epi16(_mm256_packs_epi32(c0, c1),
                                                           _mm256_packs_epi32(c2, c3))));
  }
  farthest = reduce_max_epu32(far);
#endif
  for (; i < m; ++i) {
    const float y = x[i] * inv;
    const float r = (y + round_magic) - round_magic;
    const std::uint32_t d = commpress::detail::float_to_bits(y - r) & 0x7fffffffu;
    farthest = d > farthest ? d : farthest;
    float c = r > -qmax ? r : -qmax;
    c = c < qmax ? c : qmax;
    q[i] = static_cast<std::int8_t>(static_cast<std::int32_t>(c));
  }
  return farthest;
}

/// out[i] = q[i] * scale for m signed 8-bit codes and a finite scale (so the product is never
/// NaN and mul_rn's NaN select has nothing to do): the values of a store_int<8> block.
inline void int8_values(const std::int8_t* COMMPRESS_RESTRICT q, std::size_t m, float scale,
                        float* COMMPRESS_RESTRICT out) {
  std::size_t i = 0;
#if defined(COMMPRESS_CPU_AVX512)
  COMMPRESS_AVX512_BEGIN
  const __m512 vscale = _mm512_set1_ps(scale);
  for (; i + 16 <= m; i += 16) {
    const __m512i c =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(c), vscale));
  }
  COMMPRESS_AVX512_END
#elif defined(COMMPRESS_CPU_AVX2)
  const __m256 vscale = _mm256_set1_ps(scale);
  for (; i + 8 <= m; i += 8) {
    const __m256i c =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(c), vscale));
  }
#endif
  for (; i < m; ++i)
    out[i] = static_cast<float>(q[i]) * scale;
}

/// Codes of m elements (m a multiple of 8, at most code_chunk) packed at out: codes_nearest,
/// or with Stochastic codes_stochastic on words[0..m), then pack_codes. prefetch(i) once per 16
/// elements where the AVX-512 or AVX2 kernel runs.
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void encode_codes(const float* COMMPRESS_RESTRICT x, std::size_t m, float inv,
                                        float lo, const std::uint32_t* COMMPRESS_RESTRICT words,
                                        unsigned char* COMMPRESS_RESTRICT out,
                                        prefetch_stream prefetch = {}) {
  std::size_t i = 0;
#if defined(COMMPRESS_CPU_CODES64)
  if constexpr (simd_codes<B>) {
    i = m / 64 * 64;
    encode64<B, Asym, Stochastic>(x, i, inv, lo, words, out, prefetch);
    if (i == m)
      return;
  }
#else
  (void)prefetch;
#endif
  alignas(64) std::uint8_t c[code_chunk];
  if constexpr (Stochastic)
    codes_stochastic<B, Asym>(x + i, m - i, inv, lo, words + i, c);
  else
    codes_nearest<B, Asym>(x + i, m - i, inv, lo, c);
  pack_codes<B>(c, m - i, out + i / 8 * B);
}

/// Decodes m codes (m a multiple of 8) packed at in, in a group with record {a, b}: out = deQ,
/// or out += weight * deQ when Accumulate (decode_values / accumulate_values). Stream: see
/// decode64; the caller fences. prefetch(i) once per 16 elements where the AVX-512 or AVX2
/// kernel runs.
template <unsigned B, bool Asym, bool Accumulate, bool Stream>
COMMPRESS_FORCEINLINE void
decode_packed(const unsigned char* COMMPRESS_RESTRICT in, std::size_t m, float a, float b,
              float weight, float* COMMPRESS_RESTRICT out, prefetch_stream prefetch = {}) {
  std::size_t i = 0;
#if defined(COMMPRESS_CPU_CODES64)
  if constexpr (simd_codes<B>) {
    i = m / 64 * 64;
    decode64<B, Asym, Accumulate, Stream>(in, i, a, b, weight, out, prefetch);
  }
#else
  (void)prefetch;
#endif
  alignas(64) std::uint8_t code[code_chunk];
  for (; i < m; i += code_chunk) {
    const std::size_t len = m - i < code_chunk ? m - i : code_chunk;
    unpack_codes<B>(in + i / 8 * B, len, code);
    if constexpr (Accumulate)
      accumulate_values<B, Asym>(code, len, a, b, weight, out + i);
    else
      decode_values<B, Asym>(code, len, a, b, out + i);
  }
}

/// Symmetric encode_codes fused with the state update: folds the fresh error h + (-1) * deQ, as
/// accumulate_values with weight -1 computes it, into e by `rule` (error feedback's or LoCo's
/// step, fused). Returns how many elements held their e. `bounded`: every |h| is below 2^126,
/// so |h - deQ| < 2^127 and the fresh error is finite without a check. Past the vector kernel,
/// the codes are packed and read back by the portable loops, and h is overwritten with the
/// fresh error.
template <unsigned B, bool Stochastic>
COMMPRESS_FORCEINLINE std::uint32_t
sym_encode_error(float* COMMPRESS_RESTRICT h, std::size_t m, float inv, float scale,
                 const std::uint32_t* COMMPRESS_RESTRICT words,
                 unsigned char* COMMPRESS_RESTRICT out, error_update rule, bool bounded,
                 float* COMMPRESS_RESTRICT e, prefetch_stream prefetch = {}) {
  std::size_t i = 0;
  std::uint32_t held = 0;
#if defined(COMMPRESS_CPU_CODES64)
  if constexpr (simd_codes<B>) {
    i = m / 64 * 64;
    const bool replace = rule.keep == 0.0f;
    if (replace && bounded)
      held = sym_encode_error64<B, Stochastic, true, false>(h, i, inv, scale, words, out, rule, e,
                                                            prefetch);
    else if (replace)
      held = sym_encode_error64<B, Stochastic, true, true>(h, i, inv, scale, words, out, rule, e,
                                                           prefetch);
    else if (bounded)
      held = sym_encode_error64<B, Stochastic, false, false>(h, i, inv, scale, words, out, rule, e,
                                                             prefetch);
    else
      held = sym_encode_error64<B, Stochastic, false, true>(h, i, inv, scale, words, out, rule, e,
                                                            prefetch);
  }
#else
  (void)bounded;
  (void)prefetch;
#endif
  if (i == m)
    return held;
  encode_codes<B, false, Stochastic>(h + i, m - i, inv, 0.0f, words + i, out + i / 8 * B);
  decode_packed<B, false, true, false>(out + i / 8 * B, m - i, scale, 0.0f, -1.0f, h + i);
  for (; i < m; ++i)
    held += rule(h[i], e[i]) ? 1u : 0u;
  return held;
}

/// What add_screened found: the non-finite count of g and max_magnitude_bits of h.
struct screened_sum {
  std::uint32_t nonfinite;
  std::uint32_t max_bits;
};

/// Error feedback's first step over m elements: h = screen(g) + e, where screen maps a NaN or
/// Inf g to 0 when Zero and keeps it otherwise, and the block's absmax key taken on the way;
/// prefetch(j) once per 16 elements.
template <bool Zero>
COMMPRESS_FORCEINLINE screened_sum add_screened(const float* COMMPRESS_RESTRICT g,
                                                const float* COMMPRESS_RESTRICT e, std::size_t m,
                                                float* COMMPRESS_RESTRICT h,
                                                prefetch_stream prefetch) {
  std::uint32_t nonfinite = 0;
  std::size_t j = 0;
#if defined(COMMPRESS_CPU_AVX512)
  COMMPRESS_AVX512_BEGIN
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  __m512i most = _mm512_setzero_si512();
  __mmask16 any_nonfinite = 0;
  for (; j + 16 <= m; j += 16) {
    prefetch(j);
    __m512 gv = _mm512_loadu_ps(g + j);
    if constexpr (Zero) {
      const __mmask16 nf =
          _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(gv), magnitude), inf);
      gv = _mm512_mask_mov_ps(gv, nf, _mm512_setzero_ps());
      any_nonfinite = _kor_mask16(any_nonfinite, nf);
    }
    const __m512 hv = _mm512_add_ps(gv, _mm512_loadu_ps(e + j));
    _mm512_storeu_ps(h + j, hv);
    most = _mm512_max_epu32(most, _mm512_and_si512(_mm512_castps_si512(hv), magnitude));
  }
  const std::uint32_t vector_max = _mm512_reduce_max_epu32(most);
  const bool vector_nonfinite = Zero ? any_nonfinite != 0 : vector_max >= 0x7f800000u;
  COMMPRESS_AVX512_END
#elif defined(COMMPRESS_CPU_AVX2)
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
  __m256i most = _mm256_setzero_si256();
  __m256i any_nonfinite = _mm256_setzero_si256();
  for (; j + 16 <= m; j += 16) {
    prefetch(j);
    for (std::size_t k = j; k < j + 16; k += 8) {
      __m256 gv = _mm256_loadu_ps(g + k);
      if constexpr (Zero) {
        const __m256i nf =
            _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(gv), magnitude), max_finite);
        gv = _mm256_andnot_ps(_mm256_castsi256_ps(nf), gv);
        any_nonfinite = _mm256_or_si256(any_nonfinite, nf);
      }
      const __m256 hv = _mm256_add_ps(gv, _mm256_loadu_ps(e + k));
      _mm256_storeu_ps(h + k, hv);
      most = _mm256_max_epu32(most, _mm256_and_si256(_mm256_castps_si256(hv), magnitude));
    }
  }
  const std::uint32_t vector_max = reduce_max_epu32(most);
  const bool vector_nonfinite =
      Zero ? !_mm256_testz_si256(any_nonfinite, any_nonfinite) : vector_max >= 0x7f800000u;
#else
  (void)prefetch;
  constexpr std::uint32_t vector_max = 0;
  constexpr bool vector_nonfinite = false;
#endif
  // The vector loops count NaN/Inf g only when there is something to count: without Zero, a
  // NaN or Inf g makes its h non-finite, so a finite vector_max proves there is none.
  if (vector_nonfinite)
    for (std::size_t i = 0; i < j; ++i)
      nonfinite += (commpress::detail::float_to_bits(g[i]) & 0x7fffffffu) >= 0x7f800000u ? 1u : 0u;
  const std::size_t rest = j;
  for (; j < m; ++j) {
    std::uint32_t bits;
    std::memcpy(&bits, g + j, 4);
    const bool nf = (bits & 0x7fffffffu) >= 0x7f800000u;
    nonfinite += nf ? 1u : 0u;
    h[j] = (Zero && nf ? 0.0f : g[j]) + e[j];
  }
  const std::uint32_t rest_max = max_magnitude_bits(h + rest, m - rest);
  return {nonfinite, rest_max > vector_max ? rest_max : vector_max};
}

/// Makes non-temporal stores visible before the kernel returns.
COMMPRESS_FORCEINLINE void streaming_store_fence() {
#if defined(COMMPRESS_CPU_CODES64)
  _mm_sfence();
#endif
}

/// One pass of the sign codec over a group of m fp32 elements: writes the m sign bits
/// (x < 0 after screening, packed LSB first from `bits`, whose first element is bit 0 of
/// bits[0]) and returns the canonical_chunked_sum (core/canonical_sum.hpp) of the terms |x|
/// (Rms: x * x, exact in double), in exactly that order: 32 double lanes per chunk of
/// canonical_chunk terms, lane j taking the terms i % 32 == j in increasing i, a fixed tree
/// over the lanes, and the same over the chunk sums. Zero: NaN/Inf count as 0
/// (nonfinite_policy::zero_and_count). Adds the group's NaN/Inf count to `bad`. prefetch(i) once
/// per 16 elements.
template <bool Rms, bool Zero>
double sign_group(const float* COMMPRESS_RESTRICT x, std::uint64_t m,
                  unsigned char* COMMPRESS_RESTRICT bits, std::size_t& bad,
                  prefetch_stream prefetch = {}) {
  constexpr std::uint64_t chunk = 32768; // canonical_chunk
  const auto tree = [](double(&lane)[32]) {
    for (unsigned w = 16; w > 0; w /= 2)
      for (unsigned j = 0; j < w; ++j)
        lane[j] += lane[j + w];
    return lane[0];
  };
  double outer[32] = {};
  std::uint64_t chunks = 0;
  std::uint32_t nonfinite = 0;
  for (std::uint64_t first = 0; first < m; first += chunk, ++chunks) {
    const std::uint64_t len = m - first < chunk ? m - first : chunk;
    const float* p = x + first;
    unsigned char* out = bits + first / 8;
    double lane[32] = {};
    std::uint64_t i = 0;
    std::uint32_t nf_lanes[32] = {};
    for (; i + 32 <= len; i += 32) {
      prefetch(first + i);
      prefetch(first + i + 16);
      alignas(64) float v[32];
      for (unsigned j = 0; j < 32; ++j) {
        std::uint32_t u;
        std::memcpy(&u, p + i + j, 4);
        const std::uint32_t nf = (u & 0x7fffffffu) >= 0x7f800000u ? 1u : 0u;
        nf_lanes[j] += nf;
        v[j] = Zero && nf != 0 ? 0.0f : p[i + j];
      }
      for (unsigned j = 0; j < 32; ++j) {
        const double t = static_cast<double>(v[j]);
        lane[j] += Rms ? t * t : static_cast<double>(commpress::detail::abs(v[j]));
      }
      // The 32 bits x < 0 (so -0 and NaN give 0), least significant first.
      std::uint32_t word = 0;
#if defined(__AVX512F__)
      const __m512 zero = _mm512_setzero_ps();
      word =
          static_cast<std::uint32_t>(_mm512_cmp_ps_mask(_mm512_load_ps(v), zero, _CMP_LT_OQ)) |
          static_cast<std::uint32_t>(_mm512_cmp_ps_mask(_mm512_load_ps(v + 16), zero, _CMP_LT_OQ))
              << 16;
#elif defined(__SSE2__)
      for (unsigned q = 0; q < 8; ++q)
        word |= static_cast<std::uint32_t>(
                    _mm_movemask_ps(_mm_cmplt_ps(_mm_load_ps(v + 4 * q), _mm_setzero_ps())))
                << (4 * q);
#else
      for (unsigned q = 0; q < 32; ++q)
        word |= (v[q] < 0.0f ? 1u : 0u) << q;
#endif
      std::memcpy(out + i / 8, &word, 4); // little-endian host (element_io.hpp)
    }
    for (std::uint32_t c : nf_lanes)
      nonfinite += c;
    for (; i < len; i += 8) { // fewer than 32 left: the same terms, 8 (or fewer) at a time
      const unsigned cnt = len - i < 8 ? static_cast<unsigned>(len - i) : 8u;
      unsigned byte = 0;
      for (unsigned q = 0; q < cnt; ++q) {
        float v = p[i + q];
        const bool nf = !commpress::detail::is_finite(v);
        nonfinite += nf ? 1u : 0u;
        if (Zero && nf)
          v = 0.0f;
        const double t = static_cast<double>(v);
        lane[(i + q) % 32] += Rms ? t * t : static_cast<double>(commpress::detail::abs(v));
        byte |= (v < 0.0f ? 1u : 0u) << q;
      }
      out[i / 8] = static_cast<unsigned char>(byte);
    }
    outer[chunks % 32] += tree(lane);
  }
  bad += nonfinite;
  return tree(outer);
}

/// Cast of n fp32 to bf16 (Bf16) or fp16 wire codes at `out`, each as to_bfloat16 / to_half of
/// the screened value (Zero: NaN/Inf become 0). Returns the number of NaN/Inf inputs. The bf16
/// rounding is integer arithmetic and vectorizes as written; fp16 uses F16C's vcvtps2ph when
/// the flags enable it (IEEE round-to-nearest-even, the same as float_bits_to_half_bits except
/// for NaN, which is patched to 0x7fff). prefetch(i) once per 16 elements where the AVX-512 or
/// AVX2 loops run. Not inlined: inside encode() GCC 12 loses the restrict qualifiers and runs the
/// scalar version of the bf16 loop.
#if defined(COMMPRESS_CPU_AVX512)
COMMPRESS_AVX512_BEGIN
/// The 16 codes of x[0..16) (the AVX-512 body of cast_encode); adds their NaN/Inf count to bad.
template <bool Bf16, bool Zero>
COMMPRESS_FORCEINLINE __m256i cast_code16(const float* x, std::size_t& bad) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  __m512i u = _mm512_loadu_si512(x);
  const __m512i a = _mm512_and_si512(u, abs_mask);
  const __mmask16 nf = _mm512_cmpge_epu32_mask(a, inf);
  const __mmask16 nan = Zero ? __mmask16{0} : _mm512_cmpgt_epu32_mask(a, inf);
  bad += static_cast<std::size_t>(std::popcount(static_cast<unsigned>(nf)));
  if constexpr (Zero)
    u = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nf), u);
  __m256i code;
  if constexpr (Bf16) { // the integer rounding of float_bits_to_bf16_bits
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    code = _mm512_cvtepi32_epi16(r);
  } else {
    code = _mm512_cvtps_ph(_mm512_castsi512_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  return _mm256_mask_mov_epi16(code, nan, _mm256_set1_epi16(0x7fff));
}
COMMPRESS_AVX512_END
#endif

template <bool Bf16, bool Zero>
[[gnu::noinline]] inline std::size_t cast_encode(const float* COMMPRESS_RESTRICT x, std::size_t n,
                                                 unsigned char* COMMPRESS_RESTRICT out,
                                                 prefetch_stream prefetch = {}) {
  std::size_t bad = 0;
  std::size_t i = 0;
#if defined(COMMPRESS_CPU_AVX512)
  COMMPRESS_AVX512_BEGIN
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i),
                        cast_code16<Bf16, Zero>(x + i, bad));
  }
  COMMPRESS_AVX512_END
#elif defined(COMMPRESS_CPU_AVX2)
  if constexpr (Bf16) { // cast_code16's operations, eight lanes at a time
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const auto code8 = [&](const float* v) { // 8 codes in the low halves of int32 lanes
      __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
      const __m256i a = _mm256_and_si256(u, abs_mask);
      const __m256i nf = _mm256_cmpgt_epi32(a, max_finite);
      bad += static_cast<std::size_t>(
          std::popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(nf)))));
      if constexpr (Zero)
        u = _mm256_andnot_si256(nf, u);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
      if constexpr (Zero)
        return r;
      return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fff), _mm256_cmpgt_epi32(a, inf));
    };
    for (; i + 16 <= n; i += 16) {
      prefetch(i);
      const __m256i codes = _mm256_packus_epi32(code8(x + i), code8(x + i + 8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i),
                          _mm256_permute4x64_epi64(codes, _MM_SHUFFLE(3, 1, 2, 0)));
    }
  }
#else
  (void)prefetch;
#endif
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (!Bf16) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m128i canonical_nan = _mm_set1_epi16(0x7fff);
    for (; i + 8 <= n; i += 8) {
#if !defined(COMMPRESS_CPU_AVX512)
      if (i % 16 == 0)
        prefetch(i);
#endif
      __m256 v = _mm256_loadu_ps(x + i);
      const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
      const __m256i nf = _mm256_cmpgt_epi32(a, max_finite);
      bad += static_cast<std::size_t>(
          std::popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(nf)))));
      if constexpr (Zero)
        v = _mm256_andnot_ps(_mm256_castsi256_ps(nf), v);
      __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i nan = _mm256_cmpgt_epi32(Zero ? _mm256_setzero_si256() : a, inf);
      const __m128i nan16 =
          _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
      h = _mm_blendv_epi8(h, canonical_nan, nan16);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    }
  }
#endif
  if constexpr (Bf16) {
    // float_bits_to_bf16_bits without its early return, and the NaN/Inf count in a second loop
    // over the same (L1-resident) chunk: GCC 12 vectorizes neither with both in one loop.
    while (i < n) {
      const std::size_t end = n - i < 2048 ? n : i + 2048;
      for (std::size_t j = i; j < end; ++j) {
        std::uint32_t u;
        std::memcpy(&u, x + j, 4);
        const std::uint32_t a = u & 0x7fffffffu;
        if constexpr (Zero)
          u = a >= 0x7f800000u ? 0u : u;
        const std::uint32_t r =
            (Zero || a <= 0x7f800000u) ? (u + 0x7fffu + ((u >> 16) & 1u)) >> 16 : 0x7fffu;
        const auto code = static_cast<std::uint16_t>(r);
        std::memcpy(out + 2 * j, &code, 2);
      }
      std::uint32_t nonfinite = 0;
      for (std::size_t j = i; j < end; ++j) {
        std::uint32_t u;
        std::memcpy(&u, x + j, 4);
        nonfinite += (u & 0x7fffffffu) >= 0x7f800000u ? 1u : 0u;
      }
      bad += nonfinite;
      i = end;
    }
  } else {
    for (; i < n; ++i) {
      std::uint32_t u;
      std::memcpy(&u, x + i, 4);
      const bool nf = (u & 0x7fffffffu) >= 0x7f800000u;
      bad += nf ? 1u : 0u;
      if (Zero && nf)
        u = 0;
      const std::uint16_t code = commpress::detail::float_bits_to_half_bits(u);
      std::memcpy(out + 2 * i, &code, 2);
    }
  }
  return bad;
}

#if defined(COMMPRESS_CPU_AVX512) && defined(COMMPRESS_CRC32C_STREAMING)
#define COMMPRESS_CPU_CAST_STREAMED 1
/// Elements of one cast_encode_streamed call: one payload checksum chunk of codes.
inline constexpr std::size_t cast_streamed_elements = format::checksum_chunk_bytes / 2;

/// cast_encode of cast_streamed_elements elements into a 64-byte aligned `out`, whose codes go
/// to memory with non-temporal stores and into `crc` (a fresh crc32c_streaming) from the
/// registers, so the checksum chunk is neither read back nor owned in the cache before it is
/// written (the cast row of bench/README.md). prefetch(i) once per 16 elements. Returns the NaN/Inf
/// count.
COMMPRESS_AVX512_BEGIN
template <bool Bf16, bool Zero>
[[gnu::noinline]] inline std::size_t
cast_encode_streamed(const float* COMMPRESS_RESTRICT x, unsigned char* COMMPRESS_RESTRICT out,
                     prefetch_stream prefetch, commpress::detail::crc32c_streaming& crc) {
  std::size_t bad = 0;
  const auto codes32 = [&bad, x](std::size_t i) { // 64 bytes of codes of x[i..i + 32)
    const __m256i lo = cast_code16<Bf16, Zero>(x + i, bad);
    const __m256i hi = cast_code16<Bf16, Zero>(x + i + 16, bad);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  };
  for (std::size_t i = 0; i < cast_streamed_elements; i += 128) {
    for (std::size_t k = 0; k < 128; k += 16)
      prefetch(i + k);
    const __m512i b0 = codes32(i), b1 = codes32(i + 32), b2 = codes32(i + 64), b3 = codes32(i + 96);
    auto* o = reinterpret_cast<__m512i*>(out + 2 * i);
    _mm512_stream_si512(o, b0);
    _mm512_stream_si512(o + 1, b1);
    _mm512_stream_si512(o + 2, b2);
    _mm512_stream_si512(o + 3, b3);
    crc.append(b0, b1, b2, b3);
  }
  return bad;
}
COMMPRESS_AVX512_END
#endif

/// Decodes n bf16 (Bf16) or fp16 wire codes: out = value, or out += weight * value when
/// Accumulate (two roundings and a canonical NaN, as decode_accumulate's add_rn and mul_rn). fp16
/// uses F16C's vcvtph2ps when enabled (exact), with NaN codes rebuilt by half_bits_to_float_bits'
/// rule so signalling NaNs keep their bits.
template <bool Bf16, bool Accumulate>
inline void cast_decode(const unsigned char* COMMPRESS_RESTRICT in, std::size_t n,
                        float* COMMPRESS_RESTRICT out, float weight) {
  std::size_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (!Bf16) {
    const __m256i exp_mask = _mm256_set1_epi32(0x7c00);
    const __m256i man_mask = _mm256_set1_epi32(0x3ff);
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
      __m256 v = _mm256_cvtph_ps(h);
      const __m256i w = _mm256_cvtepu16_epi32(h);
      const __m256i is_nan = _mm256_andnot_si256(
          _mm256_cmpeq_epi32(_mm256_and_si256(w, man_mask), _mm256_setzero_si256()),
          _mm256_cmpeq_epi32(_mm256_and_si256(w, exp_mask), exp_mask));
      const __m256i nan_bits = _mm256_or_si256(
          _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                          _mm256_set1_epi32(0x7f800000)),
          _mm256_slli_epi32(_mm256_and_si256(w, man_mask), 13));
      v = _mm256_blendv_ps(v, _mm256_castsi256_ps(nan_bits), _mm256_castsi256_ps(is_nan));
      if constexpr (Accumulate) {
        // A NaN product leaves a NaN sum, so one canonicalisation gives add_rn(mul_rn(..))'s bits.
        const __m256 r =
            _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(_mm256_set1_ps(weight), v));
        _mm256_storeu_ps(out + i,
                         _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                                          _mm256_cmp_ps(r, r, _CMP_UNORD_Q)));
      } else {
        _mm256_storeu_ps(out + i, v);
      }
    }
  }
#endif
  for (; i < n; ++i) {
    std::uint16_t code;
    std::memcpy(&code, in + 2 * i, 2);
    const std::uint32_t u = Bf16 ? static_cast<std::uint32_t>(code) << 16
                                 : commpress::detail::half_bits_to_float_bits(code);
    float v;
    std::memcpy(&v, &u, 4);
    if constexpr (Accumulate) {
      out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
    } else {
      out[i] = v;
    }
  }
}

} // namespace commpress::cpu::detail
