// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Scalar helpers for per-element code shared by the CPU and CUDA backends.
///
/// Shared code must produce the same bits on both backends, so it avoids `std::` calls that
/// nvcc cannot run on the device and uses explicitly rounded arithmetic where a compiler could
/// otherwise fuse `a * b + c` into one FMA (algorithms.md section 7, item 3). Under nvcc the
/// `*_rn` helpers are the `__f*_rn` intrinsics, which are never contracted; on the host the
/// `commpress::commpress` target compiles with `-ffp-contract=off` for the same guarantee.

#include <cstdint>
#include <cstring>

#include "commpress/core/config.hpp"

namespace commpress::detail {

COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// a * b, rounded once, never fused with a neighbouring add.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float mul_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b, rounded once, never fused with a neighbouring multiply.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float add_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// a - b, rounded once, never fused with a neighbouring multiply.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float sub_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

/// IEEE division, correctly rounded on both backends (nvcc's default `-prec-div=true`).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float div_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float abs(float x) {
  return bits_to_float(float_to_bits(x) & 0x7fffffffu);
}

/// Larger of two values; NaN-free inputs assumed (callers screen non-finite values first).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float max(float a, float b) { return a < b ? b : a; }
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float min(float a, float b) { return b < a ? b : a; }

COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE bool is_finite(float x) {
  return (float_to_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/// Round to nearest, ties to even, for |y| < 2^22, without relying on the current rounding mode
/// or on SSE4.1: adding 1.5 * 2^23 pushes the fraction out of the mantissa.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float round_half_even(float y) {
  constexpr float magic = 12582912.0f; // 1.5 * 2^23
  return sub_rn(add_rn(y, magic), magic);
}

/// Largest integer-valued float <= y, for |y| < 2^22 (same trick as round_half_even).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float floor_small(float y) {
  const float r = round_half_even(y);
  return r > y ? sub_rn(r, 1.0f) : r;
}

COMMPRESS_HOST_DEVICE constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

} // namespace commpress::detail
