// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The per-call context: which random stream a call draws from and what to do with NaN/Inf.

#include <cstddef>
#include <cstdint>

#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress {

/// @brief What every codec and feedback policy does with a NaN or Inf input element.
///
/// Whatever the policy, a non-finite value never enters error-feedback state (EF residuals,
/// EF21 mirrors, LoCo errors, AQ-SGD caches): those elements keep their previous state.
enum class nonfinite_policy : std::uint8_t {
  propagate = 0,      ///< encode as is: the decoded group is non-finite too, so the host's
                      ///< overflow check (loss scaling) still sees the bad step
  zero_and_count = 1, ///< treat the element as 0 and report how many there were
  fail = 2,           ///< refuse the call (errc::non_finite) before anything is written
};

/// @brief Identifies one encode call: the random stream it draws from and its non-finite policy.
///
/// (seed, tensor_id) select the stream, `step` the position in it. Both ends of a channel use
/// the same values, and the payload header records them, so a receiver can regenerate the
/// sender's random choices (random-k indices) and detect a desynchronised peer.
struct context {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::uint32_t tensor_id = 0;
  nonfinite_policy on_nonfinite = nonfinite_policy::propagate;

  [[nodiscard]] constexpr rng_key key() const noexcept { return make_rng_key(seed, tensor_id); }
};

/// @brief What an encode call produced.
struct encode_result {
  std::size_t bytes = 0;     ///< payload bytes written: the codec's max_payload_bytes, or
                             ///< less for a variable body (variable_body_codec)
  std::size_t nonfinite = 0; ///< non-finite input elements seen
};

} // namespace commpress

namespace commpress::detail {

/// Applies the non-finite policy to one loaded value: under zero_and_count a NaN/Inf becomes 0.
/// `bad` counts non-finite values under every policy.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float screen(float x, nonfinite_policy policy,
                                                         std::size_t& bad) {
  const bool finite = is_finite(x);
  bad += finite ? 0u : 1u;
  return (finite || policy != nonfinite_policy::zero_and_count) ? x : 0.0f;
}

} // namespace commpress::detail
