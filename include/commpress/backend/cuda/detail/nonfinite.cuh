// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Helpers shared by the sparse codecs: counting non-finite inputs and zero-filling outputs.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"

namespace commpress::cuda::detail {

/// Adds the NaN/Inf elements of `in` to ctrl->nonfinite (codecs that do not read every element
/// while encoding still report the whole input, as the CPU does).
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    count_nonfinite_kernel(const T* in, std::uint64_t n, control* ctrl) {
  std::size_t bad = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    bad += commpress::detail::is_finite(to_float(in[i])) ? 0u : 1u;
  add_nonfinite(ctrl, bad);
}

/// Writes zeros to out[0..n) unless validation failed.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    zero_fill_kernel(T* out, std::uint64_t n, const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  const T zero = from_float<T>(0.0f);
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    out[i] = zero;
}

template <class T>
void launch_count_nonfinite(const T* in, std::uint64_t n, control* ctrl, cudaStream_t s) {
  if (n == 0)
    return;
  count_nonfinite_kernel<<<grid_for(n), block_threads, 0, s>>>(in, n, ctrl);
  check_launch();
}

template <class T>
void launch_zero_fill(T* out, std::uint64_t n, const control* ctrl, cudaStream_t s) {
  if (n == 0)
    return;
  zero_fill_kernel<<<grid_for(n), block_threads, 0, s>>>(out, n, ctrl);
  check_launch();
}

/// Stores / loads a kept value's wire code of 4 (fp32) or 2 (fp16, bf16) bytes.
__device__ __forceinline__ void store_code(unsigned char* p, std::uint64_t bytes,
                                           std::uint32_t code) {
  if (bytes == 4) {
    store_word<std::uint32_t>(p, code);
  } else {
    store_word<std::uint16_t>(p, static_cast<std::uint16_t>(code));
  }
}
__device__ __forceinline__ std::uint32_t load_code(const unsigned char* p, std::uint64_t bytes) {
  return bytes == 4 ? load_word<std::uint32_t>(p) : load_word<std::uint16_t>(p);
}

} // namespace commpress::cuda::detail
