// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A summation order fixed by the definition, so that a CPU loop and a GPU warp produce the
/// same bits for the same terms (docs/methods.md 10.4 and 11.1, C0.1).
///
/// Floating-point addition is not associative: a sequential host loop and a parallel GPU
/// reduction give different sums unless both follow one order. This header defines that order
/// in terms a warp runs naturally.
///
/// **canonical_sum(v[0..m))**, in double:
/// 1. 32 lanes, each starting at +0.0. Lane j adds v[i] for every i with i % 32 == j, in
///    increasing i (lane j sees v[j], v[j + 32], v[j + 64], ...).
/// 2. A fixed tree over the lanes: for w = 16, 8, 4, 2, 1, lane[j] = lane[j] + lane[j + w] for
///    every j < w. The result is lane[0].
///
/// A GPU runs step 1 with the 32 threads of a warp striding over the terms and step 2 with
/// `v += __shfl_down_sync(~0u, v, w)` for w = 16, 8, 4, 2, 1 (lane j's addend is lane j + w).
///
/// **canonical_chunked_sum(v[0..m))**: the terms are cut into consecutive chunks of
/// canonical_chunk (32768) terms, the last one possibly shorter; the result is canonical_sum over
/// the canonical sums of the chunks, in chunk order (with one chunk: that chunk's sum). A GPU
/// gives each chunk to one warp, or to one block that ends with a warp, and combines the chunk
/// sums with the same canonical_sum, so long groups still use the whole device.
///
/// Terms are double: a float's |x| and a float product x * x are exact in double, so the only
/// roundings are the additions above, which are the same on both backends (neither FMA
/// contraction nor a different rounding mode can change x * x + s when x * x is exact).
///
/// A NaN term makes the sum NaN, but which NaN is unspecified: x86 and GPUs pass different
/// operands' payloads through an addition (seen on an H200). Consumers only test for NaN:
/// sign::scale_from_sum turns any NaN sum into the canonical float NaN.

#include <cstdint>

#include "commpress/core/config.hpp"

namespace commpress {

/// @brief Number of lanes of the canonical order (one warp).
inline constexpr unsigned canonical_lanes = 32;
/// @brief Terms per chunk of canonical_chunked_sum.
inline constexpr std::uint64_t canonical_chunk = 32768;

namespace detail {
/// The fixed tree that folds the 32 lanes: lane[j] += lane[j + w] for w = 16, 8, 4, 2, 1.
COMMPRESS_HOST_DEVICE inline double fold_lanes(double (&lane)[canonical_lanes]) {
  for (unsigned w = canonical_lanes / 2; w > 0; w /= 2)
    for (unsigned j = 0; j < w; ++j)
      lane[j] += lane[j + w];
  return lane[0];
}
} // namespace detail

/// @brief Sum of term(0) .. term(m - 1) in the canonical 32-lane order (see the file comment).
/// @param term callable `double(std::uint64_t i)`, called once per i in increasing order
// Host-only callables are fine on the host: nvcc's host/device check is off for this template
// (as Thrust does for its algorithms), the device instantiation needs a device callable.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Term> COMMPRESS_HOST_DEVICE double canonical_sum(std::uint64_t m, Term&& term) {
  double lane[canonical_lanes] = {};
  for (std::uint64_t i = 0; i < m; ++i)
    lane[i % canonical_lanes] += term(i);
  return detail::fold_lanes(lane);
}

/// @brief Canonical sum of the canonical sums of consecutive chunks of canonical_chunk terms:
/// the order every group reduction (sign scales) uses, on every backend.
/// @param term callable `double(std::uint64_t i)`, called once per i in increasing order
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Term>
COMMPRESS_HOST_DEVICE double canonical_chunked_sum(std::uint64_t m, Term&& term) {
  // Written without nested lambdas: nvcc 13 rejects (or crashes on) a host callable reached
  // through a lambda inside a host-device template.
  double lane[canonical_lanes] = {};
  const std::uint64_t chunks = (m + canonical_chunk - 1) / canonical_chunk;
  for (std::uint64_t c = 0; c < chunks; ++c) {
    const std::uint64_t first = c * canonical_chunk;
    const std::uint64_t len = m - first < canonical_chunk ? m - first : canonical_chunk;
    double inner[canonical_lanes] = {};
    for (std::uint64_t i = 0; i < len; ++i)
      inner[i % canonical_lanes] += term(first + i);
    lane[c % canonical_lanes] += detail::fold_lanes(inner);
  }
  return detail::fold_lanes(lane);
}

} // namespace commpress
