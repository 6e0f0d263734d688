// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The passes of the sign codec over one group: its sign bits and its canonical sum, and the
/// values decoded from its bits.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"

namespace commpress::cpu::detail {

/// One pass of the sign codec over a group of m elements (m > 0) read as fp32: writes the m
/// sign bits (x < 0 after screening, packed LSB first from `bits`, whose first element is bit
/// `bit_offset` of bits[0], 0 to 7: the bits below it, the previous group's, are kept; bits
/// after the last element's, in its byte, are written 0) and returns the canonical_chunked_sum
/// (core/canonical_sum.hpp) of the terms |x| (Rms: x * x, exact in double), in exactly that order:
/// 32 double lanes per chunk of canonical_chunk terms, lane j taking the terms i % 32 == j in
/// increasing i, a fixed tree over the lanes, and the same over the chunk sums. Zero: NaN/Inf count
/// as 0 (nonfinite_policy::zero_and_count). Adds the group's NaN/Inf count to `bad`. prefetch(i)
/// once per 16 elements (an fp32 stream: for fp32 elements only). 16-bit elements are widened 32 at
/// a time into a buffer on the stack.
template <bool Rms, bool Zero, element T>
double sign_group(const T* COMMPRESS_RESTRICT x, std::uint64_t m,
                  unsigned char* COMMPRESS_RESTRICT bits, unsigned bit_offset, std::size_t& bad,
                  prefetch_stream prefetch = {}) {
  // The bits go out through `carry`: the bits of the byte being written that are already known
  // (below bit_offset at first), as a whole number of bytes per step. A canonical chunk is a
  // whole number of bytes, so each chunk's bits start at bit_offset too.
  static_assert(canonical_chunk % 32 == 0);
  std::uint64_t carry = bit_offset != 0 ? bits[0] & ((1u << bit_offset) - 1u) : 0u;
  double outer[32] = {};
  std::uint64_t chunks = 0;
  std::uint32_t nonfinite = 0;
  for (std::uint64_t first = 0; first < m; first += canonical_chunk, ++chunks) {
    const std::uint64_t len = m - first < canonical_chunk ? m - first : canonical_chunk;
    const T* p = x + first;
    unsigned char* out = bits + first / 8;
    double lane[32] = {};
    std::uint64_t i = 0;
    std::uint32_t nf_lanes[32] = {};
    for (; i + 32 <= len; i += 32) {
      prefetch(first + i);
      prefetch(first + i + 16);
      const float* as_fp32; // the 32 elements
      alignas(64) float widened[std::same_as<T, float> ? 1 : 32];
      if constexpr (std::same_as<T, float>) {
        as_fp32 = p + i;
      } else {
        for (std::size_t q = 0; q < 32; q += simd::lanes)
          simd::store(widened + q, load_lanes(p + i + q));
        as_fp32 = widened;
      }
      alignas(64) float v[32];
      for (unsigned j = 0; j < 32; ++j) {
        std::uint32_t u;
        std::memcpy(&u, as_fp32 + j, 4);
        const std::uint32_t nf = (u & 0x7fffffffu) >= 0x7f800000u ? 1u : 0u;
        nf_lanes[j] += nf;
        v[j] = Zero && nf != 0 ? 0.0f : as_fp32[j];
      }
      for (unsigned j = 0; j < 32; ++j) {
        const double t = static_cast<double>(v[j]);
        lane[j] += Rms ? t * t : static_cast<double>(commpress::detail::abs(v[j]));
      }
      // The 32 bits x < 0 (so -0 and NaN give 0), least significant first.
      std::uint32_t word = 0;
      for (std::size_t q = 0; q < 32; q += simd::lanes)
        word |= simd::mask_bits(simd::lt(simd::load(v + q), simd::splat(0.0f))) << q;
      const std::uint64_t placed = carry | std::uint64_t{word} << bit_offset;
      std::memcpy(out + i / 8, &placed, 4); // little-endian host (element_io.hpp)
      carry = placed >> 32;
    }
    for (std::uint32_t c : nf_lanes)
      nonfinite += c;
    for (; i < len; i += 8) { // fewer than 32 left: the same terms, 8 (or fewer) at a time
      const unsigned cnt = len - i < 8 ? static_cast<unsigned>(len - i) : 8u;
      unsigned byte = 0;
      for (unsigned q = 0; q < cnt; ++q) {
        float v = to_float(p[i + q]);
        const bool nf = !commpress::detail::is_finite(v);
        nonfinite += nf ? 1u : 0u;
        if (Zero && nf)
          v = 0.0f;
        const double t = static_cast<double>(v);
        lane[(i + q) % 32] += Rms ? t * t : static_cast<double>(commpress::detail::abs(v));
        byte |= (v < 0.0f ? 1u : 0u) << q;
      }
      const std::uint64_t placed = carry | std::uint64_t{byte} << bit_offset;
      out[i / 8] = static_cast<unsigned char>(placed);
      carry = placed >> 8;
    }
    outer[chunks % 32] += commpress::detail::fold_lanes(lane);
  }
  if ((bit_offset + m + 7) / 8 > (m + 7) / 8) // the last bits spill into one more byte
    bits[(m + 7) / 8] = static_cast<unsigned char>(carry);
  bad += nonfinite;
  return commpress::detail::fold_lanes(outer);
}

/// The values of the elements [first, last) of one group, bit i of the stream `bits` (LSB
/// first) standing for element i: the bits of `positive` with `flip` xored in where the bit is
/// 1 (sign::decode_value of either bit, in T's encoding: fp32 bits, or the 16-bit code of
/// from_float<T>). Into out[0, last - first), or, Accumulate (fp32 only), out[j] =
/// add_rn(out[j], mul_rn(weight, value)) (a NaN product leaves a NaN sum, so one
/// canonicalisation gives those bits).
template <bool Accumulate, element T>
inline void sign_values(const unsigned char* COMMPRESS_RESTRICT bits, std::uint64_t first,
                        std::uint64_t last, std::uint32_t positive, std::uint32_t flip,
                        float weight, T* COMMPRESS_RESTRICT out) {
  using namespace simd;
  static_assert(lanes % 8 == 0 && lanes <= 32);
  constexpr bool fp32 = std::same_as<T, float>;
  static_assert(fp32 || !Accumulate);
  const auto put = [&](std::uint64_t i) {
    const std::uint32_t bit = (bits[i >> 3] >> (i & 7u)) & 1u;
    const std::uint32_t word = positive ^ (flip & (0u - bit));
    T& o = out[i - first];
    if constexpr (fp32) {
      const float v = commpress::detail::bits_to_float(word);
      o = Accumulate ? commpress::detail::add_rn(o, commpress::detail::mul_rn(weight, v)) : v;
    } else {
      o = T{static_cast<std::uint16_t>(word)};
    }
  };
  std::uint64_t i = first;
  for (; i < last && i % 8 != 0; ++i)
    put(i);
  const vu vpositive = splat_u32(positive);
  const vu vflip = splat_u32(flip);
  const vf vweight = splat(weight);
  T* o = out + (i - first);
  for (; i + lanes <= last; i += lanes, o += lanes) {
    std::uint32_t b = 0;
    std::memcpy(&b, bits + (i >> 3), lanes / 8);
    // The words are not named: with the portable layer, GCC then copied them through the
    // stack twice more (bench/README.md, "top_k and sign's decode with 16-bit tensors").
    if constexpr (fp32) {
      vf v = from_bits(xor_u32(vpositive, select(mask_from_bits(b), vflip, splat_u32(0))));
      if constexpr (Accumulate)
        v = canonical_nan(add(load(o), mul(vweight, v)));
      store(o, v);
    } else {
      store(o, narrow_u16(xor_u32(vpositive, select(mask_from_bits(b), vflip, splat_u32(0)))));
    }
  }
  for (; i < last; ++i)
    put(i);
}

} // namespace commpress::cpu::detail
