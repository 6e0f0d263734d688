// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The vector layer on AVX-512 (F, BW, VL): 16 fp32 lanes per vector, masks in k registers.
/// Included by backend/cpu/detail/simd.hpp, which documents the operations.

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd/packing.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/cpu_features.hpp"

COMMPRESS_INTRINSICS_BEGIN
namespace commpress::cpu::simd {

inline constexpr std::size_t lanes = 16;

struct vf {
  __m512 v;
};
struct vu {
  __m512i v;
};
struct vm {
  __mmask16 v;
};
/// 64 bytes: the 8-bit codes of 64 elements, in element order.
struct b64 {
  __m512i v;
};

// --- memory ----------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf load(const float* p) {
  return {_mm512_loadu_ps(p)};
}
COMMPRESS_FORCEINLINE vu load_u32(const void* p) {
  return {_mm512_loadu_si512(p)};
}
/// table[index] in every lane.
COMMPRESS_FORCEINLINE vf gather(const float* table, vu index) {
  return {_mm512_i32gather_ps(index.v, table, 4)};
}
COMMPRESS_FORCEINLINE void store(float* p, vf a) {
  _mm512_storeu_ps(p, a.v);
}
COMMPRESS_FORCEINLINE void store(void* p, vu a) {
  _mm512_storeu_si512(p, a.v);
}
COMMPRESS_FORCEINLINE void stream(float* p, vf a) {
  _mm512_stream_ps(p, a.v);
}
COMMPRESS_FORCEINLINE void store_where(float* p, vm m, vf a) {
  _mm512_mask_storeu_ps(p, m.v, a.v);
}

// --- constants -------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf splat(float x) {
  return {_mm512_set1_ps(x)};
}
COMMPRESS_FORCEINLINE vu splat_u32(std::uint32_t x) {
  return {_mm512_set1_epi32(static_cast<int>(x))};
}
COMMPRESS_FORCEINLINE vu lane_index() {
  return {_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)};
}

// --- fp32 ------------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vf add(vf a, vf b) {
  return {_mm512_add_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf sub(vf a, vf b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf mul(vf a, vf b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf min(vf a, vf b) {
  return {_mm512_min_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf max(vf a, vf b) {
  return {_mm512_max_ps(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vf select(vm m, vf a, vf b) {
  return {_mm512_mask_mov_ps(b.v, m.v, a.v)};
}
COMMPRESS_FORCEINLINE vu select(vm m, vu a, vu b) {
  return {_mm512_mask_mov_epi32(b.v, m.v, a.v)};
}
/// a with the lanes of m cleared.
COMMPRESS_FORCEINLINE vu clear(vm m, vu a) {
  return {_mm512_maskz_mov_epi32(static_cast<__mmask16>(~m.v), a.v)};
}
COMMPRESS_FORCEINLINE vf clear(vm m, vf a) {
  return {_mm512_maskz_mov_ps(static_cast<__mmask16>(~m.v), a.v)};
}
COMMPRESS_FORCEINLINE vu bits(vf a) {
  return {_mm512_castps_si512(a.v)};
}
COMMPRESS_FORCEINLINE vf from_bits(vu a) {
  return {_mm512_castsi512_ps(a.v)};
}
COMMPRESS_FORCEINLINE vu trunc_i32(vf a) {
  return {_mm512_cvttps_epi32(a.v)};
}
COMMPRESS_FORCEINLINE vf to_float_i32(vu a) {
  return {_mm512_cvtepi32_ps(a.v)};
}

// --- 32-bit integers -------------------------------------------------------------------------
COMMPRESS_FORCEINLINE vu add_u32(vu a, vu b) {
  return {_mm512_add_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu sub_u32(vu a, vu b) {
  return {_mm512_sub_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu and_u32(vu a, vu b) {
  return {_mm512_and_si512(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu or_u32(vu a, vu b) {
  return {_mm512_or_si512(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu xor_u32(vu a, vu b) {
  return {_mm512_xor_si512(a.v, b.v)};
}
template <unsigned N> COMMPRESS_FORCEINLINE vu srl(vu a) {
  return {_mm512_srli_epi32(a.v, N)};
}
COMMPRESS_FORCEINLINE vu srl_by(vu a, vu count) {
  return {_mm512_srlv_epi32(a.v, count.v)};
}
template <unsigned N> COMMPRESS_FORCEINLINE vu sll(vu a) {
  return {_mm512_slli_epi32(a.v, N)};
}
COMMPRESS_FORCEINLINE vu max_u32(vu a, vu b) {
  return {_mm512_max_epu32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu min_u32(vu a, vu b) {
  return {_mm512_min_epu32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu max_i32(vu a, vu b) {
  return {_mm512_max_epi32(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vu min_i32(vu a, vu b) {
  return {_mm512_min_epi32(a.v, b.v)};
}

// --- comparisons and masks -------------------------------------------------------------------
COMMPRESS_FORCEINLINE vm lt(vf a, vf b) {
  return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)};
}
COMMPRESS_FORCEINLINE vm gt(vf a, vf b) {
  return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)};
}
COMMPRESS_FORCEINLINE vm is_nan(vf a) {
  return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)};
}
COMMPRESS_FORCEINLINE vm lt_u32(vu a, vu b) {
  return {_mm512_cmplt_epu32_mask(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm le_u32(vu a, vu b) {
  return {_mm512_cmple_epu32_mask(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm gt_u32(vu a, vu b) {
  return {_mm512_cmpgt_epu32_mask(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm ge_u32(vu a, vu b) {
  return {_mm512_cmpge_epu32_mask(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm eq_u32(vu a, vu b) {
  return {_mm512_cmpeq_epi32_mask(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm gt_i32(vu a, vu b) {
  return {_mm512_cmpgt_epi32_mask(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vm and_mask(vm a, vm b) {
  return {static_cast<__mmask16>(a.v & b.v)};
}
COMMPRESS_FORCEINLINE vm or_mask(vm a, vm b) {
  return {static_cast<__mmask16>(a.v | b.v)};
}
COMMPRESS_FORCEINLINE vm no_lanes() {
  return {0};
}
COMMPRESS_FORCEINLINE vm all_lanes() {
  return {0xffff};
}
/// Lane j of m as bit j.
COMMPRESS_FORCEINLINE std::uint32_t mask_bits(vm m) {
  return m.v;
}
/// The mask whose lane j is bit j of b.
COMMPRESS_FORCEINLINE vm mask_from_bits(std::uint32_t b) {
  return {static_cast<__mmask16>(b)};
}
COMMPRESS_FORCEINLINE unsigned count(vm m) {
  return static_cast<unsigned>(std::popcount(static_cast<unsigned>(m.v)));
}
COMMPRESS_FORCEINLINE bool any(vm m) {
  return m.v != 0;
}
/// a + 1 in the lanes of m, a elsewhere (per-lane counters).
COMMPRESS_FORCEINLINE vu count_lanes(vu a, vm m) {
  return {_mm512_mask_add_epi32(a.v, m.v, a.v, _mm512_set1_epi32(1))};
}

// --- reductions ------------------------------------------------------------------------------
COMMPRESS_FORCEINLINE std::uint32_t reduce_max_u32(vu a) {
  return _mm512_reduce_max_epu32(a.v);
}
COMMPRESS_FORCEINLINE std::uint32_t reduce_min_u32(vu a) {
  return _mm512_reduce_min_epu32(a.v);
}
COMMPRESS_FORCEINLINE std::int32_t reduce_max_i32(vu a) {
  return _mm512_reduce_max_epi32(a.v);
}
COMMPRESS_FORCEINLINE std::int32_t reduce_min_i32(vu a) {
  return _mm512_reduce_min_epi32(a.v);
}
COMMPRESS_FORCEINLINE std::uint64_t reduce_add_u32(vu a) {
  alignas(64) std::uint32_t l[16];
  _mm512_store_si512(l, a.v);
  std::uint64_t s = 0;
  for (std::uint32_t v : l)
    s += v;
  return s;
}

// --- 8-bit codes -----------------------------------------------------------------------------
/// The codes of 64 elements from four vectors of 16 (each in [0, 255]): packus works within
/// 128-bit lanes, the permute restores the element order.
COMMPRESS_FORCEINLINE b64 narrow_u8(const vu (&c)[4]) {
  const __m512i bytes =
      _mm512_packus_epi16(_mm512_packus_epi32(c[0].v, c[1].v), _mm512_packus_epi32(c[2].v, c[3].v));
  return {_mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), bytes)};
}
/// As narrow_u8, for signed codes in [-128, 127].
COMMPRESS_FORCEINLINE b64 narrow_i8(const vu (&c)[4]) {
  const __m512i bytes =
      _mm512_packs_epi16(_mm512_packs_epi32(c[0].v, c[1].v), _mm512_packs_epi32(c[2].v, c[3].v));
  return {_mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), bytes)};
}
COMMPRESS_FORCEINLINE void store_bytes(void* p, b64 b) {
  _mm512_storeu_si512(p, b.v);
}
COMMPRESS_FORCEINLINE b64 load_bytes(const void* p) {
  return {_mm512_loadu_si512(p)};
}
/// The nonzero bytes of b, byte j as bit j.
COMMPRESS_FORCEINLINE std::uint64_t nonzero_bytes(b64 b) {
  return _mm512_test_epi8_mask(b.v, b.v);
}
/// Bytes 16 q .. 16 q + 15 of b, zero-extended.
COMMPRESS_FORCEINLINE vu widen_u8(b64 b, unsigned q) {
  switch (q) {
  case 0:
    return {_mm512_cvtepu8_epi32(_mm512_castsi512_si128(b.v))};
  case 1:
    return {_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(b.v, 1))};
  case 2:
    return {_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(b.v, 2))};
  default:
    return {_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(b.v, 3))};
  }
}
/// 16 signed bytes at p, sign-extended.
COMMPRESS_FORCEINLINE vu load_i8(const std::int8_t* p) {
  return {_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}

/// Packs 64 codes (each < 2^B) into 8 B bytes at out, in the layout of format/bit_packing.hpp
/// (B = 0: `bits` wide, packing.hpp).
template <unsigned B>
COMMPRESS_FORCEINLINE void store_packed(b64 b, unsigned char* out, unsigned bits = B) {
  if constexpr (B == 8) {
    _mm512_storeu_si512(out, b.v);
  } else if constexpr (B == 4) { // byte j = c[2j] | c[2j + 1] << 4
    const __m512i pairs = _mm512_or_si512(b.v, _mm512_srli_epi16(b.v, 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs));
  } else if constexpr (B ==
                       2) { // byte j = c[4j] | c[4j + 1] << 2 | c[4j + 2] << 4 | c[4j + 3] << 6
    const __m512i t = _mm512_or_si512(b.v, _mm512_srli_epi32(b.v, 6));
    const __m512i quads = _mm512_or_si512(t, _mm512_srli_epi32(t, 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(quads));
  } else {
    alignas(64) std::uint8_t c[64];
    _mm512_store_si512(c, b.v);
    pack_bytes<B>(c, bits, out);
  }
}

/// The 64 codes packed as store_packed<B> writes them.
template <unsigned B>
COMMPRESS_FORCEINLINE b64 load_packed(const unsigned char* in, unsigned bits = B) {
  if constexpr (B == 8) {
    return {_mm512_loadu_si512(in)};
  } else if constexpr (B == 4) { // word j = byte j; its low nibble is code 2j, its high 2j + 1
    const __m512i w =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
    return {
        _mm512_and_si512(_mm512_or_si512(w, _mm512_slli_epi16(w, 4)), _mm512_set1_epi16(0x0f0f))};
  } else if constexpr (B == 2) {
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    const __m512i spread =
        _mm512_or_si512(_mm512_or_si512(d, _mm512_slli_epi32(d, 6)),
                        _mm512_or_si512(_mm512_slli_epi32(d, 12), _mm512_slli_epi32(d, 18)));
    return {_mm512_and_si512(spread, _mm512_set1_epi32(0x03030303))};
  } else {
    alignas(64) std::uint8_t c[64];
    unpack_bytes<B>(in, bits, c);
    return {_mm512_load_si512(c)};
  }
}

// --- 16-bit codes ----------------------------------------------------------------------------
/// Sixteen 16-bit codes.
struct vh {
  __m256i v;
};
/// The low 16 bits of each lane of a (each < 2^16).
COMMPRESS_FORCEINLINE vh narrow_u16(vu a) {
  return {_mm512_cvtepi32_epi16(a.v)};
}
COMMPRESS_FORCEINLINE vh splat_u16(std::uint16_t x) {
  return {_mm256_set1_epi16(static_cast<short>(x))};
}
/// m ? a : b, lane by lane.
COMMPRESS_FORCEINLINE vh select(vm m, vh a, vh b) {
  return {_mm256_mask_mov_epi16(b.v, m.v, a.v)};
}
COMMPRESS_FORCEINLINE void store(void* p, vh a) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), a.v);
}
/// The lanes' half-precision bits, rounded to nearest even by the hardware (a NaN comes out
/// quiet with its payload; callers that need the canonical NaN patch it).
COMMPRESS_FORCEINLINE vh half_bits(vf a) {
  return {_mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
/// 16 half-precision values at p, exactly (a NaN keeps its payload, quieted).
COMMPRESS_FORCEINLINE vf from_half(const void* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)))};
}
/// 16 unsigned 16-bit values at p, zero-extended.
COMMPRESS_FORCEINLINE vu load_u16(const void* p) {
  return {_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)))};
}

// --- compaction ------------------------------------------------------------------------------
/// Stores the lanes of a selected by m at dst[0..count) in lane order, and returns count. All
/// 16 words of dst are written: compressing in a register and storing the whole vector is
/// faster than a compressing store to memory.
COMMPRESS_FORCEINLINE unsigned compress_store(std::uint32_t* dst, vm m, vu a) {
  _mm512_storeu_si512(dst, _mm512_maskz_compress_epi32(m.v, a.v));
  return count(m);
}
/// As compress_store, writing only dst[0..count) (dst may end there).
COMMPRESS_FORCEINLINE unsigned compress_store_exact(void* dst, vm m, vu a) {
  const unsigned k = count(m);
  _mm512_mask_storeu_epi32(dst, static_cast<__mmask16>((1u << k) - 1u),
                           _mm512_maskz_compress_epi32(m.v, a.v));
  return k;
}

// --- fp64 lanes: canonical sums --------------------------------------------------------------
struct vd {
  __m512d v;
};
inline constexpr std::size_t lanes_f64 = 8;

COMMPRESS_FORCEINLINE vd zero_f64() {
  return {_mm512_setzero_pd()};
}
COMMPRESS_FORCEINLINE vd widen_low(vf a) {
  return {_mm512_cvtps_pd(_mm512_castps512_ps256(a.v))};
}
COMMPRESS_FORCEINLINE vd widen_high(vf a) {
  return {_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)))};
}
COMMPRESS_FORCEINLINE vd add_f64(vd a, vd b) {
  return {_mm512_add_pd(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vd mul_f64(vd a, vd b) {
  return {_mm512_mul_pd(a.v, b.v)};
}
COMMPRESS_FORCEINLINE void store(double* p, vd a) {
  _mm512_storeu_pd(p, a.v);
}

// --- 64-bit lanes: Philox --------------------------------------------------------------------
/// Eight 64-bit lanes. One vpmuludq gives a whole 32 x 32 -> 64-bit product of the low halves.
struct vq {
  __m512i v;
};
inline constexpr std::size_t lanes64 = 8;
/// Philox blocks in flight per step: a round is a chain of multiply, swap and XOR, so four
/// independent vectors keep the ports busy.
inline constexpr std::size_t philox_vectors = 4;

COMMPRESS_FORCEINLINE vq splat_u64(std::uint64_t x) {
  return {_mm512_set1_epi64(static_cast<long long>(x))};
}
/// Both 32-bit halves of every 64-bit lane set to x.
COMMPRESS_FORCEINLINE vq splat_halves(std::uint32_t x) {
  return {_mm512_set1_epi32(static_cast<int>(x))};
}
COMMPRESS_FORCEINLINE vq lane_index64() {
  return {_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)};
}
COMMPRESS_FORCEINLINE vq add_u64(vq a, vq b) {
  return {_mm512_add_epi64(a.v, b.v)};
}
COMMPRESS_FORCEINLINE vq high_half(vq a) {
  return {_mm512_srli_epi64(a.v, 32)};
}
/// low32(a) * low32(b) as 64-bit lanes.
COMMPRESS_FORCEINLINE vq mul_low32(vq a, vq b) {
  return {_mm512_mul_epu32(a.v, b.v)};
}
/// The two 32-bit halves of each lane swapped.
COMMPRESS_FORCEINLINE vq swap_halves(vq a) {
  return {_mm512_shuffle_epi32(a.v, _MM_PERM_CDAB)};
}
COMMPRESS_FORCEINLINE vq xor3(vq a, vq b, vq c) {
  return {_mm512_ternarylogic_epi32(a.v, b.v, c.v, 0x96)};
}
/// The words of eight Philox blocks, block j's counter words (c0..c3) in the low halves of lane
/// j of c0..c3, at w[4 j .. 4 j + 3].
COMMPRESS_FORCEINLINE void store_blocks(vq c0, vq c1, vq c2, vq c3, std::uint32_t* w) {
  const __m512i w01 = _mm512_mask_shuffle_epi32(c0.v, 0xAAAA, c1.v, _MM_PERM_CCAA);
  const __m512i w23 = _mm512_mask_shuffle_epi32(c2.v, 0xAAAA, c3.v, _MM_PERM_CCAA);
  const __m512i even = _mm512_unpacklo_epi64(w01, w23); // blocks 0 2 4 6
  const __m512i odd = _mm512_unpackhi_epi64(w01, w23);  // blocks 1 3 5 7
  _mm512_storeu_si512(
      w, _mm512_permutex2var_epi64(even, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), odd));
  _mm512_storeu_si512(
      w + 16, _mm512_permutex2var_epi64(even, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), odd));
}

// --- memory hints ----------------------------------------------------------------------------
COMMPRESS_FORCEINLINE void prefetch(const void* p) {
  __builtin_prefetch(p, 0, 3);
}
/// Makes non-temporal stores visible before the kernel returns.
COMMPRESS_FORCEINLINE void store_fence() {
  _mm_sfence();
}

} // namespace commpress::cpu::simd
COMMPRESS_INTRINSICS_END
