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

std::vector<float> signal(std::size_t n, std::uint64_t step) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(21, 3);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f) * 8.0f;
  return x;
}

using bytes = std::vector<std::byte>;

/// One EF21 step: sender encodes x, receiver decodes into `out`; returns the payload.
template <class Pipe>
bytes transfer(const Pipe& pipe, cp::ef21_state& tx, cp::ef21_state& rx,
               const std::vector<float>& x, std::vector<float>& out, std::uint64_t step,
               cp::nonfinite_policy policy = cp::nonfinite_policy::propagate) {
  const std::size_t n = x.size();
  bytes p(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
  const auto r = cp::encode(cp::cpu::seq, pipe, tx, {.step = step, .on_nonfinite = policy},
                            std::span<const float>(x), std::span(p), std::span(ws));
  p.resize(r.bytes);
  cp::decode(cp::cpu::seq, pipe, rx, std::span<const std::byte>(p), std::span(out), std::span(ws));
  return p;
}

double squared_distance(const std::vector<float>& a, std::span<const float> b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return s;
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE("ef21: with the identity codec the first output is the target") {
    const cp::pipeline<cp::ef21, cp::identity> pipe{};
    const std::size_t n = 513;
    auto tx = pipe.make_state(n);
    auto rx = pipe.make_receiver_state(n);
    const auto u = signal(n, 0);
    std::vector<float> out(n);
    transfer(pipe, tx, rx, u, out, 0);
    CHECK(out == u);
    CHECK(tx == rx);
  }

  TEST_CASE("ef21: top-k reaches a constant target exactly in ceil(d/k) steps") {
    const std::size_t d = 100, k = 7, steps = (d + k - 1) / k;
    const cp::pipeline<cp::ef21, cp::top_k> pipe{{}, {.count = k}};
    auto tx = pipe.make_state(d);
    auto rx = pipe.make_receiver_state(d);
    const auto u = signal(d, 0);
    std::vector<float> out(d);
    double prev = squared_distance(u, tx.mirror());
    for (std::size_t t = 0; t < steps; ++t) {
      const std::vector<float> before(rx.mirror().begin(), rx.mirror().end());
      const bytes p = transfer(pipe, tx, rx, u, out, t);
      // g^{t+1} - g^t == C(u - g^t): the increment is exactly the decoded payload.
      std::vector<float> inc(d);
      cp::decode(cp::cpu::seq, pipe.codec, std::span<const std::byte>(p), std::span(inc));
      for (std::size_t i = 0; i < d; ++i)
        REQUIRE(rx.mirror()[i] == before[i] + inc[i]);
      REQUIRE(tx == rx);
      REQUIRE(std::span<const float>(out).size() == d);
      for (std::size_t i = 0; i < d; ++i)
        REQUIRE(out[i] == rx.mirror()[i]);
      const double dist = squared_distance(u, rx.mirror());
      REQUIRE(dist <= prev);
      prev = dist;
      if (t + 1 < steps)
        REQUIRE(out != u);
    }
    CHECK(out == u);
  }

  TEST_CASE("ef21: sender and receiver mirrors stay bitwise equal under a changing input") {
    const cp::pipeline<cp::ef21, cp::quantize> qpipe{{}, {.bits = 3, .group = 32}};
    const cp::pipeline<cp::ef21, cp::cast> cpipe{{}, {.to = cp::dtype::f16}};
    const std::size_t n = 1000;
    auto qtx = qpipe.make_state(n), qrx = qpipe.make_receiver_state(n);
    auto ctx = cpipe.make_state(n), crx = cpipe.make_receiver_state(n);
    std::vector<float> out(n);
    for (std::uint64_t t = 0; t < 30; ++t) {
      const auto x = signal(n, t);
      transfer(qpipe, qtx, qrx, x, out, t);
      REQUIRE(qtx == qrx);
      transfer(cpipe, ctx, crx, x, out, t);
      REQUIRE(ctx == crx);
    }
  }

  TEST_CASE("ef21: NaN inputs never enter either mirror") {
    const cp::pipeline<cp::ef21, cp::top_k> pipe{{}, {.fraction = 0.5f}};
    const std::size_t n = 64;
    auto tx = pipe.make_state(n), rx = pipe.make_receiver_state(n);
    std::vector<float> out(n);
    transfer(pipe, tx, rx, signal(n, 0), out, 0);
    const auto before = rx;
    auto x = signal(n, 1);
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[6] = -std::numeric_limits<float>::infinity();
    transfer(pipe, tx, rx, x, out, 1);
    CHECK(tx == rx);
    CHECK(rx.mirror()[5] == before.mirror()[5]);
    CHECK(rx.mirror()[6] == before.mirror()[6]);
    for (float a : rx.mirror())
      REQUIRE(std::isfinite(a));
  }

  TEST_CASE("ef21: the data-parallel server mirror is the mean of the worker mirrors") {
    const cp::pipeline<cp::ef21, cp::top_k> pipe{{}, {.fraction = 0.25f}};
    const std::size_t n = 256, workers = 4;
    std::vector<cp::ef21_state> w(workers, pipe.make_state(n));
    auto server = pipe.make_receiver_state(n);
    bytes ws(pipe.workspace_bytes(n));
    for (std::uint64_t t = 0; t < 6; ++t) {
      for (std::size_t r = 0; r < workers; ++r) {
        const auto g = signal(n, 100 * r + t);
        bytes p(pipe.max_payload_bytes(n));
        cp::encode(cp::cpu::seq, pipe, w[r], {.step = t}, std::span<const float>(g), std::span(p),
                   std::span(ws));
        cp::decode_accumulate(cp::cpu::seq, pipe, server, std::span<const std::byte>(p),
                              1.0f / workers, std::span(ws));
      }
      for (std::size_t i = 0; i < n; ++i) {
        double mean = 0.0, mag = 0.0;
        for (const auto& s : w) {
          mean += s.mirror()[i] / static_cast<double>(workers);
          mag += std::fabs(s.mirror()[i]);
        }
        REQUIRE(std::fabs(server.mirror()[i] - mean) <= 1e-6 * (1.0 + mag) * (t + 1));
      }
    }
  }
}
