// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the cast codec. fp32 tensors take the vector loops of
/// detail/cast_kernels.hpp (bf16 rounding on integers; fp16 by the hardware conversion where
/// the flags enable it, on integers elsewhere), which write the same codes as the per-element
/// definitions of compress/cast.hpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/detail/cast_kernels.hpp"
#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/cast.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/format/body_checksum.hpp"

namespace commpress::detail {

template <> struct codec_impl<cast, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): the body is hashed
  /// while it is written
  static constexpr bool hashes_body = true;
  static constexpr bool custom_roundtrip = true;

  static std::uint64_t workspace_bytes(const cast&, std::uint64_t) { return 0; }

  /// The body is written front to back.
  static std::size_t ordered_body_from(const cast&, std::uint64_t) { return 0; }

  /// encode_body, hashing the body a slice at a time while the slice is in cache.
  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const cast& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>,
                                 format::body_checksum& sum) {
    constexpr std::size_t slice = format::checksum_chunk_bytes / 2; // elements per chunk
    std::size_t bad = 0;
    std::size_t first = 0;
#if defined(COMMPRESS_CRC32C_STREAMING)
    if constexpr (std::is_same_v<T, float>) {
      // Large outputs stream the whole chunks out and hash them from registers; the last,
      // partial chunk takes the path below.
      if (2 * in.size() >= cpu::detail::streaming_store_min_bytes &&
          reinterpret_cast<std::uintptr_t>(body) % 64 == 0) {
        for (; first + slice <= in.size(); first += slice) {
          commpress::detail::crc32c_streaming crc;
          bad += encode_streamed(c, ctx, in, first, body, crc);
          sum.chunk_hashed(crc.value());
        }
        cpu::simd::store_fence();
      }
    }
#endif
    for (std::size_t i = first; i < in.size(); i += slice) {
      const std::size_t m = std::min(slice, in.size() - i);
      bad += encode_range(c, ctx, in, i, m, body);
      sum.written(2 * (i + m));
    }
    return bad;
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const cast& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    return encode_range(c, ctx, in, 0, in.size(), body);
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const cast& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    if constexpr (std::is_same_v<T, float>) {
      if (c.to == dtype::bf16) {
        cpu::detail::cast_decode<true, false>(body, out.size(), out.data(), 1.0f);
      } else {
        cpu::detail::cast_decode<false, false>(body, out.size(), out.data(), 1.0f);
      }
    } else {
      for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = from_float<T>(c.decode_value(cpu::detail::load_word<std::uint16_t>(body + 2 * i)));
    }
  }

  static void accumulate_body(const cpu::seq_t&, const cast& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    if (c.to == dtype::bf16) {
      cpu::detail::cast_decode<true, true>(body, acc.size(), acc.data(), weight);
    } else {
      cpu::detail::cast_decode<false, true>(body, acc.size(), acc.data(), weight);
    }
  }

  static std::size_t roundtrip(const cpu::seq_t&, const cast& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    std::size_t bad = 0;
    for (float& v : x)
      v = c.decode_value(c.encode_value(screen(v, ctx.on_nonfinite, bad)));
    return bad;
  }

private:
#if defined(COMMPRESS_CRC32C_STREAMING)
  /// The chunk of cast_streamed_elements elements of `in` from `first` into body, streamed.
  static std::size_t encode_streamed(const cast& c, const context& ctx, std::span<const float> in,
                                     std::size_t first, unsigned char* body,
                                     commpress::detail::crc32c_streaming& crc) {
    const float* const x = in.data() + first;
    const cpu::detail::prefetch_stream ahead{x, in.data() + in.size()};
    return with_kernel(c, ctx, [&]<bool Bf16, bool Zero>() {
      return cpu::detail::cast_encode_streamed<Bf16, Zero>(x, body + 2 * first, ahead, crc);
    });
  }
#endif

  /// kernel.template operator()<Bf16, Zero>() for c's code type and ctx's non-finite policy.
  template <class Kernel>
  static std::size_t with_kernel(const cast& c, const context& ctx, Kernel&& kernel) {
    const bool zero = ctx.on_nonfinite == nonfinite_policy::zero_and_count;
    if (c.to == dtype::bf16)
      return zero ? kernel.template operator()<true, true>()
                  : kernel.template operator()<true, false>();
    return zero ? kernel.template operator()<false, true>()
                : kernel.template operator()<false, false>();
  }

  /// Codes of elements [first, first + m) of `in` into body (its element `first` at
  /// body + 2 first); fp32 through the vector kernel, prefetching ahead within `in`.
  template <element T>
  static std::size_t encode_range(const cast& c, const context& ctx, std::span<const T> in,
                                  std::size_t first, std::size_t m, unsigned char* body) {
    unsigned char* const out = body + 2 * first;
    if constexpr (std::is_same_v<T, float>) {
      const float* const x = in.data() + first;
      const cpu::detail::prefetch_stream ahead{x, in.data() + in.size()};
      return with_kernel(c, ctx, [&]<bool Bf16, bool Zero>() {
        return cpu::detail::cast_encode<Bf16, Zero>(x, m, out, ahead);
      });
    } else {
      std::size_t bad = 0;
      for (std::size_t i = 0; i < m; ++i)
        cpu::detail::store_word<std::uint16_t>(
            out + 2 * i, c.encode_value(screen(to_float(in[first + i]), ctx.on_nonfinite, bad)));
      return bad;
    }
  }
};

} // namespace commpress::detail
