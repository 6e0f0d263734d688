// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// The sampled top-k select of backend/cpu/detail/top_k_select.hpp: radix_select against
// std::nth_element on awkward keys, top_k_sampled against a sort of the whole row, and the top_k
// codec on rows just below and above sampled_top_k_min_row, for every element type, index format,
// value dtype and non-finite policy; the small-k selection (top_k_small) against the same sort on
// every row length up to 300 and the codec on chunked rows. Built with the default flags, with
// -march=native (the AVX-512 path) and -march=x86-64-v3 (AVX2).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/detail/top_k_select.hpp"
#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/core/rng.hpp"

namespace cp = commpress;
namespace cd = commpress::cpu::detail;

namespace {

std::uint32_t bits_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

/// Deterministic pseudo-random words.
std::uint32_t word(std::uint32_t stream, std::uint64_t i) {
  return cp::random_u32(cp::make_rng_key(17, stream), 0, i);
}

/// Roughly Gaussian values (sum of four uniforms), scaled, with a sign.
std::vector<float> smooth(std::size_t n, std::uint32_t stream) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    float s = -2.0f;
    for (std::uint64_t j = 0; j < 4; ++j)
      s += cp::uniform_from_bits(word(stream, 4 * i + j));
    x[i] = s * 3.0f;
  }
  return x;
}

/// The keys the codec ranks by: |x| bits, 0 for NaN/Inf when they are zeroed.
std::uint32_t key_of(float v, bool zero_nonfinite) {
  const std::uint32_t key = bits_of(v) & 0x7fffffffu;
  return zero_nonfinite && key >= 0x7f800000u ? 0u : key;
}

/// x in element type T, each from_float<T>.
template <class T> std::vector<T> as_elements(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    out[i] = cp::from_float<T>(x[i]);
  return out;
}

/// The fp32 values of a row's elements, each to_float.
template <class T> std::vector<float> widened(const std::vector<T>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    out[i] = cp::to_float(x[i]);
  return out;
}

/// The kept indices of a row by the codec's rule: sort by (key descending, index ascending).
std::vector<std::uint32_t> reference_kept(const std::vector<float>& x, std::uint64_t k,
                                          bool zero_nonfinite) {
  std::vector<std::uint64_t> order(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    order[i] = (std::uint64_t{0x7fffffffu - key_of(x[i], zero_nonfinite)} << 32) | i;
  std::sort(order.begin(), order.end());
  std::vector<std::uint32_t> kept(k);
  for (std::size_t j = 0; j < k; ++j)
    kept[j] = static_cast<std::uint32_t>(order[j]);
  std::sort(kept.begin(), kept.end());
  return kept;
}

void check_radix_select(std::vector<std::uint32_t> words, std::uint64_t k) {
  const std::uint64_t n = words.size();
  std::vector<std::uint32_t> keys(n);
  for (std::size_t j = 0; j < n; ++j)
    keys[j] = words[j] & 0x7fffffffu;
  const std::uint32_t lo = *std::min_element(keys.begin(), keys.end());
  const std::uint32_t hi = *std::max_element(keys.begin(), keys.end());
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1), keys.end(),
                   std::greater<>{});
  const std::uint32_t want = keys[k - 1];
  const auto greater = static_cast<std::uint64_t>(
      std::count_if(keys.begin(), keys.end(), [&](std::uint32_t v) { return v > want; }));

  std::vector<std::uint32_t> hist(cd::radix_select_bins), scratch(n);
  const auto before = words;
  const cd::kth_key got = cd::radix_select(words.data(), n, k, lo, hi, hist.data(), scratch.data());
  CHECK(got.key == want);
  CHECK(got.greater == greater);
  CHECK(words == before); // a separate scratch leaves the words alone
  // Looser bounds and in place (scratch == words) give the same answer.
  const cd::kth_key wide =
      cd::radix_select(words.data(), n, k, 0, 0x7fffffffu, hist.data(), words.data());
  CHECK(wide.key == want);
  CHECK(wide.greater == greater);
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("radix_select: the k-th largest key and the count above it equal std::nth_element's "
            "for random keys, heavy ties, equal keys, k = 1 and k = n") {
    for (std::uint64_t n : {1u, 2u, 17u, 1000u, 65537u}) {
      for (int data = 0; data < 5; ++data) {
        std::vector<std::uint32_t> words(n);
        for (std::size_t j = 0; j < n; ++j) {
          const std::uint32_t w = word(static_cast<std::uint32_t>(data), j);
          if (data == 0)
            words[j] = w; // the full 31-bit range, sign bits set at random
          if (data == 1)
            words[j] = 0x3f800000u + (w % 7) * 0x1000u; // seven keys: heavy ties
          if (data == 2)
            words[j] = 0x40490fdbu | (w & 0x80000000u); // all keys equal
          if (data == 3)
            words[j] = bits_of(smooth(1, w)[0]); // floats: keys crowd a few exponents
          if (data == 4)
            words[j] = j % 100 == 0 ? 0x7f800000u + (w & 1u) : w % 5000u; // Inf/NaN outliers
        }
        for (std::uint64_t k : {std::uint64_t{1}, n / 100 + 1, n / 2 + 1, n}) {
          CAPTURE(n);
          CAPTURE(data);
          CAPTURE(k);
          check_radix_select(words, std::min(k, n));
        }
      }
    }
  }

  TEST_CASE("keys_in_range: copies the keys of [lo, lo + span] in order, in place too") {
    std::vector<std::uint32_t> words(1003);
    for (std::size_t j = 0; j < words.size(); ++j)
      words[j] = word(9, j) % 4096u | (j % 2 ? 0x80000000u : 0u);
    std::vector<std::uint32_t> want;
    for (std::uint32_t w : words)
      if ((w & 0x7fffffffu) >= 1000u && (w & 0x7fffffffu) <= 3000u)
        want.push_back(w & 0x7fffffffu);
    std::vector<std::uint32_t> out(words.size());
    const std::uint64_t m = cd::keys_in_range(words.data(), words.size(), 1000u, 2000u, out.data());
    CHECK(std::vector<std::uint32_t>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(m)) ==
          want);
    const std::uint64_t m2 =
        cd::keys_in_range(words.data(), words.size(), 1000u, 2000u, words.data());
    CHECK(std::vector<std::uint32_t>(words.begin(),
                                     words.begin() + static_cast<std::ptrdiff_t>(m2)) == want);
  }

  TEST_CASE_TEMPLATE("narrow_threshold: the least 16-bit key whose widened key reaches t, for "
                     "every widened key, one above it, and past the largest",
                     T, cp::half, cp::bfloat16) {
    const auto widened = [](std::uint32_t key) {
      const T e{static_cast<std::uint16_t>(key)};
      return cd::widened_bits(&e, 0) & 0x7fffffffu;
    };
    std::uint32_t wrong = 0; // keys whose threshold is wrong: counted, not one check each
    for (std::uint32_t key = 0; key < 0x8000u; ++key) {
      const std::uint32_t t = widened(key);
      if (key > 0 && t <= widened(key - 1))
        ++wrong; // widening must be strictly increasing, NaN payloads and subnormals included
      if (cd::narrow_threshold<T>(t) != key || cd::narrow_threshold<T>(t + 1) != key + 1)
        ++wrong;
    }
    CHECK(wrong == 0);
    CHECK(cd::narrow_threshold<T>(0) == 0);
    CHECK(cd::narrow_threshold<T>(0x7fffffffu) == 0x8000u);
    CHECK(cd::narrow_threshold<T>(0x7f800000u) == (std::same_as<T, cp::half> ? 0x7c00u : 0x7f80u));
  }

  TEST_CASE_TEMPLATE(
      "top_k_sampled: keeps the set a sort of the row keeps, or declines, and counts NaN/Inf", T,
      float, cp::half, cp::bfloat16) {
    for (std::uint64_t d : {cd::sampled_top_k_min_row, 3 * cd::sampled_top_k_min_row + 7}) {
      for (int data = 0; data < 4; ++data) {
        std::vector<float> x = smooth(d, 30 + static_cast<std::uint32_t>(data));
        std::size_t nonfinite = 0;
        for (std::size_t i = 0; i < d; ++i) {
          if (data == 1)
            x[i] = std::round(x[i]); // few distinct magnitudes: ties at the k-th key
          if (data == 2)
            x[i] = 1.5f; // all equal: the sample cannot bound anything
          if (data == 3 && i % 501 == 3) {
            x[i] = i % 2 ? std::numeric_limits<float>::quiet_NaN()
                         : -std::numeric_limits<float>::infinity();
            ++nonfinite;
          }
        }
        // The row in its element type, and x as its fp32 values, which the select ranks (16-bit
        // rows have many more ties than fp32 ones). With NaN/Inf, 16-bit rows also get codes
        // that from_float does not write (NaN payloads, a negative and a signalling NaN), and
        // subnormals and the largest finite values, in the vector body and in the tail.
        std::vector<T> row = as_elements<T>(x);
        if constexpr (!std::is_same_v<T, float>) {
          const bool bf16 = std::is_same_v<T, cp::bfloat16>;
          const std::uint16_t codes[] = {
              static_cast<std::uint16_t>(bf16 ? 0xffc1u : 0xfe01u), // negative NaN, payload
              static_cast<std::uint16_t>(bf16 ? 0x7f81u : 0x7d00u), // signalling NaN
              0x0001u,
              0x8003u,                                              // subnormals
              static_cast<std::uint16_t>(bf16 ? 0x7f7fu : 0x7bffu), // largest finite
              static_cast<std::uint16_t>(bf16 ? 0xff7fu : 0xfbffu)};
          for (std::size_t i = 11; data == 3 && i < d; i += 613)
            row[i].bits = codes[i % 6];
          for (std::size_t j = 0; data == 3 && j < 6; ++j)
            row[d - 1 - j].bits = codes[j];
        }
        x = widened(row);
        nonfinite = static_cast<std::size_t>(
            std::count_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); }));
        for (std::uint64_t k : {std::uint64_t{1}, std::uint64_t{37}, d / 100, d / 10, d / 5}) {
          for (bool zero_nonfinite : {false, true}) {
            CAPTURE(d);
            CAPTURE(data);
            CAPTURE(k);
            CAPTURE(zero_nonfinite);
            std::vector<std::uint32_t> ws(d);
            // The bitmap is written in full whatever it held.
            std::vector<unsigned char> bitmap((d + 7) / 8, 0xa5);
            std::size_t bad = 0;
            const auto kept =
                cd::top_k_sampled(row.data(), d, k, zero_nonfinite, ws.data(), bad, bitmap.data());
            // Again with the values written to a buffer of exactly 4 k bytes, one byte off a
            // 4-byte boundary as a payload's value section may be.
            std::vector<unsigned char> values(4 * k + 1, 0);
            std::vector<std::uint32_t> ws2(d);
            std::size_t bad2 = 0;
            const auto kept2 = cd::top_k_sampled(row.data(), d, k, zero_nonfinite, ws2.data(), bad2,
                                                 nullptr, values.data() + 1);
            CHECK((kept2.index == nullptr) == (kept.index == nullptr));
            CHECK(kept2.bits == nullptr);
            CHECK(bad2 == bad);
            if (kept.index == nullptr) {
              CHECK(bad == 0);
              // Smooth data, with or without a few NaN/Inf, never needs the full method; with
              // heavy ties or all keys equal, too many may reach the sample's threshold.
              CHECK((data == 1 || data == 2));
              continue;
            }
            CHECK(bad == nonfinite);
            const auto want = reference_kept(x, k, zero_nonfinite);
            CHECK(std::vector<std::uint32_t>(kept.index, kept.index + k) == want);
            std::size_t wrong_bits = 0;
            for (std::uint64_t j = 0; j < k; ++j) {
              const std::uint32_t b = bits_of(x[want[j]]);
              const bool zero = zero_nonfinite && (b & 0x7fffffffu) >= 0x7f800000u;
              wrong_bits += kept.bits[j] != (zero ? 0u : b); // zeroed to +0
            }
            CHECK(wrong_bits == 0);
            CHECK(std::vector<std::uint32_t>(kept2.index, kept2.index + k) == want);
            CHECK(std::memcmp(values.data() + 1, kept.bits, 4 * k) == 0);
            CHECK(values[0] == 0);
            // The bitmap marks exactly the kept elements (rejected candidates cleared).
            std::vector<unsigned char> want_bitmap((d + 7) / 8, 0);
            for (std::uint32_t i : want)
              want_bitmap[i / 8] = static_cast<unsigned char>(want_bitmap[i / 8] | 1u << (i % 8));
            CHECK(bitmap == want_bitmap);
          }
        }
      }
    }
  }

  TEST_CASE_TEMPLATE("top_k: rows below and above sampled_top_k_min_row encode (and fp32 rows "
                     "roundtrip) the sorted selection for every index format, value dtype and "
                     "non-finite policy",
                     T, float, cp::half, cp::bfloat16) {
    const std::uint64_t m = cd::sampled_top_k_min_row;
    for (std::uint64_t row : {m - 1, m, 2 * m + 3}) {
      std::vector<float> x = smooth(2 * row, 50);
      for (std::size_t i = 7; i < x.size(); i += 977)
        x[i] = i % 2 ? std::numeric_limits<float>::infinity()
                     : -std::numeric_limits<float>::quiet_NaN();
      const std::vector<T> input = as_elements<T>(x);
      x = widened(input);
      for (std::uint64_t k : {std::uint64_t{5}, row / 100, row / 5}) // list, list, bitmap
        for (auto values : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16})
          for (auto policy : {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count,
                              cp::nonfinite_policy::fail}) {
            CAPTURE(row);
            CAPTURE(k);
            CAPTURE(static_cast<int>(values));
            CAPTURE(static_cast<int>(policy));
            const cp::top_k c{
                .count = k, .row_length = static_cast<std::uint32_t>(row), .values = values};
            const cp::context ctx{.on_nonfinite = policy};
            std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
            std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
            if (policy == cp::nonfinite_policy::fail) {
              CHECK_THROWS_AS(cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(input),
                                         std::span(p), std::span(ws)),
                              cp::error);
              continue;
            }
            const bool zero = policy == cp::nonfinite_policy::zero_and_count;
            const auto r = cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(input), std::span(p),
                                      std::span(ws));
            CHECK(r.nonfinite ==
                  static_cast<std::size_t>(std::count_if(
                      x.begin(), x.end(), [](float v) { return !std::isfinite(v); })));
            std::vector<float> y(x.size());
            cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
            // The roundtrip is in place, so fp32 only; other rows compare y with itself.
            std::vector<float> z = y;
            if constexpr (std::is_same_v<T, float>) {
              z = x;
              const auto rr = cp::roundtrip(cp::cpu::seq, c, ctx, std::span(z), std::span(ws));
              CHECK(rr.nonfinite == r.nonfinite);
            }
            std::size_t wrong = 0;
            for (std::uint64_t base = 0; base < x.size(); base += row) {
              const std::vector<float> xr(x.begin() + static_cast<std::ptrdiff_t>(base),
                                          x.begin() + static_cast<std::ptrdiff_t>(base + row));
              std::vector<bool> keep(row, false);
              for (std::uint32_t i : reference_kept(xr, k, zero))
                keep[i] = true;
              for (std::uint64_t i = 0; i < row; ++i) {
                const float v = zero && !std::isfinite(xr[i]) ? 0.0f : xr[i];
                const float want = keep[i] ? c.decode_value(c.encode_value(v)) : 0.0f;
                const bool same = bits_of(want) == bits_of(y[base + i]) ||
                                  (std::isnan(want) && std::isnan(y[base + i]));
                wrong += !same || bits_of(z[base + i]) != bits_of(y[base + i]);
              }
            }
            CHECK(wrong == 0);
          }
    }
  }
}

namespace {

/// Rows that stress top_k_small's tie rule: data 0 smooth, 1 few distinct magnitudes, 2 all
/// equal, 3 zeros of both signs among a few values, 4 NaN/Inf among ties, 5 denormals and zeros,
/// 6 every special at once.
std::vector<float> awkward_row(std::size_t d, int data, std::uint32_t stream) {
  std::vector<float> x = smooth(d, stream);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t i = 0; i < d; ++i) {
    const std::uint32_t w = word(stream + 1000, i);
    if (data == 1)
      x[i] = static_cast<float>(static_cast<int>(w % 5) - 2); // -2..2: heavy ties, +-0 included
    if (data == 2)
      x[i] = w % 2 ? 0.75f : -0.75f;
    if (data == 3)
      x[i] = w % 4 == 0 ? 1.0f + static_cast<float>(w % 3) : (w % 8 < 4 ? 0.0f : -0.0f);
    if (data == 4) {
      const float pick[] = {inf, -inf, nan, -nan, 1.0f, -1.0f, 0.0f};
      x[i] = pick[w % 7];
    }
    if (data == 5) // denormals: keys 0..7, with sign bits
      x[i] = std::bit_cast<float>((w % 8) | (w & 0x80000000u));
    if (data == 6) {
      const float pick[] = {inf,
                            nan,
                            -0.0f,
                            0.0f,
                            std::bit_cast<float>(1u),
                            x[i],
                            std::bit_cast<float>(0x7fc00001u),
                            std::bit_cast<float>(0xff800000u)};
      x[i] = pick[w % 8];
    }
  }
  return x;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("top_k_small: keeps what a sort of the row by (key descending, index ascending) "
            "keeps, in increasing index, with the screened bits and the NaN/Inf count, for every "
            "row length up to 300 and k up to small_top_k_max") {
    std::size_t wrong = 0, checked = 0;
    for (std::uint64_t d = 1; d <= 300; ++d)
      for (int data = 0; data < 7; ++data) {
        // The row alone in its buffer, so that a read past it would go past the allocation.
        const std::vector<float> x =
            awkward_row(d, data, static_cast<std::uint32_t>(d * 7 + static_cast<unsigned>(data)));
        const auto nonfinite = static_cast<std::size_t>(
            std::count_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); }));
        for (std::uint64_t k = 1; k <= std::min(d, cd::small_top_k_max); ++k)
          for (bool zero_nonfinite : {false, true}) {
            std::vector<std::uint32_t> index(k, ~0u), bits(k, ~0u);
            const std::size_t bad =
                cd::top_k_small(x.data(), d, k, zero_nonfinite, index.data(), bits.data());
            const auto want = reference_kept(x, k, zero_nonfinite);
            bool ok = bad == nonfinite && index == want;
            for (std::uint64_t j = 0; ok && j < k; ++j) {
              const std::uint32_t b = bits_of(x[want[j]]);
              const bool zero = zero_nonfinite && (b & 0x7fffffffu) >= 0x7f800000u;
              ok = bits[j] == (zero ? 0u : b);
            }
            if (!ok) {
              CAPTURE(d);
              CAPTURE(data);
              CAPTURE(k);
              CAPTURE(zero_nonfinite);
              CHECK(index == want);
              CHECK(bad == nonfinite);
            }
            wrong += ok ? 0u : 1u;
            ++checked;
          }
      }
    CHECK(wrong == 0);
    CHECK(checked > 20000);
  }

  TEST_CASE("top_k_small: a row whose largest keys, or ties at the k-th, all fall in one vector "
            "lane (the lane's lists drain when a lane sees fewer keys than k)") {
    std::size_t wrong = 0, checked = 0;
    for (std::uint64_t stride :
         {std::uint64_t{8}, std::uint64_t{16}, std::uint64_t{cp::cpu::simd::lanes}})
      for (std::uint64_t d = 1; d <= 4 * stride + 3; ++d)
        for (std::uint64_t lane = 0; lane < std::min(d, stride); ++lane)
          for (int data = 0; data < 3; ++data) {
            // Small values everywhere, and in the lane's elements larger ones: distinct (0),
            // all equal (1), or equal to the small ones (2, ties at the k-th).
            std::vector<float> x(d, data == 2 ? 3.0f : 0.5f);
            for (std::uint64_t i = 0; i < d; ++i)
              x[i] = i % 2 ? -x[i] : x[i];
            for (std::uint64_t i = lane, t = 0; i < d; i += stride, ++t)
              x[i] = data == 0 ? 4.0f + static_cast<float>(t) : (t % 2 ? -3.0f : 3.0f);
            for (std::uint64_t k = 1; k <= std::min(d, cd::small_top_k_max); ++k) {
              std::vector<std::uint32_t> index(k, ~0u), bits(k, ~0u);
              cd::top_k_small(x.data(), d, k, false, index.data(), bits.data());
              const auto want = reference_kept(x, k, false);
              const bool ok = index == want;
              if (!ok) {
                CAPTURE(stride);
                CAPTURE(d);
                CAPTURE(lane);
                CAPTURE(data);
                CAPTURE(k);
                CHECK(index == want);
              }
              wrong += ok ? 0u : 1u;
              ++checked;
            }
          }
    CHECK(wrong == 0);
    CHECK(checked > 5000);
  }

  TEST_CASE("top_k_small: consecutive rows of one buffer, the last one shorter, each see only "
            "their own elements") {
    const std::vector<float> x = awkward_row(64 * 5 + 23, 1, 77);
    for (std::uint64_t k = 1; k <= cd::small_top_k_max; ++k)
      for (std::uint64_t at = 0; at < x.size(); at += 64) {
        const std::uint64_t d = std::min<std::uint64_t>(64, x.size() - at);
        std::vector<std::uint32_t> index(k), bits(k);
        cd::top_k_small(x.data() + at, d, k, false, index.data(), bits.data());
        const std::vector<float> row(x.begin() + static_cast<std::ptrdiff_t>(at),
                                     x.begin() + static_cast<std::ptrdiff_t>(at + d));
        CAPTURE(k);
        CAPTURE(at);
        CHECK(index == reference_kept(row, k, false));
      }
  }

  TEST_CASE("top_k: chunked rows (the small-k path and, past it, the general one) encode the "
            "sorted selection for every index format, value dtype and policy, and cpu::par "
            "writes cpu::seq's bytes") {
    for (std::uint32_t row : {1u, 3u, 8u, 16u, 17u, 40u, 64u, 100u, 256u, 300u})
      for (int data = 0; data < 7; ++data) {
        const std::vector<float> x = awkward_row(std::size_t{row} * 6, data,
                                                 500 + row * 11 + static_cast<std::uint32_t>(data));
        for (std::uint64_t k = 1; k <= std::min<std::uint64_t>(row, cd::small_top_k_max + 2); ++k)
          for (auto values : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16})
            for (auto policy :
                 {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
              CAPTURE(row);
              CAPTURE(data);
              CAPTURE(k);
              CAPTURE(static_cast<int>(values));
              CAPTURE(static_cast<int>(policy));
              const cp::top_k c{.count = k, .row_length = row, .values = values};
              const cp::context ctx{.on_nonfinite = policy};
              std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
              std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
              const auto r = cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(x),
                                        std::span(p), std::span(ws));
              std::vector<std::byte> p2(p.size());
              std::vector<std::byte> ws2(cp::workspace_bytes(cp::cpu::par, c, x.size()));
              const auto r2 = cp::encode(cp::cpu::par, c, ctx, std::span<const float>(x),
                                         std::span(p2), std::span(ws2));
              CHECK(p2 == p);
              CHECK(r2.nonfinite == r.nonfinite);
              CHECK(r.nonfinite ==
                    static_cast<std::size_t>(std::count_if(
                        x.begin(), x.end(), [](float v) { return !std::isfinite(v); })));
              // bf16 input selects on the same fp32 values (every bf16 is one).
              std::vector<cp::bfloat16> xb(x.size());
              std::vector<float> xr(x.size());
              for (std::size_t i = 0; i < x.size(); ++i) {
                xb[i] = cp::to_bfloat16(x[i]);
                xr[i] = cp::to_float(xb[i]);
              }
              std::vector<std::byte> pb(p.size());
              cp::encode(cp::cpu::seq, c, ctx, std::span<const cp::bfloat16>(xb), std::span(pb),
                         std::span(ws));
              std::vector<std::byte> pr(p.size());
              cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(xr), std::span(pr),
                         std::span(ws));
              // The headers differ in the element dtype (and so the checksum): the bodies not.
              const auto body = [](const std::vector<std::byte>& q) {
                return std::vector<std::byte>(
                    q.begin() + static_cast<std::ptrdiff_t>(cp::format::header_bytes), q.end());
              };
              CHECK(body(pb) == body(pr));

              std::vector<float> y(x.size());
              cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
              std::vector<float> z = x;
              const auto rr = cp::roundtrip(cp::cpu::seq, c, ctx, std::span(z), std::span(ws));
              CHECK(rr.nonfinite == r.nonfinite);
              const bool zero = policy == cp::nonfinite_policy::zero_and_count;
              std::size_t wrong = 0;
              for (std::uint64_t base = 0; base < x.size(); base += row) {
                const std::vector<float> xs(x.begin() + static_cast<std::ptrdiff_t>(base),
                                            x.begin() + static_cast<std::ptrdiff_t>(base + row));
                std::vector<bool> keep(row, false);
                for (std::uint32_t i : reference_kept(xs, k, zero))
                  keep[i] = true;
                for (std::uint64_t i = 0; i < row; ++i) {
                  const float v = zero && !std::isfinite(xs[i]) ? 0.0f : xs[i];
                  const float want = keep[i] ? c.decode_value(c.encode_value(v)) : 0.0f;
                  const bool same = bits_of(want) == bits_of(y[base + i]) ||
                                    (std::isnan(want) && std::isnan(y[base + i]));
                  wrong += !same || bits_of(z[base + i]) != bits_of(y[base + i]);
                }
              }
              CHECK(wrong == 0);
            }
      }
  }
}
