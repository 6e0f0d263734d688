// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The 64-byte payload header, its checksum and its validation (docs/wire-format.md).

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "commpress/core/config.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/hadamard.hpp"
#include "commpress/format/crc32c.hpp"

namespace commpress {

/// @brief Codec identifiers as written in byte 5 of every payload.
enum class codec_id : std::uint8_t {
  identity = 1,
  cast = 2,
  quantize = 3,
  top_k = 4,
  random_k = 5,
  sign = 6,
};

/// @brief A codec's configuration as 16 bytes in the header; decoders compare them exactly.
using codec_params = std::array<std::uint8_t, 16>;

/// @brief The decoded fields of a payload header.
struct payload_header {
  codec_id codec{};
  dtype element{};         ///< dtype of the tensor that was encoded
  std::uint64_t count = 0; ///< elements in the tensor
  std::uint64_t body_bytes = 0;
  std::uint64_t seed = 0; ///< context the sender encoded with
  std::uint64_t step = 0;
  std::uint32_t tensor_id = 0;
  codec_params params{};
  std::uint8_t transform = 0; ///< the transform applied before the codec (format::transform_byte)
};

namespace format {

inline constexpr std::size_t header_bytes = 64;
inline constexpr std::uint8_t version = 1;
inline constexpr std::array<unsigned char, 4> magic = {'C', 'P', 'R', 'S'};
/// The body is checksummed in chunks of this many bytes so that a GPU can hash them in parallel.
inline constexpr std::size_t checksum_chunk_bytes = 65536;
/// Byte offsets of the header fields (docs/wire-format.md, "Header"): the host writer and
/// reader here and the device validator (backend/cuda/codec_ops.cuh) use these names.
namespace field {
inline constexpr std::size_t magic = 0;       ///< 4 bytes, "CPRS"
inline constexpr std::size_t version = 4;     ///< 1 byte
inline constexpr std::size_t codec = 5;       ///< 1 byte, codec_id
inline constexpr std::size_t element = 6;     ///< 1 byte, dtype
inline constexpr std::size_t transform = 7;   ///< 1 byte, transform_byte
inline constexpr std::size_t count = 8;       ///< u64
inline constexpr std::size_t body_bytes = 16; ///< u64
inline constexpr std::size_t seed = 24;       ///< u64
inline constexpr std::size_t step = 32;       ///< u64
inline constexpr std::size_t tensor_id = 40;  ///< u32
inline constexpr std::size_t params = 44;     ///< 16 bytes
inline constexpr std::size_t crc = 60;        ///< u32
} // namespace field

namespace detail {
// On a little-endian host, one memcpy: GCC leaves the byte loops as byte loads and shifts, and
// a hot loop (the Elias reader's refill) reads through load_le.
template <class U> inline void store_le(unsigned char* p, U v) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof(U));
  } else {
    for (std::size_t i = 0; i < sizeof(U); ++i)
      p[i] = static_cast<unsigned char>(v >> (8 * i));
  }
}
template <class U> inline U load_le(const unsigned char* p) {
  U v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof(U));
  } else {
    for (std::size_t i = 0; i < sizeof(U); ++i)
      v |= static_cast<U>(p[i]) << (8 * i);
  }
  return v;
}
} // namespace detail

/// @brief Byte 7: the transform applied to the tensor before the codec encoded it, inverted
/// after decode. 0: none. Otherwise the high four bits name the transform and the low four
/// its parameter; the one transform is the randomized Hadamard rotation (kind 1), whose
/// parameter is log2 of its window, hadamard_min_log2 to hadamard_max_log2 (core/hadamard.hpp).
namespace transform_byte {
inline constexpr std::uint8_t none = 0;
inline constexpr std::uint8_t hadamard_kind = 1;
/// The byte of a randomized Hadamard rotation in windows of 2^log2_window elements.
constexpr std::uint8_t hadamard(unsigned log2_window) {
  return static_cast<std::uint8_t>(hadamard_kind << 4 | (log2_window & 0xfu));
}
/// Whether this build knows the transform `b` names (host and device validators).
COMMPRESS_HOST_DEVICE constexpr bool known(std::uint8_t b) {
  return b == none || (b >> 4 == hadamard_kind && (b & 0xfu) >= hadamard_min_log2 &&
                       (b & 0xfu) <= hadamard_max_log2);
}
} // namespace transform_byte

/// @brief The transform byte codec C writes: none, unless C is a transform adapter, which
/// specialises this (compress/rotated.hpp).
template <class C> struct codec_transform {
  static constexpr std::uint8_t byte(const C&) noexcept { return transform_byte::none; }
};

/// @brief Writes the header fields (bytes 0..59) and a zero checksum into `out[0..63]`.
inline void write_header(const payload_header& h, std::byte* out) {
  auto* p = reinterpret_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < 4; ++i)
    p[field::magic + i] = magic[i];
  p[field::version] = version;
  p[field::codec] = static_cast<unsigned char>(h.codec);
  p[field::element] = static_cast<unsigned char>(h.element);
  p[field::transform] = h.transform;
  detail::store_le<std::uint64_t>(p + field::count, h.count);
  detail::store_le<std::uint64_t>(p + field::body_bytes, h.body_bytes);
  detail::store_le<std::uint64_t>(p + field::seed, h.seed);
  detail::store_le<std::uint64_t>(p + field::step, h.step);
  detail::store_le<std::uint32_t>(p + field::tensor_id, h.tensor_id);
  for (std::size_t i = 0; i < 16; ++i)
    p[field::params + i] = h.params[i];
  detail::store_le<std::uint32_t>(p + field::crc, 0u);
}

/// @brief Reads the header fields without validating them.
inline payload_header read_header(const std::byte* in) {
  const auto* p = reinterpret_cast<const unsigned char*>(in);
  payload_header h;
  h.codec = static_cast<codec_id>(p[field::codec]);
  h.element = static_cast<dtype>(p[field::element]);
  h.count = detail::load_le<std::uint64_t>(p + field::count);
  h.body_bytes = detail::load_le<std::uint64_t>(p + field::body_bytes);
  h.seed = detail::load_le<std::uint64_t>(p + field::seed);
  h.step = detail::load_le<std::uint64_t>(p + field::step);
  h.tensor_id = detail::load_le<std::uint32_t>(p + field::tensor_id);
  for (std::size_t i = 0; i < 16; ++i)
    h.params[i] = p[field::params + i];
  h.transform = p[field::transform];
  return h;
}

/// Continues `crc` over the little-endian bytes of one body chunk's CRC32C.
inline std::uint32_t chain_chunk_crc(std::uint32_t crc, std::uint32_t chunk_crc) {
  unsigned char le[4];
  detail::store_le<std::uint32_t>(le, chunk_crc);
  return commpress::detail::crc32c_update(crc, le, 4);
}

/// Continues `crc` over the little-endian CRC32C of each body chunk in [first, last) (the
/// last chunk of the body may be shorter than checksum_chunk_bytes).
inline std::uint32_t chain_chunk_crcs(std::uint32_t crc, const std::byte* body,
                                      std::size_t body_bytes, std::size_t first, std::size_t last) {
  const auto add = [&crc](std::uint32_t chunk_crc) { crc = chain_chunk_crc(crc, chunk_crc); };
  std::size_t off = first * checksum_chunk_bytes;
  const std::size_t end = std::min(last * checksum_chunk_bytes, body_bytes);
  // Chunks are independent: three at a time keep three CRC chains in flight.
  for (; off + 3 * checksum_chunk_bytes <= end; off += 3 * checksum_chunk_bytes) {
    std::uint32_t three[3];
    commpress::detail::crc32c_x3(body + off, body + off + checksum_chunk_bytes,
                                 body + off + 2 * checksum_chunk_bytes, checksum_chunk_bytes,
                                 three);
    for (std::uint32_t c : three)
      add(c);
  }
  for (; off < end; off += checksum_chunk_bytes)
    add(commpress::detail::crc32c(body + off, std::min(end - off, checksum_chunk_bytes)));
  return crc;
}

/// Chunks of a body of `body_bytes` bytes.
constexpr std::size_t checksum_chunks(std::size_t body_bytes) {
  return (body_bytes + checksum_chunk_bytes - 1) / checksum_chunk_bytes;
}

/// @brief The payload checksum: CRC32C of header bytes 0..59 followed by the little-endian
/// CRC32C of each 64 KiB chunk of the body (the last chunk may be shorter).
inline std::uint32_t payload_checksum(const std::byte* header, const std::byte* body,
                                      std::size_t body_bytes) {
  return chain_chunk_crcs(commpress::detail::crc32c(header, field::crc), body, body_bytes, 0,
                          checksum_chunks(body_bytes));
}

/// @brief The header of codec c's payload of n elements of `element` encoded with ctx (the CPU
/// and CUDA encoders write this one).
template <class C>
payload_header header_of(const C& c, const context& ctx, dtype element, std::uint64_t n) {
  payload_header h;
  h.codec = C::id;
  h.element = element;
  h.count = n;
  h.body_bytes = c.body_bytes(n);
  h.seed = ctx.seed;
  h.step = ctx.step;
  h.tensor_id = ctx.tensor_id;
  h.params = c.params();
  h.transform = codec_transform<C>::byte(c);
  return h;
}

/// @brief Stores a payload checksum at bytes 60..63.
inline void store_checksum(std::span<std::byte> payload, std::uint32_t crc) {
  detail::store_le<std::uint32_t>(reinterpret_cast<unsigned char*>(payload.data()) + field::crc,
                                  crc);
}

/// @brief Computes the checksum of a complete payload and stores it at bytes 60..63.
inline void seal(std::span<std::byte> payload, std::size_t body_bytes) {
  store_checksum(payload,
                 payload_checksum(payload.data(), payload.data() + header_bytes, body_bytes));
}

/// @brief Checks that `payload` is an intact commpress payload of any codec and returns its
/// header: size, magic, version, a known transform byte, dtype, and checksum.
/// @throws commpress::error (truncated, bad_magic, bad_version, corrupt, checksum_mismatch)
inline payload_header validate_envelope(std::span<const std::byte> payload) {
  constexpr const char* who = "payload";
  COMMPRESS_EXPECTS(payload.size() >= header_bytes, errc::truncated, who,
                    "payload of " + std::to_string(payload.size()) +
                        " bytes is shorter than the 64-byte header");
  const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
  COMMPRESS_EXPECTS(p[field::magic] == magic[0] && p[field::magic + 1] == magic[1] &&
                        p[field::magic + 2] == magic[2] && p[field::magic + 3] == magic[3],
                    errc::bad_magic, who, "bytes 0..3 are not \"CPRS\"");
  COMMPRESS_EXPECTS(p[field::version] == version, errc::bad_version, who,
                    "format version " + std::to_string(p[field::version]) +
                        " (this build reads version " + std::to_string(version) + ")");
  COMMPRESS_EXPECTS(transform_byte::known(p[field::transform]), errc::corrupt, who,
                    "unknown transform byte " + std::to_string(p[field::transform]));
  const payload_header h = read_header(payload.data());
  COMMPRESS_EXPECTS(h.body_bytes <= payload.size() - header_bytes, errc::truncated, who,
                    "header declares a body of " + std::to_string(h.body_bytes) +
                        " bytes but only " + std::to_string(payload.size() - header_bytes) +
                        " follow");
  const std::uint32_t stored = detail::load_le<std::uint32_t>(p + field::crc);
  const std::uint32_t actual =
      payload_checksum(payload.data(), payload.data() + header_bytes, h.body_bytes);
  COMMPRESS_EXPECTS(stored == actual, errc::checksum_mismatch, who,
                    "CRC32C differs: the payload was corrupted in transit");
  COMMPRESS_EXPECTS(dtype_bytes(h.element) != 0, errc::corrupt, who, "unknown element dtype");
  return h;
}

/// @brief validate_envelope, then checks that the payload was written by exactly this codec
/// configuration (and transform) for `count` elements with a body of `body_bytes`, or of at
/// most `body_bytes` where `variable_body` (a codec whose body length varies: its decoder checks
/// that the body ends where its stream does).
/// @throws commpress::error (the envelope errors, codec_mismatch, size_mismatch, corrupt)
inline payload_header validate(std::span<const std::byte> payload, codec_id codec,
                               const codec_params& params, std::uint8_t transform,
                               std::uint64_t count, std::uint64_t body_bytes,
                               bool variable_body = false) {
  constexpr const char* who = "payload";
  const payload_header h = validate_envelope(payload);
  COMMPRESS_EXPECTS(h.codec == codec, errc::codec_mismatch, who,
                    "written by codec " + std::to_string(static_cast<int>(h.codec)) +
                        ", decoded with codec " + std::to_string(static_cast<int>(codec)));
  COMMPRESS_EXPECTS(h.params == params, errc::codec_mismatch, who,
                    "the codec's configuration differs from the sender's");
  COMMPRESS_EXPECTS(h.transform == transform, errc::codec_mismatch, who,
                    "the payload's transform byte is " + std::to_string(h.transform) +
                        ", the decoder's " + std::to_string(transform) +
                        " (a rotated payload needs the same rotation to decode)");
  COMMPRESS_EXPECTS(h.count == count, errc::size_mismatch, who,
                    "payload holds " + std::to_string(h.count) + " elements, output has " +
                        std::to_string(count));
  COMMPRESS_EXPECTS(variable_body ? h.body_bytes <= body_bytes : h.body_bytes == body_bytes,
                    errc::corrupt, who,
                    "body length " + std::to_string(h.body_bytes) +
                        (variable_body ? " exceeds the largest, " : " is not the ") +
                        std::to_string(body_bytes) + ", this configuration writes");
  return h;
}

/// @brief A type that says whether its body varies in length (`variable_body()`): the
/// requirement of core/concepts.hpp's variable_body_codec, stated here, where validation needs it.
template <class C>
concept declares_variable_body = requires(const C& c) {
  { c.variable_body() }
  noexcept->std::same_as<bool>;
};

/// @brief validate for the payloads of codec configuration c (its id, parameters and
/// transform) holding `count` elements.
template <class C>
payload_header validate_for(std::span<const std::byte> payload, const C& c, std::uint64_t count) {
  bool variable_body = false;
  if constexpr (declares_variable_body<C>)
    variable_body = c.variable_body();
  return validate(payload, C::id, c.params(), codec_transform<C>::byte(c), count,
                  c.body_bytes(count), variable_body);
}

/// @brief Sets the body length of a header written by write_header (bytes 16..23), for a body
/// whose length is known once it is written; seal the payload after.
inline void store_body_bytes(std::span<std::byte> payload, std::uint64_t body_bytes) {
  detail::store_le<std::uint64_t>(
      reinterpret_cast<unsigned char*>(payload.data()) + field::body_bytes, body_bytes);
}

} // namespace format
} // namespace commpress
