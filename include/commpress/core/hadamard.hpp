// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The randomized Hadamard transform of one window (docs/methods.md, "Randomized Hadamard
/// rotation"): y = (1/sqrt(m)) H_m D x, with D a diagonal of random signs and H_m the m x m
/// Sylvester-Hadamard matrix, and its inverse x = D (1/sqrt(m)) H_m y (H_m is symmetric and
/// H_m H_m = m I). The transform is orthogonal, so ||y||_2 = ||x||_2; it spreads a block's
/// outliers over the whole block, which is why a low-bit quantizer after it loses less (the
/// argument of SDP4Bit and QuaRot).
///
/// A tensor is cut into windows of b = 2^k consecutive elements. The last window, of L < b
/// elements, is cut into the powers of two of L's binary digits, largest first, each rotated on
/// its own: the transform keeps n elements with no padding. The signs of D come from the
/// counter RNG, keyed apart from the codecs' stream, so that the sender and receiver agree on
/// them from the payload header alone: element i's sign is bit i % 32 of the random word
/// random_u32(rotation_key(seed, tensor_id), step, i / 32), 1 meaning negative.
///
/// Everything is computed in double, in a fixed butterfly order, and rounded to float once
/// (saturating at the largest float): the sums cannot overflow, the result is the correctly
/// rounded value of the same double expression on every backend, and the inverse returns the
/// input to within a float rounding.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress {

/// @brief The largest Hadamard window commpress rotates: 2^12 elements (a window of doubles is
/// 32 KiB, on the stack).
inline constexpr unsigned hadamard_max_log2 = 12;
/// @brief The smallest: 2^3 elements, so that windows start on a byte of any code packing.
inline constexpr unsigned hadamard_min_log2 = 3;

/// @brief The key of the rotation signs' stream: one Philox block of (tensor_id) under `seed`,
/// with a domain constant of its own, so the signs are independent of a stochastic codec's
/// random words (make_rng_key).
COMMPRESS_HOST_DEVICE constexpr rng_key rotation_key(std::uint64_t seed, std::uint32_t tensor_id) {
  const rng_block b = philox4x32_10(
      tensor_id, 0x726f7461u /* "rota" */, 0x74696f6eu /* "tion" */, 0u,
      rng_key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return rng_key{b.v[0], b.v[1]};
}

namespace detail {

/// Three strides of butterflies, h, 2h and 4h, on the groups of eight elements g_t[j] = x[j +
/// t h] (t = 0..7) for j in [0, h): the operations of the three strides one after the other,
/// on the same operands, so the same bits, in one pass over the rows instead of three. The
/// rows are disjoint, which the restrict pointers tell the compiler, so the loop vectorizes.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE void walsh_hadamard_radix8(
    double* COMMPRESS_RESTRICT g0, double* COMMPRESS_RESTRICT g1, double* COMMPRESS_RESTRICT g2,
    double* COMMPRESS_RESTRICT g3, double* COMMPRESS_RESTRICT g4, double* COMMPRESS_RESTRICT g5,
    double* COMMPRESS_RESTRICT g6, double* COMMPRESS_RESTRICT g7, std::uint64_t h) {
  for (std::uint64_t j = 0; j < h; ++j) {
    const double a0 = g0[j] + g1[j], a1 = g0[j] - g1[j];
    const double a2 = g2[j] + g3[j], a3 = g2[j] - g3[j];
    const double a4 = g4[j] + g5[j], a5 = g4[j] - g5[j];
    const double a6 = g6[j] + g7[j], a7 = g6[j] - g7[j];
    const double b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
    const double b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
    g0[j] = b0 + b4;
    g4[j] = b0 - b4;
    g1[j] = b1 + b5;
    g5[j] = b1 - b5;
    g2[j] = b2 + b6;
    g6[j] = b2 - b6;
    g3[j] = b3 + b7;
    g7[j] = b3 - b7;
  }
}

/// Strides h and 2h on the groups of four rows g_t[j] = x[j + t h], as walsh_hadamard_radix8.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE void
walsh_hadamard_radix4(double* COMMPRESS_RESTRICT g0, double* COMMPRESS_RESTRICT g1,
                      double* COMMPRESS_RESTRICT g2, double* COMMPRESS_RESTRICT g3,
                      std::uint64_t h) {
  for (std::uint64_t j = 0; j < h; ++j) {
    const double a0 = g0[j] + g1[j], a1 = g0[j] - g1[j];
    const double a2 = g2[j] + g3[j], a3 = g2[j] - g3[j];
    g0[j] = a0 + a2;
    g2[j] = a0 - a2;
    g1[j] = a1 + a3;
    g3[j] = a1 - a3;
  }
}

/// The unnormalised fast Walsh-Hadamard transform of x[0, m), m a power of two, in place: the
/// butterflies (a, b) -> (a + b, a - b) at strides 1, 2, 4, ... (H_m in Sylvester's order).
/// Butterflies of one stride are independent, and those of strides 1, 2 and 4 stay within an
/// aligned group of 8, so each group takes its three strides at once, in registers. From
/// stride 8 on, strides are taken three at a time (walsh_hadamard_radix8), and the one or two
/// left over when m is not a power of 8 together: the same additions on the same operands, in
/// fewer passes over the window.
COMMPRESS_HOST_DEVICE inline void walsh_hadamard(double* x, std::uint64_t m) {
  std::uint64_t h = 1;
  if (m >= 8) {
    for (std::uint64_t i = 0; i < m; i += 8) {
      double* g = x + i;
      const double a0 = g[0] + g[1], a1 = g[0] - g[1], a2 = g[2] + g[3], a3 = g[2] - g[3];
      const double a4 = g[4] + g[5], a5 = g[4] - g[5], a6 = g[6] + g[7], a7 = g[6] - g[7];
      const double b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
      const double b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
      g[0] = b0 + b4;
      g[4] = b0 - b4;
      g[1] = b1 + b5;
      g[5] = b1 - b5;
      g[2] = b2 + b6;
      g[6] = b2 - b6;
      g[3] = b3 + b7;
      g[7] = b3 - b7;
    }
    h = 8;
  }
  for (; 8 * h <= m; h *= 8)
    for (std::uint64_t i = 0; i < m; i += 8 * h)
      walsh_hadamard_radix8(x + i, x + i + h, x + i + 2 * h, x + i + 3 * h, x + i + 4 * h,
                            x + i + 5 * h, x + i + 6 * h, x + i + 7 * h, h);
  if (4 * h <= m) {
    for (std::uint64_t i = 0; i < m; i += 4 * h)
      walsh_hadamard_radix4(x + i, x + i + h, x + i + 2 * h, x + i + 3 * h, h);
    h *= 4;
  }
  for (; h < m; h *= 2) // m < 8 (h = 1, 2, 4), or one stride left
    for (std::uint64_t i = 0; i < m; i += 2 * h)
      for (std::uint64_t j = i; j < i + h; ++j) {
        const double a = x[j];
        const double b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

/// Calls f(at, m) for each power-of-two piece [at, at + m) of a window of len elements: one
/// piece when len is a power of two, else the pieces of len's binary digits, largest first.
template <class F> COMMPRESS_HOST_DEVICE void for_each_hadamard_piece(std::uint64_t len, F&& f) {
  for (std::uint64_t at = 0; at < len;) {
    std::uint64_t m = 1;
    while (2 * m <= len - at)
      m *= 2;
    f(at, m);
    at += m;
  }
}

/// 1/sqrt(m), the scale that makes H_m orthonormal.
COMMPRESS_HOST_DEVICE inline double hadamard_scale(std::uint64_t m) {
#if COMMPRESS_DEVICE_COMPILATION
  return 1.0 / ::sqrt(static_cast<double>(m));
#else
  return 1.0 / std::sqrt(static_cast<double>(m));
#endif
}

/// The orthonormal transform (1/sqrt(m)) H_m of each power-of-two piece of x[0, len).
COMMPRESS_HOST_DEVICE inline void orthonormal_hadamard_pieces(double* x, std::uint64_t len) {
  for_each_hadamard_piece(len, [&](std::uint64_t at, std::uint64_t m) {
    walsh_hadamard(x + at, m);
    const double scale = hadamard_scale(m);
    for (std::uint64_t j = at; j < at + m; ++j)
      x[j] *= scale;
  });
}

/// Calls f(word, begin, end) for each run [begin, end) of the elements [0, len) of a window
/// that starts at element `first` of the tensor whose signs come from one random word: element
/// first + j's sign is bit (first + j) % 32 of word, 1 meaning negative. Each Philox block is
/// drawn once for its four words.
template <class F>
COMMPRESS_HOST_DEVICE void for_each_sign_word(std::uint64_t len, rng_key key, std::uint64_t step,
                                              std::uint64_t first, F&& f) {
  std::uint64_t block = ~std::uint64_t{0};
  rng_block b{};
  for (std::uint64_t j = 0; j < len;) {
    const std::uint64_t w = (first + j) / 32; // random_u32(key, step, w)
    if (w / 4 != block) {
      block = w / 4;
      b = random_block(key, step, block);
    }
    const std::uint64_t end = len < (w + 1) * 32 - first ? len : (w + 1) * 32 - first;
    f(b.v[w % 4], j, end);
    j = end;
  }
}

/// Multiplies x[0, len), the elements first .. first + len - 1 of the tensor, by D's signs.
COMMPRESS_HOST_DEVICE inline void apply_rotation_signs(double* x, std::uint64_t len, rng_key key,
                                                       std::uint64_t step, std::uint64_t first) {
  for_each_sign_word(len, key, step, first,
                     [&](std::uint32_t word, std::uint64_t begin, std::uint64_t end) {
                       for (std::uint64_t t = begin; t < end; ++t)
                         x[t] *= (word >> ((first + t) % 32)) & 1u ? -1.0 : 1.0;
                     });
}

/// The fp32 sign bits of four consecutive elements whose signs form the nibble k (bit t:
/// element t): 0x80000000 where negative.
struct sign_mask_nibbles {
  std::uint32_t m[16][4];
  constexpr sign_mask_nibbles() : m{} {
    for (int k = 0; k < 16; ++k)
      for (int t = 0; t < 4; ++t)
        m[k][t] = (k >> t) & 1 ? 0x80000000u : 0u;
  }
};
inline constexpr sign_mask_nibbles rotation_sign_mask_nibbles{};

/// D's signs of the elements first .. first + len - 1 as fp32 sign bits: mask[j] is 0x80000000
/// where element first + j's sign is negative, else 0. Four at a time from a table where the
/// window is aligned to four, since an x86 vector has no per-lane shift before AVX2.
COMMPRESS_HOST_DEVICE inline void rotation_sign_masks(std::uint32_t* mask, std::uint64_t len,
                                                      rng_key key, std::uint64_t step,
                                                      std::uint64_t first) {
  for_each_sign_word(
      len, key, step, first, [&](std::uint32_t word, std::uint64_t begin, std::uint64_t end) {
        std::uint64_t t = begin;
#if !COMMPRESS_DEVICE_COMPILATION // the table is host memory
        if ((first + t) % 4 == 0)
          for (; t + 4 <= end; t += 4)
            std::memcpy(mask + t, rotation_sign_mask_nibbles.m[(word >> ((first + t) % 32)) & 15u],
                        16);
#endif
        for (; t < end; ++t)
          mask[t] = ((word >> ((first + t) % 32)) & 1u) << 31;
      });
}

/// d rounded to float, saturating: a finite d beyond the largest float becomes the largest
/// float of its sign (as the cast codec saturates), so that no finite window rotates, or
/// rotates back, to an infinity; an infinity stays one, and a NaN becomes the canonical quiet
/// NaN 0x7FC00000 (its payload and sign after the butterflies would depend on the instruction
/// set). With `sign` 0x80000000 it rounds -d: the rounding is symmetric, so flipping the
/// float's sign bit before the NaN is made canonical gives the same bits. Selects, not
/// branches, so that a loop of it vectorizes.
COMMPRESS_HOST_DEVICE inline float round_to_float(double d, std::uint32_t sign = 0) {
  constexpr double largest = 3.4028234663852886e38;         // the largest float, exactly
  constexpr double largest_double = 1.7976931348623157e308; // beyond it: an infinity
#if COMMPRESS_DEVICE_COMPILATION
  const double a = ::fabs(d);
  const float r = static_cast<float>(a > largest ? ::copysign(largest, d) : d); // NaN: NaN
  const float f = a > largest_double ? ::copysignf(bits_to_float(0x7f800000u), r) : r;
#else
  const double a = std::abs(d);
  const float r = static_cast<float>(a > largest ? std::copysign(largest, d) : d); // NaN: NaN
  const float f = a > largest_double ? std::copysign(bits_to_float(0x7f800000u), r) : r;
#endif
  // A NaN's bits, chosen on the integer side so that a loop of this stays a vector loop.
  const std::uint32_t u = float_to_bits(f) ^ sign;
  return bits_to_float((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u);
}

} // namespace detail

/// @brief One window's forward rotation in place: x <- (1/sqrt(m)) H_m D x per piece.
/// @param first the window's first element in the tensor
COMMPRESS_HOST_DEVICE inline void hadamard_forward(double* x, std::uint64_t len, rng_key key,
                                                   std::uint64_t step, std::uint64_t first) {
  detail::apply_rotation_signs(x, len, key, step, first);
  detail::orthonormal_hadamard_pieces(x, len);
}

/// @brief One window's inverse rotation in place: x <- D (1/sqrt(m)) H_m x per piece.
COMMPRESS_HOST_DEVICE inline void hadamard_inverse(double* x, std::uint64_t len, rng_key key,
                                                   std::uint64_t step, std::uint64_t first) {
  detail::orthonormal_hadamard_pieces(x, len);
  detail::apply_rotation_signs(x, len, key, step, first);
}

} // namespace commpress
