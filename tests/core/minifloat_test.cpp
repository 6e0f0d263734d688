// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The narrow float formats of core/minifloat.hpp against a reference written from their
// definitions (OCP OFP8 rev. 1.0 and OCP MX v1.0), not from the code: every code's value in
// double arithmetic, and the conversion from f32 as a search for the nearest value (ties to the
// code with an even mantissa, saturating). Checked over all codes, at every rounding boundary
// (each midpoint and the floats on either side of it), and over a sweep of f32 bit patterns.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/core/minifloat.hpp"

namespace cp = commpress;

namespace {

struct format_case {
  cp::minifloat f;
  int e, m, bias;
  bool has_inf;      // E5M2: S.11111.00
  std::uint32_t nan; // the code a NaN converts to
  double largest;    // largest finite value
};

constexpr format_case formats[] = {
    {cp::minifloat::e4m3, 4, 3, 7, false, 0x7f, 448.0},
    {cp::minifloat::e5m2, 5, 2, 15, true, 0x7e, 57344.0},
    {cp::minifloat::e2m1, 2, 1, 1, false, 0x0, 6.0},
};

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Whether code q of the format is a NaN, by the definitions.
bool is_nan_code(const format_case& fc, std::uint32_t q) {
  const std::uint32_t mag = q & ((1u << (fc.e + fc.m)) - 1u);
  const std::uint32_t e_field = mag >> fc.m, m_field = mag & ((1u << fc.m) - 1u);
  const std::uint32_t e_max = (1u << fc.e) - 1u;
  if (fc.f == cp::minifloat::e4m3)
    return e_field == e_max && m_field == ((1u << fc.m) - 1u);
  if (fc.has_inf)
    return e_field == e_max && m_field != 0;
  return false;
}
bool is_inf_code(const format_case& fc, std::uint32_t q) {
  const std::uint32_t mag = q & ((1u << (fc.e + fc.m)) - 1u);
  return fc.has_inf && mag == (((1u << fc.e) - 1u) << fc.m);
}

/// The value of code q from the definition, in double.
double reference_value(const format_case& fc, std::uint32_t q) {
  const std::uint32_t mag = q & ((1u << (fc.e + fc.m)) - 1u);
  const bool negative = (q >> (fc.e + fc.m)) & 1u;
  const int e_field = static_cast<int>(mag >> fc.m);
  const double frac = static_cast<double>(mag & ((1u << fc.m) - 1u)) / (1 << fc.m);
  const double v =
      e_field == 0 ? std::ldexp(frac, 1 - fc.bias) : std::ldexp(1.0 + frac, e_field - fc.bias);
  return negative ? -v : v;
}

/// The finite non-negative codes, in increasing value.
std::vector<std::uint32_t> ladder(const format_case& fc) {
  std::vector<std::uint32_t> codes;
  for (std::uint32_t q = 0; q < (1u << (fc.e + fc.m)); ++q)
    if (!is_nan_code(fc, q) && !is_inf_code(fc, q))
      codes.push_back(q);
  return codes; // codes of non-negative values increase with their value
}

/// x converted by the definition: the nearest finite value, ties to the even mantissa (the code
/// with its last bit clear), saturating at the largest finite value; the sign kept.
std::uint32_t reference_convert(const format_case& fc, float x) {
  if (std::isnan(x))
    return fc.nan;
  const std::uint32_t sign = std::signbit(x) ? 1u << (fc.e + fc.m) : 0u;
  const double a = std::fabs(static_cast<double>(x));
  const std::vector<std::uint32_t> codes = ladder(fc);
  if (a >= fc.largest)
    return sign | codes.back();
  std::uint32_t best = codes[0];
  for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
    const double lo = reference_value(fc, codes[i]), hi = reference_value(fc, codes[i + 1]);
    if (a >= lo && a <= hi) {
      const double dlo = a - lo, dhi = hi - a;
      if (dlo < dhi)
        best = codes[i];
      else if (dhi < dlo)
        best = codes[i + 1];
      else
        best = (codes[i] & 1u) == 0 ? codes[i] : codes[i + 1];
      break;
    }
  }
  return sign | best;
}

} // namespace

TEST_SUITE("core") {
  TEST_CASE("minifloat: every code decodes to its defined value; NaN and Inf codes as defined") {
    for (const format_case& fc : formats) {
      CAPTURE(static_cast<int>(fc.f));
      CHECK(cp::minifloat_bits(fc.f) == static_cast<unsigned>(1 + fc.e + fc.m));
      for (std::uint32_t q = 0; q < (1u << (1 + fc.e + fc.m)); ++q) {
        CAPTURE(q);
        const float v = cp::from_minifloat(fc.f, q);
        if (is_nan_code(fc, q)) {
          CHECK(bits(v) == 0x7fc00000u);
        } else if (is_inf_code(fc, q)) {
          CHECK(std::isinf(v));
          CHECK(std::signbit(v) == ((q >> (fc.e + fc.m)) & 1u));
        } else {
          CHECK(static_cast<double>(v) == reference_value(fc, q));
          CHECK(std::signbit(v) == ((q >> (fc.e + fc.m)) & 1u)); // -0 included
        }
      }
      CHECK(static_cast<double>(cp::from_minifloat(fc.f, ladder(fc).back())) == fc.largest);
    }
  }

  TEST_CASE("minifloat: every finite code converts back to itself, -0 included") {
    for (const format_case& fc : formats) {
      CAPTURE(static_cast<int>(fc.f));
      for (std::uint32_t q = 0; q < (1u << (1 + fc.e + fc.m)); ++q) {
        if (is_nan_code(fc, q) || is_inf_code(fc, q))
          continue;
        CAPTURE(q);
        CHECK(cp::to_minifloat(fc.f, cp::from_minifloat(fc.f, q)) == q);
      }
    }
  }

  TEST_CASE("minifloat: at every rounding boundary, ties go to the even mantissa") {
    for (const format_case& fc : formats) {
      CAPTURE(static_cast<int>(fc.f));
      const std::vector<std::uint32_t> codes = ladder(fc);
      int ties = 0;
      for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
        const float lo = static_cast<float>(reference_value(fc, codes[i]));
        const float hi = static_cast<float>(reference_value(fc, codes[i + 1]));
        const float mid = 0.5f * (lo + hi); // exact: both have few significant bits
        REQUIRE(static_cast<double>(mid) == 0.5 * (static_cast<double>(lo) + hi));
        const std::uint32_t even = (codes[i] & 1u) == 0 ? codes[i] : codes[i + 1];
        for (const float s : {1.0f, -1.0f}) {
          const std::uint32_t sign = s < 0 ? 1u << (fc.e + fc.m) : 0u;
          CAPTURE(mid);
          CHECK(cp::to_minifloat(fc.f, s * mid) == (sign | even));
          CHECK(cp::to_minifloat(fc.f, s * std::nextafter(mid, 0.0f)) == (sign | codes[i]));
          CHECK(cp::to_minifloat(fc.f, s * std::nextafter(mid, 1e30f)) == (sign | codes[i + 1]));
          CHECK(cp::to_minifloat(fc.f, s * std::nextafter(mid, 0.0f)) ==
                reference_convert(fc, s * std::nextafter(mid, 0.0f)));
        }
        ++ties;
      }
      CHECK(ties == static_cast<int>(codes.size()) - 1);
    }
  }

  TEST_CASE("minifloat: values at and past the largest finite value saturate; NaN has its code") {
    const float inf = std::numeric_limits<float>::infinity();
    for (const format_case& fc : formats) {
      CAPTURE(static_cast<int>(fc.f));
      const std::uint32_t top = ladder(fc).back();
      const std::uint32_t neg = 1u << (fc.e + fc.m);
      const auto largest = static_cast<float>(fc.largest);
      for (const float x : {largest, std::nextafter(largest, inf), 2.0f * largest, 3.4e38f, inf}) {
        CAPTURE(x);
        CHECK(cp::to_minifloat(fc.f, x) == top);
        CHECK(cp::to_minifloat(fc.f, -x) == (neg | top));
      }
      CHECK(cp::to_minifloat(fc.f, std::numeric_limits<float>::quiet_NaN()) == fc.nan);
      CHECK(cp::to_minifloat(fc.f, -std::numeric_limits<float>::quiet_NaN()) == fc.nan);
      // f32 subnormals and the smallest normal are far below any code but zero.
      for (const float x : {1e-45f, 1e-40f, std::numeric_limits<float>::min()}) {
        CHECK(cp::to_minifloat(fc.f, x) == 0u);
        CHECK(cp::to_minifloat(fc.f, -x) == neg);
      }
    }
  }

  TEST_CASE("minifloat: a sweep of f32 bit patterns converts as the definition says") {
    for (const format_case& fc : formats) {
      CAPTURE(static_cast<int>(fc.f));
      int checked = 0;
      // Every 2^15 + 3rd positive pattern, from the denormals to NaN, each with both signs.
      for (std::uint64_t u = 0; u < 0x7f800000ull; u += (1u << 15) + 3u) {
        const float x = from_bits(static_cast<std::uint32_t>(u));
        CAPTURE(x);
        CHECK(cp::to_minifloat(fc.f, x) == reference_convert(fc, x));
        CHECK(cp::to_minifloat(fc.f, -x) == reference_convert(fc, -x));
        ++checked;
      }
      CHECK(checked > 60000);
    }
  }

  TEST_CASE("minifloat: E8M0 codes are the powers of two 2^(q - 127); 255 is NaN") {
    for (std::uint32_t q = 0; q < 255; ++q) {
      CAPTURE(q);
      CHECK(static_cast<double>(cp::from_e8m0(q)) == std::ldexp(1.0, static_cast<int>(q) - 127));
    }
    CHECK(bits(cp::from_e8m0(255)) == 0x7fc00000u);
  }

  TEST_CASE("minifloat: e8m0_at_least rounds up to a power of two and clamps") {
    // The smallest power of two at or above r, by the definition.
    const auto reference = [](float r, int max_exponent) -> std::uint32_t {
      int k = -127;
      while (k < max_exponent && std::ldexp(1.0, k) < static_cast<double>(r))
        ++k;
      return static_cast<std::uint32_t>(k + 127);
    };
    for (const float r : {0.0f, 1e-45f, 5e-39f, 5.9e-39f, 1.1754942e-38f, 1.17549435e-38f, 1.0f,
                          std::nextafter(1.0f, 2.0f), std::nextafter(1.0f, 0.0f), 0.75f, 3.0f, 4.0f,
                          1e20f, 3.4e38f}) {
      CAPTURE(r);
      CHECK(cp::e8m0_at_least(r, 119) == reference(r, 119));
      CHECK(cp::e8m0_at_least(r, 125) == reference(r, 125));
    }
    for (int k = -127; k <= 119; ++k) { // exact powers of two keep their exponent
      const float r = static_cast<float>(std::ldexp(1.0, k));
      CHECK(cp::e8m0_at_least(r, 119) == static_cast<std::uint32_t>(k + 127));
    }
    CHECK(cp::e8m0_at_least(std::numeric_limits<float>::infinity(), 119) == 119u + 127u);
    CHECK(cp::e8m0_at_least(std::numeric_limits<float>::quiet_NaN(), 119) == 255u);
  }
}
