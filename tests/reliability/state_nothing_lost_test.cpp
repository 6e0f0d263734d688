// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../../fuzz/state_table.hpp"

namespace cp = commpress;
namespace rel = cp::reliability;

namespace {

constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();

/// Recomputes a blob's trailing CRC32C after a deliberate edit of its fields.
void reseal_blob(std::vector<std::byte>& blob) {
  const std::uint32_t crc = cp::detail::crc32c(blob.data(), blob.size() - 4);
  for (std::size_t i = 0; i < 4; ++i)
    blob[blob.size() - 4 + i] = static_cast<std::byte>(crc >> (8 * i));
}

cp::errc load_code(const std::function<void()>& load) {
  try {
    load();
  } catch (const cp::error& e) {
    return e.code();
  }
  return cp::errc::ok;
}

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 3) + 0.125f;
  return x;
}

/// Runs two good sender steps, then one with a NaN under the fail policy, which must throw
/// non_finite and leave the state and the payload buffer as they were.
template <class F, class C> void check_sender_keeps_state(const cp::pipeline<F, C>& pipe) {
  constexpr std::size_t n = 64;
  auto state = pipe.make_state(n);
  std::vector<std::byte> out(pipe.max_payload_bytes(n));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, pipe, n));
  for (std::uint64_t step = 0; step < 2; ++step) {
    const auto x = ramp(n, 1.0f + static_cast<float>(step));
    cp::encode(cp::cpu::seq, pipe, state, cp::context{.step = step}, std::span<const float>(x),
               std::span(out), std::span(ws));
  }
  const auto saved = state.save(1);
  const auto out0 = out;
  auto x = ramp(n, 5.0f);
  x[10] = quiet_nan;
  const cp::context ctx{.step = 2, .on_nonfinite = cp::nonfinite_policy::fail};
  CHECK(load_code([&] {
          cp::encode(cp::cpu::seq, pipe, state, ctx, std::span<const float>(x), std::span(out),
                     std::span(ws));
        }) == cp::errc::non_finite);
  CHECK(state.save(1) == saved);
  CHECK(out == out0);
}

} // namespace

TEST_SUITE("reliability") {
  TEST_CASE("state objects: every refused checkpoint blob leaves the state byte-identical") {
    for (std::size_t id = 0; id < rel::state_count; ++id) {
      CAPTURE(id);
      rel::with_state(id, [&](auto& state) {
        const auto good = rel::save_state(state);
        struct damage {
          const char* what;
          std::function<void(std::vector<std::byte>&)> apply;
          cp::errc expected;
        };
        const std::vector<damage> table = {
            {"empty", [](auto& b) { b.clear(); }, cp::errc::truncated},
            {"last byte cut", [](auto& b) { b.pop_back(); }, cp::errc::truncated},
            {"bad magic", [](auto& b) { b[0] = std::byte{'X'}; }, cp::errc::bad_magic},
            {"future envelope", [](auto& b) { b[4] = std::byte{9}; }, cp::errc::bad_version},
            {"flipped payload bit", [](auto& b) { b[b.size() - 5] ^= std::byte{0x20}; },
             cp::errc::checksum_mismatch},
            {"future layout",
             [](auto& b) {
               b[8] = std::byte{0x77};
               reseal_blob(b);
             },
             cp::errc::bad_version},
            {"other tensor id",
             [](auto& b) {
               b[12] ^= std::byte{0x01};
               reseal_blob(b);
             },
             cp::errc::stream_mismatch},
            {"reserved field set",
             [](auto& b) {
               b[20] = std::byte{0x01};
               reseal_blob(b);
             },
             cp::errc::corrupt},
        };
        for (const auto& d : table) {
          CAPTURE(d.what);
          auto blob = good;
          d.apply(blob);
          CHECK(load_code([&] { rel::load_state(state, blob); }) == d.expected);
          CHECK(rel::save_state(state) == good);
        }
        // A blob of every other state object (another kind, storage format, shape or nested
        // state) is refused too.
        for (std::size_t other = 0; other < rel::state_count; ++other) {
          if (other == id)
            continue;
          CAPTURE(other);
          rel::with_state(other, [&](auto& foreign) {
            const auto blob = rel::save_state(foreign);
            CHECK(load_code([&] { rel::load_state(state, blob); }) != cp::errc::ok);
          });
          CHECK(rel::save_state(state) == good);
        }
        // The good blob still loads afterwards and is restored exactly.
        rel::load_state(state, good);
        CHECK(rel::save_state(state) == good);
      });
    }
  }

  TEST_CASE("pipelines: a NaN under the fail policy leaves the sender state and the payload "
            "buffer untouched") {
    check_sender_keeps_state(cp::pipeline<cp::ef, cp::top_k>{.codec = {.count = 5}});
    check_sender_keeps_state(cp::pipeline<cp::dgc, cp::top_k>{.codec = {.count = 5}});
    check_sender_keeps_state(cp::pipeline<cp::ef21, cp::quantize>{
        .codec = {.bits = 3, .granularity = cp::scale_granularity::block, .group = 16}});
    check_sender_keeps_state(cp::pipeline<cp::loco<cp::store_int8>, cp::sign>{});
    check_sender_keeps_state(
        cp::pipeline<cp::loco<cp::store_bf16>, cp::random_k>{.codec = {.count = 9}});
  }

  TEST_CASE("pipelines: a refused payload leaves the EF21 receiver mirror untouched and the next "
            "good one keeps both mirrors bitwise equal") {
    constexpr std::size_t n = 64;
    const cp::pipeline<cp::ef21, cp::top_k> pipe{.codec = {.count = 8}};
    auto sender = pipe.make_state(n);
    auto receiver = pipe.make_receiver_state(n);
    std::vector<std::byte> payload(pipe.max_payload_bytes(n));
    std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, pipe, n));
    std::vector<float> out(n);
    for (std::uint64_t step = 0; step < 4; ++step) {
      CAPTURE(step);
      const auto x = ramp(n, 0.5f + static_cast<float>(step));
      const auto r = cp::encode(cp::cpu::seq, pipe, sender, cp::context{.step = step},
                                std::span<const float>(x), std::span(payload), std::span(ws));
      const std::span<const std::byte> sent = std::span<const std::byte>(payload).first(r.bytes);
      auto damaged = std::vector<std::byte>(sent.begin(), sent.end());
      damaged[damaged.size() / 2] ^= std::byte{0x04};
      const auto saved = receiver.save(1);
      std::fill(out.begin(), out.end(), -9.0f);
      CHECK(load_code([&] {
              cp::decode(cp::cpu::seq, pipe, receiver, std::span<const std::byte>(damaged),
                         std::span(out), std::span(ws));
            }) == cp::errc::checksum_mismatch);
      CHECK(receiver.save(1) == saved);
      for (float v : out)
        CHECK(v == -9.0f);
      cp::decode(cp::cpu::seq, pipe, receiver, sent, std::span(out), std::span(ws));
      CHECK(std::memcmp(sender.mirror().data(), receiver.mirror().data(), 4 * n) == 0);
    }
  }

  TEST_CASE("channel ends: an out-of-order payload is refused and leaves the receiver end "
            "untouched") {
    constexpr std::size_t n = 32;
    const cp::pipeline<cp::ef21, cp::sign> pipe{};
    const cp::context base{.seed = 8, .step = 0, .tensor_id = 6};
    cp::sender_end send(pipe, n, base);
    cp::receiver_end recv(pipe, n, base);
    const auto first = send.send(ramp(n, 1.0f));
    const std::vector<std::byte> p1(first.begin(), first.end());
    const auto second = send.send(ramp(n, 2.0f));
    const std::vector<std::byte> p2(second.begin(), second.end());
    const auto saved = recv.save();
    CHECK(load_code([&] { recv.receive(p2); }) == cp::errc::stream_mismatch);
    CHECK(recv.save() == saved);
    CHECK(recv.step() == 0);
    recv.receive(p1);
    recv.receive(p2);
    CHECK(recv.step() == 2);
    CHECK(recv.state() == send.state()); // the mirrors agree after the in-order replay
  }
}
