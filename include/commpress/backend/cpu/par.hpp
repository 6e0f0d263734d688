// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codecs under cpu::par: several threads, the same bytes as cpu::seq (bench/README.md,
/// "cpu::par scaling").
///
/// An operation runs in parallel where the body splits into ranges of elements (or of whole
/// groups, or of random-k strata) whose bytes sit at offsets known up front, so each range is
/// written by one thread with seq's expressions; ranges are cut as detail/parallel.hpp
/// describes, independently of the thread count. What runs in parallel:
/// - identity, cast: encode, decode, decode_accumulate and roundtrip (seq's own loops, each on
///   an element range; the NaN/Inf count is the sum of the ranges' counts);
/// - sign: encode over ranges of whole blocks; a single group (per-tensor scale) splits its
///   canonical sum over the 32 outer lanes of canonical_chunked_sum, so the sum is added in
///   exactly seq's order; decode and decode_accumulate over element ranges; roundtrip is that
///   encode into the workspace and that decode;
/// - quantize: encode over ranges of whole groups (a per-tensor scale: its statistics over
///   element ranges, then the codes), decode and decode_accumulate over element ranges, every
///   granularity;
/// - random_k: encode, decode and decode_accumulate over ranges of strata (quantized values:
///   the gather and the decoding over ranges of strata, the quantizer's encode on the calling
///   thread);
///
/// Sequential (seq's code on the calling thread): quantize roundtrip and per-column encode,
/// random_k roundtrip, every top_k operation (each row needs its own workspace of keys), sign
/// blocks too long for two ranges of them, random_k with k = 0, QSGD's Elias body (one bit
/// stream), and every tensor shorter than two ranges.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/parallel.hpp"
#include "commpress/backend/cpu/detail/quantize_groups.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"

namespace commpress::detail {

/// par entry points that run seq's on the calling thread.
template <class C> struct par_sequential {
  using seq = codec_impl<C, cpu::seq_t>;
  /// The host backend contract's flags: par re-reads the body to hash it; roundtrip as seq's.
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = seq::custom_roundtrip;

  static std::uint64_t workspace_bytes(const C& c, std::uint64_t n) {
    return seq::workspace_bytes(c, n);
  }

  template <element T>
  static std::size_t encode_body(const cpu::par_t&, const C& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    return seq::encode_body(cpu::seq, c, ctx, in, body, ws);
  }

  template <element T>
  static void decode_body(const cpu::par_t&, const C& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    seq::decode_body(cpu::seq, c, h, body, out);
  }

  static void accumulate_body(const cpu::par_t&, const C& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    seq::accumulate_body(cpu::seq, c, h, body, acc, weight);
  }

  static std::size_t roundtrip(const cpu::par_t&, const C& c, const context& ctx,
                               std::span<float> x, std::span<std::byte> ws) {
    return seq::roundtrip(cpu::seq, c, ctx, x, ws);
  }
};

/// Codecs whose element i is bytes [W i, W (i + 1)) of the body and depends on x[i] alone: each
/// operation is seq's on element ranges. seq's loops need no workspace and read nothing of the
/// header, so each range gets an empty workspace and the whole tensor's header.
template <class C, std::uint64_t W> struct par_elementwise {
  using seq = codec_impl<C, cpu::seq_t>;
  /// The host backend contract's flags: par re-reads the body to hash it; roundtrip over ranges.
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;

  static std::uint64_t workspace_bytes(const C&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::par_t& p, const C& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    return cpu::detail::parallel_sum(
        p, in.size(), cpu::detail::range_elements(p), [&](std::uint64_t first, std::uint64_t last) {
          return seq::encode_body(cpu::seq, c, ctx, in.subspan(first, last - first),
                                  body + W * first, {});
        });
  }

  template <element T>
  static void decode_body(const cpu::par_t& p, const C& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    cpu::detail::parallel_for(p, out.size(), cpu::detail::range_elements(p),
                              [&](std::uint64_t first, std::uint64_t last) {
                                seq::decode_body(cpu::seq, c, h, body + W * first,
                                                 out.subspan(first, last - first));
                              });
  }

  static void accumulate_body(const cpu::par_t& p, const C& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    cpu::detail::parallel_for(p, acc.size(), cpu::detail::range_elements(p),
                              [&](std::uint64_t first, std::uint64_t last) {
                                seq::accumulate_body(cpu::seq, c, h, body + W * first,
                                                     acc.subspan(first, last - first), weight);
                              });
  }

  static std::size_t roundtrip(const cpu::par_t& p, const C& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    return cpu::detail::parallel_sum(
        p, x.size(), cpu::detail::range_elements(p), [&](std::uint64_t first, std::uint64_t last) {
          return seq::roundtrip(cpu::seq, c, ctx, x.subspan(first, last - first), {});
        });
  }
};

/// identity: 4 bytes (fp32) per element.
template <> struct codec_impl<identity, cpu::par_t> : par_elementwise<identity, 4> {};

/// cast: one 2-byte code per element.
template <> struct codec_impl<cast, cpu::par_t> : par_elementwise<cast, 2> {};

template <> struct codec_impl<sign, cpu::par_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl).
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = false;

  using seq = codec_impl<sign, cpu::seq_t>;

  static std::uint64_t workspace_bytes(const sign&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::par_t& p, const sign& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    if (!cpu::detail::splits(p, n))
      return seq::encode_body(cpu::seq, c, ctx, in, body, ws);
    if (c.groups(n) == 1)
      return encode_single(p, c, ctx, in, body);
    return cpu::detail::parallel_sum(p, c.groups(n), cpu::detail::group_step(p, c.group_length(n)),
                                     [&](std::uint64_t g0, std::uint64_t g1) {
                                       return seq::encode_groups(c, ctx, in, body, g0, g1);
                                     });
  }

  template <element T>
  static void decode_body(const cpu::par_t& p, const sign& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    const std::uint64_t n = out.size();
    if (!cpu::detail::splits(p, n))
      return seq::decode_body(cpu::seq, c, h, body, out);
    cpu::detail::parallel_for(
        p, n, cpu::detail::range_elements(p), [&](std::uint64_t first, std::uint64_t last) {
          seq::decode_range<false>(c, n, body, first, last, out.data() + first, 1.0f);
        });
  }

  static void accumulate_body(const cpu::par_t& p, const sign& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    const std::uint64_t n = acc.size();
    if (!cpu::detail::splits(p, n))
      return seq::accumulate_body(cpu::seq, c, h, body, acc, weight);
    cpu::detail::parallel_for(
        p, n, cpu::detail::range_elements(p), [&](std::uint64_t first, std::uint64_t last) {
          seq::decode_range<true>(c, n, body, first, last, acc.data() + first, weight);
        });
  }

private:
  /// One group over the whole tensor: its chunks' sums and bits on p's threads.
  template <element T>
  static std::size_t encode_single(const cpu::par_t& p, const sign& c, const context& ctx,
                                   std::span<const T> in, unsigned char* body) {
    const std::uint64_t n = in.size();
    unsigned char* bits = body + 4;
    std::size_t bad = 0;
    const double sum = cpu::detail::parallel_canonical_chunked_sum(
        p, n, bad, [&](std::uint64_t first, std::uint64_t m, std::size_t& count) {
          // One chunk: sign_group's outer sum is that chunk's canonical sum.
          return seq::sum_and_bits(c, ctx, in.data() + first, m, bits + first / 8, 0, count);
        });
    cpu::detail::store_word<float>(body, c.scale_from_sum(sum, n));
    return bad;
  }
};

/// Encode runs seq's group pipeline (detail/quantize_groups.hpp) on ranges of whole groups,
/// each range starting on a multiple of 8 elements (group_step), so every range writes its own
/// records and code bytes; a per-tensor scale is reduced over element ranges first (a maximum
/// and a minimum: exact in any order), then the codes are written over the ranges. Decode and
/// decode_accumulate run on element ranges, every granularity. Column scales (their
/// statistics span every row) and roundtrip run seq's code.
template <> struct codec_impl<quantize, cpu::par_t> : par_sequential<quantize> {
  template <element T>
  static std::size_t encode_body(const cpu::par_t& p, const quantize& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    namespace groups = cpu::detail::quantize_groups;
    const std::uint64_t n = in.size();
    if (!cpu::detail::splits(p, n) || c.granularity == scale_granularity::column)
      return seq::encode_body(cpu::seq, c, ctx, in, body, ws);
    if (c.granularity == scale_granularity::block)
      return cpu::detail::parallel_sum(p, c.n_groups(n), cpu::detail::group_step(p, c.group),
                                       [&](std::uint64_t first, std::uint64_t last) {
                                         return groups::encode(c, ctx, in, body, nullptr, first,
                                                               last);
                                       });
    if constexpr (std::is_same_v<T, float>) {
      if (encode_tensor(p, c, ctx, in, body))
        return 0;
    }
    return seq::encode_body(cpu::seq, c, ctx, in, body, ws);
  }

  template <element T>
  static void decode_body(const cpu::par_t& p, const quantize& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    const std::uint64_t n = out.size();
    if (!cpu::detail::splits(p, n))
      return seq::decode_body(cpu::seq, c, h, body, out);
    cpu::detail::parallel_for(
        p, n, cpu::detail::range_elements(p), [&](std::uint64_t first, std::uint64_t last) {
          cpu::detail::quantize_groups::decode<false>(c, n, body, out.data(), 1.0f, first, last);
        });
  }

  static void accumulate_body(const cpu::par_t& p, const quantize& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    const std::uint64_t n = acc.size();
    if (!cpu::detail::splits(p, n))
      return seq::accumulate_body(cpu::seq, c, h, body, acc, weight);
    cpu::detail::parallel_for(
        p, n, cpu::detail::range_elements(p), [&](std::uint64_t first, std::uint64_t last) {
          cpu::detail::quantize_groups::decode<true>(c, n, body, acc.data(), weight, first, last);
        });
  }

private:
  /// One per-tensor group of finite fp32: the statistics reduced over element ranges, then
  /// the codes of each range by the kernel of seq's pipeline. False (nothing written) when the
  /// tensor holds a NaN or Inf, which seq's element-wise path then encodes.
  static bool encode_tensor(const cpu::par_t& p, const quantize& c, const context& ctx,
                            std::span<const float> in, unsigned char* body) {
    namespace groups = cpu::detail::quantize_groups;
    const std::uint64_t n = in.size();
    const std::uint64_t step = cpu::detail::range_elements(p);
    const std::uint64_t ranges = (n + step - 1) / step;
    struct stats {
      bool finite;
      float s0;
      float s1;
    };
    std::vector<stats> part(ranges);
    cpu::detail::parallel_for(p, n, step, [&](std::uint64_t first, std::uint64_t last) {
      stats& s = part[first / step];
      s.finite = groups::group_statistics(c.range, in.data(), n, first, last, s.s0, s.s1);
    });
    stats all = part[0];
    for (const stats& s : part) {
      all.finite = all.finite && s.finite;
      if (c.range == quant_range::symmetric) {
        all.s0 = s.s0 > all.s0 ? s.s0 : all.s0;
      } else {
        all.s0 = s.s0 < all.s0 ? s.s0 : all.s0;
        all.s1 = s.s1 > all.s1 ? s.s1 : all.s1;
      }
    }
    if (!all.finite || quantize::is_wide(c.range, all.s0, all.s1))
      return false; // seq's element-wise path encodes a NaN / Inf or a wide range
    const groups::config cfg(c, ctx.on_nonfinite, n);
    groups::store_record(cfg.range, body, 0,
                         quantize::make_record(cfg.range, cfg.bits, all.s0, all.s1));
    const quantize::coder k = quantize::make_coder(cfg.range, cfg.bits, all.s0, all.s1);
    const groups::encode_kernel kernel = groups::encode_kernel_for(cfg);
    const rng_key key = ctx.key();
    unsigned char* const codes = body + cfg.codes;
    cpu::detail::parallel_for(p, n, step, [&](std::uint64_t first, std::uint64_t last) {
      const std::uint64_t whole = last / 8 * 8;
      const groups::code_run run{first, whole, k};
      kernel(in.data(), n, &run, 1, {cfg.bits, key, ctx.step, 0, codes, nullptr, 0});
      if (whole != last) { // the tensor's last, partial group of eight
        groups::uniform_stream u{key, ctx.step};
        std::uint32_t rest[8] = {};
        for (std::uint64_t i = whole; i < last; ++i)
          rest[i - whole] = groups::code_of(cfg, in[i], k, u, i);
        pack_group(rest, static_cast<unsigned>(last - whole), cfg.bits,
                   codes + whole / 8 * cfg.bits);
      }
    });
    return true;
  }
};

template <> struct codec_impl<random_k, cpu::par_t> : par_sequential<random_k> {
  template <element T>
  static std::size_t encode_body(const cpu::par_t& p, const random_k& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    const std::uint64_t k = c.kept(n);
    if (!cpu::detail::splits(p, n) || k == 0)
      return seq::encode_body(cpu::seq, c, ctx, in, body, ws);
    const rng_key key = ctx.key();
    const std::uint64_t vb = c.value_bytes();
    // Quantized values: the strata gather in parallel into seq's staging array, then seq's
    // quantizer encodes them (its groups are over the k kept values, not the n elements).
    float* const staged = c.quantized() ? seq::staged_values(ws) : nullptr;
    const std::size_t bad = cpu::detail::parallel_sum(
        p, k, strata_step(p, n, k), [&](std::uint64_t j0, std::uint64_t j1) {
          std::size_t range_bad = 0;
          std::size_t counted = 0; // the kept elements are counted with their strata
          seq::for_strata(
              c, n, key, ctx.step, j0, j1,
              [&](std::uint64_t j, std::uint64_t start, std::uint64_t size, std::uint64_t i) {
                for (std::uint64_t e = start; e < start + size; ++e)
                  range_bad += is_finite(to_float(in[e])) ? 0u : 1u;
                const float v = screen(to_float(in[i]), ctx.on_nonfinite, counted);
                if (staged != nullptr) {
                  staged[j] = v;
                  return;
                }
                const std::uint32_t code = c.encode_value(v);
                if (vb == 4) {
                  cpu::detail::store_word<std::uint32_t>(body + j * vb, code);
                } else {
                  cpu::detail::store_word<std::uint16_t>(body + j * vb,
                                                         static_cast<std::uint16_t>(code));
                }
              });
          return range_bad;
        });
    if (staged != nullptr)
      seq::quantize_kept(c, ctx, staged, k, body);
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::par_t& p, const random_k& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    const std::uint64_t n = out.size();
    const std::uint64_t k = c.kept(n);
    if (!cpu::detail::splits(p, n) || k == 0)
      return seq::decode_body(cpu::seq, c, h, body, out);
    const rng_key key = make_rng_key(h.seed, h.tensor_id);
    cpu::detail::parallel_for(p, k, strata_step(p, n, k), [&](std::uint64_t j0, std::uint64_t j1) {
      // The range's strata cover elements [start_j0, start_j1): zero them, then the kept ones.
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(random_k::stratum_start(j0, n, k)),
                out.begin() + static_cast<std::ptrdiff_t>(random_k::stratum_start(j1, n, k)),
                from_float<T>(0.0f));
      seq::for_each_kept(
          c, n, key, h.step, body, j0, j1,
          [&](std::uint64_t, std::uint64_t i, float v) { out[i] = from_float<T>(v); });
    });
  }

  static void accumulate_body(const cpu::par_t& p, const random_k& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    const std::uint64_t n = acc.size();
    const std::uint64_t k = c.kept(n);
    if (!cpu::detail::splits(p, n) || k == 0)
      return seq::accumulate_body(cpu::seq, c, h, body, acc, weight);
    const rng_key key = make_rng_key(h.seed, h.tensor_id);
    cpu::detail::parallel_for(p, k, strata_step(p, n, k), [&](std::uint64_t j0, std::uint64_t j1) {
      seq::for_each_kept(c, n, key, h.step, body, j0, j1,
                         [&](std::uint64_t, std::uint64_t i, float v) {
                           acc[i] = add_rn(acc[i], mul_rn(weight, v));
                         });
    });
  }

private:
  /// Strata per range: about range_elements(p) elements' worth, at least one.
  static std::uint64_t strata_step(const cpu::par_t& p, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t strata = cpu::detail::range_elements(p) / ceil_div(n, k);
    return strata == 0 ? 1 : strata;
  }
};

template <> struct codec_impl<top_k, cpu::par_t> : par_sequential<top_k> {};

} // namespace commpress::detail
