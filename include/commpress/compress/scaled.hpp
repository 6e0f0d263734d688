// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codec kit for block-scaled element-wise codecs: the contract a codec states, and the
/// body layout that follows from it (docs/wire-format.md, "Block-scaled codecs").
///
/// A block-scaled codec cuts a tensor into groups of `block_length()` consecutive elements (the
/// last group may be shorter; 0 makes the whole tensor one group) and sends each element as a code
/// of `code_bits` bits computed from the element and its group's scale alone; a codec may also have
/// one scale for the whole tensor, from which the group scales are formed (two-level scaling, as
/// NVFP4's). It states only its math, as `COMMPRESS_HOST_DEVICE` members:
/// - `needs_norm()`: whether its group scales depend on the group's L2 norm, which costs a second
///   reduction (group_statistics says how it is formed, the same on every backend);
/// - `stochastic`: whether an element's code depends on 32 random bits of its own,
///   random_u32(ctx.key(), ctx.step, i) for element i (core/rng.hpp), so a code is unbiased;
/// - `make_tensor_scale(amax)`: the tensor scale from the tensor's largest finite magnitude;
/// - `make_scale(statistics, t)`: a group's scale from its group_statistics and the tensor
///   scale; `poisoned_scale`: the scale of a group that holds a NaN or Inf under
///   nonfinite_policy::propagate (its codes are all 0 and it must decode to NaN);
/// - `make_encoder(s, t)` / `make_decoder(s, t)`: a group's per-element constants, once per
///   group;
/// - `encode_value(x, encoder)` -> code (`encode_value(x, encoder, random_bits)` when
///   stochastic), `decode_value(code, decoder)` -> value.
/// Every backend implements encode, decode, decode_accumulate and roundtrip for such a codec
/// from these (backend/cpu/scaled.hpp for cpu::seq and cpu::par), so the bytes cannot depend on
/// the backend.
///
/// Body: [tensor scale][the scale of group 0, 1, ...][the codes of elements 0 .. n - 1, packed
/// as format/bit_packing.hpp describes]. Scales are little-endian words of their type (f32 or
/// one byte); an empty tensor has an empty body.

#include <cmath>
#include <concepts>
#include <cstdint>

#include "commpress/core/concepts.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/minifloat.hpp"
#include "commpress/format/bit_packing.hpp"

namespace commpress {

/// @brief What a block-scaled codec's group scale is formed from.
///
/// Non-finite elements take no part: under nonfinite_policy::propagate their group is poisoned
/// and its scale is not formed, under zero_and_count they count as 0.
struct group_statistics {
  float amax = 0.0f;       ///< the largest finite |x| of the group (0 for none)
  float l2_norm = 0.0f;    ///< only where the codec needs_norm() (else 0): sqrt of the group's
                           ///< canonical_chunked_sum of x * x (core/canonical_sum.hpp), in double,
                           ///< rounded to float, and the largest finite float where that overflows
  std::uint64_t count = 0; ///< elements in the group, non-finite ones included
};

/// @brief The tensor scale of a block-scaled codec that has none; it takes no bytes.
struct no_tensor_scale {
  friend constexpr bool operator==(no_tensor_scale, no_tensor_scale) = default;
};

/// @brief An element's encoder: encode_value(x, k, random_bits) for a stochastic codec,
/// encode_value(x, k) for the others.
template <class C>
concept scaled_element_encoder =
    (C::stochastic &&
     requires(const C& c, float x, typename C::encoder k, std::uint32_t bits) {
       { c.encode_value(x, k, bits) } -> std::same_as<std::uint32_t>;
     }) ||
    (!C::stochastic && requires(const C& c, float x, typename C::encoder k) {
      { c.encode_value(x, k) } -> std::same_as<std::uint32_t>;
    });

/// @brief A codec that the kit implements on every backend (this file's comment).
template <class C>
concept block_scaled_codec =
    codec<C> &&(C::code_bits >= 1 && C::code_bits <= 8) &&
    (std::same_as<typename C::scale, float> || std::same_as<typename C::scale, std::uint8_t>)&&(
        std::same_as<typename C::tensor_scale, float> ||
        std::same_as<typename C::tensor_scale,
                     no_tensor_scale>)&&requires(const C& c, float x, std::uint32_t code,
                                                 typename C::scale s, typename C::tensor_scale t,
                                                 typename C::encoder k, typename C::decoder d,
                                                 const group_statistics& g) {
  { c.needs_norm() } -> std::same_as<bool>;
  { C::stochastic } -> std::convertible_to<bool>;
  { c.block_length() } -> std::same_as<std::uint64_t>;
  { c.make_tensor_scale(x) } -> std::same_as<typename C::tensor_scale>;
  { c.make_scale(g, t) } -> std::same_as<typename C::scale>;
  { C::poisoned_scale } -> std::convertible_to<typename C::scale>;
  { c.make_encoder(s, t) } -> std::same_as<typename C::encoder>;
  { c.make_decoder(s, t) } -> std::same_as<typename C::decoder>;
  { c.decode_value(code, d) } -> std::same_as<float>;
}
&&scaled_element_encoder<C>;

/// @brief A block-scaled codec whose elements are minifloat codes (core/minifloat.hpp):
/// encode_value(x, k) is to_minifloat(element_format(), x * k) and decode_value(q, d) is
/// from_minifloat(element_format(), q) * d, each product rounded once. A backend may convert
/// many elements at once from this (backend/cpu/detail/minifloat_kernels.hpp).
template <class C>
concept minifloat_element_codec =
    block_scaled_codec<C> && !C::stochastic && std::same_as<typename C::encoder, float> &&
    std::same_as<typename C::decoder, float> && requires(const C& c) {
  { c.element_format() } -> std::same_as<minifloat>;
};

namespace scaled {

/// @brief |x| * (numerator / s) for a group scale s > 0 that may be tiny, without overflow:
/// where s is below 2^-100 the magnitude is scaled by 2^64 first (exactly), so that
/// numerator / (s * 2^64) stays finite for every finite s. An all-zero group (s = 0): 0.
struct prescaled_ratio {
  float pre = 0.0f;
  float inv = 0.0f; ///< numerator / (s * pre); 0 for s = 0

  COMMPRESS_HOST_DEVICE static prescaled_ratio of(float numerator, float s) {
    if (!(s > 0.0f))
      return {};
    const float pre = s < 0x1p-100f ? 0x1p64f : 1.0f;
    return {pre, detail::div_rn(numerator, detail::mul_rn(s, pre))};
  }
  /// (|x| * pre) * inv, each product rounded once.
  COMMPRESS_HOST_DEVICE float of_magnitude(float x) const {
    return detail::mul_rn(detail::mul_rn(detail::abs(x), pre), inv);
  }
};

/// Bytes of codec C's tensor scale (0 when it has none).
template <class C>
inline constexpr std::uint64_t tensor_scale_bytes =
    std::same_as<typename C::tensor_scale, no_tensor_scale> ? 0 : sizeof(typename C::tensor_scale);

/// Whether C has a tensor scale, which needs the whole tensor's statistics before any group.
template <class C> inline constexpr bool has_tensor_scale = tensor_scale_bytes<C> != 0;

/// Elements per group of a tensor of n elements.
template <class C> constexpr std::uint64_t group_length(const C& c, std::uint64_t n) {
  return c.block_length() == 0 ? n : c.block_length();
}

/// Groups of n elements (an empty tensor has none).
template <class C> constexpr std::uint64_t n_groups(const C& c, std::uint64_t n) {
  return n == 0 ? 0 : detail::ceil_div(n, group_length(c, n));
}

/// group_statistics::l2_norm from a group's sum of squares: sqrt in double, rounded to float,
/// the largest finite float where that overflows.
COMMPRESS_HOST_DEVICE inline float l2_norm_from_sum(double sum_of_squares) {
  const double r = sqrt(sum_of_squares);
  return r >= static_cast<double>(detail::float_max) ? detail::float_max : static_cast<float>(r);
}

/// Byte offset of group g's scale in the body.
template <class C> constexpr std::uint64_t scale_offset(std::uint64_t g) {
  return tensor_scale_bytes<C> + g * sizeof(typename C::scale);
}

/// Byte offset of the codes in the body of n elements.
template <class C> constexpr std::uint64_t codes_offset(const C& c, std::uint64_t n) {
  return scale_offset<C>(n_groups(c, n));
}

/// The body's bytes for n elements: a block-scaled codec's body_bytes.
template <class C> constexpr std::uint64_t body_bytes(const C& c, std::uint64_t n) {
  return n == 0 ? 0 : codes_offset(c, n) + detail::packed_bytes(n, C::code_bits);
}

} // namespace scaled
} // namespace commpress
