// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// One direction of a pipeline (model-parallel) stage boundary: a sender_end on stage i and a
/// receiver_end on stage i+1 (or the reverse for gradients), each owning its pipeline state.
///
/// A trainer compresses activations forward and activation gradients backward with two
/// channels and two pipelines (for example EF21 + TopK 10% forward, 8-bit quantization backward;
/// Rudakov et al. 2024, docs/methods.md 4). The ends allocate their buffers at construction and
/// never per call.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/format/header.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace commpress {

namespace detail {
template <class Pipeline>
inline constexpr bool keyed_by_sample = Pipeline::feedback_type::id == feedback_id::aq_sgd;

inline constexpr std::uint32_t channel_layout_version = 1;

/// Saves a channel end: its tensor size, step counter and pipeline state.
template <class State>
std::vector<std::byte> save_end(state_kind kind, std::uint32_t tensor_id, std::uint64_t n,
                                std::uint64_t step, const State& st) {
  blob_writer w(kind, channel_layout_version, tensor_id);
  w.size(n).put(step).put_blob(st.save(tensor_id));
  return w.finish();
}

/// Loads what save_end wrote into copies, then commits.
template <class State>
void load_end(state_kind kind, std::span<const std::byte> blob, std::uint32_t tensor_id,
              std::uint64_t n, std::uint64_t& step, State& st) {
  blob_reader r(blob, kind, channel_layout_version, tensor_id);
  r.expect_sizes({n});
  const auto s = r.get<std::uint64_t>();
  const auto inner = r.get_blob();
  r.finish();
  State copy = st;
  copy.load(inner, tensor_id);
  st = std::move(copy);
  step = s;
}
} // namespace detail

/// @brief The sending end of a stage boundary: applies the pipeline to each tensor it sends.
///
/// Every enabled send encodes with context {seed, step, tensor_id} and then advances `step`, so
/// the receiver can check that it sees the payloads in order. With `enabled == false`
/// (inference) it sends the identity codec's payload and leaves state and step untouched.
template <class Pipeline> class sender_end {
public:
  /// @param n elements per send (aq_sgd: the largest batch, rows * sample_size)
  /// @param base seed, tensor id and non-finite policy of every send; base.step is the first step
  sender_end(const Pipeline& pipe, std::uint64_t n, const context& base)
      : pipe_(pipe), ctx_(base), n_(n), state_(pipe.make_state(n)),
        payload_(pipe.max_payload_bytes(n) > max_payload_bytes(identity{}, n)
                     ? pipe.max_payload_bytes(n)
                     : max_payload_bytes(identity{}, n)),
        ws_(pipe.workspace_bytes(n)) {
    const status ok = pipe.can_implement(n);
    COMMPRESS_EXPECTS(ok, ok.code, "channel", ok.message);
  }

  bool enabled = true; ///< false: uncompressed identity payloads, state untouched

  /// @brief Encodes x; the returned view is valid until the next send.
  std::span<const std::byte>
  send(std::span<const float> x) requires(!detail::keyed_by_sample<Pipeline>) {
    if (!enabled)
      return send_plain(x);
    last_ = encode(cpu::seq, pipe_, state_, ctx_, x, std::span(payload_), std::span(ws_));
    ++ctx_.step;
    return std::span<const std::byte>(payload_).first(last_.bytes);
  }
  /// @brief Encodes a batch whose row r is dataset sample ids[r] (AQ-SGD).
  std::span<const std::byte>
  send(std::span<const std::uint64_t> ids,
       std::span<const float> x) requires(detail::keyed_by_sample<Pipeline>) {
    if (!enabled)
      return send_plain(x);
    last_ = encode(cpu::seq, pipe_, state_, ctx_, ids, x, std::span(payload_), std::span(ws_));
    ++ctx_.step;
    return std::span<const std::byte>(payload_).first(last_.bytes);
  }

  /// @brief The result of the last send (bytes, non-finite inputs, held state elements).
  [[nodiscard]] const step_result& last() const noexcept { return last_; }
  /// @brief The step the next enabled send will use.
  [[nodiscard]] std::uint64_t step() const noexcept { return ctx_.step; }
  [[nodiscard]] const typename Pipeline::sender_state& state() const noexcept { return state_; }

  /// @brief Checkpoint blob (kind channel_sender) keyed by the channel's tensor id.
  [[nodiscard]] std::vector<std::byte> save() const {
    return detail::save_end(state_kind::channel_sender, ctx_.tensor_id, n_, ctx_.step, state_);
  }
  /// @throws commpress::error for a bad blob; the end is unchanged then.
  void load(std::span<const std::byte> blob) {
    detail::load_end(state_kind::channel_sender, blob, ctx_.tensor_id, n_, ctx_.step, state_);
  }

private:
  std::span<const std::byte> send_plain(std::span<const float> x) {
    const encode_result r = commpress::encode(cpu::seq, identity{}, ctx_, x, std::span(payload_));
    last_ = {r.bytes, r.nonfinite, 0};
    return std::span<const std::byte>(payload_).first(r.bytes);
  }

  Pipeline pipe_;
  context ctx_;
  std::uint64_t n_;
  typename Pipeline::sender_state state_;
  std::vector<std::byte> payload_;
  std::vector<std::byte> ws_;
  step_result last_{};
};

/// @brief The receiving end of a stage boundary: reconstructs each tensor from its payload.
///
/// Before touching state it checks that the payload's seed, tensor id and step are the ones it
/// expects (errc::stream_mismatch otherwise): a lost, repeated or reordered payload would
/// silently desynchronise EF21 mirrors or AQ-SGD caches.
template <class Pipeline> class receiver_end {
public:
  receiver_end(const Pipeline& pipe, std::uint64_t n, const context& base)
      : pipe_(pipe), ctx_(base), n_(n), state_(pipe.make_receiver_state(n)), out_(n),
        ws_(pipe.workspace_bytes(n)) {
    const status ok = pipe.can_implement(n);
    COMMPRESS_EXPECTS(ok, ok.code, "channel", ok.message);
  }

  bool enabled = true; ///< false: expects identity payloads, state untouched

  /// @brief Decodes the payload of the matching send; the view is valid until the next receive.
  /// @throws commpress::error stream_mismatch for a payload of another step, tensor or seed,
  ///         or any payload error; state, step and output are unchanged then.
  std::span<const float>
  receive(std::span<const std::byte> payload) requires(!detail::keyed_by_sample<Pipeline>) {
    check_stream(payload);
    if (!enabled)
      return receive_plain(payload, n_);
    last_ = decode(cpu::seq, pipe_, state_, payload, std::span(out_), std::span(ws_));
    ++ctx_.step;
    return out_;
  }
  /// @brief AQ-SGD: decodes a batch whose row r is dataset sample ids[r].
  std::span<const float>
  receive(std::span<const std::byte> payload,
          std::span<const std::uint64_t> ids) requires(detail::keyed_by_sample<Pipeline>) {
    check_stream(payload);
    const std::uint64_t m = ids.size() * pipe_.feedback.sample_size;
    COMMPRESS_EXPECTS(m <= n_, errc::size_mismatch, "channel", "batch larger than the channel");
    if (!enabled)
      return receive_plain(payload, m);
    const auto out = std::span(out_).first(m);
    last_ = decode(cpu::seq, pipe_, state_, ids, payload, out, std::span(ws_));
    ++ctx_.step;
    return out;
  }

  [[nodiscard]] const decode_result& last() const noexcept { return last_; }
  /// @brief The step the next enabled payload must carry.
  [[nodiscard]] std::uint64_t step() const noexcept { return ctx_.step; }
  [[nodiscard]] const typename Pipeline::receiver_state& state() const noexcept { return state_; }

  [[nodiscard]] std::vector<std::byte> save() const {
    return detail::save_end(state_kind::channel_receiver, ctx_.tensor_id, n_, ctx_.step, state_);
  }
  /// @throws commpress::error for a bad blob; the end is unchanged then.
  void load(std::span<const std::byte> blob) {
    detail::load_end(state_kind::channel_receiver, blob, ctx_.tensor_id, n_, ctx_.step, state_);
  }

private:
  void check_stream(std::span<const std::byte> payload) const {
    const payload_header h = format::validate_envelope(payload);
    COMMPRESS_EXPECTS(h.seed == ctx_.seed && h.tensor_id == ctx_.tensor_id && h.step == ctx_.step,
                      errc::stream_mismatch, "channel",
                      "payload of tensor " + std::to_string(h.tensor_id) + " step " +
                          std::to_string(h.step) + ", expected tensor " +
                          std::to_string(ctx_.tensor_id) + " step " + std::to_string(ctx_.step));
  }
  std::span<const float> receive_plain(std::span<const std::byte> payload, std::uint64_t m) {
    const auto out = std::span(out_).first(m);
    last_ = {commpress::decode(cpu::seq, identity{}, payload, out), 0};
    return out;
  }

  Pipeline pipe_;
  context ctx_;
  std::uint64_t n_;
  typename Pipeline::receiver_state state_;
  std::vector<float> out_;
  std::vector<std::byte> ws_;
  decode_result last_{};
};

} // namespace commpress
