// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// rotated<Codec>: a codec preceded by the randomized Hadamard rotation of core/hadamard.hpp
/// (docs/methods.md, "Randomized Hadamard rotation").
///
/// The sender rotates each window of 2^log2_window elements and encodes the rotated tensor with
/// the inner codec; the receiver decodes it and rotates it back. The rotation is orthogonal, so
/// the error the receiver sees has the norm of the inner codec's error on the rotated tensor,
/// and a heavy-tailed block, whose outliers set a low-bit scale, is spread flat first.
///
/// It is a codec like any other: it composes with every feedback policy (whose error is taken
/// in the tensor's own coordinates, since roundtrip rotates back) and every collective (its
/// decode_accumulate adds the rotated-back values). Its payload is the inner codec's, with the
/// inner codec's id, parameters and body, and header byte 7 naming the rotation
/// (format::transform_byte), so a receiver without the same rotation refuses it. The signs come
/// from the payload's seed, tensor id and step: nothing else crosses the wire.

#include <array>
#include <cstdint>

#include "commpress/core/concepts.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/hadamard.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief The codec `Inner` applied to the randomized Hadamard rotation of the tensor, in
/// windows of 2^log2_window elements (3 to 12; the last window may be shorter).
template <codec Inner> struct rotated {
  static constexpr codec_id id = Inner::id;
  Inner inner{};
  std::uint8_t log2_window = 8;

  /// Elements per rotation window.
  [[nodiscard]] constexpr std::uint64_t window() const noexcept {
    return std::uint64_t{1} << log2_window;
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return inner.body_bytes(n);
  }
  [[nodiscard]] constexpr codec_params params() const noexcept { return inner.params(); }
  [[nodiscard]] constexpr status can_implement(std::uint64_t n) const noexcept {
    if (log2_window < hadamard_min_log2 || log2_window > hadamard_max_log2)
      return {errc::invalid_argument, "rotated: log2_window must be 3 to 12"};
    if constexpr (variable_body_codec<Inner>) {
      // The rotation takes the inner body back window by window, which a variable-length
      // stream (qsgd's Elias coding) does not allow.
      if (inner.variable_body())
        return {errc::invalid_argument, "rotated: the inner codec's body must not vary in length "
                                        "(qsgd's Elias coding)"};
    }
    return inner.can_implement(n);
  }

  /// Configurations that reach every path: a full window and a short last one, over each of
  /// the inner codec's examples, at the smallest and a common window.
  static constexpr auto examples() {
    constexpr auto in = Inner::examples();
    std::array<rotated, 2 * in.size()> out{};
    for (std::size_t i = 0; i < in.size(); ++i) {
      out[2 * i] = rotated{in[i], 3};
      out[2 * i + 1] = rotated{in[i], 8};
    }
    return out;
  }

  friend constexpr bool operator==(const rotated&, const rotated&) = default;
};

/// @brief Whether C is a rotated codec.
template <class C> inline constexpr bool is_rotated_v = false;
template <codec Inner> inline constexpr bool is_rotated_v<rotated<Inner>> = true;

/// The rotation's transform byte in the header (format::transform_byte).
template <codec Inner> struct format::codec_transform<rotated<Inner>> {
  static constexpr std::uint8_t byte(const rotated<Inner>& c) noexcept {
    return format::transform_byte::hadamard(c.log2_window);
  }
};

} // namespace commpress
