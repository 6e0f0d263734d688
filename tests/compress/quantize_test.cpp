// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {

using cp::quant_range;
using cp::rounding;
using cp::scale_granularity;

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

/// Uniform values in [-amplitude, amplitude) from the library's counter-based generator.
std::vector<float> sample(std::size_t n, std::uint32_t stream = 1, float amplitude = 10.0f) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(7, stream);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) * 2.0f - 1.0f) * amplitude;
  return x;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// Bitwise equality, so that NaN equals NaN and -0 differs from +0.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i]))
      return false;
  return true;
}

/// b-bit codes with a scale per block of `group` elements, or per tensor where group is 0.
cp::quantize blocks_or_tensor(std::uint32_t b, std::uint32_t group, quant_range range,
                              cp::rounding round = cp::rounding::nearest) {
  return {.bits = b,
          .granularity = group == 0 ? scale_granularity::tensor : scale_granularity::block,
          .group = group,
          .range = range,
          .round = round};
}

template <class T = float>
std::vector<std::byte> encode(const cp::quantize& c, const std::vector<T>& x,
                              const cp::context& ctx = {}) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  const auto r = cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), std::span(p));
  REQUIRE(r.bytes == p.size());
  return p;
}

template <class T = float>
std::vector<T> decode(const cp::quantize& c, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<T> y(n);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

std::vector<float> roundtrip(const cp::quantize& c, std::vector<float> x,
                             const cp::context& ctx = {}) {
  cp::roundtrip(cp::cpu::seq, c, ctx, std::span(x), {});
  return x;
}

/// Reads the records and codes of a payload body by the documented layout.
struct body_view {
  cp::quantize c;
  std::size_t n;
  const std::vector<std::byte>& p;

  std::size_t record_bytes() const { return c.range == quant_range::symmetric ? 4 : 8; }
  const unsigned char* body() const {
    return reinterpret_cast<const unsigned char*>(p.data()) + 64;
  }
  /// Field k (0: scale or lo, 1: step) of group g's record.
  float record(std::size_t g, std::size_t k = 0) const {
    float f;
    std::memcpy(&f, body() + g * record_bytes() + 4 * k, sizeof f);
    return f;
  }
  std::uint32_t code(std::size_t i) const {
    return cp::detail::unpack_one(body() + c.n_groups(n) * record_bytes(), i, c.bits);
  }
};

/// Element indices of each group, by the definition of the granularities.
std::vector<std::vector<std::size_t>> groups_of(const cp::quantize& c, std::size_t n) {
  std::vector<std::vector<std::size_t>> g;
  if (n == 0)
    return g;
  switch (c.granularity) {
  case scale_granularity::tensor:
    g.resize(1);
    for (std::size_t i = 0; i < n; ++i)
      g[0].push_back(i);
    break;
  case scale_granularity::block:
    g.resize((n + c.group - 1) / c.group);
    for (std::size_t i = 0; i < n; ++i)
      g[i / c.group].push_back(i);
    break;
  case scale_granularity::column:
    g.resize(c.group);
    for (std::size_t i = 0; i < n; ++i)
      g[i % c.group].push_back(i);
    break;
  }
  return g;
}

/// The granularities every property is checked under, for n = 1000 elements: one scale, blocks
/// that are and are not a multiple of 8 elements, and 40 columns (1000 = 25 rows x 40).
std::vector<cp::quantize> layouts(std::uint32_t bits, quant_range range,
                                  rounding round = rounding::nearest) {
  std::vector<cp::quantize> out;
  for (auto [g, size] :
       {std::pair{scale_granularity::tensor, 0u}, std::pair{scale_granularity::block, 128u},
        std::pair{scale_granularity::block, 100u}, std::pair{scale_granularity::block, 3u},
        std::pair{scale_granularity::column, 40u}})
    out.push_back({.bits = bits, .granularity = g, .group = size, .range = range, .round = round});
  return out;
}

std::string describe(const cp::quantize& c) {
  return "bits " + std::to_string(c.bits) + " granularity " +
         std::to_string(static_cast<int>(c.granularity)) + " group " + std::to_string(c.group) +
         " range " + std::to_string(static_cast<int>(c.range)) + " rounding " +
         std::to_string(static_cast<int>(c.round));
}

cp::errc error_of(auto&& f) {
  try {
    f();
  } catch (const cp::error& e) {
    return e.code();
  }
  return cp::errc::ok;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("quantize: params bytes hold bits, granularity, range, rounding and group") {
    const cp::quantize c{.bits = 6,
                         .granularity = scale_granularity::column,
                         .group = 0x01020304,
                         .range = quant_range::asymmetric,
                         .round = rounding::stochastic};
    const cp::codec_params p = c.params();
    const cp::codec_params expected = {6, 2, 1, 1, 0x04, 0x03, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(p == expected);
  }

  TEST_CASE("quantize: payload is 64 + n_groups * record bytes + ceil(b n / 8) bytes (C0.3)") {
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 1000u, 1000003u}) {
      for (std::uint32_t b : {1u, 3u, 4u, 8u}) {
        const std::uint64_t codes = (b * n + 7) / 8;
        const cp::quantize t{.bits = b,
                             .granularity = scale_granularity::tensor,
                             .group = 0,
                             .range = quant_range::asymmetric};
        CHECK(cp::max_payload_bytes(t, n) == 64 + (n ? 8 : 0) + codes);
        const cp::quantize k{.bits = std::max(b, 2u), .group = 100};
        CHECK(cp::max_payload_bytes(k, n) == 64 + 4 * ((n + 99) / 100) + (k.bits * n + 7) / 8);
      }
    }
    const cp::quantize col{.bits = 3, .granularity = scale_granularity::column, .group = 40};
    CHECK(cp::max_payload_bytes(col, 1000) == 64 + 4 * 40 + (3 * 1000 + 7) / 8);
    const auto p = encode(col, sample(1000));
    CHECK(p.size() == 64 + 160 + 375);
  }

  TEST_CASE("quantize: worked example of docs/wire-format.md (4-bit symmetric, blocks of 4)") {
    const cp::quantize c{.bits = 4, .granularity = scale_granularity::block, .group = 4};
    const std::vector<float> x = {1.75f, -3.5f, 0.5f, 0.0f, -1.0f, 2.0f, 0.3f, -2.0f, 0.1f, -0.1f};
    const auto p = encode(c, x);
    const std::vector<unsigned> expected = {
        0x00, 0x00, 0x00, 0x3f, // block 0 scale 3.5 / 7 = 0.5
        0x25, 0x49, 0x92, 0x3e, // block 1 scale 2 / 7 (0x3e924925)
        0xa1, 0x0e, 0x6a, 0x3c, // block 2 scale 0.1f / 7 (0x3c6a0ea1)
        0x0b, 0x78,             // codes 11 0 8 7 (q = 4 -7 1 0; 3.5 ties to even 4)
        0xe3, 0x08,             // codes 3 14 8 0 (q = -4 7 1 -7; -3.5 ties to even -4)
        0x0e,                   // codes 14 0, high nibble unused and zero
    };
    REQUIRE(p.size() == 64 + expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CAPTURE(i);
      CHECK(static_cast<unsigned>(p[64 + i]) == expected[i]);
    }
    const float s1 = 2.0f / 7.0f;
    const float s2 = 0.1f / 7.0f;
    const std::vector<float> expected_y = {2.0f,      -3.5f,     0.5f,       0.0f,      -4.0f * s1,
                                           7.0f * s1, 1.0f * s1, -7.0f * s1, 7.0f * s2, -7.0f * s2};
    CHECK(decode(c, p, x.size()) == expected_y);
    CHECK(expected_y[5] == 2.0f); // the documented decoded values
    CHECK(expected_y[8] == 0.1f);
  }

  TEST_CASE("quantize: symmetric error is at most scale / 2 for b = 2..8 and every granularity "
            "(Q1)") {
    const auto x = sample(1000);
    for (std::uint32_t b = 2; b <= 8; ++b) {
      for (const auto& c : layouts(b, quant_range::symmetric)) {
        CAPTURE(describe(c));
        const auto p = encode(c, x);
        const auto y = decode(c, p, x.size());
        const body_view v{c, x.size(), p};
        const auto groups = groups_of(c, x.size());
        const double levels = (1u << (b - 1)) - 1;
        for (std::size_t g = 0; g < groups.size(); ++g) {
          float absmax = 0.0f;
          for (auto i : groups[g])
            absmax = std::max(absmax, std::fabs(x[i]));
          REQUIRE(v.record(g) == absmax / static_cast<float>(levels));
          // Besides the half step, y = x * (L / absmax) carries two roundings (<= 2u relative,
          // u = 2^-24, i.e. <= 2u * absmax in value) and the decode (code - L) * scale two more
          // (<= 2u * absmax): 4u * absmax = 2^-22 * absmax. Twice that keeps a margin.
          const double bound = absmax / levels / 2 + std::ldexp(absmax, -21);
          for (auto i : groups[g]) {
            REQUIRE(std::fabs(static_cast<double>(x[i]) - y[i]) <= bound);
            REQUIRE(v.code(i) <= 2 * levels); // code 2^b - 1 is never written
          }
        }
      }
    }
  }

  TEST_CASE("quantize: asymmetric error is at most (hi - lo) / (2 (2^b - 1)), the min decodes "
            "exactly and the max to within rounding (Q2)") {
    const auto x = sample(1000, 2);
    for (std::uint32_t b = 1; b <= 8; ++b) {
      for (const auto& c : layouts(b, quant_range::asymmetric)) {
        CAPTURE(describe(c));
        const auto p = encode(c, x);
        const auto y = decode(c, p, x.size());
        const body_view v{c, x.size(), p};
        const auto groups = groups_of(c, x.size());
        const double levels = (1u << b) - 1;
        for (std::size_t g = 0; g < groups.size(); ++g) {
          std::size_t argmin = groups[g][0];
          std::size_t argmax = groups[g][0];
          for (auto i : groups[g]) {
            if (x[i] < x[argmin])
              argmin = i;
            if (x[i] > x[argmax])
              argmax = i;
          }
          const double lo = x[argmin];
          const double hi = x[argmax];
          REQUIRE(v.record(g, 0) == x[argmin]);
          // Slack: (x - lo) * inv and (hi - lo) / M, code * step, lo + ... each round once
          // (u = 2^-24): at most about 4u (hi - lo) + u max(|lo|, |hi|); doubled for margin.
          const double slack =
              std::ldexp(hi - lo, -21) + std::ldexp(std::max(std::fabs(lo), std::fabs(hi)), -23);
          const double bound = (hi - lo) / levels / 2 + slack;
          std::set<float> distinct;
          for (auto i : groups[g]) {
            REQUIRE(std::fabs(x[i] - static_cast<double>(y[i])) <= bound);
            distinct.insert(y[i]);
          }
          CHECK(distinct.size() <= (std::size_t{1} << b));
          CHECK(y[argmin] == x[argmin]);
          CHECK(v.code(argmin) == 0);
          if (hi > lo) {
            CHECK(v.code(argmax) == levels);
            CHECK(std::fabs(y[argmax] - hi) <= slack);
          }
        }
      }
    }
  }

  TEST_CASE("quantize: quantizing the decoded tensor again gives the same codes when the "
            "record is unchanged (Q3)") {
    const auto x = sample(4096, 3);
    for (auto range : {quant_range::symmetric, quant_range::asymmetric}) {
      for (std::uint32_t b : {2u, 4u, 8u}) {
        const cp::quantize c{.bits = b, .group = 64, .range = range};
        CAPTURE(describe(c));
        const auto p1 = encode(c, x);
        const auto y1 = decode(c, p1, x.size());
        const auto p2 = encode(c, y1);
        const auto y2 = decode(c, p2, x.size());
        const body_view v1{c, x.size(), p1};
        const body_view v2{c, x.size(), p2};
        std::size_t unchanged = 0;
        for (std::size_t g = 0; g < 64; ++g) {
          if (v1.record(g, 0) != v2.record(g, 0))
            continue;
          if (range == quant_range::asymmetric && v1.record(g, 1) != v2.record(g, 1))
            continue;
          ++unchanged;
          for (std::size_t i = g * 64; i < g * 64 + 64; ++i) {
            REQUIRE(v2.code(i) == v1.code(i));
            REQUIRE(y2[i] == y1[i]);
          }
        }
        CHECK(unchanged >= 32); // the property is exercised on most groups
      }
    }
  }

  TEST_CASE("quantize: stochastic rounding picks a neighbouring level with the right mean and "
            "variance (Q4)") {
    // Groups of 16 whose extreme elements pin the step to delta = 0.25 exactly, so y = x / delta
    // and p = frac(y) are exact and the expectation is known.
    constexpr std::size_t n = 64;
    constexpr std::size_t steps = 4000;
    constexpr double delta = 0.25;
    for (auto range : {quant_range::symmetric, quant_range::asymmetric}) {
      // symmetric 3 bits: L = 3, absmax 0.75; asymmetric 2 bits: M = 3, [lo, hi] = [0, 0.75].
      const cp::quantize c{.bits = range == quant_range::symmetric ? 3u : 2u,
                           .group = 16,
                           .range = range,
                           .round = rounding::stochastic};
      CAPTURE(describe(c));
      const float lo = range == quant_range::symmetric ? -0.75f : 0.0f;
      std::vector<float> x = sample(n, 4, 1.0f);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = lo + std::ldexp(std::floor(std::ldexp((x[i] + 1.0f) / 2.0f * (0.75f - lo), 12)),
                               -12); // 12 fractional bits, within [lo, 0.75]
        if (i % 16 == 0)
          x[i] = 0.75f;
        if (i % 16 == 1)
          x[i] = lo;
        if (i % 16 == 2)
          x[i] = 0.5f; // on a level: p = 0
      }
      std::vector<double> sum(n, 0.0);
      std::vector<double> sum_sq(n, 0.0);
      for (std::size_t t = 0; t < steps; ++t) {
        const auto y = roundtrip(c, x, {.seed = 11, .step = t, .tensor_id = 5});
        for (std::size_t i = 0; i < n; ++i) {
          const double below = std::floor((x[i] - lo) / delta) * delta + lo;
          REQUIRE((y[i] == below || y[i] == below + delta));
          sum[i] += y[i];
          sum_sq[i] += static_cast<double>(y[i]) * y[i];
        }
      }
      double var_emp = 0.0;
      double var_expected = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        const double frac = (x[i] - lo) / delta - std::floor((x[i] - lo) / delta);
        const double mean = sum[i] / steps;
        CHECK(std::fabs(mean - x[i]) <= 4 * std::sqrt(frac * (1 - frac) / steps) * delta);
        var_emp += sum_sq[i] / steps - mean * mean;
        var_expected += delta * delta * frac * (1 - frac);
      }
      CHECK(var_expected > 0.1); // most elements are not on a level
      CHECK(var_emp == doctest::Approx(var_expected).epsilon(0.05));
    }
  }

  TEST_CASE("quantize: stochastic payloads depend on exactly the context's seed, step and "
            "tensor id") {
    const auto x = sample(1000, 5);
    const cp::quantize c{.bits = 4, .group = 128, .round = rounding::stochastic};
    const cp::context ctx{.seed = 1, .step = 2, .tensor_id = 3};
    const auto p = encode(c, x, ctx);
    CHECK(encode(c, x, ctx) == p);
    auto other = ctx;
    other.step = 3;
    const auto by_step = encode(c, x, other);
    other = ctx;
    other.seed = 2;
    const auto by_seed = encode(c, x, other);
    other = ctx;
    other.tensor_id = 4;
    const auto by_tensor = encode(c, x, other);
    // Compare bodies only: the header records the context and would differ anyway.
    const auto body = [](const std::vector<std::byte>& q) {
      return std::vector<std::byte>(q.begin() + 64, q.end());
    };
    CHECK(body(by_step) != body(p));
    CHECK(body(by_seed) != body(p));
    CHECK(body(by_tensor) != body(p));
  }

  TEST_CASE("quantize: all-zero, constant and single-element tensors decode without NaN "
            "(C0.4)") {
    for (auto range : {quant_range::symmetric, quant_range::asymmetric}) {
      for (auto round : {rounding::nearest, rounding::stochastic}) {
        for (const auto& c : layouts(4, range, round)) {
          CAPTURE(describe(c));
          const std::vector<float> zeros(1000, 0.0f);
          for (float y : decode(c, encode(c, zeros), zeros.size()))
            REQUIRE(bits_of(y) == 0u);
          for (float value : {3.25f, -1.5f}) {
            const std::vector<float> constant(1000, value);
            const double levels = 7.0;
            for (float y : decode(c, encode(c, constant), constant.size())) {
              REQUIRE(std::isfinite(y));
              if (range == quant_range::asymmetric) {
                REQUIRE(y == value); // a constant group is sent as lo and decodes exactly
              } else {
                REQUIRE(std::fabs(y - value) <= std::fabs(value) / levels / 2);
              }
            }
          }
        }
      }
      const cp::quantize t{
          .bits = 8, .granularity = scale_granularity::tensor, .group = 0, .range = range};
      const std::vector<float> one = {-2.5f};
      const float y = decode(t, encode(t, one), 1)[0];
      if (range == quant_range::asymmetric) {
        CHECK(y == -2.5f);
      } else {
        CHECK(std::fabs(y + 2.5f) <= 2.5f / 127 / 2);
      }
    }
    // -0 as the minimum is recorded as +0, so the record bytes do not depend on reduction order.
    const cp::quantize a{.bits = 4, .group = 4, .range = quant_range::asymmetric};
    const std::vector<float> signed_zero = {-0.0f, 0.0f, 1.0f, -0.0f};
    const auto p = encode(a, signed_zero);
    CHECK(bits_of(body_view{a, 4, p}.record(0, 0)) == 0u);
  }

  TEST_CASE("quantize: groups whose inverse scale or range overflows decode finite") {
    // 8-bit symmetric blocks of 8: block 1 is zero but for one denormal, so 127 / absmax
    // overflows and the block is sent as zeros; its neighbours are unaffected.
    const cp::quantize c{.bits = 8, .group = 8};
    std::vector<float> x(24, 0.0f);
    x[3] = 1e30f;
    x[12] = 1e-45f;
    x[20] = -1e-30f;
    const auto y = decode(c, encode(c, x), x.size());
    for (std::size_t i = 8; i < 16; ++i)
      CHECK(bits_of(y[i]) == 0u);
    CHECK(y[3] == doctest::Approx(1e30f));
    CHECK(y[20] == doctest::Approx(-1e-30f));
    // Asymmetric: hi - lo overflows f32. The group is encoded on halves and records its step
    // negated (a wide group, docs/wire-format.md): lo still decodes exactly, hi to within a few
    // units in the last place, and 1 to within half a step (step = 6e38 / 15).
    const cp::quantize a{.bits = 4,
                         .granularity = scale_granularity::tensor,
                         .group = 0,
                         .range = quant_range::asymmetric};
    const std::vector<float> wide = {-3e38f, 3e38f, 1.0f};
    const auto p = encode(a, wide);
    CHECK(body_view{a, 3, p}.record(0, 1) < 0.0f); // the negative step marks the wide group
    const auto w = decode(a, p, wide.size());
    CHECK(w[0] == -3e38f);
    CHECK(w[1] == doctest::Approx(3e38f).epsilon(1e-6));
    CHECK(std::fabs(static_cast<double>(w[2]) - 1.0) <= 6e38 / 15 / 2 * (1 + 1e-6));
  }

  TEST_CASE_TEMPLATE("quantize: decodes every size and dtype within the bound, and roundtrip "
                     "equals decode(encode) bit for bit",
                     T, float, cp::half, cp::bfloat16) {
    const cp::quantize c{.bits = 5, .group = 100};
    for (std::size_t n : {0u, 1u, 7u, 1000003u}) {
      CAPTURE(n);
      const auto xf = sample(n, 6);
      std::vector<T> x(n);
      std::vector<float> xt(n); // the inputs as the codec sees them
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = cp::from_float<T>(xf[i]);
        xt[i] = cp::to_float(x[i]);
      }
      const auto p = encode(c, x);
      CHECK(cp::format::validate_envelope(p).element == cp::dtype_of_v<T>);
      const auto y = decode<float>(c, p, n);
      const auto yt = decode<T>(c, p, n);
      std::vector<float> absmax((n + 99) / 100, 0.0f);
      for (std::size_t i = 0; i < n; ++i)
        absmax[i / 100] = std::max(absmax[i / 100], std::fabs(xt[i]));
      std::size_t beyond_bound = 0; // counted, not asserted per element: n is large
      std::size_t not_converted = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double a = absmax[i / 100];
        beyond_bound +=
            std::fabs(xt[i] - static_cast<double>(y[i])) > a / 15 / 2 + std::ldexp(a, -21);
        not_converted += !(yt[i] == cp::from_float<T>(y[i]));
      }
      CHECK(beyond_bound == 0);
      CHECK(not_converted == 0);
      CHECK(same_bits(roundtrip(c, xt), y));
    }
  }

  TEST_CASE_TEMPLATE("quantize: a 16-bit output holds from_float of each fp32 value, for every "
                     "width, range and granularity",
                     T, cp::half, cp::bfloat16) {
    // Values past f16's range, in its subnormal range, a NaN (a poisoned group) and a wide
    // asymmetric record (a group spanning most of the float range), over sizes with a tail.
    for (const std::size_t n : {9u, 3001u, 5000u}) {
      std::vector<float> x = sample(n, 12);
      for (std::size_t i = 0; i < n; ++i)
        x[i] *= i % 3 == 0 ? 1e5f : 1.0f;
      for (std::size_t i = n / 3; i < n / 3 + 200 && i < n; ++i)
        x[i] *= 1e-7f;
      if (n > 1000) {
        x[700] = nan_f;
        x[300] = -3e38f;
        x[301] = 3e38f;
      }
      for (std::uint32_t b : {2u, 4u, 5u, 8u})
        for (auto range : {quant_range::symmetric, quant_range::asymmetric})
          for (const std::uint32_t group : {0u, 128u, 64u, 100u, 13u}) {
            CAPTURE(n);
            CAPTURE(b);
            CAPTURE(group);
            const cp::quantize c = blocks_or_tensor(b, group, range);
            const auto p = encode(c, x);
            const auto y = decode<float>(c, p, n);
            const auto yt = decode<T>(c, p, n);
            std::size_t differ = 0;
            for (std::size_t i = 0; i < n; ++i)
              differ += yt[i].bits != cp::from_float<T>(y[i]).bits ? 1u : 0u;
            CHECK(differ == 0);
          }
    }
  }

  TEST_CASE_TEMPLATE("quantize: a 16-bit input encodes to the body of its values in fp32, for "
                     "every width, range, granularity, rounding and policy, under seq and par",
                     T, cp::half, cp::bfloat16) {
    // Batches of whole groups are widened and sent through the fp32 kernels (groups off a
    // multiple of 8, as 100, 13 and 5, scaled first; a batch after a NaN group begins inside a
    // byte of codes); a group longer than a batch, a batch of its elements at a time (the
    // elements before its first multiple of 8 one by one); a group with a NaN or Inf element by
    // element. par cuts ranges of 256 elements or more. Hostile sizes hold values past f16's range,
    // in its subnormal range, a NaN and an Inf (poisoned groups, or zeros and a count); 4100 finite
    // values make long groups of several batches.
    for (const auto& [n, hostile] :
         {std::pair<std::size_t, bool>{9, true}, {1000, true}, {5003, true}, {4100, false}}) {
      std::vector<float> xf = sample(n, 14);
      for (std::size_t i = 0; hostile && i < n; ++i)
        xf[i] *= i % 5 == 0 ? 1e5f : i % 7 == 0 ? 1e-6f : 1.0f;
      if (hostile && n > 1000) {
        xf[700] = nan_f;
        xf[2500] = -std::numeric_limits<float>::infinity();
      }
      std::vector<T> x(n);
      std::vector<float> wide(n);
      std::size_t nonfinite = 0; // f16 takes 1e5 as infinity
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = cp::from_float<T>(xf[i]);
        wide[i] = cp::to_float(x[i]);
        nonfinite += !std::isfinite(wide[i]);
      }
      for (const std::uint32_t b : {2u, 4u, 5u, 8u})
        for (const auto range : {quant_range::symmetric, quant_range::asymmetric})
          for (const std::uint32_t group : {0u, 64u, 128u, 100u, 13u, 5u, 1024u, 2048u})
            for (const auto round : {cp::rounding::nearest, cp::rounding::stochastic})
              for (const auto policy :
                   {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
                CAPTURE(n);
                CAPTURE(b);
                CAPTURE(group);
                const cp::quantize c = blocks_or_tensor(b, group, range, round);
                const cp::context ctx{.seed = 5, .step = 3, .on_nonfinite = policy};
                const auto want = encode(c, wide, ctx);
                std::vector<std::byte> seq(want.size()), par(want.size());
                const auto rs = cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), seq);
                const auto rp = cp::encode(cp::cpu::par_t{.threads = 3, .grain = 256}, c, ctx,
                                           std::span<const T>(x), par);
                CHECK(rs.nonfinite == nonfinite);
                CHECK(rp.nonfinite == rs.nonfinite);
                CHECK(std::equal(want.begin() + 64, want.end(), seq.begin() + 64));
                CHECK(std::equal(want.begin() + 64, want.end(), par.begin() + 64));
              }
    }
  }

  TEST_CASE("quantize: roundtrip equals decode(encode) bit for bit for every configuration") {
    auto x = sample(1000, 8);
    x[17] = nan_f; // exercises the non-finite paths too
    x[530] = -inf_f;
    for (std::uint32_t b = 1; b <= 8; ++b) {
      for (auto range : {quant_range::symmetric, quant_range::asymmetric}) {
        if (range == quant_range::symmetric && b == 1)
          continue;
        for (auto round : {rounding::nearest, rounding::stochastic}) {
          for (const auto& c : layouts(b, range, round)) {
            for (auto policy :
                 {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
              CAPTURE(describe(c));
              CAPTURE(static_cast<int>(policy));
              const cp::context ctx{.seed = 4, .step = 9, .on_nonfinite = policy};
              REQUIRE(same_bits(roundtrip(c, x, ctx), decode(c, encode(c, x, ctx), x.size())));
            }
          }
        }
      }
    }
  }

  TEST_CASE("quantize: decode_accumulate adds weight * decoded") {
    const auto x = sample(1003, 9);
    for (const auto& c : layouts(3, quant_range::asymmetric)) {
      if (c.granularity == scale_granularity::column)
        continue; // 1003 is prime
      CAPTURE(describe(c));
      const auto p = encode(c, x);
      const auto y = decode(c, p, x.size());
      std::vector<float> acc = sample(1003, 10);
      const auto before = acc;
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), -0.75f);
      for (std::size_t i = 0; i < x.size(); ++i)
        REQUIRE(acc[i] == before[i] + -0.75f * y[i]);
    }
  }

  TEST_CASE("quantize: invalid configurations are refused with invalid_argument") {
    const std::vector<cp::quantize> bad = {
        {.bits = 0},
        {.bits = 9},
        {.bits = 1, .range = quant_range::symmetric},
        {.bits = 4, .granularity = scale_granularity::block, .group = 0},
        {.bits = 4, .granularity = scale_granularity::tensor, .group = 128},
        {.bits = 4, .granularity = scale_granularity::column, .group = 0},
        {.bits = 4, .granularity = scale_granularity::column, .group = 33}, // 1000 % 33 != 0
        {.bits = 4, .granularity = static_cast<scale_granularity>(3)},
        {.bits = 4, .range = static_cast<quant_range>(2)},
        {.bits = 4, .round = static_cast<rounding>(2)},
    };
    const auto x = sample(1000);
    for (const auto& c : bad) {
      CAPTURE(describe(c));
      const cp::status s = c.can_implement(x.size());
      CHECK(s.code == cp::errc::invalid_argument);
      CHECK(std::string(s.message).rfind("quantize: ", 0) == 0);
      std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()) + 64);
      CHECK(error_of([&] {
              cp::encode(cp::cpu::seq, c, {}, std::span<const float>(x), std::span(p));
            }) == cp::errc::invalid_argument);
    }
    const cp::quantize ok{.bits = 1, .range = quant_range::asymmetric};
    CHECK(static_cast<bool>(ok.can_implement(1000)));
  }

  TEST_CASE("quantize: decoding with another bits, granularity, group, range or rounding is a "
            "codec mismatch") {
    const cp::quantize sent{.bits = 4, .group = 40};
    const auto x = sample(1000);
    const auto p = encode(sent, x);
    const std::vector<cp::quantize> others = {
        {.bits = 3, .group = 40},
        {.bits = 4, .granularity = scale_granularity::column, .group = 40},
        {.bits = 4, .group = 50},
        {.bits = 4, .group = 40, .range = quant_range::asymmetric},
        {.bits = 4, .group = 40, .round = rounding::stochastic},
    };
    for (const auto& c : others) {
      CAPTURE(describe(c));
      std::vector<float> y(x.size(), 7.0f);
      CHECK(error_of([&] {
              cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
            }) == cp::errc::codec_mismatch);
      for (float v : y)
        REQUIRE(v == 7.0f);
    }
  }

  TEST_CASE("quantize: NaN and Inf follow the context's policy") {
    for (auto range : {quant_range::symmetric, quant_range::asymmetric}) {
      for (auto g : {scale_granularity::block, scale_granularity::column}) {
        // block: groups are x[0..7], x[8..15], x[16..23]; column: 3 rows x 8 columns.
        const cp::quantize c{.bits = 4, .granularity = g, .group = 8, .range = range};
        CAPTURE(describe(c));
        auto x = sample(24, 11);
        x[9] = nan_f;
        x[13] = inf_f;
        const auto poisoned = [&](std::size_t i) {
          return g == scale_granularity::block ? (i / 8 == 1) : (i % 8 == 1 || i % 8 == 5);
        };

        const cp::context propagate{.on_nonfinite = cp::nonfinite_policy::propagate};
        std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
        auto r = cp::encode(cp::cpu::seq, c, propagate, std::span<const float>(x), std::span(p));
        CHECK(r.nonfinite == 2);
        const auto y = decode(c, p, x.size());
        const body_view v{c, x.size(), p};
        for (std::size_t i = 0; i < x.size(); ++i) {
          CAPTURE(i);
          if (poisoned(i)) {
            CHECK(std::isnan(y[i]));
            CHECK(v.code(i) == 0);
          } else {
            CHECK(std::isfinite(y[i]));
          }
        }
        const std::size_t bad_group = g == scale_granularity::block ? 1 : 5;
        CHECK(std::isnan(v.record(bad_group, 0)));
        if (range == quant_range::asymmetric)
          CHECK(std::isnan(v.record(bad_group, 1)));

        const cp::context zero{.on_nonfinite = cp::nonfinite_policy::zero_and_count};
        r = cp::encode(cp::cpu::seq, c, zero, std::span<const float>(x), std::span(p));
        CHECK(r.nonfinite == 2);
        auto x0 = x;
        x0[9] = 0.0f;
        x0[13] = 0.0f;
        CHECK(same_bits(decode(c, p, x.size()), decode(c, encode(c, x0), x.size())));

        std::vector<std::byte> untouched(p.size(), std::byte{0x5c});
        CHECK(error_of([&] {
                cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::fail},
                           std::span<const float>(x), std::span(untouched));
              }) == cp::errc::non_finite);
        for (auto b : untouched)
          REQUIRE(b == std::byte{0x5c});
      }
    }
  }
}
