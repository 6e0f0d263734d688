// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "commpress/core/rng.hpp"

namespace cp = commpress;

TEST_SUITE("core") {
  TEST_CASE("rng: Philox4x32-10 matches the Random123 known-answer vectors") {
    // Random123 kat_vectors: philox4x32 10 rounds.
    const auto z = cp::philox4x32_10(0, 0, 0, 0, cp::rng_key{0, 0});
    CHECK(z.v[0] == 0x6627e8d5u);
    CHECK(z.v[1] == 0xe169c58du);
    CHECK(z.v[2] == 0xbc57ac4cu);
    CHECK(z.v[3] == 0x9b00dbd8u);
    const auto f = cp::philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                                     cp::rng_key{0xffffffffu, 0xffffffffu});
    CHECK(f.v[0] == 0x408f276du);
    CHECK(f.v[1] == 0x41c83b0eu);
    CHECK(f.v[2] == 0xa20bc7c6u);
    CHECK(f.v[3] == 0x6d5451fdu);
    const auto p = cp::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u,
                                     cp::rng_key{0xa4093822u, 0x299f31d0u});
    CHECK(p.v[0] == 0xd16cfe09u);
    CHECK(p.v[1] == 0x94fdccebu);
    CHECK(p.v[2] == 0x5001e420u);
    CHECK(p.v[3] == 0x24126ea1u);
  }

  TEST_CASE("rng: streams depend on seed, tensor id, step and index") {
    const auto k = cp::make_rng_key(42, 7);
    CHECK(k == cp::make_rng_key(42, 7));
    CHECK_FALSE(k == cp::make_rng_key(42, 8));
    CHECK_FALSE(k == cp::make_rng_key(43, 7));
    CHECK(cp::random_u32(k, 3, 10) == cp::random_u32(k, 3, 10));
    CHECK(cp::random_u32(k, 3, 10) != cp::random_u32(k, 4, 10));
    CHECK(cp::random_u32(k, 3, 10) != cp::random_u32(k, 3, 11));
    CHECK(cp::random_u32(k, 3, 10) == cp::random_block(k, 3, 2).v[2]);
  }

  TEST_CASE("rng: uniform floats are in [0, 1) with mean and variance of U(0,1)") {
    const auto k = cp::make_rng_key(1, 0);
    constexpr int n = 200000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; ++i) {
      const float u = cp::uniform_from_bits(cp::random_u32(k, 0, static_cast<std::uint64_t>(i)));
      REQUIRE(u >= 0.0f);
      REQUIRE(u < 1.0f);
      sum += u;
      sum2 += static_cast<double>(u) * u;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    CHECK(std::fabs(mean - 0.5) < 4 * std::sqrt(1.0 / 12 / n));
    CHECK(std::fabs(var - 1.0 / 12) < 0.002);
    CHECK(cp::uniform_from_bits(0xffffffffu) < 1.0f);
    CHECK(cp::uniform_from_bits(0u) == 0.0f);
  }
}
