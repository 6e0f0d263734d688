// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A decode into fp16 and bf16 outputs large enough to be streamed
/// (cpu::detail::streaming_store_min_bytes), placed on a cache line and off one, against
/// from_float of the fp32 decode, with guard elements on both sides left untouched: shared by
/// the block-scaled kit's tests and quantize's.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "commpress/core/dtype.hpp"

namespace commpress::test {

/// decode(seq, out) decodes the payload of n elements into `out` (a span of half or bfloat16)
/// under cpu::seq when `seq`, under a cpu::par of two threads otherwise; `fp32` is the same
/// payload decoded into fp32. Each element type goes on a line under par, one element before
/// a line under seq (one streamer for the tensor), and a line less one before a line under par
/// (one streamer per range, each with a first and a last run of its own).
template <class Decode>
void check_streamed_16_bit(const std::vector<float>& fp32, Decode&& decode) {
  namespace cp = ::commpress;
  const std::size_t n = fp32.size();
  const auto in = [&]<class T>(T guard) {
    CAPTURE(sizeof(T));
    constexpr std::size_t line = 64 / sizeof(T);
    std::vector<T> buffer(n + 2 * line);
    T* aligned = buffer.data();
    while (reinterpret_cast<std::uintptr_t>(aligned) % 64 != 0)
      ++aligned;
    const auto is_guard = [&](T v) { return std::memcmp(&v, &guard, sizeof(T)) == 0; };
    for (std::size_t lead : {std::size_t{0}, std::size_t{1}, line - 1}) {
      CAPTURE(lead);
      const std::span<T> out(aligned + (line - lead) % line, n);
      std::fill(buffer.begin(), buffer.end(), guard);
      decode(lead == 1, out);
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < n; ++i)
        mismatches += out[i].bits != cp::from_float<T>(fp32[i]).bits ? 1u : 0u;
      CHECK(mismatches == 0);
      CHECK(std::all_of(buffer.data(), out.data(), is_guard));
      CHECK(std::all_of(out.data() + n, buffer.data() + buffer.size(), is_guard));
    }
  };
  in(cp::from_float<cp::half>(42.0f));
  in(cp::from_float<cp::bfloat16>(42.0f));
}

} // namespace commpress::test
