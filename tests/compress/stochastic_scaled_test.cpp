// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The stochastic block-scaled codecs, TernGrad, natural compression and QSGD (docs/methods.md
// sections 13, 14 and 15), against their defining properties, measured over many steps (each step
// draws new random bits):
// - unbiased: the mean of the decoded values over steps is the input, within five standard
//   errors of the codec's own variance formula;
// - the variance formula itself (TernGrad: s|x| - x^2; natural: at most x^2 / 8; QSGD:
//   (r/s)^2 p(1-p) per element, and the paper's bound min(d/s^2, sqrt(d)/s) r^2 on their sum);
// - the values: {-s, 0, +s} for TernGrad, the two powers of two around |x| for natural, the two
//   levels of r/s around |x| for QSGD;
// - edge cases: all zero, one element, denormals, values near the float maximum, clipping;
// - natural's and QSGD's decode_value for every code, against the values written out.
// The bytes themselves, cpu::par against cpu::seq and the bad-input cases are covered for every
// block-scaled codec by scaled_test.cpp.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "commpress/backend/cpu/scaled.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/compress/codec_list.hpp"
#include "commpress/compress/natural.hpp"
#include "commpress/compress/qsgd.hpp"
#include "commpress/compress/terngrad.hpp"

namespace cp = commpress;

namespace {

std::uint32_t bits_of(float v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, 4);
  return b;
}

/// decode(encode(x)) at `step`, so that each step draws other random bits.
template <class C>
std::vector<float> roundtrip_at(const C& c, std::vector<float> x, std::uint64_t step) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  cp::encode(cp::cpu::seq, c, cp::context{.seed = 7, .step = step, .tensor_id = 3},
             std::span<const float>(x), std::span(p), {});
  std::vector<float> y(x.size(), 42.0f);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

/// The mean and the mean square error of each element's decoded value over `steps` steps.
struct moments {
  std::vector<double> mean;
  std::vector<double> mse;
};
template <class C> moments measure(const C& c, const std::vector<float>& x, int steps) {
  moments m{std::vector<double>(x.size()), std::vector<double>(x.size())};
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> y = roundtrip_at(c, x, static_cast<std::uint64_t>(t));
    for (std::size_t i = 0; i < x.size(); ++i) {
      m.mean[i] += y[i];
      m.mse[i] += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    }
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    m.mean[i] /= steps;
    m.mse[i] /= steps;
  }
  return m;
}

/// Values of several signs and magnitudes, deterministic.
std::vector<float> spread(std::size_t n, float scale) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = scale * static_cast<float>((static_cast<int>(i * 37 % 101) - 50)) / 50.0f;
  return x;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("terngrad: values are -s, 0 or +s with s = amax, unbiased, variance s|x| - x^2") {
    const std::vector<float> x = spread(300, 0.75f);
    const float s = 0.75f;
    const cp::terngrad c{.block = 0};
    for (float v : roundtrip_at(c, x, 0))
      CHECK((v == 0.0f || v == s || v == -s));
    const int steps = 4000;
    const moments m = measure(c, x, steps);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      const double var =
          s * std::fabs(static_cast<double>(x[i])) - static_cast<double>(x[i]) * x[i];
      CHECK(std::fabs(m.mean[i] - x[i]) <= 5.0 * std::sqrt(var / steps) + 1e-6);
      // The mean square error estimates var; its own spread is below var (Bernoulli values).
      CHECK(std::fabs(m.mse[i] - var) <= 5.0 * s * s / std::sqrt(steps) + 1e-6);
    }
  }

  TEST_CASE("terngrad: per-block scales, and clipping to c * rms bounds the values") {
    std::vector<float> x = spread(256, 0.01f);
    x[7] = 10.0f; // an outlier in the first block of 128
    const cp::terngrad unclipped{.block = 128};
    const cp::terngrad clipped{.block = 128, .clip_sigmas = 2.5f};
    double sq = 0;
    for (std::size_t i = 0; i < 128; ++i)
      sq += static_cast<double>(x[i]) * x[i];
    const float s = static_cast<float>(2.5 * std::sqrt(sq) / std::sqrt(128.0));
    REQUIRE(s < 10.0f);
    const std::vector<float> a = roundtrip_at(unclipped, x, 1);
    const std::vector<float> b = roundtrip_at(clipped, x, 1);
    CHECK(a[7] == 10.0f); // |x| = s: kept with probability 1
    for (std::size_t i = 0; i < 128; ++i) {
      CAPTURE(i);
      CHECK((b[i] == 0.0f || std::fabs(b[i]) == doctest::Approx(s).epsilon(1e-6)));
      CHECK((a[i] == 0.0f || std::fabs(a[i]) == 10.0f));
    }
    CHECK(b[7] == doctest::Approx(s).epsilon(1e-6)); // clipped, kept
    // The second block, without the outlier, keeps its own scale under both.
    for (std::size_t i = 128; i < 256; ++i)
      CHECK((a[i] == 0.0f || std::fabs(a[i]) == 0.01f));
  }

  TEST_CASE("terngrad: all zero, one element, denormal groups and the float maximum") {
    const cp::terngrad c{};
    for (float v : roundtrip_at(c, std::vector<float>(33, 0.0f), 0))
      CHECK(v == 0.0f);
    CHECK(roundtrip_at(c, {-2.5f}, 0)[0] == -2.5f);
    // A group of denormals (s below 2^-100 takes the pre-scaled path) is still unbiased.
    const std::vector<float> tiny = spread(64, 1e-40f);
    const moments m = measure(c, tiny, 2000);
    for (std::size_t i = 0; i < tiny.size(); ++i)
      CHECK(std::fabs(m.mean[i] - tiny[i]) <= 5.0 * 1e-40 / std::sqrt(2000.0) + 1e-46);
    const float big = std::numeric_limits<float>::max();
    for (float v : roundtrip_at(c, {big, -big, 1.0f, -3e38f}, 0))
      CHECK(std::isfinite(v));
  }

  TEST_CASE("natural: values are the powers of two around |x|, unbiased, variance <= x^2 / 8") {
    std::vector<float> x = spread(200, 3.0f);
    x[3] = 0.75f;              // f = 0.5
    x[4] = 1.0f / 3.0f * 4.0f; // f = 1/3, the largest relative variance
    const cp::natural c{};
    const std::vector<float> y = roundtrip_at(c, x, 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      if (x[i] == 0.0f) {
        CHECK(y[i] == 0.0f);
        continue;
      }
      const float lo = std::exp2(std::floor(std::log2(std::fabs(x[i]))));
      CHECK((std::fabs(y[i]) == lo || std::fabs(y[i]) == 2 * lo));
      CHECK(std::signbit(y[i]) == std::signbit(x[i]));
    }
    const int steps = 4000;
    const moments m = measure(c, x, steps);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      const double x2 = static_cast<double>(x[i]) * x[i];
      CHECK(std::fabs(m.mean[i] - x[i]) <= 5.0 * std::sqrt(x2 / 8 / steps) + 1e-7);
      CHECK(m.mse[i] <= x2 / 8 * (1 + 5.0 / std::sqrt(steps)) + 1e-12);
    }
    // The variance bound is reached near f = 1/3: the measured one is close to it there.
    CHECK(m.mse[4] >= static_cast<double>(x[4]) * x[4] / 8 * 0.9);
  }

  TEST_CASE("natural: powers of two are exact; below the group's range, 0 or the lowest power") {
    const cp::natural c{.block = 4};
    const std::vector<float> pow2 = {1.0f, -0.5f, 0x1p-100f, 0x1p-125f};
    CHECK(roundtrip_at(c, pow2, 5) == pow2);
    // 2^-130 and a denormal sit below 2^(top - 126) = 2^-125 of a group whose amax is 1.
    const std::vector<float> x = {1.0f, 0x1p-130f, 3e-39f, -0x1.8p-127f};
    const int steps = 6000;
    const moments m = measure(c, x, steps);
    for (int t = 0; t < 50; ++t)
      for (std::size_t i = 1; i < 4; ++i) {
        const float v = roundtrip_at(c, x, static_cast<std::uint64_t>(t))[i];
        CHECK((v == 0.0f || std::fabs(v) == 0x1p-125f));
      }
    for (std::size_t i = 1; i < 4; ++i) {
      CAPTURE(i);
      const double sd = std::sqrt(std::fabs(static_cast<double>(x[i])) * 0x1p-125 / steps);
      CHECK(std::fabs(m.mean[i] - x[i]) <= 5.0 * sd);
    }
  }

  TEST_CASE("natural and qsgd: decode_value of every code, against the values written out") {
    // natural: +0 for level 0, else +-2^(top + 1 - m), the power given by ldexp (a denormal, or
    // 0 below them); a poisoned group's NaN.
    const cp::natural nat{};
    for (int top = -127; top <= 127; ++top)
      for (std::uint32_t code = 0; code < 256; ++code) {
        CAPTURE(top);
        CAPTURE(code);
        const std::uint32_t m = code & 127u;
        const float magnitude = m == 0 ? 0.0f : std::ldexp(1.0f, top + 1 - static_cast<int>(m));
        const float want = m != 0 && code >= 128 ? -magnitude : magnitude;
        const auto scale = static_cast<cp::natural::scale>(top + 127);
        CHECK(bits_of(nat.decode_value(code, nat.make_decoder(scale, {}))) == bits_of(want));
      }
    for (std::uint32_t code = 0; code < 256; ++code)
      CHECK(std::isnan(nat.decode_value(code, nat.make_decoder(cp::natural::poisoned_scale, {}))));
    // qsgd: the level times the decoder, negated by the sign bit, for decoders of either sign,
    // 0, Inf and NaN (a payload's scales are arbitrary).
    const auto each_code = [](auto q) {
      using Q = decltype(q);
      for (const float d : {0.25f, -3.0f, 0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1e-45f})
        for (std::uint32_t code = 0; code < (1u << Q::code_bits); ++code) {
          CAPTURE(Q::code_bits);
          CAPTURE(d);
          CAPTURE(code);
          const float magnitude = cp::detail::mul_rn(static_cast<float>(code & Q::max_levels), d);
          const bool negative = (code >> (Q::code_bits - 1)) != 0;
          CHECK(bits_of(q.decode_value(code, d)) == bits_of(negative ? -magnitude : magnitude));
        }
    };
    each_code(cp::qsgd2{});
    each_code(cp::qsgd4{});
    each_code(cp::qsgd8{});
  }

  TEST_CASE("natural: all zero, denormal groups, and the float maximum stays finite") {
    const cp::natural c{};
    for (float v : roundtrip_at(c, std::vector<float>(17, -0.0f), 0))
      CHECK(v == 0.0f);
    const std::vector<float> tiny = {1e-45f, 3e-42f, -7e-40f, 1.1e-38f};
    const moments m = measure(c, tiny, 4000);
    for (std::size_t i = 0; i < tiny.size(); ++i) {
      CAPTURE(i);
      const double x2 = static_cast<double>(tiny[i]) * tiny[i];
      CHECK(std::fabs(m.mean[i] - tiny[i]) <= 5.0 * std::sqrt(x2 / 8 / 4000) + 1e-50);
    }
    const float big = std::numeric_limits<float>::max();
    const std::vector<float> y = roundtrip_at(c, {big, -3.3e38f, 1.7e38f, 1.0f}, 0);
    CHECK(y[0] == 0x1p127f); // [2^127, 2^128) is sent as 2^127: a round up would overflow
    CHECK(y[1] == -0x1p127f);
    CHECK((y[2] == 0x1p127f || y[2] == 0x1p126f));
    CHECK((y[3] == 0.0f || y[3] == 2.0f)); // below the group's lowest power 2^(127 - 126)
  }

  TEST_CASE("qsgd: values are the levels of r/s around |x|, unbiased, variance (r/s)^2 p(1-p) "
            "within Lemma 3.1's bound") {
    const std::vector<float> x = spread(256, 2.0f);
    double sq = 0;
    for (float v : x)
      sq += static_cast<double>(v) * v;
    const double r = std::sqrt(sq);
    cp::all_codecs::for_each([&](auto t) {
      using Q = typename decltype(t)::type;
      if constexpr (requires { Q::max_levels; }) {
        for (const std::uint32_t levels : {1u, 3u, Q::max_levels}) {
          if (levels > Q::max_levels)
            continue;
          const Q c{.levels = levels};
          CAPTURE(Q::code_bits);
          CAPTURE(levels);
          const double unit = r / levels;
          const std::vector<float> y = roundtrip_at(c, x, 0);
          for (std::size_t i = 0; i < x.size(); ++i) {
            const double level = std::fabs(static_cast<double>(x[i])) / unit;
            const double got = std::fabs(static_cast<double>(y[i])) / unit;
            CHECK((std::fabs(got - std::floor(level)) < 1e-4 ||
                   std::fabs(got - std::floor(level) - 1) < 1e-4));
            if (y[i] != 0.0f)
              CHECK(std::signbit(y[i]) == std::signbit(x[i]));
          }
          const int steps = 3000;
          const moments m = measure(c, x, steps);
          double var_sum = 0, mse_sum = 0;
          for (std::size_t i = 0; i < x.size(); ++i) {
            CAPTURE(i);
            const double level = std::fabs(static_cast<double>(x[i])) / unit;
            const double p = level - std::floor(level);
            const double var = unit * unit * p * (1 - p);
            CHECK(std::fabs(m.mean[i] - x[i]) <= 5.0 * std::sqrt(var / steps) + 1e-5);
            CHECK(std::fabs(m.mse[i] - var) <= 5.0 * unit * unit / std::sqrt(steps) + 1e-9);
            var_sum += var;
            mse_sum += m.mse[i];
          }
          const double d = static_cast<double>(x.size());
          const double bound = std::min(d / (levels * levels), std::sqrt(d) / levels) * r * r;
          CHECK(var_sum <= bound);
          CHECK(mse_sum <= bound * (1 + 5.0 / std::sqrt(steps)));
        }
      }
    });
  }

  TEST_CASE("qsgd: per-block norms, levels out of range refused, edge cases stay finite") {
    CHECK_FALSE(cp::qsgd4{.levels = 0}.can_implement(10));
    CHECK_FALSE(cp::qsgd4{.levels = 8}.can_implement(10));
    CHECK_FALSE(cp::qsgd2{.levels = 2}.can_implement(10));
    CHECK(cp::qsgd8{.levels = 127}.can_implement(10));
    // One element: y = s, the largest level (to the roundings of s / r and r / s).
    CHECK(roundtrip_at(cp::qsgd4{}, {-2.5f}, 0)[0] == doctest::Approx(-2.5f).epsilon(1e-6));
    for (float v : roundtrip_at(cp::qsgd8{}, std::vector<float>(19, 0.0f), 0))
      CHECK(v == 0.0f);
    // Two blocks of 64: the second, 1000 times smaller, keeps its own levels.
    std::vector<float> x = spread(128, 1.0f);
    for (std::size_t i = 64; i < 128; ++i)
      x[i] *= 1e-3f;
    double sq = 0;
    for (std::size_t i = 64; i < 128; ++i)
      sq += static_cast<double>(x[i]) * x[i];
    const double unit = std::sqrt(sq) / 7;
    const std::vector<float> y = roundtrip_at(cp::qsgd4{.block = 64}, x, 4);
    for (std::size_t i = 64; i < 128; ++i) {
      const double level = std::fabs(static_cast<double>(y[i])) / unit;
      CHECK(std::fabs(level - std::round(level)) < 1e-4);
      CHECK(level <= 7.0001);
    }
    // Denormal groups (the pre-scaled path) are still unbiased; the float maximum stays finite.
    const std::vector<float> tiny = spread(64, 1e-40f);
    const moments m = measure(cp::qsgd2{}, tiny, 2000);
    double tsq = 0;
    for (float v : tiny)
      tsq += static_cast<double>(v) * v;
    for (std::size_t i = 0; i < tiny.size(); ++i)
      CHECK(std::fabs(m.mean[i] - tiny[i]) <= 5.0 * std::sqrt(tsq / 2000.0) + 1e-46);
    const float big = std::numeric_limits<float>::max();
    cp::all_codecs::for_each([&](auto t) {
      using Q = typename decltype(t)::type;
      if constexpr (requires { Q::max_levels; }) {
        for (float v : roundtrip_at(Q{}, {big, -big, 1.0f, -3e38f}, 0))
          CHECK(std::isfinite(v));
        for (float v : roundtrip_at(Q{}, {big}, 0))
          CHECK(v == doctest::Approx(big).epsilon(1e-6));
      }
    });
  }
}
