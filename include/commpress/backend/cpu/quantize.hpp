// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the quantize codec: the group pipeline of
/// detail/quantize_groups.hpp over the whole tensor. Nothing needs a workspace: column
/// statistics accumulate in a tile of columns on the stack.

#include <cstddef>
#include <cstdint>
#include <span>

#include "commpress/backend/cpu/detail/quantize_groups.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/format/body_checksum.hpp"

namespace commpress::detail {

template <> struct codec_impl<quantize, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): the codes are
  /// hashed while they are written (column scales: once all are)
  static constexpr bool hashes_body = true;
  static constexpr bool custom_roundtrip = true;

  static std::uint64_t workspace_bytes(const quantize&, std::uint64_t) { return 0; }

  /// The records come first and are final only at the end; the codes are written in order, but
  /// for column scales, whose codes are written a tile of columns at a time and announced at the
  /// end.
  static std::size_t ordered_body_from(const quantize& c, std::uint64_t n) {
    return static_cast<std::size_t>(c.n_groups(n) * c.record_bytes());
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const quantize& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>,
                                 format::body_checksum& sum) {
    return cpu::detail::quantize_groups::encode(c, ctx, in, body, &sum, 0, c.n_groups(in.size()));
  }
  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const quantize& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    return cpu::detail::quantize_groups::encode(c, ctx, in, body, nullptr, 0,
                                                c.n_groups(in.size()));
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const quantize& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    cpu::detail::quantize_groups::decode<false>(c, out.size(), body, out.data(), 1.0f, 0,
                                                out.size());
  }

  static void accumulate_body(const cpu::seq_t&, const quantize& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    cpu::detail::quantize_groups::decode<true>(c, acc.size(), body, acc.data(), weight, 0,
                                               acc.size());
  }

  static std::size_t roundtrip(const cpu::seq_t&, const quantize& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    return cpu::detail::quantize_groups::roundtrip(c, ctx, x);
  }
};

} // namespace commpress::detail

namespace commpress::cpu::detail {

/// The values of elements [first, last) of an n-element quantize body at dst[0, last - first):
/// what a transform adapter (backend/cpu/rotated.hpp) takes back window by window, and top_k,
/// random_k and their all-reduce take back of their quantized values run by run.
inline void decode_values(const quantize& q, std::uint64_t n, const unsigned char* body,
                          std::uint64_t first, std::uint64_t last, float* dst) {
  const quantize_groups::config c(q, nonfinite_policy::propagate, n);
  quantize_groups::decode_values(c, q.granularity == scale_granularity::column, body, first, last,
                                 dst);
}

} // namespace commpress::cpu::detail
