// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// TernGrad (Wen et al., NeurIPS 2017): every element as one of {-s, 0, +s}, chosen at random
/// so that its expectation is the element, with one f32 scale s per tensor or per block
/// (docs/methods.md section 13). A stochastic block-scaled codec of the kit
/// (compress/scaled.hpp); the body layout is in docs/wire-format.md ("terngrad").
///
/// s is the group's largest finite magnitude (the paper's eq. 2), or, with clipping on,
/// min(amax, c * rms) with rms = ||g||_2 / sqrt(count), the paper's gradient clipping to c
/// standard deviations (section 3.3, c = 2.5) with the standard deviation taken about 0. An
/// element keeps its sign with probability p = min(|x|, s) / s (eq. 3), from the 24 random bits
/// uniform_from_bits gives: it is unbiased where |x| <= s, and clipped to s beyond. Codes are
/// 2 bits, (sign << 1) | kept: 0 decodes to 0, 1 to +s, 3 to -s; 2 is never written and
/// decodes to 0. A value is (0 or +-1) * s, exact, so every finite input decodes finite.

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

#include "commpress/compress/scaled.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress {

/// @brief TernGrad's stochastic ternary codes with an f32 scale per tensor or per block.
struct terngrad {
  static constexpr codec_id id{12};
  std::uint32_t block = 0;  ///< elements per block; 0: one scale for the whole tensor
  float clip_sigmas = 0.0f; ///< c of the clipping to c * rms; 0: no clipping (2.5 in the paper)

  static constexpr unsigned code_bits = 2;
  static constexpr bool stochastic = true;
  using scale = float;
  using tensor_scale = no_tensor_scale;
  using encoder = scaled::prescaled_ratio; ///< the keep probability |x| / s
  using decoder = float;                   ///< s
  static constexpr float poisoned_scale = std::numeric_limits<float>::quiet_NaN();

  /// The norm is formed only where the scale is clipped.
  [[nodiscard]] constexpr bool needs_norm() const noexcept { return clip_sigmas != 0.0f; }
  [[nodiscard]] constexpr std::uint64_t block_length() const noexcept { return block; }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return scaled::body_bytes(*this, n);
  }
  /// Header params: [0..3] block (u32 LE), [4..7] clip_sigmas (f32 bits, LE).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    detail::put_param(p, 0, block);
    detail::put_param(p, 4, std::bit_cast<std::uint32_t>(clip_sigmas));
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (!(clip_sigmas >= 0.0f && clip_sigmas <= 1e6f))
      return {errc::invalid_argument, "terngrad: clip_sigmas must be 0 (off) or in (0, 1e6]"};
    return {};
  }

  COMMPRESS_HOST_DEVICE tensor_scale make_tensor_scale(float) const { return {}; }

  /// amax, or min(amax, c * ||g|| / sqrt(count)) with clipping on (in double, then rounded).
  COMMPRESS_HOST_DEVICE scale make_scale(const group_statistics& g, tensor_scale) const {
    if (clip_sigmas == 0.0f || g.count == 0)
      return g.amax;
    const double clip = static_cast<double>(clip_sigmas) * static_cast<double>(g.l2_norm) /
                        sqrt(static_cast<double>(g.count));
    return clip < static_cast<double>(g.amax) ? static_cast<float>(clip) : g.amax;
  }
  COMMPRESS_HOST_DEVICE encoder make_encoder(scale s, tensor_scale) const {
    return encoder::of(1.0f, s);
  }
  COMMPRESS_HOST_DEVICE decoder make_decoder(scale s, tensor_scale) const { return s; }

  /// Eq. 3: sign(x) * s * b, b ~ Bernoulli(min(|x|, s) / s).
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x, encoder k, std::uint32_t bits) const {
    const float p = k.of_magnitude(x);
    // Kept or not is a coin flip: a product, not a branch the CPU would mispredict half the time.
    const std::uint32_t kept = uniform_from_bits(bits) < p ? 1u : 0u;
    return kept * (((detail::float_to_bits(x) >> 31) << 1) | 1u);
  }
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code, decoder s) const {
    // 0 where bit 0 is clear, else +-1 by bit 1: selects of bit patterns, which compilers keep
    // free of branches (random codes defeat a branch predictor) or turn into vector blends.
    const std::uint32_t one = (code & 2u) != 0 ? 0xbf800000u : 0x3f800000u; // -1 or 1
    const float v = detail::bits_to_float((code & 1u) != 0 ? one : 0u);
    return detail::mul_rn(v, s);
  }

  /// Configurations that reach every path of the body: a tensor scale, blocks that do and do
  /// not divide the tensor, with and without clipping.
  static constexpr std::array<terngrad, 3> examples() {
    return {terngrad{.clip_sigmas = 2.5f}, terngrad{.block = 128},
            terngrad{.block = 5, .clip_sigmas = 2.5f}};
  }

  friend constexpr bool operator==(terngrad, terngrad) = default;
};

static_assert(block_scaled_codec<terngrad>);

} // namespace commpress
