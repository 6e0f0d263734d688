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

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"

namespace commpress::detail {

template <> struct codec_impl<quantize, cpu::seq_t> {
  static std::uint64_t workspace_bytes(const quantize&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const quantize& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    std::size_t bad = 0;
    dispatch(c, [&](auto b, auto r, auto s) {
      bad = encode<decltype(b)::value, decltype(r)::value, decltype(s)::value>(c, ctx, in, body);
    });
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const quantize& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    dispatch(c, [&](auto b, auto r, auto) {
      decode_each<decltype(b)::value, decltype(r)::value>(
          c, out.size(), body, [&](std::size_t i, float v) { out[i] = from_float<T>(v); });
    });
  }

  static void accumulate_body(const cpu::seq_t&, const quantize& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    dispatch(c, [&](auto b, auto r, auto) {
      decode_each<decltype(b)::value, decltype(r)::value>(
          c, acc.size(), body,
          [&](std::size_t i, float v) { acc[i] = add_rn(acc[i], mul_rn(weight, v)); });
    });
  }

  static std::size_t roundtrip(const cpu::seq_t&, const quantize& c, const context& ctx,
                               std::span<float> x, std::span<std::byte>) {
    std::size_t bad = 0;
    dispatch(c, [&](auto b, auto r, auto s) {
      bad = roundtrip_impl<decltype(b)::value, decltype(r)::value, decltype(s)::value>(c, ctx, x);
    });
    return bad;
  }

private:
  static constexpr quant_range sym = quant_range::symmetric;

  /// Calls f(bits, range, stochastic) with each as a std::integral_constant.
  template <class F> static void dispatch(const quantize& c, F&& f) {
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
    if (c.range == sym)
      return with_round(std::integral_constant<quant_range, sym>{});
    return with_round(std::integral_constant<quant_range, quant_range::asymmetric>{});
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

  template <unsigned B, quant_range R, bool S, element T>
  static std::size_t encode(const quantize& c, const context& ctx, std::span<const T> in,
                            unsigned char* body) {
    const std::size_t n = in.size();
    if (n == 0)
      return 0;
    const nonfinite_policy policy = ctx.on_nonfinite;
    const bool poison = policy == nonfinite_policy::propagate;
    uniform_stream u{ctx.key(), ctx.step}; // ctx.key() costs a Philox block: once per call
    unsigned char* const codes = body + c.n_groups(n) * c.record_bytes();
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
      }
      for (std::size_t j = 0; j < cols; ++j) {
        const quantize::record s = load_record<R>(body, j);
        store_record<R>(body, j, quantize::make_record(R, B, s.a, s.b));
      }
    } else {
      const std::size_t len = c.granularity == scale_granularity::tensor ? n : c.group;
      for (std::size_t g = 0, begin = 0; begin < n; ++g, begin += len) {
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
