// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CUDA execution policy: `commpress::cuda::par` or `commpress::cuda::par.on(stream)`.

#include <cuda_runtime.h>

namespace commpress::cuda {

/// @brief Runs a call's kernels asynchronously on `stream` (Thrust's `par.on(s)`).
///
/// Spans passed with this policy are device memory. Calls only enqueue work on the stream:
/// they never synchronise, never allocate, and can be captured into a CUDA graph.
struct par_t {
  static constexpr bool host_memory = false;
  cudaStream_t stream = nullptr; ///< nullptr: the legacy default stream

  /// @brief The same policy on another stream.
  [[nodiscard]] constexpr par_t on(cudaStream_t s) const noexcept { return par_t{s}; }
};

/// @brief Tag object: `commpress::cuda::encode(commpress::cuda::par.on(s), codec, ...)`.
inline constexpr par_t par{};

} // namespace commpress::cuda
