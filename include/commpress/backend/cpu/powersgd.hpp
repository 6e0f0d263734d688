// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU kernels of PowerSGD (compress/powersgd.hpp): M = g + e, its three matrix products,
/// the Gram-Schmidt orthogonalisation and the start matrix Q. Every matrix is a row-major float
/// array: M is rows x columns, P is rows x r, Q is columns x r and qt = Q^T is r x columns.
///
/// P = M Q stays on Eigen (bench/README.md, PowerSGD's "Tried and not kept"). Q = M^T P and
/// out = P Q^T are loops of their own, for the small ranks PowerSGD runs at: the first streams
/// M once, and the second writes out and the new error e in one pass, a row at a time. Each of
/// their elements adds its products in one fixed order (down the rows of M; over the rank-one
/// terms P_c Q_c^T, c < r), so that, with the library's -ffp-contract=off, any vector width and
/// any split among threads gives the same bits.
/// Needs Eigen 3 (link commpress::eigen).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

// GCC 12 reports false -W(maybe-)uninitialized warnings inside Eigen's AVX-512 product kernels
// (at -march=native, worst with sanitizers); the pragmas keep them out of users' -Werror builds
// for the code this header instantiates.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

#include "commpress/backend/cpu/detail/parallel.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress::cpu::powersgd_kernels {

using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using view = Eigen::Map<row_major>;
using const_view = Eigen::Map<const row_major>;

inline Eigen::Index index(std::uint64_t v) {
  return static_cast<Eigen::Index>(v);
}

/// P = M Q.
inline void project(const float* m, std::uint64_t rows, std::uint64_t columns, const float* q,
                    std::uint64_t r, float* p) {
  view(p, index(rows), index(r)).noalias() =
      const_view(m, index(rows), index(columns)) * const_view(q, index(columns), index(r));
}

/// m = screen(g) + e, or m = screen(g) where e is null, for elements [first, last); returns
/// g's NaN/Inf count there (core/context.hpp's screen, in a loop the compiler vectorizes).
/// m overlaps neither g nor e.
inline std::size_t form_range(const float* COMMPRESS_RESTRICT g, const float* COMMPRESS_RESTRICT e,
                              nonfinite_policy policy, std::uint64_t first, std::uint64_t last,
                              float* COMMPRESS_RESTRICT m) {
  std::size_t bad = 0;
  for (std::uint64_t i = first; i < last; ++i) {
    const float x = commpress::detail::screen(g[i], policy, bad);
    m[i] = e == nullptr ? x : x + e[i];
  }
  return bad;
}

/// What one sweep over M takes together: up to terms_per_sweep of the r terms c (columns of P
/// and of Q; their loop unrolled by with_terms) and, in back_project, rows_per_sweep rows of M,
/// whose products each element of qt adds between one load and one store.
inline constexpr std::size_t terms_per_sweep = 4;
inline constexpr std::size_t rows_per_sweep = 4;

/// fn.template operator()<R>() for R = n, 1 <= n <= terms_per_sweep.
template <class Fn> COMMPRESS_FORCEINLINE void with_terms(std::uint64_t n, Fn&& fn) {
  [&]<std::size_t... R>(std::index_sequence<R...>) {
    (void)((n == R + 1 ? (fn.template operator()<R + 1>(), true) : false) || ...);
  }
  (std::make_index_sequence<terms_per_sweep>{});
}

/// t (columns x rows) = a^T for a row-major rows x columns a.
inline void transpose(const float* a, std::uint64_t rows, std::uint64_t columns, float* t) {
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint64_t j = 0; j < columns; ++j)
      t[j * rows + i] = a[i * columns + j];
}

/// Adds the products of K rows of M (from mi, columns apart) and their P values (from pi, r
/// apart) to columns [first, last) of the R rows of qt from qt_c, one row after the other.
template <std::size_t K, std::size_t R>
COMMPRESS_FORCEINLINE void back_project_sweep(const float* COMMPRESS_RESTRICT mi,
                                              std::uint64_t columns, const float* pi,
                                              std::uint64_t r, std::uint64_t first,
                                              std::uint64_t last, float* COMMPRESS_RESTRICT qt_c) {
  for (std::size_t c = 0; c < R; ++c) {
    float w[K];
    for (std::size_t k = 0; k < K; ++k)
      w[k] = pi[k * r + c];
    float* COMMPRESS_RESTRICT t = qt_c + c * columns;
    for (std::uint64_t j = first; j < last; ++j) {
      float a = t[j];
      for (std::size_t k = 0; k < K; ++k)
        a += mi[k * columns + j] * w[k];
      t[j] = a;
    }
  }
}

/// Columns [first, last) of qt = (M^T P)^T = P^T M (r x columns, M rows x columns): each element
/// the sum of its products over the rows in order, so that its rounding depends on nothing else
/// (not the vector width, not the columns' split among threads).
inline void back_project_columns(const float* m, std::uint64_t rows, std::uint64_t columns,
                                 const float* p, std::uint64_t r, std::uint64_t first,
                                 std::uint64_t last, float* qt) {
  for (std::uint64_t c = 0; c < r; ++c)
    std::fill(qt + c * columns + first, qt + c * columns + last, 0.0f);
  for (std::uint64_t i = 0; i < rows; i += rows_per_sweep)
    for (std::uint64_t c0 = 0; c0 < r; c0 += terms_per_sweep)
      with_terms(std::min<std::uint64_t>(terms_per_sweep, r - c0), [&]<std::size_t R>() {
        float* qt_c = qt + c0 * columns;
        if (rows - i >= rows_per_sweep)
          back_project_sweep<rows_per_sweep, R>(m + i * columns, columns, p + i * r + c0, r, first,
                                                last, qt_c);
        else
          for (std::uint64_t k = i; k < rows; ++k)
            back_project_sweep<1, R>(m + k * columns, columns, p + k * r + c0, r, first, last,
                                     qt_c);
      });
}

/// Adds the R terms of one row of out = P Q^T from term c0 on (pi: their P values, qt_c: their
/// rows of qt, columns apart) to o, or writes them where c0 is 0.
template <std::size_t R>
COMMPRESS_FORCEINLINE void reconstruct_sweep(const float* pi, const float* COMMPRESS_RESTRICT qt_c,
                                             std::uint64_t columns, std::uint64_t c0,
                                             float* COMMPRESS_RESTRICT o) {
  for (std::uint64_t j = 0; j < columns; ++j) {
    float v = c0 == 0 ? pi[0] * qt_c[j] : o[j] + pi[0] * qt_c[j];
    for (std::size_t c = 1; c < R; ++c)
      v += pi[c] * qt_c[c * columns + j];
    o[j] = v;
  }
}

/// e = m - o over one row where that is finite (core/error_update.hpp); returns how many
/// elements kept their error.
COMMPRESS_FORCEINLINE std::size_t update_error_row(const float* COMMPRESS_RESTRICT m,
                                                   const float* COMMPRESS_RESTRICT o,
                                                   std::uint64_t columns,
                                                   float* COMMPRESS_RESTRICT e) {
  const commpress::detail::error_update rule{};
  std::size_t kept = 0;
  for (std::uint64_t j = 0; j < columns; ++j)
    kept += rule(m[j] - o[j], e[j]) ? 1u : 0u;
  return kept;
}

/// Rows [first, last) of out = P Q^T (qt = Q^T, r x columns; 0 for r = 0) and of the error
/// e = M - out where that is finite (else e is kept; returns how many were kept). Each element
/// of out adds its r products in order; each row is finished while it is in the cache. out
/// overlaps none of m, p, qt and e.
inline std::size_t reconstruct_and_update_rows(const float* m, std::uint64_t first,
                                               std::uint64_t last, std::uint64_t columns,
                                               const float* p, const float* qt, std::uint64_t r,
                                               float* out, float* e) {
  std::size_t held = 0;
  for (std::uint64_t i = first; i < last; ++i) {
    float* o = out + i * columns;
    if (r == 0)
      std::fill(o, o + columns, 0.0f);
    for (std::uint64_t c0 = 0; c0 < r; c0 += terms_per_sweep)
      with_terms(std::min<std::uint64_t>(terms_per_sweep, r - c0), [&]<std::size_t R>() {
        reconstruct_sweep<R>(p + i * r + c0, qt + c0 * columns, columns, c0, o);
      });
    held += update_error_row(m + i * columns, o, columns, e + i * columns);
  }
  return held;
}

/// Elements of M per range of the passes that share M among the threads, where the team's
/// grain is 0: a sixteenth of cpu::par's, as each element costs r products rather than one
/// operation, so that a matrix of 1 Mi elements is split too. form shares it, for one rule over
/// the round's passes.
inline constexpr std::uint64_t default_range_elements = std::uint64_t{1} << 16;
/// Floats of qt that a band of back_project's columns keeps in the L1 cache (for r <= 64).
inline constexpr std::uint64_t band_floats = 4096;

/// Elements of M per range of a pass on team: its grain, or default_range_elements.
inline std::uint64_t elements_per_range(const par_t& team) {
  return team.grain == 0 ? default_range_elements : team.grain;
}

/// Rows per range of a row pass over a matrix of `columns` columns, on team.
inline std::uint64_t rows_per_range(const par_t& team, std::uint64_t columns) {
  return std::max<std::uint64_t>(1, elements_per_range(team) / std::max<std::uint64_t>(columns, 1));
}

/// M = screen(g) + e (e null: M = screen(g)), rows x columns, on team's threads; returns g's
/// NaN/Inf count.
inline std::size_t form(const par_t& team, const float* g, const float* e, nonfinite_policy policy,
                        std::uint64_t rows, std::uint64_t columns, float* m) {
  return cpu::detail::parallel_sum(
      team, rows, rows_per_range(team, columns), [&](std::uint64_t first, std::uint64_t last) {
        return form_range(g, e, policy, first * columns, last * columns, m);
      });
}

/// qt = (M^T P)^T, on team's threads, each taking bands of columns: about one band per thread,
/// each spanning at least elements_per_range(team) of M (so a small matrix stays on one thread)
/// and no wider than keeps its part of qt in the L1 cache. The result does not depend on the
/// bands.
inline void back_project(const par_t& team, const float* m, std::uint64_t rows,
                         std::uint64_t columns, const float* p, std::uint64_t r, float* qt) {
  if (r == 0 || columns == 0)
    return;
  const auto threads = static_cast<std::uint64_t>(cpu::detail::team_size(team));
  const auto round_up = [](std::uint64_t v) { return (v + 15) / 16 * 16; };
  const std::uint64_t widest = std::max<std::uint64_t>(64, band_floats / r);
  const std::uint64_t narrowest =
      round_up(elements_per_range(team) / std::max<std::uint64_t>(rows, 1));
  const std::uint64_t band =
      std::max(narrowest, std::min(widest, round_up((columns + threads - 1) / threads)));
  cpu::detail::parallel_for(team, columns, band, [&](std::uint64_t first, std::uint64_t last) {
    back_project_columns(m, rows, columns, p, r, first, last, qt);
  });
}

/// out = P Q^T (qt = Q^T) and e = M - out where finite, on team's threads, each taking ranges of
/// rows; returns how many elements kept their error.
inline std::size_t reconstruct_and_update(const par_t& team, const float* m, std::uint64_t rows,
                                          std::uint64_t columns, const float* p, const float* qt,
                                          std::uint64_t r, float* out, float* e) {
  return cpu::detail::parallel_sum(
      team, rows, rows_per_range(team, columns), [&](std::uint64_t first, std::uint64_t last) {
        return reconstruct_and_update_rows(m, first, last, columns, p, qt, r, out, e);
      });
}

/// Modified Gram-Schmidt on the r columns of P, in place, as PyTorch's PowerSGD hook does it:
/// column i is divided by its norm plus epsilon, then its projection is taken out of every later
/// column. Norms and dot products accumulate in double. A column whose divisor is 0 (a zero
/// column with epsilon 0, which PyTorch turns into NaN) becomes 0, so an all-zero gradient
/// gives a zero update.
inline void orthogonalize(float* p, std::uint64_t rows, std::uint64_t r, float epsilon) {
  for (std::uint64_t i = 0; i < r; ++i) {
    double sq = 0.0;
    for (std::uint64_t k = 0; k < rows; ++k)
      sq += static_cast<double>(p[k * r + i]) * static_cast<double>(p[k * r + i]);
    const double divisor = std::sqrt(sq) + static_cast<double>(epsilon);
    const float inv = divisor > 0.0 ? static_cast<float>(1.0 / divisor) : 0.0f;
    for (std::uint64_t k = 0; k < rows; ++k)
      p[k * r + i] *= inv;
    for (std::uint64_t j = i + 1; j < r; ++j) {
      double dot = 0.0;
      for (std::uint64_t k = 0; k < rows; ++k)
        dot += static_cast<double>(p[k * r + i]) * static_cast<double>(p[k * r + j]);
      const auto d = static_cast<float>(dot);
      for (std::uint64_t k = 0; k < rows; ++k)
        p[k * r + j] -= d * p[k * r + i];
    }
  }
}

/// The start matrix Q: `count` values uniform on [-1, 1) from the counter RNG at (key, step), the
/// same on every rank that uses the same key and step. Any matrix with independent entries
/// serves (PyTorch draws normal ones): P = M Q then spans M's leading column space generically.
inline void initial_q(float* q, std::uint64_t count, rng_key key, std::uint64_t step) {
  for (std::uint64_t i = 0; i < count; ++i)
    q[i] = 2.0f * uniform_from_bits(random_u32(key, step, i)) - 1.0f;
}

} // namespace commpress::cpu::powersgd_kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
