// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The optimizer concept shared by sgd, adam/adamw and the data-parallel wrapper, and the
/// scalar helpers their element loops use.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/state_blob.hpp"

namespace commpress {

/// @brief An optimizer: a small, trivially copyable configuration whose state (moments,
/// step count) lives in a separate, caller-owned `state_type` sized once by `make_state(n)`.
///
/// `step(policy, state, params, grads)` applies one update to the flat parameter view in place.
/// The element loop is deterministic: every element is updated independently, with the
/// arithmetic order documented on each optimizer (docs/optim.md).
template <class O>
concept optimizer = std::is_trivially_copyable_v<O> && std::equality_comparable<O> &&
    requires(const O& o, typename O::state_type& s, std::span<float> p, std::span<const float> g,
             std::uint64_t n) {
  { o.can_implement(n) }
  noexcept->std::same_as<status>;
  { o.make_state(n) } -> std::same_as<typename O::state_type>;
  o.step(cpu::seq, s, p, g);
};

/// @brief State-blob kinds of the optimizer states (core/state_blob.hpp reserves 0x100..0x1ff).
inline constexpr state_kind sgd_state_kind = static_cast<state_kind>(0x100);
inline constexpr state_kind adam_state_kind = static_cast<state_kind>(0x101);

namespace detail {

/// Correctly rounded square root on both backends (IEEE sqrt is exact-rounded on the host;
/// nvcc's `__fsqrt_rn` is the device equivalent), so optimizer state matches bit for bit.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float sqrt_rn(float x) {
#if COMMPRESS_DEVICE_COMPILATION
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// True for a finite hyperparameter >= 0 (false for NaN and Inf).
constexpr bool finite_non_negative(float x) noexcept {
  return x >= 0.0f && x <= std::numeric_limits<float>::max();
}

/// Refuses a step whose views disagree with the state's element count.
inline void check_step_sizes(const char* component, std::uint64_t state_n, std::size_t params,
                             std::size_t grads) {
  COMMPRESS_EXPECTS(params == grads && params == state_n, errc::size_mismatch, component,
                    "params (" + std::to_string(params) + "), grads (" + std::to_string(grads) +
                        ") and state (" + std::to_string(state_n) +
                        " elements) must have the same size");
}

} // namespace detail
} // namespace commpress
