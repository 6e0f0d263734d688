// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The identity codec: sends every element as a little-endian fp32, losslessly.

#include <array>
#include <cstdint>

#include "commpress/core/concepts.hpp"
#include "commpress/core/error.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Lossless baseline: the body is the tensor as fp32 (half and bfloat16 widen exactly).
/// Sum-compatible: the bodies of many ranks can go through a plain float all-reduce.
struct identity {
  static constexpr codec_id id = codec_id::identity;

  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept { return 4 * n; }
  [[nodiscard]] constexpr codec_params params() const noexcept { return {}; }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }
  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp).
  static constexpr std::array<identity, 1> examples() { return {identity{}}; }

  friend constexpr bool operator==(identity, identity) = default;
};

static_assert(codec<identity>);

} // namespace commpress
