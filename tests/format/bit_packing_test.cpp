// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"

namespace cp = commpress;
namespace cpd = commpress::detail;

TEST_SUITE("format") {
  TEST_CASE("bit_packing: codes of every width 1..8 round-trip for lengths not divisible by 8") {
    const auto key = cp::make_rng_key(5, 0);
    for (unsigned bits = 1; bits <= 8; ++bits) {
      for (std::uint64_t n : {0ull, 1ull, 7ull, 8ull, 9ull, 63ull, 1000003ull}) {
        std::vector<std::uint32_t> codes(n);
        for (std::uint64_t i = 0; i < n; ++i)
          codes[i] = cp::random_u32(key, bits, i) & ((1u << bits) - 1u);
        std::vector<unsigned char> packed(cpd::packed_bytes(n, bits), 0xAB);
        for (std::uint64_t g = 0; g < n; g += 8) {
          const unsigned count = static_cast<unsigned>(n - g < 8 ? n - g : 8);
          cpd::pack_group(codes.data() + g, count, bits, packed.data() + g / 8 * bits);
        }
        CHECK(packed.size() == (n * bits + 7) / 8);
        for (std::uint64_t g = 0; g < n; g += 8) {
          const unsigned count = static_cast<unsigned>(n - g < 8 ? n - g : 8);
          std::uint32_t out[8];
          cpd::unpack_group(packed.data() + g / 8 * bits, count, bits, out);
          for (unsigned i = 0; i < count; ++i)
            REQUIRE(out[i] == codes[g + i]);
        }
        for (std::uint64_t i = 0; i < n; ++i)
          REQUIRE(cpd::unpack_one(packed.data(), i, bits) == codes[i]);
        if (n % 8 != 0 && (n * bits) % 8 != 0) // unused high bits of the last byte are zero
          CHECK((packed.back() >> ((n * bits) % 8)) == 0);
      }
    }
  }

  TEST_CASE("bit_packing: the documented layout is LSB-first little-endian") {
    const std::uint32_t codes[8] = {1, 2, 3, 0, 1, 2, 3, 0}; // 2-bit codes
    unsigned char out[2];
    cpd::pack_group(codes, 8, 2, out);
    CHECK(out[0] == 0b00111001); // codes 0..3 from the least significant bits up
    CHECK(out[1] == 0b00111001);
    const std::uint32_t nib[2] = {0xA, 0x5};
    unsigned char one;
    cpd::pack_group(nib, 2, 4, &one);
    CHECK(one == 0x5A); // element 0 in the low nibble
  }
}
