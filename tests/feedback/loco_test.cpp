// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

std::vector<float> gradient(std::size_t n, std::uint64_t step) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(31, 4);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f) * 2.0f;
  return x;
}

using bytes = std::vector<std::byte>;

template <class Pipe>
bytes step(const Pipe& pipe, typename Pipe::sender_state& st, const std::vector<float>& g,
           std::uint64_t t, cp::step_result* res = nullptr) {
  bytes p(pipe.max_payload_bytes(g.size())), ws(pipe.workspace_bytes(g.size()));
  const auto r = cp::encode(cp::cpu::seq, pipe, st, {.seed = 1, .step = t, .tensor_id = 2},
                            std::span<const float>(g), std::span(p), std::span(ws));
  p.resize(r.bytes);
  if (res)
    *res = r;
  return p;
}

template <class S> std::vector<float> error_of(const cp::loco_state<S>& st) {
  std::vector<float> e(st.size());
  st.error(e);
  return e;
}

/// E7 telescoping: Σ deQ(q_t) + e_T/(1−β) = Σ g_t per element, checked in fp64. The tolerance
/// is derived step by step: the float rounding of h = g + e, of r = h − deQ and of the EMA
/// (unit roundoff u each), plus half a storage step per step for block-quantized storage,
/// all divided by (1 − β) as the identity is.
template <class S, class Codec>
void check_telescoping(float beta, const Codec& codec, std::size_t n, int steps) {
  const cp::pipeline<cp::loco<S>, Codec> pipe{{.beta = beta, .reset_every = 0}, codec};
  auto st = pipe.make_state(n);
  const double tau = 1.0 - static_cast<double>(beta);
  constexpr double u = 0x1p-24;
  std::vector<double> sum_d(n, 0.0), sum_g(n, 0.0), tol(n, 0.0);
  for (int t = 0; t < steps; ++t) {
    const auto g = gradient(n, static_cast<std::uint64_t>(t));
    const auto e = error_of(st);
    const bytes p = step(pipe, st, g, static_cast<std::uint64_t>(t));
    const auto e_new = error_of(st);
    std::vector<float> d(n);
    cp::decode(cp::cpu::seq, codec, std::span<const std::byte>(p), std::span(d));
    for (std::size_t i = 0; i < n; ++i) {
      const double h = std::fabs(static_cast<double>(g[i]) + e[i]);
      const double r = std::fabs(static_cast<double>(g[i]) + e[i] - d[i]);
      double storage = 0.0;
      if constexpr (cp::detail::is_store_int<S>)
        storage = st.storage().scales()[i / S::block] / 2;
      tol[i] +=
          2 * u * (h + r) + (2 * u * (std::fabs(e[i]) + r + std::fabs(e_new[i])) + storage) / tau;
      sum_d[i] += d[i];
      sum_g[i] += g[i];
    }
  }
  const auto e_T = error_of(st);
  for (std::size_t i = 0; i < n; ++i)
    REQUIRE(std::fabs(sum_d[i] + e_T[i] / tau - sum_g[i]) <= tol[i]);
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE("loco: beta = 0 is classic EF byte for byte") {
    const std::size_t n = 700;
    auto run = [&](auto codec) {
      using C = decltype(codec);
      const cp::pipeline<cp::loco<cp::store_f32>, C> lp{{.beta = 0.0f, .reset_every = 0}, codec};
      const cp::pipeline<cp::ef, C> ep{{}, codec};
      auto ls = lp.make_state(n);
      auto es = ep.make_state(n);
      for (std::uint64_t t = 0; t < 25; ++t) {
        const auto g = gradient(n, t);
        REQUIRE(step(lp, ls, g, t) == step(ep, es, g, t));
        const auto e = error_of(ls);
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(std::bit_cast<std::uint32_t>(e[i]) ==
                  std::bit_cast<std::uint32_t>(es.residual()[i]));
      }
    };
    run(cp::quantize{.bits = 4, .group = 128});
    run(cp::top_k{.fraction = 0.1f});
    run(cp::cast{.to = cp::dtype::bf16});
  }

  TEST_CASE("loco: sum of sent values plus e_T / (1 - beta) telescopes to the sum of gradients") {
    for (float beta : {0.0f, 0.5f, 0.8f, 0.95f}) {
      CAPTURE(beta);
      check_telescoping<cp::store_f32>(beta, cp::quantize{.bits = 4, .group = 64}, 500, 60);
      check_telescoping<cp::store_f32>(beta, cp::top_k{.fraction = 0.1f}, 500, 60);
    }
  }

  TEST_CASE("loco: with 8-bit error storage the identity holds within half a storage step per "
            "step") {
    for (float beta : {0.0f, 0.8f}) {
      CAPTURE(beta);
      check_telescoping<cp::store_int8>(beta, cp::quantize{.bits = 4, .group = 64}, 500, 60);
    }
  }

  TEST_CASE("loco: the error is exactly zero right after each reset period") {
    const std::size_t n = 300;
    const cp::pipeline<cp::loco<cp::store_int8>, cp::quantize> pipe{
        {.beta = 0.8f, .reset_every = 4}, {.bits = 2, .group = 32}};
    auto st = pipe.make_state(n);
    for (std::uint64_t t = 0; t < 12; ++t) {
      step(pipe, st, gradient(n, t), t);
      const auto e = error_of(st);
      bool all_zero = true;
      for (float v : e)
        all_zero = all_zero && std::bit_cast<std::uint32_t>(v) == 0u;
      CHECK(all_zero == ((t + 1) % 4 == 0));
    }
  }

  TEST_CASE("loco: rescale multiplies the dequantized error by the factor and drop clears it") {
    const std::size_t n = 300;
    auto check = [&](auto storage) {
      using S = decltype(storage);
      const cp::pipeline<cp::loco<S>, cp::quantize> pipe{{.beta = 0.5f, .reset_every = 0},
                                                         {.bits = 3, .group = 50}};
      auto st = pipe.make_state(n);
      for (std::uint64_t t = 0; t < 3; ++t)
        step(pipe, st, gradient(n, t), t);
      const auto before = error_of(st);
      for (float c : {2.0f, 0.25f}) {
        auto scaled = st;
        cp::rescale(scaled, c);
        const auto after = error_of(scaled);
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(after[i] == before[i] * c);
      }
      cp::drop(st);
      for (float v : error_of(st))
        REQUIRE(v == 0.0f);
    };
    check(cp::store_f32{});
    check(cp::store_int8{});
    check(cp::store_bf16{});
  }

  TEST_CASE("loco: NaN inputs never enter the error") {
    const std::size_t n = 128;
    const cp::pipeline<cp::loco<cp::store_f32>, cp::top_k> pipe{{.beta = 0.8f}, {.fraction = 0.5f}};
    auto st = pipe.make_state(n);
    step(pipe, st, gradient(n, 0), 0);
    const auto before = error_of(st);
    auto g = gradient(n, 1);
    g[17] = std::numeric_limits<float>::quiet_NaN();
    cp::step_result r;
    step(pipe, st, g, 1, &r);
    CHECK(r.nonfinite == 1);
    CHECK(r.held == 1);
    const auto e = error_of(st);
    CHECK(e[17] == before[17]);
    for (float v : e)
      REQUIRE(std::isfinite(v));
  }

  TEST_CASE("loco: beta outside [0, 1) is refused") {
    const cp::pipeline<cp::loco<>, cp::cast> pipe{{.beta = 1.0f}, {}};
    CHECK(!pipe.can_implement(10));
    auto st = pipe.make_state(10);
    CHECK_THROWS_AS(step(pipe, st, gradient(10, 0), 0), cp::error);
  }

  TEST_CASE("loco: 8-bit storage takes a quarter of fp32's memory plus the block scales") {
    CHECK(cp::loco_state<cp::store_f32>(1024).storage().memory_bytes() == 4096);
    CHECK(cp::loco_state<cp::store_int8>(1024).storage().memory_bytes() == 1024 + 8 * 4);
    CHECK(cp::loco_state<cp::store_bf16>(1024).storage().memory_bytes() == 2048);
  }
}
