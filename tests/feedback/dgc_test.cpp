// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/collective/layout.hpp"
#include "commpress/optim/data_parallel.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

std::vector<float> gradient(std::size_t n, std::uint64_t step, float amplitude = 2.0f) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(47, 3);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f) * amplitude;
  return x;
}

using bytes = std::vector<std::byte>;

template <class Pipe>
bytes step(const Pipe& pipe, typename Pipe::sender_state& st, const std::vector<float>& g,
           std::uint64_t t, cp::step_result* res = nullptr,
           cp::nonfinite_policy pol = cp::nonfinite_policy::propagate) {
  bytes p(pipe.max_payload_bytes(g.size())), ws(pipe.workspace_bytes(g.size()));
  const auto r = cp::encode(cp::cpu::seq, pipe, st,
                            {.seed = 1, .step = t, .tensor_id = 6, .on_nonfinite = pol},
                            std::span<const float>(g), std::span(p), std::span(ws));
  p.resize(r.bytes);
  if (res)
    *res = r;
  return p;
}

template <class Codec>
std::vector<float> decoded(const Codec& codec, const bytes& p, std::size_t n) {
  std::vector<float> out(n);
  cp::decode(cp::cpu::seq, codec, std::span<const std::byte>(p), std::span(out));
  return out;
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

/// The new momentum u' = m u + g and h = u' + v the step computes, from the state before it,
/// with the same float operations (no clipping).
void expected_step(const cp::dgc_state& st, float m, const std::vector<float>& g,
                   std::vector<float>& un, std::vector<float>& h) {
  const std::size_t n = g.size();
  un.resize(n);
  h.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    un[i] = m == 0.0f ? g[i] : cp::detail::add_rn(cp::detail::mul_rn(m, st.momentum()[i]), g[i]);
    h[i] = cp::detail::add_rn(un[i], st.velocity()[i]);
  }
}

double norm2(const std::vector<float>& x) {
  double s = 0.0;
  for (float v : x)
    s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

} // namespace

static_assert(cp::feedback<cp::dgc>);
static_assert(cp::collective_pipeline<cp::pipeline<cp::dgc, cp::top_k>>);
static_assert(cp::data_parallel_pipeline<cp::pipeline<cp::dgc, cp::top_k>>);
static_assert(cp::data_parallel_pipeline<cp::pipeline<cp::dgc, cp::quantize>>);

TEST_SUITE("feedback") {
  TEST_CASE("dgc: momentum 0 without clipping is ef bit for bit") {
    const std::size_t n = 700;
    auto run = [&](auto codec) {
      using C = decltype(codec);
      const cp::pipeline<cp::dgc, C> dp{{.momentum = 0.0f, .clip_norm = 0.0f}, codec};
      const cp::pipeline<cp::ef, C> ep{{}, codec};
      auto ds = dp.make_state(n);
      auto es = ep.make_state(n);
      for (std::uint64_t t = 0; t < 25; ++t) {
        auto g = gradient(n, t);
        if (t == 7)
          g[5] = std::numeric_limits<float>::quiet_NaN(); // held the same way too
        cp::step_result dr, er;
        REQUIRE(step(dp, ds, g, t, &dr) == step(ep, es, g, t, &er));
        CHECK(dr.held == er.held);
        CHECK(dr.nonfinite == er.nonfinite);
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(same_bits(ds.velocity()[i], es.residual()[i]));
      }
    };
    run(cp::top_k{.fraction = 0.1f});
    run(cp::top_k{.fraction = 0.01f});
    run(cp::quantize{.bits = 4, .group = 128});
    run(cp::quantize{.bits = 2, .round = cp::rounding::stochastic});
    run(cp::cast{.to = cp::dtype::bf16});
  }

  TEST_CASE("dgc: sent values plus v_T telescope to the sum of momentum-corrected updates") {
    // v_{t+1} = u'_t + v_t - deQ(C(h_t)), so sum_t deQ(C(h_t)) + v_T = sum_t u'_t, checked in
    // fp64 within the float rounding of h and of the residual (unit roundoff each).
    auto run = [](auto codec, float m) {
      using C = decltype(codec);
      CAPTURE(m);
      const std::size_t n = 600;
      const cp::pipeline<cp::dgc, C> pipe{{.momentum = m}, codec};
      auto st = pipe.make_state(n);
      constexpr double u = 0x1p-24;
      std::vector<double> sum_c(n, 0.0), sum_u(n, 0.0), tol(n, 0.0);
      std::vector<float> un, h;
      for (std::uint64_t t = 0; t < 50; ++t) {
        const auto g = gradient(n, t);
        expected_step(st, m, g, un, h);
        const auto dec = decoded(codec, step(pipe, st, g, t), n);
        for (std::size_t i = 0; i < n; ++i) {
          sum_c[i] += dec[i];
          sum_u[i] += un[i];
          tol[i] += u * (std::fabs(h[i]) + std::fabs(st.velocity()[i]));
        }
      }
      double sent = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::fabs(sum_c[i] + st.velocity()[i] - sum_u[i]) <= tol[i] + 1e-300);
        sent += std::fabs(sum_c[i]);
      }
      CHECK(sent > 0.0);
    };
    for (float m : {0.0f, 0.5f, 0.9f}) {
      run(cp::top_k{.fraction = 0.05f}, m);
      run(cp::quantize{.bits = 3, .group = 64}, m);
      run(cp::top_k{.fraction = 0.05f, .values = cp::dtype::bf16}, m);
    }
  }

  TEST_CASE("dgc: masking zeroes u and v exactly where top-k sent and nowhere else") {
    const std::size_t n = 1000;
    const float m = 0.9f;
    const cp::pipeline<cp::dgc, cp::top_k> pipe{{.momentum = m}, {.fraction = 0.02f}};
    auto st = pipe.make_state(n);
    std::vector<float> un, h;
    for (std::uint64_t t = 0; t < 40; ++t) {
      const auto g = gradient(n, t);
      expected_step(st, m, g, un, h);
      const auto dec = decoded(pipe.codec, step(pipe, st, g, t), n);
      std::size_t sent = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (dec[i] != 0.0f) {
          ++sent;
          REQUIRE(dec[i] == h[i]); // fp32 top-k sends v itself
          REQUIRE(st.momentum()[i] == 0.0f);
          REQUIRE(st.velocity()[i] == 0.0f);
        } else {
          REQUIRE(same_bits(st.momentum()[i], un[i])); // the corrected momentum, unmasked
          REQUIRE(same_bits(st.velocity()[i], h[i]));  // the accumulation, kept
        }
      }
      REQUIRE(sent == 20);
    }
    // After 40 steps unsent coordinates carry momentum: masking did not clear everything.
    std::size_t nonzero = 0;
    for (float x : st.momentum())
      nonzero += x != 0.0f ? 1u : 0u;
    CHECK(nonzero > n / 2);
  }

  TEST_CASE("dgc: for any codec v keeps h - deQ(C(h)) and u is zeroed where deQ(C(h)) != 0") {
    const std::size_t n = 512;
    const float m = 0.8f;
    auto run = [&](auto codec) {
      using C = decltype(codec);
      const cp::pipeline<cp::dgc, C> pipe{{.momentum = m}, codec};
      auto st = pipe.make_state(n);
      std::vector<float> un, h;
      std::size_t zeros = 0, nonzeros = 0;
      for (std::uint64_t t = 0; t < 20; ++t) {
        const auto g = gradient(n, t);
        expected_step(st, m, g, un, h);
        const auto dec = decoded(codec, step(pipe, st, g, t), n);
        for (std::size_t i = 0; i < n; ++i) {
          REQUIRE(same_bits(st.velocity()[i],
                            cp::detail::add_rn(h[i], cp::detail::mul_rn(-1.0f, dec[i]))));
          if (dec[i] != 0.0f) {
            ++nonzeros;
            REQUIRE(st.momentum()[i] == 0.0f);
          } else {
            ++zeros;
            REQUIRE(same_bits(st.momentum()[i], un[i]));
          }
        }
      }
      CHECK(zeros > 0);
      CHECK(nonzeros > 0);
    };
    run(cp::quantize{.bits = 2, .group = 32}); // many elements decode to 0
    run(cp::top_k{.fraction = 0.1f, .values = cp::dtype::bf16});
  }

  TEST_CASE("dgc: local clipping bounds the norm and leaves small gradients alone") {
    const std::size_t n = 300;
    cp::pipeline<cp::dgc, cp::identity> pipe{};
    pipe.feedback = {.momentum = 0.0f, .clip_norm = 1.5f};
    SUBCASE("a large gradient is scaled to the threshold, its direction kept") {
      auto st = pipe.make_state(n);
      const auto g = gradient(n, 0, 8.0f);
      REQUIRE(norm2(g) > 10.0);
      const auto dec = decoded(cp::identity{}, step(pipe, st, g, 0), n);
      CHECK(norm2(dec) <= 1.5 * (1.0 + 1e-6));
      CHECK(norm2(dec) >= 1.5 * (1.0 - 1e-6));
      const double k = dec[0] / static_cast<double>(g[0]);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(std::fabs(dec[i] - k * g[i]) <= 1e-6 * std::fabs(g[i]));
    }
    SUBCASE("a gradient under the threshold passes unchanged") {
      auto st = pipe.make_state(n);
      auto g = gradient(n, 1, 8.0f);
      for (float& x : g)
        x *= 1e-3f;
      REQUIRE(norm2(g) < 1.5);
      CHECK(decoded(cp::identity{}, step(pipe, st, g, 1), n) == g);
    }
    SUBCASE("a NaN does not poison the other elements' scale") {
      auto st = pipe.make_state(n);
      auto g = gradient(n, 2, 8.0f);
      g[7] = std::numeric_limits<float>::quiet_NaN();
      cp::step_result r;
      const auto dec = decoded(cp::identity{}, step(pipe, st, g, 2, &r), n);
      CHECK(r.nonfinite == 1);
      CHECK(r.held == 1);
      CHECK(std::isnan(dec[7]));
      std::vector<float> finite;
      for (std::size_t i = 0; i < n; ++i)
        if (i != 7)
          finite.push_back(dec[i]);
      CHECK(norm2(finite) <= 1.5 * (1.0 + 1e-6));
      CHECK(norm2(finite) >= 1.5 * (1.0 - 1e-6));
      for (float x : st.velocity())
        REQUIRE(std::isfinite(x));
    }
  }

  TEST_CASE("dgc: the warm-up schedule is the paper's 25%, 6.25%, 1.5625%, 0.39%, then final") {
    const cp::dgc_warmup w{};
    CHECK(w.density(0) == 0.25f);
    CHECK(w.density(1) == 0.0625f);
    CHECK(w.density(2) == 0.015625f);
    CHECK(w.density(3) == 0.00390625f);
    CHECK(w.density(4) == 0.001f);
    CHECK(w.density(5) == 0.001f);
    CHECK(w.density(std::uint64_t{1} << 40) == 0.001f);
    CHECK(w.epochs() == 4);

    const cp::dgc_warmup half{.initial = 0.5f, .final_density = 0.1f, .factor = 0.5f};
    CHECK(half.density(0) == 0.5f);
    CHECK(half.density(1) == 0.25f);
    CHECK(half.density(2) == 0.125f);
    CHECK(half.density(3) == 0.1f);
    CHECK(half.epochs() == 3);
    const cp::dgc_warmup none{.initial = 0.01f, .final_density = 0.01f};
    CHECK(none.density(0) == 0.01f);
    CHECK(none.epochs() == 0);

    // The trainer sets top-k's share from it: 25% of 1000 elements, then 6.25%, ...
    for (std::uint64_t e = 0; e < 6; ++e) {
      const cp::pipeline<cp::dgc, cp::top_k> pipe{{}, {.fraction = w.density(e)}};
      auto st = pipe.make_state(1000);
      const auto dec = decoded(pipe.codec, step(pipe, st, gradient(1000, e), e), 1000);
      std::size_t sent = 0;
      for (float x : dec)
        sent += x != 0.0f ? 1u : 0u;
      const std::size_t expect[] = {250, 63, 16, 4, 1, 1}; // round(density * 1000)
      CAPTURE(e);
      CHECK(sent == expect[e]);
    }

    CHECK_THROWS_AS((void)cp::dgc_warmup{.initial = 0.0f}.density(0), cp::error);
    CHECK_THROWS_AS((void)cp::dgc_warmup{.final_density = 0.5f}.density(0), cp::error);
    CHECK_THROWS_AS((void)cp::dgc_warmup{.factor = 1.0f}.density(0), cp::error);
    CHECK(!cp::dgc_warmup{.factor = 0.0f}.can_implement());
  }

  TEST_CASE("dgc: save and load round-trip; a wrong blob is refused and leaves the state") {
    const std::size_t n = 257;
    const cp::pipeline<cp::dgc, cp::top_k> pipe{{.momentum = 0.9f}, {.fraction = 0.05f}};
    auto st = pipe.make_state(n);
    for (std::uint64_t t = 0; t < 5; ++t)
      step(pipe, st, gradient(n, t), t);
    const auto blob = st.save(6);

    auto fresh = pipe.make_state(n);
    fresh.load(blob, 6);
    CHECK(fresh == st);
    // Training continues identically from the loaded state.
    for (std::uint64_t t = 5; t < 10; ++t)
      REQUIRE(step(pipe, fresh, gradient(n, t), t) == step(pipe, st, gradient(n, t), t));
    CHECK(fresh == st);

    auto target = pipe.make_state(n);
    step(pipe, target, gradient(n, 99), 99);
    const auto before = target;
    auto refused = [&](const bytes& b, std::uint32_t id, cp::errc code) {
      try {
        target.load(b, id);
        FAIL("expected commpress::error");
      } catch (const cp::error& e) {
        CHECK(e.code() == code);
      }
      CHECK(target == before);
    };
    refused(blob, 7, cp::errc::stream_mismatch);                         // another tensor
    refused(pipe.make_state(n + 1).save(6), 6, cp::errc::size_mismatch); // another size
    refused(cp::ef_state(n).save(6), 6, cp::errc::codec_mismatch);       // another kind
    bytes corrupt = blob;
    corrupt[40] ^= std::byte{1};
    refused(corrupt, 6, cp::errc::checksum_mismatch);
    refused(bytes(blob.begin(), blob.end() - 8), 6, cp::errc::truncated);
  }

  TEST_CASE("dgc: NaN and Inf inputs never enter u or v and are counted as held") {
    const std::size_t n = 64;
    const cp::pipeline<cp::dgc, cp::quantize> pipe{{.momentum = 0.9f}, {.bits = 4, .group = 16}};
    auto st = pipe.make_state(n);
    step(pipe, st, gradient(n, 0), 0);
    step(pipe, st, gradient(n, 1), 1);
    const auto before = st;
    auto g = gradient(n, 2);
    g[3] = std::numeric_limits<float>::quiet_NaN();
    g[40] = std::numeric_limits<float>::infinity();

    SUBCASE("propagate: the poisoned quantization groups keep u and v") {
      cp::step_result r;
      step(pipe, st, g, 2, &r);
      CHECK(r.nonfinite == 2);
      CHECK(r.held == 32);
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(st.momentum()[i]));
        REQUIRE(std::isfinite(st.velocity()[i]));
        if (i / 16 == 0 || i / 16 == 2) {
          REQUIRE(same_bits(st.momentum()[i], before.momentum()[i]));
          REQUIRE(same_bits(st.velocity()[i], before.velocity()[i]));
        }
      }
      CHECK(st != before);
    }
    SUBCASE("zero_and_count: the elements count as 0 and the state stays finite") {
      cp::step_result r;
      step(pipe, st, g, 2, &r, cp::nonfinite_policy::zero_and_count);
      CHECK(r.nonfinite == 2);
      CHECK(r.held == 0);
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(st.momentum()[i]));
        REQUIRE(std::isfinite(st.velocity()[i]));
      }
    }
    SUBCASE("fail: the call throws and the state is unchanged") {
      try {
        step(pipe, st, g, 2, nullptr, cp::nonfinite_policy::fail);
        FAIL("expected commpress::error");
      } catch (const cp::error& e) {
        CHECK(e.code() == cp::errc::non_finite);
      }
      CHECK(st == before);
    }
    SUBCASE("top-k: a NaN or Inf element is held, the rest of the step applies") {
      const cp::pipeline<cp::dgc, cp::top_k> tp{{.momentum = 0.9f}, {.fraction = 0.1f}};
      auto ts = tp.make_state(n);
      step(tp, ts, gradient(n, 0), 0);
      const auto tb = ts;
      cp::step_result r;
      step(tp, ts, g, 2, &r);
      CHECK(r.nonfinite == 2);
      CHECK(r.held == 2);
      CHECK(same_bits(ts.velocity()[3], tb.velocity()[3]));
      CHECK(same_bits(ts.momentum()[40], tb.momentum()[40]));
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(ts.momentum()[i]));
        REQUIRE(std::isfinite(ts.velocity()[i]));
      }
    }
  }

  TEST_CASE("dgc: empty and one-element tensors") {
    auto run = [](auto codec) {
      using C = decltype(codec);
      const cp::pipeline<cp::dgc, C> pipe{{.momentum = 0.9f, .clip_norm = 1.0f}, codec};
      auto empty = pipe.make_state(0);
      const auto p0 = step(pipe, empty, {}, 0);
      CHECK(empty.size() == 0);
      CHECK(decoded(codec, p0, 0).empty());

      auto one = pipe.make_state(1);
      std::vector<float> un, h;
      for (std::uint64_t t = 0; t < 4; ++t) {
        const std::vector<float> g{0.25f};
        expected_step(one, 0.9f, g, un, h);
        const auto dec = decoded(codec, step(pipe, one, g, t), 1);
        REQUIRE(same_bits(one.velocity()[0],
                          cp::detail::add_rn(h[0], cp::detail::mul_rn(-1.0f, dec[0]))));
        REQUIRE(one.momentum()[0] == (dec[0] != 0.0f ? 0.0f : un[0]));
      }
    };
    run(cp::top_k{.fraction = 0.01f}); // keeps at least one: the element is always sent
    run(cp::quantize{.bits = 4, .group = 16});
  }

  TEST_CASE("dgc: bad configurations and a state of another size are refused") {
    CHECK(!cp::dgc{.momentum = 1.0f}.can_implement(10));
    CHECK(!cp::dgc{.momentum = -0.1f}.can_implement(10));
    CHECK(!cp::dgc{.clip_norm = -1.0f}.can_implement(10));
    CHECK(!cp::dgc{.clip_norm = std::numeric_limits<float>::infinity()}.can_implement(10));
    CHECK(cp::dgc{}.can_implement(10));
    const cp::pipeline<cp::dgc, cp::top_k> pipe{{.momentum = 1.0f}, {}};
    auto st = pipe.make_state(10);
    CHECK_THROWS_AS(step(pipe, st, gradient(10, 0), 0), cp::error);
    CHECK(st == pipe.make_state(10));
    const cp::pipeline<cp::dgc, cp::top_k> ok{};
    CHECK_THROWS_AS(step(ok, st, gradient(11, 0), 0), cp::error);
  }

  TEST_CASE("dgc: the receiver keeps nothing and decode equals the codec's decode") {
    const std::size_t n = 200;
    const cp::pipeline<cp::dgc, cp::top_k> pipe{{.momentum = 0.9f}, {.fraction = 0.05f}};
    auto st = pipe.make_state(n);
    auto rs = pipe.make_receiver_state(n);
    const auto p = step(pipe, st, gradient(n, 0), 0);
    std::vector<float> out(n), acc(n, 1.0f);
    cp::decode(cp::cpu::seq, pipe, rs, std::span<const std::byte>(p), std::span(out));
    CHECK(out == decoded(pipe.codec, p, n));
    cp::decode_accumulate(cp::cpu::seq, pipe, std::span<const std::byte>(p), std::span(acc), 2.0f);
    for (std::size_t i = 0; i < n; ++i)
      REQUIRE(acc[i] == 1.0f + 2.0f * out[i]);
  }

  TEST_CASE("dgc: least squares with top-k 1% and plain SGD on the decoded update converges") {
    // f(x) = ||A x - b||^2 / (2 r) with a well-conditioned random A (r rows, d columns) and a
    // consistent b = A x*, so the minimum is 0. DGC sends 1% of the coordinates per step and
    // the trainer steps x -= lr * deQ(payload).
    const std::size_t d = 200, r = 400;
    std::vector<float> a(r * d), xs(d), b(r, 0.0f);
    const auto key = cp::make_rng_key(5, 5);
    for (std::size_t i = 0; i < r * d; ++i)
      a[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * 2.0f;
    for (std::size_t j = 0; j < d; ++j)
      xs[j] = cp::uniform_from_bits(cp::random_u32(key, 1, j)) - 0.5f;
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = 0; j < d; ++j)
        b[i] += a[i * d + j] * xs[j];
    auto loss_grad = [&](const std::vector<float>& x, std::vector<float>* g) {
      std::vector<double> res(r, 0.0);
      double loss = 0.0;
      for (std::size_t i = 0; i < r; ++i) {
        for (std::size_t j = 0; j < d; ++j)
          res[i] += static_cast<double>(a[i * d + j]) * x[j];
        res[i] -= b[i];
        loss += res[i] * res[i] / (2.0 * r);
      }
      if (g) {
        g->assign(d, 0.0f);
        for (std::size_t j = 0; j < d; ++j) {
          double s = 0.0;
          for (std::size_t i = 0; i < r; ++i)
            s += a[i * d + j] * res[i];
          (*g)[j] = static_cast<float>(s / r);
        }
      }
      return loss;
    };
    auto train = [&](float momentum, int steps) {
      const cp::pipeline<cp::dgc, cp::top_k> pipe{{.momentum = momentum}, {.fraction = 0.01f}};
      auto st = pipe.make_state(d);
      std::vector<float> x(d, 0.0f), g;
      const float lr = 0.005f;
      for (int t = 0; t < steps; ++t) {
        loss_grad(x, &g);
        const auto dec = decoded(pipe.codec, step(pipe, st, g, static_cast<std::uint64_t>(t)), d);
        for (std::size_t j = 0; j < d; ++j)
          x[j] -= lr * dec[j];
      }
      return loss_grad(x, nullptr);
    };
    const double start = loss_grad(std::vector<float>(d, 0.0f), nullptr);
    const double with_momentum = train(0.9f, 2000);
    const double without = train(0.0f, 2000);
    CAPTURE(start);
    CAPTURE(with_momentum);
    CAPTURE(without);
    CHECK(with_momentum < 1e-4 * start);
    // The corrected momentum is what makes it fast: m = 0 (plain EF) at the same lr lags.
    CHECK(with_momentum < 0.01 * without);
  }
}
