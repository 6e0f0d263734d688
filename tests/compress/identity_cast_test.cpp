// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {
std::vector<float> sample(std::size_t n) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(3, 1);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 20.0f;
  return x;
}
} // namespace

TEST_SUITE("compress") {
  TEST_CASE_TEMPLATE("identity: decode(encode(x)) == x bit for bit", T, float, cp::half,
                     cp::bfloat16) {
    for (std::size_t n : {0u, 1u, 7u, 1000003u}) {
      const auto xf = sample(n);
      std::vector<T> x(n);
      for (std::size_t i = 0; i < n; ++i)
        x[i] = cp::from_float<T>(xf[i]);
      std::vector<std::byte> p(cp::max_payload_bytes(cp::identity{}, n));
      const auto r =
          cp::encode(cp::cpu::seq, cp::identity{}, {}, std::span<const T>(x), std::span(p));
      CHECK(r.bytes == p.size());
      std::vector<T> y(n);
      cp::decode(cp::cpu::seq, cp::identity{}, std::span<const std::byte>(p), std::span(y));
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(y[i] == x[i]);
    }
  }

  TEST_CASE("cast: matches to_half / to_bfloat16 elementwise and halves the bytes") {
    const auto x = sample(1001);
    for (cp::dtype to : {cp::dtype::f16, cp::dtype::bf16}) {
      const cp::cast c{.to = to};
      std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
      CHECK(p.size() == 64 + 2 * x.size());
      cp::encode(cp::cpu::seq, c, {}, std::span<const float>(x), std::span(p));
      std::vector<float> y(x.size());
      cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float ref = to == cp::dtype::f16 ? cp::to_float(cp::to_half(x[i]))
                                               : cp::to_float(cp::to_bfloat16(x[i]));
        REQUIRE(y[i] == ref);
      }
      std::vector<float> z = x; // roundtrip == decode(encode)
      cp::roundtrip(cp::cpu::seq, c, {}, std::span(z), {});
      CHECK(z == y);
    }
  }

  TEST_CASE("cast: decode_accumulate adds weight * decoded") {
    const auto x = sample(257);
    const cp::cast c{.to = cp::dtype::bf16};
    std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
    cp::encode(cp::cpu::seq, c, {}, std::span<const float>(x), std::span(p));
    std::vector<float> acc(x.size(), 1.0f);
    cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), 0.5f);
    for (std::size_t i = 0; i < x.size(); ++i)
      REQUIRE(acc[i] == 1.0f + 0.5f * cp::to_float(cp::to_bfloat16(x[i])));
  }

  TEST_CASE("cast: non-finite inputs follow the context's policy") {
    std::vector<float> x = {1.0f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -2.0f};
    const cp::cast c{.to = cp::dtype::f16};
    std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
    std::vector<float> y(x.size());

    auto r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::propagate},
                        std::span<const float>(x), std::span(p));
    CHECK(r.nonfinite == 2);
    cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
    CHECK(std::isnan(y[1]));
    CHECK(std::isinf(y[2]));

    r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                   std::span<const float>(x), std::span(p));
    CHECK(r.nonfinite == 2);
    cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
    CHECK(y == std::vector<float>{1.0f, 0.0f, 0.0f, -2.0f});

    std::vector<std::byte> untouched(p.size(), std::byte{0x5c});
    CHECK_THROWS_AS(cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::fail},
                               std::span<const float>(x), std::span(untouched)),
                    cp::error);
    for (auto b : untouched)
      REQUIRE(b == std::byte{0x5c});
  }
}
