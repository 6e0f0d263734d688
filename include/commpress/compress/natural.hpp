// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Natural compression (Horvath et al., "Natural Compression for Distributed Deep Learning",
/// 2019): every element rounded at random to one of the two powers of two around it, so that
/// its expectation is the element, and sent as its sign and exponent (docs/methods.md
/// section 14). A stochastic block-scaled codec of the kit (compress/scaled.hpp); the body
/// layout is in docs/wire-format.md ("natural").
///
/// For |x| = (1 + f) 2^a with f in [0, 1), the code is 2^(a+1) with probability f and 2^a
/// otherwise (the paper's C_nat, eq. 4), so E = |x| and the variance is at most |x|^2 / 8. The
/// probability is exact: f's 23 bits against 23 random bits. The paper sends the float's sign
/// and 8 exponent bits; here the exponents are relative to one E8M0-like byte per group, which
/// makes the code 8 bits: top = the exponent of 2 * amax (clamped to [-127, 127]) is the
/// scale byte top + 127, and a code is (sign << 7) | m, m = 0 for zero and m = top + 1 - e for
/// 2^e, e in [top - 126, top]. An element below 2^(top - 126) becomes 2^(top - 126) with
/// probability |x| / 2^(top - 126) (to 24 bits) and 0 otherwise, still unbiased. The one
/// biased case keeps every value finite: at amax >= 2^127 a round up to 2^128 would overflow, so
/// elements in [2^127, 2^128) are sent as 2^127.

#include <array>
#include <cstdint>
#include <limits>

#include "commpress/compress/scaled.hpp"
#include "commpress/core/math.hpp"

namespace commpress {

/// @brief Natural compression: stochastic rounding to a power of two, 8-bit codes, one
/// exponent byte per tensor or per block.
struct natural {
  static constexpr codec_id id{13};
  std::uint32_t block = 0; ///< elements per block; 0: one exponent byte for the whole tensor

  static constexpr unsigned code_bits = 8;
  static constexpr bool stochastic = true;
  using scale = std::uint8_t; ///< top + 127
  using tensor_scale = no_tensor_scale;
  using encoder = int;                                 ///< top
  using decoder = float;                               ///< 2^top, or NaN
  static constexpr std::uint8_t poisoned_scale = 0xff; ///< decodes every element to NaN

  [[nodiscard]] static constexpr bool needs_norm() noexcept { return false; }
  [[nodiscard]] constexpr std::uint64_t block_length() const noexcept { return block; }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return scaled::body_bytes(*this, n);
  }
  /// Header params: [0..3] block (u32 LE).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    detail::put_param(p, 0, block);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }

  COMMPRESS_HOST_DEVICE tensor_scale make_tensor_scale(float) const { return {}; }

  /// top = exponent(amax) + 1, the largest power a rounding up can reach, clamped to
  /// [-127, 127] (an all-zero group: -127).
  COMMPRESS_HOST_DEVICE scale make_scale(const group_statistics& g, tensor_scale) const {
    const int top = g.amax > 0.0f ? exponent_of(detail::float_to_bits(g.amax)) + 1 : -127;
    return static_cast<scale>((top < -127 ? -127 : top > 127 ? 127 : top) + 127);
  }
  COMMPRESS_HOST_DEVICE encoder make_encoder(scale s, tensor_scale) const {
    return static_cast<int>(s) - 127;
  }
  /// 2^top: top + 127 is the biased exponent, or for top = -127 the denormal 2^-127.
  COMMPRESS_HOST_DEVICE decoder make_decoder(scale s, tensor_scale) const {
    return s == poisoned_scale
               ? std::numeric_limits<float>::quiet_NaN()
               : detail::bits_to_float(s == 0 ? 0x00400000u : std::uint32_t{s} << 23);
  }

  /// C_nat(x) with the random bits' top 23 (or 24, below the group's range) bits.
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x, encoder top, std::uint32_t bits) const {
    const std::uint32_t u = detail::float_to_bits(x);
    const std::uint32_t magnitude = u & 0x7fffffffu;
    if (magnitude == 0)
      return 0;
    const int a = exponent_of(magnitude);
    const int lowest = top - 126;
    std::uint32_t m;
    if (a < lowest) {
      // |x| = significand * 2^(a - 23) < 2^lowest: 2^lowest with probability |x| / 2^lowest,
      // which is significand / 2^(lowest - a + 23), compared as a 24-bit fraction.
      const int shift = lowest - a - 1;
      const std::uint32_t threshold = shift >= 24 ? 0u : significand_of(magnitude) >> shift;
      if ((bits >> 8) >= threshold)
        return 0;
      m = 127;
    } else {
      const std::uint32_t fraction = significand_of(magnitude) & 0x7fffffu;
      int e = a + ((bits >> 9) < fraction ? 1 : 0);
      e = e > 127 ? 127 : e;
      m = static_cast<std::uint32_t>(top + 1 - e);
    }
    return ((u >> 31) << 7) | m;
  }
  /// +-2^(1 - m) times 2^top: for m in [1, 127] the first power is a normal float, and the
  /// product of two powers of two rounds to their exact product, a denormal, or 0 below 2^-149
  /// (2^-150 is a tie that goes to the even 0), with the code's sign. Level 0 is +0, and a
  /// poisoned group's NaN times anything is NaN. One multiply, so the decode vectorises.
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code, decoder d) const {
    const std::uint32_t m = code & 127u;
    const std::uint32_t power = m == 0 ? 0u : ((code >> 7) << 31) | ((128u - m) << 23);
    return detail::mul_rn(detail::bits_to_float(power), d);
  }

  /// Configurations that reach every path of the body: a tensor scale, blocks that do and do
  /// not divide the tensor.
  static constexpr std::array<natural, 3> examples() {
    return {natural{}, natural{.block = 32}, natural{.block = 5}};
  }

  friend constexpr bool operator==(natural, natural) = default;

private:
  /// floor(log2 |x|) of a finite non-zero magnitude's bits, denormals included.
  COMMPRESS_HOST_DEVICE static int exponent_of(std::uint32_t magnitude) {
    const int biased = static_cast<int>(magnitude >> 23);
    return biased != 0 ? biased - 127 : detail::highest_bit(magnitude) - 149;
  }
  /// The 24-bit significand of |x| = significand * 2^(exponent_of - 23), denormals normalised.
  COMMPRESS_HOST_DEVICE static std::uint32_t significand_of(std::uint32_t magnitude) {
    if ((magnitude >> 23) != 0)
      return (magnitude & 0x7fffffu) | 0x800000u;
    return magnitude << (23 - detail::highest_bit(magnitude));
  }
};

static_assert(block_scaled_codec<natural>);

} // namespace commpress
