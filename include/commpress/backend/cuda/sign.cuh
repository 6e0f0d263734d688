// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CUDA implementation of the sign codec. Group scales follow the canonical order of
/// core/canonical_sum.hpp literally: one warp per chunk of 32768 terms (lane j adds terms
/// j, j + 32, ... in order, then the fixed shuffle tree), then one warp per group folds the
/// chunk sums the same way; so every scale has the CPU's bits.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/compress/sign.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/format/bit_packing.hpp"

namespace commpress {
namespace cuda::detail {

/// The canonical tree over the 32 lane sums (lane j adds lane j + w for w = 16 .. 1).
__device__ __forceinline__ double canonical_tree(double v) {
  for (unsigned w = canonical_lanes / 2; w > 0; w /= 2)
    v += __shfl_down_sync(0xffffffffu, v, w);
  return v;
}

/// Chunks of canonical_chunk terms in one group of `len` elements.
COMMPRESS_HOST_DEVICE constexpr std::uint64_t sign_chunks_per_group(std::uint64_t len) {
  return (len + canonical_chunk - 1) / canonical_chunk;
}

/// One warp per (group, chunk): the chunk's canonical sum of scale terms; counts non-finite
/// inputs (every element is visited exactly once here).
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    sign_chunk_kernel(sign c, const T* in, std::uint64_t n, std::uint64_t len,
                      std::uint64_t chunks_per_group, std::uint64_t total_chunks,
                      nonfinite_policy policy, double* sums, control* ctrl) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warps = grid_stride() / 32;
  std::size_t bad = 0;
  for (std::uint64_t w = thread_index() / 32; w < total_chunks; w += warps) {
    const std::uint64_t g = w / chunks_per_group;
    const std::uint64_t group_end = n - g * len < len ? n : (g + 1) * len;
    const std::uint64_t first = g * len + (w % chunks_per_group) * canonical_chunk;
    // The last group may be shorter than the others: its trailing chunks are empty.
    const std::uint64_t last = first >= group_end                    ? first
                               : group_end - first < canonical_chunk ? group_end
                                                                     : first + canonical_chunk;
    double v = 0.0;
    for (std::uint64_t i = first + lane; i < last; i += 32)
      v += c.scale_term(commpress::detail::screen(to_float(in[i]), policy, bad));
    v = canonical_tree(v);
    if (lane == 0)
      sums[w] = v;
  }
  add_nonfinite(ctrl, bad);
}

/// One warp per group: the canonical sum of its chunk sums, turned into the scale.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    sign_scale_kernel(sign c, std::uint64_t n, std::uint64_t len, std::uint64_t groups,
                      std::uint64_t chunks_per_group, const double* sums, unsigned char* body) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warps = grid_stride() / 32;
  for (std::uint64_t g = thread_index() / 32; g < groups; g += warps) {
    const std::uint64_t m = n - g * len < len ? n - g * len : len;
    const std::uint64_t chunks = sign_chunks_per_group(m);
    double v = 0.0;
    for (std::uint64_t k = lane; k < chunks; k += 32)
      v += sums[g * chunks_per_group + k];
    v = canonical_tree(v);
    if (lane == 0)
      store_word<float>(body + 4 * g, c.scale_from_sum(v, m));
  }
}

/// One thread per byte of the bit section (eight elements).
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    sign_bits_kernel(const T* in, std::uint64_t n, nonfinite_policy policy, unsigned char* bits) {
  const std::uint64_t bytes = (n + 7) / 8;
  for (std::uint64_t b = thread_index(); b < bytes; b += grid_stride()) {
    const unsigned cnt = n - 8 * b < 8 ? static_cast<unsigned>(n - 8 * b) : 8u;
    std::uint32_t codes[8];
    std::size_t ignored = 0;
    for (unsigned i = 0; i < cnt; ++i)
      codes[i] =
          sign::encode_bit(commpress::detail::screen(to_float(in[8 * b + i]), policy, ignored));
    commpress::detail::pack_group(codes, cnt, 1, bits + b);
  }
}

template <bool Accumulate, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    sign_decode_kernel(const unsigned char* body, std::uint64_t n, std::uint64_t len,
                       std::uint64_t groups, T* out, float weight, const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  const unsigned char* bits = body + 4 * groups;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
    const float v = sign::decode_value(commpress::detail::unpack_one(bits, i, 1),
                                       load_word<float>(body + 4 * (i / len)));
    if constexpr (Accumulate) {
      out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
    } else {
      out[i] = from_float<T>(v);
    }
  }
}

template <bool Accumulate, class T>
void launch_sign_decode(const sign& c, const unsigned char* body, T* out, std::uint64_t n,
                        float weight, const control* ctrl, cudaStream_t s) {
  if (n == 0)
    return;
  sign_decode_kernel<Accumulate><<<grid_for(n), block_threads, 0, s>>>(
      body, n, c.group_length(n), c.groups(n), out, weight, ctrl);
  check_launch();
}

} // namespace cuda::detail

namespace detail {

template <> struct codec_impl<sign, cuda::par_t> {
  /// One double per (group, chunk) of canonical_chunk terms.
  static std::uint64_t workspace_bytes(const sign& c, std::uint64_t n) {
    return 8 * c.groups(n) * cuda::detail::sign_chunks_per_group(c.group_length(n));
  }

  template <element T>
  static void encode_body(cudaStream_t s, const sign& c, const context& ctx, const T* d_in,
                          std::uint64_t n, unsigned char* d_body, std::byte* d_ws,
                          cuda::detail::control* ctrl) {
    namespace cd = cuda::detail;
    if (n == 0)
      return;
    const std::uint64_t len = c.group_length(n);
    const std::uint64_t groups = c.groups(n);
    const std::uint64_t cpg = cd::sign_chunks_per_group(len);
    auto* sums = reinterpret_cast<double*>(d_ws);
    cd::sign_chunk_kernel<<<cd::grid_for(32 * groups * cpg), cd::block_threads, 0, s>>>(
        c, d_in, n, len, cpg, groups * cpg, ctx.on_nonfinite, sums, ctrl);
    cd::check_launch();
    cd::sign_scale_kernel<<<cd::grid_for(32 * groups), cd::block_threads, 0, s>>>(
        c, n, len, groups, cpg, sums, d_body);
    cd::check_launch();
    cd::sign_bits_kernel<<<cd::grid_for((n + 7) / 8), cd::block_threads, 0, s>>>(
        d_in, n, ctx.on_nonfinite, d_body + 4 * groups);
    cd::check_launch();
  }

  template <element T>
  static void decode_body(cudaStream_t s, const sign& c, const unsigned char*,
                          const unsigned char* d_body, T* d_out, std::uint64_t n, std::byte*,
                          const cuda::detail::control* ctrl, cuda::device_status*) {
    cuda::detail::launch_sign_decode<false>(c, d_body, d_out, n, 1.0f, ctrl, s);
  }

  static void accumulate_body(cudaStream_t s, const sign& c, const unsigned char*,
                              const unsigned char* d_body, float* d_acc, std::uint64_t n,
                              float weight, std::byte*, const cuda::detail::control* ctrl,
                              cuda::device_status*) {
    cuda::detail::launch_sign_decode<true>(c, d_body, d_acc, n, weight, ctrl, s);
  }
};

} // namespace detail
} // namespace commpress
