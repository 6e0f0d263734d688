// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

using bytes = std::vector<std::byte>;
using ids_t = std::vector<std::uint64_t>;

/// The activation of dataset sample `id` (constant over visits), `len` values.
std::vector<float> activation(std::uint64_t id, std::size_t len, std::uint64_t visit = 0) {
  std::vector<float> a(len);
  const auto key = cp::make_rng_key(41, 5);
  for (std::size_t j = 0; j < len; ++j)
    a[j] = (cp::uniform_from_bits(cp::random_u32(key, 1000 * visit + id, j)) - 0.3f) * 6.0f;
  return a;
}

std::vector<float> batch(const ids_t& ids, std::size_t len, std::uint64_t visit = 0) {
  std::vector<float> x;
  for (auto id : ids) {
    const auto a = activation(id, len, visit);
    x.insert(x.end(), a.begin(), a.end());
  }
  return x;
}

/// One boundary crossing: sender encodes, receiver decodes into `out`; returns the payload.
template <class Pipe>
bytes cross(const Pipe& pipe, typename Pipe::sender_state& tx, typename Pipe::receiver_state& rx,
            const ids_t& ids, const std::vector<float>& x, std::vector<float>& out,
            std::uint64_t step, cp::step_result* res = nullptr) {
  const std::size_t n = x.size();
  bytes p(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
  const cp::context ctx{.seed = 3, .step = step, .tensor_id = 4};
  const auto r = cp::encode(cp::cpu::seq, pipe, tx, ctx, std::span<const std::uint64_t>(ids),
                            std::span<const float>(x), std::span(p), std::span(ws));
  p.resize(r.bytes);
  if (res)
    *res = r;
  out.assign(n, 0.0f);
  cp::decode(cp::cpu::seq, pipe, rx, std::span<const std::uint64_t>(ids),
             std::span<const std::byte>(p), std::span(out), std::span(ws));
  return p;
}

template <class S> std::vector<float> cache_of(const cp::aq_sgd_state<S>& st, std::uint64_t id) {
  std::vector<float> m(st.sample_size());
  st.sample(id, m);
  return m;
}

template <class S> std::vector<float> stored(const std::vector<float>& a) {
  cp::stored_rows<S> r(1, a.size());
  r.store_row(0, a.data());
  std::vector<float> back(a.size());
  r.load_row(0, back.data());
  return back;
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE_TEMPLATE("aq_sgd: warm-up sends a uncompressed and fills m = storage(a) on both sides",
                     S, cp::store_f32, cp::store_bf16, cp::store_int8, cp::store_int4) {
    const std::size_t len = 300, samples = 8;
    const cp::pipeline<cp::aq_sgd<S>, cp::quantize> pipe{
        {.samples = samples, .sample_size = len, .warmup_steps = 2}, {.bits = 2}};
    auto tx = pipe.make_state();
    auto rx = pipe.make_receiver_state();
    std::vector<float> out;
    const ids_t first{5, 1, 7}, second{0, 2};
    for (std::uint64_t t = 0; t < 2; ++t) {
      const auto& ids = t == 0 ? first : second;
      const auto x = batch(ids, len);
      const bytes p = cross(pipe, tx, rx, ids, x, out, t);
      CHECK(cp::format::read_header(p.data()).codec == cp::codec_id::identity);
      CHECK(out == x);
      REQUIRE(tx == rx);
      for (auto id : ids)
        CHECK(cache_of(tx, id) == stored<S>(activation(id, len)));
    }
    CHECK(cache_of(tx, 3) == std::vector<float>(len, 0.0f)); // never visited
    // After warm-up the codec's payload is used and the caches stay equal.
    const auto x = batch(first, len);
    const bytes p = cross(pipe, tx, rx, first, x, out, 2);
    CHECK(cp::format::read_header(p.data()).codec == cp::codec_id::quantize);
    CHECK(tx == rx);
  }

  TEST_CASE("aq_sgd: caches converge geometrically to a constant activation with b-bit "
            "quantization") {
    const std::size_t len = 256, samples = 6;
    for (std::uint32_t b : {2u, 3u, 4u}) {
      CAPTURE(b);
      const cp::pipeline<cp::aq_sgd<cp::store_f32>, cp::quantize> pipe{
          {.samples = samples, .sample_size = len}, {.bits = b, .group = 64}};
      auto tx = pipe.make_state();
      auto rx = pipe.make_receiver_state();
      const double ratio = 1.0 / (2.0 * ((1 << (b - 1)) - 1)); // half a step of absmax / L
      std::vector<double> prev(samples);
      for (std::uint64_t id = 0; id < samples; ++id) {
        double m = 0.0;
        for (float v : activation(id, len))
          m = std::max(m, std::fabs(static_cast<double>(v)));
        prev[id] = m; // m_0 = 0
      }
      std::vector<float> out;
      for (std::uint64_t visit = 0; visit < 12; ++visit) {
        // Shuffled batches of 2: each sample is visited once per epoch.
        const ids_t order = visit % 2 == 0 ? ids_t{4, 1, 0, 5, 3, 2} : ids_t{2, 3, 5, 0, 1, 4};
        for (std::size_t k = 0; k < samples; k += 2) {
          const ids_t ids{order[k], order[k + 1]};
          cross(pipe, tx, rx, ids, batch(ids, len), out, visit * 3 + k / 2);
          REQUIRE(tx == rx);
          for (std::size_t r = 0; r < 2; ++r) {
            const auto a = activation(ids[r], len);
            const auto m = cache_of(rx, ids[r]);
            double err = 0.0, mag = 0.0;
            for (std::size_t j = 0; j < len; ++j) {
              err = std::max(err, std::fabs(static_cast<double>(a[j]) - m[j]));
              mag = std::max(mag, std::fabs(static_cast<double>(a[j])));
              REQUIRE(out[r * len + j] == m[j]); // the receiver outputs its cache
            }
            REQUIRE(err <= prev[ids[r]] * ratio + 4 * 0x1p-24 * (mag + prev[ids[r]]));
            prev[ids[r]] = err;
          }
        }
      }
      for (double e : prev)
        CHECK(e < 1e-3 * 3.0); // |a| < 4.2, after 12 halvings or better
    }
  }

  TEST_CASE("aq_sgd: with top-k the receiver reconstructs a constant activation exactly after "
            "ceil(D/k) visits") {
    const std::size_t len = 50, k = 5, visits = (len + k - 1) / k, samples = 4;
    const cp::pipeline<cp::aq_sgd<cp::store_f32>, cp::top_k> pipe{
        {.samples = samples, .sample_size = len},
        {.count = k, .row_length = static_cast<std::uint32_t>(len)}};
    auto tx = pipe.make_state();
    auto rx = pipe.make_receiver_state();
    const ids_t ids{2, 0, 3, 1};
    const auto x = batch(ids, len);
    std::vector<float> out;
    for (std::size_t v = 0; v < visits; ++v) {
      cross(pipe, tx, rx, ids, x, out, v);
      REQUIRE(tx == rx);
      if (v + 1 < visits)
        REQUIRE(out != x);
    }
    CHECK(out == x);
  }

  TEST_CASE_TEMPLATE("aq_sgd: low-bit caches stay bitwise equal on both sides", S, cp::store_bf16,
                     cp::store_int8, cp::store_int4) {
    const std::size_t len = 200, samples = 5;
    const cp::pipeline<cp::aq_sgd<S>, cp::quantize> pipe{
        {.samples = samples, .sample_size = len, .warmup_steps = 1}, {.bits = 4, .group = 50}};
    auto tx = pipe.make_state();
    auto rx = pipe.make_receiver_state();
    std::vector<float> out;
    for (std::uint64_t t = 0; t < 10; ++t) {
      const ids_t ids{t % samples, (t + 2) % samples};
      cross(pipe, tx, rx, ids, batch(ids, len, t), out, t); // the activation drifts each visit
      REQUIRE(tx == rx);
    }
  }

  TEST_CASE("aq_sgd: NaN activations never enter either cache") {
    const std::size_t len = 64, samples = 3;
    const cp::pipeline<cp::aq_sgd<cp::store_f32>, cp::quantize> pipe{
        {.samples = samples, .sample_size = len, .warmup_steps = 1}, {.bits = 4, .group = 16}};
    auto tx = pipe.make_state();
    auto rx = pipe.make_receiver_state();
    std::vector<float> out;
    const ids_t ids{0, 2};
    auto x = batch(ids, len);
    x[3] = std::numeric_limits<float>::quiet_NaN(); // during warm-up
    cp::step_result r;
    cross(pipe, tx, rx, ids, x, out, 0, &r);
    CHECK(r.nonfinite == 1);
    CHECK(r.held == 1);
    CHECK(std::isnan(out[3])); // the receiver still sees the bad value
    CHECK(cache_of(rx, 0)[3] == 0.0f);
    x = batch(ids, len);
    x[len + 9] = std::numeric_limits<float>::infinity(); // after warm-up
    const auto before = cache_of(rx, 2);
    cross(pipe, tx, rx, ids, x, out, 1, &r);
    CHECK(r.held == 16); // the poisoned 16-element group decodes to NaN
    CHECK(tx == rx);
    const auto m = cache_of(rx, 2);
    for (std::size_t j = 0; j < 16; ++j)
      CHECK(m[j] == before[j]);
    for (std::uint64_t id = 0; id < samples; ++id)
      for (float v : cache_of(rx, id))
        REQUIRE(std::isfinite(v));
  }

  TEST_CASE("aq_sgd: sample ids out of range or a wrong count are refused") {
    const cp::pipeline<cp::aq_sgd<cp::store_f32>, cp::quantize> pipe{
        {.samples = 3, .sample_size = 4}, {.bits = 4}};
    auto tx = pipe.make_state();
    const std::vector<float> x(8, 1.0f);
    bytes p(pipe.max_payload_bytes(8)), ws(pipe.workspace_bytes(8));
    const ids_t bad{0, 3}, short_ids{0};
    CHECK_THROWS_AS(cp::encode(cp::cpu::seq, pipe, tx, {}, std::span<const std::uint64_t>(bad),
                               std::span<const float>(x), std::span(p), std::span(ws)),
                    cp::error);
    CHECK_THROWS_AS(cp::encode(cp::cpu::seq, pipe, tx, {},
                               std::span<const std::uint64_t>(short_ids), std::span<const float>(x),
                               std::span(p), std::span(ws)),
                    cp::error);
    CHECK(tx == pipe.make_state());
  }
}
