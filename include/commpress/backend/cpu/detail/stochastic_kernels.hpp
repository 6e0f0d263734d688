// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The stochastic codecs' encode_value on the vector layer: TernGrad (compress/terngrad.hpp) and
/// QSGD (compress/qsgd.hpp) compute their codes from a lane of fp32 input and a lane of random
/// bits with the same rounded operations, in the same order, as their scalar members, so the
/// codes are the same bit for bit. The block-scaled kit (backend/cpu/scaled.hpp) takes
/// stochastic_lanes<C>::encode, where it is defined, for fp32 runs of whole vectors.

#include <concepts>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/compress/qsgd.hpp"
#include "commpress/compress/scaled.hpp"
#include "commpress/compress/terngrad.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"

namespace commpress::cpu::detail {

/// A stochastic codec C's encode_value(x, k, random) in every lane, as
/// `static simd::vu encode(const C&, simd::vf x, const typename C::encoder&, simd::vu random)`
/// for finite x; undefined for a codec without one.
template <class C> struct stochastic_lanes;

/// Whether codec C has stochastic_lanes.
template <class C>
concept has_stochastic_lanes = requires(const C& c, simd::vf x, simd::vu random,
                                        const typename C::encoder& k) {
  { stochastic_lanes<C>::encode(c, x, k, random) } -> std::same_as<simd::vu>;
};

namespace stochastic {

/// prescaled_ratio::of_magnitude: (|x| * pre) * inv, each product rounded once.
COMMPRESS_FORCEINLINE simd::vf of_magnitude(simd::vf x, const scaled::prescaled_ratio& k) {
  using namespace simd;
  return mul(mul(from_bits(magnitude_bits(x)), splat(k.pre)), splat(k.inv));
}

/// uniform_from_bits in every lane: the top 24 bits times 2^-24 (exact).
COMMPRESS_FORCEINLINE simd::vf uniform(simd::vu random) {
  using namespace simd;
  return mul(to_float_i32(srl<8>(random)), splat(uniform_scale));
}

} // namespace stochastic

/// TernGrad, Eq. 3: kept with probability |x| / s, then sign(x) as the code's high bit.
template <> struct stochastic_lanes<terngrad> {
  static COMMPRESS_FORCEINLINE simd::vu encode(const terngrad&, simd::vf x,
                                               const terngrad::encoder& k, simd::vu random) {
    using namespace simd;
    const vu code = or_u32(sll<1>(srl<31>(simd::bits(x))), splat_u32(1));
    return select(lt(stochastic::uniform(random), stochastic::of_magnitude(x, k)), code,
                  splat_u32(0));
  }
};

/// QSGD: level floor(y) + 1 with probability y - floor(y), y = |x| s / r, at most s; the sign
/// where the level is not 0.
template <unsigned Bits> struct stochastic_lanes<qsgd<Bits>> {
  static COMMPRESS_FORCEINLINE simd::vu
  encode(const qsgd<Bits>& c, simd::vf x, const typename qsgd<Bits>::encoder& k, simd::vu random) {
    using namespace simd;
    const vf y = stochastic::of_magnitude(x, k);
    // floor_small(y): y rounded to an integer, ties to even, less 1 where that rounded up.
    const vf magic = splat(commpress::detail::round_magic);
    const vf r = sub(add(y, magic), magic);
    const vf whole = select(gt(r, y), sub(r, splat(1.0f)), r);
    vu level = add_u32(trunc_i32(whole), select(lt(stochastic::uniform(random), sub(y, whole)),
                                                splat_u32(1), splat_u32(0)));
    level = min_u32(level, splat_u32(c.levels));
    const vu sign = clear(eq_u32(level, splat_u32(0)), srl<31>(simd::bits(x)));
    return select(gt(y, splat(0.0f)), or_u32(sll<Bits - 1>(sign), level), splat_u32(0));
  }
};

} // namespace commpress::cpu::detail
