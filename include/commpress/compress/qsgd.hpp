// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// QSGD (Alistarh et al., NeurIPS 2017): every element as its sign and one of s + 1 levels
/// l/s of the group's L2 norm, rounded at random so that its expectation is the element
/// (docs/methods.md section 15). A stochastic block-scaled codec of the kit
/// (compress/scaled.hpp): by default fixed-width codes of Bits bits; with
/// coding = qsgd_coding::elias, the same levels, signs and random draws sent as the paper's
/// Elias coding (its section 3.2), a body of variable length written by the CPU backend
/// (backend/cpu/qsgd.hpp). Both body layouts are in docs/wire-format.md ("qsgd").
///
/// With the group's norm r and y = |x| s / r in [0, s], the level is floor(y) + 1 with
/// probability y - floor(y) and floor(y) otherwise (the paper's xi_i(v, s), section 3.1), so
/// E[decode] = x, and the variance of a group is at most min(d / s^2, sqrt(d) / s) r^2 (its
/// Lemma 3.1). A code is (sign << (Bits - 1)) | level; it decodes to sign * level * (r / s).

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

#include "commpress/compress/scaled.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress {

/// @brief How qsgd sends its levels (header params byte 8).
enum class qsgd_coding : std::uint8_t {
  fixed = 0, ///< a code of Bits bits per element (the kit's body)
  /// per group, each nonzero level as Elias-gamma(gap), its sign bit, Elias-gamma(level), and
  /// a closing gap that reaches the group's end (docs/wire-format.md, "qsgd, Elias body")
  elias = 1,
};

/// @brief Bits of the Elias-gamma code of v >= 1: 2 floor(log2 v) + 1.
constexpr std::uint64_t elias_gamma_bits(std::uint64_t v) noexcept {
  return 2u * (static_cast<std::uint64_t>(std::bit_width(v)) - 1u) + 1u;
}

/// @brief QSGD's stochastic levels of the L2 norm, codes of Bits bits (sign and level), one f32
/// norm per tensor or per block.
/// @tparam Bits code width, 2 to 8: up to 2^(Bits-1) - 1 levels
template <unsigned Bits> struct qsgd {
  static_assert(Bits >= 2 && Bits <= 8, "qsgd: codes of 2 to 8 bits");
  /// Wire id: 14 qsgd<8>, 15 qsgd<4>, 16 qsgd<2>.
  static constexpr codec_id id{Bits == 8 ? 14 : Bits == 4 ? 15 : 16};
  static_assert(Bits == 8 || Bits == 4 || Bits == 2, "qsgd: a wire id for 2, 4 and 8 bits only");

  static constexpr std::uint32_t max_levels = (1u << (Bits - 1)) - 1u;

  std::uint32_t block = 0;           ///< elements per block (the paper's bucket); 0: the tensor
  std::uint32_t levels = max_levels; ///< s, 1 to 2^(Bits-1) - 1
  qsgd_coding coding = qsgd_coding::fixed; ///< the body: fixed-width codes or Elias coding

  static constexpr unsigned code_bits = Bits;
  static constexpr bool stochastic = true;
  using scale = float; ///< the group's L2 norm r
  using tensor_scale = no_tensor_scale;
  using encoder = scaled::prescaled_ratio; ///< y = |x| s / r
  using decoder = float; ///< r / s, lowered by one unit in the last place where s of it overflows
  static constexpr float poisoned_scale = std::numeric_limits<float>::quiet_NaN();

  [[nodiscard]] static constexpr bool needs_norm() noexcept { return true; }
  [[nodiscard]] constexpr std::uint64_t block_length() const noexcept { return block; }
  /// The body's bytes for n elements; with the Elias coding its largest length, what
  /// elias_max_stream_bits allows.
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    if (coding == qsgd_coding::elias)
      return n == 0 ? 0 : scaled::codes_offset(*this, n) + (elias_max_stream_bits(n) + 7u) / 8u;
    return scaled::body_bytes(*this, n);
  }
  /// Whether the body may be shorter than body_bytes(n): the Elias coding's is; the header's
  /// body_bytes says how long it is (core/concepts.hpp, variable_body_codec).
  [[nodiscard]] constexpr bool variable_body() const noexcept {
    return coding == qsgd_coding::elias;
  }
  /// The Elias stream's largest length in bits for n > 0 elements. A group of m elements with k
  /// nonzero levels sends k + 1 gaps summing to m + 1, each Elias-gamma(g) of at most 2g - 1
  /// bits, so at most 2(m + 1) - (k + 1) bits of gaps, and k signs and levels of at most
  /// 1 + elias_gamma_bits(s) bits: m (2 + elias_gamma_bits(s)) + 1 bits, reached when every level
  /// is s (or of as many bits).
  [[nodiscard]] constexpr std::uint64_t elias_max_stream_bits(std::uint64_t n) const noexcept {
    return n * (2u + elias_gamma_bits(levels)) + scaled::n_groups(*this, n);
  }
  /// Header params: [0..3] block (u32 LE), [4..7] levels (u32 LE), [8] coding (0 fixed, which
  /// keeps the fixed-width payloads as they were, 1 elias).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    detail::put_param(p, 0, block);
    detail::put_param(p, 4, levels);
    detail::put_param(p, 8, static_cast<std::uint8_t>(coding));
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (levels < 1 || levels > max_levels)
      return {errc::invalid_argument, "qsgd: levels must be in [1, 2^(Bits-1) - 1]"};
    if (coding != qsgd_coding::fixed && coding != qsgd_coding::elias)
      return {errc::invalid_argument, "qsgd: coding must be qsgd_coding::fixed or ::elias"};
    return {};
  }

  COMMPRESS_HOST_DEVICE tensor_scale make_tensor_scale(float) const { return {}; }
  /// r, the group's L2 norm over its finite elements.
  COMMPRESS_HOST_DEVICE scale make_scale(const group_statistics& g, tensor_scale) const {
    return g.l2_norm;
  }
  COMMPRESS_HOST_DEVICE encoder make_encoder(scale r, tensor_scale) const {
    return encoder::of(static_cast<float>(levels), r);
  }
  COMMPRESS_HOST_DEVICE decoder make_decoder(scale r, tensor_scale) const {
    const float s = static_cast<float>(levels);
    const float d = detail::div_rn(r, s);
    return detail::is_finite(detail::mul_rn(s, d)) || !detail::is_finite(r)
               ? d
               : detail::bits_to_float(detail::float_to_bits(d) - 1u);
  }

  /// The paper's xi: floor(y) + 1 with probability y - floor(y), y = |x| s / r, at most s.
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x, encoder k, std::uint32_t bits) const {
    const float y = k.of_magnitude(x);
    if (!(y > 0.0f))
      return 0u;
    const float whole = detail::floor_small(y);
    std::uint32_t level = static_cast<std::uint32_t>(whole) +
                          (uniform_from_bits(bits) < detail::sub_rn(y, whole) ? 1u : 0u);
    level = level > levels ? levels : level;
    // Level 0 carries no sign (0, not -0); selects, not branches, for a random level.
    const std::uint32_t sign = (detail::float_to_bits(x) >> 31) & (level != 0 ? 1u : 0u);
    return (sign << (Bits - 1)) | level;
  }
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code, decoder d) const {
    const float magnitude = detail::mul_rn(static_cast<float>(code & max_levels), d);
    // The sign bit flipped by the code's, which is -magnitude bit for bit (NaN included), as a
    // xor: compilers branch on a ternary, and random signs defeat a branch predictor.
    return detail::bits_to_float(detail::float_to_bits(magnitude) ^ ((code >> (Bits - 1)) << 31));
  }

  /// Configurations that reach every path of the body: a tensor norm, blocks that do and do
  /// not divide the tensor, fewer levels than the codes hold.
  static constexpr std::array<qsgd, 3> examples() {
    return {qsgd{}, qsgd{.block = 128}, qsgd{.block = 5, .levels = max_levels > 1 ? 3u : 1u}};
  }

  friend constexpr bool operator==(qsgd, qsgd) = default;
};

using qsgd8 = qsgd<8>; ///< 127 levels
using qsgd4 = qsgd<4>; ///< 7 levels
using qsgd2 = qsgd<2>; ///< 1 level: sign(x) r or 0

static_assert(block_scaled_codec<qsgd8> && block_scaled_codec<qsgd4> && block_scaled_codec<qsgd2>);

} // namespace commpress
