// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

using bytes = std::vector<std::byte>;

std::vector<float> grad(std::size_t n, std::uint64_t step, std::uint64_t rank = 0) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(71, static_cast<std::uint32_t>(rank));
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f) * 2.0f;
  return x;
}

/// Step t's payload from `st`, written into a payload buffer and a workspace that held `fill` in
/// every byte.
template <class Pipe>
bytes send(const Pipe& pipe, typename Pipe::sender_state& st, std::uint64_t t,
           std::uint64_t rank = 0, std::byte fill = std::byte{0}) {
  const std::size_t n = 333;
  const auto g = grad(n, t, rank);
  bytes p(pipe.max_payload_bytes(n), fill), ws(pipe.workspace_bytes(n), fill);
  const auto r = cp::encode(cp::cpu::seq, pipe, st, {.seed = 2, .step = t, .tensor_id = 8},
                            std::span<const float>(g), std::span(p), std::span(ws));
  CHECK(r.bytes == p.size());
  return p;
}

} // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("pipeline: max_payload_bytes and workspace_bytes combine the codec and the policy") {
    const cp::quantize q{.bits = 4, .group = 128};
    const cp::pipeline<cp::none, cp::quantize> plain{{}, q};
    CHECK(plain.max_payload_bytes(1000) == cp::max_payload_bytes(q, 1000));
    CHECK(plain.workspace_bytes(1000) == cp::workspace_bytes(cp::cpu::seq, q, 1000));
    const cp::pipeline<cp::loco<cp::store_int8>, cp::quantize> loco{{}, q};
    CHECK(loco.workspace_bytes(1000) >= 2 * 4000 + cp::workspace_bytes(cp::cpu::seq, q, 1000));
    // AQ-SGD's warm-up sends fp32, so its bound is the identity payload's.
    const cp::pipeline<cp::aq_sgd<>, cp::quantize> aq{
        {.samples = 4, .sample_size = 100, .warmup_steps = 1}, q};
    CHECK(aq.max_payload_bytes(400) == 64 + 4 * 400);
    const cp::pipeline<cp::aq_sgd<>, cp::quantize> aq0{{.samples = 4, .sample_size = 100}, q};
    CHECK(aq0.max_payload_bytes(400) == cp::max_payload_bytes(q, 400));
  }

  TEST_CASE("pipeline: LoCo and EF states restored from blobs continue with identical payloads") {
    const cp::pipeline<cp::loco<cp::store_int8>, cp::quantize> lp{{.beta = 0.8f, .reset_every = 6},
                                                                  {.bits = 4, .group = 64}};
    const cp::pipeline<cp::ef, cp::top_k> ep{{}, {.fraction = 0.1f}};
    auto l_ref = lp.make_state(333);
    auto e_ref = ep.make_state(333);
    std::vector<bytes> ref;
    for (std::uint64_t t = 0; t < 10; ++t) {
      ref.push_back(send(lp, l_ref, t));
      ref.push_back(send(ep, e_ref, t));
    }
    auto l1 = lp.make_state(333);
    auto e1 = ep.make_state(333);
    std::vector<bytes> got;
    for (std::uint64_t t = 0; t < 4; ++t) {
      got.push_back(send(lp, l1, t));
      got.push_back(send(ep, e1, t));
    }
    auto l2 = lp.make_state(333);
    auto e2 = ep.make_state(333);
    l2.load(l1.save(8), 8);
    e2.load(e1.save(8), 8);
    for (std::uint64_t t = 4; t < 10; ++t) {
      got.push_back(send(lp, l2, t));
      got.push_back(send(ep, e2, t));
    }
    CHECK(got == ref);
  }

  TEST_CASE("pipeline: what the workspace held before changes no payload byte of any step") {
    // The workspace is scratch (a caller's buffer, or the Python binding's uninitialised
    // temporary): the feedback policies and the fused steps write it before they read it.
    const auto check = [](const auto& pipe) {
      auto zeroed = pipe.make_state(333);
      auto filled = pipe.make_state(333);
      for (std::uint64_t t = 0; t < 3; ++t)
        CHECK(send(pipe, filled, t, 0, std::byte{0xa5}) == send(pipe, zeroed, t));
    };
    check(cp::pipeline<cp::ef, cp::quantize>{{}, {.bits = 4, .group = 64}});
    check(cp::pipeline<cp::ef, cp::quantize>{{}, {.bits = 3, .group = 100}});
    check(cp::pipeline<cp::ef, cp::top_k>{{}, {.fraction = 0.1f}});
    check(cp::pipeline<cp::ef21, cp::quantize>{{}, {.bits = 4}});
    check(cp::pipeline<cp::loco<cp::store_int8>, cp::quantize>{{.beta = 0.8f},
                                                               {.bits = 4, .group = 64}});
    check(cp::pipeline<cp::loco<cp::store_bf16>, cp::top_k>{{}, {.fraction = 0.1f}});
  }

  TEST_CASE("pipeline: decode_accumulate averages the workers' compressed gradients") {
    const cp::pipeline<cp::ef, cp::cast> pipe{{}, {.to = cp::dtype::bf16}};
    const std::size_t n = 333, workers = 3;
    std::vector<cp::ef_state> st(workers, pipe.make_state(n));
    std::vector<float> avg(n, 0.0f);
    std::vector<double> exact(n, 0.0);
    for (std::size_t r = 0; r < workers; ++r) {
      const bytes p = send(pipe, st[r], 0, r);
      cp::decode_accumulate(cp::cpu::seq, pipe, std::span<const std::byte>(p), std::span(avg),
                            1.0f / workers);
      const auto g = grad(n, 0, r);
      for (std::size_t i = 0; i < n; ++i)
        exact[i] += g[i] / static_cast<double>(workers);
    }
    for (std::size_t i = 0; i < n; ++i) // bf16 keeps 8 significant bits
      REQUIRE(std::fabs(avg[i] - exact[i]) <= 3 * 1.0 / 256 + 1e-6);
  }

  TEST_CASE("pipeline: the receiver refuses a payload of another codec configuration") {
    const cp::pipeline<cp::ef21, cp::quantize> a{{}, {.bits = 4}};
    const cp::pipeline<cp::ef21, cp::quantize> b{{}, {.bits = 3}};
    auto tx = a.make_state(333);
    auto rx = b.make_receiver_state(333);
    const bytes p = send(a, tx, 0);
    std::vector<float> out(333, 5.0f);
    bytes ws(b.workspace_bytes(333));
    try {
      cp::decode(cp::cpu::seq, b, rx, std::span<const std::byte>(p), std::span(out), std::span(ws));
      FAIL("expected commpress::error");
    } catch (const cp::error& e) {
      CHECK(e.code() == cp::errc::codec_mismatch);
    }
    CHECK(rx == b.make_receiver_state(333));
    CHECK(out == std::vector<float>(333, 5.0f));
  }
}
