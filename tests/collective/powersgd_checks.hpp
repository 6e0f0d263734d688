// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

// PowerSGD's exchange on any communicator (loopback threads or MPI processes): every rank gets
// the same result; a mean of rank at most r comes back exactly; each rank's error telescopes;
// the warm-up steps send the plain mean; the result matches a one-process replay of the
// algorithm on the summed matrices.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collective_checks.hpp"
#include "commpress/collective/powersgd.hpp"

namespace commpress::test {

/// Rank `rank`'s matrix at `step`: U diag(s) V^T with U, V shared by all ranks (so the mean has
/// rank at most r) and s depending on the rank and step, when `low_rank`; else entries of its own.
inline std::vector<float> powersgd_input(int rank, std::uint64_t step, std::uint64_t rows,
                                         std::uint64_t columns, std::uint64_t r, bool low_rank) {
  std::vector<float> m(rows * columns, 0.0f);
  if (!low_rank) {
    const auto key = make_rng_key(77, static_cast<std::uint32_t>(rank));
    for (std::uint64_t i = 0; i < m.size(); ++i)
      m[i] = uniform_from_bits(random_u32(key, step, i)) - 0.5f;
    return m;
  }
  const auto shared = make_rng_key(78, 0);
  for (std::uint64_t k = 0; k < r; ++k) {
    const float s = 1.0f + static_cast<float>(rank) + 0.25f * static_cast<float>(step + k);
    for (std::uint64_t i = 0; i < rows; ++i) {
      const float u = uniform_from_bits(random_u32(shared, k, i)) - 0.5f;
      for (std::uint64_t j = 0; j < columns; ++j) {
        const float v = uniform_from_bits(random_u32(shared, 1000 + k, j)) - 0.5f;
        m[i * columns + j] += s * u * v;
      }
    }
  }
  return m;
}

template <class Comm> failures check_powersgd(Comm& comm) {
  failures f;
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  const auto fail = [&](const std::string& what) {
    f.push_back(what + " (rank " + std::to_string(me) + ")");
  };

  // A mean of rank r is reconstructed exactly, the same on every rank, and each rank's error
  // telescopes: sum_t out_t + e_T = sum_t g_t.
  for (const std::uint64_t r : {1u, 3u}) {
    const std::uint64_t rows = 37, columns = 20;
    const powersgd_plan plan({.rank = static_cast<std::uint32_t>(r)}, rows, columns, ranks);
    powersgd_state st = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    std::vector<double> sent(rows * columns, 0.0), got(rows * columns, 0.0);
    for (std::uint64_t step = 0; step < 4; ++step) {
      const std::vector<float> g = powersgd_input(me, step, rows, columns, r, true);
      std::vector<float> out(g.size());
      const context ctx{.seed = 5, .step = step, .tensor_id = 9};
      const collective_result res = all_reduce_powersgd(comm, plan, st, ctx, g, out, ws);
      if (res.payload_bytes != 4 * (rows + columns) * r)
        fail("powersgd: payload bytes are not 4 (rows + columns) r");
      if (!same_on_all_ranks(comm, out))
        fail("powersgd: ranks got different results");
      for (std::uint64_t i = 0; i < g.size(); ++i) {
        sent[i] += g[i];
        got[i] += out[i];
      }
      if (step == 0) { // e_0 = 0, so the mean of the g is rank r: reconstructed exactly
        double worst = 0.0, scale = 0.0;
        for (std::uint64_t i = 0; i < g.size(); ++i) {
          double mean = 0.0;
          for (int q = 0; q < ranks; ++q)
            mean += powersgd_input(q, step, rows, columns, r, true)[i];
          mean /= ranks;
          worst = std::max(worst, std::abs(mean - out[i]));
          scale = std::max(scale, std::abs(mean));
        }
        if (worst > 1e-5 * scale)
          fail("powersgd: a rank-" + std::to_string(r) + " mean is not reconstructed exactly (" +
               std::to_string(worst / scale) + ")");
      }
    }
    double worst = 0.0;
    for (std::uint64_t i = 0; i < sent.size(); ++i)
      worst = std::max(worst, std::abs(got[i] + st.residual()[i] - sent[i]));
    if (worst > 1e-4)
      fail("powersgd: the error does not telescope (" + std::to_string(worst) + ")");
  }

  // Full-rank inputs: the result is the one-process replay on the summed matrices (to rounding:
  // the sums are taken in another order), and the warm-up steps send the exact mean.
  {
    const std::uint64_t rows = 16, columns = 24, r = 2;
    const powersgd c{.rank = 2, .start_iter = 1};
    const powersgd_plan plan(c, rows, columns, ranks);
    powersgd_state st = plan.make_state();
    std::vector<powersgd_state> replay_states;
    for (int q = 0; q < ranks; ++q)
      replay_states.push_back(plan.make_state());
    std::vector<std::byte> ws(plan.workspace_bytes());
    for (std::uint64_t step = 0; step < 3; ++step) {
      const context ctx{.seed = 3, .step = step, .tensor_id = 1};
      const std::vector<float> g = powersgd_input(me, step, rows, columns, r, false);
      std::vector<float> out(g.size());
      all_reduce_powersgd(comm, plan, st, ctx, g, out, ws);
      // The replay: every rank's round in this process, the sums taken by hand.
      std::vector<std::vector<std::byte>> wss(static_cast<std::size_t>(ranks),
                                              std::vector<std::byte>(plan.workspace_bytes()));
      std::vector<std::vector<float>> gs;
      std::vector<powersgd_round> rounds;
      for (int q = 0; q < ranks; ++q)
        gs.push_back(powersgd_input(q, step, rows, columns, r, false));
      for (int q = 0; q < ranks; ++q)
        rounds.emplace_back(plan, replay_states[static_cast<std::size_t>(q)], ctx,
                            std::span<const float>(gs[static_cast<std::size_t>(q)]),
                            std::span<std::byte>(wss[static_cast<std::size_t>(q)]));
      const auto sum_over = [&](auto&& phase) {
        std::vector<std::span<float>> parts;
        for (auto& rd : rounds)
          parts.push_back(phase(rd));
        std::vector<float> total(parts[0].size(), 0.0f);
        for (const auto& p : parts)
          for (std::size_t i = 0; i < p.size(); ++i)
            total[i] += p[i];
        for (auto& p : parts)
          std::copy(total.begin(), total.end(), p.begin());
      };
      sum_over([](powersgd_round& rd) { return rd.project(); });
      if (step >= c.start_iter)
        sum_over([](powersgd_round& rd) { return rd.back_project(); });
      std::vector<float> want(g.size()), other(g.size());
      for (int q = 0; q < ranks; ++q) // every replayed rank's state moves on
        rounds[static_cast<std::size_t>(q)].finish(q == me ? want : other);
      double worst = 0.0, scale = 0.0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::abs(out[i] - want[i])));
        scale = std::max(scale, static_cast<double>(std::abs(want[i])));
      }
      if (step < c.start_iter) {
        // Warm-up: the mean, summed by the transport in its own order.
        if (worst > 1e-6)
          fail("powersgd: a warm-up step is not the mean of the gradients");
      } else if (worst > 1e-4 * scale) {
        fail("powersgd: the result differs from the one-process replay at step " +
             std::to_string(step) + " (" + std::to_string(worst / scale) + ")");
      }
    }
  }
  return f;
}

} // namespace commpress::test
