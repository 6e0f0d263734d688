// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the identity codec.

#include <cstddef>
#include <span>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"

namespace commpress::detail {

template <> struct codec_impl<identity, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl).
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;

  static std::uint64_t workspace_bytes(const identity&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const identity&, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
      cpu::detail::store_word<float>(body + 4 * i, screen(to_float(in[i]), ctx.on_nonfinite, bad));
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const identity&, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = from_float<T>(cpu::detail::load_word<float>(body + 4 * i));
  }

  static void accumulate_body(const cpu::seq_t&, const identity&, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    for (std::size_t i = 0; i < acc.size(); ++i)
      acc[i] = add_rn(acc[i], mul_rn(weight, cpu::detail::load_word<float>(body + 4 * i)));
  }

  static std::size_t roundtrip(const cpu::seq_t&, const identity&, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    std::size_t bad = 0;
    for (float& v : x)
      v = screen(v, ctx.on_nonfinite, bad);
    return bad;
  }
};

} // namespace commpress::detail
