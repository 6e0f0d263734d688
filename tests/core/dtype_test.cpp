// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "commpress/core/dtype.hpp"

namespace cp = commpress;

namespace {
// fp64 reference: the nearest value of a binary format with `mant` fraction bits and minimum
// normal exponent `emin`, ties to even, computed independently of the bit tricks under test.
double round_to_format(double x, int mant, int emin) {
  if (x == 0)
    return x;
  int e;
  std::frexp(std::fabs(x), &e); // |x| = f * 2^e, f in [0.5, 1)
  int exp = e - 1;
  if (exp < emin)
    exp = emin; // subnormal range keeps the minimum exponent's spacing
  const double ulp = std::ldexp(1.0, exp - mant);
  return std::nearbyint(x / ulp) * ulp; // default rounding mode: ties to even
}
} // namespace

TEST_SUITE("core") {
  TEST_CASE("dtype: bfloat16 conversion rounds to nearest even") {
    for (std::uint32_t u = 0; u < 0xffffffffu - 9973u; u += 9973u) {
      const float f = cp::detail::bits_to_float(u);
      if (!std::isfinite(f))
        continue;
      const double ref = round_to_format(f, 7, -126);
      const float got = cp::to_float(cp::to_bfloat16(f));
      if (std::fabs(ref) >= 3.3961775292304e38) { // rounds past the largest finite bfloat16
        CHECK(std::isinf(got));
        continue;
      }
      REQUIRE_MESSAGE(static_cast<double>(got) == ref, "input bits " << u);
    }
  }

  TEST_CASE("dtype: half conversion rounds to nearest even, subnormals included") {
    for (std::uint32_t u = 0; u < 0xffffffffu - 7919u; u += 7919u) {
      const float f = cp::detail::bits_to_float(u);
      if (!std::isfinite(f))
        continue;
      const double ref = round_to_format(f, 10, -14);
      const float got = cp::to_float(cp::to_half(f));
      if (std::fabs(ref) >= 65520.0) {
        CHECK(std::isinf(got));
        continue;
      }
      REQUIRE_MESSAGE(static_cast<double>(got) == ref, "input bits " << u);
    }
  }

  TEST_CASE("dtype: every half value survives a round trip through float") {
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
      const cp::half v{static_cast<std::uint16_t>(h)};
      const float f = cp::to_float(v);
      if (std::isnan(f)) {
        CHECK(cp::to_half(f).bits == 0x7fffu);
        continue;
      }
      CHECK(cp::to_half(f).bits == h);
    }
  }

  TEST_CASE("dtype: ties, overflow and NaN follow the CUDA intrinsics") {
    CHECK(cp::to_half(65504.0f).bits == 0x7bffu);
    CHECK(cp::to_half(65519.99f).bits == 0x7bffu);
    CHECK(cp::to_half(65520.0f).bits == 0x7c00u);
    CHECK(cp::to_half(std::ldexp(1.0f, -25)).bits == 0x0000u); // tie to even: zero
    CHECK(cp::to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits == 0x0001u);
    CHECK(cp::to_half(-0.0f).bits == 0x8000u);
    CHECK(cp::to_half(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fffu);
    CHECK(cp::to_bfloat16(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fffu);
    CHECK(cp::to_bfloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80u);
    CHECK(cp::to_bfloat16(cp::detail::bits_to_float(0x3f808000u)).bits == 0x3f80u); // tie, even
    CHECK(cp::to_bfloat16(cp::detail::bits_to_float(0x3f818000u)).bits == 0x3f82u); // tie, up
  }
}
