// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// fp32 lanes from and to the element types of a tensor (float, half, bfloat16), with the
/// conversions of core/dtype.hpp bit for bit: to_float when elements are read (load_lanes,
/// widen_elements), from_float when decoded values are stored (element_bits,
/// store_elements_64). fp16 goes through the hardware conversion where the build has one
/// (COMMPRESS_SIMD_F16C) and through integer lanes elsewhere.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/cpu_features.hpp"
#include "commpress/core/dtype.hpp"

namespace commpress::cpu::detail {

/// to_half's bits for the lanes of v without a hardware conversion, for every lane but NaN
/// (whose code the caller chooses): ties to even, a magnitude of 65520 or more to infinity.
/// A normal half is rounded in the integers, as float_bits_to_half_bits rounds it: rebias the
/// exponent, add 0xfff plus the kept mantissa's lowest bit, drop 13 bits (a carry may reach
/// the exponent, which is right). A half subnormal is rounded by the fp32 adder: |v| + 0.5f
/// has an ulp of 2^-24, the subnormal half's, so the sum's low bits are the rounded code. An
/// fp32 subnormal rounds to 0 either way, so a flush-to-zero mode changes no code (nor, in
/// half_values, any value: its operands and results are normal).
COMMPRESS_FORCEINLINE simd::vh half_bits_rounded(simd::vf v) {
  using namespace simd;
  const vu u = bits(v);
  const vu a = and_u32(u, splat_u32(0x7fffffffu));
  const vu sign = srl<16>(xor_u32(u, a));
  const vu odd = and_u32(srl<13>(a), splat_u32(1));
  // a - 0x38000000 + 0xfff, modulo 2^32.
  const vu normal = srl<13>(add_u32(add_u32(a, splat_u32(0xc8000fffu)), odd));
  const vu subnormal = sub_u32(bits(add(from_bits(a), splat(0.5f))), splat_u32(0x3f000000u));
  // a <= 0x7fffffff: the signed comparisons order it.
  vu code = select(gt_i32(a, splat_u32(0x387fffffu)), normal, subnormal);
  code = select(gt_i32(a, splat_u32(0x477fefffu)), splat_u32(0x7c00u), code);
  return narrow_u16(or_u32(code, sign));
}

/// fp16 codes of the lanes of v (NaN lanes as half_bits_rounded leaves them): the hardware
/// conversion where there is one.
COMMPRESS_FORCEINLINE simd::vh half_lanes(simd::vf v) {
#if defined(COMMPRESS_SIMD_F16C)
  return simd::half_bits(v);
#else
  return half_bits_rounded(v);
#endif
}

/// The values of the fp16 codes in the low halves of u's lanes (read from p), as
/// half_bits_to_float_bits gives them: a NaN keeps its payload, which the hardware conversion
/// would quiet, so its lanes are rebuilt. Without the hardware, in the integers: the exponent is
/// rebiased, once more for Inf and NaN; a subnormal half m * 2^-24 is 2^-14 + m * 2^-24 built
/// from its bits, less 2^-14, which the fp32 subtracter takes exactly.
COMMPRESS_FORCEINLINE simd::vf half_values(simd::vu u, [[maybe_unused]] const void* p) {
  using namespace simd;
  const vu sign = sll<16>(and_u32(u, splat_u32(0x8000u)));
#if defined(COMMPRESS_SIMD_F16C)
  const vu nan_bits =
      or_u32(or_u32(sign, splat_u32(0x7f800000u)), sll<13>(and_u32(u, splat_u32(0x3ffu))));
  return select(gt_i32(and_u32(u, splat_u32(0x7fffu)), splat_u32(0x7c00u)), from_bits(nan_bits),
                from_half(p));
#else
  const vu m = sll<13>(and_u32(u, splat_u32(0x7fffu)));
  const vu e = and_u32(m, splat_u32(0x0f800000u));
  vu v = add_u32(m, splat_u32(0x38000000u));
  v = select(eq_u32(e, splat_u32(0x0f800000u)), add_u32(v, splat_u32(0x38000000u)), v);
  const vu subnormal =
      bits(sub(from_bits(add_u32(m, splat_u32(0x38800000u))), from_bits(splat_u32(0x38800000u))));
  v = select(eq_u32(e, splat_u32(0)), subnormal, v);
  return from_bits(or_u32(v, sign));
#endif
}

/// to_bfloat16's bits for the fp32 lanes whose bits are u, for every lane but NaN:
/// float_bits_to_bf16_bits' rounding, ties to even. It takes the bits, which is where a caller
/// holding them (the cast codec's encode) has them.
COMMPRESS_FORCEINLINE simd::vh bf16_lanes(simd::vu u) {
  using namespace simd;
  const vu lsb = and_u32(srl<16>(u), splat_u32(1));
  return narrow_u16(srl<16>(add_u32(add_u32(u, splat_u32(0x7fffu)), lsb)));
}

/// The bits of from_float<T> for the lanes of v, T bfloat16 (Bf16) or half: ties to even, a
/// magnitude beyond the type's range to infinity, a NaN as 0x7fff (core/dtype.hpp).
template <bool Bf16> COMMPRESS_FORCEINLINE simd::vh element_bits(simd::vf v) {
  return simd::select(simd::is_nan(v), simd::splat_u16(0x7fffu),
                      Bf16 ? bf16_lanes(simd::bits(v)) : half_lanes(v));
}

/// values[0, 64) stored as element type T (half or bfloat16) at out, each from_float<T>(value),
/// a vector at a time; but bf16 on the portable layer, whose element-by-element loop the
/// compiler vectorizes better.
template <element T> COMMPRESS_FORCEINLINE void store_elements_64(T* out, const float* values) {
  constexpr bool bf16 = std::same_as<T, bfloat16>;
#if defined(COMMPRESS_SIMD_PORTABLE)
  constexpr bool vectors = !bf16;
#else
  constexpr bool vectors = true;
#endif
  if constexpr (vectors) {
    for (std::size_t q = 0; q < simd::vectors_per_64; ++q)
      simd::store(out + q * simd::lanes, element_bits<bf16>(simd::load(values + q * simd::lanes)));
  } else {
    for (std::size_t j = 0; j < 64; ++j)
      out[j] = from_float<T>(values[j]);
  }
}

/// The lanes of p[0, lanes) as fp32, each to_float(p[j]).
template <element T> COMMPRESS_FORCEINLINE simd::vf load_lanes(const T* p) {
  using namespace simd;
  if constexpr (std::same_as<T, float>) {
    return load(p);
  } else {
    const vu u = load_u16(p);
    if constexpr (std::same_as<T, bfloat16>)
      return from_bits(sll<16>(u));
    else
      return half_values(u, p);
  }
}

/// The bits of load_lanes(p): fp32 lanes loaded as they are.
template <element T> COMMPRESS_FORCEINLINE simd::vu load_lane_bits(const T* p) {
  if constexpr (std::same_as<T, float>)
    return simd::load_u32(p);
  else
    return simd::bits(load_lanes(p));
}

/// in[0, m) widened to fp32 at out, each to_float(in[i]): a vector at a time, then one by one.
template <element T>
COMMPRESS_FORCEINLINE void widen_elements(const T* COMMPRESS_RESTRICT in, std::size_t m,
                                          float* COMMPRESS_RESTRICT out) {
  std::size_t i = 0;
  for (; m - i >= simd::lanes; i += simd::lanes)
    simd::store(out + i, load_lanes(in + i));
  for (; i < m; ++i)
    out[i] = to_float(in[i]);
}

} // namespace commpress::cpu::detail
