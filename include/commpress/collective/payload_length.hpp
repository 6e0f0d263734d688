// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The length exchange of variable-length payloads (qsgd's Elias coding), shared by the
/// collectives and the optimizers' exchanges (data_parallel, onebit_adam): whether a pipeline's
/// payloads vary, the 8-byte lengths, and their all-gather with every peer's length checked
/// before it slices received bytes (docs/collectives.md, "Variable-length payloads"). It needs
/// no codec of its own, so the optimizers include it without the collectives' codec headers.

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "commpress/core/concepts.hpp"
#include "commpress/core/error.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

static_assert(std::endian::native == std::endian::little,
              "commpress payload lengths are little-endian u64s copied as they are");

/// @brief Whether a pipeline's payloads vary in length: its codec's variable_body() (qsgd's
/// Elias coding). A runtime property, since a codec's configuration picks its body; for a codec
/// that never varies (no variable_body_codec) it is the constant false. The collectives then
/// exchange each payload's length before the payloads (docs/collectives.md, "Variable-length
/// payloads"), and send blocks padded to the largest length instead of the plan's fixed slots.
template <class P> constexpr bool variable_payloads(const P& pipe) noexcept {
  return has_variable_body(pipe.codec);
}

/// @brief Bytes of one payload length in the length exchange: a little-endian u64.
inline constexpr std::uint64_t payload_length_bytes = 8;

namespace detail {

/// Length i of a length-exchange buffer (little-endian u64s; the host is little-endian). The
/// workspace is only 4-byte aligned, so the values are copied, not read in place.
inline std::uint64_t load_length(std::span<const std::byte> lengths, std::size_t i) {
  std::uint64_t v = 0;
  std::memcpy(&v, lengths.data() + i * payload_length_bytes, sizeof v);
  return v;
}
inline void store_length(std::span<std::byte> lengths, std::size_t i, std::uint64_t v) {
  std::memcpy(lengths.data() + i * payload_length_bytes, &v, sizeof v);
}

/// The length exchange of variable-length payloads: all-gathers every rank's `mine` (its
/// payloads' lengths, in the order it sends them) into `all`, checks that the p-th length of
/// every rank lies between the header and `slot_of(p)` (a peer's length is used to slice the
/// received bytes, so a bad one must not reach the decoder), and returns the largest: the block
/// every rank pads to where each sends one payload, the same on every rank since all of them
/// read the same gathered lengths.
/// @throws commpress::error (corrupt) naming the rank that reported a bad length
template <class Comm, class SlotOf>
requires std::invocable<const SlotOf&, std::size_t> std::uint64_t
exchange_lengths(Comm& comm, std::span<const std::byte> mine, std::span<std::byte> all,
                 const SlotOf& slot_of, const char* who) {
  comm.all_gather(mine, all);
  const std::size_t per_rank = mine.size() / payload_length_bytes;
  std::uint64_t widest = 0;
  for (std::size_t i = 0; i < all.size() / payload_length_bytes; ++i) {
    const std::uint64_t len = load_length(all, i);
    const std::uint64_t slot = slot_of(i % per_rank);
    COMMPRESS_EXPECTS(len >= format::header_bytes && len <= slot, errc::corrupt, "collective",
                      std::string(who) + ": rank " + std::to_string(i / per_rank) +
                          " reports a payload of " + std::to_string(len) +
                          " bytes, outside the header's " + std::to_string(format::header_bytes) +
                          " and the slot's " + std::to_string(slot));
    widest = std::max(widest, len);
  }
  return widest;
}

/// exchange_lengths where every payload has the same slot.
template <class Comm>
std::uint64_t exchange_lengths(Comm& comm, std::span<const std::byte> mine,
                               std::span<std::byte> all, std::uint64_t slot, const char* who) {
  return exchange_lengths(
      comm, mine, all, [slot](std::size_t) { return slot; }, who);
}

/// What gather_payloads received: every rank's block, back to back.
struct gathered_payloads {
  std::span<const std::byte> all;     ///< N blocks of `block` bytes, in rank order
  std::span<const std::byte> lengths; ///< every rank's payload length (variable payloads only)
  std::size_t block = 0;              ///< bytes per rank: the slot, or the longest payload
  std::uint64_t wire_bytes = 0;       ///< bytes this rank sent, its length included

  /// Rank k's payload, at the length it reported where the payloads vary.
  [[nodiscard]] std::span<const std::byte> payload(std::size_t k) const {
    const std::size_t length =
        lengths.empty() ? block : static_cast<std::size_t>(load_length(lengths, k));
    return all.subspan(k * block, length);
  }
};

/// The all-gather of one payload per rank. `slot` holds this rank's payload of `bytes` bytes;
/// its tail is zeroed, so the bytes on the wire are defined. Fixed-length payloads (`my_length`
/// empty) are all-gathered as whole slots in one call. Variable-length ones take two calls:
/// exchange_lengths over `my_length` (8 bytes) and `lengths` (8 N), then blocks as long as the
/// longest payload. `all` holds N slots.
/// @throws commpress::error (corrupt) where a rank reports a length outside [64, slot]
template <class Comm>
gathered_payloads gather_payloads(Comm& comm, std::span<std::byte> slot, std::size_t bytes,
                                  std::span<std::byte> all, std::span<std::byte> my_length,
                                  std::span<std::byte> lengths, const char* who) {
  std::fill(slot.begin() + static_cast<std::ptrdiff_t>(bytes), slot.end(), std::byte{0});
  const auto ranks = static_cast<std::size_t>(comm.size());
  gathered_payloads g{{}, lengths, slot.size(), 0};
  if (!my_length.empty()) {
    store_length(my_length, 0, bytes);
    g.block = static_cast<std::size_t>(
        exchange_lengths(comm, std::span<const std::byte>(my_length), lengths, slot.size(), who));
    g.wire_bytes += (ranks - 1) * payload_length_bytes;
  }
  comm.all_gather(std::span<const std::byte>(slot.first(g.block)), all.first(ranks * g.block));
  g.all = all.first(ranks * g.block);
  g.wire_bytes += (ranks - 1) * g.block;
  return g;
}

} // namespace detail
} // namespace commpress
