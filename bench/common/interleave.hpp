// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Interleaved timing of a kernel and its baselines in one Google Benchmark run.
///
/// Run-to-run noise on the shared VMs we measure on is large (bench/README.md), and it drifts
/// within a process, so a ratio of two separately run benchmarks means little. run_interleaved
/// times the kernel and every baseline once per benchmark iteration (A B C, then the next iteration
/// rotated, B C A, ...), so drift hits all of them alike, and reports the median ns per element of
/// each as counters `<name>_ns` (and `<name>_min_ns`). The benchmark's own time (manual) is the
/// kernel's. scripts/bench_table.py turns the medians into the ratio table.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace commpress_bench {

/// One timed function: `run` does the work, `prepare` (untimed) runs just before it.
struct timed {
  std::string name;
  std::function<void()> run;
  std::function<void()> prepare = {};
};

/// Elements per benchmark row: COMMPRESS_BENCH_N, or 64 Mi (far beyond every cache).
inline std::size_t bench_elements() {
  const char* env = std::getenv("COMMPRESS_BENCH_N");
  return env != nullptr ? static_cast<std::size_t>(std::strtoull(env, nullptr, 10))
                        : std::size_t{1} << 26;
}

/// Iterations of a row: its own count, or COMMPRESS_BENCH_ITERS when set (quick runs).
inline int bench_iterations(int own) {
  const char* env = std::getenv("COMMPRESS_BENCH_ITERS");
  return env != nullptr ? std::atoi(env) : own;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// Times fns[0] (the kernel) and fns[1..] (its baselines) interleaved, once each per iteration,
/// and records their median and minimum ns per element over `elements` elements.
inline void run_interleaved(benchmark::State& state, std::size_t elements, std::vector<timed> fns) {
  using clock = std::chrono::steady_clock;
  const std::size_t m = fns.size();
  std::vector<std::vector<double>> t(m);
  for (auto& f : fns) { // warm-up: first-use costs (page faults, lazy tables) stay untimed
    if (f.prepare)
      f.prepare();
    f.run();
  }
  std::size_t rot = 0;
  for (auto _ : state) {
    double kernel_s = 0;
    for (std::size_t j = 0; j < m; ++j) {
      const std::size_t idx = (j + rot) % m;
      auto& f = fns[idx];
      if (f.prepare)
        f.prepare();
      benchmark::ClobberMemory();
      const auto t0 = clock::now();
      f.run();
      benchmark::ClobberMemory();
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      t[idx].push_back(s);
      if (idx == 0)
        kernel_s = s;
    }
    rot = (rot + 1) % m;
    state.SetIterationTime(kernel_s);
  }
  const double per = 1e9 / static_cast<double>(elements);
  for (std::size_t j = 0; j < m; ++j) {
    state.counters[fns[j].name + "_ns"] = median(t[j]) * per;
    state.counters[fns[j].name + "_min_ns"] = *std::min_element(t[j].begin(), t[j].end()) * per;
  }
}

} // namespace commpress_bench
