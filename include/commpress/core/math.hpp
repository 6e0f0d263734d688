// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Scalar helpers for per-element code shared by the CPU and CUDA backends.
///
/// Shared code must produce the same bits on both backends, so it avoids `std::` calls that
/// nvcc cannot run on the device and uses explicitly rounded arithmetic where a compiler could
/// otherwise fuse `a * b + c` into one FMA (docs/methods.md section 10.2). Under nvcc the
/// `*_rn` helpers are the `__f*_rn` intrinsics, which are never contracted; on the host the
/// `commpress::commpress` target compiles with `-ffp-contract=off` for the same guarantee.

#include <bit>
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

/// v, with any NaN replaced by the one canonical quiet NaN 0x7fc00000. Which NaN an arithmetic
/// instruction returns differs between backends (x86 passes an input's payload through, and
/// which input depends on operand order; GPUs return 0x7fffffff), so every rounded operation
/// below canonicalises its result and CPU and GPU write the same bits for NaN data.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float canonical_nan(float v) {
  return v == v ? v : bits_to_float(0x7fc00000u);
}

/// a * b, rounded once, never fused with a neighbouring add; NaN results are canonical.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float mul_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return canonical_nan(__fmul_rn(a, b));
#else
  return canonical_nan(a * b);
#endif
}

/// a + b, rounded once, never fused with a neighbouring multiply; NaN results are canonical.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float add_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return canonical_nan(__fadd_rn(a, b));
#else
  return canonical_nan(a + b);
#endif
}

/// a - b, rounded once, never fused with a neighbouring multiply; NaN results are canonical.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float sub_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return canonical_nan(__fsub_rn(a, b));
#else
  return canonical_nan(a - b);
#endif
}

/// IEEE division, correctly rounded on both backends (nvcc's default `-prec-div=true`); NaN
/// results are canonical.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float div_rn(float a, float b) {
#if COMMPRESS_DEVICE_COMPILATION
  return canonical_nan(__fdiv_rn(a, b));
#else
  return canonical_nan(a / b);
#endif
}

COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float abs(float x) {
  return bits_to_float(float_to_bits(x) & 0x7fffffffu);
}

/// Larger of two values; NaN-free inputs assumed (callers screen non-finite values first).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float max(float a, float b) {
  return a < b ? b : a;
}
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float min(float a, float b) {
  return b < a ? b : a;
}

COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE bool is_finite(float x) {
  return (float_to_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/// The index of the highest set bit of x != 0 (floor(log2 x)).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE int highest_bit(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(x);
#else
  return 31 - std::countl_zero(x);
#endif
}

/// 1.5 * 2^23: adding it pushes the fraction of any |y| < 2^22 out of the mantissa, so
/// (y + round_magic) - round_magic is y rounded to the nearest integer, ties to even.
inline constexpr float round_magic = 12582912.0f;

/// The largest finite float, 0x7f7fffff.
inline constexpr float float_max = 3.40282346638528859811704183484516925e+38f;

/// Round to nearest, ties to even, for |y| < 2^22, without relying on the current rounding mode
/// or on SSE4.1 (round_magic).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float round_half_even(float y) {
  return sub_rn(add_rn(y, round_magic), round_magic);
}

/// Largest integer-valued float <= y, for |y| < 2^22 (same trick as round_half_even).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float floor_small(float y) {
  const float r = round_half_even(y);
  return r > y ? sub_rn(r, 1.0f) : r;
}

/// Elements a sparsifier keeps of d: `count` if it is set, else the integer nearest to
/// fraction * d (taken in double; at least 1 when fraction > 0), clamped to d. Rounding to
/// nearest rather than up keeps a float fraction's representation error (0.1f is slightly above
/// 0.1) from adding an element: 0.1f of 1000 keeps 100.
COMMPRESS_HOST_DEVICE constexpr std::uint64_t keep_count(float fraction, std::uint64_t count,
                                                         std::uint64_t d) {
  if (count > 0)
    return count < d ? count : d;
  const double p = static_cast<double>(fraction) * static_cast<double>(d);
  if (!(p > 0.0))
    return 0;
  if (p >= static_cast<double>(d))
    return d;
  const auto k = static_cast<std::uint64_t>(p + 0.5); // p + 0.5 >= 0.5: truncation is floor
  return k == 0 ? 1 : k;
}

COMMPRESS_HOST_DEVICE constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

} // namespace commpress::detail
