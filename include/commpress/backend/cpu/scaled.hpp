// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU implementation of every block-scaled codec of the kit (compress/scaled.hpp), under
/// cpu::seq and cpu::par, from the codec's per-element and per-group members alone.
///
/// Encode forms the tensor scale (if the codec has one) from the largest finite magnitude of
/// the whole tensor, then each group's statistics (its L2 norm too where the codec needs it),
/// scale, encoder and codes; a stochastic codec's element i draws random_u32(ctx.key(),
/// ctx.step, i), whatever range encodes it. A group holding a NaN or Inf
/// is sent, under nonfinite_policy::propagate, as the codec's poisoned scale with all codes 0;
/// under zero_and_count such an element counts as 0. Decode forms each group's decoder once.
///
/// The element loops run on the vector layer where they can, with the same operations as the
/// codec's scalar members: fp32 group statistics; minifloat codes (groups of 16 or 32 several to
/// a call) and the stochastic codes of stochastic_lanes, 64 at a time; and the decode of codes
/// narrower than a byte or of minifloat codes, 64 at a time (byte codes too, where a large
/// output is streamed: detail/streamed_runs.hpp). A one-byte scale's encoders and decoders come
/// from a table of all 256 where a range has many groups.
///
/// cpu::par writes the same bytes: groups shorter than a range are encoded in ranges of whole
/// groups (each range starting on a multiple of 8 elements, so its codes start on a byte);
/// longer groups (a per-tensor scale) have their statistics reduced over element ranges (a
/// maximum and a count, the same in any order), or where the codec needs the norm, over the
/// chunks of canonical_chunked_sum along with the norm's sum (the order of seq), and their codes
/// written over element ranges. The tensor scale's maximum is reduced the same way. Decode runs
/// over element ranges.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/minifloat_kernels.hpp"
#include "commpress/backend/cpu/detail/parallel.hpp"
#include "commpress/backend/cpu/detail/philox.hpp"
#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/reduce.hpp"
#include "commpress/backend/cpu/detail/stochastic_kernels.hpp"
#include "commpress/backend/cpu/detail/streamed_runs.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/compress/scaled.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress {
namespace cpu::detail::scaled_kit {

using commpress::detail::bits_to_float;
using commpress::detail::float_to_bits;

/// What a group's codes and scale depend on: its largest finite magnitude, and how many of its
/// elements are NaN or Inf.
struct statistics {
  std::uint32_t amax_bits = 0; ///< bits of the largest finite |x| (0 for none)
  std::size_t nonfinite = 0;

  [[nodiscard]] float amax() const { return bits_to_float(amax_bits); }
  void merge(const statistics& o) {
    amax_bits = std::max(amax_bits, o.amax_bits);
    nonfinite += o.nonfinite;
  }
};

/// Statistics of x[first, last). The magnitudes are compared as bit patterns (for non-negative
/// floats their integer order), so the result does not depend on the order of the elements.
/// The range is first reduced on the vector layer (GCC leaves the loop below scalar): its
/// largest magnitude is the answer unless it is NaN or Inf, and only then is it counted here.
/// `ahead` (from x + first, fp32 only) is prefetched as the range is read.
template <element T>
statistics statistics_of(const T* COMMPRESS_RESTRICT x, std::uint64_t first, std::uint64_t last,
                         prefetch_stream ahead = {}) {
  const std::uint32_t most =
      max_magnitude_bits(x + first, static_cast<std::size_t>(last - first), ahead);
  if (most < 0x7f800000u)
    return {most, 0};
  std::uint32_t amax = 0;
  std::size_t nonfinite = 0;
  for (std::uint64_t i = first; i < last; ++i) {
    const std::uint32_t a = float_to_bits(to_float(x[i])) & 0x7fffffffu;
    const bool finite = a < 0x7f800000u;
    amax = finite && a > amax ? a : amax;
    nonfinite += finite ? 0u : 1u;
  }
  return {amax, nonfinite};
}

/// The canonical sum of the square terms of x[first, first + m) (x * x in double, exact; 0 for
/// a non-finite element): one chunk of canonical_chunked_sum.
template <element T>
double chunk_sum_of_squares(const T* COMMPRESS_RESTRICT x, std::uint64_t first, std::uint64_t m) {
  return canonical_sum_f32<finite_square>(x + first, m);
}

/// A group measured as its codec needs it: its statistics, and the group_statistics its scale
/// is made from.
struct measured_group {
  statistics st;
  group_statistics g;
};

/// x[first, last) measured for codec C, read from memory once (prefetching up to element
/// `end`): where C needs the norm, each chunk of canonical_chunk elements has its square terms
/// summed (canonical_chunked_sum's order) right after its statistics are taken, while it is
/// still in cache.
template <class C, element T>
measured_group measure_group(const C& c, const T* x, std::uint64_t first, std::uint64_t last,
                             std::uint64_t end) {
  measured_group m{.st = {}, .g = {.count = last - first}};
  if (!c.needs_norm()) {
    m.st = statistics_of(x, first, last, ahead_of(x, first, end));
  } else {
    const double sum = sum_of_chunk_sums(last - first, [&](std::uint64_t a, std::uint64_t len) {
      m.st.merge(statistics_of(x, first + a, first + a + len, ahead_of(x, first + a, end)));
      return chunk_sum_of_squares(x, first + a, len);
    });
    m.g.l2_norm = scaled::l2_norm_from_sum(sum);
  }
  m.g.amax = m.st.amax();
  return m;
}

/// Where a stochastic codec's random bits come from: element i draws
/// random_u32(key, step, i), one Philox block per four elements.
struct random_source {
  rng_key key{};
  std::uint64_t step = 0;

  static random_source of(const context& ctx) { return {ctx.key(), ctx.step}; }
};

/// Writes codes of `bits` bits in order from a byte boundary, least significant bit first
/// (format/bit_packing.hpp's stream); finish() writes a partial last byte, its high bits 0.
template <unsigned Bits> struct code_writer {
  unsigned char* out;
  std::uint32_t pending = 0;
  unsigned held = 0;

  COMMPRESS_FORCEINLINE void put(std::uint32_t code) {
    if constexpr (Bits == 8) {
      *out++ = static_cast<unsigned char>(code);
    } else {
      pending |= code << held;
      held += Bits;
      if (held >= 8) {
        *out++ = static_cast<unsigned char>(pending);
        pending >>= 8;
        held -= 8;
      }
    }
  }
  /// 64 codes, one per byte (the mask of the nonzero ones unused).
  COMMPRESS_FORCEINLINE void put_64(const std::uint8_t* codes, std::uint64_t) {
    for (unsigned j = 0; j < 64; ++j)
      put(codes[j]);
  }
  void finish() {
    if (held > 0)
      *out++ = static_cast<unsigned char>(pending);
    held = 0;
    pending = 0;
  }
};

/// Reads the codes of elements first, first + 1, ... of a stream of `Bits`-bit codes.
template <unsigned Bits> struct code_reader {
  const unsigned char* in;
  unsigned offset; ///< bit offset of the next code in *in

  code_reader(const unsigned char* codes, std::uint64_t first)
      : in(codes + first * Bits / 8), offset(static_cast<unsigned>(first * Bits % 8)) {}

  COMMPRESS_FORCEINLINE std::uint32_t next() {
    if constexpr (Bits == 8) {
      return *in++;
    } else {
      std::uint32_t v = in[0];
      if (offset + Bits > 8)
        v |= static_cast<std::uint32_t>(in[1]) << 8;
      const std::uint32_t code = (v >> offset) & ((1u << Bits) - 1u);
      offset += Bits;
      in += offset / 8;
      offset %= 8;
      return code;
    }
  }
};

/// Where a codec's scales and codes sit in the body of n elements (Byte: const for reading).
template <class C, class Byte = unsigned char> struct layout {
  std::uint64_t n;
  std::uint64_t length; ///< elements per group
  Byte* body;

  layout(const C& c, std::uint64_t elements, Byte* b)
      : n(elements), length(scaled::group_length(c, elements)), body(b) {}

  [[nodiscard]] Byte* codes(const C& c) const { return body + scaled::codes_offset(c, n); }
  void store_scale(std::uint64_t g, typename C::scale s) const {
    store_word(body + scaled::scale_offset<C>(g), s);
  }
  [[nodiscard]] typename C::scale load_scale(std::uint64_t g) const {
    return load_word<typename C::scale>(body + scaled::scale_offset<C>(g));
  }
  void store_tensor_scale(typename C::tensor_scale t) const {
    if constexpr (scaled::has_tensor_scale<C>)
      store_word(body, t);
  }
  [[nodiscard]] typename C::tensor_scale load_tensor_scale() const {
    if constexpr (scaled::has_tensor_scale<C>) {
      return load_word<typename C::tensor_scale>(body);
    } else {
      return {};
    }
  }
};

/// Elements whose random words a stochastic codec draws at once, on the vector layer's Philox
/// (philox_words gives random_block's bits). Ranges shorter than random_batch_min draw one block
/// at a time, since philox_words computes whole steps of philox_step_blocks blocks.
inline constexpr std::uint64_t random_batch = 512;
inline constexpr std::uint64_t random_batch_min = 64;

/// The element of x[i] that a code encodes: 0 for a non-finite one (zero_and_count).
template <element T> COMMPRESS_FORCEINLINE float finite_or_zero(const T* x, std::uint64_t i) {
  const float v = to_float(x[i]);
  return commpress::detail::is_finite(v) ? v : 0.0f;
}

/// fn.template operator()<F>() for the minifloat format F of codec C's elements.
template <minifloat_element_codec C, class Fn>
COMMPRESS_FORCEINLINE decltype(auto) with_element_format(const C& c, Fn&& fn) {
  if constexpr (C::code_bits == minifloat_bits(minifloat::e2m1))
    return fn.template operator()<minifloat::e2m1>();
  else
    return c.element_format() == minifloat::e5m2 ? fn.template operator()<minifloat::e5m2>()
                                                 : fn.template operator()<minifloat::e4m3>();
}

/// The codes of a minifloat element codec for x[first, first + m simd::lanes), the largest m
/// for which they fit in [first, last), written up to 64 at a time where the writer is on a
/// byte boundary (it always is but after an odd number of 4-bit codes); returns the first
/// element not written.
template <class C, element T>
std::uint64_t put_minifloat_codes(const C& c, const T* COMMPRESS_RESTRICT x, std::uint64_t first,
                                  std::uint64_t last, float k, code_writer<C::code_bits>& w) {
  if (w.held != 0)
    return first;
  float scales[simd::vectors_per_64];
  std::fill(std::begin(scales), std::end(scales), k);
  const prefetch_stream ahead = ahead_of(x, first, last); // a long group is read a second time
  return with_element_format(c, [&]<minifloat F>() {
    std::uint64_t i = first;
    for (;;) {
      const std::size_t count = static_cast<std::size_t>(
          std::min<std::uint64_t>(64, (last - i) / simd::lanes * simd::lanes));
      if (count == 0)
        return i;
      if constexpr (std::same_as<T, float>) {
        for (std::size_t j = 0; j < count; j += 16)
          ahead(i - first + j);
        minifloat_codes<F>(x + i, count, scales, w.out);
      } else {
        alignas(64) float wide[64];
        widen_elements(x + i, count, wide);
        minifloat_codes<F>(wide, count, scales, w.out);
      }
      w.out += count * C::code_bits / 8;
      i += count;
    }
  });
}

/// The codes of a codec with stochastic_lanes for x[first, first + 64 m), the largest m for which
/// they fit in [first, last), element first + j drawing random[j], computed 64 at a time and
/// packed together where the writer is a code_writer on a byte boundary (else handed over by
/// put_64); returns the first element not written.
template <class C, element T, class Writer>
std::uint64_t put_stochastic_codes(const C& c, const T* COMMPRESS_RESTRICT x, std::uint64_t first,
                                   std::uint64_t last, const typename C::encoder& k,
                                   const std::uint32_t* random, Writer& w) {
  using namespace simd;
  std::uint64_t i = first;
  for (; last - i >= 64; i += 64) {
    vu codes[vectors_per_64];
    for (std::size_t q = 0; q < vectors_per_64; ++q) {
      const vf v = load_lanes(x + i + q * lanes);
      codes[q] = stochastic_lanes<C>::encode(c, clear(nonfinite(v), v), k,
                                             load_u32(random + (i - first) + q * lanes));
    }
    const b64 bytes = narrow_u8(codes);
    if constexpr (std::same_as<Writer, code_writer<C::code_bits>>) {
      if (w.held == 0) {
        store_packed<C::code_bits>(bytes, w.out);
        w.out += 8 * C::code_bits;
        continue;
      }
    }
    alignas(64) std::uint8_t each[64];
    store_bytes(each, bytes);
    w.put_64(each, nonzero_bytes(bytes));
  }
  return i;
}

/// The codes of x[first, last), one group with encoder k (a poisoned group: all 0), into the
/// writer; zero_and_count's non-finite elements count as 0.
/// Writer: code_writer<C::code_bits>, or any type with put(code) for one code and
/// put_64(codes, nonzero) for 64, one per byte, with the mask of the nonzero ones (bit j for
/// code j; backend/cpu/qsgd.hpp's Elias writer takes the same codes).
template <class C, element T, class Writer>
COMMPRESS_FORCEINLINE void put_codes(const C& c, const T* COMMPRESS_RESTRICT x, std::uint64_t first,
                                     std::uint64_t last, bool poisoned, typename C::encoder k,
                                     const random_source& r, Writer& w) {
  if (poisoned) {
    for (std::uint64_t i = first; i < last; ++i)
      w.put(0);
    return;
  }
  if constexpr (!C::stochastic) {
    std::uint64_t i = first;
    if constexpr (minifloat_element_codec<C> && std::same_as<Writer, code_writer<C::code_bits>>)
      i = put_minifloat_codes(c, x, first, last, k, w);
    for (; i < last; ++i)
      w.put(c.encode_value(finite_or_zero(x, i), k));
  } else if (last - first < random_batch_min) {
    rng_block words{};
    for (std::uint64_t i = first; i < last; ++i) {
      if (i == first || (i & 3u) == 0)
        words = random_block(r.key, r.step, i >> 2);
      w.put(c.encode_value(finite_or_zero(x, i), k, words.v[i & 3u]));
    }
  } else {
    alignas(64) std::uint32_t words[4 * (random_batch / 4 + philox_step_blocks)];
    for (std::uint64_t b = first; b < last; b += random_batch) {
      const std::uint64_t e = last - b < random_batch ? last : b + random_batch;
      const std::uint64_t block0 = b >> 2;
      philox_words(r.key, r.step, block0, static_cast<std::size_t>(((e - 1) >> 2) - block0 + 1),
                   words);
      std::uint64_t i = b;
      if constexpr (has_stochastic_lanes<C>)
        i = put_stochastic_codes(c, x, b, e, k, words + (b - 4 * block0), w);
      for (; i < e; ++i)
        w.put(c.encode_value(finite_or_zero(x, i), k, words[i - 4 * block0]));
    }
  }
}

/// f(s) for a group's scale s, where f is a group's encoder or decoder as a function of its
/// scale alone (the tensor scale fixed). For a one-byte scale over a tensor of many groups, f
/// is looked up in a table of all 256 values made once: NVFP4's encoder and decoder each cost
/// a division or a minifloat conversion per group.
template <class C, class F> class per_scale {
public:
  using value = std::invoke_result_t<const F&, typename C::scale>;

  /// Groups from which the table pays: its 256 calls are a quarter of the calls it saves.
  static constexpr std::uint64_t table_min_groups = 4 * 256;

  per_scale(std::uint64_t groups, F f) : f_(f) {
    if constexpr (one_byte) {
      tabled_ = groups >= table_min_groups;
      if (tabled_)
        for (unsigned s = 0; s < 256; ++s)
          table_[s] = f_(static_cast<typename C::scale>(s));
    }
  }
  COMMPRESS_FORCEINLINE value operator()(typename C::scale s) const {
    if constexpr (one_byte)
      if (tabled_)
        return table_[s];
    return f_(s);
  }

private:
  static constexpr bool one_byte = std::same_as<typename C::scale, std::uint8_t>;
  F f_;
  bool tabled_ = false;
  value table_[one_byte ? 256 : 1];
};

/// The per_scale of f over `groups` groups of codec C.
template <class C, class F> per_scale<C, F> per_scale_of(std::uint64_t groups, F f) {
  return {groups, f};
}

/// How one group is sent: its encoder, or poisoned (a NaN or Inf under
/// nonfinite_policy::propagate: the poisoned scale and all codes 0).
template <class C> struct group_coding {
  typename C::encoder k{};
  bool poisoned = false;
  std::size_t nonfinite = 0; ///< the group's NaN/Inf count
};

/// Group g's statistics and scale, with tensor scale t: stores the scale, returns the coding.
template <class C, element T, class Encoder>
COMMPRESS_FORCEINLINE group_coding<C> code_group(const C& c, nonfinite_policy policy, const T* x,
                                                 const layout<C>& l, typename C::tensor_scale t,
                                                 std::uint64_t g, const Encoder& encoder) {
  const std::uint64_t first = g * l.length;
  const std::uint64_t last = std::min(l.n, first + l.length);
  // Short groups: the next groups' lines are requested while this one is read.
  const measured_group m = measure_group(c, x, first, last, l.n);
  if (m.st.nonfinite != 0 && policy == nonfinite_policy::propagate) {
    l.store_scale(g, C::poisoned_scale);
    return {.poisoned = true, .nonfinite = m.st.nonfinite};
  }
  const typename C::scale s = c.make_scale(m.g, t);
  l.store_scale(g, s);
  return {.k = encoder(s), .nonfinite = m.st.nonfinite};
}

/// Whether encode_groups may code a codec's groups 64 elements at a time, several groups per
/// minifloat_codes call: deterministic minifloat codes of fp32 input. It does where the groups
/// are whole vectors that tile 64 (NVFP4's 16, MX's 32).
template <class C, class T>
inline constexpr bool codes_groups_together =
    minifloat_element_codec<C> && !C::stochastic && std::same_as<T, float>;

/// Encodes groups [g0, g1) (g0 * length a multiple of 8, so its codes start on a byte) with
/// tensor scale t; returns their NaN/Inf count.
template <class C, element T>
std::size_t encode_groups(const C& c, nonfinite_policy policy, const random_source& r, const T* x,
                          const layout<C>& l, typename C::tensor_scale t, std::uint64_t g0,
                          std::uint64_t g1) {
  code_writer<C::code_bits> w{l.codes(c) + g0 * l.length * C::code_bits / 8};
  std::size_t bad = 0;
  const auto encoder =
      per_scale_of<C>(g1 - g0, [&](typename C::scale s) { return c.make_encoder(s, t); });
  std::uint64_t g = g0;
  if constexpr (codes_groups_together<C, T>) {
    if (g0 < g1 && l.length < 64 && 64 % l.length == 0 && l.length % simd::lanes == 0) {
      const std::uint64_t per = 64 / l.length;
      const std::size_t group_bytes = l.length * C::code_bits / 8;
      for (; g + per <= g1 && (g + per) * l.length <= l.n; g += per) {
        float k[simd::vectors_per_64];
        bool poisoned[64 / simd::lanes];
        for (std::uint64_t j = 0; j < per; ++j) {
          const group_coding<C> gc = code_group(c, policy, x, l, t, g + j, encoder);
          bad += gc.nonfinite;
          poisoned[j] = gc.poisoned;
          std::fill_n(k + j * l.length / simd::lanes, l.length / simd::lanes, gc.k);
        }
        with_element_format(
            c, [&]<minifloat F>() { minifloat_codes<F>(x + g * l.length, 64, k, w.out); });
        for (std::uint64_t j = 0; j < per; ++j)
          if (poisoned[j])
            std::fill_n(w.out + j * group_bytes, group_bytes, static_cast<unsigned char>(0));
        w.out += 8 * C::code_bits;
      }
    }
  }
  for (; g < g1; ++g) {
    const std::uint64_t first = g * l.length;
    const std::uint64_t last = std::min(l.n, first + l.length);
    const group_coding<C> gc = code_group(c, policy, x, l, t, g, encoder);
    bad += gc.nonfinite;
    put_codes(c, x, first, last, gc.poisoned, gc.k, r, w);
  }
  w.finish();
  return bad;
}

/// The values of elements [first, last) of the decoded body (first a multiple of 8), in
/// order: runs of 64 decoded together as put_64(i, values) for elements [i, i + 64) (values:
/// 64 floats from a cache-line boundary; i - first a multiple of 64), the others as
/// put(i, value). Byte codes other than minifloat ones are read in place, as put(i, value),
/// unless byte_codes_in_runs: a caller that streams its output wants whole runs.
template <class C, class Put, class Put64>
COMMPRESS_FORCEINLINE void for_each_value(const C& c, const layout<C, const unsigned char>& l,
                                          std::uint64_t first, std::uint64_t last, Put&& put,
                                          Put64&& put_64, bool byte_codes_in_runs = false) {
  if (first == last) // an empty tensor's body is empty: no tensor scale to read
    return;
  const typename C::tensor_scale t = l.load_tensor_scale();
  const auto decoder = per_scale_of<C>((last - first) / l.length,
                                       [&](typename C::scale s) { return c.make_decoder(s, t); });
  code_reader<C::code_bits> r(l.codes(c), first);
  // fn(s, e, d) for each group's part [s, e) of elements [from, to), d its decoder; the calls
  // walk [first, last) in order, so the group advances without a division.
  std::uint64_t g = first / l.length;
  std::uint64_t group_end = (g + 1) * l.length;
  typename C::decoder d = decoder(l.load_scale(g));
  const auto each_group = [&](std::uint64_t from, std::uint64_t to, auto&& fn) {
    for (std::uint64_t s = from; s < to;) {
      if (s == group_end) {
        group_end += l.length;
        d = decoder(l.load_scale(++g));
      }
      const std::uint64_t e = std::min(to, group_end);
      fn(s, e, d);
      s = e;
    }
  };
  // Codes narrower than a byte, and minifloat codes, 64 at a time (from a byte boundary, as
  // first is a multiple of 8), unpacked together; a minifloat code's value from a table, times
  // its own group's decoder. Other byte codes are read in place where the output is not
  // streamed: their runs would cost a copy through the stack. The codes of the element
  // prefetch_ahead on are prefetched (a prefetch past the body's end is harmless).
  const bool in_batches = C::code_bits < 8 || minifloat_element_codec<C> || byte_codes_in_runs;
  const float* minifloat_table = nullptr;
  if constexpr (minifloat_element_codec<C>)
    minifloat_table = minifloat_values(c.element_format());
  std::uint64_t i = first;
  for (; in_batches && last - i >= 64; i += 64) {
    simd::prefetch(r.in + 8 * C::code_bits * (prefetch_ahead / 64));
    const simd::b64 codes = simd::load_packed<C::code_bits>(r.in);
    r.in += 8 * C::code_bits;
    alignas(64) float value[64];
    if constexpr (minifloat_element_codec<C>) {
      float ds[64];
      // A product is NaN only where a decoder is NaN (from the wire, with any payload), or 0 or
      // Inf against an Inf or 0 value (x86 gives its negative NaN): only then is it made
      // mul_rn's canonical one. The table's own NaN is canonical and is the first operand.
      bool zero_or_nonfinite = false;
      each_group(i, i + 64, [&](std::uint64_t s, std::uint64_t e, float k) {
        std::fill(ds + (s - i), ds + (e - i), k);
        zero_or_nonfinite |= !(commpress::detail::is_finite(k) && k != 0.0f);
      });
      for (unsigned q = 0; q < simd::vectors_per_64; ++q)
        simd::store(value + q * simd::lanes,
                    simd::mul(simd::gather(minifloat_table, simd::widen_u8(codes, q)),
                              simd::load(ds + q * simd::lanes)));
      if (zero_or_nonfinite)
        for (unsigned q = 0; q < simd::vectors_per_64; ++q)
          simd::store(value + q * simd::lanes,
                      simd::canonical_nan(simd::load(value + q * simd::lanes)));
    } else {
      alignas(64) unsigned char code[64];
      simd::store_bytes(code, codes);
      each_group(i, i + 64, [&](std::uint64_t s, std::uint64_t e, typename C::decoder k) {
        for (std::uint64_t j = s; j < e; ++j)
          value[j - i] = c.decode_value(code[j - i], k);
      });
    }
    put_64(i, static_cast<const float*>(value));
  }
  each_group(i, last, [&](std::uint64_t s, std::uint64_t e, typename C::decoder k) {
    for (std::uint64_t j = s; j < e; ++j)
      put(j, c.decode_value(r.next(), k));
  });
}

/// Elements [first, last) of the decoded body (first a multiple of 8): out = value, or
/// out += weight * value when Accumulate (each operation rounded once, a NaN canonical). The
/// output of a large tensor is written in runs of 64 with non-temporal stores, wherever it
/// starts relative to a cache line (detail/streamed_runs.hpp).
template <bool Accumulate, class C, class T>
void decode_range(const C& c, const layout<C, const unsigned char>& l, std::uint64_t first,
                  std::uint64_t last, T* out, float weight) {
  const auto put = [&](std::uint64_t i, float v) {
    if constexpr (Accumulate)
      out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
    else
      out[i] = from_float<T>(v);
  };
  if (!Accumulate && streams_output(out, l.n)) {
    streamed_runs<T> runs(out, first);
    for_each_value(
        c, l, first, last, put,
        [&](std::uint64_t i, const float* values) { runs.put_64(i, values); },
        /*byte_codes_in_runs=*/true);
    runs.finish();
    return;
  }
  if constexpr (std::same_as<T, float>) {
    for_each_value(c, l, first, last, put, [&](std::uint64_t i, const float* values) {
      if constexpr (!Accumulate) {
        std::copy_n(values, 64, out + i);
      } else {
        for (unsigned q = 0; q < simd::vectors_per_64; ++q) {
          float* const o = out + i + q * simd::lanes;
          const simd::vf v = simd::load(values + q * simd::lanes);
          simd::store(
              o, simd::canonical_nan(simd::add(simd::load(o), simd::mul(simd::splat(weight), v))));
        }
      }
    });
  } else {
    // fp16's byte codes too go in runs: its rounding's branches keep an element-by-element
    // loop scalar. bf16's rounding vectorizes in place.
    static_assert(!Accumulate, "commpress: decode_accumulate adds into fp32");
    for_each_value(
        c, l, first, last, put,
        [&](std::uint64_t i, const float* values) { store_elements_64(out + i, values); },
        /*byte_codes_in_runs=*/std::same_as<T, half>);
  }
}

} // namespace cpu::detail::scaled_kit

namespace cpu::detail {

/// The values of elements [first, last) of an n-element body of a block-scaled codec at
/// dst[0, last - first) (first a multiple of 8): what a transform adapter (backend/cpu/rotated.hpp)
/// takes back window by window.
template <block_scaled_codec C>
void decode_values(const C& c, std::uint64_t n, const unsigned char* body, std::uint64_t first,
                   std::uint64_t last, float* dst) {
  const scaled_kit::layout<C, const unsigned char> l(c, n, body);
  scaled_kit::for_each_value(
      c, l, first, last, [&](std::uint64_t i, float v) { dst[i - first] = v; },
      [&](std::uint64_t i, const float* values) { std::copy_n(values, 64, dst + (i - first)); });
}

} // namespace cpu::detail

namespace detail {

/// The kit's implementation under cpu::seq: codec_impl<C, cpu::seq_t> for a block-scaled codec
/// whose body does not vary (below); a codec with a variable body (qsgd) has its own
/// codec_impl, which runs this one for its fixed-width body.
template <block_scaled_codec C> struct scaled_seq_impl {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): roundtrip encodes
  /// into the workspace and decodes.
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = false;

  static std::uint64_t workspace_bytes(const C&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const C& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body, std::span<std::byte>) {
    namespace kit = cpu::detail::scaled_kit;
    const kit::layout<C> l(c, in.size(), body);
    typename C::tensor_scale t{};
    if constexpr (scaled::has_tensor_scale<C>) {
      if (in.empty())
        return 0;
      t = c.make_tensor_scale(kit::statistics_of(in.data(), 0, in.size(),
                                                 cpu::detail::ahead_of(in.data(), 0, in.size()))
                                  .amax());
      l.store_tensor_scale(t);
    }
    return kit::encode_groups(c, ctx.on_nonfinite, kit::random_source::of(ctx), in.data(), l, t, 0,
                              scaled::n_groups(c, l.n));
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const C& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    const cpu::detail::scaled_kit::layout<C, const unsigned char> l(c, out.size(), body);
    cpu::detail::scaled_kit::decode_range<false>(c, l, 0, out.size(), out.data(), 1.0f);
  }

  static void accumulate_body(const cpu::seq_t&, const C& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    const cpu::detail::scaled_kit::layout<C, const unsigned char> l(c, acc.size(), body);
    cpu::detail::scaled_kit::decode_range<true>(c, l, 0, acc.size(), acc.data(), weight);
  }
};

/// The kit's implementation under cpu::par (as scaled_seq_impl).
template <block_scaled_codec C> struct scaled_par_impl {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): roundtrip encodes
  /// into the workspace and decodes.
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = false;

  using seq = scaled_seq_impl<C>;

  static std::uint64_t workspace_bytes(const C&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const cpu::par_t& p, const C& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    namespace kit = cpu::detail::scaled_kit;
    const std::uint64_t n = in.size();
    if (!cpu::detail::splits(p, n))
      return seq::encode_body(cpu::seq, c, ctx, in, body, ws);
    const kit::layout<C> l(c, n, body);
    const T* x = in.data();
    typename C::tensor_scale t{};
    if constexpr (scaled::has_tensor_scale<C>) {
      t = c.make_tensor_scale(statistics(p, x, 0, n).amax());
      l.store_tensor_scale(t);
    }
    const kit::random_source r = kit::random_source::of(ctx);
    const std::uint64_t step = cpu::detail::range_elements(p);
    if (l.length < step)
      return cpu::detail::parallel_sum(
          p, scaled::n_groups(c, n), cpu::detail::group_step(p, l.length),
          [&](std::uint64_t g0, std::uint64_t g1) {
            return kit::encode_groups(c, ctx.on_nonfinite, r, x, l, t, g0, g1);
          });
    // Long groups: each group's statistics, then its codes, over element ranges.
    std::size_t bad = 0;
    for (std::uint64_t g = 0; g < scaled::n_groups(c, n); ++g) {
      const std::uint64_t first = g * l.length;
      const std::uint64_t last = std::min(n, first + l.length);
      const kit::measured_group m = measure_long_group(p, c, x, first, last);
      bad += m.st.nonfinite;
      const bool poisoned = m.st.nonfinite != 0 && ctx.on_nonfinite == nonfinite_policy::propagate;
      const typename C::scale s = poisoned ? C::poisoned_scale : c.make_scale(m.g, t);
      l.store_scale(g, s);
      const typename C::encoder k = poisoned ? typename C::encoder{} : c.make_encoder(s, t);
      cpu::detail::parallel_for(p, last - first, step, [&](std::uint64_t a, std::uint64_t b) {
        kit::code_writer<C::code_bits> w{l.codes(c) + (first + a) * C::code_bits / 8};
        kit::put_codes(c, x, first + a, first + b, poisoned, k, r, w);
        w.finish();
      });
    }
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::par_t& p, const C& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    if (!cpu::detail::splits(p, out.size()))
      return seq::decode_body(cpu::seq, c, h, body, out);
    const cpu::detail::scaled_kit::layout<C, const unsigned char> l(c, out.size(), body);
    cpu::detail::parallel_for(p, out.size(), cpu::detail::range_elements(p),
                              [&](std::uint64_t first, std::uint64_t last) {
                                cpu::detail::scaled_kit::decode_range<false>(c, l, first, last,
                                                                             out.data(), 1.0f);
                              });
  }

  static void accumulate_body(const cpu::par_t& p, const C& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    if (!cpu::detail::splits(p, acc.size()))
      return seq::accumulate_body(cpu::seq, c, h, body, acc, weight);
    const cpu::detail::scaled_kit::layout<C, const unsigned char> l(c, acc.size(), body);
    cpu::detail::parallel_for(p, acc.size(), cpu::detail::range_elements(p),
                              [&](std::uint64_t first, std::uint64_t last) {
                                cpu::detail::scaled_kit::decode_range<true>(c, l, first, last,
                                                                            acc.data(), weight);
                              });
  }

private:
  /// The long group x[first, last) measured as kit::measure_group does, on p's threads: its
  /// statistics reduced over element ranges, or where C needs the norm, over the chunks of its
  /// norm's sum, each chunk's statistics taken by the thread that sums it (a maximum and a
  /// count: the same in any order).
  template <element T>
  static cpu::detail::scaled_kit::measured_group measure_long_group(const cpu::par_t& p, const C& c,
                                                                    const T* x, std::uint64_t first,
                                                                    std::uint64_t last) {
    namespace kit = cpu::detail::scaled_kit;
    kit::measured_group m{.st = {}, .g = {.count = last - first}};
    if (!c.needs_norm()) {
      m.st = statistics(p, x, first, last);
    } else {
      kit::statistics lane[canonical_lanes]; // one per outer lane, whose chunks one thread sums
      std::size_t unused = 0;
      m.g.l2_norm = scaled::l2_norm_from_sum(cpu::detail::parallel_canonical_chunked_sum(
          p, last - first, unused, [&](std::uint64_t a, std::uint64_t len, std::size_t&) {
            lane[a / canonical_chunk % canonical_lanes].merge(
                kit::statistics_of(x, first + a, first + a + len,
                                   cpu::detail::ahead_of(x, first + a, first + a + len)));
            return kit::chunk_sum_of_squares(x, first + a, len);
          }));
      for (const kit::statistics& st : lane)
        m.st.merge(st);
    }
    m.g.amax = m.st.amax();
    return m;
  }

  /// Statistics of x[first, last), reduced over element ranges.
  template <element T>
  static cpu::detail::scaled_kit::statistics statistics(const cpu::par_t& p, const T* x,
                                                        std::uint64_t first, std::uint64_t last) {
    namespace kit = cpu::detail::scaled_kit;
    return cpu::detail::parallel_reduce(
        p, last - first, cpu::detail::range_elements(p), kit::statistics{},
        [&](std::uint64_t a, std::uint64_t b) {
          return kit::statistics_of(x, first + a, first + b,
                                    cpu::detail::ahead_of(x, first + a, first + b));
        },
        [](kit::statistics s, const kit::statistics& o) {
          s.merge(o);
          return s;
        });
  }
};

template <block_scaled_codec C>
requires(!variable_body_codec<C>) struct codec_impl<C, cpu::seq_t> : scaled_seq_impl<C> {
};

template <block_scaled_codec C>
requires(!variable_body_codec<C>) struct codec_impl<C, cpu::par_t> : scaled_par_impl<C> {
};

} // namespace detail
} // namespace commpress

// qsgd, a codec of the kit with a second, variable-length body: its codec_impl goes wherever
// the kit's does, so no program runs qsgd's Elias configuration through the kit.
#include "commpress/backend/cpu/qsgd.hpp"
