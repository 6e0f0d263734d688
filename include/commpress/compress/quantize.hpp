// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The quantize codec: b-bit uniform scalar quantization (1 <= b <= 8) with one scale per
/// tensor, per block of elements or per column, symmetric (absmax) or asymmetric (min-max)
/// range, and round-to-nearest-even or stochastic rounding (docs/methods.md section 2, and
/// 4.2, 6.2 for the papers' quantizers). The body layout is in docs/wire-format.md ("quantize").
///
/// Conventions (the literature uses both symmetric divisors; docs/methods.md 2.1):
/// - symmetric uses the non-clipping divisor L = 2^(b-1) - 1: codes q in [-L, L] are sent as
///   q + L in [0, 2L] (code 2^b - 1 is never written). max|x| is representable, so the error is
///   at most scale/2 for every element and stochastic rounding is unbiased. The record is the
///   f32 scale = absmax / L and an element decodes as (code - L) * scale, one rounded multiply.
/// - asymmetric is Rudakov's `quantize_custom` (docs/methods.md 2.2): M = 2^b - 1 intervals
///   anchored at lo = min, so min decodes exactly. The record is f32 lo then f32
///   step = (hi - lo) / M and an element decodes as lo + code * step (two rounded operations,
///   never fused: the same bits on the CPU and the GPU, docs/methods.md 10.2).
/// - the encoder multiplies by inv = L / absmax (or M / (hi - lo)), computed once per group.
///   An all-zero or constant group, or one whose inv overflows (absmax or hi - lo below about
///   M * 2^-128), gets inv = 0: every element is sent as the zero level (symmetric) or lo
///   (asymmetric), so no NaN appears and the group decodes to exact zeros / exact lo.
/// - no finite input decodes to a non-finite value: a scale (step) whose top level would
///   overflow (absmax near the float maximum) is lowered to the next float toward zero until
///   it does not; an asymmetric group whose range hi - lo overflows f32 (a "wide" group) is
///   encoded on halves, lo / 2 and x / 2, and records its step negated, which tells the
///   decoder to compute 2 (lo / 2 + code * |step|) (docs/wire-format.md, "quantize").
/// - group statistics (absmax, min, max) do not depend on the order of reduction; lo and hi
///   are canonicalised (-0 becomes +0) so the record bytes do not depend on it either.
/// - non-finite inputs: under nonfinite_policy::propagate a group holding a NaN or Inf gets a
///   NaN record (scale, or lo and step) and all-zero codes, so the whole group decodes to NaN
///   and the host's overflow check (loss scaling) still sees the bad step. Under
///   zero_and_count such an element counts as 0.

#include <array>
#include <bit>
#include <cstdint>

#include "commpress/core/concepts.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Which elements share one scale.
enum class scale_granularity : std::uint8_t {
  tensor = 0, ///< one scale for the whole tensor (Rudakov's quantize_custom)
  block = 1,  ///< one scale per `group` consecutive elements; the last block may be short
  column = 2, ///< tensor viewed as (n / group) rows x group columns, one scale per column
              ///< (AQ-SGD's per-feature scale, docs/methods.md 6.2)
};

/// @brief Symmetric absmax range or asymmetric min-max range.
enum class quant_range : std::uint8_t { symmetric = 0, asymmetric = 1 };

/// @brief Round to nearest (ties to even) or stochastically (unbiased, docs/methods.md 2.3).
enum class rounding : std::uint8_t { nearest = 0, stochastic = 1 };

/// @brief b-bit uniform quantization with per-tensor, per-block or per-column scales.
///
/// Body: the n_groups(n) group records in group order (symmetric: f32 scale; asymmetric: f32
/// lo, f32 step), then the b-bit codes in element order packed as format/bit_packing.hpp
/// describes. Stochastic rounding draws element i's uniform from random_u32(ctx.key(),
/// ctx.step, i), so every backend writes the same bytes for the same context.
struct quantize {
  static constexpr codec_id id = codec_id::quantize;
  std::uint32_t bits = 4; ///< 1..8; symmetric needs at least 2
  scale_granularity granularity = scale_granularity::block;
  /// block: elements per block; column: number of columns C (n % C == 0); tensor: must be 0
  std::uint32_t group = 128;
  quant_range range = quant_range::symmetric;
  rounding round = rounding::nearest;

  /// Wire record of one group: symmetric {scale, unused}; asymmetric {lo, step}.
  struct record {
    float a;
    float b;
  };
  /// Encoder constants of one group: y = (x * pre - lo) * inv, with lo = 0 for symmetric; pre
  /// is 1, or 1/2 for a wide asymmetric group (whose x - lo could overflow). No member has a
  /// default: the encoders keep arrays of coders on the stack, which must cost nothing to
  /// declare.
  struct coder {
    float inv;
    float lo;
    float pre;
  };

  /// Number of groups, hence of records, for n elements (an empty tensor has none).
  [[nodiscard]] constexpr std::uint64_t n_groups(std::uint64_t n) const noexcept {
    if (n == 0)
      return 0;
    switch (granularity) {
    case scale_granularity::tensor:
      return 1;
    case scale_granularity::block:
      return group == 0 ? 0 : detail::ceil_div(n, group);
    case scale_granularity::column:
      return group;
    }
    return 0;
  }
  /// Bytes of one group record.
  [[nodiscard]] constexpr std::uint64_t record_bytes() const noexcept {
    return range == quant_range::symmetric ? 4 : 8;
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return n_groups(n) * record_bytes() + detail::packed_bytes(n, bits);
  }
  /// Header params: [0] bits, [1] granularity, [2] range, [3] rounding, [4..7] group (u32 LE).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    detail::put_param(p, 0, static_cast<std::uint8_t>(bits));
    detail::put_param(p, 1, static_cast<std::uint8_t>(granularity));
    detail::put_param(p, 2, static_cast<std::uint8_t>(range));
    detail::put_param(p, 3, static_cast<std::uint8_t>(round));
    detail::put_param(p, 4, group);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t n) const noexcept {
    if (bits < 1 || bits > 8)
      return {errc::invalid_argument, "quantize: bits must be in 1..8"};
    if (range != quant_range::symmetric && range != quant_range::asymmetric)
      return {errc::invalid_argument, "quantize: unknown range"};
    if (round != rounding::nearest && round != rounding::stochastic)
      return {errc::invalid_argument, "quantize: unknown rounding"};
    if (range == quant_range::symmetric && bits < 2)
      return {errc::invalid_argument,
              "quantize: symmetric range needs at least 2 bits (1 bit leaves only the zero level)"};
    switch (granularity) {
    case scale_granularity::tensor:
      if (group != 0)
        return {errc::invalid_argument, "quantize: group must be 0 for tensor granularity"};
      return {};
    case scale_granularity::block:
      if (group == 0)
        return {errc::invalid_argument, "quantize: block granularity needs group > 0"};
      return {};
    case scale_granularity::column:
      if (group == 0)
        return {errc::invalid_argument,
                "quantize: column granularity needs group (the column count) > 0"};
      if (n % group != 0)
        return {errc::invalid_argument,
                "quantize: column granularity needs n to be a multiple of group (the column "
                "count)"};
      return {};
    }
    return {errc::invalid_argument, "quantize: unknown granularity"};
  }

  /// Levels of the range: L = 2^(b-1) - 1 (symmetric) or M = 2^b - 1 (asymmetric).
  COMMPRESS_HOST_DEVICE static constexpr float levels(quant_range r, unsigned b) {
    return r == quant_range::symmetric ? static_cast<float>((1u << (b - 1)) - 1u)
                                       : static_cast<float>((1u << b) - 1u);
  }

  /// Whether an asymmetric group with finite statistics lo = s0, hi = s1 is wide: its range
  /// hi - lo overflows f32 (lo < 0 < hi, both near the float maximum).
  COMMPRESS_HOST_DEVICE static bool is_wide(quant_range r, float s0, float s1) {
    return r == quant_range::asymmetric && detail::is_finite(s0) && detail::is_finite(s1) &&
           !detail::is_finite(detail::sub_rn(s1, s0));
  }
  /// Whether a record is a wide group's (its step negative).
  COMMPRESS_HOST_DEVICE static bool is_wide_record(quant_range r, record rec) {
    return r == quant_range::asymmetric && rec.b < 0.0f;
  }

  /// Encoder constants from a group's statistics: s0 = absmax (symmetric) or s0 = lo, s1 = hi.
  /// A NaN statistic (a poisoned group) gives inv = NaN, which sends every code as 0.
  COMMPRESS_HOST_DEVICE static coder make_coder(quant_range r, unsigned b, float s0, float s1) {
    const float inf = detail::bits_to_float(0x7f800000u);
    if (r == quant_range::symmetric) {
      const float inv = detail::div_rn(levels(r, b), s0);
      return {inv == inf ? 0.0f : inv, 0.0f, 1.0f}; // absmax == 0 or tiny: send the zero level
    }
    if (is_wide(r, s0, s1)) { // on halves: lo / 2 is exact, hi / 2 - lo / 2 cannot overflow
      const float half_lo = detail::mul_rn(0.5f, s0);
      return {detail::div_rn(levels(r, b), detail::sub_rn(detail::mul_rn(0.5f, s1), half_lo)),
              half_lo, 0.5f};
    }
    const float inv = detail::div_rn(levels(r, b), detail::sub_rn(s1, s0));
    return {inv == inf ? 0.0f : inv, detail::add_rn(s0, 0.0f), 1.0f}; // constant group: send lo
  }

  /// The wire record from a group's statistics (same arguments as make_coder). The scale (or
  /// step) is lowered to the next float toward zero while the group's top level would decode
  /// to an infinity.
  COMMPRESS_HOST_DEVICE static record make_record(quant_range r, unsigned b, float s0, float s1) {
    const float top = levels(r, b);
    if (r == quant_range::symmetric) {
      float scale = detail::div_rn(s0, top);
      while (detail::is_finite(scale) && !detail::is_finite(detail::mul_rn(top, scale)))
        scale = toward_zero(scale);
      return {scale, 0.0f};
    }
    const float lo = detail::add_rn(s0, 0.0f); // -0 becomes +0
    if (is_wide(r, s0, s1)) {
      const float half_lo = detail::mul_rn(0.5f, lo);
      float step = detail::div_rn(detail::sub_rn(detail::mul_rn(0.5f, s1), half_lo), top);
      while (!detail::is_finite(
          detail::mul_rn(2.0f, detail::add_rn(half_lo, detail::mul_rn(top, step)))))
        step = toward_zero(step);
      return {lo, -step}; // the negative step marks the wide group
    }
    float step = detail::div_rn(detail::sub_rn(s1, s0), top);
    while (detail::is_finite(step) &&
           !detail::is_finite(detail::add_rn(lo, detail::mul_rn(top, step))))
      step = toward_zero(step);
    return {lo, step};
  }

  /// Code of x rounded to nearest even; NaN (a poisoned group) gives code 0.
  COMMPRESS_HOST_DEVICE static std::uint32_t encode_nearest(quant_range r, unsigned b, float x,
                                                            coder k) {
    return to_code(r, b, detail::round_half_even(scaled(r, x, k)));
  }

  /// Code of x rounded stochastically: up with probability frac(y), u uniform on [0, 1).
  COMMPRESS_HOST_DEVICE static std::uint32_t encode_stochastic(quant_range r, unsigned b, float x,
                                                               coder k, float u) {
    const float y = scaled(r, x, k);
    const float f = detail::floor_small(y);
    return to_code(r, b, u < detail::sub_rn(y, f) ? detail::add_rn(f, 1.0f) : f);
  }

  /// The value a code stands for in a group with record `rec`.
  COMMPRESS_HOST_DEVICE static float decode_value(quant_range r, unsigned b, std::uint32_t code,
                                                  record rec) {
    if (r == quant_range::symmetric) {
      const int offset = (1 << (b - 1)) - 1;
      return detail::mul_rn(static_cast<float>(static_cast<int>(code) - offset), rec.a);
    }
    if (rec.b < 0.0f) // a wide group: 2 (lo / 2 + code * |step|), which cannot overflow
      return detail::mul_rn(2.0f, detail::add_rn(detail::mul_rn(0.5f, rec.a),
                                                 detail::mul_rn(static_cast<float>(code), -rec.b)));
    return detail::add_rn(rec.a, detail::mul_rn(static_cast<float>(code), rec.b));
  }

  /// decode_value for a finite record that is not a wide group's, on the host: the same
  /// roundings without the NaN
  /// canonicalisation, which such a record never needs ((code - offset) * a and a + code * b
  /// overflow at worst to an infinity, never to a NaN). Without the select a loop of it
  /// vectorizes to a multiply (and add) per value at any target flags; the multiply and add
  /// stay two roundings under the -ffp-contract=off of the commpress target, as in all
  /// host-side code (core/math.hpp).
  static float decode_value_of_finite_record(quant_range r, unsigned b, std::uint32_t code,
                                             record rec) {
    if (r == quant_range::symmetric) {
      const int offset = (1 << (b - 1)) - 1;
      return static_cast<float>(static_cast<int>(code) - offset) * rec.a;
    }
    return rec.a + static_cast<float>(code) * rec.b;
  }

  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp):
  /// every granularity, both ranges, both roundings, odd widths and groups.
  static constexpr std::array<quantize, 6> examples() {
    return {quantize{.bits = 4, .granularity = scale_granularity::block, .group = 8},
            quantize{.bits = 8,
                     .granularity = scale_granularity::tensor,
                     .group = 0,
                     .range = quant_range::asymmetric,
                     .round = rounding::stochastic},
            quantize{.bits = 3,
                     .granularity = scale_granularity::column,
                     .group = 4,
                     .range = quant_range::asymmetric},
            quantize{.bits = 1,
                     .granularity = scale_granularity::block,
                     .group = 16,
                     .range = quant_range::asymmetric},
            quantize{.bits = 2,
                     .granularity = scale_granularity::block,
                     .group = 3,
                     .round = rounding::stochastic},
            quantize{.bits = 5, .granularity = scale_granularity::column, .group = 2}};
  }

  friend constexpr bool operator==(quantize, quantize) = default;

private:
  COMMPRESS_HOST_DEVICE static float scaled(quant_range r, float x, coder k) {
    return r == quant_range::symmetric
               ? detail::mul_rn(x, k.inv)
               : detail::mul_rn(detail::sub_rn(detail::mul_rn(x, k.pre), k.lo), k.inv);
  }
  /// The next float toward zero of a positive finite x.
  COMMPRESS_HOST_DEVICE static float toward_zero(float x) {
    return x > 0.0f ? detail::bits_to_float(detail::float_to_bits(x) - 1u) : x;
  }
  /// Shifts a rounded level into [0, max code] and clamps it; the lower clamp is written so
  /// that NaN maps to 0.
  COMMPRESS_HOST_DEVICE static std::uint32_t to_code(quant_range r, unsigned b, float q) {
    const float offset = r == quant_range::symmetric ? levels(r, b) : 0.0f;
    const float top = r == quant_range::symmetric ? 2.0f * levels(r, b) : levels(r, b);
    float c = detail::add_rn(q, offset);
    c = c > 0.0f ? c : 0.0f;
    c = c < top ? c : top;
    return static_cast<std::uint32_t>(c);
  }
};

static_assert(codec<quantize>);

namespace detail {

/// Whether a sparsifier (top_k, random_k) can record quantizer q of its kept values in two
/// params bytes: tensor granularity, or blocks of a power of two up to 2^24.
constexpr bool recordable_value_quantizer(const quantize& q) noexcept {
  return q.granularity == scale_granularity::tensor ||
         (q.granularity == scale_granularity::block && std::has_single_bit(q.group) &&
          q.group <= (1u << 24));
}

/// Params bytes 2 and 3 of a sparsifier with value quantizer q (docs/wire-format.md): byte 2
/// its bits, byte 3 its range (bit 0), rounding (bit 1) and group (bits 2-7: 0 for tensor
/// granularity, else log2(group) + 1).
constexpr void put_value_quantizer(codec_params& p, const quantize& q) noexcept {
  const unsigned group_code = q.granularity == scale_granularity::tensor
                                  ? 0u
                                  : static_cast<unsigned>(std::countr_zero(q.group)) + 1u;
  p[2] = static_cast<std::uint8_t>(q.bits);
  p[3] = static_cast<std::uint8_t>(static_cast<unsigned>(q.range) |
                                   static_cast<unsigned>(q.round) << 1 | group_code << 2);
}

} // namespace detail

} // namespace commpress
