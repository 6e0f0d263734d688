// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CUDA implementation of the cast codec: one fp16 or bf16 word per element, through the shared
/// cast::encode_value / decode_value.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/elementwise.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/compress/cast.hpp"

namespace commpress {
namespace cuda::detail {
struct cast_op {
  cast c;
  __device__ void store(unsigned char* body, std::uint64_t i, float v) const {
    store_word<std::uint16_t>(body + 2 * i, c.encode_value(v));
  }
  __device__ float load(const unsigned char* body, std::uint64_t i) const {
    return c.decode_value(load_word<std::uint16_t>(body + 2 * i));
  }
};
} // namespace cuda::detail

namespace detail {

template <> struct codec_impl<cast, cuda::par_t> {
  using map = cuda::detail::map_codec<cuda::detail::cast_op>;
  static std::uint64_t workspace_bytes(const cast&, std::uint64_t) { return 0; }

  template <element T>
  static void encode_body(cudaStream_t s, const cast& c, const context& ctx, const T* d_in,
                          std::uint64_t n, unsigned char* d_body, std::byte*,
                          cuda::detail::control* ctrl) {
    map::encode(s, {c}, ctx, d_in, n, d_body, ctrl);
  }
  template <element T>
  static void decode_body(cudaStream_t s, const cast& c, const unsigned char*,
                          const unsigned char* d_body, T* d_out, std::uint64_t n, std::byte*,
                          const cuda::detail::control* ctrl, cuda::device_status*) {
    map::decode(s, {c}, d_body, d_out, n, ctrl);
  }
  static void accumulate_body(cudaStream_t s, const cast& c, const unsigned char*,
                              const unsigned char* d_body, float* d_acc, std::uint64_t n,
                              float weight, std::byte*, const cuda::detail::control* ctrl,
                              cuda::device_status*) {
    map::accumulate(s, {c}, d_body, d_acc, n, weight, ctrl);
  }
};

} // namespace detail
} // namespace commpress
