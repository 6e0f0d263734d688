// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CUDA implementation of the quantize codec, in three launches:
/// 1. group statistics (absmax, or min and max) as order-preserving integer keys, reduced with
///    warp `__reduce_*_sync` and combined across warps with integer atomics: max and min are
///    order-independent, so the keys are exactly the CPU's fold (NaN ignored);
/// 2. one thread per group turns them into the wire record and the encoder constants, through
///    the shared quantize::make_record / make_coder;
/// 3. one thread per eight elements computes their codes (shared encode_nearest /
///    encode_stochastic, Philox draws keyed by element index) and packs them into `bits` bytes.
/// Signed zeros are the one place where min/max order shows: the CPU keeps the first of equal
/// values, so an all-zero group has lo and hi from the same element and hi - lo == +0; the GPU
/// reproduces that by using lo for hi whenever they compare equal.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/compress/quantize.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"

namespace commpress {
namespace cuda::detail {

/// Per-group statistics as integer keys: symmetric {max |x| bits, -, poisoned}, asymmetric
/// {min ordered key, max ordered key, poisoned}.
struct quant_stats {
  std::uint32_t k0;
  std::uint32_t k1;
  std::uint32_t poisoned;
};

/// Float bits -> unsigned key with the float order (-0 sorts just below +0).
__device__ __forceinline__ std::uint32_t ordered_key(float v) {
  const std::uint32_t u = commpress::detail::float_to_bits(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_key(std::uint32_t o) {
  return commpress::detail::bits_to_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/// What the statistics kernels need to know about the configuration.
struct quant_shape {
  quantize c;
  std::uint64_t n;
  std::uint64_t len; ///< elements per group (tensor, block); columns: row count
  std::uint64_t groups;
  std::uint64_t seg_len;   ///< block/tensor: elements per warp segment
  std::uint64_t segs;      ///< segments per group
  std::uint64_t row_chunk; ///< column: rows per thread
  nonfinite_policy policy;
};

/// Folds one screened value into thread-local keys (NaN ignored, as the CPU's comparisons do).
__device__ __forceinline__ void fold_keys(bool symmetric, float v, std::uint32_t& k0,
                                          std::uint32_t& k1) {
  if (!(v == v))
    return;
  if (symmetric) {
    const std::uint32_t a = commpress::detail::float_to_bits(commpress::detail::abs(v));
    k0 = a > k0 ? a : k0;
  } else {
    const std::uint32_t o = ordered_key(v);
    k0 = o < k0 ? o : k0;
    k1 = o > k1 ? o : k1;
  }
}

__device__ __forceinline__ void merge_stats(quant_stats* s, bool symmetric, std::uint32_t k0,
                                            std::uint32_t k1, std::uint32_t poisoned,
                                            bool exclusive) {
  if (exclusive) {
    *s = quant_stats{k0, k1, poisoned};
    return;
  }
  if (symmetric) {
    atomicMax(&s->k0, k0);
  } else {
    atomicMin(&s->k0, k0);
    atomicMax(&s->k1, k1);
  }
  if (poisoned != 0)
    atomicOr(&s->poisoned, 1u);
}

/// Tensor and block granularity: one warp per segment of a group.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    quant_stats_kernel(quant_shape q, const T* in, quant_stats* stats, control* ctrl) {
  const bool sym = q.c.range == quant_range::symmetric;
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warps = grid_stride() / 32;
  std::size_t bad = 0;
  for (std::uint64_t w = thread_index() / 32; w < q.groups * q.segs; w += warps) {
    const std::uint64_t g = w / q.segs;
    const std::uint64_t group_end = q.n - g * q.len < q.len ? q.n : (g + 1) * q.len;
    const std::uint64_t first = g * q.len + (w % q.segs) * q.seg_len;
    // The last block may be shorter than the others: its trailing segments are empty.
    const std::uint64_t last = first >= group_end              ? first
                               : group_end - first < q.seg_len ? group_end
                                                               : first + q.seg_len;
    std::uint32_t k0 = sym ? 0u : 0xffffffffu;
    std::uint32_t k1 = 0;
    std::size_t seg_bad = 0;
    for (std::uint64_t i = first + lane; i < last; i += 32)
      fold_keys(sym, commpress::detail::screen(to_float(in[i]), q.policy, seg_bad), k0, k1);
    bad += seg_bad;
    k0 = sym ? __reduce_max_sync(0xffffffffu, k0) : __reduce_min_sync(0xffffffffu, k0);
    k1 = __reduce_max_sync(0xffffffffu, k1);
    const std::uint32_t poisoned =
        __reduce_or_sync(0xffffffffu, q.policy == nonfinite_policy::propagate && seg_bad != 0);
    if (lane == 0)
      merge_stats(stats + g, sym, k0, k1, poisoned, q.segs == 1);
  }
  add_nonfinite(ctrl, bad);
}

/// Column granularity: one thread per (column, chunk of rows); coalesced across columns.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    quant_column_stats_kernel(quant_shape q, const T* in, quant_stats* stats, control* ctrl) {
  const bool sym = q.c.range == quant_range::symmetric;
  const std::uint64_t cols = q.groups;
  const std::uint64_t rows = q.len;
  const std::uint64_t chunks = (rows + q.row_chunk - 1) / q.row_chunk;
  std::size_t bad = 0;
  for (std::uint64_t t = thread_index(); t < chunks * cols; t += grid_stride()) {
    const std::uint64_t j = t % cols;
    const std::uint64_t r0 = (t / cols) * q.row_chunk;
    const std::uint64_t r1 = rows - r0 < q.row_chunk ? rows : r0 + q.row_chunk;
    std::uint32_t k0 = sym ? 0u : 0xffffffffu;
    std::uint32_t k1 = 0;
    std::size_t mine = 0;
    for (std::uint64_t r = r0; r < r1; ++r)
      fold_keys(sym, commpress::detail::screen(to_float(in[r * cols + j]), q.policy, mine), k0, k1);
    bad += mine;
    merge_stats(stats + j, sym, k0, k1, q.policy == nonfinite_policy::propagate && mine != 0,
                false);
  }
  add_nonfinite(ctrl, bad);
}

/// One thread per group: wire record into the body, encoder constants into the workspace.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    quant_record_kernel(quantize c, std::uint64_t groups, const quant_stats* stats,
                        quantize::coder* coders, unsigned char* body) {
  const bool sym = c.range == quant_range::symmetric;
  for (std::uint64_t g = thread_index(); g < groups; g += grid_stride()) {
    const quant_stats st = stats[g];
    float s0, s1;
    if (sym) {
      s0 = commpress::detail::bits_to_float(st.k0);
      s1 = commpress::detail::bits_to_float(0xff800000u); // unused: the CPU's initial -inf
    } else {
      s0 = from_ordered_key(st.k0);
      s1 = from_ordered_key(st.k1);
      if (s1 == s0)
        s1 = s0; // +0/-0: the CPU's lo and hi come from the same element
    }
    if (st.poisoned != 0)
      s0 = s1 = commpress::detail::bits_to_float(0x7fc00000u);
    const quantize::record rec = quantize::make_record(c.range, c.bits, s0, s1);
    coders[g] = quantize::make_coder(c.range, c.bits, s0, s1);
    if (sym) {
      store_word<float>(body + 4 * g, rec.a);
    } else {
      store_word<float>(body + 8 * g, rec.a);
      store_word<float>(body + 8 * g + 4, rec.b);
    }
  }
}

/// Group of element i.
__device__ __forceinline__ std::uint64_t quant_group_of(const quantize& c, std::uint64_t i,
                                                        std::uint64_t len) {
  switch (c.granularity) {
  case scale_granularity::tensor:
    return 0;
  case scale_granularity::block:
    return i / len;
  default:
    return i % c.group;
  }
}

/// One thread per eight elements: codes, packed into `bits` bytes.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    quant_codes_kernel(quantize c, const T* in, std::uint64_t n, std::uint64_t len,
                       const quantize::coder* coders, rng_key key, std::uint64_t step,
                       nonfinite_policy policy, unsigned char* codes) {
  const std::uint64_t packs = (n + 7) / 8;
  for (std::uint64_t p = thread_index(); p < packs; p += grid_stride()) {
    const std::uint64_t first = 8 * p;
    const unsigned cnt = n - first < 8 ? static_cast<unsigned>(n - first) : 8u;
    std::uint32_t q[8];
    std::size_t ignored = 0;
    for (unsigned e = 0; e < cnt; ++e) {
      const std::uint64_t i = first + e;
      const float x = commpress::detail::screen(to_float(in[i]), policy, ignored);
      const quantize::coder k = coders[quant_group_of(c, i, len)];
      q[e] = c.round == rounding::stochastic
                 ? quantize::encode_stochastic(c.range, c.bits, x, k,
                                               uniform_from_bits(random_u32(key, step, i)))
                 : quantize::encode_nearest(c.range, c.bits, x, k);
    }
    commpress::detail::pack_group(q, cnt, c.bits, codes + p * c.bits);
  }
}

/// One thread per element: each reads its own code (unpack_one) and writes its own output, so
/// a warp's stores are one contiguous run. A thread per eight elements (the encoder's packing
/// unit), whose stores were 32 bytes apart across a warp, took more than twice as long
/// (bench/README.md, "CUDA on an H200").
template <bool Accumulate, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    quant_decode_kernel(quantize c, const unsigned char* body, std::uint64_t n, std::uint64_t len,
                        std::uint64_t records_bytes, T* out, float weight, const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  const bool sym = c.range == quant_range::symmetric;
  const unsigned char* codes = body + records_bytes;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
    const std::uint64_t g = quant_group_of(c, i, len);
    const quantize::record rec =
        sym ? quantize::record{load_word<float>(body + 4 * g), 0.0f}
            : quantize::record{load_word<float>(body + 8 * g), load_word<float>(body + 8 * g + 4)};
    const float v = quantize::decode_value(c.range, c.bits,
                                           commpress::detail::unpack_one(codes, i, c.bits), rec);
    if constexpr (Accumulate) {
      out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
    } else {
      out[i] = from_float<T>(v);
    }
  }
}

/// Workspace of the quantize encoder: statistics, then coders.
inline std::uint64_t quant_stats_bytes(std::uint64_t groups) {
  return align_up(sizeof(quant_stats) * groups);
}

template <bool Accumulate, class T>
void launch_quant_decode(const quantize& c, const unsigned char* body, T* out, std::uint64_t n,
                         float weight, const control* ctrl, cudaStream_t s) {
  if (n == 0)
    return;
  const std::uint64_t len = c.granularity == scale_granularity::block ? c.group : n;
  quant_decode_kernel<Accumulate><<<grid_for(n), block_threads, 0, s>>>(
      c, body, n, len, c.n_groups(n) * c.record_bytes(), out, weight, ctrl);
  check_launch();
}

} // namespace cuda::detail

namespace detail {

template <> struct codec_impl<quantize, cuda::par_t> {
  static std::uint64_t workspace_bytes(const quantize& c, std::uint64_t n) {
    return cuda::detail::quant_stats_bytes(c.n_groups(n)) + sizeof(quantize::coder) * c.n_groups(n);
  }

  template <element T>
  static void encode_body(cudaStream_t s, const quantize& c, const context& ctx, const T* d_in,
                          std::uint64_t n, unsigned char* d_body, std::byte* d_ws,
                          cuda::detail::control* ctrl) {
    namespace cd = cuda::detail;
    if (n == 0)
      return;
    const std::uint64_t groups = c.n_groups(n);
    auto* stats = reinterpret_cast<cd::quant_stats*>(d_ws);
    auto* coders = reinterpret_cast<quantize::coder*>(d_ws + cd::quant_stats_bytes(groups));
    const bool sym = c.range == quant_range::symmetric;
    cd::quant_shape q{c, n, 0, groups, 0, 1, 1, ctx.on_nonfinite};
    if (c.granularity == scale_granularity::column) {
      q.len = n / c.group; // rows
      // About 2^20 threads in all, each folding a run of rows of one column.
      const std::uint64_t chunks = (std::uint64_t{1} << 20) / groups;
      q.row_chunk = chunks == 0 ? q.len : (q.len + chunks - 1) / chunks;
      if (q.row_chunk == 0)
        q.row_chunk = 1;
    } else {
      q.len = c.granularity == scale_granularity::block ? c.group : n;
      // Segments of at least 1024 elements, and no more than about 2^15 segments per tensor,
      // so a whole-tensor group needs few atomics.
      std::uint64_t seg = (n + (std::uint64_t{1} << 15) - 1) >> 15;
      seg = seg < 1024 ? 1024 : seg;
      q.seg_len = q.len <= seg ? q.len : seg;
      q.segs = (q.len + q.seg_len - 1) / q.seg_len;
    }
    const bool shared_groups = c.granularity == scale_granularity::column || q.segs > 1;
    if (shared_groups) {
      // Atomic identities: 0 for maxima, all-ones for minima (asymmetric k0).
      COMMPRESS_CUDA_TRY(cudaMemsetAsync(stats, 0, sizeof(cd::quant_stats) * groups, s));
      if (!sym)
        COMMPRESS_CUDA_TRY(cudaMemset2DAsync(stats, sizeof(cd::quant_stats), 0xff, 4, groups, s));
    }
    if (c.granularity == scale_granularity::column) {
      const std::uint64_t work = ((q.len + q.row_chunk - 1) / q.row_chunk) * groups;
      cd::quant_column_stats_kernel<<<cd::grid_for(work), cd::block_threads, 0, s>>>(q, d_in, stats,
                                                                                     ctrl);
    } else {
      cd::quant_stats_kernel<<<cd::grid_for(32 * groups * q.segs), cd::block_threads, 0, s>>>(
          q, d_in, stats, ctrl);
    }
    cd::check_launch();
    cd::quant_record_kernel<<<cd::grid_for(groups), cd::block_threads, 0, s>>>(c, groups, stats,
                                                                               coders, d_body);
    cd::check_launch();
    const std::uint64_t len = c.granularity == scale_granularity::block ? c.group : n;
    cd::quant_codes_kernel<<<cd::grid_for((n + 7) / 8), cd::block_threads, 0, s>>>(
        c, d_in, n, len, coders, ctx.key(), ctx.step, ctx.on_nonfinite,
        d_body + groups * c.record_bytes());
    cd::check_launch();
  }

  template <element T>
  static void decode_body(cudaStream_t s, const quantize& c, const unsigned char*,
                          const unsigned char* d_body, T* d_out, std::uint64_t n, std::byte*,
                          const cuda::detail::control* ctrl, cuda::device_status*) {
    cuda::detail::launch_quant_decode<false>(c, d_body, d_out, n, 1.0f, ctrl, s);
  }

  static void accumulate_body(cudaStream_t s, const quantize& c, const unsigned char*,
                              const unsigned char* d_body, float* d_acc, std::uint64_t n,
                              float weight, std::byte*, const cuda::detail::control* ctrl,
                              cuda::device_status*) {
    cuda::detail::launch_quant_decode<true>(c, d_body, d_acc, n, weight, ctrl, s);
  }
};

} // namespace detail
} // namespace commpress
