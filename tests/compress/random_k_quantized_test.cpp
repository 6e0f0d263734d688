// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// random_k with b-bit quantized kept values: the body is the quantize body of the k kept values
// in stratum order (the random_k value section replaced); the value error is the quantizer's on
// the kept values alone; stochastic rounding draws its uniforms apart from the selection's, so
// with `unbiased` the estimate stays unbiased; error feedback keeps both the dropped and the
// rounded part; both host backends write the same bytes; refusals and damaged payloads.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

// Uniform in [-4, 4), never exactly zero for these streams' first elements (checked below where
// it matters): a decoded zero then means "not kept".
std::vector<float> sample(std::size_t n, std::uint32_t stream = 1) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(17, stream);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 8.0f;
    if (x[i] == 0.0f)
      x[i] = 0.5f;
  }
  return x;
}

std::uint32_t bits_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

template <class Policy = cp::cpu::seq_t>
std::vector<std::byte> encode_vec(const cp::random_k& c, const std::vector<float>& x,
                                  cp::context ctx = {}, const Policy& policy = cp::cpu::seq) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(policy, c, x.size()));
  cp::encode(policy, c, ctx, std::span<const float>(x), std::span(p), std::span(ws));
  return p;
}

template <class Policy = cp::cpu::seq_t>
std::vector<float> decode_vec(const cp::random_k& c, const std::vector<std::byte>& p, std::size_t n,
                              const Policy& policy = cp::cpu::seq) {
  std::vector<float> y(n, 42.0f);
  cp::decode(policy, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

cp::random_k unquantized(cp::random_k c) {
  c.value_quantizer = cp::quantize{.bits = 0};
  c.unbiased = false;
  return c;
}

/// The kept values in stratum order, read off the fp32 payload of the same selection (its body
/// is exactly that array), and the kept indices.
std::vector<float> kept_values(const cp::random_k& c, const std::vector<float>& x, cp::context ctx,
                               std::vector<std::size_t>* index = nullptr) {
  const cp::random_k exact = unquantized(c);
  const auto p = encode_vec(exact, x, ctx);
  const std::uint64_t k = c.kept(x.size());
  std::vector<float> v(k);
  if (k != 0)
    std::memcpy(v.data(), p.data() + cp::format::header_bytes, 4 * k);
  if (index != nullptr) {
    index->clear();
    const auto y = decode_vec(exact, p, x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      if (y[i] != 0.0f)
        index->push_back(i);
  }
  return v;
}

/// Size of the stratum that holds element i (strata are [floor(j n / k), floor((j + 1) n / k))).
std::uint64_t stratum_size_of(std::uint64_t i, std::uint64_t n, std::uint64_t k) {
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint64_t a = cp::random_k::stratum_start(j, n, k);
    const std::uint64_t b = cp::random_k::stratum_start(j + 1, n, k);
    if (i >= a && i < b)
      return b - a;
  }
  return 0;
}

/// The quantize body of v as the documented layout gives it: the quantize codec's body for
/// nearest rounding; for stochastic rounding the same group pipeline, its uniforms taken from
/// stream index 2^63 + j.
std::vector<std::byte> quantize_body(const cp::quantize& q, const std::vector<float>& v,
                                     cp::context ctx) {
  std::vector<std::byte> b(q.body_bytes(v.size()));
  if (v.empty())
    return b;
  cp::cpu::detail::quantize_groups::encode(q, ctx, std::span<const float>(v),
                                           reinterpret_cast<unsigned char*>(b.data()), nullptr, 0,
                                           q.n_groups(v.size()), std::uint64_t{1} << 63);
  if (q.round == cp::rounding::nearest) { // and the quantize codec's own payload agrees
    std::vector<std::byte> p(cp::max_payload_bytes(q, v.size()));
    cp::encode(cp::cpu::seq, q, ctx, std::span<const float>(v), std::span(p));
    REQUIRE(std::equal(b.begin(), b.end(), p.begin() + cp::format::header_bytes));
  }
  return b;
}

const cp::quantize two_bit{.bits = 2, .group = 64, .range = cp::quant_range::asymmetric};
const cp::random_k rk2{.fraction = 1.0f / 32, .value_quantizer = two_bit};
const cp::quantize four_bit_sr{.bits = 4,
                               .granularity = cp::scale_granularity::tensor,
                               .group = 0,
                               .round = cp::rounding::stochastic};

template <class F> cp::errc code_of(F&& call) {
  try {
    call();
  } catch (const cp::error& e) {
    return e.code();
  }
  return cp::errc::ok;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("random_k quantized: the body is the quantize body of the kept values in stratum "
            "order, and the header differs only in bytes 2 and 3") {
    const cp::context ctx{.seed = 4, .step = 9, .tensor_id = 3};
    for (const cp::random_k& c :
         {rk2, cp::random_k{.count = 300, .unbiased = true, .value_quantizer = four_bit_sr},
          cp::random_k{.fraction = 0.1f, .value_quantizer = {.bits = 3, .group = 16}},
          cp::random_k{.fraction = 0.5f,
          .value_quantizer = {.bits = 8,
                             .granularity = cp::scale_granularity::tensor,
                             .group = 0,
                             .range = cp::quant_range::asymmetric}}}) {
      for (std::size_t n : {1u, 7u, 6400u, 10007u}) {
        CAPTURE(n);
        const auto x = sample(n);
        const auto p = encode_vec(c, x, ctx);
        const std::vector<float> v = kept_values(c, x, ctx);
        const auto qb = quantize_body(c.value_quantizer, v, ctx);
        const std::size_t h = cp::format::header_bytes;
        REQUIRE(p.size() == h + qb.size());
        CHECK(std::equal(p.begin() + h, p.end(), qb.begin()));
        // The header: the fp32 configuration's (same unbiased flag) but for params bytes 2 and
        // 3, the quantizer as docs/wire-format.md packs it (and the checksum and body length
        // that follow from the body).
        cp::random_k plain = unquantized(c);
        plain.unbiased = c.unbiased;
        const auto pe = encode_vec(plain, x, ctx);
        const cp::payload_header hq = cp::format::read_header(p.data());
        const cp::payload_header he = cp::format::read_header(pe.data());
        CHECK(hq.params[0] == he.params[0]);
        CHECK(hq.params[1] == he.params[1]);
        CHECK(std::equal(hq.params.begin() + 4, hq.params.end(), he.params.begin() + 4));
        const cp::quantize& q = c.value_quantizer;
        const unsigned group_code = q.granularity == cp::scale_granularity::tensor
                                        ? 0u
                                        : static_cast<unsigned>(std::countr_zero(q.group)) + 1u;
        CHECK(hq.params[2] == q.bits);
        CHECK(hq.params[3] == (static_cast<unsigned>(q.range) |
                               static_cast<unsigned>(q.round) << 1 | group_code << 2));
        CHECK(he.params[2] == 0);
        CHECK(he.params[3] == 0);
      }
    }
    // Existing configurations keep bytes 2 and 3 at zero.
    for (const cp::random_k& c : cp::random_k::examples())
      if (!c.quantized())
        CHECK((c.params()[2] == 0 && c.params()[3] == 0));
    // The byte 3 layout: range bit 0, rounding bit 1, log2(group) + 1 from bit 2.
    CHECK(rk2.params()[3] == (1u | 0u << 1 | 7u << 2));
    const cp::random_k sr{.count = 3, .value_quantizer = four_bit_sr};
    CHECK(sr.params()[3] == (0u | 1u << 1 | 0u << 2));
  }

  TEST_CASE("random_k quantized: the size follows the formula") {
    // n = 6400, 1/32 kept: k = 200; 2-bit asymmetric in groups of 64: ceil(200 / 64) = 4 records
    // of 8 bytes (lo, step) and 200 two-bit codes in 50 bytes.
    CHECK(rk2.kept(6400) == 200);
    CHECK(rk2.body_bytes(6400) == 4 * 8 + 50);
    CHECK(cp::max_payload_bytes(rk2, 6400) == cp::format::header_bytes + 82);
    CHECK(unquantized(rk2).body_bytes(6400) == 800);
    // One scale (symmetric: 4 bytes), 4-bit codes: k = 300 -> 4 + 150.
    const cp::random_k sr{.count = 300, .value_quantizer = four_bit_sr};
    CHECK(sr.body_bytes(1000) == 4 + 150);
    CHECK(sr.body_bytes(100) == 4 + 50); // k = min(count, n)
    CHECK(sr.body_bytes(0) == 0);
  }

  TEST_CASE("random_k quantized: kept values carry exactly the quantizer's error, scaled by the "
            "stratum size under unbiased; dropped ones are zero") {
    const cp::context ctx{.seed = 1, .step = 5, .tensor_id = 7};
    for (bool unbiased : {false, true}) {
      cp::random_k c = rk2;
      c.unbiased = unbiased;
      for (std::size_t n : {6400u, 6401u}) {
        const auto x = sample(n, 2);
        std::vector<std::size_t> index;
        const std::vector<float> v = kept_values(c, x, ctx, &index);
        REQUIRE(index.size() == v.size());
        std::vector<float> vq = v;
        std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, two_bit, v.size()));
        cp::roundtrip(cp::cpu::seq, two_bit, ctx, std::span(vq), std::span(ws));
        const auto y = decode_vec(c, encode_vec(c, x, ctx), n);
        std::size_t j = 0;
        for (std::size_t i = 0; i < n; ++i) {
          if (j < index.size() && index[j] == i) {
            const float want =
                unbiased ? vq[j] * static_cast<float>(stratum_size_of(i, n, c.kept(n))) : vq[j];
            REQUIRE(bits_of(y[i]) == bits_of(want));
            ++j;
          } else {
            REQUIRE(y[i] == 0.0f);
          }
        }
        CHECK(j == v.size());
      }
    }
  }

  TEST_CASE("random_k quantized: roundtrip equals decode(encode), decode_accumulate adds weight "
            "* decoded, and cpu::par writes and reads seq's bytes") {
    constexpr auto examples = cp::random_k::examples();
    std::vector<cp::random_k> configs(examples.begin(), examples.end());
    configs.push_back(rk2);
    configs.push_back(cp::random_k{.count = 700, .unbiased = true, .value_quantizer = four_bit_sr});
    configs.push_back(cp::random_k{
        .fraction = 0.3f,
        .value_quantizer = {.bits = 5, .group = 8, .round = cp::rounding::stochastic}});
    const cp::cpu::par_t par{.threads = 3, .grain = 256};
    for (const cp::random_k& c : configs) {
      for (std::size_t n : {0u, 1u, 64u, 1000u, 20011u}) {
        CAPTURE(n);
        const auto x = sample(n, 4);
        const cp::context ctx{.seed = 3, .step = 7, .tensor_id = 2};
        const auto p = encode_vec(c, x, ctx);
        CHECK(encode_vec(c, x, ctx, par) == p);
        CHECK(encode_vec(c, x, ctx, cp::cpu::par) == p);
        const auto y = decode_vec(c, p, n);
        const auto yp = decode_vec(c, p, n, par);
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(bits_of(yp[i]) == bits_of(y[i]));
        for (const bool use_par : {false, true}) {
          std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n) + 1);
          std::vector<float> z = x;
          if (use_par) {
            cp::roundtrip(par, c, ctx, std::span(z), std::span(ws).subspan(1));
          } else {
            cp::roundtrip(cp::cpu::seq, c, ctx, std::span(z), std::span(ws).subspan(1));
          }
          for (std::size_t i = 0; i < n; ++i)
            REQUIRE(bits_of(z[i]) == bits_of(y[i]));
          std::vector<float> acc(n, 1.5f);
          if (use_par) {
            cp::decode_accumulate(par, c, std::span<const std::byte>(p), std::span(acc), -0.5f);
          } else {
            cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc),
                                  -0.5f);
          }
          for (std::size_t i = 0; i < n; ++i)
            REQUIRE(acc[i] == 1.5f + -0.5f * y[i]);
        }
      }
    }
  }

  TEST_CASE("random_k quantized: fp16 and bf16 inputs encode as their fp32 values do") {
    const cp::context ctx{.seed = 2, .step = 1};
    const auto xf = sample(3000, 6);
    std::vector<cp::half> xh(xf.size());
    std::vector<cp::bfloat16> xb(xf.size());
    std::vector<float> wh(xf.size()), wb(xf.size());
    for (std::size_t i = 0; i < xf.size(); ++i) {
      xh[i] = cp::from_float<cp::half>(xf[i]);
      xb[i] = cp::from_float<cp::bfloat16>(xf[i]);
      wh[i] = cp::to_float(xh[i]);
      wb[i] = cp::to_float(xb[i]);
    }
    const cp::random_k c{.fraction = 0.1f, .unbiased = true, .value_quantizer = four_bit_sr};
    const auto run = [&](const auto& x) {
      std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()));
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
      cp::encode(cp::cpu::seq, c, ctx, std::span(x), std::span(p), std::span(ws));
      return p;
    };
    // The bodies agree; the headers differ in the element dtype (and so the checksum).
    const auto body_of = [](const std::vector<std::byte>& p) {
      return std::vector<std::byte>(p.begin() + cp::format::header_bytes, p.end());
    };
    CHECK(body_of(run(std::span<const cp::half>(xh))) == body_of(encode_vec(c, wh, ctx)));
    CHECK(body_of(run(std::span<const cp::bfloat16>(xb))) == body_of(encode_vec(c, wb, ctx)));
    std::vector<cp::half> out(xf.size());
    cp::decode(cp::cpu::seq, c, std::span<const std::byte>(encode_vec(c, wh, ctx)), std::span(out));
    const auto y = decode_vec(c, encode_vec(c, wh, ctx), xf.size());
    for (std::size_t i = 0; i < xf.size(); ++i)
      REQUIRE(cp::to_float(out[i]) == cp::to_float(cp::from_float<cp::half>(y[i])));
  }

  TEST_CASE("random_k quantized: stochastic values with unbiased scaling estimate x without "
            "bias; nearest rounding does not") {
    // Strata of 2 (half kept). Strata 0 and 1 hold -4, -4 and 4, 4, so the one scale of the
    // kept values is the same at every step: 2-bit asymmetric levels -4, -4/3, 4/3, 4. Each
    // step's decoded element is 2 Q(x_i) with probability 1/2, else 0; with stochastic rounding
    // independent of the selection, E = x_i.
    const std::size_t n = 256;
    std::vector<float> x = sample(n, 5);
    x[0] = x[1] = -4.0f;
    x[2] = x[3] = 4.0f;
    cp::random_k c{.fraction = 0.5f,
                   .unbiased = true,
                   .value_quantizer = {.bits = 2,
                                       .granularity = cp::scale_granularity::tensor,
                                       .group = 0,
                                       .range = cp::quant_range::asymmetric,
                                       .round = cp::rounding::stochastic}};
    const auto worst_bias = [&](const cp::random_k& codec) {
      const int steps = 4000;
      std::vector<double> mean(n, 0.0);
      for (int t = 0; t < steps; ++t) {
        const auto y = decode_vec(
            codec, encode_vec(codec, x, {.seed = 9, .step = static_cast<std::uint64_t>(t)}), n);
        for (std::size_t i = 0; i < n; ++i)
          mean[i] += y[i] / steps;
      }
      double worst = 0.0;
      for (std::size_t i = 4; i < n; ++i)
        worst = std::max(worst, std::abs(mean[i] - x[i]));
      return worst;
    };
    // One draw: variance 2 E[Q^2] - x^2 <= x^2 + 2 (8/3)^2 / 4 <= 19.6, so the mean of 4000 has
    // sd <= 0.07; 0.35 is 5 sd.
    CHECK(worst_bias(c) < 0.35);
    // Nearest rounding's mean tends to Q(x) != x: up to 4/3 away, about 2/3 on average.
    c.value_quantizer.round = cp::rounding::nearest;
    CHECK(worst_bias(c) > 0.7);
  }

  TEST_CASE("random_k quantized with error feedback: the residual keeps the dropped and the "
            "rounded part, and the errors telescope") {
    const std::size_t n = 64 * 20;
    for (const cp::random_k& codec :
         {rk2, cp::random_k{.fraction = 0.25f, .value_quantizer = four_bit_sr}}) {
      // (Not with `unbiased`: kept entries of the residual become (1 - n/k) h_i, which grows.)
      const cp::pipeline<cp::ef, cp::random_k> pipe{{}, codec};
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
  }

  TEST_CASE("random_k quantized: edge cases") {
    // Every element kept (one-element strata): which element is kept does not depend on the
    // step, so each input value is seen on the wire.
    const cp::random_k all{.fraction = 1.0f, .value_quantizer = two_bit};
    const cp::random_k all_unbiased{.fraction = 1.0f, .unbiased = true, .value_quantizer = two_bit};
    const cp::random_k half_unbiased{
        .fraction = 0.5f, .unbiased = true, .value_quantizer = two_bit};
    // Symmetric levels include zero: a kept zero stays zero (the asymmetric 2-bit levels of a
    // signed group do not).
    const cp::random_k all_sym{.fraction = 1.0f, .value_quantizer = {.bits = 4, .group = 64}};
    const float big = std::numeric_limits<float>::max();
    SUBCASE("all zero and constant tensors decode exactly") {
      const std::vector<float> zeros(128, 0.0f);
      CHECK(decode_vec(all, encode_vec(all, zeros), 128) == zeros);
      CHECK(decode_vec(half_unbiased, encode_vec(half_unbiased, zeros), 128) == zeros);
      const std::vector<float> constant(128, -2.5f);
      CHECK(decode_vec(all, encode_vec(all, constant), 128) == constant);
      const auto y = decode_vec(half_unbiased, encode_vec(half_unbiased, constant), 128);
      for (std::size_t i = 0; i < 128; i += 2) // one of each pair, times 2
        CHECK(y[i] + y[i + 1] == -5.0f);
    }
    SUBCASE("values near the float maximum decode finite, the unbiased scaling saturating") {
      std::vector<float> x = sample(64);
      x[3] = big;
      x[9] = -big;
      for (const cp::random_k& c : {all, all_unbiased}) {
        const auto y = decode_vec(c, encode_vec(c, x), 64);
        for (float v : y)
          REQUIRE(std::isfinite(v));
        CHECK(y[3] > 3e38f);
        CHECK(y[9] < -3e38f);
      }
      const std::vector<float> huge(64, big);
      const auto y = decode_vec(half_unbiased, encode_vec(half_unbiased, huge), 64);
      for (std::size_t i = 0; i < 64; i += 2) {
        REQUIRE(std::isfinite(y[i]));
        REQUIRE(std::max(y[i], y[i + 1]) == big); // 2 * FLT_MAX saturates
      }
    }
    SUBCASE("denormals") {
      std::vector<float> x(64, 0.0f);
      x[5] = std::numeric_limits<float>::denorm_min();
      x[6] = -4 * std::numeric_limits<float>::denorm_min();
      const auto y = decode_vec(all_sym, encode_vec(all_sym, x), 64);
      for (std::size_t i = 0; i < 64; ++i)
        if (i != 5 && i != 6)
          CHECK(y[i] == 0.0f);
      CHECK(std::isfinite(y[5]));
      CHECK(y[5] >= 0.0f);
      CHECK(y[6] <= 0.0f);                                    // never of the wrong sign
      for (float v : decode_vec(all, encode_vec(all, x), 64)) // asymmetric: within [lo, hi]
        REQUIRE((std::isfinite(v) && std::abs(v) <= 4 * std::numeric_limits<float>::denorm_min()));
    }
    SUBCASE("NaN poisons its value group under propagate, counts as 0 otherwise, and is counted "
            "kept or not") {
      std::vector<float> x = sample(128);
      x[70] = std::numeric_limits<float>::quiet_NaN();
      std::vector<std::byte> p(cp::max_payload_bytes(all_sym, 128));
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, all_sym, 128));
      auto r = cp::encode(cp::cpu::seq, all_sym, {.on_nonfinite = cp::nonfinite_policy::propagate},
                          std::span<const float>(x), std::span(p), std::span(ws));
      CHECK(r.nonfinite == 1);
      auto y = decode_vec(all_sym, p, 128);
      // Groups of 64 kept values: the second group (elements 64..127) decodes NaN.
      for (std::size_t i = 0; i < 128; ++i)
        REQUIRE(std::isnan(y[i]) == (i >= 64));
      r = cp::encode(cp::cpu::seq, all_sym, {.on_nonfinite = cp::nonfinite_policy::zero_and_count},
                     std::span<const float>(x), std::span(p), std::span(ws));
      CHECK(r.nonfinite == 1);
      y = decode_vec(all_sym, p, 128);
      for (float v : y)
        REQUIRE(std::isfinite(v));
      CHECK(y[70] == 0.0f);
      // One kept of 128: the count still covers the whole input.
      const cp::random_k one{.count = 1, .value_quantizer = two_bit};
      std::vector<std::byte> p1(cp::max_payload_bytes(one, 128));
      std::vector<std::byte> ws1(cp::workspace_bytes(cp::cpu::par, one, 128));
      x[71] = std::numeric_limits<float>::infinity();
      for (std::uint64_t step = 0; step < 4; ++step) {
        r = cp::encode(cp::cpu::par_t{.threads = 2, .grain = 64}, one,
                       {.step = step, .on_nonfinite = cp::nonfinite_policy::zero_and_count},
                       std::span<const float>(x), std::span(p1), std::span(ws1));
        CHECK(r.nonfinite == 2);
      }
    }
  }

  TEST_CASE("random_k quantized: refuses another value quantizer, configurations outside its "
            "domain, and damaged payloads") {
    const auto x = sample(640);
    const cp::random_k c{.fraction = 0.25f, .value_quantizer = two_bit};
    const auto p = encode_vec(c, x);
    std::vector<float> y(640, 3.0f);
    const auto decoding = [&](const cp::random_k& other, std::span<const std::byte> payload) {
      return code_of([&] { cp::decode(cp::cpu::seq, other, payload, std::span(y)); });
    };
    for (const cp::quantize& q :
         {cp::quantize{.bits = 0}, cp::quantize{.bits = 3, .group = 64, .range = two_bit.range},
          cp::quantize{.bits = 2, .group = 32, .range = two_bit.range},
          cp::quantize{.bits = 2, .group = 64},
          cp::quantize{
              .bits = 2, .group = 64, .range = two_bit.range, .round = cp::rounding::stochastic}}) {
      cp::random_k other = c;
      other.value_quantizer = q;
      CHECK(decoding(other, std::span<const std::byte>(p)) == cp::errc::codec_mismatch);
    }
    cp::random_k scaled = c;
    scaled.unbiased = true;
    CHECK(decoding(scaled, std::span<const std::byte>(p)) == cp::errc::codec_mismatch);
    // An fp32 payload of the same selection is not a quantized one, nor the other way round.
    CHECK(decoding(c, std::span<const std::byte>(encode_vec(unquantized(c), x))) ==
          cp::errc::codec_mismatch);
    CHECK(decoding(unquantized(c), std::span<const std::byte>(p)) == cp::errc::codec_mismatch);
    // Truncated and corrupted payloads.
    CHECK(decoding(c, std::span<const std::byte>(p).first(p.size() - 1)) == cp::errc::truncated);
    std::vector<std::byte> bad = p;
    bad[cp::format::header_bytes + 20] ^= std::byte{0x10};
    CHECK(decoding(c, std::span<const std::byte>(bad)) == cp::errc::checksum_mismatch);
    for (float v : y)
      REQUIRE(v == 3.0f);

    struct refusal {
      cp::random_k c;
      const char* says;
    };
    std::vector<refusal> refused;
    cp::random_k r = c;
    r.values = cp::dtype::f16;
    refused.push_back({r, "must stay f32"});
    r.values = cp::dtype::bf16;
    refused.push_back({r, "must stay f32"});
    r = c;
    r.value_quantizer.group = 48; // not a power of two
    refused.push_back({r, "power of two"});
    r.value_quantizer.group = 1u << 25;
    refused.push_back({r, "power of two"});
    r = c;
    r.value_quantizer.granularity = cp::scale_granularity::column;
    refused.push_back({r, "tensor granularity or block groups"});
    r = c;
    r.value_quantizer.bits = 9;
    refused.push_back({r, "bits must be in 1..8"});
    r = c;
    r.value_quantizer = {.bits = 1, .group = 64}; // symmetric 1-bit has only the zero level
    refused.push_back({r, "symmetric range needs at least 2 bits"});
    r = c;
    r.value_quantizer = {.bits = 2, .granularity = cp::scale_granularity::tensor, .group = 8};
    refused.push_back({r, "group must be 0"});
    r = c;
    r.fraction = 1.5f;
    refused.push_back({r, "fraction must lie in [0, 1]"});
    std::vector<std::byte> out(8192);
    std::vector<std::byte> ws(8192);
    for (const refusal& f : refused) {
      const cp::status s = f.c.can_implement(640);
      CHECK(s.code == cp::errc::invalid_argument);
      CHECK(std::string(s.message).find(f.says) != std::string::npos);
      CHECK(code_of([&] {
              cp::encode(cp::cpu::seq, f.c, {}, std::span<const float>(x), std::span(out),
                         std::span(ws));
            }) == cp::errc::invalid_argument);
      CHECK(code_of([&] {
              cp::encode(cp::cpu::par, f.c, {}, std::span<const float>(x), std::span(out),
                         std::span(ws));
            }) == cp::errc::invalid_argument);
    }
    CHECK(c.can_implement(640));
    // Too small a workspace is refused before anything is written.
    CHECK(code_of([&] {
            cp::encode(cp::cpu::seq, c, {}, std::span<const float>(x), std::span(out),
                       std::span(ws).first(8));
          }) == cp::errc::buffer_too_small);
  }
}
