// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the sign codec.
///
/// fp32 groups whose bits start on a byte (block % 8 == 0, or one group) run in one pass
/// (detail/sign_kernels.hpp, sign_group): the bits do not depend on the scale, so the scale's
/// canonical sum and the bits come from the same read of x.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/sign_kernels.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/format/bit_packing.hpp"

namespace commpress::detail {

template <> struct codec_impl<sign, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl).
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;

  static std::uint64_t workspace_bytes(const sign&, std::uint64_t) { return 0; }

  /// Scale of a group of m elements; load(i) returns element i of the group, already screened
  /// by the non-finite policy.
  template <class Load> static float group_scale(const sign& c, std::uint64_t m, Load&& load) {
    return c.scale_from_sum(
        canonical_chunked_sum(m, [&](std::uint64_t i) { return c.scale_term(load(i)); }), m);
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const sign& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    const std::uint64_t n = in.size();
    const std::uint64_t len = c.group_length(n);
    const std::uint64_t groups = c.groups(n);
    std::size_t bad = 0;
    if constexpr (std::is_same_v<T, float>) {
      if (len % 8 == 0 || groups == 1) {
        const bool zero = ctx.on_nonfinite == nonfinite_policy::zero_and_count;
        const bool rms = c.scale == sign_scale::rms;
        for (std::uint64_t g = 0; g < groups; ++g) {
          const std::uint64_t first = g * len;
          const std::uint64_t m = n - first < len ? n - first : len;
          const float* x = in.data() + first;
          unsigned char* bits = body + 4 * groups + first / 8;
          const cpu::detail::prefetch_stream ahead{x, in.data() + n};
          const double sum =
              rms ? (zero ? cpu::detail::sign_group<true, true>(x, m, bits, bad, ahead)
                          : cpu::detail::sign_group<true, false>(x, m, bits, bad, ahead))
                  : (zero ? cpu::detail::sign_group<false, true>(x, m, bits, bad, ahead)
                          : cpu::detail::sign_group<false, false>(x, m, bits, bad, ahead));
          cpu::detail::store_word<float>(body + 4 * g, c.scale_from_sum(sum, m));
        }
        return bad;
      }
    }
    for (std::uint64_t g = 0; g < groups; ++g) {
      const std::uint64_t first = g * len;
      const std::uint64_t m = n - first < len ? n - first : len;
      const float s = group_scale(c, m, [&](std::uint64_t i) {
        return screen(to_float(in[first + i]), ctx.on_nonfinite, bad);
      });
      cpu::detail::store_word<float>(body + 4 * g, s);
    }
    unsigned char* bits = body + 4 * groups;
    std::size_t recount = 0; // already counted above
    for (std::uint64_t first = 0; first < n; first += 8) {
      const unsigned cnt = n - first < 8 ? static_cast<unsigned>(n - first) : 8u;
      std::uint32_t codes[8];
      for (unsigned i = 0; i < cnt; ++i)
        codes[i] = sign::encode_bit(screen(to_float(in[first + i]), ctx.on_nonfinite, recount));
      pack_group(codes, cnt, 1, bits + first / 8);
    }
    return bad;
  }

  /// Calls visit(i, value) for every element, in index order.
  template <class Visit>
  static void for_each_decoded(const sign& c, std::uint64_t n, const unsigned char* body,
                               Visit&& visit) {
    const std::uint64_t len = c.group_length(n);
    const unsigned char* bits = body + 4 * c.groups(n);
    for (std::uint64_t g = 0; g < c.groups(n); ++g) {
      const float s = cpu::detail::load_word<float>(body + 4 * g);
      const std::uint64_t last = n - g * len < len ? n : (g + 1) * len;
      for (std::uint64_t i = g * len; i < last; ++i)
        visit(i, sign::decode_value(unpack_one(bits, i, 1), s));
    }
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const sign& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    for_each_decoded(c, out.size(), body,
                     [&](std::uint64_t i, float v) { out[i] = from_float<T>(v); });
  }

  static void accumulate_body(const cpu::seq_t&, const sign& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    for_each_decoded(c, acc.size(), body,
                     [&](std::uint64_t i, float v) { acc[i] = add_rn(acc[i], mul_rn(weight, v)); });
  }

  /// In place: each group's scale is computed before any of its elements is overwritten, and
  /// groups are disjoint.
  static std::size_t roundtrip(const cpu::seq_t&, const sign& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    const std::uint64_t n = x.size();
    const std::uint64_t len = c.group_length(n);
    std::size_t bad = 0;
    std::size_t recount = 0;
    for (std::uint64_t g = 0; g < c.groups(n); ++g) {
      const std::uint64_t first = g * len;
      const std::uint64_t m = n - first < len ? n - first : len;
      const float s = group_scale(
          c, m, [&](std::uint64_t i) { return screen(x[first + i], ctx.on_nonfinite, bad); });
      for (std::uint64_t i = first; i < first + m; ++i)
        x[i] = sign::decode_value(sign::encode_bit(screen(x[i], ctx.on_nonfinite, recount)), s);
    }
    return bad;
  }
};

} // namespace commpress::detail
