// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The group statistics of the CPU kernels: the largest magnitude, and the least and greatest
/// value, as reductions of the bit patterns. Integer max and min reductions vectorize on every
/// instruction set, where a float `a > m ? a : m` reduction is left scalar by GCC; for
/// non-negative floats the unsigned order of the bits is the value order. And the canonical
/// sums of core/canonical_sum.hpp over elements read as fp32, their 32 lanes held in fp64
/// vectors.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"

namespace commpress::cpu::detail {

/// element(i) for each i of [0, n), a block of 256 at a time, each block's lines asked for by
/// prefetch(i), once per 16 elements, before its elements are read.
template <class Element>
COMMPRESS_FORCEINLINE void for_each_prefetched(std::size_t n, prefetch_stream prefetch,
                                               Element&& element) {
  for (std::size_t b = 0; b < n; b += 256) {
    const std::size_t e = n - b < 256 ? n : b + 256;
    for (std::size_t i = b; i < e; i += 16)
      prefetch(i);
    for (std::size_t i = b; i < e; ++i)
      element(i);
  }
}

/// Largest |x| bit pattern (the fp32 value's bits with the sign cleared) of x[0..n): the key of
/// the largest magnitude, >= 0x7f800000 iff some element is NaN or Inf. Calls prefetch(i) once
/// per 16 elements. The patterns are below 2^31, so their signed order is their unsigned one:
/// they are compared signed, which SSE2 does in one instruction (it has no unsigned compare).
template <element T>
COMMPRESS_SIMD_REDUCTION std::uint32_t
max_magnitude_bits(const T* COMMPRESS_RESTRICT x, std::size_t n, prefetch_stream prefetch = {}) {
  using namespace simd;
  vu most = splat_u32(0);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    for (std::size_t q = 0; q < 16; q += lanes)
      most = max_i32(most, magnitude_bits(load_lanes(x + i + q)));
  }
  std::int32_t r = reduce_max_i32(most);
  for (; i < n; ++i) {
    const auto m =
        static_cast<std::int32_t>(commpress::detail::float_to_bits(to_float(x[i])) & 0x7fffffffu);
    r = m > r ? m : r;
  }
  return static_cast<std::uint32_t>(r);
}

/// What value_range found of some elements: whether all are finite, and then the least and
/// greatest value.
struct value_range_result {
  bool finite;
  float lo;
  float hi;
};

/// value_range's result from the greatest and least bit patterns as signed and as unsigned
/// integers (see there).
inline value_range_result range_of_patterns(std::int32_t hi_s, std::int32_t lo_s,
                                            std::uint32_t hi_u, std::uint32_t lo_u) {
  const bool finite = hi_s < 0x7f800000 && hi_u < 0xff800000u;
  const bool some_negative = lo_s < 0;
  return {finite, commpress::detail::bits_to_float(some_negative ? hi_u : lo_u),
          commpress::detail::bits_to_float(hi_s >= 0 ? static_cast<std::uint32_t>(hi_s) : lo_u)};
}

/// The least and greatest of x[0..n) (n > 0) read as fp32, from four integer reductions of the bit
/// patterns: the greatest as a signed integer is the greatest value if that is not negative, and
/// the least unsigned is the greatest when all are negative (the least magnitude) and the least
/// when none is; the greatest unsigned is the least value when some is negative. A NaN or Inf
/// is the greatest signed (+) or unsigned (-) pattern. Where -0 and +0 tie for least or
/// greatest, this gives -0 for least and +0 for greatest, not the first of them; quantize's
/// records and coders come out the same either way, as they add +0 to lo. Calls prefetch(i)
/// once per 16 elements.
template <element T>
COMMPRESS_SIMD_REDUCTION value_range_result value_range(const T* COMMPRESS_RESTRICT x,
                                                        std::size_t n,
                                                        prefetch_stream prefetch = {}) {
  std::int32_t hi_s = INT32_MIN, lo_s = INT32_MAX;
  std::uint32_t hi_u = 0, lo_u = 0xffffffffu;
  const auto fold = [&](std::uint32_t u) {
    const auto s = static_cast<std::int32_t>(u);
    hi_s = s > hi_s ? s : hi_s;
    lo_s = s < lo_s ? s : lo_s;
    hi_u = u > hi_u ? u : hi_u;
    lo_u = u < lo_u ? u : lo_u;
  };
#if defined(COMMPRESS_SIMD_PORTABLE)
  // On the portable layer an element loop, which GCC vectorizes with one vector per
  // reduction, where the layer's four 16-lane accumulators do not fit in SSE2's registers
  // (bench/README.md); but for fp16 elements, which the layer converts a vector at a time.
  if constexpr (!std::same_as<T, half>) {
    for_each_prefetched(n, prefetch, [&](std::size_t k) {
      fold(commpress::detail::float_to_bits(to_float(x[k])));
    });
    return range_of_patterns(hi_s, lo_s, hi_u, lo_u);
  }
#endif
  using namespace simd;
  vu max_s = splat_u32(0x80000000u), min_s = splat_u32(0x7fffffffu);
  vu max_u = splat_u32(0), min_u = splat_u32(0xffffffffu);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch(i);
    for (std::size_t q = 0; q < 16; q += lanes) {
      const vu v = load_lane_bits(x + i + q);
      max_s = max_i32(max_s, v);
      min_s = min_i32(min_s, v);
      max_u = max_u32(max_u, v);
      min_u = min_u32(min_u, v);
    }
  }
  hi_s = reduce_max_i32(max_s);
  lo_s = reduce_min_i32(min_s);
  hi_u = reduce_max_u32(max_u);
  lo_u = reduce_min_u32(min_u);
  for (; i < n; ++i)
    fold(commpress::detail::float_to_bits(to_float(x[i])));
  return range_of_patterns(hi_s, lo_s, hi_u, lo_u);
}

/// A term of a canonical sum over fp32 elements: x * x in double (exact), 0 for NaN or Inf.
/// `screen` and `widened` compute it on lanes in two steps, before and after the widening to
/// fp64; `of` computes it for one element, the same value.
struct finite_square {
  static COMMPRESS_FORCEINLINE simd::vf screen(simd::vf v) {
    return simd::clear(simd::nonfinite(v), v);
  }
  static COMMPRESS_FORCEINLINE simd::vd widened(simd::vd d) { return simd::mul_f64(d, d); }
  static COMMPRESS_FORCEINLINE double of(float x) {
    return commpress::detail::is_finite(x) ? static_cast<double>(x) * x : 0.0;
  }
};

/// canonical_sum of Term::of(to_float(x[i])) over x[0..m). Each row of 32 elements adds to the
/// 32 lanes at once, lane j taking element j of the row: the additions of the canonical order,
/// lane by lane in increasing i, so the same bits; the last partial row goes lane by lane. The
/// kit calls it on a chunk it has just read for the chunk's statistics, so it does not prefetch.
template <class Term, element T>
double canonical_sum_f32(const T* COMMPRESS_RESTRICT x, std::uint64_t m) {
  using namespace simd;
  constexpr std::size_t row_vectors = canonical_lanes / lanes_f64;
  vd lanes_of_row[row_vectors];
  for (vd& l : lanes_of_row)
    l = zero_f64();
  std::uint64_t i = 0;
  for (; m - i >= canonical_lanes; i += canonical_lanes) {
    for (std::size_t q = 0; q < canonical_lanes / lanes; ++q) {
      const vf v = Term::screen(load_lanes(x + i + q * lanes));
      lanes_of_row[2 * q] = add_f64(lanes_of_row[2 * q], Term::widened(widen_low(v)));
      lanes_of_row[2 * q + 1] = add_f64(lanes_of_row[2 * q + 1], Term::widened(widen_high(v)));
    }
  }
  double lane[canonical_lanes];
  for (std::size_t k = 0; k < row_vectors; ++k)
    store(lane + k * lanes_f64, lanes_of_row[k]);
  for (std::uint64_t j = 0; i + j < m; ++j)
    lane[j] += Term::of(to_float(x[i + j]));
  return commpress::detail::fold_lanes(lane);
}

/// canonical_chunked_sum of m terms from the sums of its chunks: chunk_sum(first, len) returns
/// the canonical sum of terms [first, first + len), and is called for each chunk in order.
template <class ChunkSum> double sum_of_chunk_sums(std::uint64_t m, ChunkSum&& chunk_sum) {
  double lane[canonical_lanes] = {};
  for (std::uint64_t first = 0, c = 0; first < m; first += canonical_chunk, ++c)
    lane[c % canonical_lanes] += chunk_sum(first, std::min(m - first, canonical_chunk));
  return commpress::detail::fold_lanes(lane);
}

} // namespace commpress::cpu::detail
