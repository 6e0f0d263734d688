// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The vector layer in plain C++: a vector is an array of 16 lanes and every operation a loop
/// over them, which the compiler vectorizes for whatever its flags enable (SSE2 on x86-64,
/// NEON on AArch64); min, max, trunc_i32, non-temporal stores, the fp64 lanes and Philox's
/// 64-bit lanes are SSE2 instructions where it is there. Masks are all-ones lanes, as on AVX2, so
/// selects are bit operations and vectorize too. Included by backend/cpu/detail/simd.hpp, which
/// documents the operations.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/backend/cpu/detail/simd/packing.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/cpu_features.hpp"

#if defined(COMMPRESS_SIMD_SSE2)
#include <emmintrin.h>
#endif

namespace commpress::cpu::simd {

inline constexpr std::size_t lanes = 16;

struct vf {
  float v[16];
};
struct vu {
  std::uint32_t v[16];
};
struct vm {
  std::uint32_t v[16]; ///< all-ones lanes where set
};
struct b64 {
  std::uint8_t v[64];
};
struct vh {
  std::uint16_t v[16];
};

#define COMMPRESS_SIMD_LANES(r, expr)                                                              \
  for (std::size_t j = 0; j < lanes; ++j)                                                          \
  r.v[j] = (expr)

// --- memory ----------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf load(const float* p) {
  vf r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
COMMPRESS_FORCEINLINE vu load_u32(const void* p) {
  vu r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
/// table[index] in every lane.
COMMPRESS_FORCEINLINE vf gather(const float* table, vu index) {
  vf r;
  COMMPRESS_SIMD_LANES(r, table[index.v[j]]);
  return r;
}
COMMPRESS_FORCEINLINE void store(float* p, vf a) {
  std::memcpy(p, a.v, sizeof a.v);
}
COMMPRESS_FORCEINLINE void store(void* p, vu a) {
  std::memcpy(p, a.v, sizeof a.v);
}
COMMPRESS_FORCEINLINE void stream(float* p, vf a) {
#if defined(COMMPRESS_SIMD_SSE2)
  for (std::size_t q = 0; q < 4; ++q)
    _mm_stream_ps(p + 4 * q, _mm_loadu_ps(a.v + 4 * q));
#else
  store(p, a);
#endif
}
COMMPRESS_FORCEINLINE void store_where(float* p, vm m, vf a) {
  vu old = load_u32(p);
  vu val;
  std::memcpy(val.v, a.v, sizeof a.v);
  COMMPRESS_SIMD_LANES(old, (val.v[j] & m.v[j]) | (old.v[j] & ~m.v[j]));
  store(static_cast<void*>(p), old);
}

// --- constants -------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf splat(float x) {
  vf r;
  COMMPRESS_SIMD_LANES(r, x);
  return r;
}
COMMPRESS_FORCEINLINE vu splat_u32(std::uint32_t x) {
  vu r;
  COMMPRESS_SIMD_LANES(r, x);
  return r;
}
COMMPRESS_FORCEINLINE vu lane_index() {
  vu r;
  COMMPRESS_SIMD_LANES(r, static_cast<std::uint32_t>(j));
  return r;
}

// --- fp32 ------------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf add(vf a, vf b) {
  vf r;
  COMMPRESS_SIMD_LANES(r, a.v[j] + b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vf sub(vf a, vf b) {
  vf r;
  COMMPRESS_SIMD_LANES(r, a.v[j] - b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vf mul(vf a, vf b) {
  vf r;
  COMMPRESS_SIMD_LANES(r, a.v[j] * b.v[j]);
  return r;
}
// min, max and trunc_i32 are written with SSE2 where it is there: GCC 12 turns their lane loops
// into a compare and branch and a scalar conversion per lane wherever they are inlined into
// the quantize code kernels, and minps, maxps and cvttps2dq are the same operations.

/// b where either is NaN, as minps.
COMMPRESS_FORCEINLINE vf min(vf a, vf b) {
  vf r;
#if defined(COMMPRESS_SIMD_SSE2)
  for (std::size_t q = 0; q < lanes; q += 4)
    _mm_storeu_ps(r.v + q, _mm_min_ps(_mm_loadu_ps(a.v + q), _mm_loadu_ps(b.v + q)));
#else
  COMMPRESS_SIMD_LANES(r, a.v[j] < b.v[j] ? a.v[j] : b.v[j]);
#endif
  return r;
}
/// b where either is NaN, as maxps.
COMMPRESS_FORCEINLINE vf max(vf a, vf b) {
  vf r;
#if defined(COMMPRESS_SIMD_SSE2)
  for (std::size_t q = 0; q < lanes; q += 4)
    _mm_storeu_ps(r.v + q, _mm_max_ps(_mm_loadu_ps(a.v + q), _mm_loadu_ps(b.v + q)));
#else
  COMMPRESS_SIMD_LANES(r, a.v[j] > b.v[j] ? a.v[j] : b.v[j]);
#endif
  return r;
}
COMMPRESS_FORCEINLINE vu bits(vf a) {
  vu r;
  std::memcpy(r.v, a.v, sizeof a.v);
  return r;
}
COMMPRESS_FORCEINLINE vf from_bits(vu a) {
  vf r;
  std::memcpy(r.v, a.v, sizeof a.v);
  return r;
}
COMMPRESS_FORCEINLINE vu select(vm m, vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, (a.v[j] & m.v[j]) | (b.v[j] & ~m.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vf select(vm m, vf a, vf b) {
  return from_bits(select(m, bits(a), bits(b)));
}
COMMPRESS_FORCEINLINE vu clear(vm m, vu a) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] & ~m.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vf clear(vm m, vf a) {
  return from_bits(clear(m, bits(a)));
}
COMMPRESS_FORCEINLINE vu trunc_i32(vf a) {
  vu r;
#if defined(COMMPRESS_SIMD_SSE2)
  for (std::size_t q = 0; q < lanes; q += 4)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.v + q), _mm_cvttps_epi32(_mm_loadu_ps(a.v + q)));
#else
  COMMPRESS_SIMD_LANES(r, static_cast<std::uint32_t>(static_cast<std::int32_t>(a.v[j])));
#endif
  return r;
}
COMMPRESS_FORCEINLINE vf to_float_i32(vu a) {
  vf r;
  COMMPRESS_SIMD_LANES(r, static_cast<float>(static_cast<std::int32_t>(a.v[j])));
  return r;
}

// --- 32-bit integers -------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vu add_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] + b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vu sub_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] - b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vu and_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] & b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vu or_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] | b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vu xor_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] ^ b.v[j]);
  return r;
}
template <unsigned N> COMMPRESS_FORCEINLINE vu srl(vu a) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] >> N);
  return r;
}
COMMPRESS_FORCEINLINE vu srl_by(vu a, vu count) {
  vu r;
  COMMPRESS_SIMD_LANES(r, count.v[j] < 32 ? a.v[j] >> count.v[j] : 0u);
  return r;
}
template <unsigned N> COMMPRESS_FORCEINLINE vu sll(vu a) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] << N);
  return r;
}
COMMPRESS_FORCEINLINE vu max_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] > b.v[j] ? a.v[j] : b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vu min_u32(vu a, vu b) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] < b.v[j] ? a.v[j] : b.v[j]);
  return r;
}
#if defined(COMMPRESS_SIMD_SSE2)
// SSE2 has no 32-bit max or min: a compare and a select, written out, since whether GCC
// vectorizes the lane loops below depends on the code they are inlined into.
COMMPRESS_FORCEINLINE __m128i sse2_max_i32(__m128i a, __m128i b) {
  const __m128i a_larger = _mm_cmpgt_epi32(a, b);
  return _mm_or_si128(_mm_and_si128(a_larger, a), _mm_andnot_si128(a_larger, b));
}
COMMPRESS_FORCEINLINE __m128i sse2_min_i32(__m128i a, __m128i b) {
  const __m128i a_larger = _mm_cmpgt_epi32(a, b);
  return _mm_or_si128(_mm_and_si128(a_larger, b), _mm_andnot_si128(a_larger, a));
}
COMMPRESS_FORCEINLINE __m128i sse2_quarter(const vu& a, std::size_t q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.v + 4 * q));
}
#endif
COMMPRESS_FORCEINLINE vu max_i32(vu a, vu b) {
  vu r;
#if defined(COMMPRESS_SIMD_SSE2)
  for (std::size_t q = 0; q < 4; ++q)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.v + 4 * q),
                     sse2_max_i32(sse2_quarter(a, q), sse2_quarter(b, q)));
#else
  COMMPRESS_SIMD_LANES(
      r, static_cast<std::int32_t>(a.v[j]) > static_cast<std::int32_t>(b.v[j]) ? a.v[j] : b.v[j]);
#endif
  return r;
}
COMMPRESS_FORCEINLINE vu min_i32(vu a, vu b) {
  vu r;
#if defined(COMMPRESS_SIMD_SSE2)
  for (std::size_t q = 0; q < 4; ++q)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.v + 4 * q),
                     sse2_min_i32(sse2_quarter(a, q), sse2_quarter(b, q)));
#else
  COMMPRESS_SIMD_LANES(
      r, static_cast<std::int32_t>(a.v[j]) < static_cast<std::int32_t>(b.v[j]) ? a.v[j] : b.v[j]);
#endif
  return r;
}

// --- comparisons and masks -------------------------------------------------------------------
COMMPRESS_FORCEINLINE std::uint32_t all_ones_if(bool c) {
  return 0u - static_cast<std::uint32_t>(c);
}
COMMPRESS_FORCEINLINE vm lt(vf a, vf b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] < b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm gt(vf a, vf b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] > b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm is_nan(vf a) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] != a.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm lt_u32(vu a, vu b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] < b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm le_u32(vu a, vu b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] <= b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm gt_u32(vu a, vu b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] > b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm ge_u32(vu a, vu b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] >= b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm eq_u32(vu a, vu b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, all_ones_if(a.v[j] == b.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vm gt_i32(vu a, vu b) {
  vm r;
  COMMPRESS_SIMD_LANES(
      r, all_ones_if(static_cast<std::int32_t>(a.v[j]) > static_cast<std::int32_t>(b.v[j])));
  return r;
}
COMMPRESS_FORCEINLINE vm and_mask(vm a, vm b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, a.v[j] & b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vm or_mask(vm a, vm b) {
  vm r;
  COMMPRESS_SIMD_LANES(r, a.v[j] | b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vm no_lanes() {
  vm r;
  COMMPRESS_SIMD_LANES(r, 0u);
  return r;
}
COMMPRESS_FORCEINLINE vm all_lanes() {
  vm r;
  COMMPRESS_SIMD_LANES(r, ~0u);
  return r;
}
/// Lane j of m as bit j.
COMMPRESS_FORCEINLINE std::uint32_t mask_bits(vm m) {
#if defined(COMMPRESS_SIMD_SSE2)
  std::uint32_t b = 0;
  for (unsigned q = 0; q < 4; ++q)
    b |= static_cast<std::uint32_t>(_mm_movemask_ps(
             _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m.v + 4 * q)))))
         << (4 * q);
  return b;
#else
  std::uint32_t b = 0;
  for (std::size_t j = 0; j < lanes; ++j)
    b |= (m.v[j] & 1u) << j;
  return b;
#endif
}
/// The mask whose lane j is bit j of b.
COMMPRESS_FORCEINLINE vm mask_from_bits(std::uint32_t b) {
  vm r;
  for (std::size_t j = 0; j < lanes; ++j)
    r.v[j] = all_ones_if(((b >> j) & 1u) != 0);
  return r;
}
COMMPRESS_FORCEINLINE unsigned count(vm m) {
  unsigned c = 0;
  for (std::size_t j = 0; j < lanes; ++j)
    c += m.v[j] & 1u;
  return c;
}
COMMPRESS_FORCEINLINE bool any(vm m) {
  std::uint32_t a = 0;
  for (std::size_t j = 0; j < lanes; ++j)
    a |= m.v[j];
  return a != 0;
}
COMMPRESS_FORCEINLINE vu count_lanes(vu a, vm m) {
  vu r;
  COMMPRESS_SIMD_LANES(r, a.v[j] - m.v[j]);
  return r;
}

// --- reductions ------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE std::uint32_t reduce_max_u32(vu a) {
  std::uint32_t r = a.v[0];
  for (std::size_t j = 1; j < lanes; ++j)
    r = a.v[j] > r ? a.v[j] : r;
  return r;
}
COMMPRESS_FORCEINLINE std::uint32_t reduce_min_u32(vu a) {
  std::uint32_t r = a.v[0];
  for (std::size_t j = 1; j < lanes; ++j)
    r = a.v[j] < r ? a.v[j] : r;
  return r;
}
COMMPRESS_FORCEINLINE std::int32_t reduce_max_i32(vu a) {
#if defined(COMMPRESS_SIMD_SSE2)
  __m128i m = sse2_max_i32(sse2_max_i32(sse2_quarter(a, 0), sse2_quarter(a, 1)),
                           sse2_max_i32(sse2_quarter(a, 2), sse2_quarter(a, 3)));
  m = sse2_max_i32(m, _mm_shuffle_epi32(m, 0x4e)); // lanes 2, 3, 0, 1
  m = sse2_max_i32(m, _mm_shuffle_epi32(m, 0xb1)); // lanes 1, 0, 3, 2
  return _mm_cvtsi128_si32(m);
#else
  auto r = static_cast<std::int32_t>(a.v[0]);
  for (std::size_t j = 1; j < lanes; ++j)
    r = static_cast<std::int32_t>(a.v[j]) > r ? static_cast<std::int32_t>(a.v[j]) : r;
  return r;
#endif
}
COMMPRESS_FORCEINLINE std::int32_t reduce_min_i32(vu a) {
  auto r = static_cast<std::int32_t>(a.v[0]);
  for (std::size_t j = 1; j < lanes; ++j)
    r = static_cast<std::int32_t>(a.v[j]) < r ? static_cast<std::int32_t>(a.v[j]) : r;
  return r;
}
COMMPRESS_FORCEINLINE std::uint64_t reduce_add_u32(vu a) {
  std::uint64_t s = 0;
  for (std::uint32_t v : a.v)
    s += v;
  return s;
}

// --- 8-bit codes -----------------------------------------------------------------------------
COMMPRESS_FORCEINLINE b64 narrow_u8(const vu (&c)[4]) {
  b64 r;
  for (std::size_t q = 0; q < 4; ++q)
    for (std::size_t j = 0; j < lanes; ++j)
      r.v[16 * q + j] = static_cast<std::uint8_t>(c[q].v[j]);
  return r;
}
COMMPRESS_FORCEINLINE b64 narrow_i8(const vu (&c)[4]) {
  return narrow_u8(c);
}
COMMPRESS_FORCEINLINE void store_bytes(void* p, const b64& b) {
  std::memcpy(p, b.v, 64);
}
COMMPRESS_FORCEINLINE b64 load_bytes(const void* p) {
  b64 r;
  std::memcpy(r.v, p, 64);
  return r;
}
/// The nonzero bytes of b, byte j as bit j. Eight bytes at a time: each byte's high bit set
/// where it is nonzero, then the eight high bits gathered by one multiply (bit 8i + 7 lands on
/// bit 56 + i, and no two partial products meet in the top byte).
COMMPRESS_FORCEINLINE std::uint64_t nonzero_bytes(const b64& b) {
  constexpr std::uint64_t low7 = 0x7f7f7f7f7f7f7f7fu;
  std::uint64_t m = 0;
  for (unsigned k = 0; k < 64; k += 8) {
    // Byte i as bits 8i to 8i + 7: the CPU backend's hosts are little-endian.
    std::uint64_t w = 0;
    std::memcpy(&w, b.v + k, 8);
    const std::uint64_t high = (((w & low7) + low7) | w) & ~low7;
    m |= ((high >> 7) * 0x0102040810204080u) >> 56 << k;
  }
  return m;
}
COMMPRESS_FORCEINLINE vu widen_u8(const b64& b, unsigned q) {
  vu r;
  COMMPRESS_SIMD_LANES(r, b.v[16 * q + j]);
  return r;
}
COMMPRESS_FORCEINLINE vu load_i8(const std::int8_t* p) {
  vu r;
  COMMPRESS_SIMD_LANES(r, static_cast<std::uint32_t>(static_cast<std::int32_t>(p[j])));
  return r;
}

/// Packs 64 codes (each < 2^B) into 8 B bytes at out (B = 0: `bits` wide). The widths 4 and 2
/// pack pairwise, which vectorizes.
template <unsigned B>
COMMPRESS_FORCEINLINE void store_packed(const b64& b, unsigned char* out, unsigned bits = B) {
  if constexpr (B == 8) {
    std::memcpy(out, b.v, 64);
  } else if constexpr (B == 4) {
    for (std::size_t j = 0; j < 32; ++j)
      out[j] = static_cast<unsigned char>(b.v[2 * j] | (b.v[2 * j + 1] << 4));
  } else if constexpr (B == 2) {
    for (std::size_t j = 0; j < 16; ++j)
      out[j] = static_cast<unsigned char>(b.v[4 * j] | (b.v[4 * j + 1] << 2) |
                                          (b.v[4 * j + 2] << 4) | (b.v[4 * j + 3] << 6));
  } else {
    pack_bytes<B>(b.v, bits, out);
  }
}

/// The 64 codes packed as store_packed<B> writes them. 2-bit codes unpack as two two-way
/// splits: compilers vectorize a two-way split but leave a four-way one as byte stores.
template <unsigned B>
COMMPRESS_FORCEINLINE b64 load_packed(const unsigned char* in, unsigned bits = B) {
  b64 r;
  if constexpr (B == 8) {
    std::memcpy(r.v, in, 64);
  } else if constexpr (B == 4) {
    for (std::size_t j = 0; j < 32; ++j) {
      r.v[2 * j] = static_cast<std::uint8_t>(in[j] & 15u);
      r.v[2 * j + 1] = static_cast<std::uint8_t>(in[j] >> 4);
    }
  } else if constexpr (B == 2) {
    std::uint8_t nibble[32];
    for (std::size_t j = 0; j < 16; ++j) {
      nibble[2 * j] = static_cast<std::uint8_t>(in[j] & 15u);
      nibble[2 * j + 1] = static_cast<std::uint8_t>(in[j] >> 4);
    }
    for (std::size_t j = 0; j < 32; ++j) {
      r.v[2 * j] = static_cast<std::uint8_t>(nibble[j] & 3u);
      r.v[2 * j + 1] = static_cast<std::uint8_t>(nibble[j] >> 2);
    }
  } else {
    unpack_bytes<B>(in, bits, r.v);
  }
  return r;
}

// --- 16-bit codes ----------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vh narrow_u16(vu a) {
  vh r;
  COMMPRESS_SIMD_LANES(r, static_cast<std::uint16_t>(a.v[j]));
  return r;
}
COMMPRESS_FORCEINLINE vh splat_u16(std::uint16_t x) {
  vh r;
  COMMPRESS_SIMD_LANES(r, x);
  return r;
}
COMMPRESS_FORCEINLINE vh select(vm m, vh a, vh b) {
  vh r;
  COMMPRESS_SIMD_LANES(r, static_cast<std::uint16_t>((a.v[j] & m.v[j]) | (b.v[j] & ~m.v[j])));
  return r;
}
COMMPRESS_FORCEINLINE void store(void* p, vh a) {
  std::memcpy(p, a.v, sizeof a.v);
}
COMMPRESS_FORCEINLINE vu load_u16(const void* p) {
  std::uint16_t h[16];
  std::memcpy(h, p, sizeof h);
  vu r;
  COMMPRESS_SIMD_LANES(r, h[j]);
  return r;
}

// --- compaction ------------------------------------------------------------------------------
/// Stores the lanes of a selected by m at dst[0..count) in lane order and returns count,
/// writing nothing else. Lane by lane over the selected lanes only: without a compress
/// instruction, a store per lane costs more than the selections callers make (a top-k's
/// candidates are a few lanes in most vectors, and none in many).
COMMPRESS_FORCEINLINE unsigned compress_store_exact(void* dst, vm m, vu a) {
  unsigned k = 0;
  for (std::uint32_t b = mask_bits(m); b != 0; b &= b - 1)
    std::memcpy(static_cast<unsigned char*>(dst) + 4 * k++, &a.v[std::countr_zero(b)], 4);
  return k;
}
/// As compress_store_exact (the vector layers' compress_store may write dst[0..lanes)).
COMMPRESS_FORCEINLINE unsigned compress_store(std::uint32_t* dst, vm m, vu a) {
  return compress_store_exact(dst, m, a);
}

// --- fp64 lanes: canonical sums --------------------------------------------------------------
#if defined(COMMPRESS_SIMD_SSE2)
// Written out in SSE2, as GCC leaves these conversions scalar where they are inlined.
struct vd {
  __m128d v[4];
};
inline constexpr std::size_t lanes_f64 = 8;

COMMPRESS_FORCEINLINE vd zero_f64() {
  const __m128d z = _mm_setzero_pd();
  return {{z, z, z, z}};
}
COMMPRESS_FORCEINLINE vd sse2_widen(const vf& a, std::size_t first) {
  const __m128 q0 = _mm_loadu_ps(a.v + first);
  const __m128 q1 = _mm_loadu_ps(a.v + first + 4);
  return {{_mm_cvtps_pd(q0), _mm_cvtps_pd(_mm_movehl_ps(q0, q0)), _mm_cvtps_pd(q1),
           _mm_cvtps_pd(_mm_movehl_ps(q1, q1))}};
}
COMMPRESS_FORCEINLINE vd widen_low(vf a) {
  return sse2_widen(a, 0);
}
COMMPRESS_FORCEINLINE vd widen_high(vf a) {
  return sse2_widen(a, lanes_f64);
}
COMMPRESS_FORCEINLINE vd add_f64(vd a, vd b) {
  return {{_mm_add_pd(a.v[0], b.v[0]), _mm_add_pd(a.v[1], b.v[1]), _mm_add_pd(a.v[2], b.v[2]),
           _mm_add_pd(a.v[3], b.v[3])}};
}
COMMPRESS_FORCEINLINE vd mul_f64(vd a, vd b) {
  return {{_mm_mul_pd(a.v[0], b.v[0]), _mm_mul_pd(a.v[1], b.v[1]), _mm_mul_pd(a.v[2], b.v[2]),
           _mm_mul_pd(a.v[3], b.v[3])}};
}
COMMPRESS_FORCEINLINE void store(double* p, vd a) {
  for (std::size_t q = 0; q < 4; ++q)
    _mm_storeu_pd(p + 2 * q, a.v[q]);
}
#else
struct vd {
  double v[8];
};
inline constexpr std::size_t lanes_f64 = 8;

COMMPRESS_FORCEINLINE vd zero_f64() {
  return {};
}
COMMPRESS_FORCEINLINE vd widen_low(vf a) {
  vd r;
  for (std::size_t j = 0; j < lanes_f64; ++j)
    r.v[j] = a.v[j];
  return r;
}
COMMPRESS_FORCEINLINE vd widen_high(vf a) {
  vd r;
  for (std::size_t j = 0; j < lanes_f64; ++j)
    r.v[j] = a.v[lanes_f64 + j];
  return r;
}
COMMPRESS_FORCEINLINE vd add_f64(vd a, vd b) {
  vd r;
  for (std::size_t j = 0; j < lanes_f64; ++j)
    r.v[j] = a.v[j] + b.v[j];
  return r;
}
COMMPRESS_FORCEINLINE vd mul_f64(vd a, vd b) {
  vd r;
  for (std::size_t j = 0; j < lanes_f64; ++j)
    r.v[j] = a.v[j] * b.v[j];
  return r;
}
COMMPRESS_FORCEINLINE void store(double* p, vd a) {
  std::memcpy(p, a.v, sizeof a.v);
}
#endif

// --- 64-bit lanes: Philox --------------------------------------------------------------------
#if defined(COMMPRESS_SIMD_SSE2)
// Two 64-bit lanes per register, four per vq, two vq in flight: pmuludq is mul_low32 itself,
// and a step's state fits the 16 registers (the lane loops below spill their 32 scalar words).
struct vq {
  __m128i lo, hi; ///< lanes 0-1, lanes 2-3
};
inline constexpr std::size_t lanes64 = 4;
inline constexpr std::size_t philox_vectors = 2;

COMMPRESS_FORCEINLINE vq splat_u64(std::uint64_t x) {
  const __m128i v = _mm_set1_epi64x(static_cast<long long>(x));
  return {v, v};
}
COMMPRESS_FORCEINLINE vq splat_halves(std::uint32_t x) {
  return splat_u64(std::uint64_t{x} << 32 | x);
}
COMMPRESS_FORCEINLINE vq lane_index64() {
  return {_mm_set_epi64x(1, 0), _mm_set_epi64x(3, 2)};
}
COMMPRESS_FORCEINLINE vq add_u64(vq a, vq b) {
  return {_mm_add_epi64(a.lo, b.lo), _mm_add_epi64(a.hi, b.hi)};
}
COMMPRESS_FORCEINLINE vq high_half(vq a) {
  return {_mm_srli_epi64(a.lo, 32), _mm_srli_epi64(a.hi, 32)};
}
COMMPRESS_FORCEINLINE vq mul_low32(vq a, vq b) {
  return {_mm_mul_epu32(a.lo, b.lo), _mm_mul_epu32(a.hi, b.hi)};
}
COMMPRESS_FORCEINLINE vq swap_halves(vq a) {
  return {_mm_shuffle_epi32(a.lo, 0xb1), _mm_shuffle_epi32(a.hi, 0xb1)};
}
COMMPRESS_FORCEINLINE vq xor3(vq a, vq b, vq c) {
  return {_mm_xor_si128(_mm_xor_si128(a.lo, b.lo), c.lo),
          _mm_xor_si128(_mm_xor_si128(a.hi, b.hi), c.hi)};
}
/// The low halves of two lanes of c0..c3 as the words of two blocks.
COMMPRESS_FORCEINLINE void store_two_blocks(__m128i c0, __m128i c1, __m128i c2, __m128i c3,
                                            std::uint32_t* w) {
  const __m128i lane0_01 = _mm_unpacklo_epi32(c0, c1); // c0[0], c1[0], (high halves)
  const __m128i lane1_01 = _mm_unpackhi_epi32(c0, c1);
  const __m128i lane0_23 = _mm_unpacklo_epi32(c2, c3);
  const __m128i lane1_23 = _mm_unpackhi_epi32(c2, c3);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(w), _mm_unpacklo_epi64(lane0_01, lane0_23));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(w + 4), _mm_unpacklo_epi64(lane1_01, lane1_23));
}
COMMPRESS_FORCEINLINE void store_blocks(vq c0, vq c1, vq c2, vq c3, std::uint32_t* w) {
  store_two_blocks(c0.lo, c1.lo, c2.lo, c3.lo, w);
  store_two_blocks(c0.hi, c1.hi, c2.hi, c3.hi, w + 8);
}
#else
struct vq {
  std::uint64_t v[8];
};
inline constexpr std::size_t lanes64 = 8;
inline constexpr std::size_t philox_vectors = 1;

#define COMMPRESS_SIMD_LANES64(r, expr)                                                            \
  for (std::size_t j = 0; j < lanes64; ++j)                                                        \
  r.v[j] = (expr)

COMMPRESS_FORCEINLINE vq splat_u64(std::uint64_t x) {
  vq r;
  COMMPRESS_SIMD_LANES64(r, x);
  return r;
}
COMMPRESS_FORCEINLINE vq splat_halves(std::uint32_t x) {
  return splat_u64(std::uint64_t{x} << 32 | x);
}
COMMPRESS_FORCEINLINE vq lane_index64() {
  vq r;
  COMMPRESS_SIMD_LANES64(r, j);
  return r;
}
COMMPRESS_FORCEINLINE vq add_u64(vq a, vq b) {
  vq r;
  COMMPRESS_SIMD_LANES64(r, a.v[j] + b.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE vq high_half(vq a) {
  vq r;
  COMMPRESS_SIMD_LANES64(r, a.v[j] >> 32);
  return r;
}
COMMPRESS_FORCEINLINE vq mul_low32(vq a, vq b) {
  vq r;
  COMMPRESS_SIMD_LANES64(r, (a.v[j] & 0xffffffffu) * (b.v[j] & 0xffffffffu));
  return r;
}
COMMPRESS_FORCEINLINE vq swap_halves(vq a) {
  vq r;
  COMMPRESS_SIMD_LANES64(r, a.v[j] >> 32 | a.v[j] << 32);
  return r;
}
COMMPRESS_FORCEINLINE vq xor3(vq a, vq b, vq c) {
  vq r;
  COMMPRESS_SIMD_LANES64(r, a.v[j] ^ b.v[j] ^ c.v[j]);
  return r;
}
COMMPRESS_FORCEINLINE void store_blocks(vq c0, vq c1, vq c2, vq c3, std::uint32_t* w) {
  for (std::size_t j = 0; j < lanes64; ++j) {
    w[4 * j] = static_cast<std::uint32_t>(c0.v[j]);
    w[4 * j + 1] = static_cast<std::uint32_t>(c1.v[j]);
    w[4 * j + 2] = static_cast<std::uint32_t>(c2.v[j]);
    w[4 * j + 3] = static_cast<std::uint32_t>(c3.v[j]);
  }
}

#endif

#undef COMMPRESS_SIMD_LANES64
#undef COMMPRESS_SIMD_LANES

// --- memory hints ----------------------------------------------------------------------------
COMMPRESS_FORCEINLINE void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}
COMMPRESS_FORCEINLINE void store_fence() {
#if defined(COMMPRESS_SIMD_SSE2)
  _mm_sfence();
#endif
}

} // namespace commpress::cpu::simd
