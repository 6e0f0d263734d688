// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/comm/loopback.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/data_parallel.hpp"
#include "commpress/optim/sgd.hpp"
#include "commpress/pipeline/layer_policy.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

constexpr std::size_t n = 203;

std::vector<float> sample(std::uint64_t seed, float span) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(seed, 8);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * span;
  return x;
}

/// The local gradient of `rank` at `step`: different on every rank and step.
std::vector<float> gradient(int rank, int step) {
  return sample(1000 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank) + 1,
                2.0f);
}

cp::context context_of(int step) {
  return {.seed = 17, .step = static_cast<std::uint64_t>(step), .tensor_id = 3};
}

/// Final parameters and feedback state of every rank after `steps` data-parallel steps.
template <class Pipe, class Opt> struct run_result {
  std::vector<std::vector<float>> params;
  std::vector<cp::pipeline_state_t<Pipe>> feedback;
};

template <class Pipe, class Opt>
run_result<Pipe, Opt> run_data_parallel(int ranks, const Pipe& pipe, const Opt& opt, int steps) {
  run_result<Pipe, Opt> out;
  out.params.resize(static_cast<std::size_t>(ranks));
  out.feedback.resize(static_cast<std::size_t>(ranks));
  cp::loopback_world world(ranks);
  world.run([&](cp::loopback_communicator& comm) {
    cp::data_parallel dp(comm, pipe, opt, n);
    auto fb = dp.make_feedback_state();
    auto os = dp.make_optimizer_state();
    std::vector<float> params = sample(7, 4.0f);
    for (int t = 0; t < steps; ++t) {
      const auto g = gradient(comm.rank(), t);
      const auto r = dp.step(cp::cpu::seq, context_of(t), fb, os, std::span(params),
                             std::span<const float>(g));
      REQUIRE(r.payload_bytes == pipe.max_payload_bytes(n));
    }
    out.params[static_cast<std::size_t>(comm.rank())] = params;
    REQUIRE(fb.tensors.size() == 1);
    out.feedback[static_cast<std::size_t>(comm.rank())] = std::move(fb.tensors[0]);
  });
  return out;
}

/// The same protocol in one process: N feedback states encode, the payloads are decoded in rank
/// order with weight 1/N, and one optimizer steps on the average.
template <class Pipe, class Opt>
run_result<Pipe, Opt> run_single_process(int ranks, const Pipe& pipe, const Opt& opt, int steps) {
  run_result<Pipe, Opt> out;
  for (int r = 0; r < ranks; ++r)
    out.feedback.push_back(pipe.make_state(n));
  auto os = opt.make_state(n);
  std::vector<float> params = sample(7, 4.0f);
  std::vector<std::byte> ws(pipe.workspace_bytes(n));
  std::vector<std::vector<std::byte>> payloads(static_cast<std::size_t>(ranks),
                                               std::vector<std::byte>(pipe.max_payload_bytes(n)));
  for (int t = 0; t < steps; ++t) {
    for (int r = 0; r < ranks; ++r) {
      const auto g = gradient(r, t);
      cp::encode(cp::cpu::seq, pipe, out.feedback[static_cast<std::size_t>(r)], context_of(t),
                 std::span<const float>(g), std::span(payloads[static_cast<std::size_t>(r)]),
                 std::span(ws));
    }
    std::vector<float> mean(n, 0.0f);
    for (int r = 0; r < ranks; ++r)
      cp::decode_accumulate(cp::cpu::seq, pipe,
                            std::span<const std::byte>(payloads[static_cast<std::size_t>(r)]),
                            std::span(mean), 1.0f / static_cast<float>(ranks));
    opt.step(cp::cpu::seq, os, std::span(params), std::span<const float>(mean));
  }
  out.params.assign(static_cast<std::size_t>(ranks), params);
  return out;
}

/// The plain optimizer on the mean gradient, mean = sum_r (1/N) * g_r added in rank order.
template <class Opt> std::vector<float> plain_optimizer(int ranks, const Opt& opt, int steps) {
  auto os = opt.make_state(n);
  std::vector<float> params = sample(7, 4.0f);
  const float w = 1.0f / static_cast<float>(ranks);
  for (int t = 0; t < steps; ++t) {
    std::vector<float> mean(n, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      const auto g = gradient(r, t);
      for (std::size_t i = 0; i < n; ++i)
        mean[i] = mean[i] + w * g[i];
    }
    opt.step(cp::cpu::seq, os, std::span(params), std::span<const float>(mean));
  }
  return params;
}

} // namespace

TEST_SUITE("optim") {
  TEST_CASE("data_parallel: identity codec without feedback equals the optimizer on the mean "
            "gradient bit for bit") {
    const cp::pipeline<cp::none, cp::identity> pipe{};
    const cp::sgd momentum{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true};
    const cp::adamw adamw{.lr = 1e-2f};
    for (int ranks : {1, 2, 4}) {
      CAPTURE(ranks);
      const auto sgd_run = run_data_parallel(ranks, pipe, momentum, 6);
      const auto sgd_ref = plain_optimizer(ranks, momentum, 6);
      const auto adam_run = run_data_parallel(ranks, pipe, adamw, 6);
      const auto adam_ref = plain_optimizer(ranks, adamw, 6);
      for (int r = 0; r < ranks; ++r) {
        CHECK(sgd_run.params[static_cast<std::size_t>(r)] == sgd_ref);
        CHECK(adam_run.params[static_cast<std::size_t>(r)] == adam_ref);
      }
      CHECK(sgd_ref != sample(7, 4.0f)); // the parameters did move
    }
  }

  TEST_CASE("data_parallel: sign codec with EF equals a single-process reference decoding the "
            "same payloads, on every rank") {
    const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}};
    const cp::adam opt{.lr = 1e-2f, .weight_decay = 1e-2f};
    for (int ranks : {1, 3, 4}) {
      CAPTURE(ranks);
      const auto run = run_data_parallel(ranks, pipe, opt, 5);
      const auto ref = run_single_process(ranks, pipe, opt, 5);
      for (int r = 0; r < ranks; ++r) {
        const auto i = static_cast<std::size_t>(r);
        CHECK(run.params[i] == ref.params[i]);
        CHECK(run.feedback[i] == ref.feedback[i]); // each rank's worker residual
      }
      // Compression was lossy: the result differs from the uncompressed one.
      CHECK(run.params[0] != plain_optimizer(ranks, opt, 5));
    }
  }

  TEST_CASE("data_parallel: top-k and 4-bit quantization with EF match the reference") {
    const cp::sgd opt{.lr = 0.1f, .momentum = 0.9f};
    const cp::pipeline<cp::ef, cp::top_k> topk{{}, {.fraction = 0.1f}};
    const auto a = run_data_parallel(4, topk, opt, 4);
    const auto a_ref = run_single_process(4, topk, opt, 4);
    const cp::pipeline<cp::ef, cp::quantize> q4{{}, {.bits = 4}};
    const auto b = run_data_parallel(2, q4, opt, 4);
    const auto b_ref = run_single_process(2, q4, opt, 4);
    for (std::size_t r = 0; r < 4; ++r)
      CHECK(a.params[r] == a_ref.params[r]);
    for (std::size_t r = 0; r < 2; ++r)
      CHECK(b.params[r] == b_ref.params[r]);
  }

  TEST_CASE("data_parallel: rejects a gradient of the wrong size and exposes the mean it "
            "used") {
    cp::loopback_world world(1);
    auto comm = world.communicator(0);
    const cp::pipeline<cp::none, cp::identity> pipe{};
    cp::data_parallel dp(comm, pipe, cp::sgd{.lr = 0.1f}, n);
    auto fb = dp.make_feedback_state();
    auto os = dp.make_optimizer_state();
    std::vector<float> p(n), g(n - 1);
    CHECK_THROWS_AS(dp.step(cp::cpu::seq, {}, fb, os, std::span(p), std::span<const float>(g)),
                    cp::error);
    CHECK(dp.payload_bytes() == pipe.max_payload_bytes(n));
    // One rank: the mean is 0 + 1 * g, i.e. the gradient itself.
    const auto good = gradient(0, 0);
    dp.step(cp::cpu::seq, {}, fb, os, std::span(p), std::span<const float>(good));
    CHECK(std::vector<float>(dp.mean_gradient().begin(), dp.mean_gradient().end()) == good);
  }
}

TEST_SUITE("optim") {
  TEST_CASE("data_parallel: the documented example converges to the ranks' mean optimum") {
    // Rank r minimises 0.5 * |x - target_r|^2, so the average problem's optimum is the mean
    // target, which the compressed (1-bit + EF) exchange must still reach.
    constexpr int ranks = 4;
    constexpr std::uint64_t steps = 400;
    std::vector<float> optimum(n, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      const auto t = sample(50 + static_cast<std::uint64_t>(r), 2.0f);
      for (std::size_t i = 0; i < n; ++i)
        optimum[i] += t[i] / ranks;
    }
    auto compute_gradient = [](int rank, std::span<const float> x, std::span<float> g) {
      const auto target = sample(50 + static_cast<std::uint64_t>(rank), 2.0f);
      for (std::size_t i = 0; i < n; ++i)
        g[i] = x[i] - target[i];
    };
    std::vector<std::vector<float>> result(ranks);
    // example-begin data-parallel-step
    cp::loopback_world world(ranks); // or cp::mpi_communicator / cp::nccl_communicator
    world.run([&](cp::loopback_communicator& comm) {
      const cp::pipeline<cp::ef, cp::sign> pipe{{}, {.scale = cp::sign_scale::rms}}; // 1 bit
      cp::data_parallel dp(comm, pipe, cp::adamw{.lr = 1e-2f, .weight_decay = 0.0f}, n);
      auto residual = dp.make_feedback_state(); // EF state: checkpoint with residual.save(id)
      auto moments = dp.make_optimizer_state(); // m, v, step: checkpoint with moments.save(id)
      std::vector<float> params(n, 0.0f), grads(n);
      for (std::uint64_t step = 0; step < steps; ++step) {
        compute_gradient(comm.rank(), params, grads); // the trainer's backward pass
        dp.step(cp::cpu::seq, {.seed = 42, .step = step}, residual, moments, std::span(params),
                std::span<const float>(grads));
      }
      // example-end data-parallel-step
      result[static_cast<std::size_t>(comm.rank())] = params;
    });
    double start = 0.0, end = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      start += double{optimum[i]} * optimum[i];
      end += (double{result[0][i]} - optimum[i]) * (double{result[0][i]} - optimum[i]);
    }
    CHECK(end < 1e-2 * start);
    for (const auto& r : result)
      CHECK(r == result[0]);
  }
}

namespace {

/// A small model: a 2-D weight, its bias, a 2-D layer excluded by name, another 2-D weight and
/// a tensor below the size threshold; 203 parameters in all, as the single-tensor tests.
struct model_layout {
  std::vector<std::uint64_t> w1{8, 12}, b1{8}, emb{4, 10}, w2{4, 13}, tiny{1, 7};
  std::vector<cp::tensor_info> tensors{{"fc1.weight", w1},
                                       {"fc1.bias", b1},
                                       {"embed.weight", emb},
                                       {"fc2.weight", w2},
                                       {"scale", tiny}};
  cp::layer_policy policy{.min_elements = 8, .exclude = {"embed.*"}};
};

} // namespace

TEST_SUITE("optim") {
  TEST_CASE("data_parallel: a layer policy compresses some tensors and sends the others as "
            "fp32, every rank matching a one-process replay") {
    const model_layout m;
    REQUIRE(cp::detail::glob_match("embed.*", "embed.weight"));
    std::size_t total = 0;
    for (const auto& t : m.tensors)
      total += t.count();
    REQUIRE(total == n);
    const cp::pipeline<cp::ef, cp::quantize> pipe{{},
                                                  {.bits = 4,
                                                   .granularity = cp::scale_granularity::block,
                                                   .group = 16,
                                                   .round = cp::rounding::stochastic}};
    const cp::sgd opt{.lr = 0.05f, .momentum = 0.9f};
    constexpr int ranks = 3, steps = 4;

    std::vector<std::vector<float>> params(ranks);
    std::vector<std::size_t> nonfinite(ranks);
    cp::loopback_world world(ranks);
    world.run([&](cp::loopback_communicator& comm) {
      cp::data_parallel dp(comm, pipe, opt, std::span<const cp::tensor_info>(m.tensors), m.policy);
      CHECK(dp.verdict(0) == cp::layer_verdict::compress);
      CHECK(dp.verdict(1) == cp::layer_verdict::one_dimensional);
      CHECK(dp.verdict(2) == cp::layer_verdict::excluded);
      CHECK(dp.verdict(3) == cp::layer_verdict::compress);
      CHECK(dp.verdict(4) == cp::layer_verdict::too_small);
      CHECK(dp.payload_bytes() ==
            pipe.max_payload_bytes(96) + pipe.max_payload_bytes(52) + 4 * (8 + 40 + 7));
      auto fb = dp.make_feedback_state();
      REQUIRE(fb.tensors.size() == 2);
      CHECK(fb.index == std::vector<std::uint32_t>{0, 3});
      auto os = dp.make_optimizer_state();
      std::vector<float> p = sample(7, 4.0f);
      for (int t = 0; t < steps; ++t) {
        auto g = gradient(comm.rank(), t);
        if (t == 2 && comm.rank() == 1)
          g[100] = std::numeric_limits<float>::quiet_NaN(); // in "embed.weight", sent as fp32
        const auto r =
            dp.step(cp::cpu::seq, context_of(t), fb, os, std::span(p), std::span<const float>(g));
        CHECK(r.payload_bytes == dp.payload_bytes());
        nonfinite[static_cast<std::size_t>(comm.rank())] += r.nonfinite;
      }
      params[static_cast<std::size_t>(comm.rank())] = p;
    });
    CHECK(nonfinite == std::vector<std::size_t>{0, 1, 0});

    // The replay: tensors 0 and 3 through the pipeline with tensor ids 3 + 0 and 3 + 3, the
    // others added as fp32, every rank in order with weight 1/3.
    struct piece {
      std::size_t first, count;
      bool compressed;
    };
    const std::vector<piece> pieces{
        {0, 96, true}, {96, 8, false}, {104, 40, false}, {144, 52, true}, {196, 7, false}};
    std::vector<std::vector<cp::pipeline_state_t<decltype(pipe)>>> states(ranks);
    for (auto& s : states)
      for (const piece& pc : pieces)
        s.push_back(pipe.make_state(pc.count));
    auto os = opt.make_state(n);
    std::vector<float> p = sample(7, 4.0f);
    for (int t = 0; t < steps; ++t) {
      std::vector<float> mean(n, 0.0f);
      for (int r = 0; r < ranks; ++r) {
        auto g = gradient(r, t);
        if (t == 2 && r == 1)
          g[100] = std::numeric_limits<float>::quiet_NaN();
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          const piece& pc = pieces[i];
          const auto sum = std::span(mean).subspan(pc.first, pc.count);
          if (!pc.compressed) {
            for (std::size_t j = 0; j < pc.count; ++j)
              sum[j] = sum[j] + (1.0f / ranks) * g[pc.first + j];
            continue;
          }
          std::vector<std::byte> payload(pipe.max_payload_bytes(pc.count));
          std::vector<std::byte> ws(pipe.workspace_bytes(pc.count));
          cp::context ctx = context_of(t);
          ctx.tensor_id += static_cast<std::uint32_t>(i);
          cp::encode(cp::cpu::seq, pipe, states[static_cast<std::size_t>(r)][i], ctx,
                     std::span<const float>(g).subspan(pc.first, pc.count), std::span(payload),
                     std::span(ws));
          cp::decode_accumulate(cp::cpu::seq, pipe, std::span<const std::byte>(payload), sum,
                                1.0f / ranks);
        }
      }
      opt.step(cp::cpu::seq, os, std::span(p), std::span<const float>(mean));
    }
    // The NaN of step 2 went uncompressed into the mean, so it is in the parameters of
    // every rank alike (compared as bits).
    CHECK(std::isnan(p[100]));
    for (const auto& q : params) {
      REQUIRE(q.size() == n);
      CHECK(std::memcmp(q.data(), p.data(), 4 * n) == 0);
    }
  }

  TEST_CASE("data_parallel: the feedback states checkpoint and resume bit for bit; bad "
            "checkpoints and states of another layout are refused and change nothing") {
    const model_layout m;
    const cp::pipeline<cp::ef, cp::top_k> pipe{{}, {.fraction = 0.25f}};
    const cp::sgd opt{.lr = 0.05f};
    cp::loopback_world world(1);
    auto comm = world.communicator(0);
    cp::data_parallel dp(comm, pipe, opt, std::span<const cp::tensor_info>(m.tensors), m.policy);
    auto fb = dp.make_feedback_state();
    auto os = dp.make_optimizer_state();
    std::vector<float> p = sample(7, 4.0f);
    auto run = [&](auto& state, std::vector<float>& q, int from, int to) {
      for (int t = from; t < to; ++t) {
        const auto g = gradient(0, t);
        dp.step(cp::cpu::seq, context_of(t), state, os, std::span(q), std::span<const float>(g));
      }
    };
    run(fb, p, 0, 3);
    const auto blob = fb.save(3);
    const auto saved_os = os.save(3);
    const auto saved_p = p;
    run(fb, p, 3, 6);

    auto resumed = dp.make_feedback_state();
    resumed.load(std::span<const std::byte>(blob), 3);
    os.load(std::span<const std::byte>(saved_os), 3);
    std::vector<float> q = saved_p;
    run(resumed, q, 3, 6);
    CHECK(q == p);
    CHECK(resumed.tensors == fb.tensors);

    // Each state's blob is the pipeline state's own, under tensor id 3 + its layout index.
    CHECK(fb.save(3).size() == fb.tensors[0].save(3).size() + fb.tensors[1].save(6).size());

    const auto before = resumed.tensors;
    auto truncated = blob;
    truncated.resize(blob.size() - 9);
    CHECK_THROWS_AS(resumed.load(std::span<const std::byte>(truncated), 3), cp::error);
    auto corrupted = blob;
    corrupted[blob.size() - 20] ^= std::byte{1};
    CHECK_THROWS_AS(resumed.load(std::span<const std::byte>(corrupted), 3), cp::error);
    auto longer = blob;
    longer.push_back(std::byte{0});
    CHECK_THROWS_AS(resumed.load(std::span<const std::byte>(longer), 3), cp::error);
    CHECK_THROWS_AS(resumed.load(std::span<const std::byte>(blob), 4), cp::error); // tensor ids
    CHECK(resumed.tensors == before);

    // A state made for one tensor of 203 elements is refused by the layered exchange.
    cp::data_parallel single(comm, pipe, opt, n);
    auto other = single.make_feedback_state();
    const auto g = gradient(0, 0);
    CHECK_THROWS_AS(
        dp.step(cp::cpu::seq, context_of(0), other, os, std::span(q), std::span<const float>(g)),
        cp::error);
    // With one tensor the checkpoint is the pipeline state's own blob.
    CHECK(other.save(3) == other.tensors[0].save(3));
  }
}
