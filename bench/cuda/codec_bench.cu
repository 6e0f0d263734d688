// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Throughput of every CUDA codec (and the fused EF and LoCo steps around 4-bit quantization and
// top-k) next to a device-to-device copy of the same fp32 tensor,
// measured in the same run (bench/README.md, "CUDA on an H200"). Times come from CUDA events around
// `reps` back-to-back calls (UseManualTime); buffers are allocated once per benchmark.
// Counters: GB/s of fp32 tensor processed (4 bytes per element), copy_GBps (the same bytes
// copied D2D), and copy_fraction = copy time / codec time (1.0 = as fast as copying the tensor).

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "commpress/backend/cuda/cast.cuh"
#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/feedback.cuh"
#include "commpress/backend/cuda/identity.cuh"
#include "commpress/backend/cuda/quantize.cuh"
#include "commpress/backend/cuda/random_k.cuh"
#include "commpress/backend/cuda/sign.cuh"
#include "commpress/backend/cuda/top_k.cuh"
#include "commpress/core/rng.hpp"

namespace {

namespace cp = commpress;

bool has_gpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

/// Fills x with values uniform on [-4, 4) from the shared Philox stream.
template <class Unused = void>
__global__ void fill_kernel(float* x, std::uint64_t n, cp::rng_key key) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 8.0f;
}

struct device_memory {
  void* p = nullptr;
  explicit device_memory(std::size_t bytes) {
    if (bytes > 0)
      COMMPRESS_CUDA_TRY(cudaMalloc(&p, bytes));
  }
  ~device_memory() {
    if (p != nullptr)
      (void)cudaFree(p);
  }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
};

enum class op { encode, decode, roundtrip, ef, loco_int8 };

int reps_for(std::uint64_t n) {
  return n <= (std::uint64_t{16} << 20) ? 20 : n <= (std::uint64_t{256} << 20) ? 5 : 2;
}

/// Milliseconds per call of f, averaged over `reps` calls between two events.
template <class F> float time_ms(cudaStream_t s, int reps, F&& f) {
  cudaEvent_t a, b;
  COMMPRESS_CUDA_TRY(cudaEventCreate(&a));
  COMMPRESS_CUDA_TRY(cudaEventCreate(&b));
  COMMPRESS_CUDA_TRY(cudaEventRecord(a, s));
  for (int r = 0; r < reps; ++r)
    f();
  COMMPRESS_CUDA_TRY(cudaEventRecord(b, s));
  COMMPRESS_CUDA_TRY(cudaEventSynchronize(b));
  float ms = 0;
  COMMPRESS_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
  COMMPRESS_CUDA_TRY(cudaEventDestroy(a));
  COMMPRESS_CUDA_TRY(cudaEventDestroy(b));
  return ms / static_cast<float>(reps);
}

template <class C> void run(benchmark::State& state, const C& c, op what) {
  if (!has_gpu()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const std::uint64_t n = static_cast<std::uint64_t>(state.range(0)) << 20;
  cudaStream_t s;
  COMMPRESS_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cp::cuda::par_t par = cp::cuda::par.on(s);
  // One workspace large enough for every operation measured here.
  const std::uint64_t ws_bytes = cp::cuda::loco_workspace_bytes(par, c, n);
  device_memory x(4 * n), y(4 * n), payload(cp::max_payload_bytes(c, n)), ws(ws_bytes),
      feedback_state(4 * n), scales(4 * cp::cuda::loco_error_scales<cp::store_int8>(n));
  auto* d_x = static_cast<float*>(x.p);
  auto* d_y = static_cast<float*>(y.p);
  const std::span<std::byte> d_payload(static_cast<std::byte*>(payload.p),
                                       cp::max_payload_bytes(c, n));
  const std::span<std::byte> d_ws(static_cast<std::byte*>(ws.p), ws_bytes);
  COMMPRESS_CUDA_TRY(cudaMemsetAsync(feedback_state.p, 0, 4 * n, s));
  COMMPRESS_CUDA_TRY(
      cudaMemsetAsync(scales.p, 0, 4 * cp::cuda::loco_error_scales<cp::store_int8>(n), s));
  const std::span<float> d_state(static_cast<float*>(feedback_state.p), n);
  const cp::cuda::loco_error<cp::store_int8> d_error{
      std::span(static_cast<std::byte*>(feedback_state.p), n),
      std::span(static_cast<float*>(scales.p), cp::cuda::loco_error_scales<cp::store_int8>(n))};
  fill_kernel<<<4096, 256, 0, s>>>(d_x, n, cp::make_rng_key(1, 2));
  COMMPRESS_CUDA_TRY(cudaGetLastError());
  const cp::context ctx{.seed = 1, .step = 0, .tensor_id = 2};
  auto encode = [&] { cp::encode(par, c, ctx, std::span<const float>(d_x, n), d_payload, d_ws); };
  auto decode = [&] {
    cp::decode(par, c, std::span<const std::byte>(d_payload), std::span<float>(d_y, n), d_ws);
  };
  auto roundtrip = [&] { cp::roundtrip(par, c, ctx, std::span<float>(d_y, n), d_ws); };
  auto ef = [&] {
    cp::cuda::ef_encode(par, c, ctx, std::span<const float>(d_x, n), d_state, d_payload, d_ws);
  };
  auto loco = [&] {
    cp::cuda::loco_encode(par, cp::loco<cp::store_int8>{.beta = 0.8f, .reset_every = 0}, c, ctx,
                          std::span<const float>(d_x, n), d_error, d_payload, d_ws);
  };
  auto copy = [&] {
    COMMPRESS_CUDA_TRY(cudaMemcpyAsync(d_y, d_x, 4 * n, cudaMemcpyDeviceToDevice, s));
  };
  auto call = [&] {
    if (what == op::encode)
      encode();
    if (what == op::decode)
      decode();
    if (what == op::roundtrip)
      roundtrip();
    if (what == op::ef)
      ef();
    if (what == op::loco_int8)
      loco();
  };
  encode(); // a valid payload for decode, and a warm-up
  call();
  const int reps = reps_for(n);
  const float copy_ms = time_ms(s, reps, copy);
  float sum_ms = 0;
  for (auto _ : state) {
    const float ms = time_ms(s, reps, call);
    sum_ms += ms;
    state.SetIterationTime(ms / 1e3);
  }
  const double codec_ms = sum_ms / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
  state.counters["GBps"] = 4.0 * static_cast<double>(n) / (codec_ms * 1e6);
  state.counters["copy_GBps"] = 4.0 * static_cast<double>(n) / (copy_ms * 1e6);
  state.counters["copy_fraction"] = copy_ms / codec_ms;
  state.counters["payload_bytes"] = static_cast<double>(d_payload.size());
  COMMPRESS_CUDA_TRY(cudaStreamDestroy(s));
}

const cp::quantize q4_block{.bits = 4, .granularity = cp::scale_granularity::block, .group = 128};
const cp::quantize q4_block_sr{.bits = 4,
                               .granularity = cp::scale_granularity::block,
                               .group = 128,
                               .round = cp::rounding::stochastic};
const cp::quantize q8_tensor{.bits = 8, .granularity = cp::scale_granularity::tensor, .group = 0};

void BM_identity_encode(benchmark::State& s) {
  run(s, cp::identity{}, op::encode);
}
void BM_identity_decode(benchmark::State& s) {
  run(s, cp::identity{}, op::decode);
}
void BM_cast_bf16_encode(benchmark::State& s) {
  run(s, cp::cast{.to = cp::dtype::bf16}, op::encode);
}
void BM_cast_bf16_decode(benchmark::State& s) {
  run(s, cp::cast{.to = cp::dtype::bf16}, op::decode);
}
void BM_quantize_q4_block128_encode(benchmark::State& s) {
  run(s, q4_block, op::encode);
}
void BM_quantize_q4_block128_decode(benchmark::State& s) {
  run(s, q4_block, op::decode);
}
void BM_quantize_q4_block128_roundtrip(benchmark::State& s) {
  run(s, q4_block, op::roundtrip);
}
void BM_quantize_q4_block128_ef_encode(benchmark::State& s) {
  run(s, q4_block, op::ef);
}
void BM_quantize_q4_block128_loco_int8_encode(benchmark::State& s) {
  run(s, q4_block, op::loco_int8);
}
void BM_quantize_q4_block128_stochastic_encode(benchmark::State& s) {
  run(s, q4_block_sr, op::encode);
}
void BM_quantize_q8_tensor_encode(benchmark::State& s) {
  run(s, q8_tensor, op::encode);
}
void BM_sign_tensor_encode(benchmark::State& s) {
  run(s, cp::sign{}, op::encode);
}
void BM_sign_tensor_decode(benchmark::State& s) {
  run(s, cp::sign{}, op::decode);
}
void BM_random_k_1pct_encode(benchmark::State& s) {
  run(s, cp::random_k{.fraction = 0.01f}, op::encode);
}
void BM_random_k_1pct_decode(benchmark::State& s) {
  run(s, cp::random_k{.fraction = 0.01f}, op::decode);
}
void BM_top_k_1pct_rows64k_encode(benchmark::State& s) {
  run(s, cp::top_k{.fraction = 0.01f, .row_length = 65536}, op::encode);
}
void BM_top_k_1pct_rows64k_decode(benchmark::State& s) {
  run(s, cp::top_k{.fraction = 0.01f, .row_length = 65536}, op::decode);
}
void BM_top_k_1pct_tensor_encode(benchmark::State& s) {
  run(s, cp::top_k{.fraction = 0.01f}, op::encode);
}
void BM_top_k_1pct_tensor_ef_encode(benchmark::State& s) {
  run(s, cp::top_k{.fraction = 0.01f}, op::ef);
}

// Sizes in Mi elements: 16 Mi, 256 Mi, 1 Gi (about 1e7 to 1e9, from cache-sized to a
// device-filling tensor).
#define COMMPRESS_BENCH(name)                                                                      \
  BENCHMARK(name)                                                                                  \
      ->ArgName("Mi")                                                                              \
      ->Arg(16)                                                                                    \
      ->Arg(256)                                                                                   \
      ->Arg(1024)                                                                                  \
      ->UseManualTime()                                                                            \
      ->Iterations(3)                                                                              \
      ->Unit(benchmark::kMillisecond)
COMMPRESS_BENCH(BM_identity_encode);
COMMPRESS_BENCH(BM_identity_decode);
COMMPRESS_BENCH(BM_cast_bf16_encode);
COMMPRESS_BENCH(BM_cast_bf16_decode);
COMMPRESS_BENCH(BM_quantize_q4_block128_encode);
COMMPRESS_BENCH(BM_quantize_q4_block128_decode);
COMMPRESS_BENCH(BM_quantize_q4_block128_roundtrip);
COMMPRESS_BENCH(BM_quantize_q4_block128_ef_encode);
COMMPRESS_BENCH(BM_quantize_q4_block128_loco_int8_encode);
COMMPRESS_BENCH(BM_quantize_q4_block128_stochastic_encode);
COMMPRESS_BENCH(BM_quantize_q8_tensor_encode);
COMMPRESS_BENCH(BM_sign_tensor_encode);
COMMPRESS_BENCH(BM_sign_tensor_decode);
COMMPRESS_BENCH(BM_random_k_1pct_encode);
COMMPRESS_BENCH(BM_random_k_1pct_decode);
COMMPRESS_BENCH(BM_top_k_1pct_rows64k_encode);
COMMPRESS_BENCH(BM_top_k_1pct_rows64k_decode);
COMMPRESS_BENCH(BM_top_k_1pct_tensor_encode);
COMMPRESS_BENCH(BM_top_k_1pct_tensor_ef_encode);

} // namespace

BENCHMARK_MAIN();
