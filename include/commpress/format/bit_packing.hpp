// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Packing of b-bit codes (1 <= b <= 8) into bytes.
///
/// Layout (docs/wire-format.md): the codes form one little-endian bit stream. Code i occupies
/// stream bits [i*b, i*b + b), least significant bit first; stream bit j is bit (j % 8) of
/// byte j / 8. Eight codes therefore fill exactly b bytes, which is the unit both backends
/// pack: a CPU loop or a GPU thread handles whole groups of eight without sharing bytes. The
/// last group of a tensor whose length is not a multiple of 8 writes ceil(r*b/8) bytes, with
/// the unused high bits of its last byte zero.

#include <cstdint>

#include "commpress/core/config.hpp"

namespace commpress::detail {

/// Bytes taken by n codes of `bits` bits.
COMMPRESS_HOST_DEVICE constexpr std::uint64_t packed_bytes(std::uint64_t n, unsigned bits) {
  return (n * bits + 7u) / 8u;
}

/// Packs `count` (<= 8) codes into ceil(count*bits/8) bytes at `out`.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE void
pack_group(const std::uint32_t* codes, unsigned count, unsigned bits, unsigned char* out) {
  std::uint64_t word = 0;
  for (unsigned i = 0; i < count; ++i)
    word |= static_cast<std::uint64_t>(codes[i]) << (i * bits);
  const unsigned nbytes = (count * bits + 7u) / 8u;
  for (unsigned b = 0; b < nbytes; ++b)
    out[b] = static_cast<unsigned char>(word >> (8u * b));
}

/// Unpacks `count` (<= 8) codes of `bits` bits from ceil(count*bits/8) bytes at `in`.
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE void
unpack_group(const unsigned char* in, unsigned count, unsigned bits, std::uint32_t* codes) {
  const unsigned nbytes = (count * bits + 7u) / 8u;
  std::uint64_t word = 0;
  for (unsigned b = 0; b < nbytes; ++b)
    word |= static_cast<std::uint64_t>(in[b]) << (8u * b);
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1u;
  for (unsigned i = 0; i < count; ++i)
    codes[i] = static_cast<std::uint32_t>((word >> (i * bits)) & mask);
}

/// Code i of a packed stream (random access; used by decoders that visit single elements).
COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE std::uint32_t
unpack_one(const unsigned char* in, std::uint64_t i, unsigned bits) {
  const std::uint64_t bit = i * bits;
  const unsigned char* p = in + (bit >> 3);
  const unsigned shift = static_cast<unsigned>(bit & 7u);
  std::uint32_t v = p[0];
  if (shift + bits > 8u)
    v |= static_cast<std::uint32_t>(p[1]) << 8;
  return (v >> shift) & ((1u << bits) - 1u);
}

} // namespace commpress::detail
