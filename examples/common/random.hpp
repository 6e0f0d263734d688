// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A tiny portable PRNG for the examples. The standard library's distributions and
/// std::shuffle are implementation-defined, so libstdc++ and libc++ would give different
/// initial weights and batch orders for the same seed; everything here is exact integer
/// arithmetic (plus one IEEE multiply), so a seed means the same thing everywhere.

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace commpress_examples {

/// @brief splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, full period, good enough
/// for initialisation and shuffling, and trivially reproducible.
class splitmix64 {
public:
  explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}

  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, 1): the top 24 bits scaled by 2^-24, which is exact in float, so the
  /// value does not depend on the rounding mode or on excess precision.
  float uniform01() noexcept { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) noexcept { return lo + (hi - lo) * uniform01(); }

  /// Uniform integer in [0, n), n > 0. Rejection sampling instead of a bare modulo so that
  /// the shuffle is unbiased; the rejected zone is tiny, so this almost never loops.
  std::uint64_t below(std::uint64_t n) noexcept {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t x = next();
    while (x >= limit)
      x = next();
    return x % n;
  }

private:
  std::uint64_t state_;
};

/// @brief Derives an independent stream seed from a base seed and a label (layer index,
/// epoch, ...), so streams do not overlap and do not depend on the order they are created.
inline std::uint64_t derive_seed(std::uint64_t base, std::uint64_t label) noexcept {
  splitmix64 g(base ^ (0xD1B54A32D192ED03ull * (label + 1)));
  return g.next();
}

/// @brief Fisher-Yates shuffle with splitmix64 (std::shuffle's algorithm is unspecified).
template <class T> void shuffle(std::span<T> values, splitmix64& rng) noexcept {
  for (std::size_t i = values.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(values[i - 1], values[j]);
  }
}

/// @brief The permutation of [0, n) used for one epoch, a pure function of (seed, epoch).
inline std::vector<std::uint32_t> epoch_permutation(std::size_t n, std::uint64_t seed,
                                                    std::uint64_t epoch) {
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), std::uint32_t{0});
  splitmix64 rng(derive_seed(seed, 0x5348554646ull + epoch)); // "SHUFF" + epoch
  shuffle(std::span<std::uint32_t>(order), rng);
  return order;
}

} // namespace commpress_examples
