// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The compressed collectives and stage channels over the in-process loopback communicator,
// N = 1..4 ranks as threads: the shared checks of collective_checks.hpp plus argument errors.

#include <doctest/doctest.h>

#include "collective_checks.hpp"

#include <commpress/comm/loopback.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace cp = commpress;
using cp::test::failures;

namespace {

/// Runs `check(comm)` on every rank of an N-rank world; returns every rank's failures.
template <class Check> failures run_world(int ranks, Check check) {
  cp::loopback_world world(ranks, std::chrono::milliseconds(60000));
  failures all;
  std::mutex m;
  world.run([&](cp::loopback_communicator& comm) {
    const failures f = check(comm);
    const std::lock_guard lock(m);
    all.insert(all.end(), f.begin(), f.end());
  });
  return all;
}

void report(const failures& f) {
  for (const auto& s : f)
    FAIL_CHECK(s);
  CHECK(f.empty());
}

} // namespace

TEST_SUITE_BEGIN("collective");

TEST_CASE("chunk_layout: chunks of ceil(n / N) rounded up to the alignment, short or empty last") {
  const auto a = cp::chunk_layout::make(5, 4);
  CHECK(a.chunk == 2);
  CHECK(a.length(0) == 2);
  CHECK(a.length(1) == 2);
  CHECK(a.length(2) == 1);
  CHECK(a.length(3) == 0);
  CHECK(a.offset(3) == 5);
  const auto b = cp::chunk_layout::make(1003, 3, 32);
  CHECK(b.chunk == 352); // ceil(1003 / 3) = 335 -> 352
  CHECK(b.length(2) == 1003 - 704);
  const auto c = cp::chunk_layout::make(0, 4);
  CHECK(c.length(0) == 0);
  CHECK(cp::chunk_alignment(cp::quantize{.bits = 4, .group = 96}) == 96);
  CHECK(cp::chunk_alignment(cp::top_k{.row_length = 10}) == 10);
  CHECK(cp::chunk_alignment(cp::sign{}) == 1);
  CHECK(cp::chunk_alignment(cp::rotated<cp::quantize>{{.bits = 4, .group = 96}, 5}) == 96);
  CHECK(cp::chunk_alignment(cp::rotated<cp::sign>{{}, 8}) == 256);
}

TEST_CASE("codec_aggregation: identity and random_k are sum-compatible, the others gather") {
  static_assert(cp::sum_compatible_v<cp::identity>);
  static_assert(cp::sum_compatible_v<cp::random_k>);
  static_assert(!cp::sum_compatible_v<cp::top_k>);
  static_assert(!cp::sum_compatible_v<cp::sign>);
  static_assert(!cp::sum_compatible_v<cp::quantize>);
  static_assert(!cp::sum_compatible_v<cp::cast>);
  static_assert(cp::collective_pipeline<cp::pipeline<cp::ef, cp::sign>>);
  static_assert(!cp::collective_pipeline<cp::pipeline<cp::ef21, cp::sign>>);
  CHECK(true);
}

TEST_CASE(
    "all_reduce_compressed: identity equals the transport sum and the ordered sum, N = 1..4") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    report(run_world(n, [](cp::loopback_communicator& c) {
      return cp::test::check_identity_all_reduce(c,
                                                 [&c](std::span<float> x) { c.all_reduce_sum(x); });
    }));
  }
}

TEST_CASE("all_reduce_compressed: random_k with a shared seed equals the decoded-payload replay") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    report(run_world(
        n, [](cp::loopback_communicator& c) { return cp::test::check_random_k_all_reduce(c); }));
  }
}

TEST_CASE("all_gather_compressed: top_k, sign, quantize, cast, QSGD Elias equal the replay, "
          "N = 1..4") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    report(
        run_world(n, [](cp::loopback_communicator& c) { return cp::test::check_all_gather(c); }));
  }
}

TEST_CASE("sharded_all_reduce_compressed: two EF points, replay-exact, E8 telescoping, N = 1..4") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    report(run_world(n, [](cp::loopback_communicator& c) { return cp::test::check_sharded(c); }));
  }
}

TEST_CASE("variable-length payloads: a peer length outside [header, slot] is errc::corrupt") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    report(run_world(
        n, [](cp::loopback_communicator& c) { return cp::test::check_corrupt_length(c); }));
  }
}

TEST_CASE("data_parallel with a layer policy: replay-exact and the same on every rank, N = 1..4") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    report(run_world(
        n, [](cp::loopback_communicator& c) { return cp::test::check_data_parallel_layers(c); }));
  }
}

TEST_CASE("data_parallel and onebit_adam: QSGD Elias payloads at their length, replay-exact, "
          "wire bytes by the formula, fixed codecs unchanged, N = 1, 2, 4") {
  for (int n : {1, 2, 4}) {
    CAPTURE(n);
    report(run_world(
        n, [](cp::loopback_communicator& c) { return cp::test::check_optim_variable(c); }));
  }
}

TEST_CASE("data_parallel and onebit_adam: a peer length outside [header, slot] is errc::corrupt") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    report(run_world(
        n, [](cp::loopback_communicator& c) { return cp::test::check_optim_corrupt_length(c); }));
  }
}

TEST_CASE("stage_sender: a 3-stage pipeline over 3 ranks reproduces the single-process channels") {
  report(
      run_world(3, [](cp::loopback_communicator& c) { return cp::test::check_stage_pipeline(c); }));
}

TEST_CASE("collectives: bad sizes, workspaces and worlds throw instead of falling back") {
  cp::loopback_world world(2, std::chrono::milliseconds(20000));
  auto comm = world.communicator(0);
  const cp::pipeline<cp::none, cp::identity> id{};
  const cp::all_gather_plan plan(id, 10, 2);
  auto st = plan.make_state();
  std::vector<std::byte> ws(plan.workspace_bytes());
  std::vector<float> in(10), out(10), small(9);
  // Every error below is detected before the first collective, so one rank alone can test it.
  CHECK_THROWS_AS(cp::all_gather_compressed(comm, cp::cpu::seq, plan, st, {}, in, small, ws),
                  cp::error);
  std::vector<std::byte> short_ws(ws.size() - 1);
  CHECK_THROWS_AS(cp::all_gather_compressed(comm, cp::cpu::seq, plan, st, {}, in, out, short_ws),
                  cp::error);
  const cp::all_gather_plan three(id, 10, 3);
  std::vector<std::byte> ws3(three.workspace_bytes());
  CHECK_THROWS_AS(cp::all_gather_compressed(comm, cp::cpu::seq, three, st, {}, in, out, ws3),
                  cp::error);
  // A column quantizer needs whole rows in each chunk: 10 elements of 4 columns cannot be cut.
  const cp::pipeline<cp::none, cp::quantize> col{
      {}, {.bits = 4, .granularity = cp::scale_granularity::column, .group = 4}};
  CHECK_THROWS_AS(cp::sharded_plan(col, 10, 2), cp::error);
  CHECK_NOTHROW(cp::sharded_plan(col, 12, 2));
  const auto lay = cp::sharded_plan(col, 12, 2).layout();
  CHECK(lay.chunk == 8); // ceil(12 / 2) = 6 -> 8, a multiple of the 4 columns
  CHECK_THROWS_AS(cp::all_reduce_plan(cp::pipeline<cp::none, cp::random_k>{}, 10, 0), cp::error);
}

TEST_CASE("stage_receiver: a frame larger than the channel is refused") {
  cp::loopback_world world(2, std::chrono::milliseconds(20000));
  const cp::pipeline<cp::none, cp::identity> id{};
  std::string error;
  std::mutex m;
  world.run([&](cp::loopback_communicator& c) {
    if (c.rank() == 0) {
      cp::stage_sender tx(c, 1, 0, id, 32, {});
      tx.send(std::vector<float>(32, 1.0f));
    } else {
      cp::stage_receiver rx(c, 0, 0, id, 16, {});
      try {
        rx.receive();
      } catch (const cp::error& e) {
        const std::lock_guard lock(m);
        error = e.what();
      }
    }
  });
  CHECK(error.find("commpress: stage_channel: frame announces") == 0);
}

TEST_SUITE_END();
