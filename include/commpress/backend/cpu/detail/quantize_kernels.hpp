// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The inner loops of the CPU quantizer on the vector layer: codes of a run of elements
/// computed and packed 64 at a time, codes decoded 64 at a time, and the error-feedback step
/// fused with the codes. Each computes exactly the per-element expressions of
/// compress/quantize.hpp, with the same roundings in the same order (tails of fewer than
/// vector_tail_min elements call those definitions themselves), so the bytes do not depend on
/// the instruction set.
///
/// Kernels take the code width as a template parameter B where the vector layer packs it in
/// registers (2, 4, 8) and B = 0 with the width as an argument otherwise (packing.hpp).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/reduce.hpp"
#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress::cpu::detail {

using commpress::detail::error_update;

/// Elements per chunk of the code kernels: their random words and byte buffers stay in L1.
inline constexpr std::size_t code_chunk = 256;

/// The fewest elements left after a kernel's last whole 64 that go through its vectors, from
/// copies padded to 64; fewer take the per-element definitions, which cost less than a padded
/// block for them (bench/README.md, "Groups off a byte of codes").
inline constexpr std::size_t vector_tail_min = 16;

/// The range of a kernel's Asym parameter.
template <bool Asym>
inline constexpr quant_range range_of = Asym ? quant_range::asymmetric : quant_range::symmetric;

/// The vector constants of one group's codes: y = x * inv (symmetric) or (x - lo) * inv, and
/// the code is round(y) + offset clamped to [0, top] (quantize's to_code).
struct code_constants {
  simd::vf inv;
  simd::vf lo;
  simd::vf offset;
  simd::vf top;
};

COMMPRESS_FORCEINLINE code_constants constants_of(quant_range r, unsigned bits, quantize::coder k) {
  const float levels = quantize::levels(r, bits);
  const bool sym = r == quant_range::symmetric;
  return {simd::splat(k.inv), simd::splat(k.lo), simd::splat(sym ? levels : 0.0f),
          simd::splat(sym ? 2.0f * levels : levels)};
}

/// Level q shifted by the offset and clamped, as int32 lanes (max and min return their second
/// operand for NaN, as quantize's to_code does).
COMMPRESS_FORCEINLINE simd::vu clamped_code(simd::vf q, const code_constants& k) {
  using namespace simd;
  vf c = add(q, k.offset);
  c = max(c, splat(0.0f));
  c = min(c, k.top);
  return trunc_i32(c);
}

template <bool Asym>
COMMPRESS_FORCEINLINE simd::vf scaled(const float* x, const code_constants& k) {
  using namespace simd;
  return Asym ? mul(sub(load(x), k.lo), k.inv) : mul(load(x), k.inv);
}

/// quantize::encode_nearest of `lanes` elements.
template <bool Asym>
COMMPRESS_FORCEINLINE simd::vu code_nearest(const float* x, const code_constants& k) {
  using namespace simd;
  const vf magic = splat(commpress::detail::round_magic);
  return clamped_code(sub(add(scaled<Asym>(x, k), magic), magic), k);
}

/// quantize::encode_stochastic of `lanes` elements with their random words.
template <bool Asym>
COMMPRESS_FORCEINLINE simd::vu code_stochastic(const float* x, const code_constants& k,
                                               const std::uint32_t* words) {
  using namespace simd;
  const vf magic = splat(commpress::detail::round_magic);
  const vf one = splat(1.0f);
  const vf y = scaled<Asym>(x, k);
  const vf r = sub(add(y, magic), magic);
  const vf f = select(gt(r, y), sub(r, one), r);
  const vf u = mul(to_float_i32(srl<8>(load_u32(words))), splat(uniform_scale));
  return clamped_code(select(lt(u, sub(y, f)), add(f, one), f), k);
}

/// The codes of the 64 elements x[i .. i + 64) as vectors; prefetch(i + 16 t) before each 16.
template <bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void codes64(const float* x, std::size_t i, const code_constants& k,
                                   const std::uint32_t* words, prefetch_stream prefetch,
                                   simd::vu (&c)[simd::vectors_per_64]) {
  using namespace simd;
  for (std::size_t q = 0; q < vectors_per_64; ++q) {
    const std::size_t j = i + q * lanes;
    if (j % 16 == 0)
      prefetch(j);
    if constexpr (Stochastic)
      c[q] = code_stochastic<Asym>(x + j, k, words + j);
    else
      c[q] = code_nearest<Asym>(x + j, k);
  }
}

/// store_packed<bits>: the widths the vector layer packs in registers (8, 4, 2) through a
/// branch the predictor learns at once, the others through the portable loop.
COMMPRESS_FORCEINLINE void store_packed_any(simd::b64 c, unsigned char* out, unsigned bits) {
  using namespace simd;
  switch (bits) {
  case 8:
    return store_packed<8>(c, out);
  case 4:
    return store_packed<4>(c, out);
  case 2:
    return store_packed<2>(c, out);
  default:
    return store_packed<0>(c, out, bits);
  }
}

/// encode_codes' last m elements (fewer than vector_tail_min, a multiple of 8) by the
/// per-element definitions. Out of line: inlined there, this scalar loop left GCC building the
/// portable layer's vector loop of the same function much slower (bench/README.md, "Groups
/// off a byte of codes").
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_NOINLINE void encode_codes_one_by_one(const float* COMMPRESS_RESTRICT x, std::size_t m,
                                                unsigned b, quantize::coder coder,
                                                const std::uint32_t* COMMPRESS_RESTRICT words,
                                                unsigned char* COMMPRESS_RESTRICT out) {
  alignas(64) std::uint8_t c[64];
  for (std::size_t j = 0; j < m; ++j)
    c[j] = static_cast<std::uint8_t>(
        Stochastic ? quantize::encode_stochastic(range_of<Asym>, b, x[j], coder,
                                                 uniform_from_bits(words[j]))
                   : quantize::encode_nearest(range_of<Asym>, b, x[j], coder));
  simd::pack_bytes<B>(c, b, out, static_cast<unsigned>(m / 8));
}

/// Codes of m elements (m a multiple of 8) of one group with coder `coder`, packed at out
/// (element 0's code at bit 0): nearest, or stochastic on words[0..m) (the element's random
/// word). prefetch(i) once per 16 elements of the vector part. B = 0: the width `bits` is
/// chosen per 64 codes (store_packed_any).
template <unsigned B, bool Asym, bool Stochastic>
COMMPRESS_FORCEINLINE void
encode_codes(const float* COMMPRESS_RESTRICT x, std::size_t m, unsigned bits, quantize::coder coder,
             const std::uint32_t* COMMPRESS_RESTRICT words, unsigned char* COMMPRESS_RESTRICT out,
             prefetch_stream prefetch = {}) {
  using namespace simd;
  const unsigned b = width<B>(bits);
  const code_constants k = constants_of(range_of<Asym>, b, coder);
  std::size_t i = 0;
  for (; i + 64 <= m; i += 64) {
    vu c[vectors_per_64];
    codes64<Asym, Stochastic>(x, i, k, words, prefetch, c);
    if constexpr (B == 0)
      store_packed_any(narrow_u8(c), out + i / 8 * b, b);
    else
      store_packed<B>(narrow_u8(c), out + i / 8 * b, b);
  }
  if (i == m)
    return;
  const std::size_t rest = m - i;
  if (rest < vector_tail_min)
    return encode_codes_one_by_one<B, Asym, Stochastic>(
        x + i, rest, b, coder, Stochastic ? words + i : nullptr, out + i / 8 * b);
  // The last m - i (a multiple of 8) through the same vectors, from copies padded with zeros
  // whose codes are not stored.
  alignas(64) float xs[64] = {};
  alignas(64) std::uint32_t ws[Stochastic ? 64 : 1] = {};
  std::memcpy(xs, x + i, rest * sizeof(float));
  if constexpr (Stochastic)
    std::memcpy(ws, words + i, rest * sizeof(std::uint32_t));
  vu c[vectors_per_64];
  codes64<Asym, Stochastic>(xs, 0, k, ws, {}, c);
  alignas(64) std::uint8_t bytes[64];
  store_bytes(bytes, narrow_u8(c));
  pack_bytes<B>(bytes, b, out + i / 8 * b, static_cast<unsigned>(rest / 8));
}

/// What decode_codes does with a decoded value v at out[i].
enum class decode_mode {
  store,           ///< out[i] = v, the record finite (v is never NaN then)
  store_canonical, ///< out[i] = v, a NaN canonical (mul_rn, add_rn)
  accumulate,      ///< out[i] += weight * v, each operation rounded once, a NaN canonical
};

/// Decodes m codes packed at in, of one group with record `rec`, as
/// quantize::decode_value: out = value, or out += weight * value (decode_mode). `stream` writes
/// out with non-temporal stores (out aligned to a vector; the caller fences). prefetch(i) once
/// per 16 elements of the vector part.
template <unsigned B, bool Asym, decode_mode Mode>
COMMPRESS_FORCEINLINE void decode_codes(const unsigned char* COMMPRESS_RESTRICT in, std::size_t m,
                                        unsigned bits, quantize::record rec, float weight,
                                        float* COMMPRESS_RESTRICT out, bool stream = false,
                                        prefetch_stream prefetch = {}) {
  using namespace simd;
  const unsigned b = width<B>(bits);
  const vu offset = splat_u32(Asym ? 0u : (1u << (b - 1)) - 1u);
  const vf va = splat(rec.a);
  const vf vb = splat(rec.b);
  const vf vweight = splat(weight);
  // The 64 codes packed at `codes` to o[0, 64).
  const auto decode_64 = [&](const unsigned char* codes, float* o, bool streamed) {
    const b64 bytes = load_packed<B>(codes, b);
    for (std::size_t q = 0; q < vectors_per_64; ++q) {
      const vu code = widen_u8(bytes, static_cast<unsigned>(q));
      vf v = Asym ? add(va, mul(to_float_i32(code), vb))
                  : mul(to_float_i32(sub_u32(code, offset)), va);
      if constexpr (Mode == decode_mode::accumulate)
        v = add(load(o + q * lanes), mul(vweight, v));
      if constexpr (Mode != decode_mode::store)
        v = canonical_nan(v); // a NaN anywhere above leaves a NaN here: one canonicalisation
      if (streamed)
        simd::stream(o + q * lanes, v);
      else
        store(o + q * lanes, v);
    }
  };
  std::size_t i = 0;
  for (; i + 64 <= m; i += 64) {
    for (std::size_t t = 0; t < 64; t += 16)
      prefetch(i + t);
    decode_64(in + i / 8 * b, out + i, stream);
  }
  if (i == m)
    return;
  const std::size_t rest = m - i;
  if (rest < vector_tail_min) {
    for (; i < m; ++i) {
      const float v =
          quantize::decode_value(range_of<Asym>, b, commpress::detail::unpack_one(in, i, b), rec);
      out[i] = Mode == decode_mode::accumulate
                   ? commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v))
                   : v;
    }
    return;
  }
  // The last m - i through the same vectors: their codes and (to accumulate) outputs copied into
  // buffers padded with zeros, whose values are not stored.
  alignas(64) unsigned char codes[64] = {};
  alignas(64) float values[64] = {};
  std::memcpy(codes, in + i / 8 * b, (rest * b + 7) / 8);
  if constexpr (Mode == decode_mode::accumulate)
    std::memcpy(values, out + i, rest * sizeof(float));
  decode_64(codes, values, false);
  std::memcpy(out + i, values, rest * sizeof(float));
}

/// Symmetric encode_codes fused with the error update: the fresh error h - deQ(code), the
/// operations of decode_codes accumulating with weight -1 (h + (-1) * v is h - v exactly),
/// from the codes still in registers, folded into e by `rule` (e = fresh when Replace, that is
/// keep == 0; else keep * e + take * fresh) where the result is finite. CheckFresh: the fresh
/// error may be non-finite. Returns how many elements held their e. m a multiple of 8; the
/// coder, the record and the rule finite (as those of a group whose h is finite).
template <unsigned B, bool Stochastic, bool Replace, bool CheckFresh>
COMMPRESS_FORCEINLINE std::uint32_t
encode_error_codes(const float* COMMPRESS_RESTRICT h, std::size_t m, unsigned bits,
                   quantize::coder coder, quantize::record rec,
                   const std::uint32_t* COMMPRESS_RESTRICT words,
                   unsigned char* COMMPRESS_RESTRICT out, error_update rule,
                   float* COMMPRESS_RESTRICT e, prefetch_stream prefetch) {
  using namespace simd;
  constexpr quant_range sym = quant_range::symmetric;
  const unsigned b = width<B>(bits);
  const code_constants k = constants_of(sym, b, coder);
  const vu offset = splat_u32((1u << (b - 1)) - 1u);
  const vf scale = splat(rec.a);
  const vf keep = splat(rule.keep);
  const vf take = splat(rule.take);
  // The codes of the 64 elements hv[0, 64) (words from ws) packed at o, and their errors
  // ev[0, 64) updated; returns how many held their e.
  const auto step_64 = [&](const float* hv, const std::uint32_t* ws, unsigned char* o, float* ev,
                           prefetch_stream p) {
    vu c[vectors_per_64];
    codes64<false, Stochastic>(hv, 0, k, ws, p, c);
    if constexpr (B == 0)
      store_packed_any(narrow_u8(c), o, b);
    else
      store_packed<B>(narrow_u8(c), o, b);
    std::uint32_t held_64 = 0;
    for (std::size_t q = 0; q < vectors_per_64; ++q) {
      const std::size_t j = q * lanes;
      const vf v = mul(to_float_i32(sub_u32(c[q], offset)), scale);
      const vf fresh = sub(load(hv + j), v);
      vf next = fresh;
      vm ok = CheckFresh ? finite(fresh) : all_lanes();
      if constexpr (!Replace) {
        next = add(mul(keep, load(ev + j)), mul(take, fresh));
        ok = and_mask(ok, finite(next));
      }
      if constexpr (Replace && !CheckFresh) {
        store(ev + j, next);
      } else {
        store_where(ev + j, ok, next);
        held_64 += static_cast<std::uint32_t>(lanes - count(ok));
      }
    }
    return held_64;
  };
  std::uint32_t held = 0;
  std::size_t i = 0;
  for (; i + 64 <= m; i += 64)
    held += step_64(
        h + i, Stochastic ? words + i : nullptr, out + i / 8 * b, e + i,
        prefetch_stream{prefetch.base == nullptr ? nullptr : prefetch.base + i, prefetch.end});
  if (i == m)
    return held;
  const std::size_t rest = m - i;
  if (rest >= vector_tail_min) {
    // The last m - i through the same vectors, from copies padded with zeros: a padded
    // element's h and e are 0, so its fresh error and its next e are 0, which is finite (it
    // never counts as held); its code and its e are not stored.
    alignas(64) float hs[64] = {};
    alignas(64) float es[64] = {};
    alignas(64) std::uint32_t ws[Stochastic ? 64 : 1] = {};
    std::memcpy(hs, h + i, rest * sizeof(float));
    std::memcpy(es, e + i, rest * sizeof(float));
    if constexpr (Stochastic)
      std::memcpy(ws, words + i, rest * sizeof(std::uint32_t));
    alignas(64) unsigned char codes[8 * 8]; // all 8 * b bytes written by step_64
    held += step_64(hs, ws, codes, es, {});
    std::memcpy(out + i / 8 * b, codes, rest / 8 * b);
    std::memcpy(e + i, es, rest * sizeof(float));
    return held;
  }
  alignas(64) std::uint8_t c[64];
  for (std::size_t j = i; j < m; ++j) {
    const std::uint32_t code =
        Stochastic ? quantize::encode_stochastic(sym, b, h[j], coder, uniform_from_bits(words[j]))
                   : quantize::encode_nearest(sym, b, h[j], coder);
    c[j - i] = static_cast<std::uint8_t>(code);
    const float v = quantize::decode_value(sym, b, code, rec);
    const float fresh = commpress::detail::add_rn(h[j], commpress::detail::mul_rn(-1.0f, v));
    held += rule(fresh, e[j]) ? 1u : 0u;
  }
  pack_bytes<B>(c, b, out + i / 8 * b, static_cast<unsigned>((m - i) / 8));
  return held;
}

/// What add_screened found: the non-finite count of g and max_magnitude_bits of h.
struct screened_sum {
  std::uint32_t nonfinite;
  std::uint32_t max_bits;
};

/// Error feedback's first step over m elements: h = screen(g) + e, where screen maps a NaN or
/// Inf g to 0 when Zero and keeps it otherwise, and the block's absmax key taken on the way;
/// prefetch(j) once per 16 elements.
template <bool Zero>
COMMPRESS_FORCEINLINE screened_sum add_screened(const float* COMMPRESS_RESTRICT g,
                                                const float* COMMPRESS_RESTRICT e, std::size_t m,
                                                float* COMMPRESS_RESTRICT h,
                                                prefetch_stream prefetch) {
  using namespace simd;
  vu most = splat_u32(0);
  vm any_nonfinite = no_lanes();
  std::size_t j = 0;
  for (; j + 16 <= m; j += 16) {
    prefetch(j);
    for (std::size_t q = j; q < j + 16; q += lanes) {
      vf gv = load(g + q);
      if constexpr (Zero) {
        const vm nf = nonfinite(gv);
        gv = clear(nf, gv);
        any_nonfinite = or_mask(any_nonfinite, nf);
      }
      const vf hv = add(gv, load(e + q));
      store(h + q, hv);
      most = max_i32(most, magnitude_bits(hv)); // below 2^31: signed is unsigned order
    }
  }
  const auto vector_max = static_cast<std::uint32_t>(reduce_max_i32(most));
  // The vector loop counts NaN/Inf g only when there is something to count: without Zero, a
  // NaN or Inf g makes its h non-finite, so a finite vector_max proves there is none.
  const bool vector_nonfinite = Zero ? any(any_nonfinite) : vector_max >= 0x7f800000u;
  std::uint32_t nonfinite_count = 0;
  if (vector_nonfinite)
    for (std::size_t i = 0; i < j; ++i)
      nonfinite_count +=
          (commpress::detail::float_to_bits(g[i]) & 0x7fffffffu) >= 0x7f800000u ? 1u : 0u;
  const std::size_t rest = j;
  for (; j < m; ++j) {
    const bool nf = (commpress::detail::float_to_bits(g[j]) & 0x7fffffffu) >= 0x7f800000u;
    nonfinite_count += nf ? 1u : 0u;
    h[j] = (Zero && nf ? 0.0f : g[j]) + e[j];
  }
  const std::uint32_t rest_max = max_magnitude_bits(h + rest, m - rest);
  return {nonfinite_count, rest_max > vector_max ? rest_max : vector_max};
}

} // namespace commpress::cpu::detail
