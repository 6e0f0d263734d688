// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The top-k codec: keeps the k elements of largest magnitude, exactly, with a tie rule that
/// every backend follows (docs/methods.md 3.1, 4.3; property S1 of section 11.3).
///
/// **Scope.** One selection over the whole tensor (row_length == 0), or one per row of
/// row_length elements (per sample, as Rudakov et al.'s activation TopK, docs/methods.md 4.3).
///
/// **k per row.** count > 0: k = min(count, d_row). Otherwise k is the integer nearest to
/// fraction * d_row (at least 1 when fraction > 0), clamped to d_row: detail::keep_count.
///
/// **Selection.** The key of x is its float bits with the sign cleared, compared as an unsigned
/// integer: a total order on |x| (NaN > Inf > finite, -0 == +0) that needs no float compare.
/// The k largest keys win; among equal keys the LOWER index wins, so exactly k are kept and
/// every backend keeps the same set. This differs from Rudakov et al.'s pivot TopK (S2), which
/// drops every element equal to the pivot and so may keep fewer than k.
///
/// **Body** (docs/wire-format.md), fixed by (n, configuration):
/// [index section of row 0][row 1]...[value section of row 0][row 1]...
/// - A row's index section is either k ascending indices within the row, little-endian, of
///   index_width(d_row) bytes (1 if d_row <= 256, 2 if <= 65536, else 4), or a bitmap of
///   ceil(d_row / 8) bytes (bit i % 8 of byte i / 8 set iff element i is kept; unused high
///   bits zero), whichever is strictly smaller (the list on a tie).
/// - A row's value section is its k kept values in index order, as `values` (fp32, fp16 or
///   bf16, little-endian).
/// - With `value_quantizer.bits` > 0 the value sections are replaced by one quantize body
///   (compress/quantize.hpp) of the rows * k kept values in row order: its group records, then
///   the packed b-bit codes. This is the sparse-plus-quantized layout of DeMo and SparseLoCo
///   (docs/methods.md 3.4): chunks of `row_length` <= 256 elements take 1-byte indices, and the
///   quantizer's block groups run over the kept values, not over the chunks, so a scale is
///   shared by `group` kept values whatever k is. The quantizer's range, rounding and group
///   apply as for a dense tensor; stochastic rounding draws kept value j's uniform at index j.
///
/// **Decoding** writes zeros, then the kept values at their indices; decode_accumulate adds
/// weight * value at the kept indices only.
///
/// **Non-finite inputs.** propagate: NaN and Inf have the largest keys, so they are kept and
/// decode as themselves (a NaN as value dtype's NaN); with quantized values they poison their
/// value group, which decodes to NaN. zero_and_count: they count as 0.

#include <array>
#include <bit>
#include <cstdint>

#include "commpress/compress/quantize.hpp"
#include "commpress/core/concepts.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Exact top-k sparsification by magnitude, per tensor or per row. Biased and
/// contractive: ||x - C(x)||^2 <= (1 - k/d) ||x||^2. Not sum-compatible (each rank keeps its
/// own indices): aggregate by all-gather and decode_accumulate.
struct top_k {
  static constexpr codec_id id = codec_id::top_k;
  float fraction = 0.1f;        ///< share of each row kept, in [0, 1]; used when count == 0
  std::uint64_t count = 0;      ///< if > 0, elements kept per row (at most the row length)
  std::uint32_t row_length = 0; ///< 0: one selection over the tensor; else per row of this length
  dtype values = dtype::f32;    ///< wire dtype of the kept values: f32, f16 or bf16
  /// bits > 0: the kept values are sent as this quantizer's body instead (then `values` must be
  /// f32); its granularity is tensor or block with a power-of-two group (at most 2^24)
  quantize value_quantizer{.bits = 0};

  /// Whether the kept values are sent b-bit quantized.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr bool quantized() const noexcept {
    return value_quantizer.bits != 0;
  }

  /// Elements per row for an n-element tensor.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t
  row_elements(std::uint64_t n) const noexcept {
    return row_length == 0 ? n : row_length;
  }
  /// Number of rows for an n-element tensor (one, possibly empty, when row_length == 0).
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t rows(std::uint64_t n) const noexcept {
    return row_length == 0 ? 1 : n / row_length;
  }
  /// Elements kept in a row of d elements.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t kept(std::uint64_t d) const noexcept {
    return detail::keep_count(fraction, count, d);
  }
  /// Bytes of one listed index in a row of d elements.
  [[nodiscard]] COMMPRESS_HOST_DEVICE static constexpr unsigned
  index_width(std::uint64_t d) noexcept {
    return d <= 256 ? 1u : d <= 65536 ? 2u : 4u;
  }
  /// Whether a row of d elements with k kept sends a bitmap instead of an index list.
  [[nodiscard]] COMMPRESS_HOST_DEVICE static constexpr bool uses_bitmap(std::uint64_t d,
                                                                        std::uint64_t k) noexcept {
    return detail::ceil_div(d, 8) < k * index_width(d);
  }
  /// Bytes of a row's index section.
  [[nodiscard]] COMMPRESS_HOST_DEVICE static constexpr std::uint64_t
  index_bytes(std::uint64_t d, std::uint64_t k) noexcept {
    return uses_bitmap(d, k) ? detail::ceil_div(d, 8) : k * index_width(d);
  }
  /// Bytes of one kept value.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t value_bytes() const noexcept {
    return values == dtype::f32 ? 4 : 2;
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    const std::uint64_t d = row_elements(n);
    const std::uint64_t k = kept(d);
    if (quantized())
      return rows(n) * index_bytes(d, k) + value_quantizer.body_bytes(rows(n) * k);
    return rows(n) * (index_bytes(d, k) + k * value_bytes());
  }
  /// The header records the value dtype, row_length and whichever of count and fraction
  /// selects k (byte 1 says which): all four fields do not fit in 16 bytes, and the unused one
  /// does not change the payload. Byte 2 is the value quantizer's bits (0: not quantized),
  /// byte 3 its range (bit 0), rounding (bit 1) and group (bits 2-7: 0 for tensor granularity,
  /// else log2(group) + 1).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    p[0] = static_cast<std::uint8_t>(values);
    p[1] = count > 0 ? 1 : 0;
    if (quantized())
      detail::put_value_quantizer(p, value_quantizer);
    detail::put_param(p, 4, row_length);
    if (count > 0) {
      detail::put_param(p, 8, count);
    } else {
      detail::put_param(p, 8, std::bit_cast<std::uint32_t>(fraction));
    }
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t n) const noexcept {
    if (values != dtype::f32 && values != dtype::f16 && values != dtype::bf16)
      return {errc::invalid_argument, "top_k: values must be f32, f16 or bf16"};
    if (count == 0 && !(fraction >= 0.0f && fraction <= 1.0f))
      return {errc::invalid_argument, "top_k: fraction must lie in [0, 1]"};
    if (row_length != 0 && n % row_length != 0)
      return {errc::invalid_argument, "top_k: the tensor length is not a multiple of row_length"};
    if (row_elements(n) > (std::uint64_t{1} << 32))
      return {errc::invalid_argument, "top_k: rows longer than 2^32 elements are not supported"};
    if (!quantized())
      return {};
    if (values != dtype::f32)
      return {errc::invalid_argument,
              "top_k: quantized values replace the value dtype, which must stay f32"};
    if (!detail::recordable_value_quantizer(value_quantizer))
      return {errc::invalid_argument, "top_k: the value quantizer needs tensor granularity or "
                                      "block groups of a power of two up to 2^24"};
    return value_quantizer.can_implement(rows(n) * kept(row_elements(n)));
  }

  /// The selection key of x: |x| as ordered bits (NaN > Inf > finite; -0 == +0).
  COMMPRESS_HOST_DEVICE static std::uint32_t magnitude_key(float x) {
    return detail::float_to_bits(x) & 0x7fffffffu;
  }
  /// The wire code of a kept value (its fp32, fp16 or bf16 bits).
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x) const {
    return detail::encode_as(values, x);
  }
  /// The value a wire code stands for.
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code) const {
    return detail::decode_as(values, code);
  }

  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp):
  /// an index list, per-row selection with f16 values, a bitmap with bf16 values, nothing
  /// kept, 2-byte indices in rows of 1000, and quantized values: chunks of 40 (a divisor of the
  /// reliability tests' 1000 elements) with 2-bit asymmetric values in groups of 8, a bitmap
  /// with 3-bit stochastic values under one scale.
  static constexpr std::array<top_k, 7> examples() {
    return {top_k{.fraction = 0.25f},
            top_k{.count = 3, .row_length = 8, .values = dtype::f16},
            top_k{.fraction = 0.9f, .values = dtype::bf16},
            top_k{.fraction = 0.0f},
            top_k{.count = 2, .row_length = 1000},
            top_k{.count = 2,
                  .row_length = 40,
                  .value_quantizer = {.bits = 2, .group = 8, .range = quant_range::asymmetric}},
            top_k{.fraction = 0.5f,
                  .value_quantizer = {.bits = 3,
                                      .granularity = scale_granularity::tensor,
                                      .group = 0,
                                      .round = rounding::stochastic}}};
  }

  friend constexpr bool operator==(top_k, top_k) = default;
};

static_assert(codec<top_k>);

} // namespace commpress
