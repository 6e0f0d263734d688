// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// PowerSGD's configuration (Vogels et al. 2019, Algorithm 1; docs/methods.md 18): rank-r
/// compression of a gradient viewed as a rows x columns matrix M by one step of subspace
/// iteration,
///
///     P = M Q,  P <- sum over ranks,  P^ = orthogonalize(P),  Q = M^T P^,  Q <- mean over ranks,
///     M ~ P^ Q^T,
///
/// with the matrix Q of the previous step as the start (warm start) and error feedback on M.
/// Unlike a codec it has no payload of its own: its messages are the two matrices P
/// (rows x r) and Q (columns x r), each summed by a plain all-reduce, so its collective
/// (collective/powersgd.hpp) is two all-reduces with the orthogonalisation between them.

#include <cstdint>

#include "commpress/core/error.hpp"

namespace commpress {

/// @brief PowerSGD's settings (as PyTorch's PowerSGDState names them).
struct powersgd {
  std::uint32_t rank = 1;                 ///< r: columns of P and Q (clamped to min(rows, columns))
  bool warm_start = true;                 ///< start each step's iteration from the last step's Q
  float orthogonalization_epsilon = 0.0f; ///< added to each column norm before dividing by it
  /// steps (the context's step) before this one send the plain fp32 mean, without feedback
  std::uint64_t start_iter = 0;

  /// The rank actually used for a rows x columns matrix.
  [[nodiscard]] constexpr std::uint64_t rank_for(std::uint64_t rows,
                                                 std::uint64_t columns) const noexcept {
    const std::uint64_t m = rows < columns ? rows : columns;
    return rank < m ? rank : m;
  }
  /// Floats each rank contributes per step: rows * r for P and columns * r for Q.
  [[nodiscard]] constexpr std::uint64_t message_floats(std::uint64_t rows,
                                                       std::uint64_t columns) const noexcept {
    return (rows + columns) * rank_for(rows, columns);
  }
  /// fp32 elements over message floats: PyTorch's compression rate, which its
  /// `min_compression_rate` compares against (layer_policy's rule of the same name).
  [[nodiscard]] constexpr double compression_rate(std::uint64_t rows,
                                                  std::uint64_t columns) const noexcept {
    const std::uint64_t f = message_floats(rows, columns);
    return f == 0 ? 0.0 : static_cast<double>(rows * columns) / static_cast<double>(f);
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t rows,
                                               std::uint64_t columns) const noexcept {
    if (rank == 0)
      return {errc::invalid_argument, "powersgd: rank must be at least 1"};
    if (!(orthogonalization_epsilon >= 0.0f))
      return {errc::invalid_argument, "powersgd: orthogonalization_epsilon must be >= 0"};
    if ((rows == 0) != (columns == 0))
      return {errc::invalid_argument, "powersgd: a matrix with rows has columns, and the other "
                                      "way round"};
    if (rows > (std::uint64_t{1} << 40) || columns > (std::uint64_t{1} << 40) ||
        (columns != 0 && rows > (std::uint64_t{1} << 48) / columns))
      return {errc::invalid_argument, "powersgd: the matrix is too large"};
    return {};
  }

  friend constexpr bool operator==(const powersgd&, const powersgd&) = default;
};

} // namespace commpress
