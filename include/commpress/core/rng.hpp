// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11) keyed by
/// (seed, tensor id) and indexed by (step, element index).
///
/// A counter-based generator has no sequential state: element i of step t draws the same bits
/// on any backend, thread count or launch shape, so stochastic rounding and random-k are
/// reproducible and a receiver can regenerate a sender's random choices.

#include <cstdint>

#include "commpress/core/config.hpp"

namespace commpress {

/// @brief Philox key derived from a run seed and a tensor id.
struct rng_key {
  std::uint32_t k0;
  std::uint32_t k1;
  friend constexpr bool operator==(rng_key, rng_key) = default;
};

/// @brief Four 32-bit outputs of one Philox block.
struct rng_block {
  std::uint32_t v[4];
};

/// @brief Philox4x32-10's constants (Salmon et al., SC'11): the two round multipliers, the two
/// key-schedule increments (golden-ratio Weyl constants) and the number of rounds. Every
/// implementation (this scalar one, shared with CUDA, and the CPU's vector kernel in
/// backend/cpu/detail/philox.hpp) uses these.
inline constexpr std::uint32_t philox_m0 = 0xD2511F53u;
inline constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t philox_w0 = 0x9E3779B9u;
inline constexpr std::uint32_t philox_w1 = 0xBB67AE85u;
inline constexpr int philox_rounds = 10;

/// @brief 2^-24: uniform_from_bits's scale from 24 random bits to [0, 1).
inline constexpr float uniform_scale = 5.9604644775390625e-08f;

namespace detail {

/// One Philox round on the counter c with round key (k0, k1).
COMMPRESS_HOST_DEVICE constexpr void philox_round(std::uint32_t (&c)[4], std::uint32_t k0,
                                                  std::uint32_t k1) {
  const std::uint64_t p0 = std::uint64_t{philox_m0} * c[0];
  const std::uint64_t p1 = std::uint64_t{philox_m1} * c[2];
  const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32);
  const std::uint32_t lo0 = static_cast<std::uint32_t>(p0);
  const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32);
  const std::uint32_t lo1 = static_cast<std::uint32_t>(p1);
  const std::uint32_t n0 = hi1 ^ c[1] ^ k0;
  const std::uint32_t n2 = hi0 ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

} // namespace detail

/// @brief Philox4x32 with 10 rounds on a 128-bit counter.
COMMPRESS_HOST_DEVICE constexpr rng_block
philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3, rng_key key) {
  std::uint32_t c[4] = {c0, c1, c2, c3};
  std::uint32_t k0 = key.k0;
  std::uint32_t k1 = key.k1;
  for (int r = 0; r < philox_rounds; ++r) {
    detail::philox_round(c, k0, k1);
    k0 += philox_w0;
    k1 += philox_w1;
  }
  return rng_block{{c[0], c[1], c[2], c[3]}};
}

/// @brief Derives the key of one tensor's stream: one Philox block of (tensor_id) under `seed`.
/// @note Distinct tensor ids give independent streams for the same seed.
COMMPRESS_HOST_DEVICE constexpr rng_key make_rng_key(std::uint64_t seed, std::uint32_t tensor_id) {
  const rng_block b = philox4x32_10(
      tensor_id, 0x636f6d6du /* "comm" */, 0x70726573u /* "pres" */, 0u,
      rng_key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return rng_key{b.v[0], b.v[1]};
}

/// @brief The Philox block holding the random words of elements 4*block .. 4*block+3 at `step`.
COMMPRESS_HOST_DEVICE constexpr rng_block random_block(rng_key key, std::uint64_t step,
                                                       std::uint64_t block) {
  return philox4x32_10(static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                       static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32),
                       key);
}

/// @brief The 32 random bits of element `index` at `step` (word index % 4 of its block).
COMMPRESS_HOST_DEVICE constexpr std::uint32_t random_u32(rng_key key, std::uint64_t step,
                                                         std::uint64_t index) {
  return random_block(key, step, index >> 2).v[index & 3u];
}

/// @brief Maps 32 random bits to a float uniform on [0, 1) with 24 bits of resolution.
COMMPRESS_HOST_DEVICE constexpr float uniform_from_bits(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * uniform_scale; // exact
}

} // namespace commpress
