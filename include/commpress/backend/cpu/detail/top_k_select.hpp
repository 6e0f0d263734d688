// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Exact top-k of one long fp32 row by a sampled threshold and a radix select (bench/README.md,
/// "exact top-k"), so a row costs about one streaming pass instead of std::nth_element over it.
///
/// Keys are |x| bit patterns (x's bits with the sign cleared) as unsigned integers: for
/// non-negative floats, NaN and Inf included, their order is the magnitude order that
/// compress/top_k.hpp ranks by, and integer keys can be counted by their high bits.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "commpress/core/config.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace commpress::cpu::detail {

/// Rows shorter than this take the nth_element method: sampling does not pay for them.
inline constexpr std::uint64_t sampled_top_k_min_row = 1u << 16;

/// Bits of one radix digit: 2^11 counters (8 KiB) stay in L1, and three digits cover a key.
inline constexpr unsigned radix_select_bits = 11;
inline constexpr std::uint64_t radix_select_bins = std::uint64_t{1} << radix_select_bits;

#if !defined(__AVX512F__) && defined(__AVX2__)
/// For each 8-bit lane mask, the indices of its set lanes in increasing order, one per byte:
/// the vpermd pattern that moves an AVX2 vector's selected lanes to the front (AVX2 has no
/// compress instruction).
inline constexpr auto compress_pattern8 = [] {
  std::uint64_t table[256] = {};
  for (unsigned mask = 0; mask < 256; ++mask)
    for (unsigned lane = 0, n = 0; lane < 8; ++lane)
      if ((mask >> lane & 1u) != 0)
        table[mask] |= std::uint64_t{lane} << (8 * n++);
  return std::to_array(table);
}();

/// v's lanes selected by `mask` (8 bits), moved to the front in order; the rest unspecified.
inline __m256i compress8(unsigned mask, __m256i v) {
  return _mm256_permutevar8x32_epi32(
      v, _mm256_cvtepu8_epi32(
             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&compress_pattern8[mask]))));
}
#endif

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
#if defined(__AVX512F__)
  // Compress in a register and store all 16 lanes: a compressing store to memory is several
  // times slower, and lanes past m are overwritten by the next store or never read.
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i base = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i last = _mm512_set1_epi32(static_cast<int>(span));
  for (; j + 16 <= n; j += 16) {
    const __m512i key = _mm512_and_si512(_mm512_loadu_si512(src + j), abs_mask);
    // Below lo, key - lo wraps to >= 2^31 > span.
    const __mmask16 in = _mm512_cmple_epu32_mask(_mm512_sub_epi32(key, base), last);
    _mm512_storeu_si512(dst + m, _mm512_maskz_compress_epi32(in, key));
    m += static_cast<std::uint64_t>(std::popcount(static_cast<unsigned>(in)));
  }
#endif
  for (; j < n; ++j) {
    const std::uint32_t key = src[j] & 0x7fffffffu;
    dst[m] = key; // branchless: written always, kept if it is in the range
    m += key - lo <= span ? 1u : 0u;
  }
  return m;
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

/// Exact top-k of one fp32 row by a sampled threshold (DGC-style sample):
/// 1. the keys (|x| bits, screened by the non-finite policy) of about d / 1024 sampled elements
///    give two thresholds t0 <= t1, at ranks 3 sigma below and above the k-th;
/// 2. one streaming pass collects the index and (screened) bits of every element whose key is
///    >= t0 into the workspace, and counts the keys > t1;
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
inline sampled_top_k top_k_sampled(const float* COMMPRESS_RESTRICT x, std::uint64_t d,
                                   std::uint64_t k, bool zero_nonfinite, std::uint32_t* ws,
                                   std::size_t& bad, unsigned char* bitmap = nullptr,
                                   unsigned char* values = nullptr) {
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
    std::uint32_t u;
    std::memcpy(&u, x + j * stride + jitter, 4);
    tmp[j] = key_of(u);
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

  // 2. One streaming pass: candidates (index, screened bits) with key >= t0, the keys > t1,
  // and the largest key, which bounds radix_select's first digit.
  const std::uint64_t limit = cap - 16; // room for one unconditional 16-wide store
  std::uint64_t c = 0;
  std::size_t nonfinite = 0;
  std::uint64_t above = 0;
  std::uint32_t top = 0;
  std::uint64_t i = 0;
#if defined(__AVX512F__)
  {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i lo = _mm512_set1_epi32(static_cast<int>(t0));
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(t1));
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i most = _mm512_setzero_si512();
    // Per-lane counts (masked adds): cheaper in the loop than popcounts of the masks, and a
    // lane sees at most d / 16 < 2^32 elements.
    __m512i nonfinite_lanes = _mm512_setzero_si512();
    __m512i above_lanes = _mm512_setzero_si512();
    for (; i + 16 <= d; i += 16) {
      // By hand, 2 KiB ahead: with the candidate stores in the loop, the hardware prefetcher
      // alone left the pass slower (measured in bench/README.md).
      if (i + 512 < d)
        _mm_prefetch(reinterpret_cast<const char*>(x + i + 512), _MM_HINT_T0);
      __m512i v = _mm512_loadu_si512(x + i);
      __m512i key = _mm512_and_si512(v, abs_mask);
      const __mmask16 nf = _mm512_cmpge_epu32_mask(key, inf);
      nonfinite_lanes = _mm512_mask_add_epi32(nonfinite_lanes, nf, nonfinite_lanes, one);
      if (zero_nonfinite) {
        v = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nf), v);
        key = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nf), key);
      }
      // The masked form: GCC 12 warns that the unmasked one reads an undefined source.
      most = _mm512_mask_max_epu32(most, 0xffff, most, key);
      above_lanes =
          _mm512_mask_add_epi32(above_lanes, _mm512_cmpgt_epu32_mask(key, hi), above_lanes, one);
      // Stored whether or not any lane hit: at k = 1% and 10%, 15% resp. 82% of the blocks
      // hit, at random, and the mispredicted branch cost more than the stores.
      const __mmask16 hit = _mm512_cmpge_epu32_mask(key, lo);
      if (bitmap != nullptr) // i is a multiple of 16: two whole bytes, element i in bit 0
        std::memcpy(bitmap + i / 8, &hit, 2);
      _mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(hit, index));
      _mm512_storeu_si512(val + c, _mm512_maskz_compress_epi32(hit, v));
      c += static_cast<std::uint64_t>(__builtin_popcount(hit));
      if (c > limit)
        return declined;
      index = _mm512_add_epi32(index, sixteen);
    }
    alignas(64) std::uint32_t lanes[3][16];
    _mm512_store_si512(lanes[0], nonfinite_lanes);
    _mm512_store_si512(lanes[1], above_lanes);
    _mm512_store_si512(lanes[2], most);
    for (unsigned l = 0; l < 16; ++l) {
      nonfinite += lanes[0][l];
      above += lanes[1][l];
      top = std::max(top, lanes[2][l]);
    }
  }
#elif defined(__AVX2__)
  {
    // The pass above in 8-lane halves. Keys are below 2^31, so signed compares order them;
    // key >= t0 is key > t0 - 1 (t0 > 0 here), a lane count is a sum of compare masks (-1).
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i finite_max = _mm256_set1_epi32(0x7f7fffff);
    const __m256i lo = _mm256_set1_epi32(static_cast<int>(t0 - 1));
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(t1));
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i most = _mm256_setzero_si256();
    __m256i nonfinite_lanes = _mm256_setzero_si256();
    __m256i above_lanes = _mm256_setzero_si256();
    const auto eight_lanes = [&](std::uint64_t at) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + at));
      __m256i key = _mm256_and_si256(v, abs_mask);
      const __m256i nf = _mm256_cmpgt_epi32(key, finite_max);
      nonfinite_lanes = _mm256_sub_epi32(nonfinite_lanes, nf);
      if (zero_nonfinite) // key 0 < t0: no candidate, so v needs no zeroing
        key = _mm256_andnot_si256(nf, key);
      most = _mm256_max_epi32(most, key);
      above_lanes = _mm256_sub_epi32(above_lanes, _mm256_cmpgt_epi32(key, hi));
      const auto hit = static_cast<unsigned>(
          _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, lo))));
      if (bitmap != nullptr) // at is a multiple of 8: one whole byte, element at in bit 0
        bitmap[at / 8] = static_cast<unsigned char>(hit);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + c), compress8(hit, index));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(val + c), compress8(hit, v));
      c += static_cast<std::uint64_t>(std::popcount(hit));
      index = _mm256_add_epi32(index, eight);
    };
    for (; i + 16 <= d; i += 16) {
      if (i + 512 < d)
        _mm_prefetch(reinterpret_cast<const char*>(x + i + 512), _MM_HINT_T0);
      eight_lanes(i);
      eight_lanes(i + 8);
      if (c > limit)
        return declined;
    }
    alignas(32) std::uint32_t lanes[3][8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[0]), nonfinite_lanes);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[1]), above_lanes);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[2]), most);
    for (unsigned l = 0; l < 8; ++l) {
      nonfinite += lanes[0][l];
      above += lanes[1][l];
      top = std::max(top, lanes[2][l]);
    }
  }
#endif
  if (bitmap != nullptr) // the bytes the loop below sets bit by bit (i is a multiple of 16)
    std::memset(bitmap + i / 8, 0, (d + 7) / 8 - i / 8);
  for (; i < d; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, 4);
    const bool nf = (u & 0x7fffffffu) >= 0x7f800000u;
    nonfinite += nf ? 1u : 0u;
    if (zero_nonfinite && nf)
      u = 0;
    const std::uint32_t key = u & 0x7fffffffu;
    top = key > top ? key : top;
    above += key > t1 ? 1u : 0u;
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
#if defined(__AVX512F__)
  {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i kth_vec = _mm512_set1_epi32(static_cast<int>(t));
    for (; j + 16 <= c; j += 16) {
      const __m512i v = _mm512_loadu_si512(val + j);
      const __m512i key = _mm512_and_si512(v, abs_mask);
      auto keep = static_cast<unsigned>(_mm512_cmpgt_epu32_mask(key, kth_vec));
      // Ties are rare: keep the first `ties` lanes equal to t (lanes are in index order).
      for (auto eq = static_cast<unsigned>(_mm512_cmpeq_epi32_mask(key, kth_vec));
           eq != 0 && ties != 0; eq &= eq - 1, --ties)
        keep |= eq & (0u - eq);
      for (unsigned rejected = ~keep & 0xffffu; rejected != 0; rejected &= rejected - 1)
        unmark(idx[j + static_cast<unsigned>(std::countr_zero(rejected))]);
      // All 16 lanes stored (see keys_in_range): m <= j, so only lanes already read are hit.
      // The caller's `values` get the kept lanes alone: nothing past its 4 k bytes.
      const auto mask = static_cast<__mmask16>(keep);
      const auto kept = static_cast<unsigned>(std::popcount(keep));
      _mm512_storeu_si512(idx + m, _mm512_maskz_compress_epi32(mask, _mm512_loadu_si512(idx + j)));
      if (values != nullptr)
        _mm512_mask_storeu_epi32(values + 4 * m, static_cast<__mmask16>((1u << kept) - 1u),
                                 _mm512_maskz_compress_epi32(mask, v));
      else
        _mm512_storeu_si512(val + m, _mm512_maskz_compress_epi32(mask, v));
      m += kept;
    }
  }
#endif
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

} // namespace commpress::cpu::detail
