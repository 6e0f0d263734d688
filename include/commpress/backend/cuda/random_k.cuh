// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CUDA implementation of the random-k codec: one thread per stratum gathers (encode) or
/// scatters (decode) its kept element; the indices come from the shared Philox stream
/// (compress/random_k.hpp), regenerated from the payload header when decoding. Quantized kept
/// values (value_quantizer) have no kernel: they are refused on the host before a kernel reads
/// the input or writes the output.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/detail/nonfinite.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/compress/random_k.hpp"
#include "commpress/core/rng.hpp"

namespace commpress {
namespace cuda::detail {

/// The kept element of stratum j and the stratum's size.
__device__ __forceinline__ void random_k_stratum(std::uint64_t j, std::uint64_t n, std::uint64_t k,
                                                 rng_key key, std::uint64_t step,
                                                 std::uint64_t& index, std::uint64_t& size) {
  const std::uint64_t start = random_k::stratum_start(j, n, k);
  size = random_k::stratum_start(j + 1, n, k) - start;
  index = random_k::pick(start, size, random_u32(key, step, j));
}

template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    random_k_gather_kernel(random_k c, const T* in, std::uint64_t n, std::uint64_t k, rng_key key,
                           std::uint64_t step, nonfinite_policy policy, unsigned char* body) {
  for (std::uint64_t j = thread_index(); j < k; j += grid_stride()) {
    std::uint64_t i, size;
    random_k_stratum(j, n, k, key, step, i, size);
    std::size_t ignored = 0; // every input is counted by count_nonfinite_kernel
    const float v = commpress::detail::screen(to_float(in[i]), policy, ignored);
    store_code(body + j * c.value_bytes(), c.value_bytes(), c.encode_value(v));
  }
}

/// Scatters the kept values: out[i] = value (T != void) or acc[i] += weight * value.
template <bool Accumulate, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    random_k_scatter_kernel(random_k c, const unsigned char* header, const unsigned char* body,
                            T* out, std::uint64_t n, std::uint64_t k, float weight,
                            const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  const rng_key key =
      make_rng_key(load_word<std::uint64_t>(header + 24), load_word<std::uint32_t>(header + 40));
  const std::uint64_t step = load_word<std::uint64_t>(header + 32);
  for (std::uint64_t j = thread_index(); j < k; j += grid_stride()) {
    std::uint64_t i, size;
    random_k_stratum(j, n, k, key, step, i, size);
    const float v = c.decode_kept(load_code(body + j * c.value_bytes(), c.value_bytes()), size);
    if constexpr (Accumulate) {
      out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
    } else {
      out[i] = from_float<T>(v);
    }
  }
}

} // namespace cuda::detail

namespace detail {

template <> struct codec_impl<random_k, cuda::par_t> {
  static std::uint64_t workspace_bytes(const random_k&, std::uint64_t) { return 0; }

  template <element T>
  static void encode_body(cudaStream_t s, const random_k& c, const context& ctx, const T* d_in,
                          std::uint64_t n, unsigned char* d_body, std::byte*,
                          cuda::detail::control* ctrl) {
    namespace cd = cuda::detail;
    refuse_quantized(c);
    cd::launch_count_nonfinite(d_in, n, ctrl, s);
    const std::uint64_t k = c.kept(n);
    if (k == 0)
      return;
    cd::random_k_gather_kernel<<<cd::grid_for(k), cd::block_threads, 0, s>>>(
        c, d_in, n, k, ctx.key(), ctx.step, ctx.on_nonfinite, d_body);
    cd::check_launch();
  }

  template <element T>
  static void decode_body(cudaStream_t s, const random_k& c, const unsigned char* d_header,
                          const unsigned char* d_body, T* d_out, std::uint64_t n, std::byte*,
                          const cuda::detail::control* ctrl, cuda::device_status*) {
    namespace cd = cuda::detail;
    refuse_quantized(c);
    cd::launch_zero_fill(d_out, n, ctrl, s);
    const std::uint64_t k = c.kept(n);
    if (k == 0)
      return;
    cd::random_k_scatter_kernel<false><<<cd::grid_for(k), cd::block_threads, 0, s>>>(
        c, d_header, d_body, d_out, n, k, 1.0f, ctrl);
    cd::check_launch();
  }

  static void accumulate_body(cudaStream_t s, const random_k& c, const unsigned char* d_header,
                              const unsigned char* d_body, float* d_acc, std::uint64_t n,
                              float weight, std::byte*, const cuda::detail::control* ctrl,
                              cuda::device_status*) {
    namespace cd = cuda::detail;
    refuse_quantized(c);
    const std::uint64_t k = c.kept(n);
    if (k == 0)
      return;
    cd::random_k_scatter_kernel<true><<<cd::grid_for(k), cd::block_threads, 0, s>>>(
        c, d_header, d_body, d_acc, n, k, weight, ctrl);
    cd::check_launch();
  }

private:
  /// Quantized kept values run on the CPU backends only.
  static void refuse_quantized(const random_k& c) {
    COMMPRESS_EXPECTS(!c.quantized(), errc::invalid_argument, "random_k",
                      "quantized kept values run on the CPU backends only");
  }
};

} // namespace detail
} // namespace commpress
