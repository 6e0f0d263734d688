// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The NVFP4 codec: E2M1 elements in blocks of 16, each block with an unsigned E4M3 (UE4M3)
/// scale, and one f32 scale for the whole tensor (NVIDIA's NVFP4, as Transformer Engine and
/// the Blackwell tensor cores use it; docs/methods.md section 12). A block-scaled codec of the
/// kit (compress/scaled.hpp) with a tensor scale; the body is in docs/wire-format.md
/// ("nvfp4").
///
/// Two-level scaling, so that the block scales use E4M3's whole range:
/// - tensor scale t = amax_tensor / (448 * 6), over the tensor's finite elements, lowered by one
///   unit in the last place where 6 * (448 * t) overflows;
/// - block scale code s = to_minifloat(e4m3, amax_block / (6 * t)) (0 where t is 0): at most
///   448, rounded to nearest even;
/// - block factor f = value(s) * t; elements are sent as to_minifloat(e2m1, x * (1 / f)) (0
///   where 1 / f overflows) and decode as value(code) * f.

#include <array>
#include <cstdint>

#include "commpress/compress/scaled.hpp"
#include "commpress/core/minifloat.hpp"

namespace commpress {

/// @brief NVFP4: E2M1 elements, a UE4M3 scale per 16 elements and an f32 tensor scale.
struct nvfp4 {
  static constexpr codec_id id{11};
  static constexpr std::uint32_t block = 16;

  static constexpr unsigned code_bits = 4;
  static constexpr bool stochastic = false;
  using scale = std::uint8_t; ///< UE4M3: an E4M3 code with the sign bit clear
  using tensor_scale = float;
  using encoder = float;                               ///< 1 / f, or 0 where that overflows
  using decoder = float;                               ///< f = value(s) * t
  static constexpr std::uint8_t poisoned_scale = 0x7f; ///< E4M3's NaN

  [[nodiscard]] static constexpr bool needs_norm() noexcept { return false; }
  [[nodiscard]] constexpr std::uint64_t block_length() const noexcept { return block; }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return scaled::body_bytes(*this, n);
  }
  [[nodiscard]] constexpr codec_params params() const noexcept { return {}; }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }

  COMMPRESS_HOST_DEVICE tensor_scale make_tensor_scale(float amax) const {
    const float t = detail::div_rn(amax, block_top * element_top);
    const bool fits = detail::is_finite(detail::mul_rn(element_top, detail::mul_rn(block_top, t)));
    return fits ? t : detail::bits_to_float(detail::float_to_bits(t) - 1u);
  }
  COMMPRESS_HOST_DEVICE scale make_scale(const group_statistics& g, tensor_scale t) const {
    if (!(t > 0.0f))
      return 0;
    return static_cast<scale>(
        to_minifloat(minifloat::e4m3, detail::div_rn(g.amax, detail::mul_rn(element_top, t))));
  }
  COMMPRESS_HOST_DEVICE encoder make_encoder(scale s, tensor_scale t) const {
    const float k = detail::div_rn(1.0f, make_decoder(s, t));
    return detail::is_finite(k) ? k : 0.0f;
  }
  COMMPRESS_HOST_DEVICE decoder make_decoder(scale s, tensor_scale t) const {
    return detail::mul_rn(from_minifloat(minifloat::e4m3, s), t);
  }
  COMMPRESS_HOST_DEVICE minifloat element_format() const { return minifloat::e2m1; }
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x, encoder k) const {
    return to_minifloat(element_format(), detail::mul_rn(x, k));
  }
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code, decoder f) const {
    return detail::mul_rn(from_minifloat(element_format(), code), f);
  }

  static constexpr std::array<nvfp4, 1> examples() { return {nvfp4{}}; }

  friend constexpr bool operator==(nvfp4, nvfp4) = default;

private:
  static constexpr float block_top = 448.0f; ///< E4M3's largest finite value
  static constexpr float element_top = 6.0f; ///< E2M1's largest finite value
};

static_assert(minifloat_element_codec<nvfp4>);

} // namespace commpress
