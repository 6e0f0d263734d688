// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Element types a tensor may hold (`float`, `half`, `bfloat16`) and their conversions.
///
/// Conversions round to nearest even and turn every NaN into the canonical 0x7fff, exactly as
/// `__float2half_rn` and `__float2bfloat16_rn` do, so host and device agree bit for bit.

#include <bit>
#include <concepts>
#include <cstdint>

#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"

namespace commpress {

/// @brief Wire code of an element type (one byte in the payload header).
enum class dtype : std::uint8_t { f32 = 1, f16 = 2, bf16 = 3 };

/// @brief IEEE binary16 storage, layout-compatible with CUDA's `__half` and `at::Half`.
struct half {
  std::uint16_t bits;
  friend constexpr bool operator==(half, half) = default;
};

/// @brief bfloat16 storage, layout-compatible with CUDA's `__nv_bfloat16` and `at::BFloat16`.
struct bfloat16 {
  std::uint16_t bits;
  friend constexpr bool operator==(bfloat16, bfloat16) = default;
};

namespace detail {

COMMPRESS_HOST_DEVICE constexpr std::uint16_t float_bits_to_bf16_bits(std::uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fffu;
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

COMMPRESS_HOST_DEVICE constexpr std::uint16_t float_bits_to_half_bits(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u)
    return 0x7fffu; // NaN
  if (a >= 0x477ff000u)
    return static_cast<std::uint16_t>(sign | 0x7c00u); // >= 65520: Inf
  if (a < 0x38800000u) {                               // half subnormal or zero
    if (a <= 0x33000000u)
      return static_cast<std::uint16_t>(sign); // <= 2^-25 ties to 0
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - (a >> 23);
    std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
      ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  const std::uint32_t r = a - 0x38000000u; // rebias the exponent from 127 to 15
  std::uint32_t q = r >> 13;
  const std::uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
    ++q;
  return static_cast<std::uint16_t>(sign | q);
}

COMMPRESS_HOST_DEVICE constexpr std::uint32_t half_bits_to_float_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu)
    return sign | 0x7f800000u | (m << 13); // Inf / NaN
  if (e != 0)
    return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0)
    return sign;
  std::uint32_t exp = 113u; // normalise a subnormal half
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --exp;
  }
  return sign | (exp << 23) | ((m & 0x3ffu) << 13);
}

} // namespace detail

/// @brief Rounds `f` to the nearest `half` (ties to even; NaN becomes 0x7fff).
COMMPRESS_HOST_DEVICE inline half to_half(float f) {
  return half{detail::float_bits_to_half_bits(detail::float_to_bits(f))};
}
/// @brief Rounds `f` to the nearest `bfloat16` (ties to even; NaN becomes 0x7fff).
COMMPRESS_HOST_DEVICE inline bfloat16 to_bfloat16(float f) {
  return bfloat16{detail::float_bits_to_bf16_bits(detail::float_to_bits(f))};
}
COMMPRESS_HOST_DEVICE inline float to_float(float f) {
  return f;
}
COMMPRESS_HOST_DEVICE inline float to_float(half h) {
  return detail::bits_to_float(detail::half_bits_to_float_bits(h.bits));
}
COMMPRESS_HOST_DEVICE inline float to_float(bfloat16 b) {
  return detail::bits_to_float(static_cast<std::uint32_t>(b.bits) << 16);
}

/// @brief The element types every codec accepts.
template <class T>
concept element = std::same_as<T, float> || std::same_as<T, half> || std::same_as<T, bfloat16>;

/// @brief Converts a float to element type T with the rounding above.
template <element T> COMMPRESS_HOST_DEVICE inline T from_float(float f) {
  if constexpr (std::same_as<T, float>) {
    return f;
  } else if constexpr (std::same_as<T, half>) {
    return to_half(f);
  } else {
    return to_bfloat16(f);
  }
}

template <element T>
inline constexpr dtype dtype_of_v = std::same_as<T, float>  ? dtype::f32
                                    : std::same_as<T, half> ? dtype::f16
                                                            : dtype::bf16;

namespace detail {
/// Largest finite fp16 value, 65504.
inline constexpr float half_max = 65504.0f;
/// Largest finite bfloat16 value, 0x7F7F: (2 - 2^-7) 2^127.
inline constexpr float bfloat16_max = 3.38953139e38f;
static_assert(std::bit_cast<std::uint32_t>(bfloat16_max) == 0x7f7f0000u);

/// x with a finite value beyond `top` in magnitude moved onto +-top; NaN and infinities are
/// kept. What a codec applies before narrowing a value to f16 or bf16, so that a finite input
/// never becomes an infinity on the wire (a rounding that would overflow saturates instead).
COMMPRESS_HOST_DEVICE inline float saturate_finite(float x, float top) {
  if (!is_finite(x))
    return x;
  return x > top ? top : (x < -top ? -top : x);
}

/// The wire bits of x stored as dtype `d`: f32 bits, or the f16 / bf16 bits rounded to nearest
/// even, a finite x beyond the type's range saturated to its largest finite value (NaN: 0x7fff;
/// infinities stay infinite).
COMMPRESS_HOST_DEVICE inline std::uint32_t encode_as(dtype d, float x) {
  if (d == dtype::f16)
    return to_half(saturate_finite(x, half_max)).bits;
  if (d == dtype::bf16)
    return to_bfloat16(saturate_finite(x, bfloat16_max)).bits;
  return float_to_bits(x);
}
/// The value that wire bits of dtype `d` stand for (inverse of encode_as).
COMMPRESS_HOST_DEVICE inline float decode_as(dtype d, std::uint32_t code) {
  if (d == dtype::f16)
    return to_float(half{static_cast<std::uint16_t>(code)});
  if (d == dtype::bf16)
    return to_float(bfloat16{static_cast<std::uint16_t>(code)});
  return bits_to_float(code);
}
} // namespace detail

/// @brief Bytes per element of a dtype (0 for an unknown code).
constexpr std::uint32_t dtype_bytes(dtype d) noexcept {
  switch (d) {
  case dtype::f32:
    return 4;
  case dtype::f16:
    return 2;
  case dtype::bf16:
    return 2;
  }
  return 0;
}

} // namespace commpress
