// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Streaming inner loops of the CPU codecs, written so that the compiler vectorizes them for
/// whatever the user's flags enable (SSE2 by default on x86-64, AVX2 / AVX-512 under -march,
/// NEON on AArch64), with AVX-512 intrinsics only where no portable loop vectorizes (the top-k
/// candidate compress).
///
/// Every kernel computes exactly the per-element expressions of compress/*.hpp, with the same
/// roundings in the same order, so the bytes do not depend on which path ran (issue 7; the
/// codec tests compare against the scalar definitions). What makes them fast (perf.md B2, C5):
/// - reductions over |x| take the maximum of the bit patterns as unsigned integers: for
///   non-negative floats the order is the same, and integer max reductions vectorize where
///   GCC leaves a float `a > m ? a : m` reduction scalar;
/// - codes are computed into a small byte buffer and packed eight at a time with the code
///   width a compile-time constant;
/// - Philox blocks are generated structure-of-arrays, 64 at a time, so the 32x32->64-bit
///   multiplies become vector multiplies.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace commpress::cpu::detail {

/// Elements per chunk of the code kernels: their byte buffers stay in L1.
inline constexpr std::size_t code_chunk = 256;

/// Largest |x| bit pattern (x's bits with the sign cleared) of x[0..n): the key of the largest
/// magnitude, >= 0x7f800000 iff some element is NaN or Inf.
inline std::uint32_t max_magnitude_bits(const float* COMMPRESS_RESTRICT x, std::size_t n) {
  std::uint32_t m[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (unsigned j = 0; j < 16; ++j) {
      std::uint32_t u;
      std::memcpy(&u, x + i + j, 4);
      u &= 0x7fffffffu;
      m[j] = u > m[j] ? u : m[j];
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

/// Asks for the 4 KiB that start at p to be brought into the cache. Blocks of 1024 floats are
/// exactly one page, where the hardware prefetcher stops; fetching the block after next by
/// hand recovers about 1.7x (perf.md B2).
COMMPRESS_FORCEINLINE void prefetch_page(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  const char* c = static_cast<const char*>(p);
  for (unsigned off = 0; off < 4096; off += 64)
    __builtin_prefetch(c + off, 0, 3);
#else
  (void)p;
#endif
}

/// Symmetric nearest-rounding codes of m elements: quantize::encode_nearest with coder
/// {inv, 0}, i.e. clamp(round_half_even(x * inv) + L, 0, 2L), for finite x.
template <unsigned B>
COMMPRESS_FORCEINLINE void sym_codes_nearest(const float* COMMPRESS_RESTRICT x, std::size_t m,
                                             float inv, std::uint8_t* COMMPRESS_RESTRICT codes) {
  constexpr float levels = static_cast<float>((1u << (B - 1)) - 1u);
  constexpr float top = 2.0f * levels;
  constexpr float magic = 12582912.0f; // 1.5 * 2^23, as in round_half_even
  for (std::size_t i = 0; i < m; ++i) {
    const float y = x[i] * inv;
    const float r = (y + magic) - magic;
    float c = r + levels;
    c = c > 0.0f ? c : 0.0f;
    c = c < top ? c : top;
    codes[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(c));
  }
}

/// Symmetric stochastic-rounding codes: quantize::encode_stochastic with coder {inv, 0} and
/// uniform u = uniform_from_bits(words[i]).
template <unsigned B>
COMMPRESS_FORCEINLINE void sym_codes_stochastic(const float* COMMPRESS_RESTRICT x, std::size_t m,
                                                float inv,
                                                const std::uint32_t* COMMPRESS_RESTRICT words,
                                                std::uint8_t* COMMPRESS_RESTRICT codes) {
  constexpr float levels = static_cast<float>((1u << (B - 1)) - 1u);
  constexpr float top = 2.0f * levels;
  constexpr float magic = 12582912.0f;
  for (std::size_t i = 0; i < m; ++i) {
    const float y = x[i] * inv;
    const float r = (y + magic) - magic;
    const float f = r > y ? r - 1.0f : r;
    const float u =
        static_cast<float>(static_cast<std::int32_t>(words[i] >> 8)) * 5.9604644775390625e-08f;
    const float q = u < y - f ? f + 1.0f : f;
    float c = q + levels;
    c = c > 0.0f ? c : 0.0f;
    c = c < top ? c : top;
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

/// Unpacks m codes (m a multiple of 8) from m * B / 8 bytes.
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
    for (std::size_t j = 0; j < m / 4; ++j) {
      c[4 * j] = static_cast<std::uint8_t>(in[j] & 3u);
      c[4 * j + 1] = static_cast<std::uint8_t>((in[j] >> 2) & 3u);
      c[4 * j + 2] = static_cast<std::uint8_t>((in[j] >> 4) & 3u);
      c[4 * j + 3] = static_cast<std::uint8_t>(in[j] >> 6);
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

/// The random words of elements 4 * first_block .. 4 * (first_block + blocks) - 1 at `step`
/// (random_block for each block, in order), blocks <= code_chunk / 4. Philox runs on
/// structure-of-arrays lanes so the compiler vectorizes the rounds across blocks.
inline void philox_words(rng_key key, std::uint64_t step, std::uint64_t first_block,
                         std::size_t blocks, std::uint32_t* COMMPRESS_RESTRICT words) {
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
}

/// Symmetric decoded values of m codes: (code - L) * scale, rounded once (quantize::decode_value).
template <unsigned B>
COMMPRESS_FORCEINLINE void sym_decode(const std::uint8_t* COMMPRESS_RESTRICT c, std::size_t m,
                                      float scale, float* COMMPRESS_RESTRICT out) {
  constexpr std::int32_t offset = (1 << (B - 1)) - 1;
  for (std::size_t i = 0; i < m; ++i)
    out[i] = static_cast<float>(static_cast<std::int32_t>(c[i]) - offset) * scale;
}

/// acc[i] += weight * ((code - L) * scale), each operation rounded once (decode_accumulate).
template <unsigned B>
COMMPRESS_FORCEINLINE void sym_accumulate(const std::uint8_t* COMMPRESS_RESTRICT c, std::size_t m,
                                          float scale, float weight,
                                          float* COMMPRESS_RESTRICT acc) {
  constexpr std::int32_t offset = (1 << (B - 1)) - 1;
  for (std::size_t i = 0; i < m; ++i) {
    const float v = static_cast<float>(static_cast<std::int32_t>(c[i]) - offset) * scale;
    acc[i] = acc[i] + weight * v;
  }
}

/// One pass of the sign codec over a group of m fp32 elements: writes the m sign bits
/// (x < 0 after screening, packed LSB first from `bits`, whose first element is bit 0 of
/// bits[0]) and returns the canonical_chunked_sum (core/canonical_sum.hpp) of the terms |x|
/// (Rms: x * x, exact in double), in exactly that order: 32 double lanes per chunk of
/// canonical_chunk terms, lane j taking the terms i % 32 == j in increasing i, a fixed tree
/// over the lanes, and the same over the chunk sums. Zero: NaN/Inf count as 0
/// (nonfinite_policy::zero_and_count). Adds the group's NaN/Inf count to `bad`.
template <bool Rms, bool Zero>
double sign_group(const float* COMMPRESS_RESTRICT x, std::uint64_t m,
                  unsigned char* COMMPRESS_RESTRICT bits, std::size_t& bad) {
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
/// for NaN, which is patched to 0x7fff). Not inlined: inside encode() GCC 12 loses the restrict
/// qualifiers and runs the scalar version of the bf16 loop.
template <bool Bf16, bool Zero>
[[gnu::noinline]] inline std::size_t cast_encode(const float* COMMPRESS_RESTRICT x, std::size_t n,
                                                 unsigned char* COMMPRESS_RESTRICT out) {
  std::size_t bad = 0;
  std::size_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (!Bf16) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m128i canonical_nan = _mm_set1_epi16(0x7fff);
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
      const __m256i nf = _mm256_cmpgt_epi32(a, max_finite);
      bad += static_cast<std::size_t>(
          __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(nf)))));
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

/// Decodes n bf16 (Bf16) or fp16 wire codes: out = value, or out += weight * value when
/// Accumulate (two roundings, as decode_accumulate). fp16 uses F16C's vcvtph2ps when enabled
/// (exact), with NaN codes rebuilt by half_bits_to_float_bits' rule so signalling NaNs keep
/// their bits.
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
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i),
                                                _mm256_mul_ps(_mm256_set1_ps(weight), v)));
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
      out[i] = out[i] + weight * v;
    } else {
      out[i] = v;
    }
  }
}

/// Rows shorter than this take the nth_element method: sampling does not pay for them.
inline constexpr std::uint64_t sampled_top_k_min_row = 1u << 16;

/// Exact top-k of one fp32 row by a sampled threshold (DGC-style sample, perf.md B3 and C5.5):
/// 1. the keys (|x| bits, screened by the non-finite policy) of about d / 1024 sampled elements
///    give a threshold t0 at a rank that leaves a 3-sigma margin above k;
/// 2. one streaming pass collects the index and (screened) bits of every element whose key is
///    >= t0 into the workspace;
/// 3. std::nth_element over the candidates' keys finds the exact k-th largest key t, and the
///    candidates, in index order, are kept as the tie rule of compress/top_k.hpp says: every
///    key > t, then the lowest-indexed keys == t.
/// Every key >= t is a candidate whenever there are >= k of them, so the set is the same as
/// nth_element over the whole row. Returns false, having called nothing, when the sample missed
/// (fewer than k, or more than a third of the row, collected); the caller then runs the full
/// method. Otherwise calls visit(i, value, kept) for every i in increasing order (value is
/// meaningful only when kept) and adds the row's NaN/Inf count to `bad`.
/// @param ws at least d 32-bit words
template <class Visit>
bool top_k_sampled(const float* COMMPRESS_RESTRICT x, std::uint64_t d, std::uint64_t k,
                   bool zero_nonfinite, std::uint32_t* ws, std::size_t& bad, Visit&& visit) {
  const std::uint64_t cap = d / 3;
  std::uint32_t* const idx = ws;
  std::uint32_t* const val = ws + cap;
  std::uint32_t* const tmp = ws + 2 * cap;
  const auto key_of = [zero_nonfinite](std::uint32_t bits) {
    const std::uint32_t key = bits & 0x7fffffffu;
    return zero_nonfinite && key >= 0x7f800000u ? 0u : key;
  };
  // 1. Sample: one element per stride, jittered within it so periodic data does not alias.
  const std::uint64_t s = std::min<std::uint64_t>(std::max<std::uint64_t>(d / 1024, 1024), cap);
  const std::uint64_t stride = d / s;
  for (std::uint64_t j = 0; j < s; ++j) {
    const std::uint64_t jitter = (j * 0x9E3779B97F4A7C15ull >> 40) % stride;
    std::uint32_t u;
    std::memcpy(&u, x + j * stride + jitter, 4);
    tmp[j] = key_of(u);
  }
  const double expect = static_cast<double>(s) * static_cast<double>(k) / static_cast<double>(d);
  // 3 sigma of the sample count above the k-th key, so the pass rarely collects fewer than k.
  const auto rank = static_cast<std::uint64_t>(expect + 3.0 * std::sqrt(expect) + 2.0);
  if (rank >= s)
    return false;
  std::nth_element(tmp, tmp + rank, tmp + s, std::greater<>{});
  const std::uint32_t t0 = tmp[rank];
  if (t0 == 0)
    return false; // every element would be a candidate

  // 2. One streaming pass: candidates (index, screened bits) with key >= t0.
  const std::uint64_t limit = cap - 16; // room for one unconditional 16-wide store
  std::uint64_t c = 0;
  std::size_t nonfinite = 0;
  std::uint64_t i = 0;
#if defined(__AVX512F__)
  {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i thr = _mm512_set1_epi32(static_cast<int>(t0));
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; i + 16 <= d; i += 16) {
      __m512i v = _mm512_loadu_si512(x + i);
      __m512i key = _mm512_and_si512(v, abs_mask);
      const __mmask16 nf = _mm512_cmpge_epu32_mask(key, inf);
      nonfinite += static_cast<std::size_t>(__builtin_popcount(nf));
      if (zero_nonfinite) {
        v = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nf), v);
        key = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nf), key);
      }
      const __mmask16 hit = _mm512_cmpge_epu32_mask(key, thr);
      if (hit != 0) {
        _mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(hit, index));
        _mm512_storeu_si512(val + c, _mm512_maskz_compress_epi32(hit, v));
        c += static_cast<std::uint64_t>(__builtin_popcount(hit));
        if (c > limit)
          return false;
      }
      index = _mm512_add_epi32(index, sixteen);
    }
  }
#endif
  for (; i < d; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    const bool nf = (u & 0x7fffffffu) >= 0x7f800000u;
    nonfinite += nf ? 1u : 0u;
    if (zero_nonfinite && nf)
      u = 0;
    idx[c] = static_cast<std::uint32_t>(i); // branchless: written always, kept if it passes
    val[c] = u;
    c += (u & 0x7fffffffu) >= t0 ? 1u : 0u;
    if (c > limit)
      return false;
  }
  if (c < k)
    return false;

  // 3. Exact resolve over the candidates.
  for (std::uint64_t j = 0; j < c; ++j)
    tmp[j] = val[j] & 0x7fffffffu;
  std::nth_element(tmp, tmp + (k - 1), tmp + c, std::greater<>{});
  const std::uint32_t t = tmp[k - 1];
  std::uint64_t greater = 0;
  for (std::uint64_t j = 0; j + 1 < k; ++j)
    greater += tmp[j] > t ? 1u : 0u;
  std::uint64_t ties = k - greater;
  std::uint64_t next = 0; // first index not visited yet
  for (std::uint64_t j = 0; j < c; ++j) {
    const std::uint32_t key = val[j] & 0x7fffffffu;
    const bool keep = key > t || (key == t && ties > 0);
    if (!keep)
      continue;
    if (key == t)
      --ties;
    for (; next < idx[j]; ++next)
      visit(next, 0.0f, false);
    float v;
    std::memcpy(&v, val + j, 4);
    visit(next++, v, true);
  }
  for (; next < d; ++next)
    visit(next, 0.0f, false);
  bad += nonfinite;
  return true;
}

} // namespace commpress::cpu::detail
