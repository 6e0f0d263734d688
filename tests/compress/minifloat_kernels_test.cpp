// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The vector conversion to E4M3, E5M2 and E2M1 codes (backend/cpu/detail/minifloat_kernels.hpp)
// against core/minifloat.hpp's scalar one: every exponent, with the mantissas at and around each
// format's rounding boundaries, both signs, zeros, denormals and infinities (NaN is the caller's:
// the kit codes a non-finite element as 0); and the packed codes of 16 to 64 scaled elements,
// NaN and Inf among them, against the scalar codes written one by one.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/detail/minifloat_kernels.hpp"
#include "commpress/core/rng.hpp"

namespace cp = commpress;
namespace cd = commpress::cpu::detail;
namespace simd = commpress::cpu::simd;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Bit patterns at and around every rounding boundary of a format with M mantissa bits (every
/// code of every f32 exponent's binade), both signs, infinities; no NaN. Padded with zeros to a
/// whole number of vectors.
std::vector<float> boundary_inputs(unsigned mantissa_bits) {
  const std::uint32_t half = 1u << (22u - mantissa_bits); // half a code's spacing, in f32 ulps
  std::vector<float> x;
  for (std::uint32_t e = 0; e < 256; ++e)
    for (std::uint32_t step = 0; step < (1u << mantissa_bits); ++step)
      for (std::uint32_t delta : {0u, 1u, half - 1u, half, half + 1u, 2 * half - 1u}) {
        const std::uint32_t mantissa = step * 2 * half + delta;
        if (e < 255 || mantissa == 0)
          for (std::uint32_t sign : {0u, 0x80000000u})
            x.push_back(from_bits(sign | (e << 23) | mantissa));
      }
  x.resize((x.size() + simd::lanes - 1) / simd::lanes * simd::lanes, 0.0f);
  return x;
}

template <cp::minifloat F> std::size_t mismatches(const std::vector<float>& x) {
  REQUIRE(x.size() % simd::lanes == 0);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i + simd::lanes <= x.size(); i += simd::lanes) {
    std::uint32_t got[simd::lanes];
    simd::store(got, cd::to_minifloat_lanes<F>(simd::load(x.data() + i)));
    for (std::size_t j = 0; j < simd::lanes; ++j) {
      const std::uint32_t want = cp::to_minifloat(F, x[i + j]);
      if (got[j] != want) {
        CAPTURE(x[i + j]);
        CHECK(got[j] == want);
        ++wrong;
      }
    }
  }
  return wrong;
}

template <cp::minifloat F> std::size_t packed_mismatches(std::uint32_t stream, std::size_t count) {
  std::size_t wrong = 0;
  constexpr float scales[] = {1.0f, 0.25f, 3.0e-5f, 6.0e4f, 0.0f};
  for (std::size_t first = 0; first < 5; ++first) { // a different scale per vector
    float k[simd::vectors_per_64];
    for (std::size_t q = 0; q < simd::vectors_per_64; ++q)
      k[q] = scales[(first + q) % 5];
    float x[64];
    for (std::size_t j = 0; j < 64; ++j) {
      const std::uint32_t w = cp::random_u32(cp::make_rng_key(stream, 1), 0, j);
      x[j] = static_cast<float>(static_cast<std::int32_t>(w)) * 0x1p-27f;
    }
    x[5] = std::numeric_limits<float>::quiet_NaN(); // non-finite elements count as 0
    x[17] = -std::numeric_limits<float>::infinity();
    x[40] = -0.0f;
    constexpr unsigned bits = cp::minifloat_bits(F);
    unsigned char got[8 * bits], want[8 * bits] = {};
    cd::minifloat_codes<F>(x, count, k, got);
    for (std::size_t j = 0; j < count; ++j) {
      const float v = std::isfinite(x[j]) ? x[j] : 0.0f;
      const std::uint32_t code = cp::to_minifloat(F, v * k[j / simd::lanes]);
      want[j * bits / 8] =
          static_cast<unsigned char>(want[j * bits / 8] | (code << (j * bits % 8)));
    }
    wrong += std::memcmp(got, want, count * bits / 8) == 0 ? 0u : 1u;
  }
  return wrong;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("minifloat kernels: every lane converts as to_minifloat, at every rounding boundary "
            "of every exponent, with infinities, zeros and denormals") {
    const std::vector<float> e4m3 = boundary_inputs(3), e5m2 = boundary_inputs(2),
                             e2m1 = boundary_inputs(1);
    CHECK(e4m3.size() > 10000);
    CHECK(mismatches<cp::minifloat::e4m3>(e4m3) == 0);
    CHECK(mismatches<cp::minifloat::e5m2>(e5m2) == 0);
    CHECK(mismatches<cp::minifloat::e2m1>(e2m1) == 0);
  }

  TEST_CASE("minifloat kernels: 16 to 64 scaled elements pack into the codes written one by "
            "one") {
    for (std::uint32_t stream = 0; stream < 8; ++stream)
      for (std::size_t count :
           {std::size_t{16}, std::size_t{32}, std::size_t{48}, std::size_t{64}}) {
        CAPTURE(count);
        CHECK(packed_mismatches<cp::minifloat::e4m3>(stream, count) == 0);
        CHECK(packed_mismatches<cp::minifloat::e5m2>(stream, count) == 0);
        CHECK(packed_mismatches<cp::minifloat::e2m1>(stream, count) == 0);
      }
  }
}
