// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The payload checksum computed while an encoder writes the body, so the body is hashed from
/// the cache instead of being read back from memory afterwards.
///
/// An encoder that writes its body front to back announces its progress with written(); every
/// three complete 64 KiB chunks are hashed right away (crc32c_x3), while they are still in the
/// core's L2. A body may start with a part written out of order (quantize's per-group records,
/// which are known only once their group is done): the chunks that touch it are hashed by
/// finish(), which then joins the two chains of chunk CRCs with crc32c_combine. An encoder that
/// hashes a chunk itself as it produces it hands over the chunk's CRC instead (chunk_hashed).
/// The value is always payload_checksum()'s.

#include <cstddef>
#include <cstdint>

#include "commpress/format/crc32c.hpp"
#include "commpress/format/header.hpp"

namespace commpress::format {

class body_checksum {
public:
  /// @param body the body being written, `body_bytes` long
  /// @param ordered_from bytes [ordered_from, body_bytes) are written in order and announced
  ///        with written(); bytes before it may be written in any order until finish()
  body_checksum(const std::byte* body, std::size_t body_bytes, std::size_t ordered_from)
      : body_(body), bytes_(body_bytes),
        first_(std::min(checksum_chunks(ordered_from), checksum_chunks(body_bytes))),
        next_(first_) {}

  /// Bytes [0 or ordered_from, end) of the body are final. Hashes complete chunks three at a
  /// time; call it at least every few hundred KiB of output so they are still cached.
  void written(std::size_t end) {
    while ((next_ + 3) * checksum_chunk_bytes <= end) {
      tail_ = chain_chunk_crcs(tail_, body_, bytes_, next_, next_ + 3);
      next_ += 3;
    }
  }

  /// The next ordered chunk, a whole checksum_chunk_bytes long, is written, and its CRC32C is
  /// `chunk_crc` (hashed by its writer from registers: cpu::detail::cast_encode_streamed).
  void chunk_hashed(std::uint32_t chunk_crc) {
    tail_ = chain_chunk_crc(tail_, chunk_crc);
    ++next_;
  }

  /// The payload checksum of `header` (bytes 0..59) and the body, all of which is written.
  std::uint32_t finish(const std::byte* header) {
    const std::size_t chunks = checksum_chunks(bytes_);
    tail_ = chain_chunk_crcs(tail_, body_, bytes_, next_, chunks);
    const std::uint32_t head =
        chain_chunk_crcs(commpress::detail::crc32c(header, field::crc), body_, bytes_, 0, first_);
    return commpress::detail::crc32c_combine(head, tail_, 4 * (chunks - first_));
  }

private:
  const std::byte* body_;
  std::size_t bytes_;
  std::size_t first_;      ///< first chunk entirely in the ordered part
  std::size_t next_;       ///< first ordered chunk not hashed yet
  std::uint32_t tail_ = 0; ///< CRC32C of the little-endian CRCs of chunks [first_, next_)
};

} // namespace commpress::format
