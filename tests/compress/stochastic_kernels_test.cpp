// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The vector encoders of TernGrad, QSGD and natural compression
// (backend/cpu/detail/stochastic_kernels.hpp) against their codecs' scalar encode_value, lane by
// lane: random inputs and random bits, zeros of both signs, denormals, values near the float
// maximum, all-zero and tiny groups (the prescaled encoder), groups across natural's whole
// exponent range, and random bits that land exactly on the keep or round-up threshold, where the
// comparison's direction decides the code.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "commpress/backend/cpu/detail/stochastic_kernels.hpp"
#include "commpress/compress/natural.hpp"
#include "commpress/core/rng.hpp"

namespace cp = commpress;
namespace cd = commpress::cpu::detail;
namespace simd = commpress::cpu::simd;

namespace {

static_assert(cd::has_stochastic_lanes<cp::terngrad>);
static_assert(cd::has_stochastic_lanes<cp::qsgd<2>> && cd::has_stochastic_lanes<cp::qsgd<4>> &&
              cd::has_stochastic_lanes<cp::qsgd<8>>);
static_assert(cd::has_stochastic_lanes<cp::natural>);

/// Random bits whose uniform_from_bits is exactly p where p is a multiple of 2^-24 in [0, 1).
std::uint32_t bits_at(float p) {
  return static_cast<std::uint32_t>(std::ldexp(p, 24)) << 8;
}

/// Lanes where stochastic_lanes<C>::encode differs from c.encode_value, over inputs x0 (a
/// multiple of simd::lanes) and scales s, with random bits and bits on the threshold the
/// scalar code compares against (`threshold(x, k)`). `bounded`: the codec's scale is a norm of
/// a group holding x, so |x| <= s (inputs beyond it are clamped to it).
template <class C, class Threshold>
std::size_t mismatches(const C& c, const std::vector<float>& x0, bool bounded,
                       Threshold threshold) {
  std::size_t wrong = 0;
  for (const float s : {1.0f, 0.37f, 3.0e38f, 1e-30f, 1e-41f, 0.0f}) {
    const typename C::encoder k = c.make_encoder(s, {});
    std::vector<float> x = x0;
    if (bounded)
      for (float& v : x)
        v = std::fabs(v) <= s ? v : std::copysign(s, v);
    for (std::uint32_t round = 0; round < 3; ++round)
      for (std::size_t i = 0; i + simd::lanes <= x.size(); i += simd::lanes) {
        std::uint32_t random[simd::lanes], got[simd::lanes];
        for (std::size_t j = 0; j < simd::lanes; ++j)
          random[j] = round == 0 ? cp::random_u32(cp::make_rng_key(7, 1), i, j)
                                 : bits_at(threshold(x[i + j], k)) + (round == 2 ? 256u : 0u);
        simd::store(got, cd::stochastic_lanes<C>::encode(c, simd::load(x.data() + i), k,
                                                         simd::load_u32(random)));
        for (std::size_t j = 0; j < simd::lanes; ++j) {
          const std::uint32_t want = c.encode_value(x[i + j], k, random[j]);
          if (got[j] != want) {
            CAPTURE(x[i + j]);
            CAPTURE(s);
            CHECK(got[j] == want);
            ++wrong;
          }
        }
      }
  }
  return wrong;
}

/// Finite inputs of every kind the encoders see (non-finite elements reach them as 0).
std::vector<float> inputs() {
  std::vector<float> x;
  for (std::uint32_t i = 0; i < 4096; ++i) {
    const float u = cp::uniform_from_bits(cp::random_u32(cp::make_rng_key(3, 2), 0, i)) - 0.5f;
    x.push_back(u * std::ldexp(1.0f, static_cast<int>(i % 64) - 32));
  }
  for (const float v :
       {0.0f, -0.0f, 1e-45f, -1e-40f, 1.17549435e-38f, 3.4028235e38f, -3.4028235e38f, 1.0f, -1.0f,
        0.5f, 0.37f, -0.37f, 0.185f, 2.0f, 127.0f, 1e-30f})
    x.push_back(v);
  while (x.size() % simd::lanes != 0)
    x.push_back(0.25f);
  return x;
}

/// The part of p (or of y - floor(y)) below 1, rounded down to a multiple of 2^-24.
float on_grid(float p) {
  if (!(p > 0.0f))
    return 0.0f;
  const float frac = p - std::floor(p);
  return std::ldexp(std::floor(std::ldexp(frac, 24)), -24);
}

/// Random bits on natural's threshold for |x| in a group whose top exponent is top, and one
/// step either side (`step` -1, 0 or 1), from x's value rather than its bits: at and above
/// 2^(top - 126) the fraction f of |x| = (1 + f) 2^a as 23 bits (the round-up threshold),
/// below it |x| / 2^(top - 126) as 24 bits (the keep threshold).
std::uint32_t natural_threshold_bits(float x, int top, int step) {
  const double magnitude = std::fabs(static_cast<double>(x));
  if (magnitude == 0.0)
    return 0;
  const int lowest = top - 126;
  int e = 0;
  const double m = std::frexp(magnitude, &e); // magnitude = m 2^e, m in [0.5, 1)
  if (e - 1 >= lowest) {
    const auto fraction = static_cast<std::uint32_t>(std::ldexp(2.0 * m - 1.0, 23));
    return (fraction << 9) + static_cast<std::uint32_t>(step * 512);
  }
  const auto threshold = static_cast<std::uint32_t>(std::floor(std::ldexp(magnitude, 24 - lowest)));
  return (threshold << 8) + static_cast<std::uint32_t>(step * 256);
}

/// Inputs of a natural group with top exponent top: inputs() brought below 2^top, and the
/// values around the bottom of its range, 2^(top - 126).
std::vector<float> natural_inputs(const std::vector<float>& x0, int top) {
  std::vector<float> x;
  for (const float v : x0) {
    const float scaled = std::ldexp(v, top - 32);
    x.push_back(std::fabs(scaled) < std::ldexp(1.0f, top) ? scaled : std::ldexp(1.5f, top - 1));
  }
  const int lowest = top - 126;
  for (const double v : {1.0, 1.5, 1.999, 0.75, 0.5, 0x1p-23, 0x1p-24, 0x1p-25, 0x1.8p-30})
    for (const double sign : {1.0, -1.0})
      x.push_back(static_cast<float>(sign * std::ldexp(v, lowest)));
  for (const float v : {1e-45f, -3e-45f, 1e-40f, 1.17549421e-38f})
    x.push_back(v);
  while (x.size() % simd::lanes != 0)
    x.push_back(0.0f);
  return x;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("stochastic kernels: TernGrad's and QSGD's codes in every lane are encode_value's, "
            "on and around the keep threshold") {
    const std::vector<float> x = inputs();
    const auto terngrad_threshold = [](float v, const cp::scaled::prescaled_ratio& k) {
      return on_grid(k.of_magnitude(v));
    };
    CHECK(mismatches(cp::terngrad{}, x, false, terngrad_threshold) == 0);
    // TernGrad's clipped scale may be below |x| (kept for sure); QSGD's norm never is.
    const auto qsgd_threshold = terngrad_threshold; // y - floor(y), the same grid
    CHECK(mismatches(cp::qsgd<2>{}, x, true, qsgd_threshold) == 0);
    CHECK(mismatches(cp::qsgd<4>{.levels = 5}, x, true, qsgd_threshold) == 0);
    CHECK(mismatches(cp::qsgd<8>{}, x, true, qsgd_threshold) == 0);
    CHECK(mismatches(cp::qsgd<8>{.levels = 1}, x, true, qsgd_threshold) == 0);
  }

  TEST_CASE("stochastic kernels: natural compression's codes in every lane are encode_value's, "
            "across the exponent range and on the round-up and keep thresholds") {
    const cp::natural c{};
    std::size_t wrong = 0, kept_below = 0, dropped_below = 0;
    for (const int top : {-127, -126, -120, -60, -1, 0, 1, 3, 60, 100, 125, 126, 127}) {
      const std::vector<float> x = natural_inputs(inputs(), top);
      for (int round = 0; round < 4; ++round)
        for (std::size_t i = 0; i + simd::lanes <= x.size(); i += simd::lanes) {
          std::uint32_t random[simd::lanes], got[simd::lanes];
          for (std::size_t j = 0; j < simd::lanes; ++j)
            random[j] = round == 0 ? cp::random_u32(cp::make_rng_key(5, 3), i, j)
                                   : natural_threshold_bits(x[i + j], top, round - 2);
          simd::store(got, cd::stochastic_lanes<cp::natural>::encode(c, simd::load(x.data() + i),
                                                                     top, simd::load_u32(random)));
          for (std::size_t j = 0; j < simd::lanes; ++j) {
            const std::uint32_t want = c.encode_value(x[i + j], top, random[j]);
            if (x[i + j] != 0.0f && std::fabs(x[i + j]) < std::ldexp(1.0, top - 126))
              ++(want != 0 ? kept_below : dropped_below);
            if (got[j] != want) {
              CAPTURE(x[i + j]);
              CAPTURE(top);
              CAPTURE(random[j]);
              CHECK(got[j] == want);
              ++wrong;
            }
          }
        }
    }
    CHECK(wrong == 0);
    // Both outcomes below the range were reached.
    CHECK(kept_below > 50);
    CHECK(dropped_below > 50);
  }

  TEST_CASE("stochastic kernels: nonzero_bytes marks the nonzero codes of 64, byte j as bit j") {
    // What the Elias writer visits: codes with only the sign bit or only the low bit set count.
    std::uint64_t seed = 9;
    for (int trial = 0; trial < 200; ++trial) {
      alignas(64) std::uint8_t codes[64];
      std::uint64_t want = 0;
      for (unsigned j = 0; j < 64; ++j) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        const unsigned pick = static_cast<unsigned>(seed >> 60);
        codes[j] = trial == 0   ? 0
                   : trial == 1 ? 0x80
                   : pick < 8   ? 0
                                : static_cast<std::uint8_t>(pick == 8   ? 0x80
                                                            : pick == 9 ? 1
                                                                        : seed >> 32);
        want |= std::uint64_t{codes[j] != 0} << j;
      }
      CAPTURE(trial);
      CHECK(simd::nonzero_bytes(simd::load_bytes(codes)) == want);
    }
  }
}
