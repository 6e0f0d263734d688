// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "commpress/core/rng.hpp"
#include "commpress/optim/sgd.hpp"

namespace cp = commpress;

namespace {

std::vector<float> sample(std::size_t n, std::uint64_t seed, float span) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(seed, 5);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * span;
  return x;
}

/// torch.optim.SGD written out in double, one tensor.
struct sgd_reference {
  cp::sgd cfg;
  std::vector<double> buf;
  bool first = true;

  void step(std::vector<double>& p, const std::vector<float>& g) {
    if (buf.empty())
      buf.assign(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + double{cfg.weight_decay} * p[i];
      if (cfg.momentum != 0.0f) {
        buf[i] = first ? d : cfg.momentum * buf[i] + (1.0 - cfg.dampening) * d;
        d = cfg.nesterov ? d + cfg.momentum * buf[i] : buf[i];
      }
      p[i] -= double{cfg.lr} * d;
    }
    first = false;
  }
};

/// Runs `steps` updates of `cfg` and of the double reference on the same gradients and returns
/// the largest relative difference.
double max_rel_error(const cp::sgd& cfg, int steps) {
  const std::size_t n = 257;
  std::vector<float> p = sample(n, 1, 4.0f);
  std::vector<double> ref(p.begin(), p.end());
  auto state = cfg.make_state(n);
  sgd_reference r{cfg, {}, true};
  for (int t = 0; t < steps; ++t) {
    const auto g = sample(n, 100 + static_cast<std::uint64_t>(t), 2.0f);
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    r.step(ref, g);
  }
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(p[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
  return worst;
}

} // namespace

TEST_SUITE("optim") {
  TEST_CASE("sgd: matches a double-precision reference over ten steps for every variant") {
    const cp::sgd variants[] = {
        {.lr = 0.1f},
        {.lr = 0.05f, .weight_decay = 0.01f},
        {.lr = 0.05f, .momentum = 0.9f},
        {.lr = 0.05f, .momentum = 0.9f, .dampening = 0.3f, .weight_decay = 1e-3f},
        {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true},
    };
    for (const auto& cfg : variants)
      CHECK(max_rel_error(cfg, 10) < 2e-6);
  }

  TEST_CASE("sgd: momentum buffer starts as the first gradient, as in PyTorch") {
    // torch.optim.SGD([p], lr=0.1, momentum=0.9) with p = 1 and a constant gradient of 1:
    // buf = 1, 1.9, 2.71 and p = 0.9, 0.71, 0.439.
    const cp::sgd cfg{.lr = 0.1f, .momentum = 0.9f};
    auto state = cfg.make_state(1);
    std::vector<float> p{1.0f};
    const std::vector<float> g{1.0f};
    const float expect_p[] = {0.9f, 0.71f, 0.439f};
    const float expect_buf[] = {1.0f, 1.9f, 2.71f};
    for (int t = 0; t < 3; ++t) {
      cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
      CHECK(p[0] == doctest::Approx(expect_p[t]).epsilon(1e-6));
      CHECK(state.momentum[0] == doctest::Approx(expect_buf[t]).epsilon(1e-6));
    }
    CHECK(state.step == 3);
  }

  TEST_CASE("sgd: dampening does not apply on the first step") {
    // PyTorch clones d into the buffer on the first step: buf = 1, then 0.9*1 + 0.5*1 = 1.4.
    const cp::sgd cfg{.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f};
    auto state = cfg.make_state(1);
    std::vector<float> p{0.0f};
    const std::vector<float> g{1.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(state.momentum[0] == 1.0f);
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(state.momentum[0] == doctest::Approx(1.4f).epsilon(1e-6));
  }

  TEST_CASE("sgd: nesterov steps along d + momentum * buf") {
    // p = 1, g = 1, lr = 0.1, momentum = 0.9: d = 1.9 then 2.71, so p = 0.81 then 0.539.
    const cp::sgd cfg{.lr = 0.1f, .momentum = 0.9f, .nesterov = true};
    auto state = cfg.make_state(1);
    std::vector<float> p{1.0f};
    const std::vector<float> g{1.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == doctest::Approx(0.81f).epsilon(1e-6));
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == doctest::Approx(0.539f).epsilon(1e-6));
  }

  TEST_CASE("sgd: weight decay shrinks parameters geometrically when the gradient is zero") {
    const cp::sgd cfg{.lr = 0.1f, .weight_decay = 0.5f};
    auto state = cfg.make_state(2);
    std::vector<float> p{1.0f, -2.0f};
    const std::vector<float> g{0.0f, 0.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == doctest::Approx(0.9025f).epsilon(1e-6));
    CHECK(p[1] == doctest::Approx(-1.805f).epsilon(1e-6));
    CHECK(state.momentum.empty());
  }

  TEST_CASE("sgd: plain step is p - lr * g exactly, element by element") {
    const cp::sgd cfg{.lr = 0.01f};
    const auto g = sample(1000, 7, 2.0f);
    std::vector<float> p = sample(1000, 8, 2.0f);
    const std::vector<float> before = p;
    auto state = cfg.make_state(p.size());
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    for (std::size_t i = 0; i < p.size(); ++i)
      REQUIRE(p[i] == before[i] - 0.01f * g[i]);
  }

  TEST_CASE("sgd: rejects invalid hyperparameters and mismatched views") {
    CHECK(cp::sgd{.nesterov = true}.can_implement(1).code == cp::errc::invalid_argument);
    CHECK(cp::sgd{.momentum = 0.9f, .dampening = 0.1f, .nesterov = true}.can_implement(1).code ==
          cp::errc::invalid_argument);
    CHECK(cp::sgd{.lr = -1.0f}.can_implement(1).code == cp::errc::invalid_argument);
    CHECK(cp::sgd{.momentum = 0.9f, .nesterov = true}.can_implement(1));
    const cp::sgd cfg{.lr = 0.1f, .momentum = 0.9f};
    auto state = cfg.make_state(4);
    std::vector<float> p(4), g(3);
    try {
      cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
      FAIL("expected an error");
    } catch (const cp::error& e) {
      CHECK(e.code() == cp::errc::size_mismatch);
      CHECK(std::string(e.what()).rfind("commpress: sgd: ", 0) == 0);
    }
    CHECK(state.step == 0);
  }
}

TEST_SUITE("optim") {
  TEST_CASE("sgd_state: save then load restores the buffer and the first-step flag") {
    const cp::sgd cfg{.lr = 0.1f, .momentum = 0.9f};
    auto a = cfg.make_state(16);
    std::vector<float> p = sample(16, 3, 1.0f);
    const auto g = sample(16, 4, 1.0f);
    cfg.step(cp::cpu::seq, a, std::span(p), std::span<const float>(g));
    auto b = cfg.make_state(16);
    b.load(a.save(9), 9);
    CHECK(b == a);
    CHECK(b.step == 1);
    // A state made without momentum has another shape and refuses the blob.
    auto plain = cp::sgd{.lr = 0.1f}.make_state(16);
    CHECK_THROWS_AS(plain.load(a.save(9), 9), cp::error);
  }
}
