// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Exact top-k of one long row by a sampled threshold and a radix select (bench/README.md,
/// "exact top-k"), so a row costs about one streaming pass instead of std::nth_element over it;
/// and of one shorter row with few kept elements (chunked top-k) by per-lane lists of the k
/// largest keys (top_k_small).
///
/// Keys are |x| bit patterns (x's bits with the sign cleared) as unsigned integers: for
/// non-negative floats, NaN and Inf included, their order is the magnitude order that
/// compress/top_k.hpp ranks by, and integer keys can be counted by their high bits.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"

namespace commpress::cpu::detail {

/// Rows shorter than this take the nth_element method: sampling does not pay for them.
inline constexpr std::uint64_t sampled_top_k_min_row = 1u << 16;

/// Bits of one radix digit: 2^11 counters (8 KiB) stay in L1, and three digits cover a key.
inline constexpr unsigned radix_select_bits = 11;
inline constexpr std::uint64_t radix_select_bins = std::uint64_t{1} << radix_select_bits;

/// What radix_select finds: the k-th largest key and how many keys are larger than it.
struct kth_key {
  std::uint32_t key;
  std::uint64_t greater;
};

/// Copies the keys w & 0x7fffffff of src[0..n) that lie in [lo, lo + span] to dst, in order,
/// and returns how many there are. dst may be src (the copy only moves keys down).
inline std::uint64_t keys_in_range(const std::uint32_t* src, std::uint64_t n, std::uint32_t lo,
                                   std::uint32_t span, std::uint32_t* dst) {
  std::uint64_t m = 0;
  std::uint64_t j = 0;
  {
    // Compress in a register and store all lanes: a compressing store to memory is several
    // times slower, and lanes past m are overwritten by the next store or never read.
    using namespace simd;
    const vu abs_mask = splat_u32(0x7fffffffu);
    const vu base = splat_u32(lo);
    const vu last = splat_u32(span);
    for (; j + lanes <= n; j += lanes) {
      const vu key = and_u32(load_u32(src + j), abs_mask);
      // Below lo, key - lo wraps to >= 2^31 > span.
      m += compress_store(dst + m, le_u32(sub_u32(key, base), last), key);
    }
  }
  for (; j < n; ++j) {
    const std::uint32_t key = src[j] & 0x7fffffffu;
    dst[m] = key; // branchless: written always, kept if it is in the range
    m += key - lo <= span ? 1u : 0u;
  }
  return m;
}

/// What candidate_statistics finds: how many keys are > t, and the largest key.
struct key_statistics {
  std::uint64_t above;
  std::uint32_t top;
};

/// Of the keys w & 0x7fffffff of words[0..n): how many are > t, and the largest (0 for n = 0).
inline key_statistics candidate_statistics(const std::uint32_t* words, std::uint64_t n,
                                           std::uint32_t t) {
  key_statistics s{0, 0};
  std::uint64_t j = 0;
  {
    // Keys are below 2^31, so signed compares order them.
    using namespace simd;
    const vu abs_mask = splat_u32(0x7fffffffu);
    const vu threshold = splat_u32(t);
    vu most = splat_u32(0);
    vu above_lanes = splat_u32(0);
    for (; j + lanes <= n; j += lanes) {
      const vu key = and_u32(load_u32(words + j), abs_mask);
      most = max_i32(most, key);
      above_lanes = count_lanes(above_lanes, gt_i32(key, threshold));
    }
    s.above = reduce_add_u32(above_lanes);
    s.top = static_cast<std::uint32_t>(reduce_max_i32(most));
  }
  for (; j < n; ++j) {
    const std::uint32_t key = words[j] & 0x7fffffffu;
    s.top = key > s.top ? key : s.top;
    s.above += key > t ? 1u : 0u;
  }
  return s;
}

/// The k-th largest (1 <= k <= n) of the keys w & 0x7fffffff of words[0..n), all of which lie
/// in [lo, hi]. Each round counts the keys of the current range by their top
/// radix_select_bits bits above lo, walks the counts down from the top to the digit that holds
/// the k-th key, and copies only that digit's keys to `scratch` for the next round, so a round
/// touches at most the keys the previous one left; the range shrinks by 2^11 a round, hence at
/// most three rounds, and on smooth data the second and third see a fraction of a percent of
/// the keys. All of it is counting and compressing, where std::nth_element's partition
/// mispredicts on random keys: over the ~10% candidate set of a row it took a large share of
/// the row's time (bench/README.md, "Figures behind the code comments").
/// @param hist radix_select_bins counters
/// @param scratch n words; may be `words`, which is then overwritten
inline kth_key radix_select(const std::uint32_t* words, std::uint64_t n, std::uint64_t k,
                            std::uint32_t lo, std::uint32_t hi,
                            std::uint32_t* COMMPRESS_RESTRICT hist, std::uint32_t* scratch) {
  const auto shift_for = [](std::uint32_t range) {
    const auto width = static_cast<unsigned>(std::bit_width(range));
    return width > radix_select_bits ? width - radix_select_bits : 0u;
  };
  unsigned shift = shift_for(hi - lo);
  const std::uint32_t* src = words;
  std::uint64_t greater = 0;
  for (;;) {
    std::fill(hist, hist + radix_select_bins, 0u);
    for (std::uint64_t j = 0; j < n; ++j)
      ++hist[((src[j] & 0x7fffffffu) - lo) >> shift];
    std::uint64_t digit = radix_select_bins - 1;
    for (; greater + hist[digit] < k; --digit)
      greater += hist[digit];
    lo += static_cast<std::uint32_t>(digit << shift);
    if (shift == 0)
      return {lo, greater};
    n = keys_in_range(src, n, lo, (std::uint32_t{1} << shift) - 1, scratch);
    src = scratch;
    shift = shift_for((std::uint32_t{1} << shift) - 1);
  }
}

/// The elements top_k_sampled keeps, in increasing index: index[j] and the screened fp32 bits
/// bits[j] for j < k. Both null when it declined; bits alone null when the bits went to the
/// caller's `values`.
struct sampled_top_k {
  const std::uint32_t* index;
  const std::uint32_t* bits;
};

/// The fp32 bits of element x[i], as to_float gives them: the key and value that the sampled
/// select reads for fp16 and bf16 rows, so it keeps the set the full method keeps over the
/// widened row.
template <element T> COMMPRESS_FORCEINLINE std::uint32_t widened_bits(const T* x, std::uint64_t i) {
  if constexpr (std::same_as<T, float>) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    return u;
  } else {
    return std::bit_cast<std::uint32_t>(to_float(x[i]));
  }
}

/// Whether top_k_sampled's streaming pass runs as element loops (the portable vector layer),
/// and their block.
inline constexpr bool portable_pass =
#if defined(COMMPRESS_SIMD_PORTABLE)
    true;
#else
    false;
#endif
inline constexpr std::uint64_t portable_pass_block = 256;

/// The key of element x[i] in its own width: its bits with the sign cleared. Widening is
/// strictly increasing in it, so one compare against narrow_threshold decides a compare of the
/// widened key, and 16-bit rows are screened without widening (8 keys to an SSE2 vector where
/// GCC vectorizes the loop: at -O3, as in CMake's Release flags).
template <element T>
using narrow_key_t = std::conditional_t<std::same_as<T, float>, std::uint32_t, std::uint16_t>;
template <element T> COMMPRESS_FORCEINLINE narrow_key_t<T> narrow_key(const T* x, std::uint64_t i) {
  if constexpr (std::same_as<T, float>)
    return widened_bits(x, i) & 0x7fffffffu;
  else
    return static_cast<std::uint16_t>(x[i].bits & 0x7fffu);
}

/// The least key of T whose widened key is >= t (2^15 for a 16-bit T when there is none): for
/// every element, narrow_key >= narrow_threshold(t) exactly when its widened key is >= t.
template <element T> std::uint32_t narrow_threshold(std::uint32_t t) {
  if constexpr (std::same_as<T, float>) {
    return t;
  } else {
    std::uint32_t lo = 0; // a binary search over the 2^15 keys
    std::uint32_t hi = 0x8000u;
    while (lo < hi) {
      const std::uint32_t mid = (lo + hi) / 2;
      const T e{static_cast<std::uint16_t>(mid)};
      if ((widened_bits(&e, 0) & 0x7fffffffu) >= t)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }
}

/// Exact top-k of one row of float, half or bfloat16 elements by a sampled threshold
/// (DGC-style sample), on the elements' fp32 values (exact widenings, so the same order):
/// 1. the keys (|x| bits, screened by the non-finite policy) of about d / 1024 sampled elements
///    give two thresholds t0 <= t1, at ranks 3 sigma below and above the k-th;
/// 2. one streaming pass collects the index and (screened) bits of every element whose key is
///    >= t0 into the workspace; the keys > t1 are among them, and are counted there;
/// 3. when fewer than k keys are > t1, the k-th largest key t is among the few candidates in
///    [t0, t1], and radix_select over those alone finds it (otherwise over all candidates);
///    the candidates, in index order, are then compacted in place to the kept ones as the tie
///    rule of compress/top_k.hpp says: every key > t, then the lowest-indexed keys == t.
/// Every key >= t is a candidate whenever there are >= k of them, so the set is the same as
/// nth_element over the whole row. Declines (returns nulls) when the sample missed (fewer than
/// k, or about a third of the row, collected); the caller then runs the full method. Otherwise
/// adds the row's NaN/Inf count to `bad`. The kept elements come back as arrays, not through a
/// per-element callback, so that the callers can write them in tight loops. With a `bitmap`
/// (d bits, LSB first, any contents on entry), the kept elements' bits are set there and every
/// other bit cleared: the streaming pass stores each 16-element candidate mask whole and the
/// compaction clears the few candidates it rejects, so the bitmap costs no per-element
/// read-modify-write and no clearing pass. With `values` (4 k bytes, any alignment), the
/// compaction writes the kept bits there instead of into the workspace, so they are not copied
/// again. When the method declines, the bitmap's and values' contents are unspecified.
/// @param d at least sampled_top_k_min_row
/// @param ws at least d 32-bit words: radix_select's counters, then three arrays of d / 3;
///           the result points into it
static_assert(sampled_top_k_min_row >= 8 * radix_select_bins,
              "top_k_sampled's arrays must have room after radix_select's counters");
template <element T>
sampled_top_k top_k_sampled(const T* COMMPRESS_RESTRICT x, std::uint64_t d, std::uint64_t k,
                            bool zero_nonfinite, std::uint32_t* ws, std::size_t& bad,
                            unsigned char* bitmap = nullptr, unsigned char* values = nullptr) {
  constexpr sampled_top_k declined{nullptr, nullptr};
  const std::uint64_t cap = (d - radix_select_bins) / 3;
  std::uint32_t* const hist = ws;
  std::uint32_t* const idx = ws + radix_select_bins;
  std::uint32_t* const val = idx + cap;
  std::uint32_t* const tmp = val + cap;
  const auto key_of = [zero_nonfinite](std::uint32_t bits) {
    const std::uint32_t key = bits & 0x7fffffffu;
    return zero_nonfinite && key >= 0x7f800000u ? 0u : key;
  };
  // 1. Sample: one element per stride, jittered within it so periodic data does not alias.
  const std::uint64_t s = std::min<std::uint64_t>(std::max<std::uint64_t>(d / 1024, 1024), cap);
  const std::uint64_t stride = d / s;
  for (std::uint64_t j = 0; j < s; ++j) {
    const std::uint64_t jitter = (j * 0x9E3779B97F4A7C15ull >> 40) % stride;
    tmp[j] = key_of(widened_bits(x, j * stride + jitter));
  }
  const double expect = static_cast<double>(s) * static_cast<double>(k) / static_cast<double>(d);
  // 3 sigma of the sample count above the k-th key, so the pass rarely collects fewer than k.
  const double margin = 3.0 * std::sqrt(expect) + 2.0;
  const auto rank = static_cast<std::uint64_t>(expect + margin);
  if (rank >= s)
    return declined;
  std::nth_element(tmp, tmp + rank, tmp + s, std::greater<>{});
  const std::uint32_t t0 = tmp[rank];
  if (t0 == 0)
    return declined; // every element would be a candidate
  // t1 only narrows the select; without a rank for it, no key is above it.
  std::uint32_t t1 = 0x7fffffffu;
  if (expect > margin) {
    const auto rank1 = static_cast<std::uint64_t>(expect - margin);
    std::nth_element(tmp, tmp + rank1, tmp + rank, std::greater<>{});
    t1 = tmp[rank1];
  }

  // 2. One streaming pass: candidates (index, screened bits) with key >= t0, and the NaN/Inf
  // count.
  // Room for the stores of one step of the loop below: an unconditional 16-wide store, or on
  // the portable layer a block's candidates.
  const std::uint64_t limit = cap - (portable_pass ? portable_pass_block : 16);
  std::uint64_t c = 0;
  std::size_t nonfinite = 0;
  std::uint64_t i = 0;
  if constexpr (portable_pass) {
    // Element loops a block at a time, which GCC vectorizes with a few accumulators, where the
    // layer's 16-lane loop holds more live vectors than SSE2 has registers (bench/README.md):
    // the NaN/Inf count and a flag byte per element, on keys in the elements' own width, then
    // the flags eight at a time, to the bitmap and to the candidates.
    using key_type = narrow_key_t<T>;
    const auto first_nonfinite = static_cast<key_type>(narrow_threshold<T>(0x7f800000u));
    const auto first_hit = static_cast<key_type>(narrow_threshold<T>(t0));
    constexpr std::uint64_t block = portable_pass_block;
    for (; i + block <= d; i += block) {
      for (std::uint64_t q = 0; q < block; q += 16)
        if (i + q + 512 < d)
          simd::prefetch(x + i + q + 512);
      alignas(16) unsigned char hit[block];
      // The flag and count in the keys' width: with a bool flag summed into a 32-bit count,
      // GCC 12 left the loop of 16-bit keys scalar.
      key_type block_nonfinite = 0;
      for (std::uint64_t q = 0; q < block; ++q) {
        key_type key = narrow_key(x, i + q);
        const key_type nf = key >= first_nonfinite ? 1u : 0u;
        block_nonfinite = static_cast<key_type>(block_nonfinite + nf);
        key = zero_nonfinite && nf != 0 ? 0u : key; // key 0 < first_hit: no candidate
        hit[q] = key >= first_hit ? 1u : 0u;
      }
      nonfinite += block_nonfinite;
      for (std::uint64_t q = 0; q < block; q += 8) {
        std::uint64_t flags;
        std::memcpy(&flags, hit + q, 8);
        if (bitmap != nullptr) // byte j's flag to bit j: the products' top byte
          bitmap[(i + q) / 8] = static_cast<unsigned char>(flags * 0x0102040810204080ull >> 56);
        for (; flags != 0; flags &= flags - 1) {
          const std::uint64_t at = i + q + static_cast<unsigned>(std::countr_zero(flags)) / 8;
          idx[c] = static_cast<std::uint32_t>(at);
          val[c++] = widened_bits(x, at);
        }
      }
      if (c > limit)
        return declined;
    }
  } else {
    // Keys are below 2^31, so signed compares order them; key >= t0 is key > t0 - 1 (t0 > 0
    // here). A per-lane count: cheaper in the loop than popcounts of the masks, and a lane sees
    // at most d / lanes < 2^32 elements.
    using namespace simd;
    const vu abs_mask = splat_u32(0x7fffffffu);
    const vu finite_max = splat_u32(0x7f7fffffu);
    const vu below_lo = splat_u32(t0 - 1);
    const vu step = splat_u32(static_cast<std::uint32_t>(lanes));
    vu index = lane_index();
    vu nonfinite_lanes = splat_u32(0);
    for (; i + 16 <= d; i += 16) {
      // By hand, 512 elements ahead (2 KiB of fp32; 16-bit rows keep the count): with the
      // candidate stores in the loop, the hardware prefetcher alone left the fp32 pass slower
      // (bench/README.md, "Figures behind the code comments").
      if (i + 512 < d)
        simd::prefetch(x + i + 512);
      for (std::uint64_t at = i; at < i + 16; at += lanes) {
        const vu v = load_lane_bits(x + at);
        vu key = and_u32(v, abs_mask);
        const vm nf = gt_i32(key, finite_max);
        nonfinite_lanes = count_lanes(nonfinite_lanes, nf);
        if (zero_nonfinite) // key 0 < t0: no candidate, so v needs no zeroing
          key = clear(nf, key);
        // Stored whether or not any lane hit: which blocks hold a candidate is random, and a
        // mispredicted branch costs more than a compress instruction's stores (bench/README.md,
        // "Figures behind the code comments").
        const vm hit = gt_i32(key, below_lo);
        if (bitmap != nullptr) { // at is a multiple of lanes: whole bytes, element at in bit 0
          const std::uint32_t hit_bits = mask_bits(hit);
          std::memcpy(bitmap + at / 8, &hit_bits, lanes / 8);
        }
        compress_store(idx + c, hit, index);
        c += compress_store(val + c, hit, v);
        index = add_u32(index, step);
      }
      if (c > limit)
        return declined;
    }
    nonfinite += static_cast<std::size_t>(reduce_add_u32(nonfinite_lanes));
  }
  if (bitmap != nullptr) // the bytes the loop below sets bit by bit (i is a multiple of 16)
    std::memset(bitmap + i / 8, 0, (d + 7) / 8 - i / 8);
  for (; i < d; ++i) {
    std::uint32_t u = widened_bits(x, i);
    const bool nf = (u & 0x7fffffffu) >= 0x7f800000u;
    nonfinite += nf ? 1u : 0u;
    if (zero_nonfinite && nf)
      u = 0;
    const std::uint32_t key = u & 0x7fffffffu;
    idx[c] = static_cast<std::uint32_t>(i); // branchless: written always, kept if it passes
    val[c] = u;
    const bool hit = key >= t0;
    if (bitmap != nullptr)
      bitmap[i / 8] = static_cast<unsigned char>(bitmap[i / 8] | (hit ? 1u : 0u) << (i % 8));
    c += hit ? 1u : 0u;
    if (c > limit)
      return declined;
  }
  if (c < k)
    return declined;
  // Counted over the candidates, a fraction of the row, not in the streaming pass: every key
  // > t1 is one (t1 >= t0), and so is the largest key (there are c >= k >= 1).
  const auto [above, top] = candidate_statistics(val, c, t1);

  // 3. The exact k-th key t, then the kept candidates compacted to the front, in index order.
  kth_key kth{};
  if (above < k) {
    const std::uint64_t n = keys_in_range(val, c, t0, t1 - t0, tmp);
    kth = radix_select(tmp, n, k - above, t0, t1, hist, tmp);
    kth.greater += above;
  } else {
    kth = radix_select(val, c, k, t0, top, hist, tmp);
  }
  const std::uint32_t t = kth.key;
  std::uint64_t ties = k - kth.greater;           // keys == t still to keep
  const auto unmark = [bitmap](std::uint32_t i) { // a rejected candidate's bit
    if (bitmap != nullptr)
      bitmap[i / 8] = static_cast<unsigned char>(bitmap[i / 8] & ~(1u << (i % 8)));
  };
  std::uint64_t m = 0;
  std::uint64_t j = 0;
  {
    using namespace simd;
    const vu abs_mask = splat_u32(0x7fffffffu);
    const vu kth_vec = splat_u32(t);
    for (; j + lanes <= c; j += lanes) {
      const vu v = load_u32(val + j);
      const vu key = and_u32(v, abs_mask);
      std::uint32_t keep = mask_bits(gt_u32(key, kth_vec));
      // Ties are rare: keep the first `ties` lanes equal to t (lanes are in index order).
      for (std::uint32_t eq = mask_bits(eq_u32(key, kth_vec)); eq != 0 && ties != 0;
           eq &= eq - 1, --ties)
        keep |= eq & (0u - eq);
      for (std::uint32_t rejected = ~keep & ((1u << lanes) - 1u); rejected != 0;
           rejected &= rejected - 1)
        unmark(idx[j + static_cast<unsigned>(std::countr_zero(rejected))]);
      // All lanes stored (see keys_in_range): m <= j, so only lanes already read are hit.
      // The caller's `values` get the kept lanes alone: nothing past its 4 k bytes.
      const vm mask = mask_from_bits(keep);
      compress_store(idx + m, mask, load_u32(idx + j));
      if (values != nullptr)
        m += compress_store_exact(values + 4 * m, mask, v);
      else
        m += compress_store(val + m, mask, v);
    }
  }
  for (; j < c; ++j) {
    const std::uint32_t key = val[j] & 0x7fffffffu;
    const bool tie = key == t && ties != 0;
    ties -= tie ? 1u : 0u;
    const bool keep = key > t || tie;
    if (!keep)
      unmark(idx[j]);
    idx[m] = idx[j]; // branchless: written always, kept if it is kept
    if (values == nullptr)
      val[m] = val[j];
    else if (keep)
      std::memcpy(values + 4 * m, val + j, 4);
    m += keep ? 1u : 0u;
  }
  bad += nonfinite;
  return {idx, values == nullptr ? val : nullptr};
}

/// Largest k that top_k_small handles.
inline constexpr std::uint64_t small_top_k_max = 8;

/// The most per-lane key lists for which top_k_small pays: beyond 4, the plain-C++ layer's
/// 16-lane vectors no longer fit SSE2's registers and the method is no faster than the general
/// one (bench/README.md, "A selection for small k").
#if defined(COMMPRESS_SIMD_AVX512) || defined(COMMPRESS_SIMD_AVX2)
inline constexpr std::uint64_t small_top_k_lists_fast = small_top_k_max;
#else
inline constexpr std::uint64_t small_top_k_lists_fast = 4;
#endif

/// The lists per lane that top_k_small keeps for a row of d elements and k kept: k, or 4 where
/// no lane sees more than 4 of the row's elements (a chunk of 64 in 16-lane vectors), since a
/// lane's lists need hold no more keys than the lane sees.
constexpr std::uint64_t small_top_k_lists(std::uint64_t d, std::uint64_t k) {
  return k > 4 && d <= 4 * simd::lanes ? 4 : k;
}

/// Whether top_k_small's second pass first assumes that exactly k keys are >= the k-th (no
/// surplus ties), with one compare per vector, and falls back to the exact pass otherwise: it
/// pays with AVX2 and AVX-512, and in the plain-C++ layer it measured within the spread of the
/// runs (bench/README.md, "A selection for small k").
#if defined(COMMPRESS_SIMD_AVX512) || defined(COMMPRESS_SIMD_AVX2)
inline constexpr bool small_top_k_one_compare = true;
#else
inline constexpr bool small_top_k_one_compare = false;
#endif

/// The state of top_k_small_fixed's two passes over a row, with L lists per lane.
template <unsigned K, unsigned L> struct small_top_k {
  simd::vu top[L];    ///< per lane, its L largest keys so far: top[0] >= top[1] >= ...
  simd::vu nonfinite; ///< per lane, its NaN/Inf count
  std::uint32_t t;    ///< the K-th largest key of the row
  std::uint32_t ties; ///< keys == t still to keep
  std::uint64_t word; ///< kept bits of the current 64 elements
  unsigned m;         ///< kept elements written

  /// |x| bits of a vector, NaN/Inf as 0 under zero_nonfinite; nf gets the NaN/Inf lanes.
  static COMMPRESS_FORCEINLINE simd::vu key_of(simd::vu v, bool zero_nonfinite, simd::vm& nf) {
    using namespace simd;
    const vu key = and_u32(v, splat_u32(0x7fffffffu));
    nf = gt_i32(key, splat_u32(0x7f7fffffu));
    return zero_nonfinite ? clear(nf, key) : key;
  }

  /// Pass 1 on one vector: each lane's key joins its list by a compare-exchange chain (keys are
  /// below 2^31: signed and unsigned order agree).
  COMMPRESS_FORCEINLINE void insert(simd::vu v, bool zero_nonfinite) {
    using namespace simd;
    vm nf;
    vu key = key_of(v, zero_nonfinite, nf);
    nonfinite = count_lanes(nonfinite, nf);
    for (unsigned j = 0; j < L; ++j) {
      const vu larger = max_i32(top[j], key);
      key = min_i32(top[j], key);
      top[j] = larger;
    }
  }

  /// t and ties from the lane lists, by rounds of "take the largest list head h, and pop it
  /// from every lane whose head is h": a round takes as many keys h as lanes hold it as their
  /// head, so the rounds take the row's keys largest first, with their multiplicity, and stop
  /// within K rounds, once K keys are taken; t is the last round's h, and the keys above it
  /// are those taken before the rounds that took h. The row's K largest keys are among the
  /// lists: a lane's L lists hold its L largest keys, and where L < K the lane saw at most L
  /// keys (small_top_k_lists), and a pop there shifts a key 0 in at the list's end, which is no
  /// larger than any key, so it becomes a head only where every key left is 0, as the row's own
  /// zeros (or the +0 padding) would. Where L = K, a lane is popped at most K - 1 times before
  /// the last round, so its heads never reach the stale entries a pop leaves at the end.
  COMMPRESS_FORCEINLINE void kth() {
    using namespace simd;
    std::uint32_t taken = 0; // keys taken so far
    std::uint32_t above = 0; // of them, those larger than the last round's head
    std::uint32_t previous = ~0u;
    for (;;) {
      // Keys are below 2^31, so signed and unsigned order agree: the signed maximum is the one
      // the plain-C++ layer computes with SSE2.
      const auto head = static_cast<std::uint32_t>(reduce_max_i32(top[0]));
      above = head == previous ? above : taken;
      previous = head;
      if (taken + 1 == K) // a lane at least holds it: without ties, the last round ends here
        break;
      const vm holders = eq_u32(top[0], splat_u32(head));
      taken += count(holders);
      if (taken >= K)
        break;
      for (unsigned j = 0; j + 1 < L; ++j)
        top[j] = select(holders, top[j + 1], top[j]);
      if constexpr (L < K)
        top[L - 1] = clear(holders, top[L - 1]);
    }
    t = previous;
    ties = K - above;
  }

  /// Pass 2 when exactly K keys are >= t, the usual case: one compare per vector. The indices
  /// of keys >= t go to found[0..K], the surplus all to found[K]; returns how many there are,
  /// and the caller takes found[0..K) when that is K.
  COMMPRESS_FORCEINLINE unsigned at_least(simd::vu v, bool zero_nonfinite, std::uint64_t at,
                                          bool last, std::uint32_t valid, std::uint32_t* found,
                                          unsigned n) {
    using namespace simd;
    vm nf;
    const vu key = key_of(v, zero_nonfinite, nf);
    // key >= t as key > t - 1, signed: for t = 0, t - 1 is -1, below every key.
    word |= std::uint64_t{mask_bits(gt_i32(key, splat_u32(t - 1u))) & valid} << (at % 64);
    if ((at + lanes) % 64 == 0 || last) {
      const auto base = static_cast<std::uint32_t>(at - at % 64);
      for (; word != 0; word &= word - 1, ++n)
        found[n < K ? n : K] = base + static_cast<std::uint32_t>(std::countr_zero(word));
    }
    return n;
  }

  /// Pass 2 on the vector of elements [at, at + lanes), of which the `valid` lanes are in the
  /// row: keep every key > t and the first `ties` keys == t; the indices of each 64 elements
  /// come out of one word, in increasing order.
  COMMPRESS_FORCEINLINE void keep(simd::vu v, bool zero_nonfinite, std::uint64_t at, bool last,
                                  std::uint32_t valid, std::uint32_t* index) {
    using namespace simd;
    vm nf;
    const vu key = key_of(v, zero_nonfinite, nf);
    std::uint32_t kept = mask_bits(gt_i32(key, splat_u32(t))) & valid;
    std::uint32_t eq = mask_bits(eq_u32(key, splat_u32(t))) & valid;
    if ((eq & (eq - 1)) == 0) { // at most one key == t here: the usual case, without a branch
      const std::uint32_t take = ties != 0 ? eq : 0u;
      kept |= take;
      ties -= take != 0 ? 1u : 0u;
    } else {
      for (; eq != 0 && ties != 0; eq &= eq - 1, --ties)
        kept |= eq & (0u - eq);
    }
    word |= std::uint64_t{kept} << (at % 64);
    if ((at + lanes) % 64 == 0 || last) {
      const auto base = static_cast<std::uint32_t>(at - at % 64);
      for (; word != 0; word &= word - 1)
        index[m++] = base + static_cast<std::uint32_t>(std::countr_zero(word));
    }
  }
};

/// Exact top-K of one fp32 row of d elements (1 <= K <= d, d < 2^32) for small K, as rows of a
/// chunked top-k (2 of every 64) are: the general method's key array, std::nth_element and
/// per-element callbacks cost far more than the row's one read (bench/README.md, "A
/// selection for small k"). Two vector passes over the row:
/// 1. every lane keeps the L largest keys it sees (|x| bits, screened by the non-finite policy),
///    sorted, by a compare-exchange chain of vector max/min, where L is K or at least the keys
///    a lane sees (small_top_k_lists); the row's K largest keys, with their multiplicity, are
///    among those lane lists, so at most K rounds of "take the largest list head, pop it from
///    the lanes that hold it" give the K-th largest key t and how many keys exceed it. The
///    lists start at key 0 and the vector past the row's end is padded with +0: keys no larger
///    than t, which change neither t (there are K real keys >= t) nor the count above it.
/// 2. keep every key > t and the first K - (keys > t) keys == t by index: the tie rule of
///    compress/top_k.hpp, as select_row applies it, so the same set; the kept bits of up to 64
///    elements are gathered into one word before the indices come out of it in increasing order.
///    With small_top_k_one_compare, a cheaper pass runs first that collects the keys >= t and
///    stands when there are exactly K of them, which are then the kept ones.
/// Writes the kept indices, increasing, to index[0..K) and their screened fp32 bits (NaN/Inf as
/// +0 under zero_nonfinite) to bits[0..K); returns the row's NaN/Inf count.
template <unsigned K, unsigned L>
inline std::size_t top_k_small_fixed(const float* COMMPRESS_RESTRICT x, std::uint64_t d,
                                     bool zero_nonfinite, std::uint32_t* COMMPRESS_RESTRICT index,
                                     std::uint32_t* COMMPRESS_RESTRICT bits) {
  static_assert(K >= 1 && K <= small_top_k_max && L >= 1 && L <= K);
  using namespace simd;
  const std::uint64_t full = d - d % lanes; // elements in whole vectors
  float tail[lanes] = {};                   // the rest, padded with +0
  std::memcpy(tail, x + full, 4 * (d - full));
  small_top_k<K, L> s;
  for (unsigned j = 0; j < L; ++j)
    s.top[j] = splat_u32(0);
  s.nonfinite = splat_u32(0);
  for (std::uint64_t at = 0; at < full; at += lanes)
    s.insert(load_u32(x + at), zero_nonfinite);
  if (full < d)
    s.insert(load_u32(tail), zero_nonfinite);
  s.kth();
  const std::uint32_t all = (std::uint32_t{1} << (lanes - 1) << 1) - 1u;
  const std::uint32_t rest = (1u << (d - full)) - 1u;
  bool done = false;
  if constexpr (small_top_k_one_compare) {
    std::uint32_t found[K + 1];
    unsigned n = 0;
    s.word = 0;
    for (std::uint64_t at = 0; at < full; at += lanes)
      n = s.at_least(load_u32(x + at), zero_nonfinite, at, at + lanes == d, all, found, n);
    if (full < d)
      n = s.at_least(load_u32(tail), zero_nonfinite, full, true, rest, found, n);
    done = n == K;
    if (done)
      std::memcpy(index, found, 4 * K);
  }
  if (!done) { // more keys equal t than are kept (or no one-compare pass): the lowest-indexed
    s.word = 0;
    s.m = 0;
    for (std::uint64_t at = 0; at < full; at += lanes)
      s.keep(load_u32(x + at), zero_nonfinite, at, at + lanes == d, all, index);
    if (full < d)
      s.keep(load_u32(tail), zero_nonfinite, full, true, rest, index);
  }
  for (unsigned j = 0; j < K; ++j) {
    std::uint32_t u;
    std::memcpy(&u, x + index[j], 4);
    bits[j] = zero_nonfinite && (u & 0x7fffffffu) >= 0x7f800000u ? 0u : u;
  }
  return static_cast<std::size_t>(reduce_add_u32(s.nonfinite));
}

/// top_k_small_fixed for a run-time k, 1 <= k <= min(d, small_top_k_max), with
/// small_top_k_lists(d, k) lists per lane.
inline std::size_t top_k_small(const float* COMMPRESS_RESTRICT x, std::uint64_t d, std::uint64_t k,
                               bool zero_nonfinite, std::uint32_t* COMMPRESS_RESTRICT index,
                               std::uint32_t* COMMPRESS_RESTRICT bits) {
  static_assert(small_top_k_max == 8, "one case per k");
  const bool short_row = small_top_k_lists(d, k) < k;
  switch (k) {
  case 1:
    return top_k_small_fixed<1, 1>(x, d, zero_nonfinite, index, bits);
  case 2:
    return top_k_small_fixed<2, 2>(x, d, zero_nonfinite, index, bits);
  case 3:
    return top_k_small_fixed<3, 3>(x, d, zero_nonfinite, index, bits);
  case 4:
    return top_k_small_fixed<4, 4>(x, d, zero_nonfinite, index, bits);
  case 5:
    return short_row ? top_k_small_fixed<5, 4>(x, d, zero_nonfinite, index, bits)
                     : top_k_small_fixed<5, 5>(x, d, zero_nonfinite, index, bits);
  case 6:
    return short_row ? top_k_small_fixed<6, 4>(x, d, zero_nonfinite, index, bits)
                     : top_k_small_fixed<6, 6>(x, d, zero_nonfinite, index, bits);
  case 7:
    return short_row ? top_k_small_fixed<7, 4>(x, d, zero_nonfinite, index, bits)
                     : top_k_small_fixed<7, 7>(x, d, zero_nonfinite, index, bits);
  default:
    return short_row ? top_k_small_fixed<8, 4>(x, d, zero_nonfinite, index, bits)
                     : top_k_small_fixed<8, 8>(x, d, zero_nonfinite, index, bits);
  }
}

} // namespace commpress::cpu::detail
