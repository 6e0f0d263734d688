// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// No error feedback: the pipeline is the bare codec.

#include <cstdint>
#include <span>

#include "commpress/codec_ops.hpp"
#include "commpress/feedback/feedback.hpp"

namespace commpress {

/// @brief Plain compression, C(x) on the wire and no state on either side (Rudakov et al.'s
/// "compression without EF" runs, docs/methods.md 4.4).
struct none {
  static constexpr feedback_id id = feedback_id::none;
  using sender_state = no_state;
  using receiver_state = no_state;

  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }
  [[nodiscard]] sender_state make_sender_state(std::uint64_t) const { return {}; }
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t) const { return {}; }
  friend constexpr bool operator==(none, none) = default;
};

static_assert(feedback<none>);

namespace detail {

template <> struct feedback_ops<none> {
  template <class Policy, codec C>
  static std::uint64_t workspace_bytes(const Policy& p, const none&, const C& c, std::uint64_t n) {
    return scratch_bytes(p, c, n, 0);
  }

  template <class Policy, codec C, element T>
  static step_result encode(const Policy& p, const none&, const C& c, no_state&, const context& ctx,
                            std::span<const T> in, std::span<std::byte> out,
                            std::span<std::byte> ws) {
    const encode_result r = commpress::encode(p, c, ctx, in, out, ws);
    return {r.bytes, r.nonfinite, 0};
  }

  template <class Policy, codec C, element T>
  static decode_result decode(const Policy& p, const none&, const C& c, no_state&,
                              std::span<const std::byte> payload, std::span<T> out,
                              std::span<std::byte>) {
    return {commpress::decode(p, c, payload, out), 0};
  }
};

} // namespace detail
} // namespace commpress
