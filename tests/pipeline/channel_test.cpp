// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/pipeline/channel.hpp"

namespace cp = commpress;

namespace {

using bytes = std::vector<std::byte>;
using ids_t = std::vector<std::uint64_t>;

std::vector<float> tensor(std::size_t n, std::uint64_t step, std::uint64_t stream = 0) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(61, static_cast<std::uint32_t>(stream));
  for (std::size_t i = 0; i < n; ++i)
    x[i] = (cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f) * 3.0f;
  return x;
}

bytes copy(std::span<const std::byte> p) {
  return {p.begin(), p.end()};
}

using act_pipe = cp::pipeline<cp::ef21, cp::top_k>;
using grad_pipe = cp::pipeline<cp::ef, cp::quantize>;
using aq_pipe = cp::pipeline<cp::aq_sgd<cp::store_int8>, cp::quantize>;

const act_pipe act{{}, {.fraction = 0.1f}};
const grad_pipe grad{{}, {.bits = 8, .group = 64}};
const aq_pipe aq{{.samples = 10, .sample_size = 40, .warmup_steps = 3}, {.bits = 4, .group = 40}};
constexpr std::size_t n = 400;
constexpr cp::context fwd{.seed = 7, .tensor_id = 100};
constexpr cp::context bwd{.seed = 7, .tensor_id = 101};

ids_t ids_at(std::uint64_t t) {
  ids_t ids(n / 40);
  for (std::size_t r = 0; r < ids.size(); ++r)
    ids[r] = (3 * r + t) % 10;
  return ids;
}

} // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("channel: activations forward and gradients backward reconstruct in sync") {
    cp::sender_end<act_pipe> act_tx{act, n, fwd};
    cp::receiver_end<act_pipe> act_rx{act, n, fwd};
    cp::sender_end<grad_pipe> grad_tx{grad, n, bwd};
    cp::receiver_end<grad_pipe> grad_rx{grad, n, bwd};
    for (std::uint64_t t = 0; t < 8; ++t) {
      const auto x = tensor(n, t, 0);
      const auto a = act_rx.receive(act_tx.send(x));
      REQUIRE(act_tx.state() == act_rx.state());
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(a[i] == act_tx.state().mirror()[i]);
      const auto g = tensor(n, t, 1);
      const auto p = grad_tx.send(g);
      CHECK(p.size() < 4 * n / 3); // 8-bit codes, not fp32
      const auto gr = grad_rx.receive(p);
      for (std::size_t i = 0; i < n; ++i) // EF: what arrives is g + e_old - e_new
        REQUIRE(std::fabs(gr[i] - g[i]) <= 2.0f * 1.5f / 127.0f);
    }
    CHECK(act_tx.step() == 8);
    CHECK(act_rx.step() == 8);
  }

  TEST_CASE("channel: a skipped, repeated or foreign payload is a stream mismatch and changes "
            "nothing") {
    cp::sender_end<act_pipe> tx{act, n, fwd};
    cp::receiver_end<act_pipe> rx{act, n, fwd};
    rx.receive(tx.send(tensor(n, 0)));
    const bytes repeated = copy(tx.send(tensor(n, 1)));
    rx.receive(repeated);
    const auto before = rx.state();
    auto expect_mismatch = [&](std::span<const std::byte> p) {
      try {
        rx.receive(p);
        FAIL("expected commpress::error");
      } catch (const cp::error& e) {
        CHECK(e.code() == cp::errc::stream_mismatch);
      }
      CHECK(rx.state() == before);
      CHECK(rx.step() == 2);
    };
    expect_mismatch(repeated);
    tx.send(tensor(n, 2)); // lost in transit
    expect_mismatch(copy(tx.send(tensor(n, 3))));
    cp::sender_end<act_pipe> other{act, n, {.seed = 7, .step = 2, .tensor_id = 999}};
    expect_mismatch(copy(other.send(tensor(n, 2))));
  }

  TEST_CASE("channel: disabled ends pass identity payloads and leave state and step alone") {
    cp::sender_end<act_pipe> tx{act, n, fwd};
    cp::receiver_end<act_pipe> rx{act, n, fwd};
    for (std::uint64_t t = 0; t < 3; ++t)
      rx.receive(tx.send(tensor(n, t)));
    const auto tx_before = tx.state();
    const auto rx_before = rx.state();
    tx.enabled = rx.enabled = false;
    const auto x = tensor(n, 50);
    const auto p = tx.send(x);
    CHECK(cp::format::read_header(p.data()).codec == cp::codec_id::identity);
    const auto y = rx.receive(p);
    CHECK(std::vector<float>(y.begin(), y.end()) == x);
    CHECK(tx.state() == tx_before);
    CHECK(rx.state() == rx_before);
    CHECK(tx.step() == 3);
    tx.enabled = rx.enabled = true;
    rx.receive(tx.send(tensor(n, 3)));
    CHECK(tx.state() == rx.state());
  }

  TEST_CASE("channel: restoring saved ends continues with payload bytes identical to an "
            "uninterrupted run") {
    constexpr std::uint64_t total = 8, cut = 5;
    // Runs steps [from, to) on the given ends and returns the payloads sent.
    auto run = [](auto& atx, auto& arx, auto& gtx, auto& grx, auto& qtx, auto& qrx,
                  std::uint64_t from, std::uint64_t to) {
      std::vector<bytes> sent;
      for (std::uint64_t t = from; t < to; ++t) {
        sent.push_back(copy(atx.send(tensor(n, t, 0))));
        arx.receive(sent.back());
        sent.push_back(copy(gtx.send(tensor(n, t, 1))));
        grx.receive(sent.back());
        const ids_t ids = ids_at(t);
        sent.push_back(copy(qtx.send(ids, tensor(n, t % 4, 2))));
        const auto a = qrx.receive(sent.back(), ids);
        REQUIRE(a.size() == n);
        REQUIRE(qtx.state() == qrx.state());
      }
      return sent;
    };
    const cp::context aqc{.seed = 7, .tensor_id = 102};
    cp::sender_end<act_pipe> atx{act, n, fwd};
    cp::receiver_end<act_pipe> arx{act, n, fwd};
    cp::sender_end<grad_pipe> gtx{grad, n, bwd};
    cp::receiver_end<grad_pipe> grx{grad, n, bwd};
    cp::sender_end<aq_pipe> qtx{aq, n, aqc};
    cp::receiver_end<aq_pipe> qrx{aq, n, aqc};
    const auto reference = run(atx, arx, gtx, grx, qtx, qrx, 0, total);

    cp::sender_end<act_pipe> atx1{act, n, fwd};
    cp::receiver_end<act_pipe> arx1{act, n, fwd};
    cp::sender_end<grad_pipe> gtx1{grad, n, bwd};
    cp::receiver_end<grad_pipe> grx1{grad, n, bwd};
    cp::sender_end<aq_pipe> qtx1{aq, n, aqc};
    cp::receiver_end<aq_pipe> qrx1{aq, n, aqc};
    auto sent = run(atx1, arx1, gtx1, grx1, qtx1, qrx1, 0, cut);
    const std::vector<bytes> saved{atx1.save(), arx1.save(), gtx1.save(),
                                   grx1.save(), qtx1.save(), qrx1.save()};

    cp::sender_end<act_pipe> atx2{act, n, fwd};
    cp::receiver_end<act_pipe> arx2{act, n, fwd};
    cp::sender_end<grad_pipe> gtx2{grad, n, bwd};
    cp::receiver_end<grad_pipe> grx2{grad, n, bwd};
    cp::sender_end<aq_pipe> qtx2{aq, n, aqc};
    cp::receiver_end<aq_pipe> qrx2{aq, n, aqc};
    atx2.load(saved[0]);
    arx2.load(saved[1]);
    gtx2.load(saved[2]);
    grx2.load(saved[3]);
    qtx2.load(saved[4]);
    qrx2.load(saved[5]);
    CHECK(atx2.step() == cut);
    const auto rest = run(atx2, arx2, gtx2, grx2, qtx2, qrx2, cut, total);
    sent.insert(sent.end(), rest.begin(), rest.end());
    REQUIRE(sent.size() == reference.size());
    for (std::size_t i = 0; i < sent.size(); ++i)
      REQUIRE(sent[i] == reference[i]);
    CHECK(qrx2.state() == qrx.state());

    // A blob of the other direction, or of another tensor, is refused without a change.
    CHECK_THROWS_AS(arx2.load(saved[0]), cp::error);
    CHECK_THROWS_AS(gtx2.load(saved[0]), cp::error);
    CHECK(arx2.state() == arx.state());
  }

  TEST_CASE("channel: a configuration the pipeline cannot implement is refused at construction") {
    const aq_pipe bad{{.samples = 10, .sample_size = 3}, {}};
    CHECK_THROWS_AS((cp::sender_end<aq_pipe>{bad, n, fwd}), cp::error);
  }
}
