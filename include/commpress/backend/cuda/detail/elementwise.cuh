// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Grid-stride kernels for codecs whose body is one independent word per element (identity,
/// cast): an `Op` says how element i is stored and read back, the kernels do the rest.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"

namespace commpress::cuda::detail {

template <class Op, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    map_encode_kernel(Op op, const T* in, std::uint64_t n, unsigned char* body,
                      nonfinite_policy policy, control* ctrl) {
  std::size_t bad = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    op.store(body, i, commpress::detail::screen(to_float(in[i]), policy, bad));
  add_nonfinite(ctrl, bad);
}

template <class Op, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    map_decode_kernel(Op op, const unsigned char* body, T* out, std::uint64_t n,
                      const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    out[i] = from_float<T>(op.load(body, i));
}

template <class Op>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    map_accumulate_kernel(Op op, const unsigned char* body, float* acc, std::uint64_t n,
                          float weight, const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    acc[i] = commpress::detail::add_rn(acc[i], commpress::detail::mul_rn(weight, op.load(body, i)));
}

/// codec_impl members for an element-wise codec whose per-element wire word is given by Op.
template <class Op> struct map_codec {
  template <element T>
  static void encode(cudaStream_t s, Op op, const context& ctx, const T* in, std::uint64_t n,
                     unsigned char* body, control* ctrl) {
    if (n == 0)
      return;
    map_encode_kernel<<<grid_for(n), block_threads, 0, s>>>(op, in, n, body, ctx.on_nonfinite,
                                                            ctrl);
    check_launch();
  }
  template <element T>
  static void decode(cudaStream_t s, Op op, const unsigned char* body, T* out, std::uint64_t n,
                     const control* ctrl) {
    if (n == 0)
      return;
    map_decode_kernel<<<grid_for(n), block_threads, 0, s>>>(op, body, out, n, ctrl);
    check_launch();
  }
  static void accumulate(cudaStream_t s, Op op, const unsigned char* body, float* acc,
                         std::uint64_t n, float weight, const control* ctrl) {
    if (n == 0)
      return;
    map_accumulate_kernel<<<grid_for(n), block_threads, 0, s>>>(op, body, acc, n, weight, ctrl);
    check_launch();
  }
};

} // namespace commpress::cuda::detail
