// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The memory baseline every codec benchmark binary measures in its own run: one memcpy of the
/// n = state.range(0) fp32 values of the Gaussian input, in bytes of fp32 input per second.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>

#include "common/buffers.hpp"

namespace commpress_bench {

inline void BM_copy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto& x = gaussian_input(n);
  auto out = scratch(0, 4 * n);
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), 4 * n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
}

} // namespace commpress_bench
