// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Helpers shared by the CUDA tests: device detection (GPU cases skip without one), an owning
/// device buffer, and host<->device copies that check every CUDA call.

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "commpress/backend/cuda/error.cuh"

namespace commpress::test {

/// True when a CUDA device is usable; CI machines without one skip the GPU comparisons.
inline bool has_gpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError(); // no driver: clear the sticky error and report no device
    return false;
  }
  return count > 0;
}

/// Skips the current test case (with a message) when no GPU is present.
#define COMMPRESS_REQUIRE_GPU()                                                                    \
  do {                                                                                             \
    if (!::commpress::test::has_gpu()) {                                                           \
      MESSAGE("no CUDA device: GPU comparison skipped");                                           \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/// Owning device allocation of `count` elements of T (tests only; the library never allocates).
template <class T> class device_buffer {
public:
  explicit device_buffer(std::size_t count) : count_(count) {
    if (count_ > 0)
      COMMPRESS_CUDA_TRY(cudaMalloc(&ptr_, count_ * sizeof(T)));
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) {
    if (count_ > 0)
      COMMPRESS_CUDA_TRY(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() {
    if (ptr_ != nullptr)
      (void)cudaFree(ptr_);
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::vector<T> to_host() const {
    std::vector<T> h(count_);
    if (count_ > 0)
      COMMPRESS_CUDA_TRY(cudaMemcpy(h.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

} // namespace commpress::test
