// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// core/minifloat.hpp's conversion from fp32 to E4M3, E5M2 and E2M1 codes on the vector layer,
/// for values that are not NaN: the same rounding, bit for bit, with the scalar function's
/// subnormal and normal branches computed in every lane and selected, and its saturation a
/// minimum, so 64 elements convert in a few dozen vector operations instead of 64 branchy calls.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/minifloat.hpp"

namespace commpress::cpu::detail {

/// to_minifloat(F, y) in every lane of y, which holds no NaN (an infinity saturates; a NaN lane
/// would give the largest code with its sign, not the NaN code). The scalar function's branches
/// are computed in every lane and the subnormal one selected; the normal codes grow with |y|, so
/// saturation is their minimum with the largest code.
template <minifloat F> COMMPRESS_FORCEINLINE simd::vu to_minifloat_lanes(simd::vf y) {
  using namespace simd;
  constexpr commpress::detail::minifloat_format m = commpress::detail::format_of(F);
  constexpr unsigned width = m.exponent_bits + m.mantissa_bits;
  constexpr unsigned shift = 23u - m.mantissa_bits;
  const vu u = bits(y);
  const vu a = and_u32(u, splat_u32(0x7fffffffu));
  // Normal: the 23-bit mantissa rounded to M bits, ties to even, a carry moving into the
  // exponent, and the exponent rebased from 127 to the format's bias, in one added constant
  // (the rounding term less the rebasing term, which wraps below 0): the rebasing term is a
  // multiple of 2^shift and a normal |y|'s bits exceed it, so subtracting it before the shift is
  // subtracting it after. Here and below, the codes and |y|'s bits are below 2^31 and compared
  // signed: one instruction on AVX2 and SSE2, which have no unsigned compare.
  constexpr std::uint32_t rebase_and_round =
      ((1u << (shift - 1u)) - 1u) - (static_cast<std::uint32_t>(127 - m.bias) << 23);
  const vu normal = min_i32(srl<shift>(add_u32(add_u32(a, splat_u32(rebase_and_round)),
                                               and_u32(srl<shift>(a), splat_u32(1)))),
                            splat_u32(m.max_code));
  // Below the smallest normal: |y| rounded to a multiple of the subnormal spacing 2^(1 - B - M),
  // ties to even, by adding 2^(24 - B - M), whose ulp is that spacing: the sum's bits minus the
  // addend's count the spacings (at most 2^M, the smallest normal's code).
  constexpr std::uint32_t magic =
      static_cast<std::uint32_t>(127 + 24 - m.bias - static_cast<int>(m.mantissa_bits)) << 23;
  const vu subnormal =
      sub_u32(bits(add(from_bits(a), from_bits(splat_u32(magic)))), splat_u32(magic));
  constexpr std::uint32_t smallest_normal = static_cast<std::uint32_t>(1 - m.bias + 127) << 23;
  const vu code = select(gt_i32(splat_u32(smallest_normal), a), subnormal, normal);
  return or_u32(code, srl<31u - width>(and_u32(u, splat_u32(0x80000000u))));
}

/// The codes to_minifloat(F, x[j] * k[j / simd::lanes]) of `count` elements (a multiple of
/// simd::lanes, at most 64), a non-finite x[j] counting as 0 (as the block-scaled kit encodes),
/// packed as a stream of minifloat_bits(F)-bit codes at out. A scale per vector lets groups
/// shorter than 64 elements (NVFP4's 16, MX's 32) share one call and one packing.
template <minifloat F>
COMMPRESS_SIMD_KERNEL void minifloat_codes(const float* COMMPRESS_RESTRICT x, std::size_t count,
                                           const float (&k)[simd::vectors_per_64],
                                           unsigned char* COMMPRESS_RESTRICT out) {
  using namespace simd;
  constexpr unsigned bits = minifloat_bits(F);
  vu codes[vectors_per_64];
  for (std::size_t q = 0; q < vectors_per_64; ++q) {
    if (q * lanes < count) {
      const vf v = load(x + q * lanes);
      codes[q] = to_minifloat_lanes<F>(mul(clear(nonfinite(v), v), splat(k[q])));
    } else {
      codes[q] = splat_u32(0);
    }
  }
  if (count == 64) {
    store_packed<bits>(narrow_u8(codes), out);
  } else { // a short run: pack 64, keep its part
    unsigned char packed[8 * bits];
    store_packed<bits>(narrow_u8(codes), packed);
    std::memcpy(out, packed, count * bits / 8);
  }
}

/// from_minifloat(f, q) for every code q of format f (E2M1's 16 codes, the others' 256): a
/// decoder looks a value up instead of taking the scalar function's branches.
struct minifloat_value_table {
  float value[256];

  explicit minifloat_value_table(minifloat f) {
    const std::uint32_t codes = 1u << minifloat_bits(f);
    for (std::uint32_t q = 0; q < 256; ++q)
      value[q] = q < codes ? from_minifloat(f, q) : 0.0f;
  }
};

/// The value table of format f.
inline const float* minifloat_values(minifloat f) {
  static const minifloat_value_table e4m3(minifloat::e4m3), e5m2(minifloat::e5m2),
      e2m1(minifloat::e2m1);
  return f == minifloat::e5m2 ? e5m2.value : f == minifloat::e2m1 ? e2m1.value : e4m3.value;
}

} // namespace commpress::cpu::detail
