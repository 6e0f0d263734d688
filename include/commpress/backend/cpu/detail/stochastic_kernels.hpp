// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The stochastic codecs' encode_value on the vector layer: TernGrad (compress/terngrad.hpp),
/// QSGD (compress/qsgd.hpp) and natural compression (compress/natural.hpp) compute their codes
/// from a lane of fp32 input and a lane of random bits with the same rounded operations, in the
/// same order, as their scalar members, so the codes are the same bit for bit. The block-scaled kit
/// (backend/cpu/scaled.hpp) takes stochastic_lanes<C>::encode, where it is defined, for fp32 runs
/// of whole vectors.

#include <concepts>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/compress/natural.hpp"
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

/// Natural compression, C_nat (Horvath et al. 2019, eq. 4): |x| = (1 + f) 2^a goes up to 2^(a+1)
/// with probability f, compared as 23 bits; below the group's range (a < top - 126) to
/// 2^(top - 126) with probability |x| / 2^(top - 126), compared as 24 bits, else to 0.
template <> struct stochastic_lanes<natural> {
  static COMMPRESS_FORCEINLINE simd::vu encode(const natural&, simd::vf x,
                                               const natural::encoder& top, simd::vu random) {
    using namespace simd;
    const vu magnitude = magnitude_bits(x);
    const vu biased = srl<23>(magnitude);
    const vm denormal = eq_u32(biased, splat_u32(0));
    // A denormal's bits, an integer below 2^23, convert exactly to a normal float whose
    // exponent is their highest bit and whose significand is theirs, normalised.
    const vu normalised = simd::bits(to_float_i32(magnitude));
    const vu a = select(denormal, sub_u32(srl<23>(normalised), splat_u32(127 + 149)),
                        sub_u32(biased, splat_u32(127)));
    const vu significand =
        or_u32(and_u32(select(denormal, normalised, magnitude), splat_u32(0x7fffffu)),
               splat_u32(0x800000u));
    const vu lowest = splat_u32(static_cast<std::uint32_t>(top - 126));
    const vm below = gt_i32(lowest, a);
    // Below the range: kept where the top 24 random bits are under significand / 2^shift,
    // shift = lowest - a - 1 (at 24 or more the threshold is 0, as srl_by gives it).
    const vu threshold = srl_by(significand, sub_u32(sub_u32(lowest, a), splat_u32(1)));
    const vu up = select(lt_u32(srl<9>(random), and_u32(significand, splat_u32(0x7fffffu))),
                         splat_u32(1), splat_u32(0));
    const vu e = min_i32(add_u32(a, up), splat_u32(127));
    const vu m =
        select(below, splat_u32(127), sub_u32(splat_u32(static_cast<std::uint32_t>(top + 1)), e));
    const vu code = or_u32(sll<7>(srl<31>(simd::bits(x))), m);
    const vm dropped = or_mask(eq_u32(magnitude, splat_u32(0)),
                               and_mask(below, ge_u32(srl<8>(random), threshold)));
    return clear(dropped, code);
  }
};

} // namespace commpress::cpu::detail
