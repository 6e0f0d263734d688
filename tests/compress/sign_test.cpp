// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/core/canonical_sum.hpp"

namespace cp = commpress;

namespace {
// Uniform on [-10, 10) without zeros (the Q7 identities assume none).
std::vector<float> sample(std::size_t n, std::uint32_t stream = 1) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(9, stream);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 20.0f;
    if (x[i] == 0.0f)
      x[i] = 0.125f;
  }
  return x;
}

template <class T>
std::vector<std::byte> encode_vec(const cp::sign& c, const std::vector<T>& x,
                                  cp::context ctx = {}) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), std::span(p));
  return p;
}

std::vector<float> decode_vec(const cp::sign& c, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<float> y(n, 42.0f);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

// A group's scale from its definition: canonical sum in double, then mean or root mean.
float reference_scale(const std::vector<float>& x, std::size_t first, std::size_t m,
                      cp::sign_scale s) {
  const double sum = cp::canonical_chunked_sum(m, [&](std::uint64_t i) {
    const double v = x[first + i];
    return s == cp::sign_scale::mean_abs ? std::fabs(v) : v * v;
  });
  const double mean = sum / static_cast<double>(m);
  return static_cast<float>(s == cp::sign_scale::mean_abs ? mean : std::sqrt(mean));
}

const cp::sign mean_abs_tensor{};
const cp::sign rms_tensor{.scale = cp::sign_scale::rms};
} // namespace

TEST_SUITE("compress") {
  TEST_CASE("sign: mean_abs keeps the l1 norm and leaves ||x||^2 - ||x||_1^2 / d of error (Q7)") {
    for (std::size_t n : {1u, 7u, 1000u, 1000003u}) {
      CAPTURE(n);
      const auto x = sample(n);
      const auto y = decode_vec(mean_abs_tensor, encode_vec(mean_abs_tensor, x), n);
      double l1 = 0.0, l2 = 0.0, l1_c = 0.0, err = 0.0;
      std::size_t flipped = 0;
      for (std::size_t i = 0; i < n; ++i) {
        l1 += std::fabs(static_cast<double>(x[i]));
        l2 += static_cast<double>(x[i]) * x[i];
        l1_c += std::fabs(static_cast<double>(y[i]));
        err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
        flipped += std::signbit(y[i]) == std::signbit(x[i]) ? 0u : 1u;
      }
      CHECK(flipped == 0);
      // The only deviation is the scale's rounding to float (2^-24 relative).
      CHECK(l1_c == doctest::Approx(l1).epsilon(1e-7));
      CHECK(err == doctest::Approx(l2 - l1 * l1 / static_cast<double>(n)).epsilon(1e-6));
    }
  }

  TEST_CASE("sign: rms keeps the l2 norm (Q8)") {
    for (std::size_t n : {1u, 7u, 1000u, 1000003u}) {
      CAPTURE(n);
      const auto x = sample(n, 2);
      const auto y = decode_vec(rms_tensor, encode_vec(rms_tensor, x), n);
      double l2 = 0.0, l2_c = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        l2 += static_cast<double>(x[i]) * x[i];
        l2_c += static_cast<double>(y[i]) * y[i];
      }
      CHECK(std::sqrt(l2_c) == doctest::Approx(std::sqrt(l2)).epsilon(1e-7));
    }
  }

  TEST_CASE("sign: zero and negative zero decode to +scale") {
    const std::vector<float> x = {0.0f, -0.0f, -3.0f, 3.0f};
    for (const cp::sign& c : {mean_abs_tensor, rms_tensor}) {
      const auto y = decode_vec(c, encode_vec(c, x), x.size());
      const float s =
          c.scale == cp::sign_scale::mean_abs ? 1.5f : static_cast<float>(std::sqrt(4.5));
      CHECK(y == std::vector<float>{s, s, -s, s});
    }
  }

  TEST_CASE("sign: the body is the fp32 scales, then LSB-first sign bits") {
    const std::vector<float> x = {1.0f, -1.0f, -1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, -1.0f};
    const auto p = encode_vec(mean_abs_tensor, x);
    REQUIRE(p.size() == 64 + 4 + 2);
    float s;
    std::memcpy(&s, p.data() + 64, 4);
    CHECK(s == 1.0f);
    CHECK(static_cast<int>(p[68]) == 0x06); // elements 1 and 2 are negative
    CHECK(static_cast<int>(p[69]) == 0x01); // element 8; the 7 unused bits are zero
  }

  TEST_CASE("sign: block granularity scales each block by its own canonical sum") {
    const std::size_t n = 3 * 40000 + 13; // blocks longer than one 32768-term chunk
    const auto x = sample(n, 3);
    for (std::uint32_t block : {7u, 40000u}) {
      for (cp::sign_scale sc : {cp::sign_scale::mean_abs, cp::sign_scale::rms}) {
        const cp::sign c{.granularity = cp::sign_granularity::block, .block = block, .scale = sc};
        CAPTURE(block);
        const auto p = encode_vec(c, x);
        const std::size_t groups = (n + block - 1) / block;
        CHECK(p.size() == 64 + 4 * groups + (n + 7) / 8);
        const auto y = decode_vec(c, p, n);
        std::size_t wrong = 0;
        for (std::size_t g = 0; g < groups; ++g) {
          const std::size_t first = g * block;
          const std::size_t m = std::min<std::size_t>(block, n - first);
          const float s = reference_scale(x, first, m, sc);
          float stored;
          std::memcpy(&stored, p.data() + 64 + 4 * g, 4);
          wrong += stored == s ? 0u : 1u;
          for (std::size_t i = first; i < first + m; ++i)
            wrong += y[i] == (x[i] < 0.0f ? -s : s) ? 0u : 1u;
        }
        CHECK(wrong == 0);
      }
    }
  }

  TEST_CASE_TEMPLATE("sign: blocks that do not start on a byte pack every bit in place, under "
                     "seq and par, into a payload buffer that held other bytes",
                     T, float, cp::half, cp::bfloat16) {
    // Groups start at every bit of a byte; 32771 and 40001 span a 32768-term chunk from an odd
    // bit. The buffer is filled with 0xa5 first: a group keeps the bits the previous one wrote
    // in their shared byte, and the last byte's bits past the tensor are 0. With blocks of 100,
    // 108 elements end on a group of 8 four bits into a byte (a whole step of 8, then the
    // payload's last byte from the carry), 132 on a group of 32 (a whole vector word, then the
    // same).
    for (const std::size_t n : {108u, 132u, 3 * 40000u + 13u}) {
      std::vector<float> xf = sample(n, 8);
      std::size_t nonfinite = 0;
      if (n > 54321) {
        xf[12345] = -0.0f;
        xf[54321] = -std::numeric_limits<float>::quiet_NaN();
        nonfinite = 1;
      }
      std::vector<T> x(n);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = cp::from_float<T>(xf[i]);
        xf[i] = cp::to_float(x[i]);
      }
      std::vector<unsigned char> want((n + 7) / 8, 0);
      for (std::size_t i = 0; i < n; ++i)
        want[i / 8] = static_cast<unsigned char>(want[i / 8] | (xf[i] < 0.0f ? 1u : 0u) << (i % 8));
      for (const std::uint32_t block : {1u, 3u, 5u, 7u, 13u, 100u, 32771u, 40001u}) {
        const cp::sign c{.granularity = cp::sign_granularity::block, .block = block};
        const std::size_t groups = (n + block - 1) / block;
        for (const bool parallel : {false, true}) {
          CAPTURE(n);
          CAPTURE(block);
          CAPTURE(parallel);
          std::vector<std::byte> p(cp::max_payload_bytes(c, n) + 1, std::byte{0xa5});
          const std::span<std::byte> room(p.data(), p.size() - 1);
          const auto r = parallel ? cp::encode(cp::cpu::par_t{.threads = 3, .grain = 64}, c, {},
                                               std::span<const T>(x), room)
                                  : cp::encode(cp::cpu::seq, c, {}, std::span<const T>(x), room);
          REQUIRE(r.bytes == 64 + 4 * groups + want.size());
          CHECK(r.nonfinite == nonfinite);
          CHECK(p.back() == std::byte{0xa5});
          CHECK(std::memcmp(p.data() + 64 + 4 * groups, want.data(), want.size()) == 0);
          std::size_t wrong = 0;
          for (std::size_t g = 0; g < groups; ++g) {
            const std::size_t first = g * block;
            float stored;
            std::memcpy(&stored, p.data() + 64 + 4 * g, 4);
            const float s = reference_scale(xf, first, std::min<std::size_t>(block, n - first),
                                            cp::sign_scale::mean_abs);
            wrong += stored == s || (std::isnan(stored) && std::isnan(s)) ? 0u : 1u;
          }
          CHECK(wrong == 0);
        }
      }
    }
  }

  TEST_CASE_TEMPLATE("sign: decodes every element dtype bit for bit from the canonical scale", T,
                     float, cp::half, cp::bfloat16) {
    for (std::size_t n : {0u, 1u, 7u, 1000003u}) {
      std::vector<float> xf = sample(n, 4);
      std::vector<T> x(n);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = cp::from_float<T>(xf[i]);
        xf[i] = cp::to_float(x[i]); // the values the codec sees
      }
      for (const cp::sign& c : {mean_abs_tensor, rms_tensor}) {
        CAPTURE(n);
        const auto p = encode_vec(c, x);
        CHECK(p.size() == 64 + (n > 0 ? 4 : 0) + (n + 7) / 8);
        std::vector<T> y(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
        const float s = n > 0 ? reference_scale(xf, 0, n, c.scale) : 0.0f;
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i)
          wrong += y[i] == cp::from_float<T>(xf[i] < 0.0f ? -s : s) ? 0u : 1u;
        CHECK(wrong == 0);
      }
    }
  }

  TEST_CASE_TEMPLATE("sign: a 16-bit output holds from_float of each fp32 decoded value, for "
                     "groups at every offset, a NaN group and values beyond fp16's range",
                     T, cp::half, cp::bfloat16) {
    const std::size_t n = 3 * 1000 + 13;
    std::vector<float> x = sample(n, 6);
    for (std::size_t i = 1000; i < 2000; ++i)
      x[i] *= 1e5f; // scales near 6e5: infinite as fp16
    x[2500] = std::numeric_limits<float>::quiet_NaN();
    for (std::uint32_t block : {7u, 13u, 40u, 1000u}) {
      for (cp::sign_scale sc : {cp::sign_scale::mean_abs, cp::sign_scale::rms}) {
        const cp::sign c{.granularity = cp::sign_granularity::block, .block = block, .scale = sc};
        CAPTURE(block);
        const auto p = encode_vec(c, x, {.on_nonfinite = cp::nonfinite_policy::propagate});
        const auto want = decode_vec(c, p, n);
        std::vector<T> y(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i)
          wrong += y[i].bits == cp::from_float<T>(want[i]).bits ? 0u : 1u;
        CHECK(wrong == 0);
        CHECK(std::isnan(cp::to_float(y[2500])));
        CHECK(std::isinf(cp::to_float(y[1500])) == std::is_same_v<T, cp::half>);
      }
    }
  }

  TEST_CASE_TEMPLATE("sign: a 16-bit input encodes to the body of its values in fp32, for every "
                     "granularity, scale and policy, under seq and par",
                     T, cp::half, cp::bfloat16) {
    // Groups of a multiple of 8 elements, and a tensor-wide one, take the 32-element passes of
    // the vector layer (16-bit elements widened 32 at a time); blocks of 100 the per-element
    // loops. NaN, Inf, -0, subnormals and values past f16's range; 70001 elements span several
    // canonical chunks and par's ranges.
    for (const std::size_t n : {9u, 1000u, 5003u, 70001u}) {
      std::vector<float> xf = sample(n, 6);
      for (std::size_t i = 0; i < n; ++i)
        xf[i] *= i % 11 == 0 ? 1e5f : i % 13 == 0 ? 1e-6f : 1.0f;
      if (n > 1000) {
        xf[700] = std::numeric_limits<float>::quiet_NaN();
        xf[2500] = -std::numeric_limits<float>::infinity();
        xf[2501] = -0.0f;
      }
      std::vector<T> x(n);
      std::vector<float> wide(n);
      std::size_t nonfinite = 0;
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = cp::from_float<T>(xf[i]);
        wide[i] = cp::to_float(x[i]);
        nonfinite += !std::isfinite(wide[i]);
      }
      for (const std::uint32_t block : {0u, 64u, 100u, 4096u})
        for (const auto scale : {cp::sign_scale::mean_abs, cp::sign_scale::rms})
          for (const auto policy :
               {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
            CAPTURE(n);
            CAPTURE(block);
            const cp::sign c = block == 0 ? cp::sign{.scale = scale}
                                          : cp::sign{.granularity = cp::sign_granularity::block,
                                                     .block = block,
                                                     .scale = scale};
            const cp::context ctx{.on_nonfinite = policy};
            const auto want = encode_vec(c, wide, ctx);
            std::vector<std::byte> seq(want.size()), par(want.size());
            const auto rs = cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), seq);
            const auto rp = cp::encode(cp::cpu::par_t{.threads = 3, .grain = 4096}, c, ctx,
                                       std::span<const T>(x), par);
            CHECK(rs.nonfinite == nonfinite);
            CHECK(rp.nonfinite == nonfinite);
            CHECK(std::equal(want.begin() + 64, want.end(), seq.begin() + 64));
            CHECK(std::equal(want.begin() + 64, want.end(), par.begin() + 64));
          }
    }
  }

  TEST_CASE("sign: decode_accumulate adds weight * decoded and roundtrip equals "
            "decode(encode)") {
    const std::size_t n = 10007;
    auto x = sample(n, 5);
    x[10] = 0.0f;
    x[11] = -0.0f;
    for (const cp::sign& c : {mean_abs_tensor, rms_tensor,
                              cp::sign{.granularity = cp::sign_granularity::block, .block = 100}}) {
      const auto p = encode_vec(c, x);
      const auto y = decode_vec(c, p, n);
      std::vector<float> acc(n);
      for (std::size_t i = 0; i < n; ++i)
        acc[i] = static_cast<float>(i % 5) - 2.0f;
      const auto acc0 = acc;
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), 0.75f);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(acc[i] == acc0[i] + 0.75f * y[i]);
      std::vector<float> z = x;
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n));
      cp::roundtrip(cp::cpu::seq, c, {}, std::span(z), std::span(ws));
      CHECK(std::memcmp(z.data(), y.data(), n * sizeof(float)) == 0);
    }
  }

  TEST_CASE("sign: a non-finite input makes its group NaN under propagate and 0 otherwise") {
    std::vector<float> x = {1.0f,  -2.0f, 3.0f, -4.0f, 1.0f, std::numeric_limits<float>::infinity(),
                            -1.0f, 1.0f};
    const cp::sign c{.granularity = cp::sign_granularity::block, .block = 4};
    std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));

    auto r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::propagate},
                        std::span<const float>(x), std::span(p));
    CHECK(r.nonfinite == 1);
    auto y = decode_vec(c, p, x.size());
    CHECK(y[0] == 2.5f);
    CHECK(y[3] == -2.5f);
    for (std::size_t i = 4; i < 8; ++i)
      CHECK(std::isnan(y[i]));

    r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                   std::span<const float>(x), std::span(p));
    CHECK(r.nonfinite == 1);
    y = decode_vec(c, p, x.size());
    CHECK(y == std::vector<float>{2.5f, -2.5f, 2.5f, -2.5f, 0.75f, 0.75f, -0.75f, 0.75f});

    std::vector<float> z = x;
    std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
    r = cp::roundtrip(cp::cpu::seq, c, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                      std::span(z), std::span(ws));
    CHECK(r.nonfinite == 1);
    CHECK(z == y);
  }

  TEST_CASE("sign: refuses other configurations and codecs, and bad configurations") {
    const auto x = sample(1000);
    const auto p = encode_vec(mean_abs_tensor, x);
    std::vector<float> y(x.size(), 3.0f);
    auto code_of = [&](auto&& call) {
      try {
        call();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    for (const cp::sign& other :
         {rms_tensor, cp::sign{.granularity = cp::sign_granularity::block, .block = 1000}})
      CHECK(code_of([&] {
              cp::decode(cp::cpu::seq, other, std::span<const std::byte>(p), std::span(y));
            }) == cp::errc::codec_mismatch);
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::top_k{}, std::span<const std::byte>(p), std::span(y));
          }) == cp::errc::codec_mismatch);
    for (float v : y)
      REQUIRE(v == 3.0f);

    std::vector<std::byte> out(8192);
    for (const cp::sign& bad : {cp::sign{.granularity = cp::sign_granularity::block, .block = 0},
                                cp::sign{.granularity = cp::sign_granularity::tensor, .block = 64},
                                cp::sign{.granularity = static_cast<cp::sign_granularity>(2)},
                                cp::sign{.scale = static_cast<cp::sign_scale>(2)}}) {
      CHECK(bad.can_implement(x.size()).code == cp::errc::invalid_argument);
      CHECK(code_of([&] {
              cp::encode(cp::cpu::seq, bad, {}, std::span<const float>(x), std::span(out));
            }) == cp::errc::invalid_argument);
    }
  }
}
