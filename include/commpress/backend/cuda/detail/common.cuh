// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Pieces every CUDA codec uses: the kernel macro, launch shapes, the per-call control block
/// at the front of the workspace, unaligned-safe word access, and status reporting.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/backend/cuda/error.cuh"
#include "commpress/backend/cuda/status.cuh"
#include "commpress/core/context.hpp"
#include "commpress/core/error.hpp"

// The kernels use the warp reductions of sm_80 (__reduce_*_sync); nvcc's default architecture is
// older, so a consumer that sets no CMAKE_CUDA_ARCHITECTURES would otherwise see them undefined.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "commpress's CUDA backend needs sm_80 or newer: set CMAKE_CUDA_ARCHITECTURES (e.g. 80;90)"
#endif

/// A kernel with hidden visibility, so that template kernels instantiated in several shared
/// libraries do not collide (CCCL #166, cuco's CUCO_KERNEL). Every kernel of this header-only
/// backend is a template (non-template ones take a defaulted `class Unused = void`): a plain
/// __global__ function defined in a header is a duplicate symbol in every translation unit.
#define COMMPRESS_KERNEL __global__ __attribute__((visibility("hidden")))

namespace commpress::cuda::detail {

/// Threads per block of the element-wise kernels (8 warps: enough in flight per SM on sm_80
/// and sm_90 for a memory-bound grid-stride loop; not tuned on a GPU yet).
inline constexpr unsigned block_threads = 256;
/// Upper bound on the blocks of a grid-stride launch: about 8 resident blocks on each of the
/// 132 SMs of an H200 (4 waves), so the grid never needs a device query at call time.
inline constexpr std::uint64_t max_blocks = 4096;

/// Blocks for a grid-stride loop over `work` items, one item per thread per iteration.
constexpr unsigned grid_for(std::uint64_t work) {
  const std::uint64_t b = (work + block_threads - 1) / block_threads;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

/// Bytes of the control block at the front of every workspace.
inline constexpr std::size_t control_bytes = 256;

/// Per-call state on the device, zeroed by a memset at the start of every call.
struct control {
  unsigned long long nonfinite;  ///< NaN/Inf inputs seen by the encode kernels
  std::uint32_t crc;             ///< XOR of the checksum contributions of the body chunks
  std::uint32_t invalid;         ///< nonzero: validation failed, decode kernels write nothing
  unsigned long long scratch[6]; ///< codec-specific counters (top_k's selection state)
  unsigned char header[64];      ///< a header a roundtrip decodes against
};
static_assert(sizeof(control) <= control_bytes);

/// Rounds a byte count up to a multiple of 256 (the alignment of every workspace section).
constexpr std::uint64_t align_up(std::uint64_t b) {
  return (b + 255) / 256 * 256;
}

/// Loads a little-endian word of type U from any address (GPUs are little-endian; the aligned
/// case is one load, the unaligned one assembles bytes).
template <class U> __device__ __forceinline__ U load_word(const unsigned char* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % sizeof(U) == 0)
    return *reinterpret_cast<const U*>(p);
  U v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Stores a word of type U at any address, little-endian.
template <class U> __device__ __forceinline__ void store_word(unsigned char* p, U v) {
  if (reinterpret_cast<std::uintptr_t>(p) % sizeof(U) == 0) {
    *reinterpret_cast<U*>(p) = v;
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

/// Adds each thread's non-finite count to the control block: one atomic per warp. Every thread
/// of the warp must call it (it is placed after the grid-stride loop).
__device__ __forceinline__ void add_nonfinite(control* ctrl, std::size_t bad) {
  const unsigned sum = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(bad));
  if ((threadIdx.x & 31u) == 0 && sum != 0)
    atomicAdd(&ctrl->nonfinite, 1ull * sum);
}

/// Records `e` in the caller's status unless an earlier error is already there.
__device__ __forceinline__ void report(device_status* d_status, errc e) {
  if (d_status != nullptr)
    atomicCAS(&d_status->code, 0u, static_cast<std::uint32_t>(e));
}

/// Checks a kernel launch (configuration errors surface here, not at the next sync).
inline void check_launch() {
  COMMPRESS_CUDA_TRY(cudaGetLastError());
}

/// Global thread index and grid stride of a grid-stride loop.
__device__ __forceinline__ std::uint64_t thread_index() {
  return blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ std::uint64_t grid_stride() {
  return std::uint64_t{gridDim.x} * blockDim.x;
}

} // namespace commpress::cuda::detail
