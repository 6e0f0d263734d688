// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// How the streaming CPU kernels keep memory requests flowing: a software prefetch a fixed
/// distance ahead of the element being read, and non-temporal stores for large outputs.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"

namespace commpress::cpu::detail {

/// How far ahead of the element being read the streaming kernels prefetch: 2048 floats
/// (8 KiB, two pages). Each kernel asks for one cache line per 16 elements it reads, so the
/// requests are spread evenly over the pass instead of bunched at the start of a block; the
/// hardware prefetcher alone stops at every 4 KiB page, which is exactly one block of 1024
/// floats (bench/README.md).
inline constexpr std::size_t prefetch_ahead = 2048;

/// An array that a pass reading element i of it (or of an array it walks in step with) asks
/// to have element i + prefetch_ahead in cache, while that is below `end`. The default
/// prefetches nothing (a pass over data already in L1).
struct prefetch_stream {
  const float* base = nullptr;
  const float* end = nullptr;

  COMMPRESS_FORCEINLINE void operator()(std::size_t i) const {
#if defined(__GNUC__) || defined(__clang__)
    if (end - base > static_cast<std::ptrdiff_t>(i + prefetch_ahead))
      __builtin_prefetch(base + i + prefetch_ahead, 0, 3);
#else
    (void)i;
#endif
  }
};

/// Asks for the cache lines of bytes [p, p + bytes) (for writing where Write), as a pass over a
/// tile of a matrix's columns does with the run it reads a few rows on: with rows of 4 KiB or
/// more, each row's run starts a page or more after the last, where the hardware prefetcher
/// stops.
template <bool Write = false>
COMMPRESS_FORCEINLINE void prefetch_lines(const void* p, std::size_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  // From the line that holds p to the one that holds its last byte.
  const auto first = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{63};
  const auto last = reinterpret_cast<std::uintptr_t>(p) + bytes;
  for (std::uintptr_t line = first; line < last; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(line), Write ? 1 : 0, 3);
#else
  (void)p;
  (void)bytes;
#endif
}

/// The prefetch stream of a pass over x from element `first` up to element `end` (none for an
/// element type other than fp32: the stream counts floats).
template <element T> prefetch_stream ahead_of(const T* x, std::uint64_t first, std::uint64_t end) {
  if constexpr (std::same_as<T, float>)
    return {x + first, x + end};
  else
    return {};
}

/// Outputs at least this large are written with non-temporal stores where a kernel can: far
/// beyond any core's L2, and larger than the consumer could find in cache anyway (glibc's
/// memcpy switches at a similar size).
inline constexpr std::size_t streaming_store_min_bytes = std::size_t{32} << 20;

} // namespace commpress::cpu::detail
