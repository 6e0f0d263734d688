// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
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

std::vector<float> sample(std::uint64_t seed, float span, std::size_t size = n) {
  std::vector<float> x(size);
  const auto key = cp::make_rng_key(seed, 9);
  for (std::size_t i = 0; i < size; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * span;
  return x;
}

std::vector<float> gradient(int rank, int step, std::size_t size = n) {
  return sample(500 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank) + 1, 2.0f,
                size);
}

/// Per rank: parameters and Adam state after every step.
struct trace {
  std::vector<std::vector<std::vector<float>>> params; // [rank][step]
  std::vector<std::vector<cp::adam_state>> states;     // [rank][step]
};

template <class Pipe, class Exchange>
using onebit_t = cp::onebit_adam<cp::loopback_communicator, Pipe, Exchange>;
using sign_pipe = cp::pipeline<cp::ef, cp::sign>;

/// A run of `steps` steps on `ranks` loopback ranks with the given exchange: the trace, and
/// per rank the final feedback state and the last step's result.
template <class Pipe, class Exchange> struct exchange_run {
  trace steps;
  std::vector<typename onebit_t<Pipe, Exchange>::feedback_state> feedback; // [rank]
  std::vector<cp::onebit_adam_result> last;                                // [rank]
};

template <class Pipe, class Exchange>
exchange_run<Pipe, Exchange> run_exchange(int ranks, const Pipe& pipe,
                                          const cp::onebit_adam_config& cfg, int steps,
                                          std::size_t size, const Exchange& exchange) {
  exchange_run<Pipe, Exchange> out;
  const auto nr = static_cast<std::size_t>(ranks);
  out.steps.params.resize(nr);
  out.steps.states.resize(nr);
  out.feedback.resize(nr);
  out.last.resize(nr);
  cp::loopback_world world(ranks);
  world.run([&](cp::loopback_communicator& comm) {
    onebit_t<Pipe, Exchange> opt(comm, pipe, cfg, size, exchange);
    auto st = opt.make_state();
    auto feedback = opt.make_feedback_state();
    std::vector<float> params = sample(3, 2.0f, size);
    const auto me = static_cast<std::size_t>(comm.rank());
    for (int t = 0; t < steps; ++t) {
      const auto g = gradient(comm.rank(), t, size);
      out.last[me] = opt.step(cp::cpu::seq, {.seed = 1, .step = static_cast<std::uint64_t>(t)}, st,
                              feedback, std::span(params), std::span<const float>(g));
      out.steps.params[me].push_back(params);
      out.steps.states[me].push_back(st);
    }
    out.feedback[me] = feedback;
  });
  return out;
}

template <class Pipe>
trace run_onebit(int ranks, const Pipe& pipe, const cp::onebit_adam_config& cfg, int steps) {
  return run_exchange(ranks, pipe, cfg, steps, n, cp::gather_exchange{}).steps;
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

  TEST_CASE("onebit_adam: the sharded exchange with the identity codec equals the all-gather "
            "exchange bit for bit") {
    // Lossless at both points: the owner's rank-ordered 1/N average of its chunk is the
    // all-gather's average of those elements, and the server's identity payload carries it
    // unchanged, so both exchanges give the documented rank-ordered mean update.
    const cp::pipeline<cp::none, cp::identity> pipe{};
    const cp::onebit_adam_config cfg{.lr = 1e-2f, .weight_decay = 0.05f, .freeze_step = 2};
    for (int ranks : {1, 2, 3, 4}) {
      for (std::size_t size : {std::size_t{1}, std::size_t{7}, n}) {
        CAPTURE(ranks);
        CAPTURE(size);
        const auto gathered = run_exchange(ranks, pipe, cfg, 6, size, cp::gather_exchange{});
        const auto sharded = run_exchange(ranks, pipe, cfg, 6, size, cp::sharded_exchange{});
        for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r) {
          CHECK(sharded.steps.params[r] == gathered.steps.params[r]);
          CHECK(sharded.steps.states[r] == gathered.steps.states[r]);
        }
      }
    }
  }

  TEST_CASE("onebit_adam: the sharded 1-bit exchange leaves every rank with the same bits") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    const cp::onebit_adam_config cfg{.lr = 1e-2f, .freeze_step = 2};
    const int steps = 6;
    for (int ranks : {1, 2, 3, 4}) {
      for (std::size_t size : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
        CAPTURE(ranks);
        CAPTURE(size);
        const auto run = run_exchange(ranks, pipe, cfg, steps, size, cp::sharded_exchange{});
        const auto& frozen = run.steps.states[0][1].exp_avg_sq;
        for (std::size_t t = 2; t < steps; ++t) {
          CAPTURE(t);
          for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r) {
            CHECK(run.steps.params[r][t] == run.steps.params[0][t]);
            CHECK(run.steps.states[r][t].exp_avg == run.steps.states[0][t].exp_avg);
            CHECK(run.steps.states[r][t].exp_avg_sq == frozen);
          }
          CHECK(run.steps.states[0][t].exp_avg != run.steps.states[0][t - 1].exp_avg);
          CHECK(std::all_of(run.steps.params[0][t].begin(), run.steps.params[0][t].end(),
                            [](float x) { return std::isfinite(x); }));
        }
        // Two compressions (worker, then server) instead of one: not the all-gather's bits.
        // (On one rank the server re-encodes a shard that is already +-scale.)
        if (size == 1000 && ranks > 1) {
          const auto gathered = run_exchange(ranks, pipe, cfg, steps, size, cp::gather_exchange{});
          CHECK(gathered.steps.states[0][steps - 1].exp_avg !=
                run.steps.states[0][steps - 1].exp_avg);
        }
      }
    }
  }

  TEST_CASE("onebit_adam: the sharded exchange's bytes per rank stay flat in N") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    const std::size_t big = std::size_t{1} << 16;
    const auto whole = static_cast<std::size_t>(pipe.max_payload_bytes(big));
    for (int ranks : {1, 2, 3, 4, 8}) {
      CAPTURE(ranks);
      cp::loopback_world world(ranks);
      auto comm = world.communicator(0);
      const auto others = static_cast<std::size_t>(ranks - 1);
      cp::onebit_adam sharded(comm, pipe, {}, big, cp::sharded_exchange{});
      cp::onebit_adam gathered(comm, pipe, {}, big);
      static_assert(std::is_same_v<decltype(sharded), onebit_t<sign_pipe, cp::sharded_exchange>>);
      static_assert(std::is_same_v<decltype(gathered), onebit_t<sign_pipe, cp::gather_exchange>>);
      // The plan's own formulas, from an independent plan of the same shape.
      const cp::sharded_plan<sign_pipe> plan(pipe, big, ranks);
      const auto chunk =
          (big + static_cast<std::size_t>(ranks) - 1) / static_cast<std::size_t>(ranks);
      CHECK(sharded.compressed_wire_bytes() ==
            plan.reduce_scatter_wire_bytes() + plan.all_gather_wire_bytes());
      CHECK(sharded.compressed_wire_bytes() == 2 * others * pipe.max_payload_bytes(chunk));
      CHECK(gathered.compressed_wire_bytes() == others * whole);
      // What rank 0 encodes: its N worker chunks and its shard; the all-gather's one payload.
      std::size_t encoded = pipe.max_payload_bytes(plan.shard_size(0));
      for (int j = 0; j < ranks; ++j)
        encoded += pipe.max_payload_bytes(plan.shard_size(j));
      CHECK(sharded.exchange().payload_bytes() == encoded);
      CHECK(gathered.exchange().payload_bytes() == whole);
      CHECK(sharded.warmup_wire_bytes() == others * cp::max_payload_bytes(cp::identity{}, big));
      CHECK(sharded.warmup_wire_bytes() == gathered.warmup_wire_bytes());
      // About 2 (N - 1) / N compressed tensors whatever N, against N - 1 for the all-gather.
      CHECK(sharded.compressed_wire_bytes() < 2 * whole);
      if (ranks >= 4) {
        CHECK(5 * sharded.compressed_wire_bytes() < 3 * gathered.compressed_wire_bytes());
      }
    }
    // What a step reports, on 4 ranks: the compressed step's bytes are the plan's.
    const int ranks = 4;
    const cp::onebit_adam_config cfg{.freeze_step = 1};
    const auto sharded = run_exchange(ranks, pipe, cfg, 2, big, cp::sharded_exchange{});
    const auto gathered = run_exchange(ranks, pipe, cfg, 2, big, cp::gather_exchange{});
    const cp::sharded_plan<sign_pipe> plan(pipe, big, ranks);
    for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r) {
      CAPTURE(r);
      CHECK(sharded.last[r].wire_bytes ==
            plan.reduce_scatter_wire_bytes() + plan.all_gather_wire_bytes());
      // N worker chunks and the owned shard, each with its own header and scale.
      std::size_t encoded = pipe.max_payload_bytes(plan.shard_size(static_cast<int>(r)));
      for (int j = 0; j < ranks; ++j)
        encoded += pipe.max_payload_bytes(plan.shard_size(j));
      CHECK(sharded.last[r].payload_bytes == encoded);
      CHECK(gathered.last[r].wire_bytes == (ranks - 1) * whole);
      CHECK(gathered.last[r].payload_bytes == whole);
      CHECK(sharded.last[r].nonfinite == 0);
      CHECK(2 * sharded.last[r].wire_bytes < gathered.last[r].wire_bytes + whole);
    }
    // The chunk alignment option reaches the plan.
    cp::loopback_world two(2);
    auto c0 = two.communicator(0);
    const onebit_t<sign_pipe, cp::sharded_exchange> aligned(c0, pipe, {}, 7, {.align = 4});
    CHECK(aligned.exchange().plan().layout().chunk == 4);
    CHECK(aligned.exchange().plan().shard_size(1) == 3);
  }

  TEST_CASE("onebit_adam: error feedback telescopes across the worker and server errors") {
    // Per element of chunk j: sum_t m_t = sum_t mean_r m_local_{r,t} - (mean_r e_w,r + e_s,j),
    // with m_t the averaged momentum every rank used and m_local the momentum each rank handed
    // to the exchange (docs/methods.md 9.3). n = 7 on 3 ranks: chunks of 3, 3 and 1.
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    const cp::onebit_adam_config cfg{.lr = 1e-2f, .freeze_step = 1};
    const int ranks = 3, steps = 13;
    const std::size_t size = 7;
    const auto run = run_exchange(ranks, pipe, cfg, steps, size, cp::sharded_exchange{});
    std::vector<double> used(size, 0.0), local(size, 0.0);
    for (std::size_t t = 1; t < steps; ++t) {
      const auto& before = run.steps.states[0][t - 1].exp_avg;
      for (int r = 0; r < ranks; ++r) {
        const auto g = gradient(r, static_cast<int>(t), size);
        for (std::size_t i = 0; i < size; ++i)
          local[i] += double{cfg.local_momentum(before[i], g[i])} / ranks;
      }
      for (std::size_t i = 0; i < size; ++i)
        used[i] += run.steps.states[0][t].exp_avg[i];
    }
    const cp::sharded_plan<sign_pipe> plan(pipe, size, ranks);
    double worst = 0.0, without_errors = 0.0;
    for (int j = 0; j < ranks; ++j) {
      const auto off = static_cast<std::size_t>(plan.layout().offset(j));
      const std::span<const float> server =
          run.feedback[static_cast<std::size_t>(j)].server.residual();
      for (std::size_t k = 0; k < plan.shard_size(j); ++k) {
        double worker = 0.0;
        for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r)
          worker += double{run.feedback[r].worker[static_cast<std::size_t>(j)].residual()[k]};
        worker /= ranks;
        const std::size_t i = off + k;
        worst = std::max(worst, std::abs(used[i] - (local[i] - (worker + server[k]))));
        without_errors = std::max(without_errors, std::abs(used[i] - local[i]));
      }
    }
    CHECK(worst < 1e-5);
    CHECK(without_errors > 1e-2); // the errors are not trivially 0
  }

  TEST_CASE("onebit_adam: the sharded exchange rejects bad sizes and foreign feedback states "
            "before anything changes") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    using opt_t = onebit_t<sign_pipe, cp::sharded_exchange>;
    const cp::onebit_adam_config cfg{.freeze_step = 1};
    const std::size_t size = 7;
    cp::loopback_world world(1);
    auto comm = world.communicator(0);
    opt_t opt(comm, pipe, cfg, size);
    auto st = opt.make_state();
    auto fb = opt.make_feedback_state();
    std::vector<float> p = sample(3, 2.0f, size);
    const auto g = gradient(0, 0, size);
    opt.step(cp::cpu::seq, {}, st, fb, std::span(p), std::span<const float>(g)); // warm-up
    opt.step(cp::cpu::seq, {.step = 1}, st, fb, std::span(p), std::span<const float>(g));
    REQUIRE(opt.compressing(st));
    const auto st0 = st;
    const auto fb0 = fb;
    const auto p0 = p;
    const auto unchanged = [&](const opt_t::feedback_state& f) {
      return st == st0 && p == p0 && f.worker == fb0.worker && f.server == fb0.server;
    };

    const auto short_g = gradient(0, 2, size - 1);
    CHECK_THROWS_AS(
        opt.step(cp::cpu::seq, {.step = 2}, st, fb, std::span(p), std::span<const float>(short_g)),
        cp::error);
    CHECK(unchanged(fb));

    // A feedback state made for a world of 2 ranks: two worker errors.
    cp::loopback_world pair(2);
    auto other = pair.communicator(0);
    auto foreign = opt_t(other, pipe, cfg, size).make_feedback_state();
    const auto foreign0 = foreign;
    CHECK_THROWS_AS(
        opt.step(cp::cpu::seq, {.step = 2}, st, foreign, std::span(p), std::span<const float>(g)),
        cp::error);
    CHECK(unchanged(fb));
    CHECK(foreign.worker == foreign0.worker);
    CHECK(foreign.server == foreign0.server);

    // A feedback state made for another tensor size, and one whose server error is short.
    auto wide = opt_t(comm, pipe, cfg, size + 1).make_feedback_state();
    CHECK_THROWS_AS(
        opt.step(cp::cpu::seq, {.step = 2}, st, wide, std::span(p), std::span<const float>(g)),
        cp::error);
    auto short_server = fb;
    short_server.server = cp::ef_state(size - 1);
    CHECK_THROWS_AS(opt.step(cp::cpu::seq, {.step = 2}, st, short_server, std::span(p),
                             std::span<const float>(g)),
                    cp::error);
    CHECK(short_server.worker == fb0.worker);
    CHECK(unchanged(fb));

    // Moments that do not hold n elements.
    auto short_m = st;
    short_m.exp_avg.pop_back();
    const auto short_m0 = short_m;
    CHECK_THROWS_AS(
        opt.step(cp::cpu::seq, {.step = 2}, short_m, fb, std::span(p), std::span<const float>(g)),
        cp::error);
    CHECK(short_m == short_m0);
    CHECK(unchanged(fb));

    // A pipeline the sharded plan cannot run.
    const cp::pipeline<cp::ef, cp::sign> bad{
        {}, {.granularity = cp::sign_granularity::block, .block = 0}};
    CHECK_THROWS_AS(opt_t(comm, bad, cfg, size), cp::error);

    // The good state still works, and so do two ranks that both pass a 3-rank state: each
    // throws before any collective.
    opt.step(cp::cpu::seq, {.step = 2}, st, fb, std::span(p), std::span<const float>(g));
    CHECK(st.step == 3);
    CHECK_FALSE(unchanged(fb));
    cp::loopback_world triple(3);
    auto third = triple.communicator(0);
    const auto three_state = opt_t(third, pipe, cfg, size).make_feedback_state();
    std::vector<int> threw(2, 0), kept(2, 0);
    pair.run([&](cp::loopback_communicator& c) {
      opt_t o(c, pipe, cfg, size);
      auto s = o.make_state();
      s.step = cfg.freeze_step; // compressing
      auto f = three_state;
      std::vector<float> q = p0;
      const auto s0 = s;
      const auto me = static_cast<std::size_t>(c.rank());
      try {
        o.step(cp::cpu::seq, {.step = 1}, s, f, std::span(q), std::span<const float>(g));
      } catch (const cp::error&) {
        threw[me] = 1;
      }
      kept[me] =
          s == s0 && q == p0 && f.worker == three_state.worker && f.server == three_state.server;
    });
    CHECK(threw == std::vector<int>{1, 1});
    CHECK(kept == std::vector<int>{1, 1});
  }
}
