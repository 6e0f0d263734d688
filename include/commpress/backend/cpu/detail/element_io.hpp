// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Little-endian loads and stores of wire words for the CPU backend.

#include <bit>
#include <cstdint>
#include <cstring>

namespace commpress::cpu::detail {

// The wire format is little-endian; this backend writes words with memcpy, which is only the
// right byte order on little-endian hosts (x86-64, AArch64 Linux).
static_assert(std::endian::native == std::endian::little,
              "commpress: the CPU backend assumes a little-endian host");

template <class U> inline U load_word(const unsigned char* p) {
  U v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class U> inline void store_word(unsigned char* p, U v) {
  std::memcpy(p, &v, sizeof v);
}

} // namespace commpress::cpu::detail
