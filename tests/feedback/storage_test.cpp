// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// stored_rows: each storage format against its definition written out element by element
// (feedback/storage.hpp), whole rows and block ranges, and the range precondition.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "commpress/core/error.hpp"
#include "commpress/feedback/storage.hpp"

namespace cp = commpress;

namespace {

/// store_int's definition: scale = max|x| / qmax, x' = q * scale with the integer code
/// q = round_half_even(x / scale), per block of `block` elements (0 where the block is all zero).
std::vector<float> int_storage_of(const std::vector<float>& x, std::size_t block, float qmax) {
  std::vector<float> out(x.size());
  for (std::size_t lo = 0; lo < x.size(); lo += block) {
    const std::size_t hi = std::min(x.size(), lo + block);
    float amax = 0.0f;
    for (std::size_t j = lo; j < hi; ++j)
      amax = std::fmax(amax, std::fabs(x[j]));
    const float scale = amax / qmax;
    for (std::size_t j = lo; j < hi; ++j)
      out[j] = scale > 0.0f
                   ? static_cast<float>(static_cast<int>(std::nearbyint(x[j] / scale))) * scale
                   : 0.0f; // an integer code: -0 is stored as 0
  }
  return out;
}

std::vector<float> test_row(std::size_t n, unsigned salt) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = std::ldexp(static_cast<float>(static_cast<int>((i * 2654435761u + salt) % 2001) - 1000),
                      static_cast<int>(i % 7) - 12);
  return x;
}

template <class S> void check_int_storage(float qmax) {
  constexpr std::size_t block = S::block;
  // Whole blocks, a partial last block, an odd row (the 4-bit format's lone last nibble), and
  // rows of more blocks than store_range forms scales for at once (8).
  for (std::size_t n : {std::size_t{1}, block, 3 * block, 3 * block + 5, 2 * block + 1,
                        11 * block + 37, 16 * block}) {
    CAPTURE(n);
    std::vector<float> x = test_row(n, 7);
    if (n > block) // an all-zero block and a denormal
      for (std::size_t j = block; j < 2 * block; ++j)
        x[j] = j == block + 3 ? 1e-40f : 0.0f;
    const std::vector<float> expected = int_storage_of(x, block, qmax);
    cp::stored_rows<S> rows(2, n);
    rows.store_row(1, x.data());
    std::vector<float> back(n);
    rows.load_row(1, back.data());
    std::size_t mismatches = 0;
    for (std::size_t j = 0; j < n; ++j)
      mismatches += std::memcmp(&back[j], &expected[j], 4) != 0 ? 1u : 0u;
    CHECK(mismatches == 0);

    // The same row stored block range by block range reads back the same, by range too.
    cp::stored_rows<S> ranged(2, n);
    for (std::size_t lo = 0; lo < n; lo += 9 * block) {
      const std::size_t hi = std::min(n, lo + 9 * block);
      ranged.store_range(1, lo, hi, x.data() + lo);
    }
    CHECK(ranged == rows);
    std::vector<float> part(block);
    if (n > block) {
      ranged.load_range(1, block, std::min(n, 2 * block), part.data());
      CHECK(std::memcmp(part.data(), back.data() + block, 4 * (std::min(n, 2 * block) - block)) ==
            0);
    }
  }
  {
    // Quotients exactly halfway, x / scale = k + 0.5 with scale = 3: ties to even, where a
    // product with the rounded 1 / 3 would round up.
    std::vector<float> ties(block, 0.0f);
    ties[0] = 3.0f * qmax;
    for (std::size_t j = 1; j < 8; ++j)
      ties[j] = 3.0f * (static_cast<float>(j % 3) + 0.5f) * (j % 2 != 0 ? 1.0f : -1.0f);
    cp::stored_rows<S> rows(1, block);
    rows.store_row(0, ties.data());
    std::vector<float> back(block);
    rows.load_row(0, back.data());
    CHECK(back == int_storage_of(ties, block, qmax));
    CHECK(back[1] == 3.0f * 2.0f);  // 1.5 -> 2
    CHECK(back[2] == -3.0f * 2.0f); // -2.5 -> -2
  }
  {
    // Exact ties whose product with the rounded 1 / scale falls just below the half-integer:
    // the quotient rounds to even, one up, so the block must take the division (int_codes
    // reports how near a tie its products came). At the start, middle and end of a block, and
    // in the scalar tail of a short last block (40 = 32 + 8 elements).
    const float amax = qmax == 127.0f ? 0.25f : 0.75f;
    const float scale = amax / qmax;
    const float k = qmax == 127.0f ? 87.0f : 1.0f; // k + 1 is even
    const float x = (k + 0.5f) * scale;
    REQUIRE(x / scale == k + 0.5f);
    REQUIRE(x * (1.0f / scale) < k + 0.5f);
    std::vector<float> near(block + 40, 0.0f);
    near[0] = amax;
    near[block] = -amax;
    for (std::size_t j : {std::size_t{1}, block / 2, block - 1, block + 37})
      near[j] = j % 2 != 0 ? x : -x;
    cp::stored_rows<S> rows(1, near.size());
    rows.store_row(0, near.data());
    std::vector<float> back(near.size());
    rows.load_row(0, back.data());
    CHECK(back == int_storage_of(near, block, qmax));
    CHECK(back[1] == (k + 1.0f) * scale);
    CHECK(back[block - 1] == (k + 1.0f) * scale);
    CHECK(back[block + 37] == (k + 1.0f) * scale);
  }
  {
    // A loss-scale change by an infinite factor: the scales become infinite (or NaN for an
    // all-zero block) and each value is mul_rn(code, scale), so 0 * inf is the canonical NaN.
    std::vector<float> x = test_row(2 * block, 5);
    std::fill(x.begin() + block, x.end(), 0.0f);
    cp::stored_rows<S> rows(1, 2 * block);
    rows.store_row(0, x.data());
    rows.scale_by(INFINITY);
    std::vector<float> back(2 * block);
    rows.load_row(0, back.data());
    const std::vector<float> finite = int_storage_of(x, block, qmax);
    std::size_t mismatches = 0;
    for (std::size_t j = 0; j < 2 * block; ++j) {
      std::uint32_t got;
      std::memcpy(&got, &back[j], 4);
      const std::uint32_t expected = finite[j] > 0.0f   ? 0x7f800000u  // +inf
                                     : finite[j] < 0.0f ? 0xff800000u  // -inf
                                                        : 0x7fc00000u; // canonical NaN
      mismatches += got != expected ? 1u : 0u;
    }
    CHECK(mismatches == 0);
  }
  // A range must cover whole blocks; nothing is written when it does not.
  cp::stored_rows<S> rows(1, 3 * block);
  const std::vector<float> x = test_row(3 * block, 3);
  rows.store_row(0, x.data());
  const cp::stored_rows<S> before = rows;
  CHECK_THROWS_AS(rows.store_range(0, 1, block, x.data()), cp::error);
  CHECK_THROWS_AS(rows.store_range(0, 0, block + 1, x.data()), cp::error);
  std::vector<float> out(3 * block);
  CHECK_THROWS_AS(rows.load_range(0, block, 4 * block, out.data()), cp::error);
  CHECK(rows == before);
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE("stored_rows: store_int8 keeps round_half_even(x / scale) per block, scale = "
            "max|x| / 127") {
    check_int_storage<cp::store_int8>(127.0f);
  }
  TEST_CASE("stored_rows: store_int4 keeps nibbles of round_half_even(x / scale), scale = "
            "max|x| / 7") {
    check_int_storage<cp::store_int4>(7.0f);
  }
  TEST_CASE("stored_rows: store_f32 is exact and store_bf16 rounds, by row and by range") {
    const std::vector<float> x = test_row(37, 1);
    cp::stored_rows<cp::store_f32> f(1, x.size());
    f.store_range(0, 0, 20, x.data());
    f.store_range(0, 20, x.size(), x.data() + 20);
    std::vector<float> back(x.size());
    f.load_row(0, back.data());
    CHECK(std::memcmp(back.data(), x.data(), 4 * x.size()) == 0);
    cp::stored_rows<cp::store_bf16> b(1, x.size());
    b.store_row(0, x.data());
    b.load_range(0, 5, 9, back.data());
    for (std::size_t j = 5; j < 9; ++j)
      CHECK(back[j - 5] == cp::to_float(cp::to_bfloat16(x[j])));
  }
}
