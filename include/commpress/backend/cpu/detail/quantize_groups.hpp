// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The one group pipeline of the CPU quantizer, shared by encode, decode, decode_accumulate,
/// roundtrip and the fused error-feedback step under every CPU policy (cpu::seq, and cpu::par
/// on ranges of groups or elements): a group's statistics, its record and coder, then its
/// codes.
///
/// Two layers:
/// - Drivers walk the groups with the codec's configuration as run-time values. They form each
///   group's statistics and record, handle what the vector kernels do not (a group holding a
///   NaN or Inf, and a run's elements before its first multiple of 8 and, to encode, past its
///   last) one element at a time, and hand each group's run from its first multiple of 8 to the
///   kernels (blocks of a length off a multiple of 8: a batch of groups as one run, each element
///   scaled by its group's coder first to encode, and given its group's record after it to
///   decode; per-column scales: each row's run of a tile of columns, from the byte of codes it
///   starts in, scaled by its columns' coders before the kernel and given their records after
///   it); half-precision elements reach them widened to fp32 a batch at a time (a batch of short
///   groups, or of one long group's elements), and leave them through a buffer. Only the element
///   type is a template parameter.
/// - Kernels (templates on the code width, the range and the rounding, or on accumulation)
///   take whole runs: a batch of short blocks, or the chunks of one long group, so that a
///   kernel is chosen once per batch of about 1024 elements rather than once per group. The
///   code widths 2, 4 and 8 have kernels of their own; the others share one (B = 0).
/// Every path computes the per-element expressions of compress/quantize.hpp, so the bytes do
/// not depend on which one ran.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/philox.hpp"
#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/quantize_kernels.hpp"
#include "commpress/backend/cpu/detail/reduce.hpp"
#include "commpress/backend/cpu/detail/streamed_runs.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/body_checksum.hpp"

namespace commpress::cpu::detail::quantize_groups {

using commpress::detail::bits_to_float;
using commpress::detail::is_finite;
using commpress::detail::screen;

inline constexpr quant_range sym = quant_range::symmetric;

/// Groups of up to this many elements together are encoded a batch at a time: the statistics
/// of all, then the codes of all. A group's codes wait for its scale (a reduction and two
/// divisions); in a batch the scales of short blocks are formed back to back, and the codes
/// still find the batch (4 KiB) in L1.
inline constexpr std::size_t batch_elements = 1024;

/// A group longer than this is read from memory again by its code pass (not from L1), which
/// then prefetches.
inline constexpr std::size_t l1_group = 4096;

/// Largest block of the fused error-feedback step, whose h lives on the stack.
inline constexpr std::uint32_t fused_max_block = 4096;

// --- the configuration at run time, and the element-wise definitions --------------------------

/// The run-time view of a quantize call.
struct config {
  quant_range range;
  unsigned bits;
  bool stochastic;
  nonfinite_policy policy;
  std::size_t len;   ///< elements per group (n for a per-tensor scale, columns per row)
  std::size_t n;     ///< elements of the tensor
  std::size_t codes; ///< byte offset of the codes in the body

  config(const quantize& c, nonfinite_policy p, std::size_t elements)
      : range(c.range), bits(c.bits), stochastic(c.round == rounding::stochastic), policy(p),
        len(c.granularity == scale_granularity::tensor ? elements : c.group), n(elements),
        codes(static_cast<std::size_t>(c.n_groups(elements) * c.record_bytes())) {}
};

/// Element i's uniform, uniform_from_bits(random_u32(key, step, i)), drawing each Philox block
/// once for its four consecutive elements instead of once per element.
struct uniform_stream {
  rng_key key;
  std::uint64_t step;
  std::uint64_t block = ~std::uint64_t{0};
  rng_block words{};
  /// Element i draws the word of stream index first_index + i (a multiple of 4: a block start).
  std::uint64_t first_index = 0;

  COMMPRESS_FORCEINLINE float operator()(std::uint64_t element) {
    const std::uint64_t i = first_index + element;
    if ((i >> 2) != block) {
      block = i >> 2;
      words = random_block(key, step, block);
    }
    return uniform_from_bits(words.v[i & 3u]);
  }
};

/// The code of element i (global index) with value x in a group with coder k.
COMMPRESS_FORCEINLINE std::uint32_t code_of(const config& c, float x, quantize::coder k,
                                            uniform_stream& u, std::size_t i) {
  return c.stochastic ? quantize::encode_stochastic(c.range, c.bits, x, k, u(i))
                      : quantize::encode_nearest(c.range, c.bits, x, k);
}

/// Folds v into a group's statistics: absmax (symmetric) or min and max (asymmetric). The
/// comparisons are order-independent for non-NaN values; NaN is ignored here because its group
/// is poisoned separately.
COMMPRESS_FORCEINLINE void fold(quant_range r, float v, float& s0, float& s1) {
  if (r == sym) {
    const float a = commpress::detail::abs(v);
    s0 = a > s0 ? a : s0;
  } else {
    s0 = v < s0 ? v : s0;
    s1 = v > s1 ? v : s1;
  }
}
constexpr float stat0_init(quant_range r) {
  return r == sym ? 0.0f : std::numeric_limits<float>::infinity();
}
inline constexpr float stat1_init = -std::numeric_limits<float>::infinity();

COMMPRESS_FORCEINLINE void store_record(quant_range r, unsigned char* body, std::size_t g,
                                        quantize::record rec) {
  if (r == sym) {
    store_word<float>(body + 4 * g, rec.a);
  } else {
    store_word<float>(body + 8 * g, rec.a);
    store_word<float>(body + 8 * g + 4, rec.b);
  }
}
COMMPRESS_FORCEINLINE quantize::record load_record(quant_range r, const unsigned char* body,
                                                   std::size_t g) {
  if (r == sym)
    return {load_word<float>(body + 4 * g), 0.0f};
  return {load_word<float>(body + 8 * g), load_word<float>(body + 8 * g + 4)};
}

/// The first element of [begin, end) on a multiple of 8, where a group's codes begin a byte
/// the vector kernels can start on; `end` if there is none.
constexpr std::size_t first_whole_eight(std::size_t begin, std::size_t end) {
  const std::size_t up = (begin + 7) / 8 * 8;
  return up < end ? up : end;
}

/// Calls fn(g, b, e) for each group g (of c.len elements) that holds elements of [first, last),
/// in order, [b, e) its elements there.
template <class Fn>
COMMPRESS_FORCEINLINE void for_each_group(const config& c, std::size_t first, std::size_t last,
                                          Fn&& fn) {
  // Every group but the first is entered at its first element, so g counts up (no division
  // per group).
  for (std::size_t b = first, g = first / c.len; b < last; ++g) {
    const std::size_t e = (g + 1) * c.len < last ? (g + 1) * c.len : last;
    fn(g, b, e);
    b = e;
  }
}

/// fn.template operator()<R>() with R c's range: the loops over groups, which may be as short
/// as one element, take the range once as a template argument, not as a branch per group.
template <class Fn> COMMPRESS_FORCEINLINE void with_range(const config& c, Fn&& fn) {
  if (c.range == sym)
    fn.template operator()<sym>();
  else
    fn.template operator()<quant_range::asymmetric>();
}

/// The elements [0, w) of one group under one coder or record: vector(j) for j = 0, lanes, ...
/// while a whole vector fits, then, where Overlap and w >= lanes, vector(w - lanes) for the rest
/// (its first elements done twice), else element(j) for each of the rest. On the portable layer
/// element(j) for every j: an element loop, which the compiler vectorizes better there, as
/// GCC 12 keeps the splat 16-lane operands partly on the stack (bench/README.md).
template <bool Overlap, class Vector, class Element>
COMMPRESS_FORCEINLINE void for_group_lanes(std::size_t w, Vector&& vector, Element&& element) {
  std::size_t j = 0;
#if !defined(COMMPRESS_SIMD_PORTABLE)
  for (; j + simd::lanes <= w; j += simd::lanes)
    vector(j);
  if (Overlap && j != w && w >= simd::lanes) {
    vector(w - simd::lanes);
    return;
  }
#else
  (void)vector;
#endif
  for (; j < w; ++j)
    element(j);
}

/// Writes the codes of elements [begin, end), code(i) giving element i's. Runs are visited in
/// increasing order; a group of eight that straddles two runs is collected in `buf` and
/// packed when its last code arrives (the caller packs a short final group).
template <class CodeFn>
COMMPRESS_FORCEINLINE void pack_run(unsigned bits, std::size_t begin, std::size_t end,
                                    std::uint32_t (&buf)[8], unsigned char* codes, CodeFn&& code) {
  std::size_t i = begin;
  for (; i < end && (i & 7u) != 0; ++i) {
    buf[i & 7u] = code(i);
    if ((i & 7u) == 7u)
      commpress::detail::pack_group(buf, 8, bits, codes + (i >> 3) * bits);
  }
  for (; i + 8 <= end; i += 8) {
    std::uint32_t eight[8];
    for (unsigned k = 0; k < 8; ++k)
      eight[k] = code(i + k);
    commpress::detail::pack_group(eight, 8, bits, codes + (i >> 3) * bits);
  }
  for (; i < end; ++i)
    buf[i & 7u] = code(i); // fewer than 8 left: never completes a group
}

/// Calls sink(i, code) for the elements [begin, end).
template <class Sink>
COMMPRESS_FORCEINLINE void unpack_run(unsigned bits, std::size_t begin, std::size_t end,
                                      const unsigned char* codes, Sink&& sink) {
  std::size_t i = begin;
  for (; i < end && (i & 7u) != 0; ++i)
    sink(i, commpress::detail::unpack_one(codes, i, bits));
  for (; i + 8 <= end; i += 8) {
    std::uint32_t eight[8];
    commpress::detail::unpack_group(codes + (i >> 3) * bits, 8, bits, eight);
    for (unsigned k = 0; k < 8; ++k)
      sink(i + k, eight[k]);
  }
  for (; i < end; ++i)
    sink(i, commpress::detail::unpack_one(codes, i, bits));
}

// --- what the drivers hand to the kernels -----------------------------------------------------

/// Elements [begin, end), both multiples of 8, coded with one coder: a group's, or unit_coder
/// for elements already scaled by their own coders.
struct code_run {
  std::size_t begin;
  std::size_t end;
  quantize::coder coder;
};

/// Elements [begin, end) of one group (begin a multiple of 8), with the group's record.
struct value_run {
  std::size_t begin;
  std::size_t end;
  quantize::record record;
};

/// Where an encode kernel writes: the code of element i (of the kernel's x) at bit i * bits of
/// `codes`; its random word is that of element first_index + i. With a checksum, the code bytes
/// of every finished chunk are announced to `sum`, at codes_at + their offset.
struct code_sink {
  unsigned bits;
  rng_key key;
  std::uint64_t step;
  std::uint64_t first_index;
  unsigned char* codes;
  format::body_checksum* sum;
  std::size_t codes_at;

  COMMPRESS_FORCEINLINE void progress(std::size_t elements) const {
    if (sum != nullptr)
      sum->written(codes_at + elements / 8 * bits);
  }
};

// --- kernels ------------------------------------------------------------------------------

/// The codes of the runs of x (n elements) into `out`.
///
/// A run that its statistics pass has just read (at most l1_group elements) comes from L1.
/// Where its codes take long (stochastic rounding, or a batch of groups shorter than a batch,
/// each with its record), its pass asks for the lines one batch past those that the
/// statistics pass asked for: otherwise no memory request is made while they are computed,
/// and a kernel bound by memory waits that long. A long group's nearest codes are quick, and
/// those extra requests made 2-bit codes slower (bench/README.md).
template <unsigned B, bool Asym, bool Stochastic>
void encode_runs(const float* x, std::size_t n, const code_run* runs, std::size_t count,
                 const code_sink& out) {
  const unsigned b = simd::width<B>(out.bits);
  alignas(64) std::uint32_t words[Stochastic ? code_chunk : 1];
  for (std::size_t r = 0; r < count; ++r) {
    const code_run run = runs[r];
    const std::size_t len = run.end - run.begin;
    const bool reread = len > l1_group;
    const bool ahead = Stochastic || len < batch_elements;
    for (std::size_t i = run.begin; i < run.end; i += code_chunk) {
      const std::size_t m = run.end - i < code_chunk ? run.end - i : code_chunk;
      if constexpr (Stochastic)
        philox_words(out.key, out.step, (out.first_index + i) >> 2, (m + 3) / 4, words);
      const std::size_t next_batch = n - i > batch_elements ? i + batch_elements : n;
      const prefetch_stream stream = reread  ? prefetch_stream{x + i, x + n}
                                     : ahead ? prefetch_stream{x + next_batch, x + n}
                                             : prefetch_stream{};
      encode_codes<B, Asym, Stochastic>(x + i, m, b, run.coder, words, out.codes + i / 8 * b,
                                        stream);
      out.progress(i + m);
    }
  }
}

/// Decodes m codes of one run, at `in`, to out[begin, begin + m): its whole 64s through
/// `stream` (off a cache line), the rest with plain stores.
template <unsigned B, bool Asym, decode_mode Mode>
void decode_run_staged(const unsigned char* in, std::size_t m, unsigned b, quantize::record rec,
                       float* out, std::size_t begin, streamed_runs<float>& stream) {
  std::size_t k = 0;
  for (; k + 64 <= m; k += 64) {
    alignas(64) float values[64];
    decode_codes<B, Asym, Mode>(in + k / 8 * b, 64, b, rec, 1.0f, values);
    stream.put_64(begin + k, values);
  }
  decode_codes<B, Asym, Mode>(in + k / 8 * b, m - k, b, rec, 1.0f, out + begin + k);
}

/// Decodes the runs from `codes` (element i's code at bit i * bits) into out (n elements):
/// out = value, or with Accumulate out += weight * value. Where `stream` is not null, each run's
/// whole 64s are written with non-temporal stores (every run's begin a multiple of 16 from the
/// first's; the caller finishes `stream`): straight from the registers on a cache line, through
/// `stream` off one.
template <unsigned B, bool Asym, bool Accumulate>
void decode_runs(const unsigned char* codes, unsigned bits, const value_run* runs,
                 std::size_t count, float* out, std::size_t n, float weight,
                 streamed_runs<float>* stream) {
  const unsigned b = simd::width<B>(bits);
  const bool staged = stream != nullptr && !stream->on_line();
  for (std::size_t r = 0; r < count; ++r) {
    const value_run run = runs[r];
    const unsigned char* in = codes + run.begin / 8 * b;
    const std::size_t m = run.end - run.begin;
    float* const o = out + run.begin;
    const bool finite = is_finite(run.record.a) && (!Asym || is_finite(run.record.b));
    if constexpr (Accumulate) { // an accumulator is read: prefetched ahead
      decode_codes<B, Asym, decode_mode::accumulate>(in, m, b, run.record, weight, o, false,
                                                     {o, out + n});
    } else if (staged) {
      if (finite)
        decode_run_staged<B, Asym, decode_mode::store>(in, m, b, run.record, out, run.begin,
                                                       *stream);
      else
        decode_run_staged<B, Asym, decode_mode::store_canonical>(in, m, b, run.record, out,
                                                                 run.begin, *stream);
    } else if (finite) {
      decode_codes<B, Asym, decode_mode::store>(in, m, b, run.record, weight, o, stream != nullptr);
    } else {
      decode_codes<B, Asym, decode_mode::store_canonical>(in, m, b, run.record, weight, o,
                                                          stream != nullptr);
    }
  }
}

/// What the fused error-feedback kernel works on: the groups of `len` elements (a multiple of
/// 8) from element `begin` to `end`, the first of them group `group`; e holds elements
/// [begin, end) (in place, or a copy, whose e_stream then prefetches nothing).
struct error_batch {
  const config* c;
  const float* g;
  float* e;
  prefetch_stream e_stream;
  std::size_t begin;
  std::size_t end;
  std::size_t group;
  error_update rule;
  unsigned char* body;
  code_sink out;
};

/// A group of the fused step that the vector kernel does not take (its h holds a NaN or Inf,
/// or its length is not a multiple of 8: the tensor's last group), one element at a time:
/// encode's statistics and codes of screen(h), and the rule applied to h - deQ. Returns how
/// many elements held their e.
inline std::uint32_t encode_error_elementwise(const error_batch& a, std::size_t begin,
                                              std::size_t m, const float* h, float* e,
                                              std::uint32_t max_bits, std::size_t grp) {
  const config& c = *a.c;
  std::size_t ignored = 0; // encode's own count of non-finite h is not reported by ef
  float s0 = bits_to_float(max_bits);
  if (max_bits >= 0x7f800000u) { // a NaN or Inf h: encode's element-wise statistics
    s0 = 0.0f;
    float unused = stat1_init;
    bool poisoned = false;
    for (std::size_t j = 0; j < m; ++j) {
      poisoned |= !is_finite(h[j]);
      fold(sym, screen(h[j], c.policy, ignored), s0, unused);
    }
    if (poisoned && c.policy != nonfinite_policy::zero_and_count)
      s0 = bits_to_float(0x7fc00000u);
  }
  const quantize::record rec = quantize::make_record(sym, c.bits, s0, 0.0f);
  store_record(sym, a.body, grp, rec);
  const quantize::coder k = quantize::make_coder(sym, c.bits, s0, 0.0f);
  uniform_stream u{a.out.key, a.out.step};
  std::uint32_t buf[8] = {};
  std::uint32_t held = 0;
  // The group starts on a multiple of 8; only the tensor's last group ends off one.
  pack_run(c.bits, begin, begin + m, buf, a.out.codes, [&](std::size_t i) {
    const std::uint32_t code = code_of(c, screen(h[i - begin], c.policy, ignored), k, u, i);
    // e = h + (-1) * deQ, as decode_accumulate(payload, h, -1) computes it, where finite.
    const float v = quantize::decode_value(sym, c.bits, code, rec);
    held += a.rule(commpress::detail::add_rn(h[i - begin], commpress::detail::mul_rn(-1.0f, v)),
                   e[i - begin])
                ? 1u
                : 0u;
    return code;
  });
  if (m % 8 != 0)
    commpress::detail::pack_group(buf, static_cast<unsigned>(m % 8), c.bits,
                                  a.out.codes + (begin + m) / 8 * c.bits);
  return held;
}

/// One error-feedback step fused with the encode, per group of the batch: h = screen(g) + e,
/// the body gets Q(h), and e is updated from the fresh error h - deQ(Q(h)) by `rule` (plain EF:
/// e = fresh where finite; LoCo: the moving average), `held` counting the elements that kept
/// their e. The same operations, in the same order, as the policies' unfused sequence (h in a
/// workspace, encode, decode_accumulate with weight -1, the rule), in one pass over g and e.
/// Returns the non-finite count of g.
template <unsigned B, bool Stochastic>
std::size_t encode_error_batch(const error_batch& a, std::size_t& held) {
  const config& c = *a.c;
  const unsigned b = simd::width<B>(c.bits);
  const bool zero = c.policy == nonfinite_policy::zero_and_count;
  const bool replace = a.rule.keep == 0.0f;
  alignas(64) float h[fused_max_block];
  alignas(64) std::uint32_t words[Stochastic ? code_chunk : 1];
  std::size_t bad = 0;
  for (std::size_t grp = a.group, begin = a.begin; begin < a.end; ++grp, begin += c.len) {
    const std::size_t m = a.end - begin < c.len ? a.end - begin : c.len;
    a.out.progress(begin); // the groups before this one
    float* const e = a.e + (begin - a.begin);
    const prefetch_stream g_stream{a.g + begin, a.g + c.n};
    const screened_sum sums = zero ? add_screened<true>(a.g + begin, e, m, h, g_stream)
                                   : add_screened<false>(a.g + begin, e, m, h, g_stream);
    bad += sums.nonfinite;
    const std::uint32_t key = sums.max_bits;
    if (key >= 0x7f800000u || m % 8 != 0) {
      held += encode_error_elementwise(a, begin, m, h, e, key, grp);
      continue;
    }
    const float s0 = bits_to_float(key);
    const quantize::record rec = quantize::make_record(sym, b, s0, 0.0f);
    store_record(sym, a.body, grp, rec);
    const quantize::coder k = quantize::make_coder(sym, b, s0, 0.0f);
    const bool bounded = key < 0x7e800000u; // absmax < 2^126: h - deQ is finite
    for (std::size_t i = 0; i < m; i += code_chunk) {
      const std::size_t mm = m - i < code_chunk ? m - i : code_chunk;
      if constexpr (Stochastic)
        philox_words(a.out.key, a.out.step, (begin + i) >> 2, (mm + 3) / 4, words);
      unsigned char* const out = a.out.codes + (begin + i) / 8 * b;
      const prefetch_stream ahead =
          a.e_stream.base == nullptr
              ? prefetch_stream{}
              : prefetch_stream{a.e_stream.base + (begin - a.begin) + i, a.e_stream.end};
      if (replace && bounded)
        held += encode_error_codes<B, Stochastic, true, false>(h + i, mm, b, k, rec, words, out,
                                                               a.rule, e + i, ahead);
      else if (replace)
        held += encode_error_codes<B, Stochastic, true, true>(h + i, mm, b, k, rec, words, out,
                                                              a.rule, e + i, ahead);
      else if (bounded)
        held += encode_error_codes<B, Stochastic, false, false>(h + i, mm, b, k, rec, words, out,
                                                                a.rule, e + i, ahead);
      else
        held += encode_error_codes<B, Stochastic, false, true>(h + i, mm, b, k, rec, words, out,
                                                               a.rule, e + i, ahead);
    }
  }
  return bad;
}

// --- choosing a kernel ----------------------------------------------------------------------

/// Calls f(std::integral_constant<unsigned, B>{}) with the kernel width of `bits`: itself for
/// 2, 4 and 8, 0 (given at run time) for the others.
template <class F> decltype(auto) with_width(unsigned bits, F&& f) {
  switch (bits) {
  case 8:
    return f(std::integral_constant<unsigned, 8>{});
  case 4:
    return f(std::integral_constant<unsigned, 4>{});
  case 2:
    return f(std::integral_constant<unsigned, 2>{});
  default:
    return f(std::integral_constant<unsigned, 0>{});
  }
}

using encode_kernel = void (*)(const float*, std::size_t, const code_run*, std::size_t,
                               const code_sink&);
inline encode_kernel encode_kernel_for(const config& c) {
  return with_width(c.bits, [&](auto w) -> encode_kernel {
    constexpr unsigned B = decltype(w)::value;
    // Stochastic codes: one kernel per range for every width (B = 0 packs by a branch per 64
    // codes). The Philox words and the rounding dominate them, and a kernel per (range, width)
    // would double the code every translation unit that encodes a quantize compiles.
    if (c.stochastic)
      return c.range == sym ? &encode_runs<0, false, true> : &encode_runs<0, true, true>;
    return c.range == sym ? &encode_runs<B, false, false> : &encode_runs<B, true, false>;
  });
}

using decode_kernel = void (*)(const unsigned char*, unsigned, const value_run*, std::size_t,
                               float*, std::size_t, float, streamed_runs<float>*);
template <bool Accumulate> decode_kernel decode_kernel_for(const config& c) {
  return with_width(c.bits, [&](auto w) -> decode_kernel {
    constexpr unsigned B = decltype(w)::value;
    return c.range == sym ? &decode_runs<B, false, Accumulate> : &decode_runs<B, true, Accumulate>;
  });
}

using error_kernel = std::size_t (*)(const error_batch&, std::size_t&);
inline error_kernel error_kernel_for(const config& c) {
  return with_width(c.bits, [&](auto w) -> error_kernel {
    constexpr unsigned B = decltype(w)::value;
    // Stochastic: one kernel for every width, as encode_kernel_for.
    return c.stochastic ? &encode_error_batch<0, true> : &encode_error_batch<B, false>;
  });
}

// --- drivers ------------------------------------------------------------------------------

/// The value of every element in [first, last) of an n-element body, sink(i, value), in
/// element order within each group: quantize::decode_value one element at a time.
template <class Sink>
void decode_each(const config& c, bool column, const unsigned char* body, std::size_t first,
                 std::size_t last, Sink&& sink) {
  const unsigned char* const codes = body + c.codes;
  if (column) {
    unpack_run(c.bits, first, last, codes, [&](std::size_t i, std::uint32_t code) {
      sink(i, quantize::decode_value(c.range, c.bits, code, load_record(c.range, body, i % c.len)));
    });
    return;
  }
  for_each_group(c, first, last, [&](std::size_t g, std::size_t begin, std::size_t e) {
    const quantize::record rec = load_record(c.range, body, g);
    unpack_run(c.bits, begin, e, codes, [&](std::size_t i, std::uint32_t code) {
      sink(i, quantize::decode_value(c.range, c.bits, code, rec));
    });
  });
}

// --- column scales --------------------------------------------------------------------------

/// How many rows ahead the column drivers prefetch a tile's run (prefetch_lines).
inline constexpr std::size_t column_rows_ahead = 4;

/// Columns of a column-scaled tensor taken together: their statistics, coders and records stay
/// on the stack while every row passes, twice for encode (statistics, then codes), so the tile
/// of an fp32 matrix of up to about 2000 rows is read the second time from a 2 MiB L2.
inline constexpr std::size_t column_tile = 256;

/// Folds one row's run of a column tile, v[0, w), into each column's statistics as fold does
/// (symmetric: key[j], the largest magnitude's bits, which column_statistics folds into `most`
/// at the end; asymmetric: s0[j] = lo and s1[j] = hi, and every element's magnitude bits into
/// `most`, which a NaN or Inf sets past 0x7f7fffff). Out of line and on fp32 only: one copy for
/// every element type. Magnitude bits are below 2^31, so they are compared signed, as
/// max_magnitude_bits does: SSE2 has only a signed 32-bit compare.
COMMPRESS_NOINLINE void fold_column_run(quant_range r, const float* v, std::size_t w,
                                        std::uint32_t* key, float* s0, float* s1,
                                        std::uint32_t& most) {
  using namespace simd;
  const std::size_t whole = w / lanes * lanes; // the rest, fewer than lanes, one by one
  vu most_lanes = splat_u32(0);
  for (std::size_t j = 0; j < whole; j += lanes) {
    const vf xv = load(v + j);
    const vu m = magnitude_bits(xv);
    if (r == sym) {
      store(key + j, max_i32(load_u32(key + j), m));
    } else {
      most_lanes = max_i32(most_lanes, m);
      store(s0 + j, min(xv, load(s0 + j))); // v < s0 ? v : s0
      store(s1 + j, max(xv, load(s1 + j))); // v > s1 ? v : s1
    }
  }
  auto m_all = static_cast<std::uint32_t>(reduce_max_i32(most_lanes));
  for (std::size_t j = whole; j < w; ++j) {
    const std::uint32_t m = commpress::detail::float_to_bits(v[j]) & 0x7fffffffu;
    m_all = m > m_all ? m : m_all;
    if (r == sym)
      key[j] = m > key[j] ? m : key[j];
    else
      fold(r, v[j], s0[j], s1[j]);
  }
  most = m_all > most ? m_all : most;
}

/// The statistics of columns [j0, j0 + w) (w at most column_tile) over the rows of x (rows x
/// cols elements) into s0[j] and s1[j], each column folded in row order as fold does: absmax
/// (s1 = 0), or lo and hi. False when one of them holds a NaN or Inf, or an asymmetric column
/// is wide (quantize::is_wide): the tile then goes element by element.
template <element T>
bool column_statistics(quant_range r, const T* x, std::size_t rows, std::size_t cols,
                       std::size_t j0, std::size_t w, float* s0, float* s1) {
  constexpr bool fp32 = std::is_same_v<T, float>;
  alignas(64) std::uint32_t key[column_tile];
  alignas(64) float wide[fp32 ? 1 : column_tile];
  for (std::size_t j = 0; j < w; ++j) {
    key[j] = 0;
    s0[j] = stat0_init(r);
    s1[j] = stat1_init;
  }
  std::uint32_t most = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    const T* v = x + row * cols + j0;
    if (row + column_rows_ahead < rows)
      prefetch_lines(v + column_rows_ahead * cols, w * sizeof(T));
    if constexpr (fp32) {
      fold_column_run(r, v, w, key, s0, s1, most);
    } else {
      widen_elements(v, w, wide);
      fold_column_run(r, wide, w, key, s0, s1, most);
    }
  }
  for (std::size_t j = 0; j < w; ++j) {
    if (r == sym) {
      most = key[j] > most ? key[j] : most;
      s0[j] = bits_to_float(key[j]);
      s1[j] = 0.0f;
    } else if (quantize::is_wide(r, s0[j], s1[j])) {
      return false;
    }
  }
  return most < 0x7f800000u;
}

/// column_statistics element by element, as encode's definition: each element screened (a NaN
/// or Inf counted in `bad`, and set to 0 under zero_and_count), and under propagate a column
/// holding one poisoned (NaN statistics).
template <element T>
void column_statistics_one_by_one(const config& c, const T* x, std::size_t rows, std::size_t j0,
                                  std::size_t w, float* s0, float* s1, std::size_t& bad) {
  const std::size_t cols = c.len;
  const std::size_t bad_before = bad;
  for (std::size_t j = 0; j < w; ++j) {
    s0[j] = stat0_init(c.range);
    s1[j] = stat1_init;
  }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < w; ++j)
      fold(c.range, screen(to_float(x[r * cols + j0 + j]), c.policy, bad), s0[j], s1[j]);
  if (c.policy == nonfinite_policy::propagate && bad != bad_before)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < w; ++j)
        if (!is_finite(to_float(x[r * cols + j0 + j])))
          s0[j] = s1[j] = bits_to_float(0x7fc00000u);
}

// A row's run of a column tile, and a batch of groups of a length off a multiple of 8, go
// through the block kernels, which take one coder or record for a run: the elements first
// scaled by their own coders (their columns' or their groups'), y = x * inv or (x - lo) * inv,
// then coded with the unit coder (inv 1, lo 0), whose y * 1 and (y - 0) * 1 are y exactly; and
// their codes decoded with the unit record (1, or 0 and 1), whose value is the level itself
// exactly, then given their own records. The roundings are those of compress/quantize.hpp in
// the same order, and no code or decode kernel is compiled for either alone.

/// The coder whose codes of y are those of y's column coders: encode's scaling x * inv or
/// (x - lo) * inv done before the kernel.
inline constexpr quantize::coder unit_coder{1.0f, 0.0f, 1.0f};

/// The record whose values are the levels themselves: (code - offset) * 1, or 0 + code * 1.
constexpr quantize::record unit_record(quant_range r) {
  return r == sym ? quantize::record{1.0f, 0.0f} : quantize::record{0.0f, 1.0f};
}

/// The levels (unit_record's values) of elements [first, first + w) of `codes` (element i's
/// code at bit i * bits) at levels[lead, lead + w), lead = first % 8: `kernel` decodes them as
/// one run from the byte of codes that `first` lies in. Returns lead.
inline std::size_t decode_levels(decode_kernel kernel, const config& c, const unsigned char* codes,
                                 std::size_t first, std::size_t w, float* levels) {
  const std::size_t lead = first % 8;
  const value_run run{0, lead + w, unit_record(c.range)};
  kernel(codes + (first - lead) / 8 * c.bits, c.bits, &run, 1, levels, lead + w, 1.0f, nullptr);
  return lead;
}

/// y[j] = x[j] * inv[j] (symmetric) or (x[j] - lo[j]) * inv[j] for w elements, each scaled by
/// its column's coder, as quantize::scaled does for a coder whose pre is 1: that of every
/// column but a wide one, which never reaches here. No NaN arises to canonicalise, so the
/// elements after the last whole vector take plain `-` and `*`, as the vectors do, not the
/// `_rn` helpers: every x is finite (the statistics took the column), x - lo cannot overflow
/// (the column is not wide), and make_coder never gives an infinite inv.
template <bool Asym>
void scale_by_coders(const float* x, std::size_t w, const float* inv, const float* lo, float* y) {
  using namespace simd;
  std::size_t j = 0;
  for (; j + lanes <= w; j += lanes)
    store(y + j, Asym ? mul(sub(load(x + j), load(lo + j)), load(inv + j))
                      : mul(load(x + j), load(inv + j)));
  for (; j < w; ++j)
    y[j] = Asym ? (x[j] - lo[j]) * inv[j] : x[j] * inv[j];
}

using scale_fn = void (*)(const float*, std::size_t, const float*, const float*, float*);
inline scale_fn scale_by_coders_for(const config& c) {
  return c.range == sym ? &scale_by_coders<false> : &scale_by_coders<true>;
}

/// y[j] = x[j] * inv (symmetric) or (x[j] - lo) * inv for the w elements of one group, as
/// scale_by_coders with each coder the group's (plain `-` and `*` throughout, the operands
/// finite as there).
template <bool Asym>
void scale_by_coder(const float* COMMPRESS_RESTRICT x, std::size_t w, float inv, float lo,
                    float* COMMPRESS_RESTRICT y) {
  using namespace simd;
  const vf vinv = splat(inv);
  const vf vlo = splat(lo);
  for_group_lanes<true>(
      w,
      [&](std::size_t j) {
        store(y + j, Asym ? mul(sub(load(x + j), vlo), vinv) : mul(load(x + j), vinv));
      },
      [&](std::size_t j) { y[j] = Asym ? (x[j] - lo) * inv : x[j] * inv; });
}

/// The elements [first, last) of x (which holds the elements from `origin` on), each group's
/// scaled by its coder, coders[g - g0] group g's (scale_by_coder), to y[0, last - first).
inline void scale_groups(const config& c, const float* x, std::size_t origin, std::size_t first,
                         std::size_t last, const quantize::coder* coders, std::size_t g0,
                         float* y) {
  with_range(c, [&]<quant_range R>() {
    for_each_group(c, first, last, [&](std::size_t g, std::size_t b, std::size_t e) {
      const quantize::coder& k = coders[g - g0];
      scale_by_coder<R != sym>(x + (b - origin), e - b, k.inv, k.lo, y + (b - first));
    });
  });
}

/// The values of a vector of levels (unit_record's values) with records {a, b}, as
/// quantize::decode_value, at out: out = value, or with Accumulate out += weight * value (a NaN
/// canonical). No record is wide; to store, every record is finite (a NaN or Inf one would
/// leave a NaN as computed, not canonical).
template <bool Asym, bool Accumulate>
COMMPRESS_FORCEINLINE void put_values(simd::vf level, simd::vf a, simd::vf b, simd::vf weight,
                                      float* out) {
  using namespace simd;
  vf value = Asym ? add(a, mul(level, b)) : mul(level, a);
  if constexpr (Accumulate)
    value = canonical_nan(add(load(out), mul(weight, value)));
  store(out, value);
}
/// put_values for one element.
template <bool Asym, bool Accumulate>
COMMPRESS_FORCEINLINE void put_value(float level, float a, float b, float weight, float* out) {
  using commpress::detail::add_rn, commpress::detail::mul_rn;
  const float value = Asym ? add_rn(a, mul_rn(level, b)) : mul_rn(level, a);
  *out = Accumulate ? add_rn(*out, mul_rn(weight, value)) : value;
}

/// put_values of w levels v with their columns' records {a[j], b[j]}.
template <bool Asym, bool Accumulate>
void apply_column_records(const float* v, std::size_t w, const float* a, const float* b,
                          float weight, float* out) {
  using namespace simd;
  const vf vweight = splat(weight);
  std::size_t j = 0;
  for (; j + lanes <= w; j += lanes)
    put_values<Asym, Accumulate>(load(v + j), load(a + j), Asym ? load(b + j) : splat(0.0f),
                                 vweight, out + j);
  for (; j < w; ++j)
    put_value<Asym, Accumulate>(v[j], a[j], Asym ? b[j] : 0.0f, weight, out + j);
}

using column_records_fn = void (*)(const float*, std::size_t, const float*, const float*, float,
                                   float*);
template <bool Accumulate> column_records_fn column_records_for(const config& c) {
  return c.range == sym ? &apply_column_records<false, Accumulate>
                        : &apply_column_records<true, Accumulate>;
}

/// The coders and records of a tile of columns [j0, j0 + w), from each column's statistics
/// over every row: inv and lo for the scaling before the kernel, k for element-by-element
/// codes, and the record {a, b}. `served` when column_statistics takes the tile; otherwise its
/// statistics are formed element by element, each NaN or Inf counted in `bad`, and its rows go
/// element by element too. The scaling and the kernel that code a served tile's runs are
/// chosen once.
struct column_coders {
  explicit column_coders(const config& c)
      : scale(scale_by_coders_for(c)), encode(encode_kernel_for(c)) {}

  scale_fn scale;
  encode_kernel encode;
  alignas(64) float inv[column_tile];
  alignas(64) float lo[column_tile];
  alignas(64) float a[column_tile];
  alignas(64) float b[column_tile];
  quantize::coder k[column_tile];
  bool served = false;

  template <element T>
  void form(const config& c, const T* x, std::size_t j0, std::size_t w, std::size_t& bad) {
    const std::size_t rows = c.n / c.len;
    alignas(64) float s0[column_tile];
    alignas(64) float s1[column_tile];
    served = column_statistics(c.range, x, rows, c.len, j0, w, s0, s1);
    if (!served)
      column_statistics_one_by_one(c, x, rows, j0, w, s0, s1, bad);
    for (std::size_t j = 0; j < w; ++j) {
      k[j] = quantize::make_coder(c.range, c.bits, s0[j], s1[j]);
      const quantize::record rec = quantize::make_record(c.range, c.bits, s0[j], s1[j]);
      inv[j] = k[j].inv;
      lo[j] = k[j].lo;
      a[j] = rec.a;
      b[j] = rec.b;
    }
  }
};

/// Room for a row's run of a tile with the elements before it from the byte of codes it
/// starts in (fewer than 8), up to the next multiple of 8.
inline constexpr std::size_t column_run_room = column_tile + 8;

/// The codes of one row's run of a tile t, elements [base, base + w) of x, packed into `packed`
/// as from element base / 8 * 8, where a byte of codes starts; the elements before base and
/// from base + w to the next multiple of 8 are coded as zeros, their codes not to be used. A
/// served tile through the block kernel (each element scaled by its column's coder, then coded
/// with unit_coder); any other element by element, screening without counting again.
template <element T>
void code_column_run(const config& c, const column_coders& t, const T* x, std::size_t base,
                     std::size_t w, uniform_stream& u, unsigned char* packed) {
  const std::size_t lead = base % 8;
  const std::size_t m = (lead + w + 7) / 8 * 8;
  if (t.served) {
    alignas(64) float y[column_run_room];
    float* const own = y + lead;
    if constexpr (std::is_same_v<T, float>) {
      t.scale(x + base, w, t.inv, t.lo, own);
    } else {
      widen_elements(x + base, w, own);
      t.scale(own, w, t.inv, t.lo, own);
    }
    for (std::size_t i = 0; i < lead; ++i)
      y[i] = 0.0f;
    for (std::size_t i = lead + w; i < m; ++i)
      y[i] = 0.0f;
    const code_run run{0, m, unit_coder};
    t.encode(y, m, &run, 1,
             {c.bits, u.key, u.step, u.first_index + base - lead, packed, nullptr, 0});
    return;
  }
  std::uint32_t codes[column_run_room];
  for (std::size_t i = 0; i < lead; ++i)
    codes[i] = 0;
  for (std::size_t i = lead + w; i < m; ++i)
    codes[i] = 0;
  std::size_t ignored = 0; // counted by column_statistics_one_by_one
  for (std::size_t j = 0; j < w; ++j)
    codes[lead + j] =
        code_of(c, screen(to_float(x[base + j]), c.policy, ignored), t.k[j], u, base + j);
  for (std::size_t i = 0; i < m; i += 8)
    commpress::detail::pack_group(codes + i, 8, c.bits, packed + i / 8 * c.bits);
}

/// Copies bits [from, to) of src into dst (bit i of a stream is bit i % 8 of byte i / 8),
/// leaving dst's other bits as they are.
inline void copy_bits(const unsigned char* src, std::size_t from, std::size_t to,
                      unsigned char* dst) {
  if (from == to)
    return;
  const std::size_t first = from / 8;
  const std::size_t last = (to - 1) / 8;
  const auto merge = [&](std::size_t byte, unsigned mask) {
    dst[byte] = static_cast<unsigned char>((dst[byte] & ~mask) | (src[byte] & mask));
  };
  const unsigned head = 0xffu << (from % 8) & 0xffu;
  const unsigned tail = 0xffu >> (7 - (to - 1) % 8);
  if (first == last)
    return merge(first, head & tail);
  merge(first, head);
  std::memcpy(dst + first + 1, src + first + 1, last - first - 1);
  merge(last, tail);
}

/// Encodes a column-scaled tensor x a tile of columns at a time: the tile's coders and records
/// (column_coders), then each row's run coded (code_column_run) and its bits copied into the
/// body. Returns the NaN/Inf count. The codes are written out of order: a checksum hears of
/// them once all are.
template <element T>
std::size_t encode_columns(const config& c, const T* x, unsigned char* body, const code_sink& out,
                           uniform_stream& u) {
  const std::size_t cols = c.len;
  const std::size_t rows = c.n / cols;
  column_coders t(c);
  alignas(64) unsigned char packed[column_run_room];
  std::size_t bad = 0;
  for (std::size_t j0 = 0; j0 < cols; j0 += column_tile) {
    const std::size_t w = cols - j0 < column_tile ? cols - j0 : column_tile;
    t.form(c, x, j0, w, bad);
    for (std::size_t j = 0; j < w; ++j)
      store_record(c.range, body, j0 + j, {t.a[j], t.b[j]});
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t base = r * cols + j0;
      if (t.served && r + column_rows_ahead < rows)
        prefetch_lines(x + base + column_rows_ahead * cols, w * sizeof(T));
      // A run from a byte of codes to a byte of codes is coded in place; any other shares its
      // first or last byte with its neighbours, and its bits are copied in.
      const std::size_t lead = base % 8;
      unsigned char* const at = out.codes + (base - lead) / 8 * c.bits;
      if (lead == 0 && w % 8 == 0) {
        code_column_run(c, t, x, base, w, u, at);
      } else {
        code_column_run(c, t, x, base, w, u, packed);
        copy_bits(packed, lead * c.bits, (lead + w) * c.bits, at);
      }
    }
  }
  // The bits of the last byte past the last code are 0.
  const std::size_t end_bit = c.n * c.bits;
  if (end_bit % 8 != 0)
    out.codes[end_bit / 8] &= static_cast<unsigned char>((1u << end_bit % 8) - 1u);
  out.progress(c.n);
  return bad;
}

/// out[0, m) = values[0, m) converted as from_float does, 64 at a time by store_elements_64, or
/// through `stream` (at element `at`) where it is not null.
template <element T>
void store_values(T* out, const float* values, std::size_t m, streamed_runs<T>* stream = nullptr,
                  std::size_t at = 0) {
  std::size_t k = 0;
  for (; m - k >= 64; k += 64) {
    if (stream != nullptr)
      stream->put_64(at + k, values + k);
    else
      store_elements_64(out + k, values + k);
  }
  for (; k < m; ++k)
    out[k] = from_float<T>(values[k]);
}

/// Decodes rows [r0, r1) of a column-scaled body into out, a tile of columns at a time: out =
/// value, or with Accumulate out += weight * value, each row's run decoded by the block kernel
/// with unit_record, from the byte of codes it starts in, and given its columns' records; a
/// tile with a wide asymmetric record, or to store one with a NaN or Inf record, element by
/// element (decode_each).
template <bool Accumulate, element T, class Put>
void decode_columns(const config& c, const unsigned char* body, T* out, float weight,
                    std::size_t r0, std::size_t r1, Put&& put) {
  const std::size_t cols = c.len;
  const unsigned char* const codes = body + c.codes;
  const decode_kernel kernel = decode_kernel_for<false>(c);
  const column_records_fn with_records = column_records_for<Accumulate>(c);
  alignas(64) float a[column_tile];
  alignas(64) float b[column_tile];
  alignas(64) float levels[column_run_room];
  alignas(64) float values[std::is_same_v<T, float> ? 1 : column_tile];
  for (std::size_t j0 = 0; j0 < cols; j0 += column_tile) {
    const std::size_t w = cols - j0 < column_tile ? cols - j0 : column_tile;
    bool finite = true;
    bool wide = false;
    for (std::size_t j = 0; j < w; ++j) {
      const quantize::record rec = load_record(c.range, body, j0 + j);
      a[j] = rec.a;
      b[j] = rec.b;
      finite = finite && is_finite(rec.a) && is_finite(rec.b);
      wide = wide || quantize::is_wide_record(c.range, rec);
    }
    // apply_column_records stores a NaN as computed: a tile with a NaN or Inf record, as a
    // poisoned column's, is stored element by element, whose NaN is canonical.
    if (wide || (!Accumulate && !finite)) {
      for (std::size_t r = r0; r < r1; ++r)
        decode_each(c, true, body, r * cols + j0, r * cols + j0 + w, put);
      continue;
    }
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t base = r * cols + j0;
      if (r + column_rows_ahead < r1) {
        const std::size_t ahead = base + column_rows_ahead * cols;
        prefetch_lines(codes + ahead * c.bits / 8, (w * c.bits + 7) / 8);
        prefetch_lines<true>(out + ahead, w * sizeof(T));
      }
      const std::size_t lead = decode_levels(kernel, c, codes, base, w, levels);
      if constexpr (std::is_same_v<T, float>) {
        with_records(levels + lead, w, a, b, weight, out + base);
      } else {
        with_records(levels + lead, w, a, b, weight, values);
        store_values(out + base, values, w);
      }
    }
  }
}

/// The statistics of group [begin, end) of a tensor of n elements, vectorized, as {s0, s1}
/// (absmax, or lo and hi); false when the kernels do not serve the group: it holds a NaN or
/// Inf, or it is a wide asymmetric group (quantize::is_wide), which is encoded on halves.
template <element T>
bool group_statistics(quant_range r, const T* x, std::size_t n, std::size_t begin, std::size_t end,
                      float& s0, float& s1) {
  const prefetch_stream ahead = ahead_of(x, begin, n);
  if (r == quant_range::asymmetric) {
    const value_range_result v = value_range(x + begin, end - begin, ahead);
    s0 = v.lo;
    s1 = v.hi;
    return v.finite && !quantize::is_wide(r, s0, s1);
  }
  const std::uint32_t key = max_magnitude_bits(x + begin, end - begin, ahead);
  s0 = bits_to_float(key);
  s1 = 0.0f;
  return key < 0x7f800000u;
}

/// How many groups a batch took, and the end of the last.
struct groups_taken {
  std::size_t count;
  std::size_t end;
};

/// Encodes a batch of groups of a length off a multiple of 8 (at most per_batch, from element
/// `begin`, a group's first, to at most `stop`; x holds xn elements from `origin` on): each
/// group's statistics and record, then its elements scaled by its coder into a buffer (as the
/// column scales are), and the batch's elements from its first multiple of 8 to its last handed
/// to run_of(y, m, at) as one run (m elements from element `at`) to code with unit_coder; those
/// before (the rest of a group of eight that an element-wise group or the previous batch
/// began) and after go to one_by_one(b, e, coder_of), coder_of(i) giving element i's coder.
/// Returns the groups taken and the end of the last: none when the first holds a NaN or Inf or
/// is wide, and goes element by element. Out of line: its buffers stay off the frame of the
/// other batches.
template <class OneByOne, class RunOf>
COMMPRESS_NOINLINE groups_taken encode_scaled_batch(const config& c, const float* x, std::size_t xn,
                                                    std::size_t origin, std::size_t begin,
                                                    std::size_t stop, std::size_t per_batch,
                                                    unsigned char* body, std::size_t g,
                                                    OneByOne&& one_by_one, RunOf&& run_of) {
  // Each group's coder from `begin`'s on (its pre is 1, as every group's that group_statistics
  // takes).
  quantize::coder coders[batch_elements];
  std::size_t count = 0;
  std::size_t batch_end = begin;
  for (std::size_t b = begin; count < per_batch && b < stop; ++count, b += c.len) {
    const std::size_t e = c.n - b < c.len ? c.n : b + c.len;
    float s0, s1;
    if (!group_statistics(c.range, x, xn, b - origin, e - origin, s0, s1))
      break; // a NaN or Inf, or wide: this group goes element-wise
    store_record(c.range, body, g + count, quantize::make_record(c.range, c.bits, s0, s1));
    coders[count] = quantize::make_coder(c.range, c.bits, s0, s1);
    batch_end = e;
  }
  if (count == 0)
    return {0, begin};
  const std::size_t g0 = begin / c.len;
  const auto coder_of = [&](std::size_t i) { return coders[i / c.len - g0]; };
  const std::size_t head = first_whole_eight(begin, batch_end);
  const std::size_t whole = head + (batch_end - head) / 8 * 8;
  one_by_one(begin, head, coder_of);
  if (head != whole) {
    alignas(64) float y[batch_elements];
    scale_groups(c, x, origin, head, whole, coders, g0, y);
    run_of(y, whole - head, head);
  }
  one_by_one(whole, batch_end, coder_of);
  return {count, batch_end};
}

/// Encodes the groups [first_group, last_group) of `in` (block or tensor granularity) into
/// `body`, or every column (column granularity, whole tensors only); with a checksum, announces
/// the codes of every finished group of eight. first_group * len is a multiple of 8. Returns
/// the NaN/Inf count. Stochastic rounding draws element i's uniform at stream index
/// first_index + i (a multiple of 4; 0 for the quantize codec itself, another offset for a
/// codec whose own random choices use the first indices: compress/random_k.hpp).
template <element T>
std::size_t encode(const quantize& q, const context& ctx, std::span<const T> in,
                   unsigned char* body, format::body_checksum* sum, std::size_t first_group,
                   std::size_t last_group, std::uint64_t first_index = 0) {
  const std::size_t n = in.size();
  if (n == 0)
    return 0;
  const config c(q, ctx.on_nonfinite, n);
  const bool poison = c.policy == nonfinite_policy::propagate;
  const rng_key key = ctx.key(); // a Philox block: once per call
  uniform_stream u{key, ctx.step};
  u.first_index = first_index;
  unsigned char* const codes = body + c.codes;
  const code_sink sink{c.bits, key, ctx.step, first_index, codes, sum, c.codes};
  std::uint32_t buf[8] = {};
  std::size_t bad = 0;
  std::size_t ignored = 0; // the second load of an element must not count it again

  if (q.granularity == scale_granularity::column)
    return encode_columns(c, in.data(), body, sink, u);
  const std::size_t stop = last_group * c.len < n ? last_group * c.len : n;
  // Groups of at most a batch go through the kernels a batch of groups at a time: each group's
  // run from its first multiple of 8 with its own coder, or, for a length off a multiple of 8,
  // the batch's elements as one run, each first scaled by its group's coder (as the column
  // scales are) and coded with unit_coder. A longer group goes on its own.
  const bool batched = c.len <= batch_elements;
  const bool aligned = c.len % 8 == 0;
  const encode_kernel kernel = encode_kernel_for(c);
  std::size_t g = first_group;
  // A 16-bit input goes through the kernels widened into `wide`: a batch of whole groups at
  // a time, or a batch of the elements of one longer group.
  constexpr bool fp32 = std::is_same_v<T, float>;
  alignas(64) float wide[fp32 ? 1 : batch_elements];
  // The codes of `count` runs of x, which holds xn elements from element `origin` on (a
  // multiple of 8): their codes and random words count from there.
  const auto encode_runs_of = [&](const float* x, std::size_t xn, std::size_t origin,
                                  const code_run* runs, std::size_t count) {
    const std::size_t code_bytes = origin / 8 * c.bits;
    kernel(x, xn, runs, count,
           {c.bits, key, ctx.step, first_index + origin, codes + code_bytes, sum,
            c.codes + code_bytes});
  };
  // The codes of elements [b, e) one by one, coder_of(i) giving element i's coder.
  const auto codes_one_by_one_with = [&](std::size_t b, std::size_t e, auto&& coder_of) {
    if (b != e) {
      pack_run(c.bits, b, e, buf, codes, [&](std::size_t i) {
        return code_of(c, screen(to_float(in[i]), c.policy, ignored), coder_of(i), u, i);
      });
      sink.progress(e);
    }
  };
  // The codes of elements [b, e) of a group with coder k, one by one (a group's head before
  // its first whole eight, or its tail after its last).
  const auto codes_one_by_one = [&](std::size_t b, std::size_t e, quantize::coder k) {
    codes_one_by_one_with(b, e, [k](std::size_t) { return k; });
  };
  for (std::size_t begin = first_group * c.len; begin < stop;) {
    const std::size_t end = n - begin < c.len ? n : begin + c.len; // of the group at begin
    if (batched) { // a batch of groups through the kernel
      const std::size_t per_batch = batch_elements / c.len;
      // x holds the elements from `origin` on, xn of them.
      const float* x;
      std::size_t origin = 0;
      std::size_t xn = n;
      if constexpr (fp32) {
        x = in.data();
      } else {
        origin = begin;
        xn = stop - begin < per_batch * c.len ? stop - begin : per_batch * c.len;
        widen_elements(in.data() + begin, xn, wide);
        x = wide;
      }
      if (!aligned) {
        const groups_taken taken = encode_scaled_batch(
            c, x, xn, origin, begin, stop, per_batch, body, g, codes_one_by_one_with,
            [&](const float* y, std::size_t m, std::size_t at) {
              const code_run run{0, m, unit_coder};
              encode_runs_of(y, m, at, &run, 1);
            });
        if (taken.count != 0) {
          g += taken.count;
          begin = taken.end;
          continue;
        }
      } else {
        code_run runs[batch_elements / 8];
        std::size_t count = 0;
        for (std::size_t b = begin; count < per_batch && b < stop; ++count, b += c.len) {
          const std::size_t e = n - b < c.len ? n : b + c.len;
          float s0, s1;
          if (!group_statistics(c.range, x, xn, b - origin, e - origin, s0, s1))
            break; // a NaN or Inf, or wide: this group goes element-wise
          store_record(c.range, body, g + count, quantize::make_record(c.range, c.bits, s0, s1));
          runs[count] = {b - origin, b - origin + (e - b) / 8 * 8,
                         quantize::make_coder(c.range, c.bits, s0, s1)};
        }
        if (count != 0) {
          encode_runs_of(x, xn, origin, runs, count);
          // The last group's elements past its last whole eight (it ends the tensor).
          const code_run& last = runs[count - 1];
          const std::size_t last_begin = origin + last.begin;
          const std::size_t e = n - last_begin < c.len ? n : last_begin + c.len;
          codes_one_by_one(origin + last.end, e, last.coder);
          g += count;
          begin = e;
          continue;
        }
      }
    } else {
      // One group: its statistics from the input's lanes; its codes one by one up to its
      // first whole eight, through the kernel (a batch of widened elements at a time for a
      // 16-bit input) up to its last, and one by one after that.
      float s0, s1;
      if (group_statistics(c.range, in.data(), n, begin, end, s0, s1)) {
        store_record(c.range, body, g, quantize::make_record(c.range, c.bits, s0, s1));
        const quantize::coder k = quantize::make_coder(c.range, c.bits, s0, s1);
        const std::size_t head = first_whole_eight(begin, end);
        const std::size_t whole = head + (end - head) / 8 * 8;
        codes_one_by_one(begin, head, k);
        if constexpr (fp32) {
          const code_run run{head, whole, k};
          if (head != whole)
            encode_runs_of(in.data(), n, 0, &run, 1);
        } else {
          for (std::size_t origin = head; origin < whole; origin += batch_elements) {
            const std::size_t xn =
                whole - origin < batch_elements ? whole - origin : batch_elements;
            widen_elements(in.data() + origin, xn, wide);
            const code_run run{0, xn, k};
            encode_runs_of(wide, xn, origin, &run, 1);
          }
        }
        codes_one_by_one(whole, end, k);
        ++g;
        begin = end;
        continue;
      }
    }
    // One group element by element: it holds a NaN or Inf, or it is a wide asymmetric group.
    float s0 = stat0_init(c.range);
    float s1 = stat1_init;
    const std::size_t bad_before = bad;
    for (std::size_t i = begin; i < end; ++i)
      fold(c.range, screen(to_float(in[i]), c.policy, bad), s0, s1);
    if (poison && bad != bad_before)
      s0 = s1 = bits_to_float(0x7fc00000u);
    store_record(c.range, body, g, quantize::make_record(c.range, c.bits, s0, s1));
    codes_one_by_one(begin, end, quantize::make_coder(c.range, c.bits, s0, s1));
    ++g;
    begin = end;
  }
  if (stop != n)
    return bad; // the range ends on a multiple of 8: nothing is left in buf
  if ((n & 7u) != 0)
    commpress::detail::pack_group(buf, static_cast<unsigned>(n & 7u), c.bits,
                                  codes + (n >> 3) * c.bits);
  return bad;
}

/// One group's values from its w levels v (unit_record's values) with its record rec, as
/// quantize::decode_value, to dst[0, w): dst = value, or with Accumulate dst += weight * value
/// (a NaN canonical). rec is not wide, and, to store, finite (a NaN or Inf record would leave a
/// NaN as computed, not canonical). Stored values end, on the vector layers, on a vector that
/// overlaps the one before.
template <bool Asym, bool Accumulate>
void apply_group_record(quantize::record rec, const float* COMMPRESS_RESTRICT v, std::size_t w,
                        float weight, float* COMMPRESS_RESTRICT dst) {
  using namespace simd;
  const vf a = splat(rec.a);
  const vf b = splat(rec.b);
  const vf vweight = splat(weight);
  for_group_lanes<!Accumulate>(
      w, [&](std::size_t j) { put_values<Asym, Accumulate>(load(v + j), a, b, vweight, dst + j); },
      [&](std::size_t j) { put_value<Asym, Accumulate>(v[j], rec.a, rec.b, weight, dst + j); });
}

/// The values of elements [first, last) from their levels v[0, last - first) (unit_record's
/// values), each group g's with the record at index g - g0 of `records` (apply_group_record),
/// to dst[0, last - first). The records are a batch's, which group_statistics took: none is
/// wide and every one finite, so none is refused as apply_group_records refuses.
inline void apply_batch_records(const config& c, const unsigned char* records, std::size_t g0,
                                const float* v, std::size_t first, std::size_t last, float* dst) {
  with_range(c, [&]<quant_range R>() {
    for_each_group(c, first, last, [&](std::size_t g, std::size_t b, std::size_t e) {
      apply_group_record<R != sym, false>(load_record(R, records, g - g0), v + (b - first), e - b,
                                          1.0f, dst + (b - first));
    });
  });
}

/// The values of elements [first, last) from their levels v[0, last - first) (unit_record's
/// values), each group's with its record from `body` (apply_group_record), to
/// dst[0, last - first). A group whose record is wide, or, to store, not finite, goes to
/// one_by_one(begin, end) instead.
template <bool Accumulate, class OneByOne>
void apply_group_records(const config& c, const unsigned char* body, const float* v,
                         std::size_t first, std::size_t last, float weight, float* dst,
                         OneByOne&& one_by_one) {
  with_range(c, [&]<quant_range R>() {
    for_each_group(c, first, last, [&](std::size_t g, std::size_t b, std::size_t e) {
      const quantize::record rec = load_record(R, body, g);
      if (quantize::is_wide_record(R, rec) ||
          (!Accumulate && !(is_finite(rec.a) && is_finite(rec.b))))
        one_by_one(b, e);
      else
        apply_group_record<R != sym, Accumulate>(rec, v + (b - first), e - b, weight,
                                                 dst + (b - first));
    });
  });
}

/// Decodes elements [first, last) (at most batch_elements) of a body whose groups are of a
/// length off a multiple of 8 to dst[0, last - first): dst = value, or with Accumulate dst +=
/// weight * value. The groups of the window together: their levels decoded by the block
/// kernel with unit_record as one run from the byte of codes the window starts in, then each
/// group's given its record (apply_group_records); a group that function refuses element by
/// element (decode_each).
template <bool Accumulate>
void decode_scaled_window(const config& c, const unsigned char* body, std::size_t first,
                          std::size_t last, float* dst, float weight) {
  alignas(64) float levels[batch_elements + 8];
  const std::size_t lead =
      decode_levels(decode_kernel_for<false>(c), c, body + c.codes, first, last - first, levels);
  const auto put = [&](std::size_t i, float v) {
    float& out = dst[i - first];
    out = Accumulate ? commpress::detail::add_rn(out, commpress::detail::mul_rn(weight, v)) : v;
  };
  apply_group_records<Accumulate>(
      c, body, levels + lead, first, last, weight, dst,
      [&](std::size_t b, std::size_t e) { decode_each(c, false, body, b, e, put); });
}

/// Walks the groups that hold elements [first, last) (block or tensor granularity; first and
/// origin multiples of 8), in order: the runs of groups whose records the kernels serve go to
/// on_runs(runs, count), at most Most at a time, their elements counted from `origin`; what
/// the kernels do not take goes to one_by_one(begin, end), in element indices of the tensor: a
/// group with a wide record (quantize::is_wide_record), and a group's elements before its first
/// multiple of 8. The runs may be handed over after the elements that follow them.
template <std::size_t Most, class OnRuns, class OneByOne>
void for_each_run(const config& c, const unsigned char* body, std::size_t first, std::size_t last,
                  std::size_t origin, OnRuns&& on_runs, OneByOne&& one_by_one) {
  value_run runs[Most];
  std::size_t count = 0;
  for_each_group(c, first, last, [&](std::size_t g, std::size_t begin, std::size_t e) {
    const quantize::record rec = load_record(c.range, body, g);
    if (quantize::is_wide_record(c.range, rec)) {
      one_by_one(begin, e);
      return;
    }
    const std::size_t head = first_whole_eight(begin, e);
    if (head != begin)
      one_by_one(begin, head);
    if (head != e) {
      runs[count++] = {head - origin, e - origin, rec};
      if (count == Most)
        on_runs(runs, std::exchange(count, 0));
    }
  });
  if (count != 0)
    on_runs(runs, count);
}

/// Whether block and tensor groups are decoded (decode_scaled_windows) and roundtripped
/// (roundtrip_scaled_batch) a window of groups at a time: groups of a length off a multiple of
/// 8, at most a batch long, would otherwise reach the kernels as short runs, each after up to 7
/// elements one by one.
inline bool takes_scaled_windows(const config& c) {
  return c.len % 8 != 0 && c.len <= batch_elements;
}

/// decode_scaled_window over elements [first, last), a batch of them at a time, to
/// dst[0, last - first).
template <bool Accumulate>
void decode_scaled_windows(const config& c, const unsigned char* body, std::size_t first,
                           std::size_t last, float* dst, float weight) {
  for (std::size_t a = first; a < last; a += batch_elements)
    decode_scaled_window<Accumulate>(c, body, a,
                                     last - a < batch_elements ? last : a + batch_elements,
                                     dst + (a - first), weight);
}

/// The values of elements [first, last) of a body at dst[0, last - first), as decode computes
/// them: block and tensor groups through the fp32 kernels (decode_scaled_window, or each
/// group's run from its first multiple of 8), but for a wide asymmetric group's record;
/// everything else decode_each.
inline void decode_values(const config& c, bool column, const unsigned char* body,
                          std::size_t first, std::size_t last, float* dst) {
  const auto put = [&](std::size_t i, float v) { dst[i - first] = v; };
  if (column) {
    decode_each(c, column, body, first, last, put);
    return;
  }
  if (takes_scaled_windows(c))
    return decode_scaled_windows<false>(c, body, first, last, dst, 1.0f);
  const std::size_t start = first_whole_eight(first, last);
  decode_each(c, false, body, first, start, put);
  if (start == last)
    return;
  // The runs count from `start`, and their codes from its byte.
  const decode_kernel kernel = decode_kernel_for<false>(c);
  for_each_run<256>(
      c, body, start, last, start,
      [&](const value_run* runs, std::size_t count) {
        kernel(body + c.codes + start / 8 * c.bits, c.bits, runs, count, dst + (start - first),
               last - start, 1.0f, nullptr);
      },
      [&](std::size_t begin, std::size_t end) { decode_each(c, false, body, begin, end, put); });
}

/// Elements [first, last) of an n-element body of block or tensor groups into out, a window of
/// batch_elements values at a time through a buffer (decode_values), which store_values stores
/// as from_float converts them: a 16-bit output, or a large fp32 output of groups taken a window
/// at a time. A large output is streamed (its windows all start a multiple of 64 elements from
/// `first`).
template <element T>
void decode_through_buffer(const config& c, std::size_t n, const unsigned char* body, T* out,
                           std::size_t first, std::size_t last) {
  alignas(64) float values[batch_elements];
  std::optional<streamed_runs<T>> stream;
  if (streams_output(out, n))
    stream.emplace(out, first);
  for (std::size_t a = first; a < last; a += batch_elements) {
    const std::size_t m = last - a < batch_elements ? last - a : batch_elements;
    decode_values(c, false, body, a, a + m, values);
    store_values(out + a, values, m, stream ? &*stream : nullptr, a);
  }
  if (stream)
    stream->finish();
}

/// Elements [first, last) of an n-element body (first a multiple of 8) into out: out = value,
/// or with Accumulate out += weight * value. Block and tensor groups take the fp32 kernels
/// (through a buffer for a 16-bit output, or a large fp32 one taken a window at a time), a
/// window of groups at a time or each from its first multiple of 8 on, but for a wide
/// asymmetric group's record; whole rows of column scales take
/// decode_columns; everything else decode_each: the same expressions, so the same bits.
template <bool Accumulate, element T>
void decode(const quantize& q, std::size_t n, const unsigned char* body, T* out, float weight,
            std::size_t first, std::size_t last) {
  if (first >= last)
    return;
  const config c(q, nonfinite_policy::propagate, n);
  const auto put = [&](std::size_t i, float v) {
    if constexpr (Accumulate)
      out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
    else
      out[i] = from_float<T>(v);
  };
  if (q.granularity == scale_granularity::column) {
    // Whole rows through the tiles; a part of a row at either end element by element.
    const std::size_t r0 = (first + c.len - 1) / c.len;
    const std::size_t r1 = last / c.len;
    if (r0 >= r1)
      return decode_each(c, true, body, first, last, put);
    decode_each(c, true, body, first, r0 * c.len, put);
    decode_columns<Accumulate>(c, body, out, weight, r0, r1, put);
    return decode_each(c, true, body, r1 * c.len, last, put);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (!takes_scaled_windows(c)) {
      const decode_kernel kernel = decode_kernel_for<Accumulate>(c);
      // A large output is streamed where its runs start a multiple of 16 floats apart.
      std::optional<streamed_runs<float>> stream;
      if (!Accumulate && streams_output(out, n) &&
          (c.len == n || (c.len % 16 == 0 && first % 16 == 0)))
        stream.emplace(out, first);
      for_each_run<256>(
          c, body, first, last, 0,
          [&](const value_run* runs, std::size_t count) {
            kernel(body + c.codes, c.bits, runs, count, out, last, weight,
                   stream ? &*stream : nullptr);
          },
          [&](std::size_t begin, std::size_t end) {
            decode_each(c, false, body, begin, end, put);
          });
      if (stream)
        stream->finish();
      return;
    }
    if (Accumulate || !streams_output(out, n))
      return decode_scaled_windows<Accumulate>(c, body, first, last, out + first, weight);
    return decode_through_buffer(c, n, body, out, first, last);
  } else {
    static_assert(!Accumulate, "commpress: decode_accumulate adds into fp32");
    decode_through_buffer(c, n, body, out, first, last);
  }
}

/// roundtrip of a column-scaled tensor, a tile of columns at a time as encode_columns: each
/// row's run coded into a buffer (code_column_run) and decoded back as decode_columns does it;
/// element by element a tile column_statistics refuses.
inline std::size_t roundtrip_columns(const config& c, float* x, rng_key key, std::uint64_t step) {
  const std::size_t cols = c.len;
  const std::size_t rows = c.n / cols;
  const decode_kernel decode_chunk = decode_kernel_for<false>(c);
  // A tile the kernels take has finite statistics, and so finite records.
  const column_records_fn with_records = column_records_for<false>(c);
  uniform_stream u{key, step};
  column_coders t(c);
  alignas(64) unsigned char packed[column_run_room];
  alignas(64) float levels[column_run_room];
  std::size_t bad = 0;
  std::size_t ignored = 0; // counted by column_statistics_one_by_one
  for (std::size_t j0 = 0; j0 < cols; j0 += column_tile) {
    const std::size_t w = cols - j0 < column_tile ? cols - j0 : column_tile;
    t.form(c, x, j0, w, bad);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t base = r * cols + j0;
      if (t.served) {
        code_column_run(c, t, x, base, w, u, packed);
        // `packed` starts at the byte of codes that element base lies in.
        const std::size_t lead = decode_levels(decode_chunk, c, packed, base % 8, w, levels);
        with_records(levels + lead, w, t.a, t.b, 1.0f, x + base);
      } else {
        for (std::size_t j = 0; j < w; ++j) {
          const std::uint32_t code =
              code_of(c, screen(x[base + j], c.policy, ignored), t.k[j], u, base + j);
          x[base + j] = quantize::decode_value(c.range, c.bits, code, {t.a[j], t.b[j]});
        }
      }
    }
  }
  return bad;
}

/// roundtrip of a batch of groups of a length off a multiple of 8 from element `begin` (a
/// group's first), as encode_scaled_batch codes them and decode_scaled_window decodes them:
/// the codes of the batch's elements from its first multiple of 8 to its last into a buffer,
/// their levels back, each group's record applied; the elements before and after one by one.
/// Returns the groups taken and the end of the last: none when the first holds a NaN or Inf or
/// is wide (it goes element by element).
inline groups_taken roundtrip_scaled_batch(const config& c, float* x, std::size_t begin,
                                           rng_key key, std::uint64_t step, uniform_stream& u,
                                           encode_kernel encode_chunk, decode_kernel decode_chunk) {
  // Each batch group's record, the g-th from begin's at g; element i's group is i / c.len.
  alignas(64) unsigned char records[batch_elements * 8];
  const std::size_t g0 = begin / c.len;
  const auto record_of = [&](std::size_t g) { return load_record(c.range, records, g - g0); };
  // Elements one by one, each code decoded as it is made; every element is finite
  // (group_statistics took its group), so none is screened.
  const auto one_by_one = [&](std::size_t b, std::size_t e, auto&& coder_of) {
    for (std::size_t i = b; i < e; ++i) {
      const std::uint32_t code = code_of(c, x[i], coder_of(i), u, i);
      x[i] = quantize::decode_value(c.range, c.bits, code, record_of(i / c.len));
    }
  };
  alignas(64) unsigned char packed[batch_elements];
  alignas(64) float levels[batch_elements];
  // Elements [at, at + m), scaled into y: their codes, and their levels back with their groups'
  // records, every one finite and none wide (group_statistics took the groups).
  const auto run_of = [&](const float* y, std::size_t m, std::size_t at) {
    const code_run run{0, m, unit_coder};
    encode_chunk(y, m, &run, 1, {c.bits, key, step, at, packed, nullptr, 0});
    decode_levels(decode_chunk, c, packed, 0, m, levels);
    apply_batch_records(c, records, g0, levels, at, at + m, x + at);
  };
  return encode_scaled_batch(c, x, c.n, 0, begin, c.n, batch_elements / c.len, records, 0,
                             one_by_one, run_of);
}

/// x = decode(encode(x)) in place, without a payload. Returns the NaN/Inf count.
inline std::size_t roundtrip(const quantize& q, const context& ctx, std::span<float> x) {
  const std::size_t n = x.size();
  if (n == 0)
    return 0;
  const config c(q, ctx.on_nonfinite, n);
  const rng_key key = ctx.key();
  if (q.granularity == scale_granularity::column)
    return roundtrip_columns(c, x.data(), key, ctx.step);
  const bool poison = c.policy == nonfinite_policy::propagate;
  uniform_stream u{key, ctx.step};
  const float nan = bits_to_float(0x7fc00000u);
  std::size_t bad = 0;
  std::size_t ignored = 0;
  const auto element_wise = [&](std::size_t i, quantize::coder k, quantize::record rec) {
    const std::uint32_t code = code_of(c, screen(x[i], c.policy, ignored), k, u, i);
    x[i] = quantize::decode_value(c.range, c.bits, code, rec);
  };
  const encode_kernel encode_chunk = encode_kernel_for(c);
  const decode_kernel decode_chunk = decode_kernel_for<false>(c);
  alignas(64) unsigned char packed[code_chunk];
  const bool windows = takes_scaled_windows(c);
  for (std::size_t begin = 0; begin < n;) {
    if (windows) {
      const groups_taken taken =
          roundtrip_scaled_batch(c, x.data(), begin, key, ctx.step, u, encode_chunk, decode_chunk);
      if (taken.count != 0) {
        begin = taken.end;
        continue;
      }
    }
    const std::size_t e = n - begin < c.len ? n : begin + c.len;
    float s0 = stat0_init(c.range);
    float s1 = stat1_init;
    if (!windows && group_statistics(c.range, x.data(), n, begin, e, s0, s1)) {
      // From the group's first multiple of 8 to its last, codes a chunk at a time into
      // `packed`, and back; the elements before and after, one by one.
      const quantize::coder k = quantize::make_coder(c.range, c.bits, s0, s1);
      const quantize::record rec = quantize::make_record(c.range, c.bits, s0, s1);
      const std::size_t head = first_whole_eight(begin, e);
      const std::size_t whole = head + (e - head) / 8 * 8;
      for (std::size_t i = begin; i < head; ++i)
        element_wise(i, k, rec);
      for (std::size_t i = head; i < whole; i += code_chunk) {
        const std::size_t m = whole - i < code_chunk ? whole - i : code_chunk;
        const code_run run{0, m, k};
        encode_chunk(x.data() + i, m, &run, 1, {c.bits, key, ctx.step, i, packed, nullptr, 0});
        const value_run values{0, m, rec};
        decode_chunk(packed, c.bits, &values, 1, x.data() + i, m, 1.0f, nullptr);
      }
      for (std::size_t i = whole; i < e; ++i)
        element_wise(i, k, rec);
    } else {
      s0 = stat0_init(c.range);
      s1 = stat1_init;
      const std::size_t bad_before = bad;
      for (std::size_t i = begin; i < e; ++i)
        fold(c.range, screen(x[i], c.policy, bad), s0, s1);
      if (poison && bad != bad_before)
        s0 = s1 = nan;
      const quantize::coder k = quantize::make_coder(c.range, c.bits, s0, s1);
      const quantize::record rec = quantize::make_record(c.range, c.bits, s0, s1);
      for (std::size_t i = begin; i < e; ++i)
        element_wise(i, k, rec);
    }
    begin = e;
  }
  return bad;
}

/// Whether the fused error-feedback step serves this configuration: symmetric blocks of a
/// multiple of 8 elements, at most fused_max_block.
inline bool can_fuse_feedback(const quantize& q) {
  return q.range == quant_range::symmetric && q.granularity == scale_granularity::block &&
         q.group % 8 == 0 && q.group <= fused_max_block;
}

/// The error state of encode_error as an fp32 array updated in place.
struct error_in_place {
  float* e;
  std::size_t n;
  /// The values of elements [begin, begin + m), to be read and updated.
  float* load(std::size_t begin, std::size_t) const { return e + begin; }
  /// Their update is final (nothing to write back).
  void store(std::size_t, std::size_t) const {}
  /// What the pass over the values of element `at` onwards prefetches.
  prefetch_stream stream(std::size_t at) const { return {e + at, e + n}; }
};

/// The fused error-feedback step (encode_error_batch) over an fp32 gradient g of n elements,
/// batch by batch of at most fused_max_block elements; `err` holds e (error_in_place, or a
/// stored state with the same three members): each batch's values come from
/// err.load(begin, m) and go back with err.store(begin, m). Returns the non-finite count of g.
/// ctx.on_nonfinite is not `fail`; can_fuse_feedback(q).
template <class ErrorBlocks>
std::size_t encode_error(const quantize& q, const context& ctx, const float* g, ErrorBlocks& err,
                         std::size_t n, unsigned char* body, std::size_t& held,
                         format::body_checksum& sum, error_update rule) {
  const config c(q, ctx.on_nonfinite, n);
  const error_kernel kernel = error_kernel_for(c);
  const rng_key key = ctx.key();
  const std::size_t per_batch = fused_max_block / c.len * c.len;
  std::size_t bad = 0;
  for (std::size_t begin = 0; begin < n; begin += per_batch) {
    const std::size_t m = n - begin < per_batch ? n - begin : per_batch;
    float* const e = err.load(begin, m);
    const error_batch a{&c,
                        g,
                        e,
                        err.stream(begin),
                        begin,
                        begin + m,
                        begin / c.len,
                        rule,
                        body,
                        {c.bits, key, ctx.step, 0, body + c.codes, &sum, c.codes}};
    bad += kernel(a, held);
    err.store(begin, m);
  }
  return bad;
}

} // namespace commpress::cpu::detail::quantize_groups
