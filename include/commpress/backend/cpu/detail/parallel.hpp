// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The loop of cpu::par: a range of work units cut into fixed-size ranges, shared among
/// OpenMP threads with a static schedule.
///
/// The ranges depend on the tensor and the policy's grain only, never on the thread count, and
/// every range writes its own bytes; the only value combined across ranges is a count of
/// non-finite elements, an integer sum. So the bytes are the same for any team size, and with
/// OpenMP off (the pragma ignored) the same loop runs the ranges in order on one thread.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/math.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace commpress::cpu::detail {

/// Elements per range when par_t::grain is 0: a fork/join costs a few microseconds, 1 Mi
/// elements take about a millisecond.
inline constexpr std::uint64_t par_default_grain = std::uint64_t{1} << 20;

/// Elements per range of policy p: its grain rounded up to a multiple of 64, so that a range of
/// 1-, 2-, 4- or b-bit codes starts on a byte and the streaming kernels start on a cache line.
inline std::uint64_t range_elements(const par_t& p) {
  const std::uint64_t g = p.grain == 0 ? par_default_grain : p.grain;
  return (g + 63) / 64 * 64;
}

/// Whether n elements make at least two ranges; below that, par runs seq's code.
inline bool splits(const par_t& p, std::uint64_t n) {
  return n / 2 >= range_elements(p);
}

/// Groups of `len` elements per range: about range_elements(p) elements, and a multiple of 8
/// groups, so that every range's first element is a multiple of 8 (its codes start on a byte).
inline std::uint64_t group_step(const par_t& p, std::uint64_t len) {
  const std::uint64_t groups = range_elements(p) / len;
  return groups < 8 ? 8 : groups / 8 * 8;
}

/// The threads p's team has: p.threads, or where that is 0 OpenMP's default (1 without OpenMP).
inline int team_size(const par_t& p) {
#if defined(_OPENMP)
  if (p.threads == 0)
    return omp_get_max_threads();
#endif
  return p.threads == 0 ? 1 : static_cast<int>(p.threads);
}

/// Calls body(first, last) for the ranges [first, last) of `step` units that cover [0, n), the
/// last one possibly shorter, on p's threads, and returns the sum of body's results (counts).
/// body must not throw: an exception cannot leave an OpenMP region.
template <class Body>
std::size_t parallel_sum([[maybe_unused]] const par_t& p, std::uint64_t n, std::uint64_t step,
                         Body&& body) {
  const std::int64_t ranges = static_cast<std::int64_t>((n + step - 1) / step);
  if (ranges <= 1) // no team for a single range
    return ranges == 0 ? 0 : body(std::uint64_t{0}, n);
  std::size_t total = 0;
#if defined(_OPENMP)
  const int threads = team_size(p);
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : total)
#endif
  for (std::int64_t r = 0; r < ranges; ++r) {
    const std::uint64_t first = static_cast<std::uint64_t>(r) * step;
    const std::uint64_t last = n - first < step ? n : first + step;
    total += body(first, last);
  }
  return total;
}

/// Combines body(first, last) of every range (as parallel_sum cuts them) with `combine`, from
/// `init`, on p's threads without allocating. The ranges are combined in an order that depends
/// on the threads, so combine must be exactly associative and commutative (integer sums,
/// maxima): then the result does not depend on the team either. body must not throw.
template <class T, class Body, class Combine>
T parallel_reduce([[maybe_unused]] const par_t& p, std::uint64_t n, std::uint64_t step, T init,
                  Body&& body, Combine&& combine) {
  const std::int64_t ranges = static_cast<std::int64_t>((n + step - 1) / step);
  if (ranges <= 1)
    return ranges == 0 ? init : combine(init, body(std::uint64_t{0}, n));
  T total = init;
#if defined(_OPENMP)
  const int threads = team_size(p);
#pragma omp parallel num_threads(threads)
  {
    T mine = init;
#pragma omp for schedule(static) nowait
    for (std::int64_t r = 0; r < ranges; ++r) {
      const std::uint64_t first = static_cast<std::uint64_t>(r) * step;
      mine = combine(mine, body(first, n - first < step ? n : first + step));
    }
#pragma omp critical(commpress_parallel_reduce)
    total = combine(total, mine);
  }
#else
  for (std::int64_t r = 0; r < ranges; ++r) {
    const std::uint64_t first = static_cast<std::uint64_t>(r) * step;
    total = combine(total, body(first, n - first < step ? n : first + step));
  }
#endif
  return total;
}

/// parallel_sum for bodies that count nothing.
template <class Body>
void parallel_for(const par_t& p, std::uint64_t n, std::uint64_t step, Body&& body) {
  parallel_sum(p, n, step, [&](std::uint64_t first, std::uint64_t last) -> std::size_t {
    body(first, last);
    return 0;
  });
}

/// canonical_chunked_sum (core/canonical_sum.hpp) of m terms with its chunks on p's threads.
/// Outer lane j adds the sums of chunks j, j + 32, j + 64, ... in that order, as
/// canonical_chunked_sum does, and one thread runs each lane, so the lanes and their fixed tree
/// give seq's bits. chunk_sum(first, len, bad) returns the canonical sum of the terms
/// [first, first + len) and counts their non-finite elements into bad.
template <class ChunkSum>
double parallel_canonical_chunked_sum(const par_t& p, std::uint64_t m, std::size_t& bad,
                                      ChunkSum&& chunk_sum) {
  const std::uint64_t chunks = commpress::detail::ceil_div(m, canonical_chunk);
  double lane[canonical_lanes] = {};
  bad += parallel_sum(p, canonical_lanes, 1, [&](std::uint64_t j, std::uint64_t) {
    std::size_t count = 0;
    for (std::uint64_t k = j; k < chunks; k += canonical_lanes) {
      const std::uint64_t first = k * canonical_chunk;
      lane[j] += chunk_sum(first, std::min(m - first, canonical_chunk), count);
    }
    return count;
  });
  return commpress::detail::fold_lanes(lane);
}

} // namespace commpress::cpu::detail
