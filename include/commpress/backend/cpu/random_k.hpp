// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the random-k codec.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/random_k.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/rng.hpp"

namespace commpress::detail {

template <> struct codec_impl<random_k, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl).
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;

  static std::uint64_t workspace_bytes(const random_k&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const random_k& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    std::size_t counted = 0; // the kept elements are counted with all the others below
    for_each_stratum(c, in.size(), ctx.key(), ctx.step,
                     [&](std::uint64_t j, std::uint64_t, std::uint64_t, std::uint64_t i) {
                       const float v = screen(to_float(in[i]), ctx.on_nonfinite, counted);
                       store_value(body + j * c.value_bytes(), c.value_bytes(), c.encode_value(v));
                     });
    std::size_t bad = 0;
    for (const T& v : in)
      bad += is_finite(to_float(v)) ? 0u : 1u;
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const random_k& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    std::fill(out.begin(), out.end(), from_float<T>(0.0f));
    for_each_stratum(c, out.size(), make_rng_key(h.seed, h.tensor_id), h.step,
                     [&](std::uint64_t j, std::uint64_t, std::uint64_t size, std::uint64_t i) {
                       out[i] = from_float<T>(c.decode_kept(
                           load_value(body + j * c.value_bytes(), c.value_bytes()), size));
                     });
  }

  static void accumulate_body(const cpu::seq_t&, const random_k& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    for_each_stratum(c, acc.size(), make_rng_key(h.seed, h.tensor_id), h.step,
                     [&](std::uint64_t j, std::uint64_t, std::uint64_t size, std::uint64_t i) {
                       const float v = c.decode_kept(
                           load_value(body + j * c.value_bytes(), c.value_bytes()), size);
                       acc[i] = add_rn(acc[i], mul_rn(weight, v));
                     });
  }

  /// In place, stratum by stratum: the kept element is read before its stratum is zeroed.
  static std::size_t roundtrip(const cpu::seq_t&, const random_k& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    std::size_t bad = 0;
    for (const float v : x)
      bad += is_finite(v) ? 0u : 1u;
    if (c.kept(x.size()) == 0)
      std::fill(x.begin(), x.end(), 0.0f);
    std::size_t counted = 0;
    for_each_stratum(c, x.size(), ctx.key(), ctx.step,
                     [&](std::uint64_t, std::uint64_t start, std::uint64_t size, std::uint64_t i) {
                       const float v = screen(x[i], ctx.on_nonfinite, counted);
                       std::fill(x.begin() + static_cast<std::ptrdiff_t>(start),
                                 x.begin() + static_cast<std::ptrdiff_t>(start + size), 0.0f);
                       x[i] = c.decode_kept(c.encode_value(v), size);
                     });
    return bad;
  }

private:
  /// Calls visit(j, start, size, kept index) for every stratum j of the n elements.
  template <class Visit>
  static void for_each_stratum(const random_k& c, std::uint64_t n, rng_key key, std::uint64_t step,
                               Visit&& visit) {
    const std::uint64_t k = c.kept(n);
    std::uint64_t start = 0;
    for (std::uint64_t j = 0; j < k; ++j) {
      const std::uint64_t end = random_k::stratum_start(j + 1, n, k);
      visit(j, start, end - start, random_k::pick(start, end - start, random_u32(key, step, j)));
      start = end;
    }
  }

  static void store_value(unsigned char* p, std::uint64_t vb, std::uint32_t code) {
    if (vb == 4) {
      cpu::detail::store_word<std::uint32_t>(p, code);
    } else {
      cpu::detail::store_word<std::uint16_t>(p, static_cast<std::uint16_t>(code));
    }
  }
  static std::uint32_t load_value(const unsigned char* p, std::uint64_t vb) {
    return vb == 4 ? cpu::detail::load_word<std::uint32_t>(p)
                   : cpu::detail::load_word<std::uint16_t>(p);
  }
};

} // namespace commpress::detail
