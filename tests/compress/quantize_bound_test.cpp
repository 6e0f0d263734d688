// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The error bound docs/wire-format.md states for quantize, on groups built to stress it: every
// magnitude from the subnormals to the float maximum, one-sided and two-sided ranges, ranges
// wider than the largest float (asymmetric "wide" groups), and all widths, granularities and
// roundings. No finite input may decode to a non-finite value, and every element must lie
// within the stated bound of its input:
// - symmetric: scale / 2 + 2^-21 absmax + 2^-140;
// - asymmetric: step / 2 + 2^-20 max(|lo|, |hi|) + 2^-140 (step: 2 |record step| when wide);
// with a whole step instead of half for stochastic rounding (each output is one of the two
// neighbouring levels); except groups whose inv overflows, which decode to 0 or to lo.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {

constexpr float float_max = std::numeric_limits<float>::max();

/// n values of the group kind `kind`, from the counter RNG.
std::vector<float> group_values(std::size_t n, int kind, std::uint32_t seed) {
  std::vector<float> x(n);
  const cp::rng_key key = cp::make_rng_key(seed, 91);
  for (std::size_t i = 0; i < n; ++i) {
    const float u = cp::uniform_from_bits(cp::random_u32(key, 0, i));
    const float v = cp::uniform_from_bits(cp::random_u32(key, 1, i));
    switch (kind) {
    case 0: // two-sided, up to the float maximum (asymmetric ranges overflow: wide groups)
      x[i] = (2.0f * u - 1.0f) * float_max;
      break;
    case 1: // one-sided near the maximum
      x[i] = (0.5f + 0.5f * u) * float_max;
      break;
    case 2: // negative, near the maximum, and one tiny positive value
      x[i] = i == 3 ? 1e-30f : -(0.75f + 0.25f * u) * float_max;
      break;
    case 3: // subnormal magnitudes
      x[i] = (2.0f * u - 1.0f) * 1e-39f;
      break;
    case 4: // around the smallest normal, where scales turn subnormal
      x[i] = (2.0f * u - 1.0f) * 1e-36f;
      break;
    default: // magnitudes over many binades
      x[i] = (2.0f * u - 1.0f) * std::ldexp(1.0f, static_cast<int>(v * 200.0f) - 100);
      break;
    }
  }
  if (kind == 0 && n > 2) {
    x[0] = float_max;
    x[1] = -float_max;
  }
  return x;
}

/// The record of group g of the payload.
cp::quantize::record record_of(const cp::quantize& q, const std::vector<std::byte>& p,
                               std::size_t g) {
  cp::quantize::record r{0.0f, 0.0f};
  const std::size_t bytes = q.range == cp::quant_range::symmetric ? 4 : 8;
  std::memcpy(&r.a, p.data() + 64 + g * bytes, 4);
  if (bytes == 8)
    std::memcpy(&r.b, p.data() + 64 + g * bytes + 4, 4);
  return r;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("quantize: the documented error bound, and no non-finite output, from the "
            "subnormals to the float maximum") {
    int groups_checked = 0, wide_groups = 0, flushed = 0;
    double worst_excess = 0.0; // largest |x - x'| - step / 2 (nearest), in 2^-24 of the magnitude
    for (const cp::quant_range range : {cp::quant_range::symmetric, cp::quant_range::asymmetric}) {
      for (const unsigned bits : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u}) {
        if (range == cp::quant_range::symmetric && bits < 2)
          continue;
        for (const cp::rounding round : {cp::rounding::nearest, cp::rounding::stochastic}) {
          for (const std::uint32_t group : {8u, 13u, 64u}) {
            const cp::quantize q{.bits = bits,
                                 .granularity = cp::scale_granularity::block,
                                 .group = group,
                                 .range = range,
                                 .round = round};
            for (int kind = 0; kind < 6; ++kind) {
              const std::size_t n = 6 * group;
              const std::vector<float> x = group_values(n, kind, bits * 7 + group);
              std::vector<std::byte> p(cp::max_payload_bytes(q, n));
              cp::encode(cp::cpu::seq, q, {.seed = 3, .step = 1}, std::span<const float>(x),
                         std::span(p));
              std::vector<float> y(n);
              cp::decode(cp::cpu::seq, q, std::span<const std::byte>(p), std::span(y));
              for (std::size_t g = 0; g < n / group; ++g) {
                const std::size_t first = g * group, last = first + group;
                double lo = INFINITY, hi = -INFINITY, absmax = 0.0;
                for (std::size_t i = first; i < last; ++i) {
                  lo = std::min(lo, static_cast<double>(x[i]));
                  hi = std::max(hi, static_cast<double>(x[i]));
                  absmax = std::max(absmax, std::fabs(static_cast<double>(x[i])));
                }
                const cp::quantize::record r = record_of(q, p, g);
                const bool wide = range == cp::quant_range::asymmetric && r.b < 0.0f;
                wide_groups += wide ? 1 : 0;
                double half, bound;
                bool flush;
                // Nearest rounding is off by at most half a step, stochastic by less than one.
                const double steps = round == cp::rounding::nearest ? 0.5 : 1.0;
                if (range == cp::quant_range::symmetric) {
                  half = r.a * steps;
                  bound = half + std::ldexp(absmax, -21) + std::ldexp(1.0, -140);
                  flush = absmax < std::ldexp(static_cast<double>((1u << (bits - 1)) - 1), -128);
                } else {
                  const double step = wide ? -2.0 * r.b : r.b;
                  half = step * steps;
                  bound = half + std::ldexp(std::max(std::fabs(lo), std::fabs(hi)), -20) +
                          std::ldexp(1.0, -140);
                  flush = hi - lo < std::ldexp(static_cast<double>((1u << bits) - 1), -128);
                }
                flushed += flush ? 1 : 0;
                for (std::size_t i = first; i < last; ++i) {
                  CAPTURE(bits);
                  CAPTURE(group);
                  CAPTURE(kind);
                  CAPTURE(static_cast<int>(range));
                  CAPTURE(static_cast<int>(round));
                  CAPTURE(x[i]);
                  CAPTURE(y[i]);
                  REQUIRE(std::isfinite(y[i]));
                  const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
                  if (flush) {
                    CHECK(err <= (range == cp::quant_range::symmetric ? absmax : hi - lo));
                    continue;
                  }
                  CHECK(err <= bound);
                  const double mag = range == cp::quant_range::symmetric
                                         ? absmax
                                         : std::max(std::fabs(lo), std::fabs(hi));
                  if (mag > 1e-30 && round == cp::rounding::nearest)
                    worst_excess = std::max(worst_excess, (err - half) / std::ldexp(mag, -24));
                }
                ++groups_checked;
              }
            }
          }
        }
      }
    }
    MESSAGE("groups " << groups_checked << ", wide " << wide_groups << ", flushed " << flushed
                      << "; largest rounding excess over half a step: " << worst_excess
                      << " x 2^-24 of the group's magnitude");
    CHECK(wide_groups > 50); // the wide-group rule was exercised
    CHECK(groups_checked > 3000);
  }

  TEST_CASE("quantize: groups at the float maximum decode finitely, seq and par alike") {
    for (const cp::quant_range range : {cp::quant_range::symmetric, cp::quant_range::asymmetric}) {
      for (const unsigned bits : {2u, 5u, 6u, 7u, 8u}) {
        for (const cp::scale_granularity g :
             {cp::scale_granularity::tensor, cp::scale_granularity::block}) {
          const cp::quantize q{.bits = bits,
                               .granularity = g,
                               .group = g == cp::scale_granularity::tensor ? 0u : 32u,
                               .range = range};
          std::vector<float> x(4096);
          for (std::size_t i = 0; i < x.size(); ++i)
            x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * float_max *
                   (1.0f - static_cast<float>(i % 7) * 1e-7f);
          std::vector<std::byte> p(cp::max_payload_bytes(q, x.size()));
          std::vector<std::byte> pp(p.size());
          cp::encode(cp::cpu::seq, q, {}, std::span<const float>(x), std::span(p));
          cp::encode(cp::cpu::par_t{.threads = 3, .grain = 256}, q, {}, std::span<const float>(x),
                     std::span(pp));
          CHECK(p == pp);
          std::vector<float> y(x.size()), yp(x.size());
          cp::decode(cp::cpu::seq, q, std::span<const std::byte>(p), std::span(y));
          cp::decode(cp::cpu::par_t{.threads = 3, .grain = 256}, q, std::span<const std::byte>(p),
                     std::span(yp));
          CHECK(std::memcmp(y.data(), yp.data(), 4 * y.size()) == 0);
          for (const float v : y)
            CHECK(std::isfinite(v));
          std::vector<float> r = x;
          std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, q, r.size()));
          cp::roundtrip(cp::cpu::seq, q, {}, std::span(r), std::span(ws));
          CHECK(std::memcmp(r.data(), y.data(), 4 * y.size()) == 0);
        }
      }
    }
  }
}
