// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CUDA implementation of the identity codec: the body is the tensor as little-endian fp32.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/elementwise.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/compress/identity.hpp"

namespace commpress {
namespace cuda::detail {
struct identity_op {
  __device__ void store(unsigned char* body, std::uint64_t i, float v) const {
    store_word<float>(body + 4 * i, v);
  }
  __device__ float load(const unsigned char* body, std::uint64_t i) const {
    return load_word<float>(body + 4 * i);
  }
};
} // namespace cuda::detail

namespace detail {

template <> struct codec_impl<identity, cuda::par_t> {
  using map = cuda::detail::map_codec<cuda::detail::identity_op>;
  static std::uint64_t workspace_bytes(const identity&, std::uint64_t) { return 0; }

  template <element T>
  static void encode_body(cudaStream_t s, const identity&, const context& ctx, const T* d_in,
                          std::uint64_t n, unsigned char* d_body, std::byte*,
                          cuda::detail::control* ctrl) {
    map::encode(s, {}, ctx, d_in, n, d_body, ctrl);
  }
  template <element T>
  static void decode_body(cudaStream_t s, const identity&, const unsigned char*,
                          const unsigned char* d_body, T* d_out, std::uint64_t n, std::byte*,
                          const cuda::detail::control* ctrl, cuda::device_status*) {
    map::decode(s, {}, d_body, d_out, n, ctrl);
  }
  static void accumulate_body(cudaStream_t s, const identity&, const unsigned char*,
                              const unsigned char* d_body, float* d_acc, std::uint64_t n,
                              float weight, std::byte*, const cuda::detail::control* ctrl,
                              cuda::device_status*) {
    map::accumulate(s, {}, d_body, d_acc, n, weight, ctrl);
  }
};

} // namespace detail
} // namespace commpress
