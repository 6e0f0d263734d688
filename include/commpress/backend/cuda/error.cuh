// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The exception for failed CUDA runtime calls and the macro that checks them.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace commpress {

/// @brief Thrown by the CUDA backend when a CUDA runtime call fails.
/// @note The message starts with `commpress: cuda: ` and names the call, file and line.
class cuda_error : public std::runtime_error {
public:
  cuda_error(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  /// @brief The CUDA error the call returned.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

private:
  cudaError_t code_;
};

namespace cuda::detail {
[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* call, const char* file,
                                          int line) {
  // Clear the (non-sticky) error state so the next, unrelated call does not report it again
  // (libcudacxx and nvexec do the same before throwing).
  (void)cudaGetLastError();
  throw cuda_error(e, std::string("commpress: cuda: ") + call + " failed: " + cudaGetErrorName(e) +
                          " (" + cudaGetErrorString(e) + ") at " + file + ":" +
                          std::to_string(line));
}
} // namespace cuda::detail

} // namespace commpress

/// Evaluates a CUDA runtime call and throws `commpress::cuda_error` when it does not succeed.
#define COMMPRESS_CUDA_TRY(call)                                                                   \
  do {                                                                                             \
    const cudaError_t commpress_cuda_try_status = (call);                                          \
    if (commpress_cuda_try_status != cudaSuccess)                                                  \
      ::commpress::cuda::detail::throw_cuda_error(commpress_cuda_try_status, #call, __FILE__,      \
                                                  __LINE__);                                       \
  } while (0)
