// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The random-k codec: keeps k elements chosen by the shared random stream, and sends only
/// their values (docs/methods.md 3.2; properties S3-S5 of section 11.3).
///
/// **Stratified selection.** The n elements are cut into k strata, stratum j being
/// [floor(j n / k), floor((j + 1) n / k)), and stratum j keeps the element
/// start_j + floor(random_u32(key, step, j) * size_j / 2^32), with key = make_rng_key(seed,
/// tensor_id) of the context. Why strata rather than k uniform draws without replacement:
/// - exactly k distinct indices, always, with no rejection loop or sort;
/// - every index depends on its stratum alone, so a GPU computes all k in parallel and gathers
///   them in O(k), and a decoder regenerates them from (seed, tensor_id, step) in the header:
///   the indices are never sent;
/// - element i of stratum j is kept with probability 1 / size_j (k / n when k divides n), so
///   unscaled, E||x - C(x)||^2 = (1 - k/n) ||x||^2 when k divides n (S4).
///
/// **Unbiased mode.** With `unbiased`, a kept value is decoded times size_j (rounded once to
/// float, exact below 2^24), so E[C(x)] = x (S3).
///
/// **Sum-compatible.** Ranks that encode with the same (seed, tensor_id, step) keep the same
/// indices (S5), so their value arrays can be summed by a plain all-reduce before decoding.
///
/// **k.** count > 0: k = min(count, n); otherwise the integer nearest to fraction * n (at least
/// 1 when fraction > 0), clamped to n: detail::keep_count, as top_k.
///
/// **Body** (docs/wire-format.md): the k kept values in stratum order, as `values` (fp32, fp16
/// or bf16, little-endian). Nothing else.
///
/// **Quantized values** (docs/methods.md 3.5). With `value_quantizer.bits` > 0 the body is
/// instead one quantize body (compress/quantize.hpp) of the k kept values in stratum order: its
/// group records, then the packed b-bit codes; the quantizer's groups count kept values. Its
/// stochastic rounding draws kept value j's uniform at index 2^63 + j of the context's stream,
/// not at j: word j also picked stratum j's element, and a uniform that decided which element
/// was kept would, given that element, not be uniform, so the rounding would be biased. Under
/// `unbiased` the decoded quantized value is scaled by size_j as a plain value is; with
/// stochastic rounding E[C(x)] = x still holds, as the rounding is unbiased given the
/// selection. The body is no longer a value array: ranks' bodies cannot be summed as sent, and
/// the all-reduce sums the decoded values (collective/all_reduce.hpp).
///
/// **Non-finite inputs.** A kept NaN/Inf is sent as is under propagate and as 0 under
/// zero_and_count; with quantized values it poisons its value group, which decodes to NaN. The
/// count encode returns covers the whole input, kept or not, so a bad step is seen even when no
/// NaN is sampled.

#include <array>
#include <bit>
#include <cstdint>

#include "commpress/compress/quantize.hpp"
#include "commpress/core/concepts.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Random-k sparsification with a shared seed: k values on the wire, no indices.
/// Unbiased (variance n/k - 1) with `unbiased`, else contractive in expectation.
struct random_k {
  static constexpr codec_id id = codec_id::random_k;
  float fraction = 0.01f;    ///< share of the tensor kept, in [0, 1]; used when count == 0
  std::uint64_t count = 0;   ///< if > 0, elements kept (at most n)
  bool unbiased = false;     ///< decode kept values times their stratum size: E[C(x)] = x
  dtype values = dtype::f32; ///< wire dtype of the kept values: f32, f16 or bf16
  /// bits > 0: the kept values are sent as this quantizer's body instead (then `values` must be
  /// f32); its granularity is tensor or block with a power-of-two group (at most 2^24)
  quantize value_quantizer{.bits = 0};

  /// Random-stream index of kept value j's stochastic rounding uniform, minus j: past every
  /// index the selection reads (0 .. k - 1), and a multiple of 4, so it starts a Philox block.
  static constexpr std::uint64_t rounding_stream_offset = std::uint64_t{1} << 63;

  /// Whether the kept values are sent b-bit quantized.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr bool quantized() const noexcept {
    return value_quantizer.bits != 0;
  }
  /// Elements kept of n (the number of strata).
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t kept(std::uint64_t n) const noexcept {
    return detail::keep_count(fraction, count, n);
  }
  /// Bytes of one kept value.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t value_bytes() const noexcept {
    return values == dtype::f32 ? 4 : 2;
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    if (quantized())
      return value_quantizer.body_bytes(kept(n));
    return kept(n) * value_bytes();
  }
  /// Bytes 2 and 3, zero without a value quantizer, hold it as top_k's do: byte 2 its bits,
  /// byte 3 its range (bit 0), rounding (bit 1) and group (bits 2-7: 0 for tensor
  /// granularity, else log2(group) + 1).
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    p[0] = static_cast<std::uint8_t>(values);
    p[1] = unbiased ? 1 : 0;
    if (quantized())
      detail::put_value_quantizer(p, value_quantizer);
    detail::put_param(p, 4, std::bit_cast<std::uint32_t>(fraction));
    detail::put_param(p, 8, count);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t n) const noexcept {
    if (values != dtype::f32 && values != dtype::f16 && values != dtype::bf16)
      return {errc::invalid_argument, "random_k: values must be f32, f16 or bf16"};
    if (count == 0 && !(fraction >= 0.0f && fraction <= 1.0f))
      return {errc::invalid_argument, "random_k: fraction must lie in [0, 1]"};
    if (!quantized())
      return {};
    if (values != dtype::f32)
      return {errc::invalid_argument,
              "random_k: quantized values replace the value dtype, which must stay f32"};
    if (!detail::recordable_value_quantizer(value_quantizer))
      return {errc::invalid_argument, "random_k: the value quantizer needs tensor granularity or "
                                      "block groups of a power of two up to 2^24"};
    return value_quantizer.can_implement(kept(n));
  }

  /// First element of stratum j of k over n elements: floor(j n / k), for j <= k.
  COMMPRESS_HOST_DEVICE static std::uint64_t stratum_start(std::uint64_t j, std::uint64_t n,
                                                           std::uint64_t k) {
    // j * n needs up to 128 bits once n exceeds 2^32 (nvcc supports __int128 in device code).
    __extension__ typedef unsigned __int128 u128;
    return static_cast<std::uint64_t>(static_cast<u128>(j) * n / k);
  }
  /// The element stratum j keeps, for a stratum [start, start + size) and its random word.
  COMMPRESS_HOST_DEVICE static std::uint64_t pick(std::uint64_t start, std::uint64_t size,
                                                  std::uint32_t bits) {
    // floor(bits * size / 2^32) without 128-bit arithmetic: split size into 32-bit halves.
    const std::uint64_t hi = size >> 32;
    const std::uint64_t lo = size & 0xffffffffu;
    return start + bits * hi + ((bits * lo) >> 32);
  }
  /// The decoded value of a wire code kept from a stratum of `size` elements. The unbiased
  /// estimate of a finite value near the float maximum can exceed it; it saturates there, so a
  /// finite value never decodes to an infinity.
  COMMPRESS_HOST_DEVICE float decode_kept(std::uint32_t code, std::uint64_t size) const {
    return scale_kept(decode_value(code), size);
  }
  /// A decoded kept value (from the wire dtype or the value quantizer) from a stratum of
  /// `size` elements, times size under `unbiased`, saturating as decode_kept says.
  COMMPRESS_HOST_DEVICE float scale_kept(float v, std::uint64_t size) const {
    if (!unbiased)
      return v;
    const float scaled = detail::mul_rn(v, static_cast<float>(size));
    if (detail::is_finite(v) && !detail::is_finite(scaled))
      return detail::bits_to_float((detail::float_to_bits(scaled) & 0x80000000u) | 0x7f7fffffu);
    return scaled;
  }
  /// The wire code of a kept value (its fp32, fp16 or bf16 bits).
  COMMPRESS_HOST_DEVICE std::uint32_t encode_value(float x) const {
    return detail::encode_as(values, x);
  }
  /// The value a wire code stands for (before the unbiased scaling).
  COMMPRESS_HOST_DEVICE float decode_value(std::uint32_t code) const {
    return detail::decode_as(values, code);
  }

  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp):
  /// fp32 values, unbiased bf16 values, every element kept (one-element strata, so its payload
  /// does not depend on the step), and quantized values: 2-bit asymmetric in groups of 8, and
  /// unbiased 3-bit stochastic values under one scale.
  static constexpr std::array<random_k, 5> examples() {
    return {random_k{.count = 4},
            random_k{.fraction = 0.5f, .unbiased = true, .values = dtype::bf16},
            random_k{.fraction = 1.0f, .values = dtype::f16},
            random_k{.fraction = 0.25f,
                     .value_quantizer = {.bits = 2, .group = 8, .range = quant_range::asymmetric}},
            random_k{.fraction = 0.5f,
                     .unbiased = true,
                     .value_quantizer = {.bits = 3,
                                         .granularity = scale_granularity::tensor,
                                         .group = 0,
                                         .round = rounding::stochastic}}};
  }

  friend constexpr bool operator==(random_k, random_k) = default;
};

static_assert(codec<random_k>);

} // namespace commpress
