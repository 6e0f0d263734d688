// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU kernels of PowerSGD (compress/powersgd.hpp): its three matrix products on Eigen, the
/// Gram-Schmidt orthogonalisation and the start matrix Q. Every matrix is a row-major float
/// array: M is rows x columns, P is rows x r, Q is columns x r. Needs Eigen 3 (link
/// commpress::eigen).

#include <cmath>
#include <cstdint>

// GCC 12 reports false -W(maybe-)uninitialized warnings inside Eigen's AVX-512 product kernels
// (at -march=native, worst with sanitizers); the pragmas keep them out of users' -Werror builds
// for the code this header instantiates.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

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

/// Q = M^T P.
inline void back_project(const float* m, std::uint64_t rows, std::uint64_t columns, const float* p,
                         std::uint64_t r, float* q) {
  view(q, index(columns), index(r)).noalias() =
      const_view(m, index(rows), index(columns)).transpose() * const_view(p, index(rows), index(r));
}

/// out = P Q^T (rows x columns).
inline void reconstruct(const float* p, std::uint64_t rows, const float* q, std::uint64_t columns,
                        std::uint64_t r, float* out) {
  view(out, index(rows), index(columns)).noalias() =
      const_view(p, index(rows), index(r)) * const_view(q, index(columns), index(r)).transpose();
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
