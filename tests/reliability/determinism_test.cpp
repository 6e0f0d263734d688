// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "../../fuzz/codec_table.hpp"

namespace cp = commpress;
namespace rel = cp::reliability;

namespace {

constexpr std::size_t n = 1000; // a multiple of every row length and column count in the table

/// A tensor with ties, zeros, negative zeros and a wide magnitude range.
std::vector<float> tensor() {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<int>((i * 7919) % 97) - 48;
    x[i] = static_cast<float>(k) * (i % 5 == 0 ? 1e-3f : 0.37f);
  }
  x[3] = -0.0f;
  x[17] = 1e-40f; // denormal
  return x;
}

template <class C> std::vector<std::byte> encode_once(const C& c, const cp::context& ctx) {
  const std::vector<float> x = tensor();
  std::vector<std::byte> out(cp::max_payload_bytes(c, n));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n));
  cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(x), std::span(out), std::span(ws));
  return out;
}

/// The payload of x under `policy`, written into an output and a workspace that held `fill` in
/// every byte: the bytes encode returned, without the output's untouched rest.
template <class Policy, class C>
std::vector<std::byte> encode_over(const Policy& policy, const C& c, const cp::context& ctx,
                                   const std::vector<float>& x, std::byte fill) {
  std::vector<std::byte> out(cp::max_payload_bytes(c, x.size()), fill);
  std::vector<std::byte> ws(cp::workspace_bytes(policy, c, x.size()), fill);
  const cp::encode_result r =
      cp::encode(policy, c, ctx, std::span<const float>(x), std::span(out), std::span(ws));
  out.resize(r.bytes);
  return out;
}

std::vector<std::byte> body(const std::vector<std::byte>& payload) {
  return {payload.begin() + cp::format::header_bytes, payload.end()};
}

} // namespace

TEST_SUITE("reliability") {
  TEST_CASE("codecs: the same tensor, seed and step give the same payload bytes on every run") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        const cp::context ctx{.seed = 42, .step = 9, .tensor_id = 5};
        const auto first = encode_once(c, ctx);
        for (int run = 0; run < 3; ++run)
          CHECK(encode_once(c, ctx) == first);
      });
    }
  }

  TEST_CASE("codecs: two threads encoding the same tensor concurrently write the same bytes") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        const cp::context ctx{.seed = 7, .step = 3, .tensor_id = 1};
        const auto reference = encode_once(c, ctx);
        std::vector<std::byte> a, b;
        std::thread ta([&] { a = encode_once(c, ctx); });
        std::thread tb([&] { b = encode_once(c, ctx); });
        ta.join();
        tb.join();
        CHECK(a == reference);
        CHECK(b == reference);
      });
    }
  }

  TEST_CASE("codecs: what the workspace and the output held before changes no payload byte or "
            "decoded value, under seq and par") {
    // The workspace is scratch (a caller's buffer, or the Python binding's uninitialised
    // temporary): nothing may read it before writing it.
    const cp::cpu::par_t par{.threads = 3, .grain = 64};
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        const cp::context ctx{.seed = 8, .step = 2, .tensor_id = 3};
        const std::vector<float> x0 = tensor();
        const auto reference = encode_over(cp::cpu::seq, c, ctx, x0, std::byte{0});
        CHECK(encode_over(cp::cpu::seq, c, ctx, x0, std::byte{0xa5}) == reference);
        CHECK(encode_over(par, c, ctx, x0, std::byte{0xff}) == reference);
        std::vector<float> decoded(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(reference), std::span(decoded));
        std::vector<float> x = tensor();
        std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n), std::byte{0x5a});
        cp::roundtrip(cp::cpu::seq, c, ctx, std::span(x), std::span(ws));
        CHECK(std::memcmp(x.data(), decoded.data(), 4 * n) == 0);
      });
    }
  }

  TEST_CASE("codecs: top_k's sampled selection (rows of 65536 elements or more) reads no "
            "workspace byte before writing it") {
    // The selection keeps its candidates' keys in the workspace only on rows this long, which
    // the table's 1000 elements do not reach: index lists, bitmaps, 16-bit and quantized values.
    std::vector<float> x(70001);
    const auto key = cp::make_rng_key(3, 1);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * (1.0f + i % 7);
    const cp::context ctx{.seed = 8, .step = 2, .tensor_id = 3};
    for (const cp::top_k& c :
         {cp::top_k{.fraction = 0.01f}, cp::top_k{.fraction = 0.1f},
          cp::top_k{.fraction = 0.01f, .values = cp::dtype::bf16},
          cp::top_k{.fraction = 0.01f, .value_quantizer = {.bits = 2, .group = 64}}}) {
      CAPTURE(c.fraction);
      const auto reference = encode_over(cp::cpu::seq, c, ctx, x, std::byte{0});
      CHECK(encode_over(cp::cpu::seq, c, ctx, x, std::byte{0xa5}) == reference);
      CHECK(encode_over(cp::cpu::seq, c, ctx, x, std::byte{0xff}) == reference);
    }
  }

  TEST_CASE("codecs: another step changes the body only for stochastic codecs") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool stochastic) {
        const auto a = encode_once(c, cp::context{.seed = 42, .step = 1, .tensor_id = 5});
        const auto b = encode_once(c, cp::context{.seed = 42, .step = 2, .tensor_id = 5});
        CHECK(a != b); // the header records the step
        CHECK((body(a) != body(b)) == stochastic);
      });
    }
  }

  TEST_CASE("codecs: another seed changes the body only for stochastic codecs") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool stochastic) {
        const auto a = encode_once(c, cp::context{.seed = 1, .step = 4, .tensor_id = 5});
        const auto b = encode_once(c, cp::context{.seed = 2, .step = 4, .tensor_id = 5});
        CHECK((body(a) != body(b)) == stochastic);
      });
    }
  }

  TEST_CASE("codecs: roundtrip in two threads concurrently equals decode(encode(x)) bitwise") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        const cp::context ctx{.seed = 11, .step = 6, .tensor_id = 2};
        const auto payload = encode_once(c, ctx);
        std::vector<float> decoded(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(payload), std::span(decoded));
        auto run = [&](std::vector<float>& x) {
          x = tensor();
          std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n));
          cp::roundtrip(cp::cpu::seq, c, ctx, std::span(x), std::span(ws));
        };
        std::vector<float> a, b;
        std::thread ta([&] { run(a); });
        std::thread tb([&] { run(b); });
        ta.join();
        tb.join();
        CHECK(std::memcmp(a.data(), decoded.data(), 4 * n) == 0);
        CHECK(std::memcmp(b.data(), decoded.data(), 4 * n) == 0);
      });
    }
  }
}
