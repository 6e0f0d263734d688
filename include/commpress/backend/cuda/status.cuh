// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The device status word through which kernels report what they found in the data.
///
/// Device code never throws or traps on data (a trap would leave the CUDA context unusable;
/// docs/cuda.md, "Errors"): a corrupted payload or a NaN is reported here, in device memory, and
/// the host reads it when it chooses to synchronise.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/error.cuh"
#include "commpress/core/error.hpp"

namespace commpress::cuda {

/// @brief What device calls report; lives in device memory, owned by the caller.
///
/// Every field accumulates: `code` keeps the FIRST error any call reported (later calls never
/// overwrite it), `nonfinite` adds the NaN/Inf inputs each encode or roundtrip saw, `held` the
/// state elements feedback steps kept. One status can thus cover a batch of calls (all decodes
/// of an all-gather) and be read once. Clear it with clear_status_async before reuse.
struct device_status {
  std::uint32_t code = 0; ///< an errc value; 0 (errc::ok) while nothing went wrong
  std::uint32_t reserved = 0;
  unsigned long long nonfinite = 0; ///< non-finite input elements seen by encode/roundtrip
  unsigned long long held = 0;      ///< feedback state elements kept because their update was
                                    ///< non-finite (step_result::held of the CPU)
};

/// @brief Sets `*d_status` to ok and zero counts; enqueued on `stream`.
inline void clear_status_async(device_status* d_status, cudaStream_t stream) {
  COMMPRESS_CUDA_TRY(cudaMemsetAsync(d_status, 0, sizeof(device_status), stream));
}

/// @brief Copies `*d_status` to the host; synchronises `stream` first.
inline device_status read_status(const device_status* d_status, cudaStream_t stream) {
  device_status h;
  COMMPRESS_CUDA_TRY(
      cudaMemcpyAsync(&h, d_status, sizeof(device_status), cudaMemcpyDeviceToHost, stream));
  COMMPRESS_CUDA_TRY(cudaStreamSynchronize(stream));
  return h;
}

/// @brief The status's error code as an errc.
[[nodiscard]] inline errc error_of(const device_status& s) noexcept {
  return static_cast<errc>(s.code);
}

} // namespace commpress::cuda
