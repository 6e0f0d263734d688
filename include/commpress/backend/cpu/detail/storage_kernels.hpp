// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The vector loops of feedback state kept as block-quantized integers (feedback/storage.hpp,
/// store_int): the codes of a block and the values of its 8-bit codes.

#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"

namespace commpress::cpu::detail {

/// Signed codes of m finite elements of a store_int block:
/// q[i] = clamp(round_half_even(x[i] * inv), -qmax, qmax). Returns the largest
/// |x[i] * inv - round_half_even(x[i] * inv)| as bits, which tells the caller whether a product
/// came near a rounding tie. round_half_even is the add and subtract of 1.5 * 2^23, exact for
/// |x[i] * inv| < 2^22; max and min return their second operand for NaN, as the selects do.
inline std::uint32_t int_codes(const float* COMMPRESS_RESTRICT x, std::size_t m, float inv,
                               float qmax, std::int8_t* COMMPRESS_RESTRICT q) {
  using namespace simd;
  const vf vinv = splat(inv);
  const vf magic = splat(commpress::detail::round_magic);
  const vf hi = splat(qmax);
  const vf lo = splat(-qmax);
  vu far = splat_u32(0);
  std::size_t i = 0;
  for (; i + 64 <= m; i += 64) { // the codes fit int8, so the saturating packs are exact
    vu c[vectors_per_64];
    for (std::size_t k = 0; k < vectors_per_64; ++k) {
      const vf y = mul(load(x + i + k * lanes), vinv);
      const vf r = sub(add(y, magic), magic);
      far = max_i32(far, magnitude_bits(sub(y, r))); // below 2^31: signed is unsigned order
      c[k] = trunc_i32(min(max(r, lo), hi));
    }
    store_bytes(q + i, narrow_i8(c));
  }
  auto farthest = static_cast<std::uint32_t>(reduce_max_i32(far));
  for (; i < m; ++i) {
    const float y = x[i] * inv;
    const float r = (y + commpress::detail::round_magic) - commpress::detail::round_magic;
    const std::uint32_t d = commpress::detail::float_to_bits(y - r) & 0x7fffffffu;
    farthest = d > farthest ? d : farthest;
    float c = r > -qmax ? r : -qmax;
    c = c < qmax ? c : qmax;
    q[i] = static_cast<std::int8_t>(static_cast<std::int32_t>(c));
  }
  return farthest;
}

/// out[i] = q[i] * scale for m signed 8-bit codes and a finite scale (so the product is never
/// NaN and mul_rn's NaN select has nothing to do): the values of a store_int<8> block.
inline void int8_values(const std::int8_t* COMMPRESS_RESTRICT q, std::size_t m, float scale,
                        float* COMMPRESS_RESTRICT out) {
  using namespace simd;
  const vf vscale = splat(scale);
  std::size_t i = 0;
  for (; i + lanes <= m; i += lanes)
    store(out + i, mul(to_float_i32(load_i8(q + i)), vscale));
  for (; i < m; ++i)
    out[i] = static_cast<float>(q[i]) * scale;
}

} // namespace commpress::cpu::detail
