// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CUDA implementation of the top-k codec: exact selection with the tie rule of
/// compress/top_k.hpp (the k largest magnitude keys; among equal keys the lower index).
///
/// Rows shorter than top_k_long_row: one block per row (grid-stride over rows):
/// 1. radix select of the k-th largest key t, four passes of 8-bit digits from the top, each a
///    shared-memory histogram over the row (keys are recomputed from the input, never stored);
///    it leaves t and `ties`, the number of keys == t to keep;
/// 2. one ordered pass in tiles of 2048 elements (8 per thread): a block scan over the threads'
///    tie counts gives each key == t its rank among the row's ties (kept iff rank < ties), a
///    second block scan over kept counts gives every kept element its output slot, so indices
///    come out ascending and values in index order, exactly as the CPU writes them.
/// Decoding (one thread per listed value; one block per row for bitmaps, whose positions need
/// a scan) checks the index section on the device first (ascending listed indices below the
/// row length; a bitmap with k bits and none past the row: the CPU's check_indices) and writes
/// nothing when it is malformed.
///
/// Longer rows (a whole-tensor selection of a large tensor) spread the same two steps over many
/// blocks per row (see "Long rows" below).

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/detail/nonfinite.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/compress/top_k.hpp"

namespace commpress {
namespace cuda::detail {

/// Elements per thread per tile: one bitmap byte.
inline constexpr unsigned top_k_items = 8;

/// Row geometry shared by the top-k kernels.
struct top_k_shape {
  top_k c;
  std::uint64_t d; ///< elements per row
  std::uint64_t k; ///< kept per row
  std::uint64_t rows;
  std::uint64_t ib; ///< bytes of a row's index section
  bool bitmap;
  unsigned width; ///< bytes of a listed index
};

__device__ __forceinline__ void store_index(unsigned char* p, unsigned width, std::uint64_t i) {
  if (width == 1)
    p[0] = static_cast<unsigned char>(i);
  if (width == 2)
    store_word<std::uint16_t>(p, static_cast<std::uint16_t>(i));
  if (width == 4)
    store_word<std::uint32_t>(p, static_cast<std::uint32_t>(i));
}
__device__ __forceinline__ std::uint64_t load_index(const unsigned char* p, unsigned width) {
  if (width == 1)
    return p[0];
  if (width == 2)
    return load_word<std::uint16_t>(p);
  return load_word<std::uint32_t>(p);
}

using top_k_scan = cub::BlockScan<std::uint32_t, block_threads>;

/// The ordered pass over elements [first, last) of row x (first a multiple of 8): kept = key > t,
/// or key == t with tie rank < ties (rank counted from ties_before, the row's ties before
/// `first`); kept elements get slots from kept_before on. Writes their indices (or bitmap
/// bytes) and values. Called by every thread of the block.
template <class T>
__device__ void top_k_ordered_range(const top_k_shape& s, const T* x, std::uint64_t first_elt,
                                    std::uint64_t last, std::uint32_t t, std::uint64_t ties,
                                    std::uint64_t kept_before, std::uint64_t ties_before,
                                    nonfinite_policy policy, unsigned char* idx, unsigned char* val,
                                    typename top_k_scan::TempStorage& storage) {
  const std::uint64_t vb = s.c.value_bytes();
  const bool keep_all = s.k == s.d;
  std::size_t ignored = 0; // count_nonfinite_kernel counts the input once
  for (std::uint64_t tile = first_elt; tile < last; tile += block_threads * top_k_items) {
    const std::uint64_t first = tile + threadIdx.x * top_k_items;
    float v[top_k_items];
    std::uint32_t key[top_k_items];
    std::uint32_t my_ties = 0;
    for (unsigned e = 0; e < top_k_items; ++e) {
      const std::uint64_t i = first + e;
      v[e] = i < last ? commpress::detail::screen(to_float(x[i]), policy, ignored) : 0.0f;
      key[e] = top_k::magnitude_key(v[e]);
      my_ties += (i < last && !keep_all && key[e] == t) ? 1u : 0u;
    }
    std::uint32_t tie_rank, tile_ties;
    top_k_scan(storage).ExclusiveSum(my_ties, tie_rank, tile_ties);
    __syncthreads();
    bool keep[top_k_items];
    std::uint32_t my_kept = 0;
    std::uint64_t rank = ties_before + tie_rank;
    for (unsigned e = 0; e < top_k_items; ++e) {
      const std::uint64_t i = first + e;
      bool kp = false;
      if (i < last) {
        if (keep_all || key[e] > t) {
          kp = true;
        } else if (key[e] == t) {
          kp = rank < ties;
          ++rank;
        }
      }
      keep[e] = kp;
      my_kept += kp ? 1u : 0u;
    }
    std::uint32_t slot, tile_kept;
    top_k_scan(storage).ExclusiveSum(my_kept, slot, tile_kept);
    __syncthreads();
    std::uint64_t j = kept_before + slot;
    unsigned byte = 0;
    for (unsigned e = 0; e < top_k_items; ++e) {
      if (!keep[e])
        continue;
      byte |= 1u << e;
      if (!s.bitmap)
        store_index(idx + j * s.width, s.width, first + e);
      store_code(val + j * vb, vb, s.c.encode_value(v[e]));
      ++j;
    }
    if (s.bitmap && first < last)
      idx[first / 8] = static_cast<unsigned char>(byte);
    kept_before += tile_kept;
    ties_before += tile_ties;
  }
}

/// Folds a histogram into the radix-select state: the digit holding the `want`-th largest key
/// among those matching `prefix`, and how many of that digit's keys are still wanted.
__device__ __forceinline__ void top_k_pick_digit(const std::uint32_t* hist, int shift,
                                                 std::uint32_t& prefix, std::uint64_t& want) {
  std::uint64_t above = 0;
  int b = 255;
  for (; b > 0 && above + hist[b] < want; --b)
    above += hist[b];
  prefix |= static_cast<std::uint32_t>(b) << shift;
  want -= above;
}

/// Key bits above the digit at `shift` (the part the radix select has fixed already).
__device__ __forceinline__ std::uint32_t top_k_high_mask(int shift) {
  return shift == 24 ? 0u : 0xffffffffu << (shift + 8);
}

/// One block per row: the whole selection (rows short enough for one block).
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_encode_kernel(top_k_shape s, const T* in, nonfinite_policy policy, unsigned char* body) {
  __shared__ typename top_k_scan::TempStorage scan_storage;
  __shared__ std::uint32_t hist[256];
  __shared__ std::uint32_t s_prefix;
  __shared__ std::uint64_t s_remaining;
  const std::uint64_t vb = s.c.value_bytes();
  const bool keep_all = s.k == s.d;
  std::size_t ignored = 0;
  for (std::uint64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const T* x = in + r * s.d;
    // 1. Radix select: after the four passes, prefix = t and remaining = ties to keep.
    if (threadIdx.x == 0) {
      s_prefix = 0;
      s_remaining = s.k;
    }
    __syncthreads();
    for (int shift = 24; shift >= 0 && !keep_all; shift -= 8) {
      hist[threadIdx.x] = 0; // block_threads == 256 bins
      __syncthreads();
      const std::uint32_t high = top_k_high_mask(shift);
      const std::uint32_t prefix = s_prefix;
      for (std::uint64_t i = threadIdx.x; i < s.d; i += block_threads) {
        const std::uint32_t key =
            top_k::magnitude_key(commpress::detail::screen(to_float(x[i]), policy, ignored));
        if ((key & high) == (prefix & high))
          atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0)
        top_k_pick_digit(hist, shift, s_prefix, s_remaining);
      __syncthreads();
    }
    // 2. Ordered pass.
    top_k_ordered_range(s, x, 0, s.d, s_prefix, s_remaining, 0, 0, policy, body + r * s.ib,
                        body + s.rows * s.ib + r * s.k * vb, scan_storage);
    __syncthreads(); // s_prefix / s_remaining are reset for the next row
  }
}

// --- Long rows: the same selection spread over many blocks -------------------------------------
//
// A row longer than top_k_long_row is cut into segments of top_k_segment elements. Each radix
// pass histograms the segments in parallel (shared-memory counts, then integer atomics into the
// row's 256 bins), one thread per row picks the digit; then every segment counts its keys above
// t and equal to t, one block per row scans those counts, and every segment writes its kept
// elements from the slots the scan gives it. Integer counts make every step order-free.

/// Rows at least this long use the multi-block path.
inline constexpr std::uint64_t top_k_long_row = std::uint64_t{1} << 18;
/// Elements per segment of a long row (a multiple of the 2048-element tile and of 8).
inline constexpr std::uint64_t top_k_segment = std::uint64_t{1} << 16;

/// Radix-select state of one long row.
struct top_k_row_state {
  std::uint64_t remaining; ///< keys still wanted among those matching prefix; finally: ties
  std::uint32_t prefix;    ///< the digits fixed so far; finally: t
  std::uint32_t pad;
};

/// Per-segment counts, then the segment's starting slot and tie rank.
struct top_k_segment_state {
  std::uint32_t above; ///< keys > t
  std::uint32_t equal; ///< keys == t
  std::uint64_t kept_before;
  std::uint64_t ties_before;
};

/// Workspace of the long-row path: 4 histograms per row, row states, segment states.
struct top_k_long_layout {
  std::uint64_t segments_per_row;
  std::uint64_t hist_bytes, rows_bytes, segs_bytes;
  static top_k_long_layout of(const top_k_shape& s) {
    top_k_long_layout l;
    l.segments_per_row = (s.d + top_k_segment - 1) / top_k_segment;
    l.hist_bytes = align_up(4 * 256 * 4 * s.rows);
    l.rows_bytes = align_up(sizeof(top_k_row_state) * s.rows);
    l.segs_bytes = align_up(sizeof(top_k_segment_state) * s.rows * l.segments_per_row);
    return l;
  }
  std::uint64_t bytes() const { return hist_bytes + rows_bytes + segs_bytes; }
};

/// Histogram of one radix pass over every segment of every long row.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_hist_kernel(top_k_shape s, const T* in, std::uint64_t segments_per_row, int shift,
                      nonfinite_policy policy, const top_k_row_state* rows, std::uint32_t* hist) {
  __shared__ std::uint32_t h[256];
  std::size_t ignored = 0;
  const std::uint32_t high = top_k_high_mask(shift);
  for (std::uint64_t g = blockIdx.x; g < s.rows * segments_per_row; g += gridDim.x) {
    const std::uint64_t r = g / segments_per_row;
    const std::uint64_t first = (g % segments_per_row) * top_k_segment;
    const std::uint64_t last = s.d - first < top_k_segment ? s.d : first + top_k_segment;
    const std::uint32_t prefix = shift == 24 ? 0u : rows[r].prefix;
    h[threadIdx.x] = 0;
    __syncthreads();
    const T* x = in + r * s.d;
    for (std::uint64_t i = first + threadIdx.x; i < last; i += block_threads) {
      const std::uint32_t key =
          top_k::magnitude_key(commpress::detail::screen(to_float(x[i]), policy, ignored));
      if ((key & high) == (prefix & high))
        atomicAdd(&h[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (h[threadIdx.x] != 0)
      atomicAdd(&hist[r * 256 + threadIdx.x], h[threadIdx.x]);
    __syncthreads();
  }
}

/// One thread per long row: the digit of this pass.
template <class Unused = void>
COMMPRESS_KERNEL void top_k_pick_kernel(top_k_shape s, int shift, const std::uint32_t* hist,
                                        top_k_row_state* rows) {
  for (std::uint64_t r = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; r < s.rows;
       r += std::uint64_t{gridDim.x} * blockDim.x) {
    std::uint32_t prefix = shift == 24 ? 0u : rows[r].prefix;
    std::uint64_t want = shift == 24 ? s.k : rows[r].remaining;
    top_k_pick_digit(hist + r * 256, shift, prefix, want);
    rows[r].prefix = prefix;
    rows[r].remaining = want;
  }
}

/// Per segment: how many keys are above t and equal to t.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_segment_count_kernel(top_k_shape s, const T* in, std::uint64_t segments_per_row,
                               nonfinite_policy policy, const top_k_row_state* rows,
                               top_k_segment_state* segs) {
  using reduce = cub::BlockReduce<std::uint32_t, block_threads>;
  __shared__ typename reduce::TempStorage storage;
  std::size_t ignored = 0;
  for (std::uint64_t g = blockIdx.x; g < s.rows * segments_per_row; g += gridDim.x) {
    const std::uint64_t r = g / segments_per_row;
    const std::uint64_t first = (g % segments_per_row) * top_k_segment;
    const std::uint64_t last = s.d - first < top_k_segment ? s.d : first + top_k_segment;
    const std::uint32_t t = rows[r].prefix;
    const T* x = in + r * s.d;
    std::uint32_t above = 0, equal = 0;
    for (std::uint64_t i = first + threadIdx.x; i < last; i += block_threads) {
      const std::uint32_t key =
          top_k::magnitude_key(commpress::detail::screen(to_float(x[i]), policy, ignored));
      above += key > t ? 1u : 0u;
      equal += key == t ? 1u : 0u;
    }
    above = reduce(storage).Sum(above);
    __syncthreads();
    equal = reduce(storage).Sum(equal);
    __syncthreads();
    if (threadIdx.x == 0) {
      segs[g].above = above;
      segs[g].equal = equal;
    }
  }
}

/// One block per long row: exclusive scans of the segments' counts give each segment its first
/// slot (kept keys above t before it, plus the ties before it that are kept) and tie rank.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_segment_scan_kernel(top_k_shape s, std::uint64_t segments_per_row,
                              const top_k_row_state* rows, top_k_segment_state* segs) {
  using scan = cub::BlockScan<std::uint64_t, block_threads>;
  __shared__ typename scan::TempStorage storage;
  const std::uint64_t per_thread = (segments_per_row + block_threads - 1) / block_threads;
  for (std::uint64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    top_k_segment_state* row = segs + r * segments_per_row;
    const std::uint64_t lo = threadIdx.x * per_thread;
    const std::uint64_t hi =
        lo + per_thread < segments_per_row ? lo + per_thread : segments_per_row;
    std::uint64_t above = 0, equal = 0;
    for (std::uint64_t g = lo; g < hi; ++g) {
      above += row[g].above;
      equal += row[g].equal;
    }
    std::uint64_t above_before, equal_before;
    scan(storage).ExclusiveSum(above, above_before);
    __syncthreads();
    scan(storage).ExclusiveSum(equal, equal_before);
    __syncthreads();
    const std::uint64_t ties = rows[r].remaining;
    for (std::uint64_t g = lo; g < hi; ++g) {
      row[g].kept_before = above_before + (equal_before < ties ? equal_before : ties);
      row[g].ties_before = equal_before;
      above_before += row[g].above;
      equal_before += row[g].equal;
    }
  }
}

/// Per segment: the ordered pass from the segment's slot and tie rank.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_segment_write_kernel(top_k_shape s, const T* in, std::uint64_t segments_per_row,
                               nonfinite_policy policy, const top_k_row_state* rows,
                               const top_k_segment_state* segs, unsigned char* body) {
  __shared__ typename top_k_scan::TempStorage scan_storage;
  const std::uint64_t vb = s.c.value_bytes();
  const bool keep_all = s.k == s.d;
  for (std::uint64_t g = blockIdx.x; g < s.rows * segments_per_row; g += gridDim.x) {
    const std::uint64_t r = g / segments_per_row;
    const std::uint64_t first = (g % segments_per_row) * top_k_segment;
    const std::uint64_t last = s.d - first < top_k_segment ? s.d : first + top_k_segment;
    top_k_ordered_range(s, in + r * s.d, first, last, keep_all ? 0u : rows[r].prefix,
                        keep_all ? 0u : rows[r].remaining, keep_all ? first : segs[g].kept_before,
                        keep_all ? 0u : segs[g].ties_before, policy, body + r * s.ib,
                        body + s.rows * s.ib + r * s.k * vb, scan_storage);
    __syncthreads();
  }
}

/// Flags a malformed payload: sets ctrl->invalid and reports errc::corrupt.
__device__ __forceinline__ void top_k_corrupt(control* ctrl, device_status* d_status) {
  atomicExch(&ctrl->invalid, 1u);
  report(d_status, errc::corrupt);
}

/// Index lists (the CPU's check_indices): every listed index below the row length and above
/// its predecessor. One thread per listed index over all rows.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_check_list_kernel(top_k_shape s, const unsigned char* body, control* ctrl,
                            device_status* d_status) {
  if (ctrl->invalid != 0)
    return; // the header failed already: its error stands
  for (std::uint64_t e = thread_index(); e < s.rows * s.k; e += grid_stride()) {
    const unsigned char* idx = body + (e / s.k) * s.ib;
    const std::uint64_t j = e % s.k;
    const std::uint64_t i = load_index(idx + j * s.width, s.width);
    const bool ascending = j == 0 || i > load_index(idx + (j - 1) * s.width, s.width);
    if (!(i < s.d && ascending))
      top_k_corrupt(ctrl, d_status);
  }
}

/// Bitmaps (the CPU's check_indices): exactly k bits per row, none past the row's end. One
/// block per row.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_check_bitmap_kernel(top_k_shape s, const unsigned char* body, control* ctrl,
                              device_status* d_status) {
  using reduce = cub::BlockReduce<std::uint64_t, block_threads>;
  __shared__ typename reduce::TempStorage storage;
  if (ctrl->invalid != 0)
    return;
  for (std::uint64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const unsigned char* idx = body + r * s.ib;
    std::uint64_t pop = 0;
    for (std::uint64_t b = threadIdx.x; b < s.ib; b += block_threads)
      pop += __popc(idx[b]);
    const std::uint64_t total = reduce(storage).Sum(pop);
    __syncthreads();
    const unsigned tail = static_cast<unsigned>(s.d % 8);
    const bool stray = tail != 0 && (idx[s.ib - 1] >> tail) != 0;
    if (threadIdx.x == 0 && (stray || total != s.k))
      top_k_corrupt(ctrl, d_status);
  }
}

/// Writes (or, Accumulate, adds weight times) value j of row r at index i.
template <bool Accumulate, class T>
__device__ __forceinline__ void top_k_emit(const top_k_shape& s, const unsigned char* body, T* out,
                                           float weight, std::uint64_t r, std::uint64_t i,
                                           std::uint64_t j) {
  const std::uint64_t vb = s.c.value_bytes();
  const float v = s.c.decode_value(load_code(body + s.rows * s.ib + (r * s.k + j) * vb, vb));
  T& o = out[r * s.d + i];
  if constexpr (Accumulate) {
    o = commpress::detail::add_rn(o, commpress::detail::mul_rn(weight, v));
  } else {
    o = from_float<T>(v);
  }
}

/// Index lists: one thread per kept value over all rows.
template <bool Accumulate, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_scatter_list_kernel(top_k_shape s, const unsigned char* body, T* out, float weight,
                              const control* ctrl) {
  if (ctrl->invalid != 0)
    return;
  for (std::uint64_t e = thread_index(); e < s.rows * s.k; e += grid_stride()) {
    const std::uint64_t r = e / s.k;
    const std::uint64_t j = e % s.k;
    top_k_emit<Accumulate>(s, body, out, weight, r,
                           load_index(body + r * s.ib + j * s.width, s.width), j);
  }
}

/// Bitmaps: one block per row; a block scan of the bytes' popcounts gives each set bit its
/// value's position.
template <bool Accumulate, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    top_k_scatter_bitmap_kernel(top_k_shape s, const unsigned char* body, T* out, float weight,
                                const control* ctrl) {
  __shared__ typename top_k_scan::TempStorage scan_storage;
  if (ctrl->invalid != 0)
    return;
  for (std::uint64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const unsigned char* idx = body + r * s.ib;
    std::uint64_t before = 0;
    for (std::uint64_t b0 = 0; b0 < s.ib; b0 += block_threads) {
      const std::uint64_t b = b0 + threadIdx.x;
      const unsigned bits = b < s.ib ? idx[b] : 0u;
      std::uint32_t slot, total;
      top_k_scan(scan_storage).ExclusiveSum(static_cast<std::uint32_t>(__popc(bits)), slot, total);
      __syncthreads();
      std::uint64_t j = before + slot;
      for (unsigned m = bits; m != 0; m &= m - 1)
        top_k_emit<Accumulate>(s, body, out, weight, r, 8 * b + (__ffs(m) - 1), j++);
      before += total;
    }
  }
}

template <bool Accumulate, class T>
void launch_top_k_scatter(const top_k_shape& s, const unsigned char* body, T* out, float weight,
                          const control* ctrl, cudaStream_t st) {
  if (s.bitmap) {
    top_k_scatter_bitmap_kernel<Accumulate>
        <<<static_cast<unsigned>(s.rows < max_blocks ? s.rows : max_blocks), block_threads, 0,
           st>>>(s, body, out, weight, ctrl);
  } else {
    top_k_scatter_list_kernel<Accumulate>
        <<<grid_for(s.rows * s.k), block_threads, 0, st>>>(s, body, out, weight, ctrl);
  }
  check_launch();
}

inline top_k_shape top_k_shape_of(const top_k& c, std::uint64_t n) {
  top_k_shape s;
  s.c = c;
  s.d = c.row_elements(n);
  s.k = c.kept(s.d);
  s.rows = c.rows(n);
  s.ib = top_k::index_bytes(s.d, s.k);
  s.bitmap = top_k::uses_bitmap(s.d, s.k);
  s.width = top_k::index_width(s.d);
  return s;
}

inline unsigned top_k_grid(std::uint64_t rows) {
  return static_cast<unsigned>(rows < max_blocks ? rows : max_blocks);
}

} // namespace cuda::detail

namespace detail {

template <> struct codec_impl<top_k, cuda::par_t> {
  /// Long rows (multi-block selection) need histograms and per-segment counts.
  static std::uint64_t workspace_bytes(const top_k& c, std::uint64_t n) {
    const cuda::detail::top_k_shape s = cuda::detail::top_k_shape_of(c, n);
    if (s.k == 0 || s.rows == 0 || s.d < cuda::detail::top_k_long_row)
      return 0;
    return cuda::detail::top_k_long_layout::of(s).bytes();
  }

  template <element T>
  static void encode_body(cudaStream_t st, const top_k& c, const context& ctx, const T* d_in,
                          std::uint64_t n, unsigned char* d_body, std::byte* d_ws,
                          cuda::detail::control* ctrl) {
    namespace cd = cuda::detail;
    refuse_quantized(c);
    cd::launch_count_nonfinite(d_in, n, ctrl, st);
    const cd::top_k_shape s = cd::top_k_shape_of(c, n);
    if (s.k == 0 || s.rows == 0)
      return;
    if (s.d < cd::top_k_long_row) {
      cd::top_k_encode_kernel<<<cd::top_k_grid(s.rows), cd::block_threads, 0, st>>>(
          s, d_in, ctx.on_nonfinite, d_body);
      cd::check_launch();
      return;
    }
    const cd::top_k_long_layout l = cd::top_k_long_layout::of(s);
    auto* hist = reinterpret_cast<std::uint32_t*>(d_ws);
    auto* rows = reinterpret_cast<cd::top_k_row_state*>(d_ws + l.hist_bytes);
    auto* segs = reinterpret_cast<cd::top_k_segment_state*>(d_ws + l.hist_bytes + l.rows_bytes);
    const std::uint64_t total = s.rows * l.segments_per_row;
    const unsigned seg_grid =
        static_cast<unsigned>(total < cd::max_blocks ? total : cd::max_blocks);
    if (s.k < s.d) {
      COMMPRESS_CUDA_TRY(cudaMemsetAsync(hist, 0, l.hist_bytes, st));
      for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        std::uint32_t* h = hist + pass * 256 * s.rows;
        cd::top_k_hist_kernel<<<seg_grid, cd::block_threads, 0, st>>>(
            s, d_in, l.segments_per_row, shift, ctx.on_nonfinite, rows, h);
        cd::check_launch();
        cd::top_k_pick_kernel<<<cd::grid_for(s.rows), cd::block_threads, 0, st>>>(s, shift, h,
                                                                                  rows);
        cd::check_launch();
      }
      cd::top_k_segment_count_kernel<<<seg_grid, cd::block_threads, 0, st>>>(
          s, d_in, l.segments_per_row, ctx.on_nonfinite, rows, segs);
      cd::check_launch();
      cd::top_k_segment_scan_kernel<<<cd::top_k_grid(s.rows), cd::block_threads, 0, st>>>(
          s, l.segments_per_row, rows, segs);
      cd::check_launch();
    }
    cd::top_k_segment_write_kernel<<<seg_grid, cd::block_threads, 0, st>>>(
        s, d_in, l.segments_per_row, ctx.on_nonfinite, rows, segs, d_body);
    cd::check_launch();
  }

  template <element T>
  static void decode_body(cudaStream_t st, const top_k& c, const unsigned char*,
                          const unsigned char* d_body, T* d_out, std::uint64_t n, std::byte*,
                          cuda::detail::control* ctrl, cuda::device_status* d_status) {
    namespace cd = cuda::detail;
    refuse_quantized(c);
    const cd::top_k_shape s = cd::top_k_shape_of(c, n);
    check(s, d_body, ctrl, d_status, st);
    cd::launch_zero_fill(d_out, n, ctrl, st);
    if (s.k == 0 || s.rows == 0)
      return;
    cd::launch_top_k_scatter<false>(s, d_body, d_out, 1.0f, ctrl, st);
  }

  static void accumulate_body(cudaStream_t st, const top_k& c, const unsigned char*,
                              const unsigned char* d_body, float* d_acc, std::uint64_t n,
                              float weight, std::byte*, cuda::detail::control* ctrl,
                              cuda::device_status* d_status) {
    namespace cd = cuda::detail;
    refuse_quantized(c);
    const cd::top_k_shape s = cd::top_k_shape_of(c, n);
    check(s, d_body, ctrl, d_status, st);
    if (s.k == 0 || s.rows == 0)
      return;
    cd::launch_top_k_scatter<true>(s, d_body, d_acc, weight, ctrl, st);
  }

private:
  /// Quantized kept values have no kernel yet: refused before anything is enqueued.
  static void refuse_quantized(const top_k& c) {
    COMMPRESS_EXPECTS(!c.quantized(), errc::invalid_argument, "top_k",
                      "quantized kept values run on the CPU backends only");
  }

  static void check(const cuda::detail::top_k_shape& s, const unsigned char* d_body,
                    cuda::detail::control* ctrl, cuda::device_status* d_status, cudaStream_t st) {
    namespace cd = cuda::detail;
    if (s.k == 0 || s.rows == 0)
      return;
    if (s.bitmap) {
      cd::top_k_check_bitmap_kernel<<<cd::top_k_grid(s.rows), cd::block_threads, 0, st>>>(
          s, d_body, ctrl, d_status);
    } else {
      cd::top_k_check_list_kernel<<<cd::grid_for(s.rows * s.k), cd::block_threads, 0, st>>>(
          s, d_body, ctrl, d_status);
    }
    cd::check_launch();
  }
};

} // namespace detail
} // namespace commpress
