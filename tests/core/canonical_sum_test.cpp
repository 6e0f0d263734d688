// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/rng.hpp"

namespace cp = commpress;

namespace {
std::vector<double> sample(std::size_t m) {
  std::vector<double> v(m);
  const auto key = cp::make_rng_key(17, 4);
  for (std::size_t i = 0; i < m; ++i) // mixed signs and magnitudes, so the order matters
    v[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.3) *
           std::ldexp(1.0, static_cast<int>(i % 41) - 20);
  return v;
}

// The definition, written out independently: 32 lane sums, then the w = 16, 8, 4, 2, 1 tree.
double lanes_then_tree(const double* v, std::size_t m) {
  std::vector<double> lane(32, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    lane[i % 32] = lane[i % 32] + v[i];
  for (std::size_t w : {16u, 8u, 4u, 2u, 1u})
    for (std::size_t j = 0; j < w; ++j)
      lane[j] = lane[j] + lane[j + w];
  return lane[0];
}
} // namespace

TEST_SUITE("core") {
  TEST_CASE("canonical_sum: follows the 32-lane, fixed-tree order bit for bit") {
    const auto v = sample(100000);
    for (std::size_t m : {0u, 1u, 31u, 32u, 33u, 1000u, 100000u}) {
      CAPTURE(m);
      CHECK(cp::canonical_sum(m, [&](std::uint64_t i) { return v[i]; }) ==
            lanes_then_tree(v.data(), m));
    }
  }

  TEST_CASE("canonical_sum: differs from a sequential sum where the order changes rounding") {
    // 2^53 + 1 rounds back to 2^53, but lane 1 collects 1 + 1 = 2 before meeting lane 0.
    std::vector<double> v(34, 0.0);
    v[0] = std::ldexp(1.0, 53);
    v[1] = 1.0;
    v[33] = 1.0;
    double sequential = 0.0;
    for (double x : v)
      sequential += x;
    CHECK(sequential == std::ldexp(1.0, 53));
    CHECK(cp::canonical_sum(v.size(), [&](std::uint64_t i) { return v[i]; }) ==
          std::ldexp(1.0, 53) + 2.0);
  }

  TEST_CASE("canonical_chunked_sum: sums chunk sums canonically, one chunk being its own sum") {
    const std::size_t m = 3 * 32768 + 5;
    const auto v = sample(m);
    auto term = [&](std::uint64_t i) { return v[i]; };
    std::vector<double> chunk_sums;
    for (std::size_t first = 0; first < m; first += 32768)
      chunk_sums.push_back(
          lanes_then_tree(v.data() + first, std::min<std::size_t>(32768, m - first)));
    CHECK(chunk_sums.size() == 4);
    CHECK(cp::canonical_chunked_sum(m, term) ==
          lanes_then_tree(chunk_sums.data(), chunk_sums.size()));
    for (std::size_t small : {0u, 1u, 777u, 32768u})
      CHECK(cp::canonical_chunked_sum(small, term) == lanes_then_tree(v.data(), small));
  }

  TEST_CASE("canonical_chunked_sum: equals the exact sum up to rounding") {
    const std::size_t m = 200000;
    const auto v = sample(m);
    long double exact = 0.0L;
    long double magnitude = 0.0L;
    for (double x : v) {
      exact += x;
      magnitude += std::fabs(x);
    }
    const double got = cp::canonical_chunked_sum(m, [&](std::uint64_t i) { return v[i]; });
    // A term passes through at most 32768/32 lane additions + 5 tree levels in its chunk, then
    // ceil(7/32) + 5 more across chunks; each rounds by at most 2^-53 of a partial sum.
    const long double bound = magnitude * (1024 + 5 + 1 + 5) * std::ldexp(1.0L, -53);
    CHECK(std::fabs(static_cast<long double>(got) - exact) <= bound);
    CHECK(got != 0.0);
  }
}
