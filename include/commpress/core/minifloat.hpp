// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The narrow floating-point formats of the fp8 and microscaling codecs, as byte codes, and
/// their conversions (docs/methods.md section 12): the element formats E4M3, E5M2 (OCP 8-bit
/// Floating Point Specification, OFP8, rev. 1.0) and E2M1 (OCP Microscaling Formats (MX)
/// Specification v1.0), and the E8M0 power-of-two scale of the MX formats. Shared by every
/// backend, so the CPU and the GPU convert alike.
///
/// A code of E exponent and M mantissa bits with bias B stands for (-1)^s 2^(e - B) (1 + m/2^M)
/// when its exponent field e is not 0, and (-1)^s 2^(1 - B) m/2^M when it is (subnormals):
/// | format | E, M, B | largest finite | smallest normal | special codes |
/// | --- | --- | --- | --- | --- |
/// | E4M3 | 4, 3, 7 | 448 (0x7E) | 2^-6 | S.1111.111 NaN; no infinities |
/// | E5M2 | 5, 2, 15 | 57344 (0x7B) | 2^-14 | S.11111.00 Inf, S.11111.{01,10,11} NaN |
/// | E2M1 | 2, 1, 1 | 6 (0x7) | 1 | none (4-bit codes) |
///
/// to_minifloat rounds |x| to the nearest code, ties to the even mantissa, and saturates: any
/// |x| at or above the largest finite value (infinities included) becomes the largest finite
/// code, which is what scaled quantization wants (the "satfinite" conversion of CUDA's
/// __nv_cvt_float_to_fp8 and Transformer Engine's casts). The sign is kept, -0 and values that
/// round to zero included. NaN becomes the format's NaN (E4M3 0x7F, E5M2 0x7E) or, in E2M1,
/// which has none, 0; the codecs never convert a NaN (a group holding one is sent as a NaN
/// scale instead).

#include <cstdint>

#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"

namespace commpress {

/// @brief An element format of the fp8 and microscaling codecs (its wire byte in params).
enum class minifloat : std::uint8_t {
  e4m3 = 1, ///< 8 bits: 4 exponent, 3 mantissa, bias 7, finite only (OFP8 E4M3)
  e5m2 = 2, ///< 8 bits: 5 exponent, 2 mantissa, bias 15, with infinities (OFP8 E5M2)
  e2m1 = 3, ///< 4 bits: 2 exponent, 1 mantissa, bias 1, finite only (MX FP4)
};

namespace detail {

/// The parameters of a minifloat format.
struct minifloat_format {
  unsigned exponent_bits;
  unsigned mantissa_bits;
  int bias;
  std::uint32_t max_code; ///< largest finite magnitude's code (sign bit clear)
  std::uint32_t nan_code; ///< what a NaN converts to
};

COMMPRESS_HOST_DEVICE constexpr minifloat_format format_of(minifloat f) {
  switch (f) {
  case minifloat::e5m2:
    return {5, 2, 15, 0x7bu, 0x7eu};
  case minifloat::e2m1:
    return {2, 1, 1, 0x7u, 0x0u};
  default:
    return {4, 3, 7, 0x7eu, 0x7fu};
  }
}

/// 2^k as a float, for -126 <= k <= 127.
COMMPRESS_HOST_DEVICE inline float pow2(int k) {
  return bits_to_float(static_cast<std::uint32_t>(k + 127) << 23);
}

} // namespace detail

/// @brief Bits of one code of format f (8, or 4 for E2M1).
COMMPRESS_HOST_DEVICE constexpr unsigned minifloat_bits(minifloat f) {
  const detail::minifloat_format m = detail::format_of(f);
  return 1u + m.exponent_bits + m.mantissa_bits;
}

/// @brief The value of code q of format f (exact: every code is a float). NaN codes give the
/// canonical quiet NaN 0x7fc00000; E5M2's infinity codes give infinities.
COMMPRESS_HOST_DEVICE inline float from_minifloat(minifloat f, std::uint32_t q) {
  const detail::minifloat_format m = detail::format_of(f);
  const unsigned width = m.exponent_bits + m.mantissa_bits;
  const std::uint32_t sign = ((q >> width) & 1u) << 31;
  const std::uint32_t mag = q & ((1u << width) - 1u);
  const std::uint32_t exponent_field = mag >> m.mantissa_bits;
  const std::uint32_t mantissa = mag & ((1u << m.mantissa_bits) - 1u);
  if (f == minifloat::e4m3 && mag == 0x7fu)
    return detail::bits_to_float(0x7fc00000u);
  if (f == minifloat::e5m2 && mag >= 0x7cu)
    return detail::bits_to_float(mag == 0x7cu ? (sign | 0x7f800000u) : 0x7fc00000u);
  std::uint32_t bits;
  if (exponent_field == 0) { // subnormal: m 2^(1 - B - M), one exact product
    bits = detail::float_to_bits(static_cast<float>(mantissa) *
                                 detail::pow2(1 - m.bias - static_cast<int>(m.mantissa_bits)));
  } else {
    bits = ((exponent_field + static_cast<std::uint32_t>(127 - m.bias)) << 23) |
           (mantissa << (23u - m.mantissa_bits));
  }
  return detail::bits_to_float(sign | bits);
}

/// @brief x as a code of format f: |x| rounded to nearest, ties to even, saturated at the
/// largest finite value; the sign kept. NaN gives the format's NaN code (0 in E2M1).
COMMPRESS_HOST_DEVICE inline std::uint32_t to_minifloat(minifloat f, float x) {
  const detail::minifloat_format m = detail::format_of(f);
  const unsigned width = m.exponent_bits + m.mantissa_bits;
  const std::uint32_t u = detail::float_to_bits(x);
  const std::uint32_t sign = (u >> 31) << width;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return m.nan_code;
  const float max_value = from_minifloat(f, m.max_code);
  const float magnitude = detail::bits_to_float(a);
  if (!(magnitude < max_value)) // at or above the largest finite value, infinity included
    return sign | m.max_code;
  const int min_normal_exponent = 1 - m.bias;
  if (a < static_cast<std::uint32_t>(min_normal_exponent + 127) << 23) {
    // Below the smallest normal: the multiple of the subnormal spacing 2^(1 - B - M) nearest
    // to |x|. Scaling by a power of two is exact, and the rounded count (0 .. 2^M) is the code
    // itself: 2^M is the smallest normal's.
    const float count = detail::round_half_even(
        detail::mul_rn(magnitude, detail::pow2(m.bias - 1 + static_cast<int>(m.mantissa_bits))));
    return sign | static_cast<std::uint32_t>(count);
  }
  // Normal: round the 23-bit mantissa to M bits, ties to even; a carry moves into the exponent.
  const unsigned shift = 23u - m.mantissa_bits;
  const std::uint32_t rounded = a + ((1u << (shift - 1u)) - 1u) + ((a >> shift) & 1u);
  return sign |
         ((rounded >> shift) - (static_cast<std::uint32_t>(127 - m.bias) << m.mantissa_bits));
}

/// @brief The value 2^(q - 127) of E8M0 scale code q; code 255 is NaN (the canonical quiet
/// NaN), code 0 is 2^-127 (a subnormal float).
COMMPRESS_HOST_DEVICE inline float from_e8m0(std::uint32_t q) {
  if (q == 0xffu)
    return detail::bits_to_float(0x7fc00000u);
  return detail::bits_to_float(q == 0 ? 0x00400000u : (q << 23));
}

/// @brief The E8M0 code of the smallest power of two at or above r >= 0 (r rounded up to a
/// power of two), clamped to [2^-127, 2^max_exponent]; NaN gives the NaN code 255.
COMMPRESS_HOST_DEVICE inline std::uint32_t e8m0_at_least(float r, int max_exponent) {
  const std::uint32_t u = detail::float_to_bits(r);
  if (u > 0x7f800000u)
    return 0xffu;
  int exponent;
  if (u <= 0x00400000u) { // r <= 2^-127 (zero included)
    exponent = -127;
  } else if (u < 0x00800000u) { // subnormal above 2^-127
    exponent = -126;
  } else {
    exponent = static_cast<int>(u >> 23) - 127 + ((u & 0x7fffffu) != 0 ? 1 : 0);
  }
  exponent = exponent < max_exponent ? exponent : max_exponent;
  return static_cast<std::uint32_t>(exponent + 127);
}

} // namespace commpress
