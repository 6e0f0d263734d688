// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the random-k codec.
///
/// Quantized values: the strata's kept values go to the workspace as fp32, then the quantize
/// group pipeline (detail/quantize_groups.hpp) encodes them as one dense tensor of k elements,
/// its stochastic uniforms offset by random_k::rounding_stream_offset; decoding reads them back
/// in runs of value_run through cpu::detail::decode_values. The roundtrip encodes into the
/// workspace and decodes, so it is decode(encode(x)) by construction.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/compress/random_k.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/rng.hpp"

namespace commpress::detail {

template <> struct codec_impl<random_k, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl).
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;

  /// None, or with quantized values every kept value as fp32 (plus 3 bytes to align it inside
  /// any span) and, for the roundtrip, one body.
  static std::uint64_t workspace_bytes(const random_k& c, std::uint64_t n) {
    return c.quantized() ? 4 * c.kept(n) + 3 + c.body_bytes(n) : 0;
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const random_k& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    std::size_t counted = 0; // the kept elements are counted with all the others below
    float* const staged = c.quantized() ? staged_values(ws) : nullptr;
    for_each_stratum(c, in.size(), ctx.key(), ctx.step,
                     [&](std::uint64_t j, std::uint64_t, std::uint64_t, std::uint64_t i) {
                       const float v = screen(to_float(in[i]), ctx.on_nonfinite, counted);
                       if (staged != nullptr) {
                         staged[j] = v;
                       } else {
                         store_value(body + j * c.value_bytes(), c.value_bytes(),
                                     c.encode_value(v));
                       }
                     });
    if (staged != nullptr)
      quantize_kept(c, ctx, staged, c.kept(in.size()), body);
    std::size_t bad = 0;
    for (const T& v : in)
      bad += is_finite(to_float(v)) ? 0u : 1u;
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const random_k& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    std::fill(out.begin(), out.end(), from_float<T>(0.0f));
    for_each_kept(c, out.size(), make_rng_key(h.seed, h.tensor_id), h.step, body, 0,
                  c.kept(out.size()),
                  [&](std::uint64_t, std::uint64_t i, float v) { out[i] = from_float<T>(v); });
  }

  static void accumulate_body(const cpu::seq_t&, const random_k& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    for_each_kept(c, acc.size(), make_rng_key(h.seed, h.tensor_id), h.step, body, 0,
                  c.kept(acc.size()), [&](std::uint64_t, std::uint64_t i, float v) {
                    acc[i] = add_rn(acc[i], mul_rn(weight, v));
                  });
  }

  /// In place, stratum by stratum: the kept element is read before its stratum is zeroed.
  /// Quantized values: encode into the workspace's body, then decode.
  static std::size_t roundtrip(const cpu::seq_t& p, const random_k& c, const context& ctx,
                               std::span<float> x, std::span<std::byte> ws) {
    if (c.quantized()) {
      const std::uint64_t n = x.size();
      auto* body =
          reinterpret_cast<unsigned char*>(ws.data() + workspace_bytes(c, n) - c.body_bytes(n));
      const std::size_t bad = encode_body(p, c, ctx, std::span<const float>(x), body, ws);
      payload_header h;
      h.seed = ctx.seed;
      h.step = ctx.step;
      h.tensor_id = ctx.tensor_id;
      decode_body(p, c, h, body, x);
      return bad;
    }
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

  /// The fp32 staging array of quantized kept values at the start of the workspace.
  static float* staged_values(std::span<std::byte> ws) {
    const auto misalign = reinterpret_cast<std::uintptr_t>(ws.data()) % 4;
    return reinterpret_cast<float*>(ws.data() + (4 - misalign) % 4);
  }

  /// The k staged kept values as one quantize body. Its NaN/Inf count is not taken: the
  /// screened kept values were counted with the whole input.
  static void quantize_kept(const random_k& c, const context& ctx, const float* staged,
                            std::uint64_t k, unsigned char* body) {
    cpu::detail::quantize_groups::encode(c.value_quantizer, ctx, std::span<const float>(staged, k),
                                         body, nullptr, 0, c.value_quantizer.n_groups(k),
                                         random_k::rounding_stream_offset);
  }

  /// Calls visit(j, kept index, decoded value) for the strata [j0, j1) of k = c.kept(n), the
  /// value scaled as the configuration says (random_k::decode_kept, random_k::scale_kept).
  template <class Visit>
  static void for_each_kept(const random_k& c, std::uint64_t n, rng_key key, std::uint64_t step,
                            const unsigned char* body, std::uint64_t j0, std::uint64_t j1,
                            Visit&& visit) {
    const std::uint64_t k = c.kept(n);
    if (!c.quantized()) {
      for_strata(
          c, n, key, step, j0, j1,
          [&](std::uint64_t j, std::uint64_t, std::uint64_t size, std::uint64_t i) {
            visit(j, i,
                  c.decode_kept(load_value(body + j * c.value_bytes(), c.value_bytes()), size));
          });
      return;
    }
    float run[value_run]; // kept values [run_first, run_last)
    std::uint64_t run_first = 0, run_last = 0;
    for_strata(c, n, key, step, j0, j1,
               [&](std::uint64_t j, std::uint64_t, std::uint64_t size, std::uint64_t i) {
                 if (j >= run_last) {
                   run_first = j;
                   run_last = std::min(j + value_run, j1);
                   cpu::detail::decode_values(c.value_quantizer, k, body, run_first, run_last, run);
                 }
                 visit(j, i, c.scale_kept(run[j - run_first], size));
               });
  }

  /// Calls visit(j, start, size, kept index) for the strata [j0, j1) of k = c.kept(n).
  template <class Visit>
  static void for_strata(const random_k& c, std::uint64_t n, rng_key key, std::uint64_t step,
                         std::uint64_t j0, std::uint64_t j1, Visit&& visit) {
    if (j0 >= j1)
      return;
    const std::uint64_t k = c.kept(n);
    std::uint64_t start = random_k::stratum_start(j0, n, k);
    for (std::uint64_t j = j0; j < j1; ++j) {
      const std::uint64_t end = random_k::stratum_start(j + 1, n, k);
      visit(j, start, end - start, random_k::pick(start, end - start, random_u32(key, step, j)));
      start = end;
    }
  }

private:
  /// Kept values decoded at a time from a quantized body.
  static constexpr std::uint64_t value_run = 256;

  /// Calls visit(j, start, size, kept index) for every stratum j of the n elements.
  template <class Visit>
  static void for_each_stratum(const random_k& c, std::uint64_t n, rng_key key, std::uint64_t step,
                               Visit&& visit) {
    for_strata(c, n, key, step, 0, c.kept(n), visit);
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
