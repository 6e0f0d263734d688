// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Philox4x32-10 (core/rng.hpp) for many consecutive blocks at once, on the vector layer: the
/// random words of stochastic rounding, the same bits as random_block.

#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/rng.hpp"

namespace commpress::cpu::detail {

/// Philox blocks a philox_words step computes together.
inline constexpr std::size_t philox_step_blocks = simd::lanes64 * simd::philox_vectors;

/// The random words of elements 4 first_block .. 4 (first_block + blocks) - 1 at `step`
/// (random_block for each block, in order). Whole steps of philox_step_blocks are computed:
/// `words` holds at least 4 * blocks rounded up to a multiple of 4 philox_step_blocks.
///
/// Blocks run structure-of-arrays, one per 64-bit lane with its counter words in the low
/// halves: one 32 x 32 -> 64-bit multiply gives a whole product, whose low half is already the
/// next round's lo and whose high half a swap of the halves moves down for the XOR. What the
/// high halves carry is never read (the multiply takes only the low halves).
inline void philox_words(rng_key key, std::uint64_t step, std::uint64_t first_block,
                         std::size_t blocks, std::uint32_t* COMMPRESS_RESTRICT words) {
  using namespace simd;
  constexpr std::size_t v_count = philox_vectors;
  const vq m0 = splat_u64(philox_m0);
  const vq m1 = splat_u64(philox_m1);
  const vq c2_init = splat_u64(step & 0xffffffffu);
  const vq c3_init = splat_u64(step >> 32);
  for (std::size_t b = 0; b < blocks; b += philox_step_blocks) {
    vq c0[v_count], c1[v_count], c2[v_count], c3[v_count];
    for (std::size_t v = 0; v < v_count; ++v) {
      const vq block = add_u64(splat_u64(first_block + b + lanes64 * v), lane_index64());
      c0[v] = block;
      c1[v] = high_half(block);
      c2[v] = c2_init;
      c3[v] = c3_init;
    }
    std::uint32_t k0 = key.k0, k1 = key.k1;
    for (int r = 0; r < philox_rounds; ++r) {
      const vq vk0 = splat_halves(k0);
      const vq vk1 = splat_halves(k1);
      for (std::size_t v = 0; v < v_count; ++v) {
        const vq p0 = mul_low32(c0[v], m0);
        const vq p1 = mul_low32(c2[v], m1);
        const vq n0 = xor3(swap_halves(p1), c1[v], vk0); // hi(p1) ^ c1 ^ k0 in the low halves
        const vq n2 = xor3(swap_halves(p0), c3[v], vk1); // hi(p0) ^ c3 ^ k1
        c1[v] = p1;
        c3[v] = p0;
        c0[v] = n0;
        c2[v] = n2;
      }
      k0 += philox_w0;
      k1 += philox_w1;
    }
    for (std::size_t v = 0; v < v_count; ++v)
      store_blocks(c0[v], c1[v], c2[v], c3[v], words + 4 * (b + lanes64 * v));
  }
}

} // namespace commpress::cpu::detail
