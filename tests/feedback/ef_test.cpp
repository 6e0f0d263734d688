// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

std::vector<float> gradient(std::size_t n, std::uint64_t step, float amplitude = 4.0f) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(11, 2);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f) * amplitude;
  return x;
}

using bytes = std::vector<std::byte>;

/// One EF step through the pipeline; returns the payload.
template <class Pipe>
bytes ef_step(const Pipe& pipe, typename Pipe::sender_state& st, const std::vector<float>& g,
              std::uint64_t step, cp::step_result* res = nullptr) {
  bytes out(pipe.max_payload_bytes(g.size())), ws(pipe.workspace_bytes(g.size()));
  const cp::context ctx{.seed = 5, .step = step, .tensor_id = 9};
  const auto r = cp::encode(cp::cpu::seq, pipe, st, ctx, std::span<const float>(g), std::span(out),
                            std::span(ws));
  out.resize(r.bytes);
  if (res)
    *res = r;
  return out;
}

/// E1/E2 for one codec: the residual identity holds bit for bit every step and the decoded
/// outputs telescope, Σ C(h_t) = Σ g_t − e_T, in fp64 within the float rounding of h and e.
template <class Codec> void check_ef_identities(const Codec& codec, std::size_t n, int steps) {
  const cp::pipeline<cp::ef, Codec> pipe{{}, codec};
  auto st = pipe.make_state(n);
  std::vector<double> sum_c(n, 0.0), sum_g(n, 0.0), tol(n, 0.0);
  constexpr double u = 0x1p-24; // unit roundoff of float
  for (int t = 0; t < steps; ++t) {
    const auto g = gradient(n, static_cast<std::uint64_t>(t));
    const std::vector<float> e_old(st.residual().begin(), st.residual().end());
    std::vector<float> h(n);
    for (std::size_t i = 0; i < n; ++i)
      h[i] = g[i] + e_old[i];
    std::vector<float> ch = h;
    std::vector<std::byte> rws(cp::workspace_bytes(cp::cpu::seq, codec, n));
    cp::roundtrip(cp::cpu::seq, codec,
                  {.seed = 5, .step = static_cast<std::uint64_t>(t), .tensor_id = 9}, std::span(ch),
                  std::span(rws));
    const bytes p = ef_step(pipe, st, g, static_cast<std::uint64_t>(t));
    std::vector<float> dec(n);
    cp::decode(cp::cpu::seq, codec, std::span<const std::byte>(p), std::span(dec));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(dec[i] == ch[i]);                  // the payload carries C(h_t)
      REQUIRE(st.residual()[i] == h[i] - ch[i]); // E1, exact in fp32
      sum_c[i] += dec[i];
      sum_g[i] += g[i];
      tol[i] += u * (std::fabs(h[i]) + std::fabs(st.residual()[i]));
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double lhs = sum_c[i];
    const double rhs = sum_g[i] - st.residual()[i];
    REQUIRE(std::fabs(lhs - rhs) <= tol[i] + 1e-300);
  }
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE("ef: residual identity is exact and outputs telescope with a lossy codec") {
    check_ef_identities(cp::cast{.to = cp::dtype::bf16}, 1000, 40);
    check_ef_identities(cp::top_k{.fraction = 0.1f}, 1000, 40);
    check_ef_identities(cp::quantize{.bits = 2}, 1000, 40);
    check_ef_identities(cp::quantize{.bits = 4, .round = cp::rounding::stochastic}, 1000, 40);
    // blocks that start off a multiple of 8 (the unfused step: encode, decode_accumulate)
    check_ef_identities(cp::quantize{.bits = 3, .group = 100}, 1000, 40);
  }

  TEST_CASE("ef: with the identity codec the residual stays 0 and the output equals g") {
    const cp::pipeline<cp::ef, cp::identity> pipe{};
    const std::size_t n = 777;
    auto st = pipe.make_state(n);
    auto rs = pipe.make_receiver_state(n);
    for (std::uint64_t t = 0; t < 5; ++t) {
      const auto g = gradient(n, t);
      const bytes p = ef_step(pipe, st, g, t);
      std::vector<float> out(n);
      cp::decode(cp::cpu::seq, pipe, rs, std::span<const std::byte>(p), std::span(out));
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(st.residual()[i] == 0.0f);
        REQUIRE(out[i] == g[i]);
      }
    }
  }

  TEST_CASE("ef: NaN and Inf inputs never enter the residual") {
    const cp::pipeline<cp::ef, cp::quantize> pipe{{}, {.bits = 4, .group = 16}};
    const std::size_t n = 64;
    auto st = pipe.make_state(n);
    ef_step(pipe, st, gradient(n, 0), 0); // a non-zero residual
    const auto before = st;
    auto g = gradient(n, 1);
    g[3] = std::numeric_limits<float>::quiet_NaN();
    g[40] = std::numeric_limits<float>::infinity();

    SUBCASE("propagate: the poisoned quantization groups keep their previous residual") {
      cp::step_result r;
      ef_step(pipe, st, g, 1, &r);
      CHECK(r.nonfinite == 2);
      CHECK(r.held == 32); // the two 16-element groups holding NaN / Inf decode to NaN
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(st.residual()[i]));
        if (i / 16 == 0 || i / 16 == 2)
          REQUIRE(st.residual()[i] == before.residual()[i]);
      }
    }
    SUBCASE("zero_and_count: the element counts as 0 and the residual stays finite") {
      bytes out(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
      const auto r = cp::encode(cp::cpu::seq, pipe, st,
                                {.step = 1, .on_nonfinite = cp::nonfinite_policy::zero_and_count},
                                std::span<const float>(g), std::span(out), std::span(ws));
      CHECK(r.nonfinite == 2);
      CHECK(r.held == 0);
      for (float e : st.residual())
        REQUIRE(std::isfinite(e));
    }
    SUBCASE("fail: the call throws and the residual is unchanged") {
      bytes out(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
      try {
        cp::encode(cp::cpu::seq, pipe, st, {.on_nonfinite = cp::nonfinite_policy::fail},
                   std::span<const float>(g), std::span(out), std::span(ws));
        FAIL("expected commpress::error");
      } catch (const cp::error& e) {
        CHECK(e.code() == cp::errc::non_finite);
      }
      CHECK(st == before);
    }
  }

  TEST_CASE("ef: a state of another size or a short workspace is refused") {
    const cp::pipeline<cp::ef, cp::cast> pipe{};
    auto st = pipe.make_state(10);
    const auto g = gradient(11, 0);
    bytes out(pipe.max_payload_bytes(11)), ws(pipe.workspace_bytes(11));
    CHECK_THROWS_AS(cp::encode(cp::cpu::seq, pipe, st, {}, std::span<const float>(g),
                               std::span(out), std::span(ws)),
                    cp::error);
    auto ok = pipe.make_state(11);
    bytes small(8);
    try {
      cp::encode(cp::cpu::seq, pipe, ok, {}, std::span<const float>(g), std::span(out),
                 std::span(small));
      FAIL("expected commpress::error");
    } catch (const cp::error& e) {
      CHECK(e.code() == cp::errc::buffer_too_small);
    }
    CHECK(ok == pipe.make_state(11));
  }
}
