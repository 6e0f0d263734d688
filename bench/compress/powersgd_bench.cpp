// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// PowerSGD's local work per step on one rank (collective/powersgd.hpp: M = g + e, P = M Q,
// orthogonalise, Q = M^T P, out = P Q^T, e = M - out; the two all-reduces are the transport's),
// beside the baselines of the same run: one Eigen GEMM of the same shape, M (rows x columns)
// times Q (columns x r), and a memcpy of the gradient. Bytes are those of the fp32 gradient.
// Shapes: args (rows, columns, r).

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/buffers.hpp"
#include "common/copy.hpp"
#include "commpress/collective/powersgd.hpp"

namespace cp = commpress;
using commpress_bench::gaussian_input;
using commpress_bench::scratch_floats;

namespace {

void BM_powersgd_round(benchmark::State& state) {
  const auto rows = static_cast<std::uint64_t>(state.range(0));
  const auto columns = static_cast<std::uint64_t>(state.range(1));
  const auto r = static_cast<std::uint32_t>(state.range(2));
  const cp::powersgd_plan plan({.rank = r}, rows, columns, 1);
  auto st = plan.make_state();
  std::vector<std::byte> ws(plan.workspace_bytes());
  const auto g = gaussian_input(rows * columns);
  const auto out = scratch_floats(1, rows * columns);
  cp::context ctx{.seed = 1, .tensor_id = 3};
  for (auto _ : state) {
    cp::powersgd_round round(plan, st, ctx, g, ws);
    round.project();
    round.back_project();
    round.finish(out);
    ++ctx.step;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * rows * columns));
  state.counters["floats_sent_per_element"] =
      static_cast<double>(plan.message_floats(1)) / static_cast<double>(rows * columns);
}

/// The one product of the same shape: P = M Q, rows x columns times columns x r.
void BM_gemm_same_shape(benchmark::State& state) {
  const auto rows = static_cast<std::uint64_t>(state.range(0));
  const auto columns = static_cast<std::uint64_t>(state.range(1));
  const auto r = static_cast<std::uint64_t>(state.range(2));
  const auto m = gaussian_input(rows * columns);
  const auto q = gaussian_input(columns * r, 7);
  const auto p = scratch_floats(1, rows * r);
  for (auto _ : state) {
    cp::cpu::powersgd_kernels::project(m.data(), rows, columns, q.data(), r, p.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * rows * columns));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({784, 256, 1})
      ->Args({1024, 1024, 1})
      ->Args({1024, 1024, 4})
      ->Args({4096, 1024, 4})
      ->Args({4096, 4096, 8})
      ->Args({1024, 1024, 32})
      ->Unit(benchmark::kMillisecond);
}

} // namespace

BENCHMARK(BM_powersgd_round)->Apply(shapes);
BENCHMARK(BM_gemm_same_shape)->Apply(shapes);
BENCHMARK(commpress_bench::BM_copy)
    ->Arg(784 * 256)
    ->Arg(1024 * 1024)
    ->Arg(4096 * 1024)
    ->Arg(4096 * 4096)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
