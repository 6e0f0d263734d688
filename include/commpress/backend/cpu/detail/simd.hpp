// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The vector layer of the CPU kernels: one small set of operations, implemented for AVX-512
/// (simd/avx512.hpp), AVX2 (simd/avx2.hpp) and in plain C++ (simd/portable.hpp), chosen by
/// core/cpu_features.hpp from the compiler's flags. The kernels of backend/cpu/detail/ are
/// written once against it, so every instruction set computes the same operations in the same
/// order and writes the same bytes.
///
/// In namespace commpress::cpu::simd:
/// - `lanes` fp32 lanes per vector: `vf` (fp32), `vu` (32-bit integers), `vm` (a lane mask),
///   `vh` (16-bit codes, one per lane), `b64` (the 8-bit codes of 64 elements), and for
///   Philox `vq` (`lanes64` 64-bit lanes, `philox_vectors` of them in flight per step);
/// - memory: load, load_u32, gather (from a table), store, stream (non-temporal), store_where
///   (masked), prefetch, store_fence;
/// - fp32: add, sub, mul, min and max (x86 semantics: the second operand where either is NaN,
///   as the scalar `a < b ? a : b`), select(m, a, b) = m ? a : b, clear(m, a), bits, from_bits,
///   trunc_i32, to_float_i32;
/// - integers: add_u32, sub_u32, and_u32, or_u32, xor_u32, srl<N>, sll<N>, srl_by(a, count)
///   (a per-lane shift, 0 where the count is 32 or more), max/min u32 and i32;
/// - masks: lt, gt, is_nan (fp32); lt/le/gt/ge/eq_u32, gt_i32; and_mask, or_mask, no_lanes,
///   all_lanes, mask_bits (lane j as bit j), count, any, count_lanes (per-lane counters);
/// - reductions: reduce_max/min_u32, reduce_max/min_i32, reduce_add_u32;
/// - codes: narrow_u8 / narrow_i8 (64 / lanes vectors into 64 bytes), widen_u8 (lanes bytes
///   back), load_i8, store_bytes, load_bytes, nonzero_bytes (a 64-bit mask of the nonzero
///   bytes), store_packed<B> / load_packed<B> (64 codes of B bits in the layout of
///   format/bit_packing.hpp; B = 0: the width is a run-time argument);
///   narrow_u16, splat_u16, select and store of vh, load_u16, and where COMMPRESS_SIMD_F16C is
///   defined half_bits / from_half (hardware fp16 conversion);
/// - compaction: compress_store (may write every lane), compress_store_exact;
/// - fp64 lanes for canonical sums: `vd` (`lanes_f64` = lanes / 2 doubles), zero_f64,
///   widen_low / widen_high (an fp32 vector's first or second half, exactly), add_f64, mul_f64,
///   store;
/// - Philox lanes: splat_u64, splat_halves, lane_index64, add_u64, high_half, mul_low32,
///   swap_halves, xor3, store_blocks.

#include "commpress/core/config.hpp"
#include "commpress/core/cpu_features.hpp"

#if defined(COMMPRESS_SIMD_AVX512)
#include "commpress/backend/cpu/detail/simd/avx512.hpp"
#elif defined(COMMPRESS_SIMD_AVX2)
#include "commpress/backend/cpu/detail/simd/avx2.hpp"
#else
#include "commpress/backend/cpu/detail/simd/portable.hpp"
#endif

/// How a function built from the layer's operations is declared: a kernel (COMMPRESS_SIMD_KERNEL)
/// is always inlined and a reduction (COMMPRESS_SIMD_REDUCTION) may be, but on the portable layer
/// both stay out of line. GCC 12 vectorizes that layer's lane loops in a function of their own
/// but not always where they are inlined into a larger one: there it has left some of them
/// scalar, a lane at a time (bench/README.md).
#if defined(COMMPRESS_SIMD_PORTABLE)
#define COMMPRESS_SIMD_KERNEL COMMPRESS_NOINLINE
#define COMMPRESS_SIMD_REDUCTION COMMPRESS_NOINLINE
#else
#define COMMPRESS_SIMD_KERNEL COMMPRESS_FORCEINLINE
#define COMMPRESS_SIMD_REDUCTION inline
#endif

namespace commpress::cpu::simd {

/// Vectors of fp32 lanes that hold the codes of 64 elements.
inline constexpr std::size_t vectors_per_64 = 64 / lanes;
static_assert(64 % lanes == 0 && lanes % 8 == 0, "commpress: 8 | lanes | 64");
static_assert(2 * lanes_f64 == lanes, "commpress: an fp32 vector widens to two fp64 vectors");

/// |x| bit patterns (the sign cleared): for floats, NaN and Inf included, their order as
/// unsigned (or, all being below 2^31, signed) integers is the magnitude order.
COMMPRESS_FORCEINLINE vu magnitude_bits(vf x) {
  return and_u32(bits(x), splat_u32(0x7fffffffu));
}

/// The lanes of x that hold NaN or Inf.
COMMPRESS_FORCEINLINE vm nonfinite(vf x) {
  return gt_i32(magnitude_bits(x), splat_u32(0x7f7fffffu));
}

/// The lanes of x that hold a finite value.
COMMPRESS_FORCEINLINE vm finite(vf x) {
  return gt_i32(splat_u32(0x7f800000u), magnitude_bits(x));
}

/// x with every NaN lane replaced by the canonical NaN, as core/math.hpp's rounded operations
/// return it (x86 passes an operand's payload through; the CUDA kernels write the canonical one).
COMMPRESS_FORCEINLINE vf canonical_nan(vf x) {
  return select(is_nan(x), from_bits(splat_u32(0x7fc00000u)), x);
}

} // namespace commpress::cpu::simd
