// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the sign codec.
///
/// Encode takes each group in one pass (detail/sign_kernels.hpp, sign_group), for every element
/// type and block length: the bits do not depend on the scale, so the scale's canonical sum and
/// the bits come from the same read of x.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/sign_kernels.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"

namespace commpress::detail {

template <> struct codec_impl<sign, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): roundtrip is
  /// an encode into the workspace and a decode, which take the vector passes.
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = false;

  static std::uint64_t workspace_bytes(const sign&, std::uint64_t) { return 0; }

  /// cpu::detail::sign_group for c's scale and ctx's policy: writes the bits of m elements from
  /// bit `bit_offset` of `bits` and returns the canonical chunked sum of their terms.
  template <element T>
  static double sum_and_bits(const sign& c, const context& ctx, const T* x, std::uint64_t m,
                             unsigned char* bits, unsigned bit_offset, std::size_t& bad,
                             cpu::detail::prefetch_stream ahead = {}) {
    using cpu::detail::sign_group;
    const bool zero = ctx.on_nonfinite == nonfinite_policy::zero_and_count;
    if (c.scale == sign_scale::rms)
      return zero ? sign_group<true, true>(x, m, bits, bit_offset, bad, ahead)
                  : sign_group<true, false>(x, m, bits, bit_offset, bad, ahead);
    return zero ? sign_group<false, true>(x, m, bits, bit_offset, bad, ahead)
                : sign_group<false, false>(x, m, bits, bit_offset, bad, ahead);
  }

  /// Scales and bits of groups [g0, g1), in order: a group that does not start on a byte
  /// continues the previous group's last byte. g0's first element is a multiple of 8, so ranges
  /// of groups encode independently (cpu::par).
  template <element T>
  static std::size_t encode_groups(const sign& c, const context& ctx, std::span<const T> in,
                                   unsigned char* body, std::uint64_t g0, std::uint64_t g1) {
    const std::uint64_t n = in.size();
    const std::uint64_t len = c.group_length(n);
    unsigned char* bits = body + 4 * c.groups(n);
    std::size_t bad = 0;
    for (std::uint64_t g = g0; g < g1; ++g) {
      const std::uint64_t first = g * len;
      const std::uint64_t m = n - first < len ? n - first : len;
      const double sum = sum_and_bits(c, ctx, in.data() + first, m, bits + first / 8,
                                      static_cast<unsigned>(first % 8), bad,
                                      cpu::detail::ahead_of(in.data(), first, n));
      cpu::detail::store_word<float>(body + 4 * g, c.scale_from_sum(sum, m));
    }
    return bad;
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const sign& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    return encode_groups(c, ctx, in, body, 0, c.groups(in.size()));
  }

  /// Decodes the elements [first, last) of an n-element body into out[0, last - first) (T =
  /// float, or any T for decode) or, Accumulate, adds weight times each value to it.
  template <bool Accumulate, element T>
  static void decode_range(const sign& c, std::uint64_t n, const unsigned char* body,
                           std::uint64_t first, std::uint64_t last, T* out, float weight) {
    if (first >= last) // an empty tensor has no group (and a group length of 0)
      return;
    const std::uint64_t len = c.group_length(n);
    const unsigned char* bits = body + 4 * c.groups(n);
    for (std::uint64_t g = first / len; g * len < last; ++g) {
      const float s = cpu::detail::load_word<float>(body + 4 * g);
      // decode_value of either bit: the positive value's bits with `flip` xored in for bit 1
      // (the sign bit, or nothing for a NaN scale, whose two values are one canonical NaN); as
      // codes of T for a 16-bit output.
      std::uint32_t positive = float_to_bits(sign::decode_value(0, s));
      std::uint32_t flip = positive ^ float_to_bits(sign::decode_value(1, s));
      if constexpr (!std::is_same_v<T, float>) {
        const float negative = bits_to_float(positive ^ flip);
        positive = from_float<T>(bits_to_float(positive)).bits;
        flip = positive ^ from_float<T>(negative).bits;
      }
      const std::uint64_t begin = first > g * len ? first : g * len;
      const std::uint64_t end = last < (g + 1) * len ? last : (g + 1) * len;
      cpu::detail::sign_values<Accumulate>(bits, begin, end, positive, flip, weight,
                                           out + (begin - first));
    }
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const sign& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    decode_range<false>(c, out.size(), body, 0, out.size(), out.data(), 1.0f);
  }

  static void accumulate_body(const cpu::seq_t&, const sign& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    decode_range<true>(c, acc.size(), body, 0, acc.size(), acc.data(), weight);
  }
};

} // namespace commpress::detail

namespace commpress::cpu::detail {

/// The values of elements [first, last) of an n-element sign body at dst[0, last - first):
/// what a transform adapter (backend/cpu/rotated.hpp) takes back window by window.
inline void decode_values(const sign& c, std::uint64_t n, const unsigned char* body,
                          std::uint64_t first, std::uint64_t last, float* dst) {
  commpress::detail::codec_impl<sign, seq_t>::decode_range<false>(c, n, body, first, last, dst,
                                                                  1.0f);
}

} // namespace commpress::cpu::detail
