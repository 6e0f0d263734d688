// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The fp8 codec: every element as an E4M3 or E5M2 code of x / scale, with one f32 scale per
/// tensor or per block, as in the per-tensor and blockwise fp8 recipes of Transformer Engine
/// and torchao (docs/methods.md section 12). A block-scaled codec of the kit
/// (compress/scaled.hpp); the body layout is in docs/wire-format.md ("fp8").
///
/// A group's scale is s = amax / F, F the format's largest finite value (448 or 57344), so its
/// largest magnitude is sent near F; each element is sent as to_minifloat(x * (1 / s)) (round
/// to nearest even, saturating) and decodes as code * s, one rounded multiply. If F * s would
/// overflow (amax within a rounding of the float maximum) s is lowered by one unit in the last
/// place, so no finite input decodes to a non-finite value. An all-zero group has s = 0, and a
/// group whose 1 / s overflows (amax below about F * 2^-128) is sent as zeros.

#include <array>
#include <cstdint>
#include <limits>

#include "commpress/compress/quantize.hpp"
#include "commpress/compress/scaled.hpp"
#include "commpress/core/minifloat.hpp"

namespace commpress {

/// @brief fp8 (E4M3 or E5M2) elements with an f32 scale per tensor or per block.
struct fp8 {
  static constexpr codec_id id{7};
  minifloat format = minifloat::e4m3;                       ///< e4m3 or e5m2
  scale_granularity granularity = scale_granularity::block; ///< tensor or block
  std::uint32_t group = 128; ///< block: elements per block; tensor: must be 0

  static constexpr unsigned code_bits = 8;
  static constexpr bool stochastic = false;
  using scale = float;
  using tensor_scale = no_tensor_scale;
  using encoder = float; ///< 1 / s, or 0 where that overflows
  using decoder = float; ///< s
  static constexpr float poisoned_scale = std::numeric_limits<float>::quiet_NaN();

  /// Elements per group; 0: one group, the whole tensor.
  [[nodiscard]] static constexpr bool needs_norm() noexcept { return false; }
  [[nodiscard]] constexpr std::uint64_t block_length() const noexcept {
    return granularity == scale_granularity::tensor ? 0 : group;
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return scaled::body_bytes(*this, n);
  }
  /// Header params: [0] format, [1] granularity, [4..7] group (u32 LE).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    detail::put_param(p, 0, static_cast<std::uint8_t>(format));
    detail::put_param(p, 1, static_cast<std::uint8_t>(granularity));
    detail::put_param(p, 4, group);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (format != minifloat::e4m3 && format != minifloat::e5m2)
      return {errc::invalid_argument, "fp8: format must be e4m3 or e5m2"};
    if (granularity == scale_granularity::tensor)
      return group == 0
                 ? status{}
                 : status{errc::invalid_argument, "fp8: group must be 0 for tensor granularity"};
    if (granularity == scale_granularity::block)
      return group > 0 ? status{}
                       : status{errc::invalid_argument, "fp8: block granularity needs group > 0"};
    return {errc::invalid_argument, "fp8: granularity must be tensor or block"};
  }

  COMMPRESS_HOST_DEVICE tensor_scale make_tensor_scale(float) const { return {}; }

  /// s = amax / F, lowered by one unit in the last place where F * s overflows.
  COMMPRESS_HOST_DEVICE scale make_scale(const group_statistics& g, tensor_scale) const {
    const float top = largest();
    const float s = detail::div_rn(g.amax, top);
    return detail::is_finite(detail::mul_rn(top, s))
               ? s
               : detail::bits_to_float(detail::float_to_bits(s) - 1u);
  }
  COMMPRESS_HOST_DEVICE encoder make_encoder(scale s, tensor_scale) const {
    const float k = detail::div_rn(1.0f, s);
    return detail::is_finite(k) ? k : 0.0f; // all zero, or too small to scale up: zeros
  }
  COMMPRESS_HOST_DEVICE decoder make_decoder(scale s, tensor_scale) const { return s; }
  COMMPRESS_HOST_DEVICE minifloat element_format() const { return format; }
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x, encoder k) const {
    return to_minifloat(element_format(), detail::mul_rn(x, k));
  }
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code, decoder s) const {
    return detail::mul_rn(from_minifloat(element_format(), code), s);
  }

  /// Configurations that reach every path of the body: both formats, a tensor scale, blocks
  /// that do and do not divide the tensor.
  static constexpr std::array<fp8, 3> examples() {
    return {fp8{},
            fp8{.format = minifloat::e5m2, .granularity = scale_granularity::tensor, .group = 0},
            fp8{.format = minifloat::e4m3, .group = 5}};
  }

  friend constexpr bool operator==(fp8, fp8) = default;

private:
  COMMPRESS_HOST_DEVICE float largest() const {
    return from_minifloat(format, detail::format_of(format).max_code);
  }
};

static_assert(minifloat_element_codec<fp8>);

} // namespace commpress
