// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {
// x[i] = i + 1 (exact in every dtype below 257): the decoded non-zeros name their indices.
std::vector<float> ramp(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(i + 1);
  return x;
}

std::vector<float> sample(std::size_t n, std::uint32_t stream = 1) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(8, stream);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 20.0f;
  return x;
}

template <class T>
std::vector<std::byte> encode_vec(const cp::random_k& c, const std::vector<T>& x, cp::context ctx) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), std::span(p));
  return p;
}

std::vector<float> decode_vec(const cp::random_k& c, const std::vector<std::byte>& p,
                              std::size_t n) {
  std::vector<float> y(n, 42.0f);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

// The kept indices, read off the decoded ramp.
std::vector<std::size_t> kept_indices(const cp::random_k& c, std::size_t n, cp::context ctx) {
  const auto y = decode_vec(c, encode_vec(c, ramp(n), ctx), n);
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < n; ++i)
    if (y[i] != 0.0f)
      idx.push_back(i);
  return idx;
}
} // namespace

TEST_SUITE("compress") {
  TEST_CASE("random_k: keeps exactly k distinct elements, one per stratum, values unchanged") {
    for (std::size_t n : {1u, 7u, 1000u, 1003u, 1000003u}) {
      for (std::uint64_t k : {1u, 3u, 100u}) {
        const cp::random_k c{.count = k};
        const std::uint64_t kk = std::min<std::uint64_t>(k, n);
        CAPTURE(n);
        CAPTURE(k);
        const auto x = sample(n);
        const auto p = encode_vec(c, x, {.seed = 1, .step = 2, .tensor_id = 3});
        CHECK(p.size() == 64 + 4 * kk);
        const auto y = decode_vec(c, p, n);
        std::vector<std::size_t> per_stratum(kk, 0);
        std::size_t nonzero = 0;
        for (std::size_t i = 0; i < n; ++i) {
          if (y[i] == 0.0f)
            continue;
          REQUIRE(y[i] == x[i]);
          ++nonzero;
          // Stratum j is [floor(j n / k), floor((j + 1) n / k)).
          std::size_t j = static_cast<std::size_t>(static_cast<double>(i) * kk / n);
          while (j + 1 < kk && (j + 1) * n / kk <= i)
            ++j;
          while (j * n / kk > i)
            --j;
          ++per_stratum[j];
        }
        CHECK(nonzero == kk);
        for (std::size_t cnt : per_stratum)
          REQUIRE(cnt == 1);
      }
    }
  }

  TEST_CASE("random_k: the same seed, step and tensor id choose the same indices (S5)") {
    const cp::random_k c{.fraction = 0.05f};
    const std::size_t n = 2000;
    const cp::context ctx{.seed = 11, .step = 7, .tensor_id = 4};
    const auto a = kept_indices(c, n, ctx);
    CHECK(a.size() == c.kept(n));
    CHECK(kept_indices(c, n, ctx) == a);
    CHECK(kept_indices(c, n, {.seed = 11, .step = 8, .tensor_id = 4}) != a);
    CHECK(kept_indices(c, n, {.seed = 11, .step = 7, .tensor_id = 5}) != a);
    CHECK(kept_indices(c, n, {.seed = 12, .step = 7, .tensor_id = 4}) != a);
  }

  TEST_CASE("random_k: value arrays of ranks sharing a context sum like their inputs") {
    // What lets random-k go through a plain all-reduce: body(x1) + body(x2) == body(x1 + x2).
    const std::size_t n = 5000;
    const auto x1 = sample(n, 1);
    const auto x2 = sample(n, 2);
    std::vector<float> sum(n);
    for (std::size_t i = 0; i < n; ++i)
      sum[i] = x1[i] + x2[i];
    const cp::random_k c{.count = 250};
    const cp::context ctx{.seed = 3, .step = 99};
    const auto p1 = encode_vec(c, x1, ctx);
    const auto p2 = encode_vec(c, x2, ctx);
    const auto ps = encode_vec(c, sum, ctx);
    for (std::size_t j = 0; j < 250; ++j) {
      float a, b, s;
      std::memcpy(&a, p1.data() + 64 + 4 * j, 4);
      std::memcpy(&b, p2.data() + 64 + 4 * j, 4);
      std::memcpy(&s, ps.data() + 64 + 4 * j, 4);
      REQUIRE(a + b == s);
    }
  }

  TEST_CASE("random_k: the unbiased mode's mean over many steps approaches x (S3)") {
    for (std::size_t n : {100u, 103u}) { // k divides n, and strata of 10 and 11 elements
      const std::size_t k = 10;
      const std::size_t steps = 20000;
      const auto x = sample(n);
      const cp::random_k c{.count = k, .unbiased = true};
      std::vector<double> mean(n, 0.0);
      std::vector<float> z(n);
      for (std::size_t t = 0; t < steps; ++t) {
        z = x;
        cp::roundtrip(cp::cpu::seq, c, {.seed = 5, .step = t}, std::span(z), {});
        std::size_t nonzero = 0;
        for (std::size_t i = 0; i < n; ++i) {
          mean[i] += z[i];
          nonzero += z[i] != 0.0f ? 1u : 0u;
        }
        REQUIRE(nonzero == k);
      }
      CAPTURE(n);
      for (std::size_t i = 0; i < n; ++i) {
        // Kept with p = 1/s and then scaled by s: the mean's standard deviation is
        // |x| sqrt((s - 1) / steps); allow 5 of them (s = 11 bounds both stratum sizes).
        REQUIRE(std::fabs(mean[i] / steps - x[i]) <=
                5.0 * std::fabs(x[i]) * std::sqrt(10.0 / steps));
      }
    }
  }

  TEST_CASE("random_k: unscaled, E||x - C(x)||^2 approaches (1 - k/d) ||x||^2 (S4)") {
    const std::size_t n = 1000;
    const std::size_t k = 100;
    const std::size_t steps = 4000;
    const auto x = sample(n);
    double norm = 0.0;
    for (float v : x)
      norm += static_cast<double>(v) * v;
    const cp::random_k c{.count = k};
    double err = 0.0;
    std::vector<float> z(n);
    for (std::size_t t = 0; t < steps; ++t) {
      z = x;
      cp::roundtrip(cp::cpu::seq, c, {.seed = 6, .step = t}, std::span(z), {});
      for (std::size_t i = 0; i < n; ++i)
        err += (static_cast<double>(x[i]) - z[i]) * (static_cast<double>(x[i]) - z[i]);
    }
    CHECK(err / steps == doctest::Approx(0.9 * norm).epsilon(0.002));
  }

  TEST_CASE_TEMPLATE("random_k: decodes every element dtype with every value dtype", T, float,
                     cp::half, cp::bfloat16) {
    for (std::size_t n : {0u, 1u, 7u, 1000003u}) {
      const auto xf = sample(n, 2);
      std::vector<T> x(n);
      for (std::size_t i = 0; i < n; ++i)
        x[i] = cp::from_float<T>(xf[i]);
      for (cp::dtype vd : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16}) {
        for (bool unbiased : {false, true}) {
          CAPTURE(n);
          CAPTURE(static_cast<int>(vd));
          const cp::random_k c{.fraction = 0.01f, .unbiased = unbiased, .values = vd};
          const cp::context ctx{.seed = 2, .step = 3, .tensor_id = 1};
          const auto p = encode_vec(c, x, ctx);
          CHECK(p.size() == 64 + c.kept(n) * (vd == cp::dtype::f32 ? 4 : 2));
          std::vector<T> y(n);
          cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
          // Reference: regenerate the strata from their definition.
          std::vector<T> want(n, cp::from_float<T>(0.0f));
          const std::uint64_t k = c.kept(n);
          const auto key = cp::make_rng_key(2, 1);
          for (std::uint64_t j = 0; j < k; ++j) {
            const std::uint64_t start = j * n / k; // no overflow at these sizes
            const std::uint64_t size = (j + 1) * n / k - start;
            const std::uint64_t i =
                start + ((std::uint64_t{cp::random_u32(key, 3, j)} * size) >> 32);
            const float v = cp::to_float(x[i]);
            float w = vd == cp::dtype::f32   ? v
                      : vd == cp::dtype::f16 ? cp::to_float(cp::to_half(v))
                                             : cp::to_float(cp::to_bfloat16(v));
            if (unbiased)
              w *= static_cast<float>(size);
            want[i] = cp::from_float<T>(w);
          }
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < n; ++i)
            wrong += y[i] == want[i] ? 0u : 1u;
          CHECK(wrong == 0);
        }
      }
    }
  }

  TEST_CASE("random_k: decode_accumulate adds weight * decoded and roundtrip equals "
            "decode(encode)") {
    const std::size_t n = 10007;
    const auto x = sample(n, 3);
    for (bool unbiased : {false, true}) {
      const cp::random_k c{.count = 1000, .unbiased = unbiased, .values = cp::dtype::f16};
      const cp::context ctx{.seed = 4, .step = 1, .tensor_id = 2};
      const auto p = encode_vec(c, x, ctx);
      const auto y = decode_vec(c, p, n);
      std::vector<float> acc(n);
      for (std::size_t i = 0; i < n; ++i)
        acc[i] = static_cast<float>(i % 5) - 2.0f;
      const auto acc0 = acc;
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), -0.5f);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(acc[i] == acc0[i] + -0.5f * y[i]);
      std::vector<float> z = x;
      cp::roundtrip(cp::cpu::seq, c, ctx, std::span(z), {});
      CHECK(std::memcmp(z.data(), y.data(), n * sizeof(float)) == 0);
    }
  }

  TEST_CASE("random_k: counts every non-finite input, kept or not") {
    std::vector<float> x(100, 1.0f);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[70] = -std::numeric_limits<float>::infinity();
    const cp::random_k c{.count = 100}; // keeps all, so the kept NaN shows in the output
    for (auto policy : {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
      std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
      const auto r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = policy},
                                std::span<const float>(x), std::span(p));
      CHECK(r.nonfinite == 2);
      const auto y = decode_vec(c, p, x.size());
      if (policy == cp::nonfinite_policy::propagate) {
        CHECK(std::isnan(y[3]));
        CHECK(y[70] == -std::numeric_limits<float>::infinity());
      } else {
        CHECK(y[3] == 0.0f);
        CHECK(y[70] == 0.0f);
      }
      std::vector<float> z = x;
      CHECK(cp::roundtrip(cp::cpu::seq, c, {.on_nonfinite = policy}, std::span(z), {}).nonfinite ==
            2);
    }
    const cp::random_k sparse{.count = 1};
    std::vector<std::byte> p(cp::max_payload_bytes(sparse, x.size()));
    CHECK(cp::encode(cp::cpu::seq, sparse, {}, std::span<const float>(x), std::span(p)).nonfinite ==
          2);
  }

  TEST_CASE_TEMPLATE("random_k: counts the NaN and Inf of every element type at any length, and "
                     "no denormal or largest finite value",
                     T, float, cp::half, cp::bfloat16) {
    // The largest finite value and the least denormal of T, from their bits.
    const auto of_bits = [](std::uint32_t f32, std::uint16_t f16, std::uint16_t bf16) {
      if constexpr (std::is_same_v<T, float>)
        return std::bit_cast<float>(f32);
      else if constexpr (std::is_same_v<T, cp::half>)
        return cp::half{f16};
      else
        return cp::bfloat16{bf16};
    };
    const T largest = of_bits(0x7f7fffffu, 0x7bff, 0x7f7f);
    const T denormal = of_bits(1u, 1, 1);
    for (std::size_t n : {1u, 15u, 100u, 4099u}) {
      std::vector<T> x(n, cp::from_float<T>(-1.5f));
      for (std::size_t i = 0; i < n; ++i) {
        if (i % 7 == 1)
          x[i] = denormal;
        if (i % 11 == 2)
          x[i] = largest;
        if (i % 97 == 3)
          x[i] = cp::from_float<T>(std::numeric_limits<float>::quiet_NaN());
        if (i % 89 == 5)
          x[i] = cp::from_float<T>(-std::numeric_limits<float>::infinity());
      }
      x[n - 1] = cp::from_float<T>(std::numeric_limits<float>::infinity()); // past every vector
      std::size_t want = 0;
      for (const T v : x)
        want += std::isfinite(cp::to_float(v)) ? 0u : 1u;
      CAPTURE(n);
      for (const cp::random_k& c : {cp::random_k{.count = 1}, cp::random_k{.fraction = 0.1f}}) {
        std::vector<std::byte> p(cp::max_payload_bytes(c, n));
        CHECK(cp::encode(cp::cpu::seq, c, {}, std::span<const T>(x), std::span(p)).nonfinite ==
              want);
      }
    }
  }

  TEST_CASE("random_k: strata and picks stay exact beyond 2^32 elements") {
    const std::uint64_t n = (std::uint64_t{1} << 40) + 3;
    const std::uint64_t k = (std::uint64_t{1} << 33) - 1;
    CHECK(cp::random_k::stratum_start(0, n, k) == 0);
    CHECK(cp::random_k::stratum_start(k, n, k) == n);
    // n / k = 128.0000000153: the last stratum holds n - floor((k - 1) n / k) = 129; computing
    // (k - 1) * n in 64 bits would wrap around.
    CHECK(n - cp::random_k::stratum_start(k - 1, n, k) == 129);
    CHECK(cp::random_k::stratum_start(k / 2, n, k) == 549755813825u); // by Python
    const std::uint64_t big = (std::uint64_t{1} << 36) + 5;
    CHECK(cp::random_k::pick(7, big, 0) == 7);
    CHECK(cp::random_k::pick(7, big, 0xffffffffu) == 7 + big - 17); // floor((2^32-1) big / 2^32)
    CHECK(cp::random_k::pick(0, big, 0x80000000u) == big / 2);
  }

  TEST_CASE("random_k: refuses other configurations and codecs, and bad configurations") {
    const auto x = sample(1000);
    const cp::random_k c{.fraction = 0.1f};
    const auto p = encode_vec(c, x, {});
    std::vector<float> y(x.size(), 3.0f);
    auto code_of = [&](auto&& call) {
      try {
        call();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    for (const cp::random_k& other : {cp::random_k{.fraction = 0.2f}, cp::random_k{.count = 100},
                                      cp::random_k{.fraction = 0.1f, .unbiased = true},
                                      cp::random_k{.fraction = 0.1f, .values = cp::dtype::bf16}})
      CHECK(code_of([&] {
              cp::decode(cp::cpu::seq, other, std::span<const std::byte>(p), std::span(y));
            }) == cp::errc::codec_mismatch);
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::top_k{.fraction = 0.1f}, std::span<const std::byte>(p),
                       std::span(y));
          }) == cp::errc::codec_mismatch);
    for (float v : y)
      REQUIRE(v == 3.0f);

    std::vector<std::byte> out(8192);
    for (const cp::random_k& bad :
         {cp::random_k{.fraction = -1.0f}, cp::random_k{.fraction = 2.0f},
          cp::random_k{.fraction = std::numeric_limits<float>::quiet_NaN()},
          cp::random_k{.values = static_cast<cp::dtype>(0)}}) {
      CHECK(bad.can_implement(x.size()).code == cp::errc::invalid_argument);
      CHECK(code_of([&] {
              cp::encode(cp::cpu::seq, bad, {}, std::span<const float>(x), std::span(out));
            }) == cp::errc::invalid_argument);
    }
  }
}
