// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Packing of 64 byte-sized codes of any width into the bit stream of format/bit_packing.hpp,
/// the part of the vector layer that is plain C++ for every instruction set: the vector
/// layers pack the widths 2, 4 and 8 in registers and hand the others to these loops.
///
/// A width B of 0 means "given at run time" (the `bits` argument): kernels instantiate the
/// widths they vectorize and share one instance for the rest.

#include <cstdint>

#include "commpress/core/config.hpp"

namespace commpress::cpu::simd {

/// The code width of a kernel instance: B, or `bits` when B is 0.
template <unsigned B> COMMPRESS_FORCEINLINE constexpr unsigned width(unsigned bits) {
  return B != 0 ? B : bits;
}

/// Packs the codes c[0 .. 8 groups) (each < 2^b) into groups * b bytes at out.
template <unsigned B>
COMMPRESS_FORCEINLINE void pack_bytes(const std::uint8_t* COMMPRESS_RESTRICT c, unsigned bits,
                                      unsigned char* COMMPRESS_RESTRICT out, unsigned groups = 8) {
  const unsigned b = width<B>(bits);
  for (unsigned g = 0; g < groups; ++g) {
    std::uint64_t w = 0;
    for (unsigned k = 0; k < 8; ++k)
      w |= static_cast<std::uint64_t>(c[8 * g + k]) << (k * b);
    for (unsigned j = 0; j < b; ++j)
      out[g * b + j] = static_cast<unsigned char>(w >> (8 * j));
  }
}

/// The 64 codes that pack_bytes<B> wrote at in.
template <unsigned B>
COMMPRESS_FORCEINLINE void unpack_bytes(const unsigned char* COMMPRESS_RESTRICT in, unsigned bits,
                                        std::uint8_t* COMMPRESS_RESTRICT c) {
  const unsigned b = width<B>(bits);
  const std::uint64_t mask = (std::uint64_t{1} << b) - 1u;
  for (unsigned g = 0; g < 8; ++g) {
    std::uint64_t w = 0;
    for (unsigned j = 0; j < b; ++j)
      w |= static_cast<std::uint64_t>(in[g * b + j]) << (8 * j);
    for (unsigned k = 0; k < 8; ++k)
      c[8 * g + k] = static_cast<std::uint8_t>((w >> (k * b)) & mask);
  }
}

} // namespace commpress::cpu::simd
