// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// pipeline<Feedback, Codec>: an error-feedback policy composed with a codec, and the entry
/// points that run it: encode on the sender, decode / decode_accumulate on the receiver.
///
/// Like the codec entry points, every call takes the execution policy first and works on
/// caller-provided spans; nothing allocates. State is explicit: `make_state(n)` for the sender,
/// `make_receiver_state(n)` for the receiver (empty for none, ef, loco and dgc).

#include <cstdint>
#include <span>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/feedback/aq_sgd.hpp"
#include "commpress/feedback/dgc.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/feedback/ef21.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/feedback/loco.hpp"
#include "commpress/feedback/none.hpp"

namespace commpress {

/// @brief A feedback policy and a codec, both configuration values; an aggregate.
/// @tparam Feedback none, ef, ef21, loco<Storage>, aq_sgd<Storage> or dgc
/// @tparam Codec any codec (identity, cast, quantize, top_k, ...)
template <feedback Feedback, codec Codec> struct pipeline {
  using feedback_type = Feedback;
  using codec_type = Codec;
  using sender_state = typename Feedback::sender_state;
  using receiver_state = typename Feedback::receiver_state;

  Feedback feedback{};
  Codec codec{};

  /// @brief The sender's state for n-element tensors (aq_sgd: sized by its configuration).
  [[nodiscard]] sender_state make_state(std::uint64_t n = 0) const {
    return feedback.make_sender_state(n);
  }
  /// @brief The receiver's state for n-element tensors.
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t n = 0) const {
    return feedback.make_receiver_state(n);
  }
  /// @brief Exact upper bound of the payload an n-element encode writes.
  [[nodiscard]] std::uint64_t max_payload_bytes(std::uint64_t n) const {
    using ops = detail::feedback_ops<Feedback>;
    if constexpr (requires { ops::max_payload_bytes(feedback, codec, n); }) {
      return ops::max_payload_bytes(feedback, codec, n);
    } else {
      return commpress::max_payload_bytes(codec, n);
    }
  }
  /// @brief Scratch bytes any call of this pipeline needs for n elements on the CPU (both
  /// sides; see also the free function workspace_bytes(policy, pipe, n)).
  [[nodiscard]] std::uint64_t workspace_bytes(std::uint64_t n) const {
    return detail::feedback_ops<Feedback>::workspace_bytes(cpu::seq, feedback, codec, n);
  }
  /// @brief Checks both configurations for n-element tensors.
  [[nodiscard]] status can_implement(std::uint64_t n) const noexcept {
    const status f = feedback.can_implement(n);
    return f ? codec.can_implement(n) : f;
  }

  friend constexpr bool operator==(const pipeline&, const pipeline&) = default;
};

/// @brief Scratch bytes any call of `pipe` needs for n elements under `policy`.
template <host_policy Policy, class F, class C>
std::uint64_t workspace_bytes(const Policy& policy, const pipeline<F, C>& pipe, std::uint64_t n) {
  return detail::feedback_ops<F>::workspace_bytes(policy, pipe.feedback, pipe.codec, n);
}

/// @brief Sender step: updates `state` and writes the payload to the front of `out`.
/// @param out at least pipe.max_payload_bytes(in.size()) bytes
/// @param workspace at least workspace_bytes(policy, pipe, in.size()) bytes, 4-byte aligned
/// @throws commpress::error bad configuration, sizes or buffers, or NaN/Inf input under
///         nonfinite_policy::fail; the state is unchanged then.
/// @note NaN/Inf never enters the state: an element whose update would be non-finite keeps its
///       previous value (counted in step_result::held).
template <host_policy Policy, class F, class C, element T>
requires(F::id != feedback_id::aq_sgd) step_result
    encode(const Policy& policy, const pipeline<F, C>& pipe, typename F::sender_state& state,
           const context& ctx, std::span<const T> in, std::span<std::byte> out,
           std::span<std::byte> workspace) {
  return detail::feedback_ops<F>::encode(policy, pipe.feedback, pipe.codec, state, ctx, in, out,
                                         workspace);
}

/// @brief AQ-SGD sender step: `in` is ids.size() rows of sample_size elements, row r belonging
/// to dataset sample ids[r].
template <host_policy Policy, class F, class C, element T>
requires(F::id == feedback_id::aq_sgd) step_result
    encode(const Policy& policy, const pipeline<F, C>& pipe, typename F::sender_state& state,
           const context& ctx, std::span<const std::uint64_t> ids, std::span<const T> in,
           std::span<std::byte> out, std::span<std::byte> workspace) {
  return detail::feedback_ops<F>::encode(policy, pipe.feedback, pipe.codec, state, ctx, ids, in,
                                         out, workspace);
}

/// @brief Receiver step: validates `payload`, updates the receiver state (ef21 mirror) and
/// writes the reconstruction to `out`.
/// @throws commpress::error for a truncated, corrupted or foreign payload; state and `out` are
///         unchanged then.
template <host_policy Policy, class F, class C, element T>
requires(F::id != feedback_id::aq_sgd) decode_result
    decode(const Policy& policy, const pipeline<F, C>& pipe, typename F::receiver_state& state,
           std::span<const std::byte> payload, std::span<T> out,
           std::span<std::byte> workspace = {}) {
  return detail::feedback_ops<F>::decode(policy, pipe.feedback, pipe.codec, state, payload, out,
                                         workspace);
}

/// @brief AQ-SGD receiver step: updates m(ids[r]) and writes the reconstruction of each row.
template <host_policy Policy, class F, class C, element T>
requires(F::id == feedback_id::aq_sgd) decode_result
    decode(const Policy& policy, const pipeline<F, C>& pipe, typename F::receiver_state& state,
           std::span<const std::uint64_t> ids, std::span<const std::byte> payload, std::span<T> out,
           std::span<std::byte> workspace) {
  return detail::feedback_ops<F>::decode(policy, pipe.feedback, pipe.codec, state, ids, payload,
                                         out, workspace);
}

/// @brief Data-parallel aggregation for stateless receivers (none, ef, loco, dgc):
/// acc += weight * deQ(payload).
template <host_policy Policy, class F, class C>
requires(F::id == feedback_id::none || F::id == feedback_id::ef || F::id == feedback_id::loco ||
         F::id == feedback_id::dgc) payload_header
    decode_accumulate(const Policy& policy, const pipeline<F, C>& pipe,
                      std::span<const std::byte> payload, std::span<float> acc,
                      float weight = 1.0f) {
  return commpress::decode_accumulate(policy, pipe.codec, payload, acc, weight);
}

/// @brief EF21 data-parallel server mirror: g += weight * deQ(payload) (finite sums only).
/// Read the aggregate from state.mirror().
template <host_policy Policy, class C>
decode_result decode_accumulate(const Policy& policy, const pipeline<ef21, C>& pipe,
                                ef21_state& state, std::span<const std::byte> payload, float weight,
                                std::span<std::byte> workspace) {
  return detail::feedback_ops<ef21>::accumulate(policy, pipe.feedback, pipe.codec, state, payload,
                                                weight, workspace);
}

} // namespace commpress
