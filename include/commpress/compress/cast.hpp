// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The cast codec: sends every element as fp16 or bf16, rounded to nearest even, saturating.

#include <array>
#include <cstdint>

#include "commpress/core/concepts.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Halves the bytes of an fp32 tensor by sending fp16 or bf16 (lossless for a tensor
/// already in that type). Sum-compatible over a half-precision all-reduce.
struct cast {
  static constexpr codec_id id = codec_id::cast;
  dtype to = dtype::bf16; ///< dtype::f16 or dtype::bf16

  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept { return 2 * n; }
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    p[0] = static_cast<std::uint8_t>(to);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (to != dtype::f16 && to != dtype::bf16)
      return {errc::invalid_argument, "cast: target dtype must be f16 or bf16"};
    return {};
  }

  /// The 16-bit wire code of one value: rounded to nearest even; a finite value beyond the
  /// type's range saturates to its largest finite value (so no finite input decodes to an
  /// infinity); NaN becomes 0x7FFF, infinities stay infinite.
  COMMPRESS_HOST_DEVICE std::uint16_t encode_value(float x) const {
    return static_cast<std::uint16_t>(detail::encode_as(to, x));
  }
  /// The value a wire code stands for.
  COMMPRESS_HOST_DEVICE float decode_value(std::uint16_t code) const {
    return to == dtype::f16 ? to_float(half{code}) : to_float(bfloat16{code});
  }

  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp).
  static constexpr std::array<cast, 2> examples() {
    return {cast{.to = dtype::bf16}, cast{.to = dtype::f16}};
  }

  friend constexpr bool operator==(cast, cast) = default;
};

static_assert(codec<cast>);

} // namespace commpress
