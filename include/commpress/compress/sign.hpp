// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The sign codec: one bit per element plus one fp32 scale per group (docs/methods.md 3.3).
///
/// Element i decodes to +s or -s, where s is its group's scale:
/// - sign_scale::mean_abs, s = ||x||_1 / m: EF-signSGD (Karimireddy et al. 2019). It keeps the
///   l1 norm of an input without zeros, and ||C(x) - x||^2 = ||x||^2 - ||x||_1^2 / m (Q7).
/// - sign_scale::rms, s = ||x||_2 / sqrt(m): 1-bit Adam (Tang et al. 2021). It keeps the l2 norm,
///   ||C(x)||_2 = ||x||_2 (Q8).
///
/// The bit is 1 iff x < 0, so 0 and -0 decode to +s, as in 1-bit Adam (sign(0) := +1, Q8).
///
/// Scales must be bit-identical on the CPU and the GPU, so each group's sum of |x| or x^2 is
/// taken in double in the canonical order of core/canonical_sum.hpp (canonical_chunked_sum
/// over the group's elements in index order), and scale_from_sum turns that sum into the scale.
///
/// Body (docs/wire-format.md): the groups' scales as little-endian fp32, in group order, then
/// the n bits packed as 1-bit codes in the bit_packing layout (element i is bit i % 8 of byte
/// i / 8 of the bit section, unused high bits of the last byte zero). A group is the whole
/// tensor (one group, none for an empty tensor) or `block` consecutive elements, the last
/// block possibly shorter.
///
/// Non-finite inputs: under propagate a NaN or Inf makes its group's scale NaN, so the whole
/// group decodes to NaN and the host's overflow check sees the bad step; under zero_and_count
/// it counts as 0 (scale term 0, bit 0).

#include <array>
#include <cmath>
#include <cstdint>

#include "commpress/core/concepts.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief How the sign codec scales its bits.
enum class sign_scale : std::uint8_t {
  mean_abs = 0, ///< ||x||_1 / m (EF-signSGD)
  rms = 1,      ///< ||x||_2 / sqrt(m) (1-bit Adam)
};

/// @brief Which elements share one scale.
enum class sign_granularity : std::uint8_t {
  tensor = 0, ///< one scale for the whole tensor
  block = 1,  ///< one scale per `block` consecutive elements
};

/// @brief 1-bit sign compression with a per-tensor or per-block fp32 scale: 32x fewer bytes
/// than fp32 (plus 4 bytes per group). Biased; use it with error feedback.
struct sign {
  static constexpr codec_id id = codec_id::sign;
  sign_granularity granularity = sign_granularity::tensor;
  std::uint32_t block = 0; ///< elements per group under sign_granularity::block; 0 otherwise
  sign_scale scale = sign_scale::mean_abs;

  /// Elements per group for an n-element tensor.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t
  group_length(std::uint64_t n) const noexcept {
    return granularity == sign_granularity::tensor ? n : block;
  }
  /// Number of groups (scales) for an n-element tensor.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t
  groups(std::uint64_t n) const noexcept {
    return n == 0 ? 0 : detail::ceil_div(n, group_length(n));
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return 4 * groups(n) + detail::packed_bytes(n, 1);
  }
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    p[0] = static_cast<std::uint8_t>(granularity);
    p[1] = static_cast<std::uint8_t>(scale);
    detail::put_param(p, 4, block);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (scale != sign_scale::mean_abs && scale != sign_scale::rms)
      return {errc::invalid_argument, "sign: scale must be mean_abs or rms"};
    if (granularity == sign_granularity::tensor && block != 0)
      return {errc::invalid_argument, "sign: block must be 0 under tensor granularity"};
    if (granularity == sign_granularity::block && block == 0)
      return {errc::invalid_argument, "sign: block granularity needs a block size > 0"};
    if (granularity != sign_granularity::tensor && granularity != sign_granularity::block)
      return {errc::invalid_argument, "sign: granularity must be tensor or block"};
    return {};
  }

  /// The term one element adds to its group's sum: |x| or x * x, exact in double.
  COMMPRESS_HOST_DEVICE double scale_term(float x) const {
    const double v = static_cast<double>(x);
    return scale == sign_scale::mean_abs ? static_cast<double>(detail::abs(x)) : v * v;
  }

  /// The scale of a group of m > 0 elements whose terms sum (canonically) to `sum`: a NaN for
  /// a non-finite sum, else (float)(sum / m) or (float)sqrt(sum / m). Double division and
  /// sqrt are correctly rounded on both backends, so the scale is the same bits everywhere.
  COMMPRESS_HOST_DEVICE float scale_from_sum(double sum, std::uint64_t m) const {
    // Terms are >= 0, so only a NaN or an Inf term makes the sum fail this test.
    if (!(sum <= 1.7976931348623157e308))
      return detail::bits_to_float(0x7fc00000u);
    const double mean = sum / static_cast<double>(m);
    if (scale == sign_scale::mean_abs)
      return static_cast<float>(mean);
#if COMMPRESS_DEVICE_COMPILATION
    return static_cast<float>(::sqrt(mean));
#else
    return static_cast<float>(std::sqrt(mean));
#endif
  }

  /// The wire bit of one element: 1 iff x < 0 (0 and -0 are +).
  COMMPRESS_HOST_DEVICE static std::uint32_t encode_bit(float x) {
    return x < 0.0f ? 1u : 0u;
  }
  /// The value a bit stands for in a group of scale s; a NaN scale (a poisoned group) gives
  /// the canonical NaN 0x7FC00000 for either bit, as every decoder writes it.
  COMMPRESS_HOST_DEVICE static float decode_value(std::uint32_t bit, float s) {
    // A sign-bit flip rather than -s, then one canonicalisation: backends negate NaNs
    // differently.
    return detail::canonical_nan(
        detail::bits_to_float(detail::float_to_bits(s) ^ (bit != 0 ? 0x80000000u : 0u)));
  }

  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp).
  static constexpr std::array<sign, 2> examples() {
    return {sign{},
            sign{.granularity = sign_granularity::block, .block = 5, .scale = sign_scale::rms}};
  }

  friend constexpr bool operator==(sign, sign) = default;
};

static_assert(codec<sign>);

} // namespace commpress
