// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The vector layer on AVX2: 8 fp32 lanes per vector, masks as all-ones lanes. What AVX-512
/// does with a mask register this does with compares and blends; a masked store is a load,
/// a blend and a store (vmaskmovps is slow on AMD cores). Included by
/// backend/cpu/detail/simd.hpp, which documents the operations.

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd/packing.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/cpu_features.hpp"

namespace commpress::cpu::simd {

inline constexpr std::size_t lanes = 8;

struct vf {
  __m256 v;
};
struct vu {
  __m256i v;
};
struct vm {
  __m256i v; ///< all-ones lanes where set
};
/// 64 bytes: the 8-bit codes of 64 elements, in element order (lo: 0..31, hi: 32..63).
struct b64 {
  __m256i lo;
  __m256i hi;
};
/// Eight 16-bit codes.
struct vh {
  __m128i v;
};

// --- memory ----------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf load(const float* p) {
  return {_mm256_loadu_ps(p)};
}
COMMPRESS_FORCEINLINE vu load_u32(const void* p) {
  return {_mm256_loadu_si256(static_cast<const __m256i*>(p))};
}
/// table[index] in every lane.
COMMPRESS_FORCEINLINE vf gather(const float* table, vu index) {
  return {_mm256_i32gather_ps(table, index.v, 4)};
}
COMMPRESS_FORCEINLINE void store(float* p, vf a) {
  _mm256_storeu_ps(p, a.v);
}
COMMPRESS_FORCEINLINE void store(void* p, vu a) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), a.v);
}
COMMPRESS_FORCEINLINE void stream(float* p, vf a) {
  _mm256_stream_ps(p, a.v);
}
COMMPRESS_FORCEINLINE void store_where(float* p, vm m, vf a) {
  _mm256_storeu_ps(p, _mm256_blendv_ps(_mm256_loadu_ps(p), a.v, _mm256_castsi256_ps(m.v)));
}

// --- constants -------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf splat(float x) {
  return {_mm256_set1_ps(x)};
}
COMMPRESS_FORCEINLINE vu splat_u32(std::uint32_t x) {
  return {_mm256_set1_epi32(static_cast<int>(x))};
}
COMMPRESS_FORCEINLINE vu lane_index() {
  return {_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)};
}

// --- fp32 ------------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf add(vf a, vf b) {
  return {_mm256_add_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf sub(vf a, vf b) {
  return {_mm256_sub_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf mul(vf a, vf b) {
  return {_mm256_mul_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf min(vf a, vf b) {
  return {_mm256_min_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf max(vf a, vf b) {
  return {_mm256_max_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf select(vm m, vf a, vf b) {
  return {_mm256_blendv_ps(b.v, a.v, _mm256_castsi256_ps(m.v))};
}
COMMPRESS_FORCEINLINE vu select(vm m, vu a, vu b) {
  return {_mm256_blendv_epi8(b.v, a.v, m.v)};
}
/// a with the lanes of m cleared.
COMMPRESS_FORCEINLINE vu clear(vm m, vu a) {
  return {_mm256_andnot_si256(m.v, a.v)};
}
COMMPRESS_FORCEINLINE vf clear(vm m, vf a) {
  return {_mm256_andnot_ps(_mm256_castsi256_ps(m.v), a.v)};
}
COMMPRESS_FORCEINLINE vu bits(vf a) {
  return {_mm256_castps_si256(a.v)};
}
COMMPRESS_FORCEINLINE vf from_bits(vu a) {
  return {_mm256_castsi256_ps(a.v)};
}
COMMPRESS_FORCEINLINE vu trunc_i32(vf a) {
  return {_mm256_cvttps_epi32(a.v)};
}
COMMPRESS_FORCEINLINE vf to_float_i32(vu a) {
  return {_mm256_cvtepi32_ps(a.v)};
}

// --- 32-bit integers -------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vu add_u32(vu a, vu b) {
  return {_mm256_add_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu sub_u32(vu a, vu b) {
  return {_mm256_sub_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu and_u32(vu a, vu b) {
  return {_mm256_and_si256(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu or_u32(vu a, vu b) {
  return {_mm256_or_si256(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu xor_u32(vu a, vu b) {
  return {_mm256_xor_si256(a.v, b.v)};
}
template <unsigned N> COMMPRESS_FORCEINLINE vu srl(vu a) {
  return {_mm256_srli_epi32(a.v, N)};
}
COMMPRESS_FORCEINLINE vu srl_by(vu a, vu count) {
  return {_mm256_srlv_epi32(a.v, count.v)};
}
template <unsigned N> COMMPRESS_FORCEINLINE vu sll(vu a) {
  return {_mm256_slli_epi32(a.v, N)};
}
COMMPRESS_FORCEINLINE vu max_u32(vu a, vu b) {
  return {_mm256_max_epu32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu min_u32(vu a, vu b) {
  return {_mm256_min_epu32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu max_i32(vu a, vu b) {
  return {_mm256_max_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu min_i32(vu a, vu b) {
  return {_mm256_min_epi32(a.v, b.v)};
}

// --- comparisons and masks -------------------------------------------------------------------
COMMPRESS_FORCEINLINE vm lt(vf a, vf b) {
  return {_mm256_castps_si256(_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ))};
}
COMMPRESS_FORCEINLINE vm gt(vf a, vf b) {
  return {_mm256_castps_si256(_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ))};
}
COMMPRESS_FORCEINLINE vm is_nan(vf a) {
  return {_mm256_castps_si256(_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q))};
}
COMMPRESS_FORCEINLINE vm eq_u32(vu a, vu b) {
  return {_mm256_cmpeq_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm gt_i32(vu a, vu b) {
  return {_mm256_cmpgt_epi32(a.v, b.v)};
}
// AVX2 compares signed integers only: the unsigned ones go through max / min.
COMMPRESS_FORCEINLINE vm ge_u32(vu a, vu b) {
  return eq_u32(max_u32(a, b), a);
}
COMMPRESS_FORCEINLINE vm le_u32(vu a, vu b) {
  return eq_u32(min_u32(a, b), a);
}
COMMPRESS_FORCEINLINE vm gt_u32(vu a, vu b) {
  return {_mm256_xor_si256(le_u32(a, b).v, _mm256_set1_epi32(-1))};
}
COMMPRESS_FORCEINLINE vm lt_u32(vu a, vu b) {
  return {_mm256_xor_si256(ge_u32(a, b).v, _mm256_set1_epi32(-1))};
}
COMMPRESS_FORCEINLINE vm and_mask(vm a, vm b) {
  return {_mm256_and_si256(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm or_mask(vm a, vm b) {
  return {_mm256_or_si256(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm no_lanes() {
  return {_mm256_setzero_si256()};
}
COMMPRESS_FORCEINLINE vm all_lanes() {
  return {_mm256_set1_epi32(-1)};
}
COMMPRESS_FORCEINLINE std::uint32_t mask_bits(vm m) {
  return static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m.v)));
}
/// The mask whose lane j is bit j of b.
COMMPRESS_FORCEINLINE vm mask_from_bits(std::uint32_t b) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return {_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(b)), bit), bit)};
}
COMMPRESS_FORCEINLINE unsigned count(vm m) {
  return static_cast<unsigned>(std::popcount(mask_bits(m)));
}
COMMPRESS_FORCEINLINE bool any(vm m) {
  return !_mm256_testz_si256(m.v, m.v);
}
/// a + 1 in the lanes of m, a elsewhere (a set lane is -1).
COMMPRESS_FORCEINLINE vu count_lanes(vu a, vm m) {
  return {_mm256_sub_epi32(a.v, m.v)};
}

// --- reductions ------------------------------------------------------------------------------
#define COMMPRESS_SIMD_REDUCE(name, type, op)                                                      \
  COMMPRESS_FORCEINLINE type name(vu a) {                                                          \
    __m128i m = op(_mm256_castsi256_si128(a.v), _mm256_extracti128_si256(a.v, 1));                 \
    m = op(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));                                      \
    m = op(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));                                      \
    return static_cast<type>(_mm_cvtsi128_si32(m));                                                \
  }
COMMPRESS_SIMD_REDUCE(reduce_max_u32, std::uint32_t, _mm_max_epu32)
COMMPRESS_SIMD_REDUCE(reduce_min_u32, std::uint32_t, _mm_min_epu32)
COMMPRESS_SIMD_REDUCE(reduce_max_i32, std::int32_t, _mm_max_epi32)
COMMPRESS_SIMD_REDUCE(reduce_min_i32, std::int32_t, _mm_min_epi32)
#undef COMMPRESS_SIMD_REDUCE
COMMPRESS_FORCEINLINE std::uint64_t reduce_add_u32(vu a) {
  alignas(32) std::uint32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), a.v);
  std::uint64_t s = 0;
  for (std::uint32_t v : l)
    s += v;
  return s;
}

// --- 8-bit codes -----------------------------------------------------------------------------
/// The bytes of four vectors of 8 int32 lanes after two rounds of 256-bit packs, in element
/// order: the packs work within 128-bit lanes, leaving the dwords as c0 low half, c1 low, c2
/// low, c3 low, c0 high, ..., and the permute restores the order.
COMMPRESS_FORCEINLINE __m256i packed_in_order(__m256i packed) {
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
/// The codes of 64 elements from eight vectors of 8 (each in [0, 255]).
COMMPRESS_FORCEINLINE b64 narrow_u8(const vu (&c)[8]) {
  const auto quarter = [&](unsigned q) {
    return packed_in_order(_mm256_packus_epi16(_mm256_packus_epi32(c[q].v, c[q + 1].v),
                                               _mm256_packus_epi32(c[q + 2].v, c[q + 3].v)));
  };
  return {quarter(0), quarter(4)};
}
/// As narrow_u8, for signed codes in [-128, 127].
COMMPRESS_FORCEINLINE b64 narrow_i8(const vu (&c)[8]) {
  const auto quarter = [&](unsigned q) {
    return packed_in_order(_mm256_packs_epi16(_mm256_packs_epi32(c[q].v, c[q + 1].v),
                                              _mm256_packs_epi32(c[q + 2].v, c[q + 3].v)));
  };
  return {quarter(0), quarter(4)};
}
COMMPRESS_FORCEINLINE void store_bytes(void* p, b64 b) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), b.lo);
  _mm256_storeu_si256(static_cast<__m256i*>(p) + 1, b.hi);
}
COMMPRESS_FORCEINLINE b64 load_bytes(const void* p) {
  return {_mm256_loadu_si256(static_cast<const __m256i*>(p)),
          _mm256_loadu_si256(static_cast<const __m256i*>(p) + 1)};
}
/// The nonzero bytes of b, byte j as bit j.
COMMPRESS_FORCEINLINE std::uint64_t nonzero_bytes(b64 b) {
  const __m256i zero = _mm256_setzero_si256();
  const auto zeros = [&](__m256i h) {
    return static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(h, zero)));
  };
  return ~(std::uint64_t{zeros(b.hi)} << 32 | zeros(b.lo));
}
/// Bytes 8 q .. 8 q + 7 of b, zero-extended.
COMMPRESS_FORCEINLINE vu widen_u8(b64 b, unsigned q) {
  const __m256i half = q < 4 ? b.lo : b.hi;
  __m128i l = q % 4 < 2 ? _mm256_castsi256_si128(half) : _mm256_extracti128_si256(half, 1);
  if (q % 2 != 0)
    l = _mm_srli_si128(l, 8);
  return {_mm256_cvtepu8_epi32(l)};
}
/// 8 signed bytes at p, sign-extended.
COMMPRESS_FORCEINLINE vu load_i8(const std::int8_t* p) {
  return {_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))};
}

/// Packs 32 byte codes (each < 2^B, B = 2, 4 or 8) into 4 B bytes at out.
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

/// 32 byte codes (element order) from the 4 B packed bytes at in (B = 2, 4 or 8).
template <unsigned B> COMMPRESS_FORCEINLINE __m256i load_packed32(const unsigned char* in) {
  if constexpr (B == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
  } else if constexpr (B == 4) { // word j = byte j; its low nibble is code 2j, its high 2j + 1
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    return _mm256_and_si256(_mm256_or_si256(w, _mm256_slli_epi16(w, 4)), _mm256_set1_epi16(0x0f0f));
  } else {
    const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
    const __m256i spread =
        _mm256_or_si256(_mm256_or_si256(d, _mm256_slli_epi32(d, 6)),
                        _mm256_or_si256(_mm256_slli_epi32(d, 12), _mm256_slli_epi32(d, 18)));
    return _mm256_and_si256(spread, _mm256_set1_epi32(0x03030303));
  }
}

/// Packs 64 codes (each < 2^B) into 8 B bytes at out, in the layout of format/bit_packing.hpp
/// (B = 0: `bits` wide, packing.hpp).
template <unsigned B>
COMMPRESS_FORCEINLINE void store_packed(b64 b, unsigned char* out, unsigned bits = B) {
  if constexpr (B == 8 || B == 4 || B == 2) {
    store_packed32<B>(b.lo, out);
    store_packed32<B>(b.hi, out + 4 * B);
  } else {
    alignas(32) std::uint8_t c[64];
    store_bytes(c, b);
    pack_bytes<B>(c, bits, out);
  }
}

/// The 64 codes packed as store_packed<B> writes them.
template <unsigned B>
COMMPRESS_FORCEINLINE b64 load_packed(const unsigned char* in, unsigned bits = B) {
  if constexpr (B == 8 || B == 4 || B == 2) {
    return {load_packed32<B>(in), load_packed32<B>(in + 4 * B)};
  } else {
    alignas(32) std::uint8_t c[64];
    unpack_bytes<B>(in, bits, c);
    return load_bytes(c);
  }
}

// --- 16-bit codes ----------------------------------------------------------------------------
/// The low 16 bits of each lane of a (each < 2^16).
COMMPRESS_FORCEINLINE vh narrow_u16(vu a) {
  return {_mm_packus_epi32(_mm256_castsi256_si128(a.v), _mm256_extracti128_si256(a.v, 1))};
}
COMMPRESS_FORCEINLINE vh splat_u16(std::uint16_t x) {
  return {_mm_set1_epi16(static_cast<short>(x))};
}
/// m ? a : b, lane by lane.
COMMPRESS_FORCEINLINE vh select(vm m, vh a, vh b) {
  const __m128i m16 =
      _mm_packs_epi32(_mm256_castsi256_si128(m.v), _mm256_extracti128_si256(m.v, 1));
  return {_mm_blendv_epi8(b.v, a.v, m16)};
}
COMMPRESS_FORCEINLINE void store(void* p, vh a) {
  _mm_storeu_si128(static_cast<__m128i*>(p), a.v);
}
#if defined(COMMPRESS_SIMD_F16C)
/// The lanes' half-precision bits, rounded to nearest even by the hardware (a NaN comes out
/// quiet with its payload; callers that need the canonical NaN patch it).
COMMPRESS_FORCEINLINE vh half_bits(vf a) {
  return {_mm256_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
/// 8 half-precision values at p, exactly (a NaN keeps its payload, quieted).
COMMPRESS_FORCEINLINE vf from_half(const void* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)))};
}
#endif
/// 8 unsigned 16-bit values at p, zero-extended.
COMMPRESS_FORCEINLINE vu load_u16(const void* p) {
  return {_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)))};
}

// --- compaction ------------------------------------------------------------------------------
/// For each 8-bit lane mask, the indices of its set lanes in increasing order, one per byte:
/// the vpermd pattern that moves a vector's selected lanes to the front (AVX2 has no compress
/// instruction).
inline constexpr auto compress_pattern8 = [] {
  std::uint64_t table[256] = {};
  for (unsigned mask = 0; mask < 256; ++mask)
    for (unsigned lane = 0, n = 0; lane < 8; ++lane)
      if ((mask >> lane & 1u) != 0)
        table[mask] |= std::uint64_t{lane} << (8 * n++);
  return std::to_array(table);
}();

COMMPRESS_FORCEINLINE __m256i compressed(std::uint32_t mask, __m256i a) {
  return _mm256_permutevar8x32_epi32(
      a, _mm256_cvtepu8_epi32(
             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&compress_pattern8[mask]))));
}
/// Stores the lanes of a selected by m at dst[0..count) in lane order, and returns count; all
/// 8 words of dst are written.
COMMPRESS_FORCEINLINE unsigned compress_store(std::uint32_t* dst, vm m, vu a) {
  const std::uint32_t bits = mask_bits(m);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), compressed(bits, a.v));
  return static_cast<unsigned>(std::popcount(bits));
}
/// As compress_store, writing only dst[0..count) (dst may end there).
COMMPRESS_FORCEINLINE unsigned compress_store_exact(void* dst, vm m, vu a) {
  const std::uint32_t bits = mask_bits(m);
  const auto k = static_cast<unsigned>(std::popcount(bits));
  const __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)), lane_index().v);
  _mm256_maskstore_epi32(static_cast<int*>(dst), first, compressed(bits, a.v));
  return k;
}

// --- fp64 lanes: canonical sums --------------------------------------------------------------
struct vd {
  __m256d v;
};
inline constexpr std::size_t lanes_f64 = 4;

COMMPRESS_FORCEINLINE vd zero_f64() {
  return {_mm256_setzero_pd()};
}
COMMPRESS_FORCEINLINE vd widen_low(vf a) {
  return {_mm256_cvtps_pd(_mm256_castps256_ps128(a.v))};
}
COMMPRESS_FORCEINLINE vd widen_high(vf a) {
  return {_mm256_cvtps_pd(_mm256_extractf128_ps(a.v, 1))};
}
COMMPRESS_FORCEINLINE vd add_f64(vd a, vd b) {
  return {_mm256_add_pd(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vd mul_f64(vd a, vd b) {
  return {_mm256_mul_pd(a.v, b.v)};
}
COMMPRESS_FORCEINLINE void store(double* p, vd a) {
  _mm256_storeu_pd(p, a.v);
}

// --- 64-bit lanes: Philox --------------------------------------------------------------------
/// Four 64-bit lanes; vpmuludq gives a whole 32 x 32 -> 64-bit product of the low halves.
struct vq {
  __m256i v;
};
inline constexpr std::size_t lanes64 = 4;
/// Philox blocks in flight per step (independent multiply chains).
inline constexpr std::size_t philox_vectors = 2;

COMMPRESS_FORCEINLINE vq splat_u64(std::uint64_t x) {
  return {_mm256_set1_epi64x(static_cast<long long>(x))};
}
COMMPRESS_FORCEINLINE vq splat_halves(std::uint32_t x) {
  return {_mm256_set1_epi32(static_cast<int>(x))};
}
COMMPRESS_FORCEINLINE vq lane_index64() {
  return {_mm256_setr_epi64x(0, 1, 2, 3)};
}
COMMPRESS_FORCEINLINE vq add_u64(vq a, vq b) {
  return {_mm256_add_epi64(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vq high_half(vq a) {
  return {_mm256_srli_epi64(a.v, 32)};
}
COMMPRESS_FORCEINLINE vq mul_low32(vq a, vq b) {
  return {_mm256_mul_epu32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vq swap_halves(vq a) {
  return {_mm256_shuffle_epi32(a.v, _MM_SHUFFLE(2, 3, 0, 1))};
}
COMMPRESS_FORCEINLINE vq xor3(vq a, vq b, vq c) {
  return {_mm256_xor_si256(_mm256_xor_si256(a.v, b.v), c.v)};
}
/// The words of four Philox blocks, block j's counter words in the low halves of lane j of
/// c0..c3, at w[4 j .. 4 j + 3].
COMMPRESS_FORCEINLINE void store_blocks(vq c0, vq c1, vq c2, vq c3, std::uint32_t* w) {
  const __m256i w01 = _mm256_blend_epi32(c0.v, _mm256_slli_epi64(c1.v, 32), 0xAA);
  const __m256i w23 = _mm256_blend_epi32(c2.v, _mm256_slli_epi64(c3.v, 32), 0xAA);
  const __m256i even = _mm256_unpacklo_epi64(w01, w23); // blocks 0 2
  const __m256i odd = _mm256_unpackhi_epi64(w01, w23);  // blocks 1 3
  auto* out = reinterpret_cast<__m256i*>(w);
  _mm256_storeu_si256(out, _mm256_permute2x128_si256(even, odd, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(even, odd, 0x31));
}

// --- memory hints ----------------------------------------------------------------------------
COMMPRESS_FORCEINLINE void prefetch(const void* p) {
  __builtin_prefetch(p, 0, 3);
}
COMMPRESS_FORCEINLINE void store_fence() {
  _mm_sfence();
}

} // namespace commpress::cpu::simd
