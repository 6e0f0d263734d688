// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The randomized Hadamard rotation (core/hadamard.hpp) and the rotated<C> codec adapter
// (docs/methods.md, "Randomized Hadamard rotation"):
// - the transform is the orthonormal Sylvester-Hadamard matrix times random signs: it matches
//   the matrix written out, keeps the L2 norm to rounding, and its inverse returns the input to
//   within a double rounding, for whole windows and the power-of-two pieces of a short one;
// - the signs come from the seed, tensor id and step alone, change with the step, and are
//   independent of a stochastic codec's random words;
// - rotated<C>: decode(encode(x)) is roundtrip(x) bit for bit, for every element type;
//   decode_accumulate adds the decoded values; cpu::par writes seq's bytes; the error is the
//   inner codec's error on the rotated tensor; and on heavy-tailed inputs a 4-bit quantizer
//   loses less after the rotation;
// - edge cases (empty, one element, short last windows, all zero, NaN/Inf, denormals, values
//   near the float maximum, which saturate rather than overflow) and bad input (a payload with
//   another rotation, none, or an unknown transform byte; a bad window size), each refused with
//   nothing written.

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/rotated.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/compress/codec_list.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/core/hadamard.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

const cp::context ctx{.seed = 11, .step = 5, .tensor_id = 2};

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x)
    v = d(gen);
  return x;
}

/// Gaussian values with one outlier of `outlier` times sigma every `every` elements.
std::vector<float> heavy_tailed(std::size_t n, std::uint32_t seed, std::size_t every,
                                float outlier) {
  std::vector<float> x = gaussian(n, seed);
  for (std::size_t i = every / 2; i < n; i += every)
    x[i] = x[i] < 0 ? -outlier : outlier;
  return x;
}

template <class C, class T = float>
std::vector<std::byte> encode_payload(const C& c, const std::vector<T>& x,
                                      const cp::context& at = ctx) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
  cp::encode(cp::cpu::seq, c, at, std::span<const T>(x), std::span(p), std::span(ws));
  return p;
}

template <class C>
std::vector<float> decoded(const C& c, std::span<const std::byte> p, std::size_t n) {
  std::vector<float> y(n, 42.0f);
  cp::decode(cp::cpu::seq, c, p, std::span(y));
  return y;
}

template <class C> std::vector<float> roundtripped(const C& c, std::vector<float> x) {
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
  cp::roundtrip(cp::cpu::seq, c, ctx, std::span(x), std::span(ws));
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

double squared_error(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    s += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  return s;
}

double squared_norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x)
    s += v * v;
  return s;
}

/// The forward transform of x (elements first.. of a tensor) as a vector of doubles.
std::vector<double> forward(std::vector<double> x, std::uint64_t first = 0,
                            std::uint64_t step = 5) {
  cp::hadamard_forward(x.data(), x.size(), cp::rotation_key(11, 2), step, first);
  return x;
}

constexpr cp::quantize q4_tensor{
    .bits = 4, .granularity = cp::scale_granularity::tensor, .group = 0};
constexpr cp::quantize q4_block{
    .bits = 4, .granularity = cp::scale_granularity::block, .group = 256};

} // namespace

TEST_CASE("the transform is the orthonormal Sylvester-Hadamard matrix times random signs") {
  constexpr std::uint64_t m = 8;
  const std::vector<double> x = {1.5, -2.0, 0.25, 3.0, -0.5, 7.0, 1.0, -4.0};
  // The signs: forward of a unit vector e_j is d_j times column j of H / sqrt(m), whose first
  // entry is d_j / sqrt(m).
  std::vector<double> d(m);
  for (std::uint64_t j = 0; j < m; ++j) {
    std::vector<double> e(m, 0.0);
    e[j] = 1.0;
    d[j] = forward(e)[0] > 0 ? 1.0 : -1.0;
  }
  const std::vector<double> y = forward(x);
  for (std::uint64_t i = 0; i < m; ++i) {
    double want = 0;
    for (std::uint64_t j = 0; j < m; ++j)
      want += ((std::popcount(i & j) % 2) ? -1.0 : 1.0) * d[j] * x[j];
    CHECK(y[i] == doctest::Approx(want / std::sqrt(8.0)).epsilon(1e-14));
  }
  // Random signs: not all equal in a window of 64 elements, and about half negative.
  std::vector<double> probe(64, 0.0);
  int negative = 0;
  for (std::uint64_t j = 0; j < 64; ++j) {
    std::vector<double> e(64, 0.0);
    e[j] = 1.0;
    negative += forward(e)[0] < 0 ? 1 : 0;
  }
  CHECK(negative > 16);
  CHECK(negative < 48);
}

TEST_CASE("the transform keeps the norm, and its inverse returns the input to rounding") {
  for (std::uint64_t len : {1ull, 2ull, 3ull, 8ull, 13ull, 255ull, 256ull, 4095ull, 4096ull}) {
    CAPTURE(len);
    const std::vector<float> f = gaussian(len, static_cast<std::uint32_t>(len));
    const std::vector<double> x(f.begin(), f.end());
    const std::uint64_t first = 4096 * 3; // a later window: other signs
    std::vector<double> y = forward(x, first);
    CHECK(squared_norm(y) == doctest::Approx(squared_norm(x)).epsilon(1e-13));
    cp::hadamard_inverse(y.data(), len, cp::rotation_key(11, 2), 5, first);
    double worst = 0;
    for (std::uint64_t i = 0; i < len; ++i)
      worst = std::max(worst, std::abs(y[i] - x[i]) / (std::abs(x[i]) + 1e-300));
    CHECK(worst < 1e-13);
  }
}

TEST_CASE("the fast transform takes the butterflies of the definition, bit for bit") {
  // walsh_hadamard groups strides into radix-8 and radix-4 passes; each output must still be
  // the same additions on the same operands as one radix-2 stride after the other.
  std::mt19937_64 gen(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::uint64_t m = 1; m <= (std::uint64_t{1} << cp::hadamard_max_log2); m *= 2) {
    CAPTURE(m);
    std::vector<double> x(m);
    for (double& v : x) // magnitudes over many binades, so that a reordered sum rounds apart
      v = normal(gen) * std::exp(4.0 * normal(gen));
    std::vector<double> want = x;
    for (std::uint64_t h = 1; h < m; h *= 2)
      for (std::uint64_t i = 0; i < m; i += 2 * h)
        for (std::uint64_t j = i; j < i + h; ++j) {
          const double a = want[j], b = want[j + h];
          want[j] = a + b;
          want[j + h] = a - b;
        }
    cp::detail::walsh_hadamard(x.data(), m);
    CHECK(std::memcmp(x.data(), want.data(), 8 * m) == 0);
  }
}

TEST_CASE("a short window is rotated in the power-of-two pieces of its length") {
  // 13 = 8 + 4 + 1: the pieces do not mix, so a vector in one piece stays in it.
  std::vector<double> x(13, 0.0);
  x[9] = 1.0; // in the 4-element piece [8, 12)
  const std::vector<double> y = forward(x);
  for (std::size_t i = 0; i < 13; ++i) {
    CAPTURE(i);
    if (i >= 8 && i < 12)
      CHECK(std::abs(y[i]) == doctest::Approx(0.5));
    else
      CHECK(y[i] == 0.0);
  }
}

TEST_CASE("the signs follow seed, tensor id and step, apart from the codecs' random words") {
  const std::vector<float> f = gaussian(256, 1);
  const std::vector<double> x(f.begin(), f.end());
  const std::vector<double> a = forward(x, 0, 5);
  CHECK(a == forward(x, 0, 5));
  CHECK(a != forward(x, 0, 6));
  std::vector<double> other = x;
  cp::hadamard_forward(other.data(), other.size(), cp::rotation_key(12, 2), 5, 0);
  CHECK(a != other);
  CHECK(cp::rotation_key(11, 2) != cp::make_rng_key(11, 2));
}

TEST_CASE("the signs as fp32 sign bits are the signs the transform multiplies by, at any start "
          "and length") {
  const cp::rng_key key = cp::rotation_key(11, 2);
  std::size_t wrong = 0, negative = 0, total = 0;
  for (std::uint64_t first = 0; first < 200; first += 1 + first / 8)
    for (std::uint64_t len = 0; len <= 300; len += 1 + len / 16) {
      std::vector<double> ones(len, 1.0);
      cp::detail::apply_rotation_signs(ones.data(), len, key, 7, first);
      std::vector<std::uint32_t> mask(len, 0x12345678u);
      cp::detail::rotation_sign_masks(mask.data(), len, key, 7, first);
      for (std::uint64_t j = 0; j < len; ++j) {
        wrong += mask[j] == (ones[j] < 0 ? 0x80000000u : 0u) ? 0u : 1u;
        negative += ones[j] < 0 ? 1u : 0u;
      }
      total += len;
    }
  CHECK(wrong == 0);
  CHECK(total > 10000);
  CHECK(negative > total / 3); // the signs are random, not all one way
  CHECK(negative < 2 * total / 3);
}

TEST_CASE_TEMPLATE("rotated<C>: decode(encode(x)) is roundtrip(x), bit for bit", C, cp::quantize,
                   cp::sign, cp::fp8, cp::mxfp4, cp::nvfp4, cp::terngrad, cp::qsgd4) {
  for (const C& inner : C::examples()) {
    for (std::uint8_t log2 : {std::uint8_t{3}, std::uint8_t{6}, std::uint8_t{12}}) {
      const cp::rotated<C> c{inner, log2};
      for (std::size_t n : {0u, 1u, 7u, 8u, 12u, 64u, 100u, 257u, 1000u, 4100u}) {
        if (!c.can_implement(n))
          continue;
        CAPTURE(n);
        CAPTURE(int{log2});
        const std::vector<float> x = heavy_tailed(n, static_cast<std::uint32_t>(n) + 1, 50, 40.0f);
        const std::vector<std::byte> p = encode_payload(c, x);
        CHECK(cp::format::read_header(p.data()).transform ==
              cp::format::transform_byte::hadamard(log2));
        const std::vector<float> y = decoded(c, p, n);
        CHECK(same_bits(y, roundtripped(c, x)));
        // decode_accumulate adds weight * decoded value to what is there.
        std::vector<float> acc(n, 1.0f);
        cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), 0.5f);
        for (std::size_t i = 0; i < n; ++i)
          CHECK(acc[i] == 1.0f + 0.5f * y[i]);
        // 16-bit outputs: the decoded float values, rounded once.
        std::vector<cp::bfloat16> yb(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(yb));
        for (std::size_t i = 0; i < n; ++i)
          CHECK(std::bit_cast<std::uint16_t>(yb[i]) ==
                std::bit_cast<std::uint16_t>(cp::from_float<cp::bfloat16>(y[i])));
      }
    }
  }
}

TEST_CASE("rotated<C> under cpu::par writes seq's bytes and decodes to seq's values") {
  const cp::cpu::par_t par{.threads = 2, .grain = 64};
  const std::size_t n = 5000; // several ranges of whole windows, a short last window
  const std::vector<float> x = heavy_tailed(n, 3, 97, 30.0f);
  const auto check = [&](const auto& c) {
    const std::vector<std::byte> want = encode_payload(c, x);
    std::vector<std::byte> got(want.size());
    std::vector<std::byte> ws(cp::workspace_bytes(par, c, n));
    cp::encode(par, c, ctx, std::span<const float>(x), std::span(got), std::span(ws));
    CHECK(got == want);
    std::vector<float> y(n);
    cp::decode(par, c, std::span<const std::byte>(got), std::span(y));
    CHECK(same_bits(y, decoded(c, want, n)));
    std::vector<float> z = x;
    cp::roundtrip(par, c, ctx, std::span(z), std::span(ws));
    CHECK(same_bits(z, y));
  };
  check(cp::rotated<cp::quantize>{q4_block, 6});
  check(cp::rotated<cp::quantize>{q4_tensor, 8});
  check(cp::rotated<cp::sign>{cp::sign{}, 7});
  check(cp::rotated<cp::mxfp4>{cp::mxfp4{}, 5});
}

TEST_CASE("the error is the inner codec's error on the rotated tensor") {
  // ||R^T C(R x) - x|| = ||C(R x) - R x||: the rotation is orthogonal.
  const std::size_t n = 1024;
  const std::vector<float> x = heavy_tailed(n, 4, 64, 25.0f);
  const cp::rotated<cp::quantize> c{q4_tensor, 8};
  const std::vector<float> y = roundtripped(c, x);
  std::vector<float> rx(n);
  for (std::size_t w = 0; w < n; w += 256) {
    std::vector<double> win(x.begin() + static_cast<std::ptrdiff_t>(w),
                            x.begin() + static_cast<std::ptrdiff_t>(w + 256));
    cp::hadamard_forward(win.data(), 256, cp::rotation_key(ctx.seed, ctx.tensor_id), ctx.step, w);
    for (std::size_t j = 0; j < 256; ++j)
      rx[w + j] = static_cast<float>(win[j]);
  }
  const std::vector<float> crx = roundtripped(q4_tensor, rx);
  CHECK(squared_error(x, y) == doctest::Approx(squared_error(rx, crx)).epsilon(1e-4));
}

TEST_CASE("on heavy-tailed inputs, 4-bit quantization loses less after the rotation") {
  // One outlier of 40 sigma every 200 elements: per-tensor and per-block scales are set by the
  // outliers, and the Gaussian bulk falls into a few codes. The rotation spreads each outlier
  // over its window.
  const std::size_t n = 1 << 16;
  const std::vector<float> x = heavy_tailed(n, 5, 200, 40.0f);
  for (const cp::quantize q : {q4_tensor, q4_block}) {
    const double plain = squared_error(x, roundtripped(q, x));
    const double rotated = squared_error(x, roundtripped(cp::rotated<cp::quantize>{q, 8}, x));
    CAPTURE(plain / rotated);
    CHECK(plain / rotated > 3.0);
  }
  // On Gaussian inputs the rotation changes little: the bulk already fills the codes.
  const std::vector<float> g = gaussian(n, 6);
  const double plain = squared_error(g, roundtripped(q4_block, g));
  const double rotated = squared_error(g, roundtripped(cp::rotated<cp::quantize>{q4_block, 8}, g));
  CHECK(rotated < 2.0 * plain);
}

TEST_CASE("rotated<C> with error feedback: the errors telescope") {
  // sum_t deQ_t + e_T = sum_t g_t (to float rounding), the property of EF with any codec.
  const std::size_t n = 777;
  const cp::pipeline<cp::ef, cp::rotated<cp::quantize>> pipe{{}, {q4_block, 6}};
  auto st = pipe.make_state(n);
  std::vector<std::byte> out(pipe.max_payload_bytes(n));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, pipe, n));
  std::vector<double> sent(n, 0.0), received(n, 0.0);
  for (std::uint64_t t = 0; t < 20; ++t) {
    const std::vector<float> g = heavy_tailed(n, static_cast<std::uint32_t>(t), 50, 20.0f);
    const cp::context at{.seed = 1, .step = t, .tensor_id = 0};
    cp::encode(cp::cpu::seq, pipe, st, at, std::span<const float>(g), std::span(out),
               std::span(ws));
    auto rs = pipe.make_receiver_state(n);
    std::vector<float> y(n);
    cp::decode(cp::cpu::seq, pipe, rs, std::span<const std::byte>(out), std::span(y));
    for (std::size_t i = 0; i < n; ++i) {
      sent[i] += g[i];
      received[i] += y[i];
    }
  }
  const std::span<const float> e = st.residual();
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(received[i] + e[i] - sent[i]));
  CHECK(worst < 1e-3);
}

TEST_CASE("rotated<C>: edge cases") {
  const cp::rotated<cp::quantize> c{q4_block, 8};
  SUBCASE("empty and one element") {
    CHECK(decoded(c, encode_payload(c, std::vector<float>{}), 0).empty());
    const std::vector<float> y = decoded(c, encode_payload(c, std::vector<float>{-3.5f}), 1);
    CHECK(y[0] == doctest::Approx(-3.5f).epsilon(1e-6)); // one element: a sign flip at most
  }
  SUBCASE("all zero and constant") {
    CHECK(decoded(c, encode_payload(c, std::vector<float>(300, 0.0f)), 300) ==
          std::vector<float>(300, 0.0f));
    // A constant is exact without the rotation; rotated, it is a spread of values that the
    // 4-bit codes round: its error is that of a 4-bit symmetric code, not zero.
    const std::vector<float> k(256, 2.0f);
    const std::vector<float> y = decoded(c, encode_payload(c, k), 256);
    CHECK(squared_error(k, y) > 0.0);
    CHECK(squared_error(k, y) < 0.05 * 4.0 * 256);
  }
  SUBCASE("denormals decode finite, near their values") {
    std::vector<float> x(256);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 17);
    for (float v : decoded(c, encode_payload(c, x), x.size()))
      CHECK(std::abs(v) < 1e-37f);
  }
  SUBCASE("a large value alone in its window decodes finite and close") {
    std::vector<float> x(256, 0.0f);
    x[17] = 3.0e38f;
    const std::vector<float> y = decoded(c, encode_payload(c, x), x.size());
    CHECK(std::isfinite(y[17]));
    CHECK(y[17] == doctest::Approx(3.0e38f).epsilon(0.2));
  }
  SUBCASE("a window whose norm exceeds the largest float saturates, and decodes finite") {
    std::vector<float> x(512, std::numeric_limits<float>::max());
    for (std::size_t i = 0; i < x.size(); i += 3)
      x[i] = -x[i];
    std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
    std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
    const cp::encode_result r =
        cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(x), std::span(p), std::span(ws));
    CHECK(r.nonfinite == 0);
    for (float v : decoded(c, p, x.size()))
      CHECK(std::isfinite(v));
  }
  SUBCASE("NaN: propagate poisons its window only; zero_and_count counts it as 0") {
    std::vector<float> x = gaussian(512, 9);
    x[300] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> y = decoded(c, encode_payload(c, x), x.size());
    for (std::size_t i = 0; i < 256; ++i)
      CHECK(std::isfinite(y[i]));
    CHECK(std::isnan(y[256]));
    CHECK(std::isnan(y[511]));
    cp::context zero = ctx;
    zero.on_nonfinite = cp::nonfinite_policy::zero_and_count;
    std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
    std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
    const cp::encode_result r =
        cp::encode(cp::cpu::seq, c, zero, std::span<const float>(x), std::span(p), std::span(ws));
    CHECK(r.nonfinite == 1);
    for (float v : decoded(c, p, x.size()))
      CHECK(std::isfinite(v));
  }
}

TEST_CASE("rotated<C>: bad input is refused and nothing is written") {
  const std::size_t n = 300;
  const std::vector<float> x = gaussian(n, 10);
  const cp::rotated<cp::quantize> c{q4_block, 8};
  const std::vector<std::byte> p = encode_payload(c, x);
  const auto refused = [&](const auto& decoder, std::span<const std::byte> payload, cp::errc code) {
    std::vector<float> y(n, 42.0f);
    try {
      cp::decode(cp::cpu::seq, decoder, payload, std::span(y));
      FAIL("decode accepted the payload");
    } catch (const cp::error& e) {
      CHECK(e.code() == code);
    }
    CHECK(y == std::vector<float>(n, 42.0f));
  };
  refused(q4_block, p, cp::errc::codec_mismatch);                               // not rotated
  refused(cp::rotated<cp::quantize>{q4_block, 7}, p, cp::errc::codec_mismatch); // other window
  refused(c, encode_payload(q4_block, x), cp::errc::codec_mismatch);            // plain payload
  refused(c, std::span(p).first(p.size() - 1), cp::errc::truncated);
  std::vector<std::byte> unknown = p; // a transform this build does not know, sealed again
  unknown[cp::format::field::transform] = std::byte{0x2f};
  cp::format::seal(std::span(unknown), c.body_bytes(n));
  refused(c, unknown, cp::errc::corrupt);
  std::vector<std::byte> flipped = p;
  flipped[cp::format::header_bytes + 20] ^= std::byte{1};
  refused(c, flipped, cp::errc::checksum_mismatch);
  CHECK(cp::rotated<cp::quantize>{q4_block, 2}.can_implement(n).code == cp::errc::invalid_argument);
  CHECK(cp::rotated<cp::quantize>{q4_block, 13}.can_implement(n).code ==
        cp::errc::invalid_argument);
}
