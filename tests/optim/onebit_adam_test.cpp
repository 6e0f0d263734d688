// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/comm/loopback.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/optim/onebit_adam.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

constexpr std::size_t n = 157;

std::vector<float> sample(std::uint64_t seed, float span) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(seed, 9);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * span;
  return x;
}

std::vector<float> gradient(int rank, int step) {
  return sample(500 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank) + 1,
                2.0f);
}

/// Per rank: parameters and Adam state after every step.
struct trace {
  std::vector<std::vector<std::vector<float>>> params; // [rank][step]
  std::vector<std::vector<cp::adam_state>> states;     // [rank][step]
};

template <class Pipe>
trace run_onebit(int ranks, const Pipe& pipe, const cp::onebit_adam_config& cfg, int steps) {
  trace out;
  out.params.resize(static_cast<std::size_t>(ranks));
  out.states.resize(static_cast<std::size_t>(ranks));
  cp::loopback_world world(ranks);
  world.run([&](cp::loopback_communicator& comm) {
    cp::onebit_adam opt(comm, pipe, cfg, n);
    auto st = opt.make_state();
    auto worker_error = opt.make_feedback_state();
    std::vector<float> params = sample(3, 2.0f);
    const auto me = static_cast<std::size_t>(comm.rank());
    for (int t = 0; t < steps; ++t) {
      const auto g = gradient(comm.rank(), t);
      opt.step(cp::cpu::seq, {.seed = 1, .step = static_cast<std::uint64_t>(t)}, st, worker_error,
               std::span(params), std::span<const float>(g));
      out.params[me].push_back(params);
      out.states[me].push_back(st);
    }
  });
  return out;
}

std::vector<float> mean_gradient(int ranks, int step) {
  std::vector<float> mean(n, 0.0f);
  const float w = 1.0f / static_cast<float>(ranks);
  for (int r = 0; r < ranks; ++r) {
    const auto g = gradient(r, step);
    for (std::size_t i = 0; i < n; ++i)
      mean[i] = mean[i] + w * g[i];
  }
  return mean;
}

} // namespace

TEST_SUITE("optim") {
  TEST_CASE("onebit_adam: warm-up steps equal adamw on the mean gradient bit for bit") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    for (bool corrected : {false, true}) {
      const cp::onebit_adam_config cfg{
          .lr = 1e-2f, .weight_decay = 0.01f, .freeze_step = 5, .bias_correction = corrected};
      const auto run = run_onebit(2, pipe, cfg, 5);
      const cp::adamw ref_opt = cfg.warmup_optimizer();
      auto ref_state = ref_opt.make_state(n);
      std::vector<float> ref = sample(3, 2.0f);
      for (int t = 0; t < 5; ++t) {
        const auto mean = mean_gradient(2, t);
        ref_opt.step(cp::cpu::seq, ref_state, std::span(ref), std::span<const float>(mean));
        for (std::size_t r = 0; r < 2; ++r) {
          CHECK(run.params[r][static_cast<std::size_t>(t)] == ref);
          CHECK(run.states[r][static_cast<std::size_t>(t)] == ref_state);
        }
      }
    }
  }

  TEST_CASE("onebit_adam: the variance stays frozen after freeze_step and ranks agree") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    const cp::onebit_adam_config cfg{.lr = 1e-2f, .freeze_step = 3};
    const auto run = run_onebit(4, pipe, cfg, 9);
    const auto& frozen = run.states[0][2].exp_avg_sq; // v after the last warm-up step
    CHECK(run.states[0][1].exp_avg_sq != frozen);     // v did move during warm-up
    for (std::size_t t = 3; t < 9; ++t) {
      CAPTURE(t);
      for (std::size_t r = 0; r < 4; ++r) {
        CHECK(run.states[r][t].exp_avg_sq == frozen);
        CHECK(run.states[r][t].exp_avg == run.states[0][t].exp_avg);
        CHECK(run.params[r][t] == run.params[0][t]);
      }
      CHECK(run.states[0][t].exp_avg != run.states[0][t - 1].exp_avg);
      CHECK(run.states[0][t].step == t + 1);
    }
  }

  TEST_CASE("onebit_adam: with the identity codec it is Adam with the variance frozen") {
    const cp::pipeline<cp::none, cp::identity> pipe{};
    const cp::onebit_adam_config cfg{.lr = 1e-2f, .weight_decay = 0.05f, .freeze_step = 2};
    for (int ranks : {1, 4}) {
      CAPTURE(ranks);
      const int steps = 8;
      const auto run = run_onebit(ranks, pipe, cfg, steps);
      // Bitwise: the local momenta averaged in rank order, then the documented update.
      std::vector<float> x = run.params[0][1], m = run.states[0][1].exp_avg;
      const std::vector<float> v = run.states[0][1].exp_avg_sq;
      // Mathematically: Adam on the mean gradient with v frozen and no bias correction, in double.
      std::vector<double> xd(x.begin(), x.end()), md(m.begin(), m.end());
      const float w = 1.0f / static_cast<float>(ranks);
      const double b1 = cfg.beta1;
      for (int t = 2; t < steps; ++t) {
        std::vector<float> avg(n, 0.0f);
        for (int r = 0; r < ranks; ++r) {
          const auto g = gradient(r, t);
          for (std::size_t i = 0; i < n; ++i)
            avg[i] = avg[i] + w * cfg.local_momentum(m[i], g[i]);
        }
        m = avg;
        const auto gm = mean_gradient(ranks, t);
        for (std::size_t i = 0; i < n; ++i) {
          x[i] = x[i] - cfg.lr * (m[i] / (std::sqrt(v[i]) + cfg.eps) + cfg.weight_decay * x[i]);
          md[i] = b1 * md[i] + (1.0 - b1) * gm[i];
          xd[i] -= double{cfg.lr} * (md[i] / (std::sqrt(double{v[i]}) + double{cfg.eps}) +
                                     double{cfg.weight_decay} * xd[i]);
        }
        for (int r = 0; r < ranks; ++r) {
          CHECK(run.params[static_cast<std::size_t>(r)][static_cast<std::size_t>(t)] == x);
          CHECK(run.states[static_cast<std::size_t>(r)][static_cast<std::size_t>(t)].exp_avg == m);
        }
      }
      double worst = 0.0;
      for (std::size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(x[i] - xd[i]) / std::max(1.0, std::abs(xd[i])));
      CHECK(worst < 1e-5);
    }
  }

  TEST_CASE("onebit_adam: sign compression sends 32x fewer bytes than the warm-up") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    cp::loopback_world world(1);
    auto comm = world.communicator(0);
    const std::uint64_t big = 4096;
    cp::onebit_adam opt(comm, pipe, {.freeze_step = 1}, big);
    auto st = opt.make_state();
    auto e = opt.make_feedback_state();
    std::vector<float> p(big, 1.0f), g(big, 0.5f);
    const auto warm = opt.step(cp::cpu::seq, {}, st, e, std::span(p), std::span<const float>(g));
    CHECK(opt.compressing(st));
    const auto comp = opt.step(cp::cpu::seq, {}, st, e, std::span(p), std::span<const float>(g));
    CHECK(warm.payload_bytes == cp::max_payload_bytes(cp::identity{}, big));
    CHECK(comp.payload_bytes == pipe.max_payload_bytes(big));
    CHECK(comp.payload_bytes * 20 < warm.payload_bytes);
    CHECK(std::equal(opt.last_average().begin(), opt.last_average().end(), st.exp_avg.begin()));
  }

  TEST_CASE("onebit_adam: elements that never saw a gradient stay put after the freeze") {
    // Element 0 always gets a zero gradient, so its frozen variance is 0. Sign compression
    // still sends it +-scale: unmasked it moves by about lr * scale / eps, masked it stays.
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    for (bool mask : {true, false}) {
      CAPTURE(mask);
      cp::loopback_world world(1);
      auto comm = world.communicator(0);
      cp::onebit_adam opt(comm, pipe, {.lr = 1e-3f, .freeze_step = 3, .mask_zero_variance = mask},
                          n);
      auto st = opt.make_state();
      auto e = opt.make_feedback_state();
      std::vector<float> p = sample(3, 2.0f);
      const float start = p[0];
      for (int t = 0; t < 8; ++t) {
        auto g = gradient(0, t);
        g[0] = 0.0f;
        opt.step(cp::cpu::seq, {.step = static_cast<std::uint64_t>(t)}, st, e, std::span(p),
                 std::span<const float>(g));
      }
      CHECK(st.exp_avg_sq[0] == 0.0f);
      if (mask) {
        CHECK(p[0] == start);
      } else {
        CHECK(std::fabs(p[0] - start) > 1.0f); // the divergence the mask prevents
      }
      for (std::size_t i = 1; i < n; ++i)
        REQUIRE(std::isfinite(p[i]));
    }
  }

  TEST_CASE("onebit_adam: variance_floor bounds the step of near-dead elements") {
    // Element 0 sees one tiny gradient, so its frozen v is tiny but not 0 and the zero mask does
    // not apply. The sign codec still sends it about the tensor's scale each step: without a
    // floor it moves by about lr * scale / sqrt(v), with one by at most lr * scale / sqrt(floor)
    // per step.
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    const int steps = 8, freeze = 3;
    const float lr = 1e-3f, floor = 1e-6f;
    for (const float variance_floor : {0.0f, floor}) {
      CAPTURE(variance_floor);
      cp::loopback_world world(1);
      auto comm = world.communicator(0);
      cp::onebit_adam opt(comm, pipe,
                          {.lr = lr, .freeze_step = freeze, .variance_floor = variance_floor}, n);
      auto st = opt.make_state();
      auto e = opt.make_feedback_state();
      std::vector<float> p = sample(3, 2.0f);
      const float start = p[0];
      float largest_momentum = 0.0f;
      for (int t = 0; t < steps; ++t) {
        auto g = gradient(0, t);
        g[0] = t == 0 ? 1e-6f : 0.0f;
        opt.step(cp::cpu::seq, {.step = static_cast<std::uint64_t>(t)}, st, e, std::span(p),
                 std::span<const float>(g));
        if (t >= freeze)
          largest_momentum = std::max(largest_momentum, std::fabs(st.exp_avg[0]));
      }
      REQUIRE(st.exp_avg_sq[0] > 0.0f);
      REQUIRE(st.exp_avg_sq[0] < 1e-12f);
      REQUIRE(largest_momentum > 0.1f); // the compressed momentum is the tensor's scale
      const float moved = std::fabs(p[0] - start);
      if (variance_floor == 0.0f) {
        CHECK(moved > 10.0f); // thousands of times lr per step
      } else {
        CHECK(moved <= (steps - freeze) * lr * largest_momentum / std::sqrt(floor) * 1.001f);
        CHECK(moved > 0.0f);
      }
      for (std::size_t i = 1; i < n; ++i)
        REQUIRE(std::isfinite(p[i]));
    }
    CHECK_FALSE(cp::onebit_adam_config{.variance_floor = -1.0f}.can_implement(4));
    CHECK_FALSE(cp::onebit_adam_config{.variance_floor = std::numeric_limits<float>::infinity()}
                    .can_implement(4));
  }
}
