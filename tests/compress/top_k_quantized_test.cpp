// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// top_k with b-bit quantized kept values (the sparse-plus-quantized layout of DeMo and
// SparseLoCo): the body is the index sections, then the quantize body of the kept values; the
// value error is the quantizer's on the kept values alone; error feedback keeps both the dropped
// and the rounded part; stochastic values are unbiased; both host backends write the same bytes.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

std::vector<float> sample(std::size_t n, std::uint32_t stream = 1) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(11, stream);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 8.0f;
  return x;
}

std::uint32_t bits_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

template <class Policy = cp::cpu::seq_t>
std::vector<std::byte> encode_vec(const cp::top_k& c, const std::vector<float>& x,
                                  cp::context ctx = {}, const Policy& policy = cp::cpu::seq) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(policy, c, x.size()));
  cp::encode(policy, c, ctx, std::span<const float>(x), std::span(p), std::span(ws));
  return p;
}

std::vector<float> decode_vec(const cp::top_k& c, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<float> y(n, 42.0f);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

/// The same selection with fp32 values: which elements are kept, and their values in order.
std::vector<float> kept_values(const cp::top_k& c, const std::vector<float>& x,
                               std::vector<bool>* kept = nullptr) {
  cp::top_k exact = c;
  exact.value_quantizer = cp::quantize{.bits = 0};
  const auto y = decode_vec(exact, encode_vec(exact, x), x.size());
  std::vector<float> v;
  if (kept != nullptr)
    kept->assign(x.size(), false);
  // The selection keeps x itself; a kept zero is indistinguishable here, so the inputs of these
  // tests have none.
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (y[i] != 0.0f) {
      v.push_back(x[i]);
      if (kept != nullptr)
        (*kept)[i] = true;
    }
  }
  return v;
}

const cp::quantize two_bit{.bits = 2, .group = 64, .range = cp::quant_range::asymmetric};
const cp::top_k chunked{.count = 2, .row_length = 64, .value_quantizer = two_bit};

} // namespace

TEST_CASE("top_k quantized: the body is the index sections, then the quantizer's body of the "
          "kept values") {
  for (const cp::top_k& c :
       {chunked,
        cp::top_k{.fraction = 0.3f,
        .value_quantizer = {.bits = 4, .granularity = cp::scale_granularity::tensor, .group = 0}},
        cp::top_k{.count = 40, .row_length = 100, .value_quantizer = {.bits = 3, .group = 16}}}) {
    const std::size_t n = 6400;
    const auto x = sample(n);
    const auto p = encode_vec(c, x);
    const std::vector<float> v = kept_values(c, x);
    const std::uint64_t d = c.row_elements(n), k = c.kept(d), rows = c.rows(n);
    REQUIRE(v.size() == rows * k);
    // The index sections are top_k's with fp32 values.
    cp::top_k exact = c;
    exact.value_quantizer = cp::quantize{.bits = 0};
    const auto pe = encode_vec(exact, x);
    const std::size_t h = cp::format::header_bytes;
    const std::uint64_t ib = rows * cp::top_k::index_bytes(d, k);
    CHECK(std::equal(p.begin() + h, p.begin() + h + ib, pe.begin() + h));
    // The value section is the quantize body of the kept values, byte for byte.
    const auto pq = [&] {
      std::vector<std::byte> b(cp::max_payload_bytes(c.value_quantizer, v.size()));
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c.value_quantizer, v.size()));
      cp::encode(cp::cpu::seq, c.value_quantizer, {}, std::span<const float>(v), std::span(b),
                 std::span(ws));
      return b;
    }();
    REQUIRE(p.size() == h + ib + (pq.size() - h));
    CHECK(std::equal(p.begin() + h + ib, p.end(), pq.begin() + h));
  }
}

TEST_CASE("top_k quantized: chunks of 64 take 1-byte indices; the size follows the formula") {
  // 100 chunks, 2 kept each: 200 one-byte indices, ceil(200 / 64) = 4 records of 8 bytes
  // (asymmetric lo, step) and 200 two-bit codes in 50 bytes.
  CHECK(cp::top_k::index_width(64) == 1);
  CHECK(chunked.body_bytes(6400) == 200 + 4 * 8 + 50);
  CHECK(cp::max_payload_bytes(chunked, 6400) == cp::format::header_bytes + 282);
  // Against fp32 values: 200 * 4 bytes of values instead of 82.
  cp::top_k exact = chunked;
  exact.value_quantizer = cp::quantize{.bits = 0};
  CHECK(exact.body_bytes(6400) == 200 + 800);
}

TEST_CASE("top_k quantized: kept values carry the quantizer's error, dropped ones are zero") {
  const std::size_t n = 64 * 50 + 0; // rows must divide n
  const auto x = sample(n, 2);
  std::vector<bool> kept;
  const std::vector<float> v = kept_values(chunked, x, &kept);
  std::vector<float> vq = v;
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, two_bit, v.size()));
  cp::roundtrip(cp::cpu::seq, two_bit, {}, std::span(vq), std::span(ws));
  const auto y = decode_vec(chunked, encode_vec(chunked, x), n);
  std::size_t j = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (kept[i]) {
      REQUIRE(bits_of(y[i]) == bits_of(vq[j]));
      ++j;
    } else {
      REQUIRE(y[i] == 0.0f);
    }
  }
  CHECK(j == v.size());
  // Two bits of a signed range: the four levels never include zero, so every kept value decodes
  // non-zero and with its sign.
  for (std::size_t i = 0; i < n; ++i)
    if (kept[i])
      REQUIRE(y[i] * x[i] > 0.0f);
}

TEST_CASE("top_k quantized: roundtrip equals decode(encode), decode_accumulate adds weight * "
          "decoded, on both host backends") {
  for (const cp::top_k& c :
       cp::top_k::examples()) { // two of them quantize; the others check nothing changed
    for (std::size_t n : {0u, 1u, 64u, 640u, 64u * 33u}) {
      if (!c.can_implement(n))
        continue;
      const auto x = sample(n, 4);
      const cp::context ctx{.seed = 3, .step = 7, .tensor_id = 2};
      const auto p = encode_vec(c, x, ctx);
      CHECK(encode_vec(c, x, ctx, cp::cpu::par) == p);
      const auto y = decode_vec(c, p, n);
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n) + 1);
      std::vector<float> z = x;
      cp::roundtrip(cp::cpu::seq, c, ctx, std::span(z), std::span(ws).subspan(1));
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(bits_of(z[i]) == bits_of(y[i]));
      std::vector<float> acc(n, 1.5f);
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), -0.5f);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(acc[i] == 1.5f + -0.5f * y[i]);
    }
  }
}

TEST_CASE("top_k quantized: stochastic values are unbiased over steps") {
  // The selection is deterministic, so the kept set is the same at every step; the mean of the
  // decoded kept values over T steps tends to x (variance at most step^2 / 4 per draw).
  const cp::top_k c{.count = 8,
                    .row_length = 64,
                    .value_quantizer = {.bits = 2,
                                        .group = 32,
                                        .range = cp::quant_range::asymmetric,
                                        .round = cp::rounding::stochastic}};
  const std::size_t n = 64 * 8;
  const auto x = sample(n, 5);
  std::vector<bool> kept;
  kept_values(c, x, &kept);
  const int steps = 4000;
  std::vector<double> mean(n, 0.0);
  for (int t = 0; t < steps; ++t) {
    const auto y =
        decode_vec(c, encode_vec(c, x, {.seed = 9, .step = static_cast<std::uint64_t>(t)}), n);
    for (std::size_t i = 0; i < n; ++i)
      mean[i] += y[i] / steps;
  }
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    if (kept[i])
      worst = std::max(worst, std::abs(mean[i] - x[i]));
  // Levels 8/3 apart at most (range [-4, 4], 3 intervals): sd of one draw <= 4/3, of the
  // mean <= 4/3 / sqrt(4000) = 0.021; 0.1 is about 5 sd.
  CHECK(worst < 0.1);
  // Nearest rounding over the same steps is biased for most values: the test can tell.
  cp::top_k nearest = c;
  nearest.value_quantizer.round = cp::rounding::nearest;
  const auto yn = decode_vec(nearest, encode_vec(nearest, x), n);
  double worst_nearest = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    if (kept[i])
      worst_nearest = std::max(worst_nearest, static_cast<double>(std::abs(yn[i] - x[i])));
  CHECK(worst_nearest > 0.3);
}

TEST_CASE("top_k quantized with error feedback: the residual keeps the dropped and the rounded "
          "part, and the errors telescope") {
  const std::size_t n = 64 * 20;
  const cp::pipeline<cp::ef, cp::top_k> pipe{{}, chunked};
  auto st = pipe.make_state(n);
  std::vector<std::byte> out(pipe.max_payload_bytes(n));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, pipe, n));
  std::vector<double> sent(n, 0.0), received(n, 0.0);
  for (std::uint64_t t = 0; t < 30; ++t) {
    const std::vector<float> g = sample(n, static_cast<std::uint32_t>(100 + t));
    cp::encode(cp::cpu::seq, pipe, st, {.step = t}, std::span<const float>(g), std::span(out),
               std::span(ws));
    auto rs = pipe.make_receiver_state(n);
    std::vector<float> y(n);
    cp::decode(cp::cpu::seq, pipe, rs, std::span<const std::byte>(out), std::span(y));
    if (t == 0) { // e_1 = g - C(g): non-zero where a value was rounded, not only where dropped
      std::size_t rounded = 0;
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(st.residual()[i] == g[i] - y[i]);
        rounded += y[i] != 0.0f && st.residual()[i] != 0.0f ? 1u : 0u;
      }
      CHECK(rounded > 0);
    }
    for (std::size_t i = 0; i < n; ++i) {
      sent[i] += g[i];
      received[i] += y[i];
    }
  }
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(received[i] + st.residual()[i] - sent[i]));
  CHECK(worst < 1e-3);
}

TEST_CASE("top_k quantized: edge cases") {
  SUBCASE("all zero and constant chunks decode exactly") {
    const std::vector<float> zeros(128, 0.0f);
    CHECK(decode_vec(chunked, encode_vec(chunked, zeros), 128) == zeros);
    const std::vector<float> constant(128, -2.5f);
    const auto y = decode_vec(chunked, encode_vec(chunked, constant), 128);
    for (std::size_t i = 0; i < 128; ++i) // the lower indices win the tie: 0, 1, 64, 65
      CHECK(y[i] == ((i % 64) < 2 ? -2.5f : 0.0f));
  }
  SUBCASE("values near the float maximum decode finite") {
    std::vector<float> x = sample(64);
    x[3] = std::numeric_limits<float>::max();
    x[9] = -std::numeric_limits<float>::max();
    const auto y = decode_vec(chunked, encode_vec(chunked, x), 64);
    for (float v : y)
      REQUIRE(std::isfinite(v));
    CHECK(y[3] > 3e38f);
    CHECK(y[9] < -3e38f);
  }
  SUBCASE("denormals") {
    std::vector<float> x(64, 0.0f);
    x[5] = std::numeric_limits<float>::denorm_min();
    x[6] = -4 * std::numeric_limits<float>::denorm_min();
    const auto y = decode_vec(chunked, encode_vec(chunked, x), 64);
    for (std::size_t i = 0; i < 64; ++i)
      if (i != 5 && i != 6)
        CHECK(y[i] == 0.0f);
    CHECK(std::isfinite(y[5]));
    CHECK(y[6] < 0.0f);
  }
  SUBCASE("NaN poisons its value group under propagate and counts as 0 otherwise") {
    std::vector<float> x = sample(128);
    x[70] = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::byte> p(cp::max_payload_bytes(chunked, 128));
    std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, chunked, 128));
    auto r = cp::encode(cp::cpu::seq, chunked, {.on_nonfinite = cp::nonfinite_policy::propagate},
                        std::span<const float>(x), std::span(p), std::span(ws));
    CHECK(r.nonfinite == 1);
    auto y = decode_vec(chunked, p, 128);
    CHECK(std::isnan(y[70])); // one group of 64 kept values: all four kept decode NaN
    CHECK(std::count_if(y.begin(), y.end(), [](float v) { return std::isnan(v); }) == 4);
    r = cp::encode(cp::cpu::seq, chunked, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                   std::span<const float>(x), std::span(p), std::span(ws));
    CHECK(r.nonfinite == 1);
    y = decode_vec(chunked, p, 128);
    for (float v : y)
      REQUIRE(std::isfinite(v));
    CHECK(y[70] == 0.0f);
  }
}

TEST_CASE("top_k quantized: refuses another value quantizer, and configurations outside its "
          "domain") {
  const auto x = sample(640);
  const auto p = encode_vec(chunked, x);
  auto code_of = [&](auto&& call) {
    try {
      call();
    } catch (const cp::error& e) {
      return e.code();
    }
    return cp::errc::ok;
  };
  std::vector<float> y(640, 3.0f);
  for (const cp::quantize& q :
       {cp::quantize{.bits = 0}, cp::quantize{.bits = 3, .group = 64, .range = two_bit.range},
        cp::quantize{.bits = 2, .group = 32, .range = two_bit.range},
        cp::quantize{.bits = 2, .group = 64},
        cp::quantize{
            .bits = 2, .group = 64, .range = two_bit.range, .round = cp::rounding::stochastic}}) {
    cp::top_k other = chunked;
    other.value_quantizer = q;
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, other, std::span<const std::byte>(p), std::span(y));
          }) == cp::errc::codec_mismatch);
  }
  for (float v : y)
    REQUIRE(v == 3.0f);

  const auto refused = [](cp::top_k c) { return !c.can_implement(640); };
  cp::top_k c = chunked;
  c.values = cp::dtype::f16;
  CHECK(refused(c));
  c = chunked;
  c.value_quantizer.group = 48; // not a power of two
  CHECK(refused(c));
  c = chunked;
  c.value_quantizer.granularity = cp::scale_granularity::column;
  CHECK(refused(c));
  c = chunked;
  c.value_quantizer.bits = 9;
  CHECK(refused(c));
  c = chunked;
  c.value_quantizer = {.bits = 1, .group = 64}; // symmetric 1-bit has only the zero level
  CHECK(refused(c));
  CHECK_FALSE(refused(chunked));
}
