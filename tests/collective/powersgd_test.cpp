// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// PowerSGD (collective/powersgd.hpp): its kernels, one rank's round, its state, its refusals, and
// the exchange over the loopback communicator with N = 1..4 ranks as threads.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "commpress/collective/powersgd.hpp"
#include "commpress/comm/loopback.hpp"
#include "powersgd_checks.hpp"

namespace cp = commpress;
namespace kernels = cp::cpu::powersgd_kernels;

namespace {

/// One step on one rank (N = 1): out = P^ Q^T of g + e.
cp::collective_result step_once(const cp::powersgd_plan& plan, cp::powersgd_state& st,
                                const std::vector<float>& g, std::vector<float>& out,
                                std::uint64_t step = 0,
                                cp::nonfinite_policy policy = cp::nonfinite_policy::propagate) {
  std::vector<std::byte> ws(plan.workspace_bytes());
  const cp::context ctx{.seed = 1, .step = step, .tensor_id = 4, .on_nonfinite = policy};
  cp::powersgd_round round(plan, st, ctx, g, ws);
  round.project();
  round.back_project();
  return round.finish(out);
}

double squared_error(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return s;
}

/// The truncated SVD's squared error, ||M||^2 minus the energy of M's leading r-dimensional
/// row space, by subspace iteration in double run to convergence (500 steps, Gram-Schmidt each
/// step): a reference independent of the float kernels under test.
double best_rank_error(const std::vector<float>& m, std::uint64_t rows, std::uint64_t columns,
                       std::uint64_t r) {
  std::vector<double> v(columns * r), w(columns * r), mv(rows * r);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(static_cast<double>(i) + 1.0);
  const auto orthonormalize = [&](std::vector<double>& a) {
    for (std::uint64_t i = 0; i < r; ++i) {
      for (std::uint64_t j = 0; j < i; ++j) {
        double dot = 0.0;
        for (std::uint64_t k = 0; k < columns; ++k)
          dot += a[k * r + i] * a[k * r + j];
        for (std::uint64_t k = 0; k < columns; ++k)
          a[k * r + i] -= dot * a[k * r + j];
      }
      double norm = 0.0;
      for (std::uint64_t k = 0; k < columns; ++k)
        norm += a[k * r + i] * a[k * r + i];
      for (std::uint64_t k = 0; k < columns; ++k)
        a[k * r + i] /= std::sqrt(norm);
    }
  };
  const auto times_m = [&] { // mv = M v
    for (std::uint64_t i = 0; i < rows; ++i)
      for (std::uint64_t c = 0; c < r; ++c) {
        double acc = 0.0;
        for (std::uint64_t k = 0; k < columns; ++k)
          acc += static_cast<double>(m[i * columns + k]) * v[k * r + c];
        mv[i * r + c] = acc;
      }
  };
  orthonormalize(v);
  for (int it = 0; it < 500; ++it) {
    times_m();
    for (std::uint64_t k = 0; k < columns; ++k) // w = M^T M v
      for (std::uint64_t c = 0; c < r; ++c) {
        double acc = 0.0;
        for (std::uint64_t i = 0; i < rows; ++i)
          acc += static_cast<double>(m[i * columns + k]) * mv[i * r + c];
        w[k * r + c] = acc;
      }
    v.swap(w);
    orthonormalize(v);
  }
  times_m();
  double total = 0.0, kept = 0.0;
  for (float x : m)
    total += static_cast<double>(x) * x;
  for (double x : mv)
    kept += x * x;
  return total - kept;
}

cp::errc code_of(auto&& call) {
  try {
    call();
  } catch (const cp::error& e) {
    return e.code();
  }
  return cp::errc::ok;
}

template <class Check> cp::test::failures run_world(int ranks, Check check) {
  cp::loopback_world world(ranks, std::chrono::milliseconds(60000));
  cp::test::failures all;
  std::mutex m;
  world.run([&](cp::loopback_communicator& comm) {
    const cp::test::failures f = check(comm);
    const std::lock_guard lock(m);
    all.insert(all.end(), f.begin(), f.end());
  });
  return all;
}

} // namespace

TEST_SUITE_BEGIN("collective");

TEST_CASE("powersgd kernels: P = M Q equals the matrices written out, orthogonalize gives "
          "orthonormal columns") {
  const std::uint64_t rows = 5, columns = 4, r = 2;
  std::vector<float> m(rows * columns), q(columns * r), p(rows * r);
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = static_cast<float>(static_cast<int>(i * 7 % 11) - 5);
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = static_cast<float>(static_cast<int>(i % 3) - 1) + 0.5f;
  kernels::project(m.data(), rows, columns, q.data(), r, p.data());
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint64_t k = 0; k < r; ++k) {
      float want = 0.0f;
      for (std::uint64_t j = 0; j < columns; ++j)
        want += m[i * columns + j] * q[j * r + k];
      CHECK(p[i * r + k] == doctest::Approx(want));
    }
  kernels::orthogonalize(p.data(), rows, r, 0.0f);
  for (std::uint64_t a = 0; a < r; ++a)
    for (std::uint64_t b = 0; b < r; ++b) {
      double dot = 0.0;
      for (std::uint64_t i = 0; i < rows; ++i)
        dot += static_cast<double>(p[i * r + a]) * p[i * r + b];
      CHECK(dot == doctest::Approx(a == b ? 1.0 : 0.0).epsilon(1e-6).scale(1.0));
    }
  // A zero column stays zero (PyTorch would divide 0 by 0).
  std::vector<float> zero(rows * r, 0.0f);
  kernels::orthogonalize(zero.data(), rows, r, 0.0f);
  for (float v : zero)
    CHECK(v == 0.0f);
}

TEST_CASE("powersgd kernels: M^T P and P Q^T add their products in their documented order, the "
          "same bits on one thread or several") {
  // Shapes off every sweep: rows not a multiple of the rows taken together, columns not a
  // multiple of any vector width, ranks below, at and above one sweep's.
  const cp::cpu::par_t one{.threads = 1};
  const cp::cpu::par_t team{.threads = 2, .grain = 64};
  for (const std::uint64_t rows : {1u, 7u, 33u})
    for (const std::uint64_t columns : {1u, 37u, 130u})
      for (const std::uint64_t r : {1u, 3u, 4u, 6u}) {
        CAPTURE(rows);
        CAPTURE(columns);
        CAPTURE(r);
        std::vector<float> m(rows * columns), p(rows * r), qt(r * columns);
        for (std::size_t i = 0; i < m.size(); ++i)
          m[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
        for (std::size_t i = 0; i < p.size(); ++i)
          p[i] = std::cos(0.91f * static_cast<float>(i));
        for (std::size_t i = 0; i < qt.size(); ++i)
          qt[i] = std::sin(1.3f * static_cast<float>(i) + 0.5f);

        // qt = (M^T P)^T: each element sums over the rows in order.
        std::vector<float> back(r * columns, -1.0f), back_team(r * columns, -2.0f);
        kernels::back_project(one, m.data(), rows, columns, p.data(), r, back.data());
        kernels::back_project(team, m.data(), rows, columns, p.data(), r, back_team.data());
        std::size_t back_wrong = 0;
        for (std::uint64_t c = 0; c < r; ++c)
          for (std::uint64_t j = 0; j < columns; ++j) {
            float want = 0.0f;
            for (std::uint64_t i = 0; i < rows; ++i)
              want += m[i * columns + j] * p[i * r + c];
            back_wrong += back[c * columns + j] == want ? 0u : 1u;
          }
        CHECK(back_wrong == 0);
        CHECK(back_team == back);

        // out = P Q^T: each element sums over the terms c < r in order; e = M - out.
        std::vector<float> e(rows * columns), out(rows * columns, -1.0f),
            out_team(rows * columns, -2.0f);
        for (std::size_t i = 0; i < e.size(); ++i)
          e[i] = 0.25f * static_cast<float>(i % 5);
        std::vector<float> e_team = e;
        CHECK(kernels::reconstruct_and_update(one, m.data(), rows, columns, p.data(), qt.data(), r,
                                              out.data(), e.data()) == 0);
        CHECK(kernels::reconstruct_and_update(team, m.data(), rows, columns, p.data(), qt.data(), r,
                                              out_team.data(), e_team.data()) == 0);
        std::size_t out_wrong = 0, e_wrong = 0;
        for (std::uint64_t i = 0; i < rows; ++i)
          for (std::uint64_t j = 0; j < columns; ++j) {
            float want = p[i * r] * qt[j];
            for (std::uint64_t c = 1; c < r; ++c)
              want += p[i * r + c] * qt[c * columns + j];
            out_wrong += out[i * columns + j] == want ? 0u : 1u;
            e_wrong += e[i * columns + j] == m[i * columns + j] - want ? 0u : 1u;
          }
        CHECK(out_wrong == 0);
        CHECK(e_wrong == 0);
        CHECK(out_team == out);
        CHECK(e_team == e);
      }
}

TEST_CASE("powersgd kernels: M = g + e screens g, and the error keeps its value where the new "
          "one is not finite") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::uint64_t rows = 3, columns = 21;
  std::vector<float> g(rows * columns), e(rows * columns), m(rows * columns);
  for (std::size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>(i) - 30.0f;
    e[i] = 0.5f;
  }
  g[4] = nan;
  g[9] = -0.0f;
  g[40] = -inf;
  g[41] = inf;
  const auto bad = [](std::size_t i) { return i == 4 || i == 40 || i == 41; };
  // One range per row, and one range for the whole matrix.
  const cp::cpu::par_t teams[] = {{.threads = 2, .grain = 16}, {.threads = 1, .grain = 1024}};
  SUBCASE("zero_and_count") {
    for (const cp::cpu::par_t& team : teams) {
      CHECK(kernels::form(team, g.data(), e.data(), cp::nonfinite_policy::zero_and_count, rows,
                          columns, m.data()) == 3);
      for (std::size_t i = 0; i < g.size(); ++i)
        CHECK(m[i] == (bad(i) ? 0.5f : g[i] + 0.5f));
    }
  }
  SUBCASE("propagate, and no error while warming up: M is g, bit for bit") {
    for (const cp::cpu::par_t& team : teams) {
      CHECK(kernels::form(team, g.data(), nullptr, cp::nonfinite_policy::propagate, rows, columns,
                          m.data()) == 3);
      CHECK(std::isnan(m[4]));
      CHECK(std::signbit(m[9]));
      for (std::size_t i = 0; i < g.size(); ++i)
        if (i != 4)
          CHECK(m[i] == g[i]);
    }
  }
  SUBCASE("a NaN or Inf in M keeps the old error, counted") {
    for (const cp::cpu::par_t& team : teams) {
      kernels::form(team, g.data(), e.data(), cp::nonfinite_policy::propagate, rows, columns,
                    m.data());
      const std::vector<float> p = {1.0f, 0.0f, 2.0f};
      const std::vector<float> qt(columns, 1.0f);
      std::vector<float> out(rows * columns), err = e;
      CHECK(kernels::reconstruct_and_update(team, m.data(), rows, columns, p.data(), qt.data(), 1,
                                            out.data(), err.data()) == 3);
      for (std::size_t i = 0; i < g.size(); ++i)
        CHECK(err[i] == (bad(i) ? e[i] : m[i] - p[i / columns]));
    }
  }
  SUBCASE("rank 0: out is 0 and the error is M") {
    const std::vector<float> mm = {1.0f, -2.0f, 3.0f};
    std::vector<float> out(3, 7.0f), err(3, 9.0f);
    CHECK(kernels::reconstruct_and_update(cp::cpu::par_t{}, mm.data(), 1, 3, nullptr, nullptr, 0,
                                          out.data(), err.data()) == 0);
    CHECK(out == std::vector<float>(3, 0.0f));
    CHECK(err == mm);
  }
}

TEST_CASE("powersgd: a rank-r matrix is reconstructed exactly, and the first step leaves e = M - "
          "out") {
  for (const std::uint64_t r : {1u, 2u, 4u}) {
    const std::uint64_t rows = 30, columns = 17;
    const std::vector<float> g = cp::test::powersgd_input(0, 0, rows, columns, r, true);
    const cp::powersgd_plan plan({.rank = static_cast<std::uint32_t>(r)}, rows, columns, 1);
    auto st = plan.make_state();
    std::vector<float> out(g.size());
    const auto res = step_once(plan, st, g, out);
    CHECK(res.held == 0);
    CHECK(res.payload_bytes == 4 * (rows + columns) * r);
    CHECK(std::sqrt(squared_error(g, out)) <
          1e-5 * std::sqrt(squared_error(g, std::vector<float>(g.size()))));
    for (std::size_t i = 0; i < g.size(); ++i)
      REQUIRE(st.residual()[i] == g[i] - out[i]);
  }
}

TEST_CASE("powersgd: warm-started steps on a fixed matrix approach the best rank-r error") {
  // Subspace iteration: with the last step's Q as the start, the error of P^ P^T M falls toward
  // the truncated SVD's, the sum of the squared singular values past r.
  const std::uint64_t rows = 40, columns = 30, r = 3;
  std::vector<float> m = cp::test::powersgd_input(0, 0, rows, columns, 1, false);
  const double best = best_rank_error(m, rows, columns, r);
  const cp::powersgd_plan plan({.rank = r}, rows, columns, 1);
  auto st = plan.make_state();
  std::vector<float> out(m.size());
  std::vector<double> errors;
  for (std::uint64_t t = 0; t < 30; ++t) {
    std::fill(st.residual().begin(), st.residual().end(), 0.0f); // the same M every step
    step_once(plan, st, m, out, t);
    errors.push_back(squared_error(m, out));
  }
  CHECK(errors.front() > 1.05 * best);
  CHECK(errors.back() < 1.02 * best);
  CHECK(errors.back() < errors.front());
  // Without the warm start every step starts afresh and stays near the first step's error.
  const cp::powersgd_plan cold({.rank = r, .warm_start = false}, rows, columns, 1);
  auto cst = cold.make_state();
  double cold_last = 0.0;
  for (std::uint64_t t = 0; t < 30; ++t) {
    std::fill(cst.residual().begin(), cst.residual().end(), 0.0f);
    step_once(cold, cst, m, out, t);
    cold_last = squared_error(m, out);
  }
  CHECK(cold_last > 1.05 * best);
}

TEST_CASE("powersgd: error feedback telescopes on one rank and keeps the sum of what was sent") {
  const std::uint64_t rows = 12, columns = 9;
  const cp::powersgd_plan plan({.rank = 1}, rows, columns, 1);
  auto st = plan.make_state();
  std::vector<double> sent(rows * columns, 0.0), got(rows * columns, 0.0);
  std::vector<float> out(rows * columns);
  for (std::uint64_t t = 0; t < 50; ++t) {
    const auto g = cp::test::powersgd_input(0, t, rows, columns, 1, false);
    step_once(plan, st, g, out, t);
    for (std::size_t i = 0; i < g.size(); ++i) {
      sent[i] += g[i];
      got[i] += out[i];
    }
  }
  double worst = 0.0;
  for (std::size_t i = 0; i < sent.size(); ++i)
    worst = std::max(worst, std::abs(got[i] + st.residual()[i] - sent[i]));
  CHECK(worst < 1e-4);
}

TEST_CASE("powersgd: the state checkpoints e and Q; a restored run continues bit for bit") {
  const std::uint64_t rows = 8, columns = 6;
  const cp::powersgd_plan plan({.rank = 2}, rows, columns, 1);
  auto a = plan.make_state();
  std::vector<float> out_a(rows * columns), out_b(rows * columns);
  for (std::uint64_t t = 0; t < 3; ++t)
    step_once(plan, a, cp::test::powersgd_input(0, t, rows, columns, 2, false), out_a, t);
  CHECK(a.has_q());
  const auto blob = a.save(4);
  auto b = plan.make_state();
  b.load(blob, 4);
  CHECK(b == a);
  const auto g = cp::test::powersgd_input(0, 3, rows, columns, 2, false);
  step_once(plan, a, g, out_a, 3);
  step_once(plan, b, g, out_b, 3);
  CHECK(out_a == out_b);
  CHECK(b == a);
  // Refusals leave the state as it was.
  auto c = plan.make_state();
  const auto before = c;
  CHECK(code_of([&] { c.load(blob, 5); }) == cp::errc::stream_mismatch);
  auto other = cp::powersgd_plan({.rank = 1}, rows, columns, 1).make_state();
  CHECK(code_of([&] { other.load(blob, 4); }) == cp::errc::size_mismatch);
  auto corrupted = blob;
  corrupted[40] = static_cast<std::byte>(static_cast<unsigned>(corrupted[40]) ^ 1u);
  CHECK(code_of([&] { c.load(corrupted, 4); }) == cp::errc::checksum_mismatch);
  CHECK(code_of([&] { c.load(std::span(blob).first(20), 4); }) == cp::errc::truncated);
  CHECK(c == before);
}

TEST_CASE("powersgd: the warm-up steps send the gradient itself and leave the error alone") {
  const cp::powersgd_plan plan({.rank = 1, .start_iter = 2}, 4, 5, 1);
  auto st = plan.make_state();
  const auto g = cp::test::powersgd_input(0, 0, 4, 5, 1, false);
  std::vector<float> out(g.size());
  const auto res = step_once(plan, st, g, out, 1);
  CHECK(out == g);
  CHECK(res.payload_bytes == 4 * 20);
  CHECK(plan.wire_bytes(1) == 0); // one rank sends nothing
  CHECK(cp::powersgd_plan({.rank = 1, .start_iter = 2}, 4, 5, 4).wire_bytes(1) ==
        2 * 3 * 4 * 20 / 4);
  CHECK(cp::powersgd_plan({.rank = 1, .start_iter = 2}, 4, 5, 4).wire_bytes(2) ==
        2 * 3 * 4 * 9 / 4);
  for (float e : st.residual())
    CHECK(e == 0.0f);
  CHECK_FALSE(st.has_q());
}

TEST_CASE("powersgd: non-finite inputs") {
  const std::uint64_t rows = 6, columns = 5;
  const cp::powersgd_plan plan({.rank = 2}, rows, columns, 1);
  auto g = cp::test::powersgd_input(0, 0, rows, columns, 2, false);
  g[7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(g.size());
  SUBCASE("propagate: the result is NaN, the error keeps its finite values") {
    auto st = plan.make_state();
    const auto res = step_once(plan, st, g, out);
    CHECK(res.nonfinite == 1);
    CHECK(std::isnan(out[7]));
    // The NaN reaches every column of P, so every new error is NaN and each keeps its old one.
    CHECK(res.held == rows * columns);
    for (float e : st.residual())
      REQUIRE(std::isfinite(e));
  }
  SUBCASE("zero_and_count: the NaN counts as 0") {
    auto st = plan.make_state();
    const auto res = step_once(plan, st, g, out, 0, cp::nonfinite_policy::zero_and_count);
    CHECK(res.nonfinite == 1);
    CHECK(res.held == 0);
    for (float v : out)
      REQUIRE(std::isfinite(v));
  }
  SUBCASE("fail: refused before anything is written") {
    auto st = plan.make_state();
    const auto before = st;
    CHECK(code_of([&] { step_once(plan, st, g, out, 0, cp::nonfinite_policy::fail); }) ==
          cp::errc::non_finite);
    CHECK(st == before);
  }
}

TEST_CASE("powersgd: edge shapes and refusals") {
  std::vector<float> out;
  SUBCASE("empty, one element, rank above the smaller side") {
    const cp::powersgd_plan empty({.rank = 4}, 0, 0, 1);
    auto st = empty.make_state();
    CHECK(step_once(empty, st, {}, out).payload_bytes == 0);
    const cp::powersgd_plan one({.rank = 4}, 1, 1, 1);
    CHECK(one.rank() == 1);
    auto s1 = one.make_state();
    out.resize(1);
    step_once(one, s1, {-2.5f}, out);
    CHECK(out[0] == doctest::Approx(-2.5f));
    const cp::powersgd_plan tall({.rank = 8}, 50, 3, 1);
    CHECK(tall.rank() == 3); // rank 3 of a 50 x 3 matrix is the whole matrix
    auto s2 = tall.make_state();
    const auto g = cp::test::powersgd_input(0, 0, 50, 3, 1, false);
    out.resize(g.size());
    step_once(tall, s2, g, out);
    CHECK(std::sqrt(squared_error(g, out)) < 1e-5);
  }
  SUBCASE("refusals") {
    CHECK(code_of([] { cp::powersgd_plan({.rank = 0}, 4, 4, 1); }) == cp::errc::invalid_argument);
    CHECK(code_of([] { cp::powersgd_plan({.rank = 1}, 4, 0, 1); }) == cp::errc::invalid_argument);
    CHECK(code_of([] { cp::powersgd_plan({.rank = 1}, 4, 4, 0); }) == cp::errc::invalid_argument);
    CHECK(code_of([] {
            cp::powersgd_plan({.rank = 1, .orthogonalization_epsilon = -1.0f}, 4, 4, 1);
          }) == cp::errc::invalid_argument);
    const cp::powersgd_plan plan({.rank = 1}, 4, 4, 1);
    auto st = plan.make_state();
    std::vector<float> g(16, 1.0f), wrong(15, 1.0f);
    std::vector<std::byte> ws(plan.workspace_bytes());
    const cp::context ctx{};
    CHECK(code_of([&] { cp::powersgd_round(plan, st, ctx, wrong, ws); }) ==
          cp::errc::size_mismatch);
    CHECK(code_of([&] {
            cp::powersgd_round(plan, st, ctx, g, std::span(ws).first(ws.size() - 4));
          }) == cp::errc::buffer_too_small);
    auto other = cp::powersgd_plan({.rank = 2}, 4, 4, 1).make_state();
    CHECK(code_of([&] { cp::powersgd_round(plan, other, ctx, g, ws); }) == cp::errc::size_mismatch);
    cp::loopback_world world(2, std::chrono::milliseconds(60000));
    world.run([&](cp::loopback_communicator& comm) { // a plan for 1 rank on a 2-rank world
      std::vector<float> o(16);
      std::vector<std::byte> w(plan.workspace_bytes());
      auto s = plan.make_state();
      CHECK(code_of([&] { cp::all_reduce_powersgd(comm, plan, s, ctx, g, o, w); }) ==
            cp::errc::size_mismatch);
    });
  }
}

TEST_CASE("all_reduce_powersgd over the loopback communicator, N = 1..4") {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    CAPTURE(ranks);
    const auto f =
        run_world(ranks, [](cp::loopback_communicator& c) { return cp::test::check_powersgd(c); });
    for (const auto& s : f)
      FAIL_CHECK(s);
    CHECK(f.empty());
  }
}

TEST_SUITE_END();
