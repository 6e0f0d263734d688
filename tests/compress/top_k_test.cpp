// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {
std::vector<float> sample(std::size_t n, std::uint32_t stream = 1) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(5, stream);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 20.0f;
  return x;
}

// Values from {±0.5, ±1, ±2, ±3}: most magnitudes are tied, none is zero.
std::vector<float> tied(std::size_t n) {
  static constexpr float levels[8] = {0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f, 3.0f, -3.0f};
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(6, 1);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = levels[cp::random_u32(key, 0, i) % 8];
  return x;
}

std::uint32_t key_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u & 0x7fffffffu;
}
std::uint32_t bits_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// Independent reference: sort each row's (key descending, index ascending) pairs, keep the first
// k. The pair is one 64-bit word, (0x7fffffff - key) << 32 | index, so a plain sort is stable.
std::vector<bool> reference_keep(const std::vector<float>& x, std::size_t d, std::size_t k) {
  std::vector<bool> keep(x.size(), false);
  for (std::size_t first = 0; first < x.size(); first += d) {
    std::vector<std::uint64_t> order(d);
    for (std::size_t i = 0; i < d; ++i)
      order[i] = (std::uint64_t{0x7fffffffu - key_of(x[first + i])} << 32) | i;
    std::sort(order.begin(), order.end());
    for (std::size_t j = 0; j < k; ++j)
      keep[first + (order[j] & 0xffffffffu)] = true;
  }
  return keep;
}

template <class T>
std::vector<std::byte> encode_vec(const cp::top_k& c, const std::vector<T>& x,
                                  cp::context ctx = {}) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
  cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), std::span(p), std::span(ws));
  return p;
}

std::vector<float> decode_vec(const cp::top_k& c, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<float> y(n, 42.0f);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

// Body bytes from the rule in compress/top_k.hpp, written out again.
std::uint64_t expected_body(std::uint64_t rows, std::uint64_t d, std::uint64_t k,
                            std::uint64_t value_bytes) {
  const std::uint64_t width = d <= 256 ? 1 : d <= 65536 ? 2 : 4;
  const std::uint64_t bitmap = (d + 7) / 8;
  return rows * ((bitmap < k * width ? bitmap : k * width) + k * value_bytes);
}
} // namespace

TEST_SUITE("compress") {
  TEST_CASE("top_k: keeps the same set as a stable sort by magnitude when many values tie") {
    for (std::size_t n : {1u, 7u, 100u, 1000u, 70001u}) {
      const auto x = tied(n);
      // Index lists of 1, 2 and 4 bytes and bitmaps, depending on n and k.
      for (std::size_t k :
           {std::size_t{0}, std::size_t{1}, std::min<std::size_t>(n, 100), n / 3, n / 2 + 1, n}) {
        CAPTURE(n);
        CAPTURE(k);
        // count == 0 selects by fraction, so k = 0 is fraction 0.
        const cp::top_k c = k == 0 ? cp::top_k{.fraction = 0.0f} : cp::top_k{.count = k};
        CHECK(c.kept(n) == k);
        const auto y = decode_vec(c, encode_vec(c, x), n);
        const auto keep = reference_keep(x, n, c.kept(n));
        std::size_t nonzero = 0;
        for (std::size_t i = 0; i < n; ++i) {
          REQUIRE(bits_of(y[i]) == (keep[i] ? bits_of(x[i]) : 0u));
          nonzero += y[i] != 0.0f ? 1u : 0u;
        }
        CHECK(nonzero == c.kept(n));
      }
    }
  }

  TEST_CASE("top_k: kept values are exact, dominate the dropped ones, and contract the error") {
    const std::size_t n = 1000003;
    const auto x = sample(n);
    const cp::top_k c{.fraction = 0.05f};
    const std::size_t k = c.kept(n);
    CHECK(k == 50000); // nearest to 0.05f * n = 50000.15...
    const auto y = decode_vec(c, encode_vec(c, x), n);
    float min_kept = std::numeric_limits<float>::infinity();
    float max_dropped = 0.0f;
    double err = 0.0, norm = 0.0;
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (y[i] != 0.0f) {
        REQUIRE(y[i] == x[i]);
        min_kept = std::min(min_kept, std::fabs(x[i]));
        ++nonzero;
      } else {
        max_dropped = std::max(max_dropped, std::fabs(x[i]));
      }
      err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
      norm += static_cast<double>(x[i]) * x[i];
    }
    CHECK(nonzero == k);
    CHECK(min_kept >= max_dropped);
    CHECK(err <= (1.0 - static_cast<double>(k) / n) * norm);
  }

  TEST_CASE("top_k: per-row mode selects in every row independently") {
    for (std::uint32_t d : {1u, 7u, 13u, 300u}) {
      const std::size_t rows = 37;
      const auto x = tied(rows * d);
      const cp::top_k c{.fraction = 0.25f, .row_length = d};
      const std::size_t k = c.kept(d);
      CAPTURE(d);
      const auto p = encode_vec(c, x);
      CHECK(p.size() == 64 + expected_body(rows, d, k, 4));
      const auto y = decode_vec(c, p, x.size());
      const auto keep = reference_keep(x, d, k);
      for (std::size_t r = 0; r < rows; ++r) {
        std::size_t nonzero = 0;
        for (std::size_t i = r * d; i < (r + 1) * d; ++i) {
          REQUIRE(bits_of(y[i]) == (keep[i] ? bits_of(x[i]) : 0u));
          nonzero += y[i] != 0.0f ? 1u : 0u;
        }
        REQUIRE(nonzero == k);
      }
    }
  }

  TEST_CASE("top_k: body is k indices of the narrowest width plus k values, or a bitmap") {
    struct row_case {
      std::uint64_t d, k, width;
      bool bitmap;
    };
    for (const row_case& rc : {row_case{256, 10, 1, false}, row_case{257, 10, 2, false},
                               row_case{256, 33, 1, true}, row_case{1000, 100, 2, true},
                               row_case{1000, 62, 2, false}, row_case{100000, 10, 4, false},
                               row_case{65536, 4096, 2, false}, row_case{65536, 4097, 2, true}}) {
      CAPTURE(rc.d);
      CAPTURE(rc.k);
      CHECK(cp::top_k::index_width(rc.d) == rc.width);
      CHECK(cp::top_k::uses_bitmap(rc.d, rc.k) == rc.bitmap);
      for (cp::dtype v : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16}) {
        const cp::top_k c{.count = rc.k, .values = v};
        const std::uint64_t vb = v == cp::dtype::f32 ? 4 : 2;
        CHECK(c.body_bytes(rc.d) == (rc.bitmap ? (rc.d + 7) / 8 : rc.k * rc.width) + rc.k * vb);
        CHECK(c.body_bytes(rc.d) == expected_body(1, rc.d, rc.k, vb));
      }
    }
  }

  TEST_CASE("top_k: writes ascending little-endian indices, then the values") {
    std::vector<float> x(100, 0.0f);
    x[1] = -4.0f;
    x[3] = 3.0f;
    x[6] = 4.0f;
    x[50] = 1.0f;
    const cp::top_k c{.count = 3};
    const auto p = encode_vec(c, x);
    REQUIRE(p.size() == 64 + 3 + 12); // 3 one-byte indices beat a 13-byte bitmap
    CHECK(static_cast<int>(p[64]) == 1);
    CHECK(static_cast<int>(p[65]) == 3);
    CHECK(static_cast<int>(p[66]) == 6);
    float v[3];
    std::memcpy(v, p.data() + 67, 12);
    CHECK(v[0] == -4.0f);
    CHECK(v[1] == 3.0f);
    CHECK(v[2] == 4.0f);
  }

  TEST_CASE("top_k: writes a least-significant-bit-first bitmap when it is smaller") {
    const std::vector<float> x = {0.5f, -4.0f, 1.0f, 3.0f, -1.0f, 0.0f, 4.0f};
    const cp::top_k c{.count = 3, .values = cp::dtype::f16};
    const auto p = encode_vec(c, x);
    REQUIRE(p.size() == 64 + 1 + 6);        // a 1-byte bitmap beats 3 one-byte indices
    CHECK(static_cast<int>(p[64]) == 0x4a); // bits 1, 3 and 6
    std::uint16_t v[3];
    std::memcpy(v, p.data() + 65, 6);
    CHECK(v[0] == cp::to_half(-4.0f).bits);
    CHECK(v[1] == cp::to_half(3.0f).bits);
    CHECK(v[2] == cp::to_half(4.0f).bits);
  }

  TEST_CASE("top_k: the lower index wins a tie at the threshold, so exactly k are kept") {
    const std::vector<float> x = {1.0f, -2.0f, 2.0f, 1.0f, -2.0f, 2.0f, 0.5f};
    const cp::top_k c{.count = 3};
    const auto y = decode_vec(c, encode_vec(c, x), x.size());
    CHECK(y == std::vector<float>{0.0f, -2.0f, 2.0f, 0.0f, -2.0f, 0.0f, 0.0f});
  }

  TEST_CASE_TEMPLATE("top_k: decodes every element dtype with every value dtype", T, float,
                     cp::half, cp::bfloat16) {
    for (std::size_t n : {0u, 1u, 7u, 1000003u}) {
      const auto xf = sample(n, 2);
      std::vector<T> x(n);
      std::vector<float> xr(n); // the input as the codec sees it
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = cp::from_float<T>(xf[i]);
        xr[i] = cp::to_float(x[i]);
      }
      const cp::top_k probe{.fraction = 0.3f};
      const auto keep = reference_keep(xr, std::max<std::size_t>(n, 1), probe.kept(n));
      for (cp::dtype vd : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16}) {
        CAPTURE(n);
        CAPTURE(static_cast<int>(vd));
        const cp::top_k c{.fraction = 0.3f, .values = vd};
        const auto p = encode_vec(c, x);
        CHECK(p.size() == 64 + expected_body(1, n, c.kept(n), vd == cp::dtype::f32 ? 4 : 2));
        std::vector<T> y(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          float want = 0.0f;
          if (keep[i])
            want = vd == cp::dtype::f32   ? xr[i]
                   : vd == cp::dtype::f16 ? cp::to_float(cp::to_half(xr[i]))
                                          : cp::to_float(cp::to_bfloat16(xr[i]));
          wrong += y[i] == cp::from_float<T>(want) ? 0u : 1u;
        }
        CHECK(wrong == 0);
      }
    }
  }

  TEST_CASE("top_k: decode_accumulate adds weight * decoded and roundtrip equals decode(encode)") {
    for (std::uint32_t row : {0u, 7u}) {
      const std::size_t n = 7 * 1001;
      const auto x = sample(n, 3);
      const cp::top_k c{.fraction = 0.2f, .row_length = row, .values = cp::dtype::bf16};
      const auto p = encode_vec(c, x);
      const auto y = decode_vec(c, p, n);
      std::vector<float> acc(n);
      for (std::size_t i = 0; i < n; ++i)
        acc[i] = static_cast<float>(i % 5) - 2.0f;
      const auto acc0 = acc;
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), 0.25f);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(acc[i] == acc0[i] + 0.25f * y[i]);
      // A workspace that starts at an odd address: the key array aligns itself inside it.
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n) + 1);
      std::vector<float> z = x;
      const auto r = cp::roundtrip(cp::cpu::seq, c, {}, std::span(z), std::span(ws).subspan(1));
      CHECK(r.nonfinite == 0);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(bits_of(z[i]) == bits_of(y[i]));
    }
  }

  TEST_CASE("top_k: NaN and Inf are kept under propagate and count as 0 under zero_and_count") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> x = {1.0f, nan, -5.0f, -inf, 2.0f, 0.25f};
    const cp::top_k c{.count = 2};
    std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
    std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
    std::vector<float> y(x.size());

    auto r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::propagate},
                        std::span<const float>(x), std::span(p), std::span(ws));
    CHECK(r.nonfinite == 2);
    cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
    CHECK(std::isnan(y[1]));
    CHECK(y[3] == -inf);
    CHECK(y[2] == 0.0f);

    r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                   std::span<const float>(x), std::span(p), std::span(ws));
    CHECK(r.nonfinite == 2);
    cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
    CHECK(y == std::vector<float>{0.0f, 0.0f, -5.0f, 0.0f, 2.0f, 0.0f});

    std::vector<float> z = x;
    r = cp::roundtrip(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                      std::span(z), std::span(ws));
    CHECK(r.nonfinite == 2);
    CHECK(z == y);
  }

  TEST_CASE("top_k: refuses payloads of another codec or configuration") {
    const auto x = sample(1000);
    const cp::top_k c{.fraction = 0.1f};
    const auto p = encode_vec(c, x);
    std::vector<float> y(x.size(), 3.0f);
    auto code_of = [&](auto&& decoder) {
      try {
        decoder();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    for (const cp::top_k& other : {cp::top_k{.fraction = 0.2f}, cp::top_k{.count = 100},
                                   cp::top_k{.fraction = 0.1f, .row_length = 100},
                                   cp::top_k{.fraction = 0.1f, .values = cp::dtype::f16}}) {
      CHECK(code_of([&] {
              cp::decode(cp::cpu::seq, other, std::span<const std::byte>(p), std::span(y));
            }) == cp::errc::codec_mismatch);
    }
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::random_k{.fraction = 0.1f}, std::span<const std::byte>(p),
                       std::span(y));
          }) == cp::errc::codec_mismatch);
    for (float v : y)
      REQUIRE(v == 3.0f);
  }

  TEST_CASE("top_k: refuses a configuration outside its domain") {
    std::vector<float> x(12, 1.0f);
    std::vector<std::byte> p(4096), ws(4096);
    for (const cp::top_k& bad :
         {cp::top_k{.fraction = -0.1f}, cp::top_k{.fraction = 1.5f},
          cp::top_k{.fraction = std::numeric_limits<float>::quiet_NaN()},
          cp::top_k{.row_length = 5}, cp::top_k{.values = static_cast<cp::dtype>(9)}}) {
      CHECK(bad.can_implement(x.size()).code == cp::errc::invalid_argument);
      try {
        cp::encode(cp::cpu::seq, bad, {}, std::span<const float>(x), std::span(p), std::span(ws));
        FAIL("encode accepted an invalid configuration");
      } catch (const cp::error& e) {
        CHECK(e.code() == cp::errc::invalid_argument);
      }
    }
    CHECK(static_cast<bool>(cp::top_k{.count = 3, .row_length = 4}.can_implement(12)));
    CHECK(
        static_cast<bool>(cp::top_k{.row_length = 1u << 20}.can_implement(std::uint64_t{1} << 33)));
    CHECK(cp::top_k{}.can_implement((std::uint64_t{1} << 32) + 1).code ==
          cp::errc::invalid_argument);
  }

  TEST_CASE("top_k: a hostile index section with a valid checksum is refused as corrupt") {
    const auto x = sample(300);
    // An index list, then a bitmap of 38 bytes with one bit flipped: in its whole 8-byte
    // words, and in its last bytes.
    for (std::uint64_t at : {0u, 3u, 17u, 37u}) {
      const std::uint64_t k = at == 0 ? 10 : 200;
      const cp::top_k c{.count = k};
      auto p = encode_vec(c, x);
      if (k == 10) {
        p[64] = std::byte{0xff}; // the first 2-byte index becomes 65535, past the row
        p[65] = std::byte{0xff};
      } else {
        p[64 + at] ^= std::byte{0x10}; // the bitmap's population is now k +- 1
      }
      cp::format::seal(std::span(p), c.body_bytes(x.size()));
      std::vector<float> y(x.size(), 3.0f);
      try {
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
        FAIL("decode accepted a corrupt index section");
      } catch (const cp::error& e) {
        CHECK(e.code() == cp::errc::corrupt);
      }
      for (float v : y)
        REQUIRE(v == 3.0f);
    }
  }
}

TEST_CASE("top_k: a fraction keeps the nearest whole number of elements, at least one") {
  CHECK(cp::top_k{.fraction = 0.1f}.kept(1000) == 100); // 0.1f is slightly above 0.1
  CHECK(cp::top_k{.fraction = 0.1f}.kept(1004) == 100);
  CHECK(cp::top_k{.fraction = 0.1f}.kept(1006) == 101);
  CHECK(cp::top_k{.fraction = 1e-4f}.kept(100) == 1);
  CHECK(cp::top_k{.fraction = 0.0f}.kept(100) == 0);
  CHECK(cp::top_k{.fraction = 1.0f}.kept(7) == 7);
  CHECK(cp::top_k{.count = 9}.kept(7) == 7);
  CHECK(cp::random_k{.fraction = 0.1f}.kept(1000) == 100);
}
