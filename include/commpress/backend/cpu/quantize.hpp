// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the quantize codec.
///
/// Every loop is instantiated for a compile-time bit width, range and rounding (a switch picks
/// the instance), so the per-element code has no data-dependent branches and packs whole
/// groups of eight codes. Nothing needs a workspace: column statistics accumulate in the
/// body's record slots (encode) or in a small tile on the stack (roundtrip).
///
/// Per-block and per-tensor groups of fp32 take the streaming kernels of detail/kernels.hpp:
/// integer reductions of the bit patterns for absmax (symmetric) or min and max (asymmetric), codes
/// computed 256 at a time and packed eight at a time, Philox blocks generated 64 at a time, and a
/// software prefetch 8 KiB ahead of every pass that reads from memory. A group holding a NaN or
/// Inf, or not starting on a multiple of 8, takes the element-wise path; both paths compute the
/// same expressions, so the bytes are the same.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/kernels.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/body_checksum.hpp"

namespace commpress::detail {

/// Calls f(bits, range, stochastic) with each as a std::integral_constant: every quantize loop
/// is instantiated for compile-time values (cpu::seq and cpu::par).
template <class F> void dispatch_quantize(const quantize& c, F&& f) {
  const auto with_bits = [&](auto r, auto s) {
    switch (c.bits) {
    case 1:
      return f(std::integral_constant<unsigned, 1>{}, r, s);
    case 2:
      return f(std::integral_constant<unsigned, 2>{}, r, s);
    case 3:
      return f(std::integral_constant<unsigned, 3>{}, r, s);
    case 4:
      return f(std::integral_constant<unsigned, 4>{}, r, s);
    case 5:
      return f(std::integral_constant<unsigned, 5>{}, r, s);
    case 6:
      return f(std::integral_constant<unsigned, 6>{}, r, s);
    case 7:
      return f(std::integral_constant<unsigned, 7>{}, r, s);
    default:
      return f(std::integral_constant<unsigned, 8>{}, r, s); // can_implement: <= 8
    }
  };
  const auto with_round = [&](auto r) {
    if (c.round == rounding::stochastic)
      return with_bits(r, std::true_type{});
    return with_bits(r, std::false_type{});
  };
  if (c.range == quant_range::symmetric)
    return with_round(std::integral_constant<quant_range, quant_range::symmetric>{});
  return with_round(std::integral_constant<quant_range, quant_range::asymmetric>{});
}

template <> struct codec_impl<quantize, cpu::seq_t> {
  static std::uint64_t workspace_bytes(const quantize&, std::uint64_t) { return 0; }

  /// The records come first and are final only at the end; the codes are written in order.
  static std::size_t ordered_body_from(const quantize& c, std::uint64_t n) {
    return static_cast<std::size_t>(c.n_groups(n) * c.record_bytes());
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const quantize& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>,
                                 format::body_checksum& sum) {
    return encode_any(c, ctx, in, body, &sum);
  }
  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const quantize& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    return encode_any(c, ctx, in, body, nullptr);
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const quantize& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    dispatch_quantize(c, [&](auto b, auto r, auto) {
      if constexpr (std::is_same_v<T, float>) {
        if (decode_fast<decltype(b)::value, decltype(r)::value, false>(c, out.size(), body,
                                                                       out.data(), 1.0f))
          return;
      }
      decode_each<decltype(b)::value, decltype(r)::value>(
          c, out.size(), body, [&](std::size_t i, float v) { out[i] = from_float<T>(v); });
    });
  }

  static void accumulate_body(const cpu::seq_t&, const quantize& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    dispatch_quantize(c, [&](auto b, auto r, auto) {
      if (decode_fast<decltype(b)::value, decltype(r)::value, true>(c, acc.size(), body, acc.data(),
                                                                    weight))
        return;
      decode_each<decltype(b)::value, decltype(r)::value>(
          c, acc.size(), body,
          [&](std::size_t i, float v) { acc[i] = add_rn(acc[i], mul_rn(weight, v)); });
    });
  }

  static std::size_t roundtrip(const cpu::seq_t&, const quantize& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    std::size_t bad = 0;
    dispatch_quantize(c, [&](auto b, auto r, auto s) {
      bad = roundtrip_impl<decltype(b)::value, decltype(r)::value, decltype(s)::value>(c, ctx, x);
    });
    return bad;
  }

  /// Groups up to this many elements are still in L1 when the code pass reads them again.
  static constexpr std::size_t l1_group = 4096;

  /// Largest block the fused error-feedback step keeps on the stack.
  static constexpr std::uint32_t fused_max_block = 4096;

  /// Whether encode_ef serves this configuration: symmetric blocks of a multiple of 8 elements,
  /// at most fused_max_block.
  static bool can_fuse_feedback(const quantize& c) {
    return c.range == quant_range::symmetric && c.granularity == scale_granularity::block &&
           c.group % 8 == 0 && c.group <= fused_max_block;
  }

  /// The error state of encode_ef as an fp32 array updated in place.
  struct error_in_place {
    float* e;
    std::size_t n;
    /// The block's m values, to be read and updated.
    float* load(std::size_t begin, std::size_t) const { return e + begin; }
    /// The block's update is final (nothing to write back).
    void store(std::size_t, std::size_t) const {}
    /// What the pass over the values of element `at` onwards prefetches.
    cpu::detail::prefetch_stream stream(std::size_t at) const { return {e + at, e + n}; }
  };

  /// One error-feedback step fused with the encode (feedback/fused_quantize.hpp): per block,
  /// h = screen(g) + e, the body gets Q(h), and e is updated from the fresh error
  /// h - deQ(Q(h)) by `rule` (plain EF: e = fresh where finite; LoCo: the moving average; see
  /// error_update), `held` counting the elements that kept their e. The same operations, in
  /// the same order, as the policies' unfused sequence (h in a workspace, encode,
  /// decode_accumulate with weight -1, the rule), in one pass over g and e. Returns the
  /// non-finite count of g. ctx.on_nonfinite is not `fail`.
  ///
  /// `err` holds e (error_in_place, or a stored state with the same three members): each
  /// block's values come from err.load(begin, m) and go back with err.store(begin, m).
  template <class ErrorBlocks>
  static std::size_t encode_ef(const quantize& c, const context& ctx, const float* g,
                               ErrorBlocks& err, std::size_t n, unsigned char* body,
                               std::size_t& held, format::body_checksum& sum, error_update rule) {
    std::size_t bad = 0;
    const bool zero = ctx.on_nonfinite == nonfinite_policy::zero_and_count;
    dispatch_quantize(c, [&](auto b, auto, auto s) {
      bad = zero ? encode_ef_impl<decltype(b)::value, decltype(s)::value, true>(
                       c, ctx, g, err, n, body, held, sum, rule)
                 : encode_ef_impl<decltype(b)::value, decltype(s)::value, false>(
                       c, ctx, g, err, n, body, held, sum, rule);
    });
    return bad;
  }

private:
  static constexpr quant_range sym = quant_range::symmetric;

  template <element T>
  static std::size_t encode_any(const quantize& c, const context& ctx, std::span<const T> in,
                                unsigned char* body, format::body_checksum* sum) {
    std::size_t bad = 0;
    dispatch_quantize(c, [&](auto b, auto r, auto s) {
      bad =
          encode<decltype(b)::value, decltype(r)::value, decltype(s)::value>(c, ctx, in, body, sum);
    });
    return bad;
  }

  /// Folds v into a group's statistics: absmax (symmetric) or min and max (asymmetric). The
  /// comparisons are order-independent for non-NaN values; NaN is ignored here because its
  /// group is poisoned separately.
  template <quant_range R> static COMMPRESS_FORCEINLINE void fold(float v, float& s0, float& s1) {
    if constexpr (R == sym) {
      const float a = abs(v);
      s0 = a > s0 ? a : s0;
    } else {
      s0 = v < s0 ? v : s0;
      s1 = v > s1 ? v : s1;
    }
  }
  template <quant_range R> static constexpr float stat0_init() {
    return R == sym ? 0.0f : std::numeric_limits<float>::infinity();
  }
  static constexpr float stat1_init = -std::numeric_limits<float>::infinity();

  template <quant_range R>
  static COMMPRESS_FORCEINLINE void store_record(unsigned char* body, std::size_t g,
                                                 quantize::record rec) {
    if constexpr (R == sym) {
      cpu::detail::store_word<float>(body + 4 * g, rec.a);
    } else {
      cpu::detail::store_word<float>(body + 8 * g, rec.a);
      cpu::detail::store_word<float>(body + 8 * g + 4, rec.b);
    }
  }
  template <quant_range R>
  static COMMPRESS_FORCEINLINE quantize::record load_record(const unsigned char* body,
                                                            std::size_t g) {
    if constexpr (R == sym)
      return {cpu::detail::load_word<float>(body + 4 * g), 0.0f};
    return {cpu::detail::load_word<float>(body + 8 * g),
            cpu::detail::load_word<float>(body + 8 * g + 4)};
  }

  /// Element i's uniform, uniform_from_bits(random_u32(key, step, i)), drawing each Philox
  /// block once for its four consecutive elements instead of once per element.
  struct uniform_stream {
    rng_key key;
    std::uint64_t step;
    std::uint64_t block = ~std::uint64_t{0};
    rng_block words{};

    COMMPRESS_FORCEINLINE float operator()(std::uint64_t i) {
      if ((i >> 2) != block) {
        block = i >> 2;
        words = random_block(key, step, block);
      }
      return uniform_from_bits(words.v[i & 3u]);
    }
  };

  /// The code of element i (global index) with value x in a group with coder k.
  template <unsigned B, quant_range R, bool S>
  static COMMPRESS_FORCEINLINE std::uint32_t code_of(float x, quantize::coder k, uniform_stream& u,
                                                     std::size_t i) {
    if constexpr (S)
      return quantize::encode_stochastic(R, B, x, k, u(i));
    return quantize::encode_nearest(R, B, x, k);
  }

  /// Writes the codes of elements [begin, end) of the stream, code(i) giving element i's. Runs
  /// are visited in increasing order; a group of eight that straddles two runs is collected in
  /// `buf` and packed when its last code arrives (the caller packs a short final group).
  template <unsigned B, class CodeFn>
  static COMMPRESS_FORCEINLINE void pack_run(std::size_t begin, std::size_t end,
                                             std::uint32_t (&buf)[8], unsigned char* codes,
                                             CodeFn&& code) {
    std::size_t i = begin;
    for (; i < end && (i & 7u) != 0; ++i) {
      buf[i & 7u] = code(i);
      if ((i & 7u) == 7u)
        pack_group(buf, 8, B, codes + (i >> 3) * B);
    }
    for (; i + 8 <= end; i += 8) {
      std::uint32_t eight[8];
      for (unsigned k = 0; k < 8; ++k)
        eight[k] = code(i + k);
      pack_group(eight, 8, B, codes + (i >> 3) * B);
    }
    for (; i < end; ++i)
      buf[i & 7u] = code(i); // fewer than 8 left: never completes a group
  }

  /// Calls sink(i, code) for the elements [begin, end) of the stream.
  template <unsigned B, class Sink>
  static COMMPRESS_FORCEINLINE void unpack_run(std::size_t begin, std::size_t end,
                                               const unsigned char* codes, Sink&& sink) {
    std::size_t i = begin;
    for (; i < end && (i & 7u) != 0; ++i)
      sink(i, unpack_one(codes, i, B));
    for (; i + 8 <= end; i += 8) {
      std::uint32_t eight[8];
      unpack_group(codes + (i >> 3) * B, 8, B, eight);
      for (unsigned k = 0; k < 8; ++k)
        sink(i + k, eight[k]);
    }
    for (; i < end; ++i)
      sink(i, unpack_one(codes, i, B));
  }

  /// The statistics of group g = [begin, end) of an n-element fp32 tensor, vectorized: stores
  /// its record and returns its coder, or nothing (nothing written) when the group holds a NaN
  /// or Inf, which the element-wise path handles.
  template <unsigned B, quant_range R>
  static std::optional<quantize::coder> group_coder(const float* x, std::size_t n,
                                                    std::size_t begin, std::size_t end,
                                                    unsigned char* body, std::size_t g) {
    using namespace cpu::detail;
    float s0, s1 = 0.0f; // absmax, or lo and hi
    if constexpr (R == quant_range::asymmetric) {
      const value_range_result v = value_range(x + begin, end - begin, {x + begin, x + n});
      if (!v.finite)
        return std::nullopt;
      s0 = v.lo;
      s1 = v.hi;
    } else {
      const std::uint32_t key = max_magnitude_bits(x + begin, end - begin, {x + begin, x + n});
      if (key >= 0x7f800000u)
        return std::nullopt;
      s0 = bits_to_float(key);
    }
    store_record<R>(body, g, quantize::make_record(R, B, s0, s1));
    return quantize::make_coder(R, B, s0, s1);
  }

  /// The codes of group [begin, end) (begin a multiple of 8) with coder k through the streaming
  /// kernels; a short tail goes through pack_run and `buf`. Forced inline: GCC called it once
  /// per group, and at 8 bits per block of 128 that call cost measurable time (bench/README.md).
  template <unsigned B, quant_range R, bool S, class Progress>
  static COMMPRESS_FORCEINLINE void group_codes(const float* x, std::size_t n, std::size_t begin,
                                                std::size_t end, quantize::coder k,
                                                uniform_stream& u, unsigned char* codes,
                                                std::uint32_t (&buf)[8], Progress&& progress) {
    using namespace cpu::detail;
    const std::size_t whole = begin + (end - begin) / 8 * 8;
    // The code pass finds a block in L1; a larger group (per tensor) it reads from memory again.
    const bool reread = end - begin > l1_group;
    alignas(64) std::uint32_t words[S ? code_chunk : 1];
    for (std::size_t i = begin; i < whole; i += code_chunk) {
      const std::size_t m = whole - i < code_chunk ? whole - i : code_chunk;
      if constexpr (S)
        philox_words(u.key, u.step, i >> 2, (m + 3) / 4, words);
      encode_codes<B, R == quant_range::asymmetric, S>(
          x + i, m, k.inv, k.lo, words, codes + i / 8 * B,
          reread ? prefetch_stream{x + i, x + n} : prefetch_stream{});
      progress(i + m);
    }
    pack_run<B>(whole, end, buf, codes,
                [&](std::size_t i) { return code_of<B, R, S>(x[i], k, u, i); });
  }

  /// Groups of up to this many elements together are encoded a batch at a time: the
  /// statistics of all, then the codes of all. A group's codes wait for its scale (a
  /// reduction and two divisions); in a batch the scales of short blocks are formed
  /// back to back, and the codes still find the batch (4 KiB) in L1. With group_codes inlined,
  /// this brought AVX-512 blocks of 128 under their goal (bench/README.md, "What this table's
  /// commits changed").
  static constexpr std::size_t batch_elements = 1024;

  /// The fp32 groups g, g + 1, ... of length len starting at `begin` (a multiple of 8), at most
  /// batch_elements / len of them (at least one), through group_coder and group_codes. Returns
  /// how many it encoded: it stops before a group holding a NaN or Inf, which the caller
  /// encodes element-wise.
  template <unsigned B, quant_range R, bool S, class Progress>
  static std::size_t encode_batch(const float* x, std::size_t n, std::size_t len, std::size_t begin,
                                  std::size_t g, uniform_stream& u, unsigned char* body,
                                  unsigned char* codes, std::uint32_t (&buf)[8],
                                  Progress&& progress) {
    constexpr std::size_t most = batch_elements / 8; // the most groups of a batch
    quantize::coder k[most];
    // Only a multiple of 8 keeps every group of the batch starting at a multiple of 8.
    const std::size_t groups = len < batch_elements && len % 8 == 0 ? batch_elements / len : 1;
    std::size_t count = 0;
    for (std::size_t b = begin; count < groups && b < n; ++count, b += len) {
      const std::optional<quantize::coder> coder =
          group_coder<B, R>(x, n, b, n - b < len ? n : b + len, body, g + count);
      if (!coder)
        break;
      k[count] = *coder;
    }
    for (std::size_t j = 0, b = begin; j < count; ++j, b += len)
      group_codes<B, R, S>(x, n, b, n - b < len ? n : b + len, k[j], u, codes, buf, progress);
    return count;
  }

  template <unsigned B, bool S, bool Zero, class ErrorBlocks>
  static std::size_t encode_ef_impl(const quantize& c, const context& ctx, const float* g,
                                    ErrorBlocks& err, std::size_t n, unsigned char* body,
                                    std::size_t& held, format::body_checksum& sum,
                                    error_update rule) {
    using namespace cpu::detail;
    const std::size_t len = c.group;
    unsigned char* const codes = body + c.n_groups(n) * c.record_bytes();
    uniform_stream u{ctx.key(), ctx.step};
    alignas(64) float h[fused_max_block];
    alignas(64) std::uint8_t code[fused_max_block];
    alignas(64) std::uint32_t words[S ? code_chunk : 1];
    std::size_t bad = 0;
    std::size_t ignored = 0; // encode's own count of non-finite h is not reported by ef
    const std::size_t codes_at = ordered_body_from(c, n);
    for (std::size_t grp = 0, begin = 0; begin < n; ++grp, begin += len) {
      const std::size_t end = n - begin < len ? n : begin + len;
      const std::size_t m = end - begin;
      sum.written(codes_at + begin / 8 * B); // the groups before this one
      float* const e = err.load(begin, m);
      const screened_sum sums = add_screened<Zero>(g + begin, e, m, h, {g + begin, g + n});
      bad += sums.nonfinite;
      const std::uint32_t key = sums.max_bits;
      float s0 = bits_to_float(key);
      if (key >= 0x7f800000u) { // a NaN or Inf h: the element-wise statistics of encode
        s0 = 0.0f;
        float unused = stat1_init;
        bool poisoned = false;
        for (std::size_t j = 0; j < m; ++j) {
          poisoned |= !is_finite(h[j]);
          fold<sym>(screen(h[j], ctx.on_nonfinite, ignored), s0, unused);
        }
        if (poisoned && !Zero)
          s0 = bits_to_float(0x7fc00000u);
      }
      const quantize::record rec = quantize::make_record(sym, B, s0, 0.0f);
      store_record<sym>(body, grp, rec);
      const quantize::coder k = quantize::make_coder(sym, B, s0, 0.0f);
      if (key < 0x7f800000u && m % 8 == 0) {
        // Codes straight into the body, and e updated from the same codes.
        const bool bounded = key < 0x7e800000u; // absmax < 2^126
        unsigned char* packed = codes + begin / 8 * B;
        for (std::size_t i = 0; i < m; i += code_chunk) {
          const std::size_t mm = m - i < code_chunk ? m - i : code_chunk;
          if constexpr (S)
            philox_words(u.key, u.step, (begin + i) >> 2, (mm + 3) / 4, words);
          held += sym_encode_error<B, S>(h + i, mm, k.inv, rec.a, words, packed + i / 8 * B, rule,
                                         bounded, e + i, err.stream(begin + i));
        }
        err.store(begin, m);
        continue;
      }
      if (key < 0x7f800000u) {
        for (std::size_t i = 0; i < m; i += code_chunk) {
          const std::size_t mm = m - i < code_chunk ? m - i : code_chunk;
          if constexpr (S) {
            philox_words(u.key, u.step, (begin + i) >> 2, (mm + 3) / 4, words);
            codes_stochastic<B, false>(h + i, mm, k.inv, 0.0f, words, code + i);
          } else {
            codes_nearest<B, false>(h + i, mm, k.inv, 0.0f, code + i);
          }
        }
      } else {
        for (std::size_t j = 0; j < m; ++j)
          code[j] = static_cast<std::uint8_t>(
              code_of<B, sym, S>(screen(h[j], ctx.on_nonfinite, ignored), k, u, begin + j));
      }
      const std::size_t whole = m / 8 * 8;
      pack_codes<B>(code, whole, codes + begin / 8 * B);
      if (whole != m) { // the tensor's last, partial group of eight
        std::uint32_t rest[8] = {};
        for (std::size_t j = whole; j < m; ++j)
          rest[j - whole] = code[j];
        pack_group(rest, static_cast<unsigned>(m - whole), B, codes + (begin + whole) / 8 * B);
      }
      // e = h + (-1) * deQ, as decode_accumulate(payload, h, -1) computes it, where finite.
      constexpr std::int32_t offset = (1 << (B - 1)) - 1;
      std::uint32_t kept = 0;
      for (std::size_t j = 0; j < m; ++j) {
        const float v = static_cast<float>(static_cast<std::int32_t>(code[j]) - offset) * rec.a;
        kept += rule(h[j] + -1.0f * v, e[j]) ? 1u : 0u;
      }
      held += kept;
      err.store(begin, m);
    }
    return bad;
  }

  /// Block / tensor decoding of fp32 through the streaming kernels: out = deQ, or
  /// out += weight * deQ when Accumulate. False when the granularity is per column.
  template <unsigned B, quant_range R, bool Accumulate>
  static bool decode_fast(const quantize& c, std::size_t n, const unsigned char* body, float* out,
                          float weight) {
    using namespace cpu::detail;
    if (c.granularity == scale_granularity::column)
      return false;
    const std::size_t len = c.granularity == scale_granularity::tensor ? n : c.group;
    if (len % 8 != 0 && len != n)
      return false;
    const unsigned char* const codes = body + c.n_groups(n) * c.record_bytes();
    // A large, 64-byte aligned output whose groups keep that alignment is streamed.
    const bool stream = !Accumulate && 4 * n >= streaming_store_min_bytes &&
                        reinterpret_cast<std::uintptr_t>(out) % 64 == 0 &&
                        (len % 16 == 0 || len == n);
    for (std::size_t g = 0, begin = 0; begin < n; ++g, begin += len) {
      const std::size_t end = n - begin < len ? n : begin + len;
      constexpr bool asym = R == quant_range::asymmetric;
      const quantize::record rec = load_record<R>(body, g);
      const std::size_t whole = begin + (end - begin) / 8 * 8;
      if (stream)
        decode_packed<B, asym, Accumulate, true>(codes + begin / 8 * B, whole - begin, rec.a, rec.b,
                                                 weight, out + begin);
      else // an accumulator is read: prefetched ahead
        decode_packed<B, asym, Accumulate, false>(
            codes + begin / 8 * B, whole - begin, rec.a, rec.b, weight, out + begin,
            Accumulate ? prefetch_stream{out + begin, out + n} : prefetch_stream{});
      for (std::size_t i = whole; i < end; ++i) {
        const float v = quantize::decode_value(R, B, unpack_one(codes, i, B), rec);
        out[i] = Accumulate ? add_rn(out[i], mul_rn(weight, v)) : v;
      }
    }
    if (stream)
      streaming_store_fence();
    return true;
  }

  /// Encodes `in`; with a checksum, announces the codes of every finished group of eight.
  template <unsigned B, quant_range R, bool S, element T>
  static std::size_t encode(const quantize& c, const context& ctx, std::span<const T> in,
                            unsigned char* body, format::body_checksum* sum) {
    const std::size_t n = in.size();
    if (n == 0)
      return 0;
    const nonfinite_policy policy = ctx.on_nonfinite;
    const bool poison = policy == nonfinite_policy::propagate;
    uniform_stream u{ctx.key(), ctx.step}; // ctx.key() costs a Philox block: once per call
    unsigned char* const codes = body + c.n_groups(n) * c.record_bytes();
    const auto progress = [sum, codes_at = ordered_body_from(c, n)](std::size_t elements) {
      if (sum != nullptr)
        sum->written(codes_at + elements / 8 * B);
    };
    std::uint32_t buf[8] = {};
    std::size_t bad = 0;
    std::size_t ignored = 0; // the second load of an element must not count it again

    if (c.granularity == scale_granularity::column) {
      // The record slots hold the column statistics until every code is written: symmetric
      // {absmax}, asymmetric {lo, hi}; then they are turned into records in place.
      const std::size_t cols = c.group;
      const std::size_t rows = n / cols;
      for (std::size_t j = 0; j < cols; ++j)
        store_record<R>(body, j, {stat0_init<R>(), stat1_init});
      for (std::size_t r = 0; r < rows; ++r) {
        const T* row = in.data() + r * cols;
        for (std::size_t j = 0; j < cols; ++j) {
          quantize::record s = load_record<R>(body, j);
          fold<R>(screen(to_float(row[j]), policy, bad), s.a, s.b);
          store_record<R>(body, j, s);
        }
      }
      if (poison && bad != 0) {
        const float nan = bits_to_float(0x7fc00000u);
        for (std::size_t i = 0; i < n; ++i)
          if (!is_finite(to_float(in[i])))
            store_record<R>(body, i % cols, {nan, nan});
      }
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t base = r * cols;
        pack_run<B>(base, base + cols, buf, codes, [&](std::size_t i) {
          const quantize::record s = load_record<R>(body, i - base);
          const quantize::coder k = quantize::make_coder(R, B, s.a, s.b);
          return code_of<B, R, S>(screen(to_float(in[i]), policy, ignored), k, u, i);
        });
        progress(base + cols);
      }
      for (std::size_t j = 0; j < cols; ++j) {
        const quantize::record s = load_record<R>(body, j);
        store_record<R>(body, j, quantize::make_record(R, B, s.a, s.b));
      }
    } else {
      const std::size_t len = c.granularity == scale_granularity::tensor ? n : c.group;
      for (std::size_t g = 0, begin = 0; begin < n;) {
        if constexpr (std::is_same_v<T, float>) {
          if ((begin & 7u) == 0) {
            const std::size_t done =
                encode_batch<B, R, S>(in.data(), n, len, begin, g, u, body, codes, buf, progress);
            g += done;
            begin += done * len;
            if (done != 0)
              continue;
          }
        }
        // Element-wise: group g holds a NaN or Inf, or is not fp32 or not aligned to eight.
        const std::size_t end = n - begin < len ? n : begin + len;
        float s0 = stat0_init<R>();
        float s1 = stat1_init;
        const std::size_t bad_before = bad;
        for (std::size_t i = begin; i < end; ++i)
          fold<R>(screen(to_float(in[i]), policy, bad), s0, s1);
        if (poison && bad != bad_before)
          s0 = s1 = bits_to_float(0x7fc00000u);
        store_record<R>(body, g, quantize::make_record(R, B, s0, s1));
        const quantize::coder k = quantize::make_coder(R, B, s0, s1);
        pack_run<B>(begin, end, buf, codes, [&](std::size_t i) {
          return code_of<B, R, S>(screen(to_float(in[i]), policy, ignored), k, u, i);
        });
        progress(end);
        ++g;
        begin = end;
      }
    }
    if ((n & 7u) != 0)
      pack_group(buf, static_cast<unsigned>(n & 7u), B, codes + (n >> 3) * B);
    return bad;
  }

  /// Calls sink(i, decoded value) for every element, in element order within each group.
  template <unsigned B, quant_range R, class Sink>
  static void decode_each(const quantize& c, std::size_t n, const unsigned char* body,
                          Sink&& sink) {
    if (n == 0)
      return;
    const unsigned char* const codes = body + c.n_groups(n) * c.record_bytes();
    if (c.granularity == scale_granularity::column) {
      const std::size_t cols = c.group;
      for (std::size_t base = 0; base < n; base += cols)
        unpack_run<B>(base, base + cols, codes, [&](std::size_t i, std::uint32_t code) {
          sink(i, quantize::decode_value(R, B, code, load_record<R>(body, i - base)));
        });
      return;
    }
    const std::size_t len = c.granularity == scale_granularity::tensor ? n : c.group;
    for (std::size_t g = 0, begin = 0; begin < n; ++g, begin += len) {
      const std::size_t end = n - begin < len ? n : begin + len;
      const quantize::record rec = load_record<R>(body, g);
      unpack_run<B>(begin, end, codes, [&](std::size_t i, std::uint32_t code) {
        sink(i, quantize::decode_value(R, B, code, rec));
      });
    }
  }

  template <unsigned B, quant_range R, bool S>
  static std::size_t roundtrip_impl(const quantize& c, const context& ctx, std::span<float> x) {
    const std::size_t n = x.size();
    const nonfinite_policy policy = ctx.on_nonfinite;
    const bool poison = policy == nonfinite_policy::propagate;
    uniform_stream u{ctx.key(), ctx.step}; // ctx.key() costs a Philox block: once per call
    const float nan = bits_to_float(0x7fc00000u);
    std::size_t bad = 0;
    std::size_t ignored = 0;

    if (c.granularity == scale_granularity::column && n != 0) {
      // Columns in tiles small enough for the stack: statistics over all rows, then the
      // elements of the tile.
      constexpr std::size_t tile = 64;
      const std::size_t cols = c.group;
      const std::size_t rows = n / cols;
      for (std::size_t j0 = 0; j0 < cols; j0 += tile) {
        const std::size_t w = cols - j0 < tile ? cols - j0 : tile;
        float s0[tile];
        float s1[tile];
        for (std::size_t j = 0; j < w; ++j) {
          s0[j] = stat0_init<R>();
          s1[j] = stat1_init;
        }
        const std::size_t bad_before = bad;
        for (std::size_t r = 0; r < rows; ++r) {
          const float* row = x.data() + r * cols + j0;
          for (std::size_t j = 0; j < w; ++j)
            fold<R>(screen(row[j], policy, bad), s0[j], s1[j]);
        }
        if (poison && bad != bad_before)
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = 0; j < w; ++j)
              if (!is_finite(x[r * cols + j0 + j]))
                s0[j] = s1[j] = nan;
        quantize::coder k[tile];
        quantize::record rec[tile];
        for (std::size_t j = 0; j < w; ++j) {
          k[j] = quantize::make_coder(R, B, s0[j], s1[j]);
          rec[j] = quantize::make_record(R, B, s0[j], s1[j]);
        }
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t base = r * cols + j0;
          for (std::size_t j = 0; j < w; ++j) {
            const std::size_t i = base + j;
            const std::uint32_t code = code_of<B, R, S>(screen(x[i], policy, ignored), k[j], u, i);
            x[i] = quantize::decode_value(R, B, code, rec[j]);
          }
        }
      }
      return bad;
    }
    const std::size_t len = c.granularity == scale_granularity::tensor ? n : c.group;
    for (std::size_t begin = 0; begin < n; begin += len) {
      const std::size_t end = n - begin < len ? n : begin + len;
      float s0 = stat0_init<R>();
      float s1 = stat1_init;
      const std::size_t bad_before = bad;
      for (std::size_t i = begin; i < end; ++i)
        fold<R>(screen(x[i], policy, bad), s0, s1);
      if (poison && bad != bad_before)
        s0 = s1 = nan;
      const quantize::coder k = quantize::make_coder(R, B, s0, s1);
      const quantize::record rec = quantize::make_record(R, B, s0, s1);
      for (std::size_t i = begin; i < end; ++i) {
        const std::uint32_t code = code_of<B, R, S>(screen(x[i], policy, ignored), k, u, i);
        x[i] = quantize::decode_value(R, B, code, rec);
      }
    }
    return bad;
  }
};

} // namespace commpress::detail
