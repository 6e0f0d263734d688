// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What every error-feedback policy shares: the concept, call results, scratch carving and the
/// non-finite-safe state update.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "commpress/codec_ops.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Error-feedback policy identifiers.
enum class feedback_id : std::uint8_t { none = 0, ef = 1, ef21 = 2, loco = 3, aq_sgd = 4, dgc = 5 };

/// @brief An error-feedback policy: a trivially copyable configuration value whose state lives
/// in separate, caller-owned objects (`sender_state`, `receiver_state`).
template <class F>
concept feedback = std::is_trivially_copyable_v<F> && std::equality_comparable<F> &&
    requires(const F& f, std::uint64_t n) {
  { F::id } -> std::convertible_to<feedback_id>;
  { f.can_implement(n) }
  noexcept->std::same_as<status>;
  typename F::sender_state;
  typename F::receiver_state;
};

/// @brief What a sending call produced.
struct step_result {
  std::size_t bytes = 0;     ///< payload bytes written at the front of `out`
  std::size_t nonfinite = 0; ///< NaN/Inf input elements seen
  std::size_t held = 0;      ///< state elements that kept their previous value because their
                             ///< update was non-finite (NaN/Inf never enters feedback state)
};

/// @brief What a receiving call read.
struct decode_result {
  payload_header header; ///< the validated payload header
  std::size_t held = 0;  ///< receiver state elements that kept their previous value
};

/// @brief Receiver state of policies whose receiver keeps nothing (none, ef, loco, dgc).
struct no_state {
  [[nodiscard]] std::vector<std::byte> save(std::uint32_t) const { return {}; }
  void load(std::span<const std::byte>, std::uint32_t) {}
  friend constexpr bool operator==(no_state, no_state) = default;
};

namespace detail {

/// Alignment of every region carved from a pipeline workspace.
inline constexpr std::uint64_t scratch_align = 64;

constexpr std::uint64_t align_up(std::uint64_t v) {
  return (v + scratch_align - 1) / scratch_align * scratch_align;
}

/// Workspace bytes for `floats` float temporaries of n elements plus the codec's own scratch.
template <class Policy, codec C>
std::uint64_t scratch_bytes(const Policy& p, const C& c, std::uint64_t n, unsigned floats,
                            std::uint64_t extra_floats = 0) {
  return floats * align_up(4 * n) + align_up(4 * extra_floats) + workspace_bytes(p, c, n);
}

/// Carves float temporaries and the codec's scratch from a caller's workspace.
class scratch {
public:
  explicit scratch(std::span<std::byte> ws) : ws_(ws) {
    COMMPRESS_EXPECTS(reinterpret_cast<std::uintptr_t>(ws.data()) % alignof(float) == 0,
                      errc::invalid_argument, "pipeline", "workspace is not 4-byte aligned");
  }
  std::span<float> floats(std::uint64_t n) {
    const std::uint64_t bytes = align_up(4 * n);
    COMMPRESS_EXPECTS(bytes <= ws_.size(), errc::buffer_too_small, "pipeline",
                      "workspace smaller than workspace_bytes()");
    auto* p = reinterpret_cast<float*>(ws_.data());
    ws_ = ws_.subspan(static_cast<std::size_t>(bytes));
    return {p, static_cast<std::size_t>(n)};
  }
  std::span<std::byte> rest() const { return ws_; }

private:
  std::span<std::byte> ws_;
};

/// Throws before anything is written when the caller asked to fail on NaN/Inf.
template <element T>
void check_fail_policy(const context& ctx, std::span<const T> in, const char* who) {
  if (ctx.on_nonfinite == nonfinite_policy::fail) {
    const std::size_t bad = count_nonfinite(in);
    COMMPRESS_EXPECTS(bad == 0, errc::non_finite, who,
                      std::to_string(bad) + " NaN/Inf input elements");
  }
}

/// state[i] += weight * delta[i] where the sum is finite; otherwise state[i] is kept. Returns
/// how many were kept. Sender and receiver mirrors call exactly this, so they stay bitwise equal
/// (mul_rn/add_rn: no FMA contraction, docs/methods.md section 10.2).
inline std::size_t add_finite(std::span<float> state, std::span<const float> delta, float weight) {
  std::size_t held = 0;
  for (std::size_t i = 0; i < state.size(); ++i) {
    const float v = add_rn(state[i], mul_rn(weight, delta[i]));
    if (is_finite(v)) {
      state[i] = v;
    } else {
      ++held;
    }
  }
  return held;
}

/// Checks that a state object was sized for this tensor.
inline void check_state_size(std::uint64_t state, std::uint64_t n, const char* who) {
  COMMPRESS_EXPECTS(state == n, errc::size_mismatch, who,
                    "state holds " + std::to_string(state) + " elements, the tensor has " +
                        std::to_string(n));
}

/// Per-policy algorithms; each feedback header specialises it.
template <class Feedback> struct feedback_ops;

} // namespace detail
} // namespace commpress
