// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "commpress/core/rng.hpp"
#include "commpress/optim/adam.hpp"

namespace cp = commpress;

namespace {

std::vector<float> sample(std::size_t n, std::uint64_t seed, float span) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(seed, 6);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * span;
  return x;
}

/// torch.optim.Adam / AdamW written out in double, one tensor.
template <bool Decoupled> struct adam_reference {
  cp::basic_adam<Decoupled> cfg;
  std::vector<double> m, v;
  std::uint64_t t = 0;

  void step(std::vector<double>& p, const std::vector<float>& grads) {
    if (m.empty())
      m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    const double b1 = cfg.beta1, b2 = cfg.beta2, lr = cfg.lr, wd = cfg.weight_decay;
    const double bc1 = cfg.bias_correction ? 1.0 - std::pow(b1, double(t)) : 1.0;
    const double bc2 = cfg.bias_correction ? 1.0 - std::pow(b2, double(t)) : 1.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grads[i];
      if (Decoupled)
        p[i] *= 1.0 - lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + double{cfg.eps});
    }
  }
};

template <bool Decoupled> double max_rel_error(const cp::basic_adam<Decoupled>& cfg, int steps) {
  const std::size_t n = 311;
  std::vector<float> p = sample(n, 1, 4.0f);
  std::vector<double> ref(p.begin(), p.end());
  auto state = cfg.make_state(n);
  adam_reference<Decoupled> r{cfg, {}, {}, 0};
  for (int t = 0; t < steps; ++t) {
    const auto g = sample(n, 200 + static_cast<std::uint64_t>(t), 2.0f);
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
  TEST_CASE("adam: matches a double-precision reference over twenty steps") {
    CHECK(max_rel_error(cp::adam{.lr = 1e-2f}, 20) < 2e-6);
    CHECK(max_rel_error(cp::adam{.lr = 1e-2f, .weight_decay = 0.1f}, 20) < 2e-6);
    CHECK(max_rel_error(cp::adam{.lr = 1e-2f, .bias_correction = false}, 20) < 2e-6);
  }

  TEST_CASE("adamw: matches a double-precision reference over twenty steps") {
    CHECK(max_rel_error(cp::adamw{.lr = 1e-2f}, 20) < 2e-6);
    CHECK(max_rel_error(cp::adamw{.lr = 1e-2f, .beta1 = 0.8f, .weight_decay = 0.3f}, 20) < 2e-6);
  }

  TEST_CASE("adam: the first bias-corrected step moves every parameter by about lr * sign(g)") {
    // m_hat = g and v_hat = g^2 after one step, so the update is lr * g / (|g| + eps).
    const cp::adam cfg{.lr = 0.1f};
    auto state = cfg.make_state(4);
    std::vector<float> p{1.0f, 1.0f, 1.0f, 1.0f};
    const std::vector<float> g{1.0f, -2.0f, 0.5f, 0.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == doctest::Approx(0.9f).epsilon(1e-6));
    CHECK(p[1] == doctest::Approx(1.1f).epsilon(1e-6));
    CHECK(p[2] == doctest::Approx(0.9f).epsilon(1e-6));
    CHECK(p[3] == 1.0f); // zero gradient: m = 0, so no move at all
    CHECK(state.step == 1);
    CHECK(state.exp_avg[1] == doctest::Approx(-0.2f).epsilon(1e-6));
    CHECK(state.exp_avg_sq[1] == doctest::Approx(0.004f).epsilon(1e-5));
  }

  TEST_CASE("adam: without bias correction the first step is lr * (1-beta1)/sqrt(1-beta2)") {
    const cp::adam cfg{.lr = 0.1f, .eps = 0.0f, .bias_correction = false};
    auto state = cfg.make_state(1);
    std::vector<float> p{0.0f};
    const std::vector<float> g{3.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == doctest::Approx(-0.1 * 0.1 / std::sqrt(0.001)).epsilon(1e-5));
  }

  TEST_CASE("adam: L2 weight decay enters the moments, so a zero gradient still moves by lr") {
    const cp::adam cfg{.lr = 0.1f, .weight_decay = 0.01f};
    auto state = cfg.make_state(1);
    std::vector<float> p{1.0f};
    const std::vector<float> g{0.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == doctest::Approx(0.9f).epsilon(1e-5));
    CHECK(state.exp_avg[0] != 0.0f);
  }

  TEST_CASE("adamw: decoupled decay multiplies by 1 - lr*wd and leaves the moments alone") {
    const cp::adamw cfg{.lr = 0.1f, .weight_decay = 0.1f};
    auto state = cfg.make_state(1);
    std::vector<float> p{1.0f};
    const std::vector<float> g{0.0f};
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == 0.99f);
    cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
    CHECK(p[0] == 0.99f * 0.99f);
    CHECK(state.exp_avg[0] == 0.0f);
    CHECK(state.exp_avg_sq[0] == 0.0f);
  }

  TEST_CASE("adam: the element loop is the documented arithmetic, bit for bit") {
    const cp::adamw cfg{.lr = 3e-3f, .weight_decay = 0.05f};
    const std::size_t n = 1000;
    std::vector<float> p = sample(n, 9, 2.0f);
    std::vector<float> q = p, m(n, 0.0f), v(n, 0.0f);
    auto state = cfg.make_state(n);
    for (std::uint64_t t = 1; t <= 3; ++t) {
      const auto g = sample(n, 300 + t, 1.0f);
      cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g));
      const float step_size = float(3e-3f / (1.0 - std::pow(double{0.9f}, double(t))));
      const float bc2 = float(std::sqrt(1.0 - std::pow(double{0.999f}, double(t))));
      const float decay = float(1.0 - double{3e-3f} * double{0.05f});
      for (std::size_t i = 0; i < n; ++i) {
        q[i] = q[i] * decay;
        m[i] = 0.9f * m[i] + (1.0f - 0.9f) * g[i];
        v[i] = 0.999f * v[i] + (1.0f - 0.999f) * g[i] * g[i];
        q[i] = q[i] - step_size * (m[i] / (std::sqrt(v[i]) / bc2 + 1e-8f));
      }
    }
    CHECK(p == q);
    CHECK(state.exp_avg == m);
    CHECK(state.exp_avg_sq == v);
  }

  TEST_CASE("adam: rejects betas outside [0, 1) and mismatched views") {
    CHECK(cp::adam{.beta1 = 1.0f}.can_implement(1).code == cp::errc::invalid_argument);
    CHECK(cp::adamw{.beta2 = -0.1f}.can_implement(1).code == cp::errc::invalid_argument);
    CHECK(cp::adam{.eps = -1.0f}.can_implement(1).code == cp::errc::invalid_argument);
    const cp::adam cfg{};
    auto state = cfg.make_state(3);
    std::vector<float> p(2), g(2);
    CHECK_THROWS_AS(cfg.step(cp::cpu::seq, state, std::span(p), std::span<const float>(g)),
                    cp::error);
  }
}

TEST_SUITE("optim") {
  TEST_CASE("adam_state: save then load resumes training bit for bit") {
    const cp::adamw cfg{.lr = 1e-2f};
    const std::size_t n = 64;
    std::vector<float> p = sample(n, 11, 2.0f), q;
    auto a = cfg.make_state(n);
    auto b = cfg.make_state(n);
    std::vector<std::byte> blob;
    for (std::uint64_t t = 0; t < 5; ++t) {
      const auto g = sample(n, 400 + t, 1.0f);
      if (t == 3) {
        blob = a.save(42);
        b.load(blob, 42);
        q = p;
      }
      cfg.step(cp::cpu::seq, a, std::span(p), std::span<const float>(g));
      if (t >= 3)
        cfg.step(cp::cpu::seq, b, std::span(q), std::span<const float>(g));
    }
    CHECK(b == a);
    CHECK(q == p);
    CHECK(b.step == 5);
  }

  TEST_CASE("adam_state: a corrupted, foreign or resized blob is refused and changes nothing") {
    const cp::adam cfg{};
    auto a = cfg.make_state(8);
    a.step = 7;
    a.exp_avg[3] = 1.5f;
    auto blob = a.save(1);
    auto fresh = cfg.make_state(8);
    const auto untouched = fresh;
    auto code_of = [&](auto&& fn) {
      try {
        fn();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    CHECK(code_of([&] { fresh.load(blob, 2); }) == cp::errc::stream_mismatch);
    auto other = cfg.make_state(9);
    CHECK(code_of([&] { other.load(blob, 1); }) == cp::errc::size_mismatch);
    blob[40] ^= std::byte{1};
    CHECK(code_of([&] { fresh.load(blob, 1); }) == cp::errc::checksum_mismatch);
    CHECK(fresh == untouched);
    blob[40] ^= std::byte{1};
    fresh.load(blob, 1);
    CHECK(fresh == a);
  }
}
