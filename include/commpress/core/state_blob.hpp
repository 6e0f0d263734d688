// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Versioned little-endian binary blobs for state that must survive a checkpoint: error-feedback
/// residuals, EF21 mirrors, LoCo errors, AQ-SGD caches, DGC momenta, channel ends, optimizer
/// moments.
///
/// Losing compressor state at a checkpoint is a common complaint about existing systems (their
/// error buffers are dropped on load or never saved; docs/methods.md 8), so every state object
/// saves to and loads from one of these.
///
/// Layout (all integers little-endian):
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 4     | magic "CPSB"                                                   |
/// | 4      | 2     | envelope version (blob_format_version = 1)                     |
/// | 6      | 2     | kind (state_kind, or an optimizer's own value >= 0x100)        |
/// | 8      | 4     | kind version: the layout version of that kind's payload        |
/// | 12     | 4     | tensor id the state belongs to                                 |
/// | 16     | 4     | number of size fields s                                        |
/// | 20     | 4     | reserved, zero                                                 |
/// | 24     | 8     | payload bytes p                                                |
/// | 32     | 8 s   | size fields (shape and configuration the payload depends on)   |
/// | 32+8s  | p     | payload                                                        |
/// | end-4  | 4     | CRC32C of every preceding byte                                 |

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "commpress/core/error.hpp"
#include "commpress/format/crc32c.hpp"

namespace commpress {

/// @brief What a blob holds. Values are stable; optimizers use 0x100..0x1ff.
enum class state_kind : std::uint16_t {
  ef_residual = 1,      ///< ef_state
  ef21_mirror = 2,      ///< ef21_state (sender or receiver)
  loco_error = 3,       ///< loco_state<Storage>
  aq_sgd_cache = 4,     ///< aq_sgd_state<Storage> (sender or receiver)
  channel_sender = 5,   ///< sender_end: step counter + pipeline state
  channel_receiver = 6, ///< receiver_end: step counter + pipeline state
  dgc_momentum = 7,     ///< dgc_state (momentum u and accumulation v)
  powersgd = 8,         ///< powersgd_state (error and warm-start matrix Q)
  optimizer_first = 0x100,
};

inline constexpr std::uint16_t blob_format_version = 1;
inline constexpr std::size_t blob_fixed_bytes = 32;
inline constexpr unsigned char blob_magic[4] = {'C', 'P', 'S', 'B'};

namespace detail {
template <class U> void blob_store(std::vector<std::byte>& out, U v) {
  static_assert(std::is_unsigned_v<U>);
  for (std::size_t i = 0; i < sizeof(U); ++i)
    out.push_back(static_cast<std::byte>(static_cast<std::uint64_t>(v) >> (8 * i)));
}
template <class U> U blob_load(const std::byte* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i)
    v = static_cast<U>(v | static_cast<U>(static_cast<U>(p[i]) << (8 * i)));
  return v;
}
} // namespace detail

/// @brief Builds a blob: size fields first, then payload values, then finish().
///
/// Allocates (checkpointing is off the hot path).
class blob_writer {
public:
  /// @param kind what the blob holds; @param kind_version layout version of that kind
  blob_writer(state_kind kind, std::uint32_t kind_version, std::uint32_t tensor_id)
      : kind_(kind), kind_version_(kind_version), tensor_id_(tensor_id) {}

  /// Appends a size field: a shape or configuration value the loader checks before reading.
  blob_writer& size(std::uint64_t v) {
    sizes_.push_back(v);
    return *this;
  }
  /// Appends an unsigned integer to the payload, little-endian.
  template <std::unsigned_integral U> blob_writer& put(U v) {
    detail::blob_store(payload_, v);
    return *this;
  }
  /// Appends floats to the payload as their little-endian IEEE bits.
  blob_writer& put(std::span<const float> v) {
    for (float f : v) {
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      detail::blob_store(payload_, u);
    }
    return *this;
  }
  /// Appends 16-bit words (bf16 or fp16 storage) to the payload.
  blob_writer& put(std::span<const std::uint16_t> v) {
    for (std::uint16_t w : v)
      detail::blob_store(payload_, w);
    return *this;
  }
  /// Appends raw bytes to the payload.
  blob_writer& put(std::span<const std::uint8_t> v) {
    for (std::uint8_t b : v)
      payload_.push_back(static_cast<std::byte>(b));
    return *this;
  }
  /// Appends a nested blob (for example a pipeline state inside a channel end).
  blob_writer& put_blob(std::span<const std::byte> blob) {
    put(static_cast<std::uint64_t>(blob.size()));
    payload_.insert(payload_.end(), blob.begin(), blob.end());
    return *this;
  }

  /// The finished blob with its checksum.
  [[nodiscard]] std::vector<std::byte> finish() const {
    std::vector<std::byte> out;
    out.reserve(blob_fixed_bytes + 8 * sizes_.size() + payload_.size() + 4);
    for (unsigned char m : blob_magic)
      out.push_back(static_cast<std::byte>(m));
    detail::blob_store(out, blob_format_version);
    detail::blob_store(out, static_cast<std::uint16_t>(kind_));
    detail::blob_store(out, kind_version_);
    detail::blob_store(out, tensor_id_);
    detail::blob_store(out, static_cast<std::uint32_t>(sizes_.size()));
    detail::blob_store(out, std::uint32_t{0});
    detail::blob_store(out, static_cast<std::uint64_t>(payload_.size()));
    for (std::uint64_t s : sizes_)
      detail::blob_store(out, s);
    out.insert(out.end(), payload_.begin(), payload_.end());
    detail::blob_store(out, detail::crc32c(out.data(), out.size()));
    return out;
  }

private:
  state_kind kind_;
  std::uint32_t kind_version_;
  std::uint32_t tensor_id_;
  std::vector<std::uint64_t> sizes_;
  std::vector<std::byte> payload_;
};

/// @brief Validates a blob on construction and reads its payload in writing order.
///
/// Loaders read everything into temporaries and commit only after finish() succeeds, so a bad
/// blob leaves the object being loaded unchanged.
class blob_reader {
public:
  /// Checks length, magic, envelope version, checksum, kind, kind version and tensor id.
  /// @throws commpress::error truncated, bad_magic, bad_version, checksum_mismatch,
  ///         codec_mismatch (another kind of state), stream_mismatch (another tensor id), corrupt
  blob_reader(std::span<const std::byte> blob, state_kind kind, std::uint32_t kind_version,
              std::uint32_t tensor_id)
      : blob_(blob) {
    constexpr const char* who = "state blob";
    COMMPRESS_EXPECTS(blob.size() >= blob_fixed_bytes + 4, errc::truncated, who,
                      "blob of " + std::to_string(blob.size()) + " bytes is shorter than its " +
                          std::to_string(blob_fixed_bytes + 4) + "-byte envelope");
    const std::byte* p = blob.data();
    COMMPRESS_EXPECTS(std::memcmp(p, blob_magic, 4) == 0, errc::bad_magic, who,
                      "bytes 0..3 are not \"CPSB\"");
    const auto version = detail::blob_load<std::uint16_t>(p + 4);
    COMMPRESS_EXPECTS(version == blob_format_version, errc::bad_version, who,
                      "envelope version " + std::to_string(version) + " (this build reads " +
                          std::to_string(blob_format_version) + ")");
    const auto nsizes = detail::blob_load<std::uint32_t>(p + 16);
    const auto payload = detail::blob_load<std::uint64_t>(p + 24);
    const std::uint64_t room = blob.size() - blob_fixed_bytes - 4;
    COMMPRESS_EXPECTS(nsizes <= room / 8 && payload == room - 8 * std::uint64_t{nsizes},
                      errc::truncated, who,
                      "declared sizes and payload do not match the blob's length");
    const auto stored = detail::blob_load<std::uint32_t>(p + blob.size() - 4);
    COMMPRESS_EXPECTS(stored == detail::crc32c(p, blob.size() - 4), errc::checksum_mismatch, who,
                      "CRC32C differs: the blob was corrupted");
    const auto k = detail::blob_load<std::uint16_t>(p + 6);
    COMMPRESS_EXPECTS(k == static_cast<std::uint16_t>(kind), errc::codec_mismatch, who,
                      "blob holds state kind " + std::to_string(k) + ", expected " +
                          std::to_string(static_cast<std::uint16_t>(kind)));
    const auto kv = detail::blob_load<std::uint32_t>(p + 8);
    COMMPRESS_EXPECTS(kv == kind_version, errc::bad_version, who,
                      "state layout version " + std::to_string(kv) + ", this build reads " +
                          std::to_string(kind_version));
    const auto id = detail::blob_load<std::uint32_t>(p + 12);
    COMMPRESS_EXPECTS(id == tensor_id, errc::stream_mismatch, who,
                      "blob belongs to tensor id " + std::to_string(id) + ", expected " +
                          std::to_string(tensor_id));
    COMMPRESS_EXPECTS(detail::blob_load<std::uint32_t>(p + 20) == 0, errc::corrupt, who,
                      "reserved field is not zero");
    nsizes_ = nsizes;
    pos_ = blob_fixed_bytes + 8 * std::size_t{nsizes};
    end_ = blob.size() - 4;
  }

  /// Number of size fields.
  [[nodiscard]] std::size_t size_count() const noexcept { return nsizes_; }
  /// Size field i.
  [[nodiscard]] std::uint64_t size(std::size_t i) const {
    COMMPRESS_EXPECTS(i < nsizes_, errc::corrupt, "state blob", "missing size field");
    return detail::blob_load<std::uint64_t>(blob_.data() + blob_fixed_bytes + 8 * i);
  }
  /// Checks that the size fields are exactly `expected` (shape and configuration of the object
  /// being loaded). @throws commpress::error size_mismatch
  void expect_sizes(std::initializer_list<std::uint64_t> expected) const {
    bool same = expected.size() == nsizes_;
    std::size_t i = 0;
    for (std::uint64_t v : expected)
      same = same && size(i++) == v;
    COMMPRESS_EXPECTS(same, errc::size_mismatch, "state blob",
                      "the blob's shape or configuration differs from the object's");
  }

  /// Reads an unsigned integer. @throws commpress::error truncated
  template <std::unsigned_integral U> U get() {
    need(sizeof(U));
    const U v = detail::blob_load<U>(blob_.data() + pos_);
    pos_ += sizeof(U);
    return v;
  }
  void get(std::span<float> out) {
    need(4 * out.size());
    for (float& f : out) {
      const auto u = detail::blob_load<std::uint32_t>(blob_.data() + pos_);
      std::memcpy(&f, &u, 4);
      pos_ += 4;
    }
  }
  void get(std::span<std::uint16_t> out) {
    need(2 * out.size());
    for (std::uint16_t& w : out) {
      w = detail::blob_load<std::uint16_t>(blob_.data() + pos_);
      pos_ += 2;
    }
  }
  void get(std::span<std::uint8_t> out) {
    need(out.size());
    std::memcpy(out.data(), blob_.data() + pos_, out.size());
    pos_ += out.size();
  }
  /// Reads a nested blob written by put_blob (a view into this blob).
  std::span<const std::byte> get_blob() {
    const auto n = get<std::uint64_t>();
    need(n);
    const auto s = blob_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  /// Checks that the whole payload was read. @throws commpress::error corrupt
  void finish() const {
    COMMPRESS_EXPECTS(pos_ == end_, errc::corrupt, "state blob",
                      std::to_string(end_ - pos_) + " payload bytes left unread");
  }

private:
  void need(std::uint64_t n) const {
    COMMPRESS_EXPECTS(n <= end_ - pos_, errc::truncated, "state blob",
                      "payload ends before the state does");
  }
  std::span<const std::byte> blob_;
  std::size_t nsizes_ = 0;
  std::size_t pos_ = 0;
  std::size_t end_ = 0;
};

} // namespace commpress
