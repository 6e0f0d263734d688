// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Stage channels over point-to-point messages: a `sender_end` / `receiver_end` pair
/// (pipeline/channel.hpp) wired to a communicator's send / recv, for pipeline-parallel
/// activations (forward) and activation gradients (backward), with AQ-SGD's sample ids
/// carried alongside the payload.
///
/// Wire protocol of one transfer, all under the channel's tag (messages between one pair and
/// tag arrive in the order sent):
/// 1. a 16-byte frame: payload bytes, then the number of sample ids (u64 little-endian each);
/// 2. the sample ids as u64 little-endian, when there are any (AQ-SGD channels);
/// 3. the payload.
/// The frame is needed because a payload's size varies (AQ-SGD's warm-up sends identity
/// payloads, a partial batch has fewer rows, `enabled = false` sends identity payloads) and a
/// receive must name its exact size.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "commpress/comm/communicator.hpp"
#include "commpress/core/error.hpp"
#include "commpress/pipeline/channel.hpp"

namespace commpress {

namespace detail {
inline constexpr std::size_t stage_frame_bytes = 16;

/// Sample-id capacity of a channel of n elements.
template <class Pipeline> std::uint64_t id_capacity(const Pipeline& pipe, std::uint64_t n) {
  if constexpr (keyed_by_sample<Pipeline>) {
    return pipe.feedback.sample_size == 0 ? 0 : n / pipe.feedback.sample_size;
  } else {
    return 0;
  }
}
} // namespace detail

/// @brief The sending side of a stage boundary over a communicator: encodes with its
/// `sender_end` and sends frame, ids and payload to `peer` under `tag`.
template <communicator Comm, class Pipeline>
requires(!uses_device_buffers_v<Comm>) class stage_sender {
public:
  /// @param comm the communicator (must outlive the sender)
  /// @param peer the receiving stage's rank
  /// @param tag the channel's tag (>= 0); one tag per channel and direction
  /// @param n elements per send (aq_sgd: the largest batch, rows * sample_size)
  /// @param base seed, tensor id, first step and non-finite policy, as for sender_end
  stage_sender(Comm& comm, int peer, int tag, const Pipeline& pipe, std::uint64_t n,
               const context& base)
      : comm_(&comm), peer_(peer), tag_(tag), end_(pipe, n, base) {}

  /// @brief Encodes `x` and sends it; returns what the encode did.
  step_result send(std::span<const float> x) requires(!detail::keyed_by_sample<Pipeline>) {
    transmit({}, end_.send(x));
    return end_.last();
  }
  /// @brief Encodes a batch whose row r is dataset sample ids[r] (AQ-SGD) and sends ids and
  /// payload.
  step_result send(std::span<const std::uint64_t> ids,
                   std::span<const float> x) requires(detail::keyed_by_sample<Pipeline>) {
    transmit(ids, end_.send(ids, x));
    return end_.last();
  }

  /// @brief The channel end (state, step, checkpoint, `enabled`).
  [[nodiscard]] sender_end<Pipeline>& end() noexcept { return end_; }
  [[nodiscard]] const sender_end<Pipeline>& end() const noexcept { return end_; }

private:
  void transmit(std::span<const std::uint64_t> ids, std::span<const std::byte> payload) {
    std::array<std::byte, detail::stage_frame_bytes> frame{};
    format::detail::store_le<std::uint64_t>(reinterpret_cast<unsigned char*>(frame.data()),
                                            payload.size());
    format::detail::store_le<std::uint64_t>(reinterpret_cast<unsigned char*>(frame.data()) + 8,
                                            ids.size());
    comm_->send(std::span<const std::byte>(frame), peer_, tag_);
    if (!ids.empty())
      comm_->send(std::as_bytes(ids), peer_, tag_); // little-endian host
    comm_->send(payload, peer_, tag_);
  }

  Comm* comm_;
  int peer_;
  int tag_;
  sender_end<Pipeline> end_;
};

/// @brief The receiving side of a stage boundary over a communicator: receives frame, ids and
/// payload from `peer` under `tag` into buffers sized at construction, and decodes with its
/// `receiver_end` (which checks the payload's seed, tensor id and step).
template <communicator Comm, class Pipeline>
requires(!uses_device_buffers_v<Comm>) class stage_receiver {
public:
  stage_receiver(Comm& comm, int peer, int tag, const Pipeline& pipe, std::uint64_t n,
                 const context& base)
      : comm_(&comm), peer_(peer), tag_(tag), end_(pipe, n, base),
        payload_(static_cast<std::size_t>(
            std::max(pipe.max_payload_bytes(n), max_payload_bytes(identity{}, n)))),
        ids_(static_cast<std::size_t>(detail::id_capacity(pipe, n))) {}

  /// @brief Receives and decodes the next tensor; the view is valid until the next receive.
  /// @throws commpress::error size_mismatch for a frame larger than the channel, or whatever
  ///         receiver_end::receive throws (stream_mismatch, payload errors)
  std::span<const float> receive() requires(!detail::keyed_by_sample<Pipeline>) {
    return end_.receive(fetch());
  }
  /// @brief AQ-SGD: receives ids and payload and decodes the batch; ids() holds the ids.
  std::span<const float> receive() requires(detail::keyed_by_sample<Pipeline>) {
    const std::span<const std::byte> payload = fetch();
    return end_.receive(payload, ids());
  }

  /// @brief The sample ids of the last receive (empty for channels without ids).
  [[nodiscard]] std::span<const std::uint64_t> ids() const noexcept {
    return std::span<const std::uint64_t>(ids_).first(static_cast<std::size_t>(n_ids_));
  }
  [[nodiscard]] receiver_end<Pipeline>& end() noexcept { return end_; }
  [[nodiscard]] const receiver_end<Pipeline>& end() const noexcept { return end_; }

private:
  std::span<const std::byte> fetch() {
    std::array<std::byte, detail::stage_frame_bytes> frame{};
    comm_->recv(std::span<std::byte>(frame), peer_, tag_);
    const auto* f = reinterpret_cast<const unsigned char*>(frame.data());
    const auto bytes = format::detail::load_le<std::uint64_t>(f);
    const auto n_ids = format::detail::load_le<std::uint64_t>(f + 8);
    COMMPRESS_EXPECTS(bytes <= payload_.size() && n_ids <= ids_.size(), errc::size_mismatch,
                      "stage_channel",
                      "frame announces " + std::to_string(bytes) + " payload bytes and " +
                          std::to_string(n_ids) + " ids; the channel holds " +
                          std::to_string(payload_.size()) + " and " + std::to_string(ids_.size()));
    n_ids_ = n_ids;
    if (n_ids > 0)
      comm_->recv(std::as_writable_bytes(std::span<std::uint64_t>(ids_).first(n_ids)), peer_, tag_);
    const std::span<std::byte> payload =
        std::span<std::byte>(payload_).first(static_cast<std::size_t>(bytes));
    comm_->recv(payload, peer_, tag_);
    return payload;
  }

  Comm* comm_;
  int peer_;
  int tag_;
  receiver_end<Pipeline> end_;
  std::vector<std::byte> payload_;
  std::vector<std::uint64_t> ids_;
  std::uint64_t n_ids_ = 0;
};

} // namespace commpress
