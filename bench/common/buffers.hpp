// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Pre-faulted, reused benchmark buffers and reproducible inputs.
///
/// Touching fresh memory costs about 17 us per 4 KiB page on the VMs we measure on (perf.md B4),
/// so every buffer is allocated once per size, written in full before timing, and reused.

#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "commpress/core/rng.hpp"

namespace commpress_bench {

/// N(0,1)-like fp32 data (sum of four uniforms, centred and scaled), generated once per size.
inline const std::vector<float>& gaussian_input(std::size_t n) {
  static std::map<std::size_t, std::unique_ptr<std::vector<float>>> cache;
  auto& slot = cache[n];
  if (!slot) {
    slot = std::make_unique<std::vector<float>>(n);
    const auto key = commpress::make_rng_key(2026, 1);
    for (std::size_t i = 0; i < n; ++i) {
      const auto b = commpress::random_block(key, 0, i);
      float s = 0;
      for (unsigned w = 0; w < 4; ++w) s += commpress::uniform_from_bits(b.v[w]);
      (*slot)[i] = (s - 2.0f) * 1.7320508f;
    }
  }
  return *slot;
}

/// A zero-filled, already-faulted byte buffer of at least `bytes`, shared by benchmarks of a run.
inline std::vector<std::byte>& scratch(int slot, std::size_t bytes) {
  static std::map<int, std::vector<std::byte>> buffers;
  auto& b = buffers[slot];
  if (b.size() < bytes) {
    b.assign(bytes, std::byte{0});
    std::memset(b.data(), 1, b.size());
  }
  return b;
}

} // namespace commpress_bench
