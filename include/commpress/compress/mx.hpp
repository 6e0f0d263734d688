// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The OCP microscaling codecs MXFP8 and MXFP4 (OCP Microscaling Formats (MX) Specification
/// v1.0): blocks of 32 elements, each block with one E8M0 scale 2^X and its elements as E4M3,
/// E5M2 (MXFP8) or E2M1 (MXFP4) codes of x / 2^X, the layout Transformer Engine uses (the
/// scales of a row's blocks together, the codes separately; FP4 codes two to a byte, the first
/// element in the low nibble). A block-scaled codec of the kit (compress/scaled.hpp); the body
/// is in docs/wire-format.md ("mx"), the conventions in docs/methods.md section 12.
///
/// The scale exponent is Transformer Engine's: X is the smallest integer with 2^X >= amax / F,
/// F the element format's largest finite value, so no element of the block saturates, clamped
/// to [-127, 127 - e_F] (e_F the exponent of F: 8, 15 or 2) so that F * 2^X, the largest value
/// a block decodes to, stays finite. (The specification's own rule, X = floor(log2 amax) - e_F,
/// saturates up to half of a block's largest elements by up to a factor 2; see section 12.)
/// Elements are sent as to_minifloat(x * 2^-X), which is x / 2^X exactly unless the quotient
/// falls below the float range, and decode as code * 2^X. Multiplying by a power of two is
/// exact, so the only rounding is the element format's.

#include <array>
#include <cstdint>

#include "commpress/compress/scaled.hpp"
#include "commpress/core/minifloat.hpp"

namespace commpress {

/// @brief An OCP MX codec with element format `Element`: mxfp8 (E4M3), mxfp8_e5m2, mxfp4
/// (E2M1); no options, since the block (32) and the scale type (E8M0) are the format's.
template <minifloat Element> struct mx {
  /// Wire id: 8 MXFP8 (E4M3), 9 MXFP8 (E5M2), 10 MXFP4.
  static constexpr codec_id id{Element == minifloat::e4m3   ? 8
                               : Element == minifloat::e5m2 ? 9
                                                            : 10};
  static constexpr std::uint32_t block = 32;

  static constexpr unsigned code_bits = minifloat_bits(Element);
  static constexpr bool stochastic = false;
  using scale = std::uint8_t; ///< E8M0
  using tensor_scale = no_tensor_scale;
  using encoder = float;                               ///< 2^-X
  using decoder = float;                               ///< 2^X (NaN for the poisoned scale)
  static constexpr std::uint8_t poisoned_scale = 0xff; ///< E8M0's NaN

  [[nodiscard]] static constexpr bool needs_norm() noexcept { return false; }
  [[nodiscard]] constexpr std::uint64_t block_length() const noexcept { return block; }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return scaled::body_bytes(*this, n);
  }
  /// Header params: [0] the element format; the rest 0.
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    detail::put_param(p, 0, static_cast<std::uint8_t>(Element));
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }

  COMMPRESS_HOST_DEVICE tensor_scale make_tensor_scale(float) const { return {}; }
  COMMPRESS_HOST_DEVICE scale make_scale(const group_statistics& g, tensor_scale) const {
    const detail::minifloat_format f = detail::format_of(Element);
    const float top = from_minifloat(Element, f.max_code);
    const int top_exponent = static_cast<int>(f.max_code >> f.mantissa_bits) - f.bias;
    return static_cast<scale>(e8m0_at_least(detail::div_rn(g.amax, top), 127 - top_exponent));
  }
  COMMPRESS_HOST_DEVICE encoder make_encoder(scale s, tensor_scale) const {
    return detail::pow2(127 - static_cast<int>(s)); // 2^-X for X = s - 127 in [-127, 125]
  }
  COMMPRESS_HOST_DEVICE decoder make_decoder(scale s, tensor_scale) const { return from_e8m0(s); }
  COMMPRESS_HOST_DEVICE minifloat element_format() const { return Element; }
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x, encoder k) const {
    return to_minifloat(element_format(), detail::mul_rn(x, k));
  }
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code, decoder d) const {
    return detail::mul_rn(from_minifloat(element_format(), code), d);
  }

  static constexpr std::array<mx, 1> examples() { return {mx{}}; }

  friend constexpr bool operator==(mx, mx) = default;
};

/// @brief MXFP8 with E4M3 elements.
using mxfp8 = mx<minifloat::e4m3>;
/// @brief MXFP8 with E5M2 elements.
using mxfp8_e5m2 = mx<minifloat::e5m2>;
/// @brief MXFP4: E2M1 elements, two to a byte.
using mxfp4 = mx<minifloat::e2m1>;

static_assert(minifloat_element_codec<mxfp8> && minifloat_element_codec<mxfp8_e5m2> &&
              minifloat_element_codec<mxfp4>);

} // namespace commpress
