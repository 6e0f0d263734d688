// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codec concept: what every compressor configuration provides.

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "commpress/core/error.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief A compressor: a small, trivially copyable configuration value.
///
/// Its per-element math lives in `COMMPRESS_HOST_DEVICE` members shared by every backend;
/// loops over tensors live in `detail::codec_impl<Codec, Backend>` specialisations.
/// - `id`: the codec's wire identifier;
/// - `body_bytes(n)`: exact body size for n elements, a function of n and the configuration
///   only, so communication buffers are sized before any data exists;
/// - `params()`: the configuration as it is written into the header;
/// - `can_implement(n)`: up-front validation of the configuration for n elements.
template <class C>
concept codec = std::is_trivially_copyable_v<C> && std::equality_comparable<C> &&
    requires(const C& c, std::uint64_t n) {
  { C::id } -> std::convertible_to<codec_id>;
  { c.body_bytes(n) }
  noexcept->std::same_as<std::uint64_t>;
  { c.params() }
  noexcept->std::same_as<codec_params>;
  { c.can_implement(n) }
  noexcept->std::same_as<status>;
};

/// @brief A codec whose configuration may write a body shorter than body_bytes(n), which is
/// then its largest length: `variable_body()` says whether this configuration's body varies
/// (qsgd's Elias coding). Such a body's length is the header's body_bytes, and encode returns
/// it (docs/wire-format.md, "Validation order").
template <class C>
concept variable_body_codec = codec<C> && format::declares_variable_body<C>;

/// @brief Whether codec c's body may be shorter than c.body_bytes(n).
template <codec C> constexpr bool has_variable_body(const C& c) noexcept {
  if constexpr (variable_body_codec<C>) {
    return c.variable_body();
  } else {
    return false;
  }
}

/// @brief Size of the payload a codec writes for n elements (header + body): exact, or the
/// largest for a variable body (variable_body_codec).
template <codec C> constexpr std::uint64_t max_payload_bytes(const C& c, std::uint64_t n) noexcept {
  return format::header_bytes + c.body_bytes(n);
}

namespace detail {

/// Writes the little-endian bytes of `v` at `params[offset..]`.
template <class U> constexpr void put_param(codec_params& params, std::size_t offset, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    params[offset + i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i));
}

/// Backend implementation of a codec; each backend specialises it for the codecs it runs.
template <class Codec, class Backend> struct codec_impl {
  static_assert(sizeof(Codec) == 0,
                "commpress: this codec has no implementation for this backend; include the "
                "backend's header for it (for example commpress/backend/cpu/quantize.hpp)");
};

} // namespace detail
} // namespace commpress
