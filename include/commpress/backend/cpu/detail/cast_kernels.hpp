// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The vector loops of the cast codec: fp32 to bf16 or fp16 wire codes and back, the same
/// codes and values as the per-element definitions of core/dtype.hpp (to_bfloat16, to_half,
/// to_float), which their tails call. The lanes convert as element_lanes.hpp does.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/cpu_features.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/crc32c.hpp"
#include "commpress/format/header.hpp"

namespace commpress::cpu::detail {

/// The wire codes of x[0..lanes): to_bfloat16 (Bf16) or to_half of the screened value (Zero:
/// NaN/Inf become 0), a NaN as the canonical code 0x7fff. Counts the NaN/Inf inputs per lane.
template <bool Bf16, bool Zero>
COMMPRESS_FORCEINLINE simd::vh cast_codes(const float* x, simd::vu& nonfinite_lanes) {
  using namespace simd;
  vu u = load_u32(x);
  const vu a = and_u32(u, splat_u32(0x7fffffffu));
  const auto round = [](vu w) { return Bf16 ? bf16_lanes(w) : half_lanes(from_bits(w)); };
  // Only magnitudes beyond the code type's largest finite value (NaN and infinities among them)
  // need the screening below; a vector without one, the common case, is rounded as it is.
  const float top = Bf16 ? commpress::detail::bfloat16_max : commpress::detail::half_max;
  if (!any(gt_i32(a, splat_u32(commpress::detail::float_to_bits(top)))))
    return round(u);
  const vm nf = gt_i32(a, splat_u32(0x7f7fffffu));
  nonfinite_lanes = count_lanes(nonfinite_lanes, nf);
  if constexpr (Zero)
    u = clear(nf, u);
  // A finite value beyond the code type's range saturates to its largest finite value, as
  // encode_as does; NaN and infinities (the lanes nf) are left as they are.
  const vf v = from_bits(u);
  vh code = round(bits(select(nf, v, min(max(v, splat(-top)), splat(top)))));
  if constexpr (!Zero)
    code = select(gt_i32(a, splat_u32(0x7f800000u)), splat_u16(0x7fffu), code);
  return code;
}

/// The wire code of one screened element (the tails of the vector loops).
template <bool Bf16, bool Zero>
COMMPRESS_FORCEINLINE std::uint16_t cast_code(float v, std::size_t& bad) {
  const bool nf = !commpress::detail::is_finite(v);
  bad += nf ? 1u : 0u;
  if (Zero && nf)
    v = 0.0f;
  return static_cast<std::uint16_t>(
      commpress::detail::encode_as(Bf16 ? dtype::bf16 : dtype::f16, v));
}

/// Cast of n fp32 to bf16 (Bf16) or fp16 wire codes at `out` (cast_codes). Returns the number of
/// NaN/Inf inputs. prefetch(i) once per 16 elements. Not inlined: inside encode() GCC 12 loses
/// the restrict qualifiers.
template <bool Bf16, bool Zero>
[[gnu::noinline]] inline std::size_t cast_encode(const float* COMMPRESS_RESTRICT x, std::size_t n,
                                                 unsigned char* COMMPRESS_RESTRICT out,
                                                 prefetch_stream prefetch = {}) {
  using namespace simd;
  std::size_t bad = 0;
  std::size_t i = 0;
  // Per-lane counters, emptied every 2^24 elements so that none can overflow.
  while (i + lanes <= n) {
    const std::size_t block_end = n - i > (std::size_t{1} << 24) ? i + (std::size_t{1} << 24) : n;
    vu nonfinite_lanes = splat_u32(0);
    for (; i + lanes <= block_end; i += lanes) {
      if (i % 16 == 0)
        prefetch(i);
      store(out + 2 * i, cast_codes<Bf16, Zero>(x + i, nonfinite_lanes));
    }
    bad += reduce_add_u32(nonfinite_lanes);
  }
  for (; i < n; ++i) {
    const std::uint16_t code = cast_code<Bf16, Zero>(x[i], bad);
    std::memcpy(out + 2 * i, &code, 2);
  }
  return bad;
}

#if defined(COMMPRESS_CRC32C_STREAMING)
/// Elements of one cast_encode_streamed call: one payload checksum chunk of codes.
inline constexpr std::size_t cast_streamed_elements = format::checksum_chunk_bytes / 2;

/// cast_encode of cast_streamed_elements elements into a 64-byte aligned `out`, whose codes go
/// to memory with non-temporal stores and into `crc` (a fresh crc32c_streaming) from the
/// registers, so the checksum chunk is neither read back nor owned in the cache before it is
/// written. prefetch(i) once per 16 elements. Returns the NaN/Inf count. AVX-512 only (where
/// the streaming CRC exists).
COMMPRESS_INTRINSICS_BEGIN
template <bool Bf16, bool Zero>
[[gnu::noinline]] inline std::size_t
cast_encode_streamed(const float* COMMPRESS_RESTRICT x, unsigned char* COMMPRESS_RESTRICT out,
                     prefetch_stream prefetch, commpress::detail::crc32c_streaming& crc) {
  using namespace simd;
  vu nonfinite_lanes = splat_u32(0);
  const auto codes32 = [&](std::size_t i) { // 64 bytes of codes of x[i..i + 32)
    const vh lo = cast_codes<Bf16, Zero>(x + i, nonfinite_lanes);
    const vh hi = cast_codes<Bf16, Zero>(x + i + 16, nonfinite_lanes);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo.v), hi.v, 1);
  };
  for (std::size_t i = 0; i < cast_streamed_elements; i += 128) {
    for (std::size_t k = 0; k < 128; k += 16)
      prefetch(i + k);
    const __m512i b0 = codes32(i), b1 = codes32(i + 32), b2 = codes32(i + 64), b3 = codes32(i + 96);
    auto* o = reinterpret_cast<__m512i*>(out + 2 * i);
    _mm512_stream_si512(o, b0);
    _mm512_stream_si512(o + 1, b1);
    _mm512_stream_si512(o + 2, b2);
    _mm512_stream_si512(o + 3, b3);
    crc.append(b0, b1, b2, b3);
  }
  return reduce_add_u32(nonfinite_lanes);
}
COMMPRESS_INTRINSICS_END
#endif

/// Decodes n bf16 (Bf16) or fp16 wire codes: out = value, or out += weight * value when
/// Accumulate (two roundings and a canonical NaN, as decode_accumulate's add_rn and mul_rn: a
/// NaN product leaves a NaN sum, so one canonicalisation gives the same bits).
template <bool Bf16, bool Accumulate>
inline void cast_decode(const unsigned char* COMMPRESS_RESTRICT in, std::size_t n,
                        float* COMMPRESS_RESTRICT out, float weight) {
  using namespace simd;
  std::size_t i = 0;
  const vf vweight = splat(weight);
  for (const std::size_t whole = n / lanes * lanes; i < whole; i += lanes) {
    const vu u = load_u16(in + 2 * i);
    vf v = Bf16 ? from_bits(sll<16>(u)) : half_values(u, in + 2 * i);
    if constexpr (Accumulate)
      v = canonical_nan(add(load(out + i), mul(vweight, v)));
    store(out + i, v);
  }
  for (; i < n; ++i) {
    std::uint16_t code;
    std::memcpy(&code, in + 2 * i, 2);
    const std::uint32_t u = Bf16 ? static_cast<std::uint32_t>(code) << 16
                                 : commpress::detail::half_bits_to_float_bits(code);
    const float v = commpress::detail::bits_to_float(u);
    out[i] =
        Accumulate ? commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v)) : v;
  }
}

} // namespace commpress::cpu::detail
