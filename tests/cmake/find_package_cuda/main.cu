// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// A consumer of an installed commpress::cuda and commpress::nccl: 4-bit block quantization on
// the device (encode, then decode, on one stream), and the NCCL communicator's header. Without
// a GPU it compiles, links and reports the skip.

#include <cuda_runtime.h>

#include <commpress/backend/cuda/codec_ops.cuh>
#include <commpress/backend/cuda/quantize.cuh>
#include <commpress/backend/cuda/status.cuh>
#include <commpress/comm/nccl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

namespace cp = commpress;

static_assert(cp::communicator<cp::nccl_communicator>);

int main() {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("no GPU: the consumer compiled and linked; the device run is skipped\n");
    return 0;
  }
  constexpr std::size_t n = 4096;
  const cp::quantize codec{.bits = 4, .group = 128};
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = std::sin(0.01f * static_cast<float>(i));
  const std::size_t bytes = cp::max_payload_bytes(codec, n);
  float *d_x = nullptr, *d_y = nullptr;
  std::byte *d_payload = nullptr, *d_ws = nullptr;
  cp::cuda::device_status* d_status = nullptr;
  const std::size_t ws = std::max(cp::workspace_bytes(cp::cuda::par, codec, n), std::size_t{1});
  cudaMalloc(&d_x, 4 * n);
  cudaMalloc(&d_y, 4 * n);
  cudaMalloc(&d_payload, bytes);
  cudaMalloc(&d_ws, ws);
  cudaMalloc(&d_status, sizeof(cp::cuda::device_status));
  cudaMemcpy(d_x, x.data(), 4 * n, cudaMemcpyHostToDevice);
  cudaStream_t s;
  cudaStreamCreate(&s);
  const auto pol = cp::cuda::par.on(s);
  cp::cuda::clear_status_async(d_status, s);
  cp::encode(pol, codec, cp::context{}, std::span<const float>(d_x, n), std::span(d_payload, bytes),
             std::span(d_ws, ws), d_status);
  cp::decode(pol, codec, std::span<const std::byte>(d_payload, bytes), std::span(d_y, n),
             std::span(d_ws, ws), d_status);
  std::vector<float> y(n);
  cudaMemcpyAsync(y.data(), d_y, 4 * n, cudaMemcpyDeviceToHost, s);
  if (cp::cuda::error_of(cp::cuda::read_status(d_status, s)) != cp::errc::ok) {
    std::printf("the device refused its own payload\n");
    return 1;
  }
  float worst = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::fmax(worst, std::fabs(y[i] - x[i]));
  std::printf("4-bit block quantization on the GPU: max error %.4f\n", worst);
  return worst <= 1.0f / 14.0f + 1e-6f ? 0 : 1; // half a step of a 4-bit block of amax <= 1
}
