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
/// **Non-finite inputs.** A kept NaN/Inf is sent as is under propagate and as 0 under
/// zero_and_count. The count encode returns covers the whole input, kept or not, so a bad
/// step is seen even when no NaN is sampled.

#include <array>
#include <bit>
#include <cstdint>

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

  /// Elements kept of n (the number of strata).
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t kept(std::uint64_t n) const noexcept {
    return detail::keep_count(fraction, count, n);
  }
  /// Bytes of one kept value.
  [[nodiscard]] COMMPRESS_HOST_DEVICE constexpr std::uint64_t value_bytes() const noexcept {
    return values == dtype::f32 ? 4 : 2;
  }
  [[nodiscard]] constexpr std::uint64_t body_bytes(std::uint64_t n) const noexcept {
    return kept(n) * value_bytes();
  }
  [[nodiscard]] constexpr codec_params params() const noexcept {
    codec_params p{};
    p[0] = static_cast<std::uint8_t>(values);
    p[1] = unbiased ? 1 : 0;
    detail::put_param(p, 4, std::bit_cast<std::uint32_t>(fraction));
    detail::put_param(p, 8, count);
    return p;
  }
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (values != dtype::f32 && values != dtype::f16 && values != dtype::bf16)
      return {errc::invalid_argument, "random_k: values must be f32, f16 or bf16"};
    if (count == 0 && !(fraction >= 0.0f && fraction <= 1.0f))
      return {errc::invalid_argument, "random_k: fraction must lie in [0, 1]"};
    return {};
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
    const float v = decode_value(code);
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

  /// The configurations the fuzzers and the reliability tests run (compress/codec_list.hpp);
  /// the last keeps every element (one-element strata, so its payload does not depend on the
  /// step).
  static constexpr std::array<random_k, 3> examples() {
    return {random_k{.count = 4},
            random_k{.fraction = 0.5f, .unbiased = true, .values = dtype::bf16},
            random_k{.fraction = 1.0f, .values = dtype::f16}};
  }

  friend constexpr bool operator==(random_k, random_k) = default;
};

static_assert(codec<random_k>);

} // namespace commpress
