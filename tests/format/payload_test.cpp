// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {
std::vector<std::byte> make_payload(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(i) * 0.25f - 3.0f;
  std::vector<std::byte> payload(cp::max_payload_bytes(cp::cast{}, n));
  cp::encode(cp::cpu::seq, cp::cast{}, cp::context{.seed = 9, .step = 4, .tensor_id = 2},
             std::span<const float>(x), std::span(payload));
  return payload;
}

void flip(std::vector<std::byte>& p, std::size_t i) {
  p[i] ^= std::byte{0x01};
}
} // namespace

TEST_SUITE("format") {
  TEST_CASE("payload: the header records codec, dtype, count, context and a valid checksum") {
    const auto p = make_payload(1000);
    const auto h = cp::format::validate_envelope(p);
    CHECK(h.codec == cp::codec_id::cast);
    CHECK(h.element == cp::dtype::f32);
    CHECK(h.count == 1000);
    CHECK(h.body_bytes == 2000);
    CHECK(h.seed == 9);
    CHECK(h.step == 4);
    CHECK(h.tensor_id == 2);
    CHECK(p.size() == 64 + 2000);
    CHECK(static_cast<char>(p[0]) == 'C');
    CHECK(static_cast<int>(p[4]) == 1);
  }

  TEST_CASE("payload: a body longer than one checksum chunk is covered chunk by chunk") {
    auto p = make_payload(70000); // 140000-byte body: three chunks
    CHECK_NOTHROW(cp::format::validate_envelope(p));
    flip(p, 64 + 139999); // last byte of the last, short chunk
    CHECK_THROWS_AS(cp::format::validate_envelope(p), cp::error);
  }

  TEST_CASE("payload: every hostile payload gets a clear error and leaves the output untouched") {
    struct hostile {
      const char* what;
      std::function<void(std::vector<std::byte>&)> damage;
      cp::errc expected;
    };
    const std::vector<hostile> table = {
        {"empty", [](auto& p) { p.clear(); }, cp::errc::truncated},
        {"header cut short", [](auto& p) { p.resize(63); }, cp::errc::truncated},
        {"body cut short", [](auto& p) { p.resize(p.size() - 1); }, cp::errc::truncated},
        {"wrong magic", [](auto& p) { p[0] = std::byte{'X'}; }, cp::errc::bad_magic},
        {"future version", [](auto& p) { p[4] = std::byte{2}; }, cp::errc::bad_version},
        {"unknown transform byte", [](auto& p) { p[7] = std::byte{1}; }, cp::errc::corrupt},
        {"rotation window out of range", [](auto& p) { p[7] = std::byte{0x1d}; },
         cp::errc::corrupt},
        {"rotation on a codec that was not rotated",
         [](auto& p) {
           p[7] = std::byte{0x18};
           cp::format::seal(std::span(p), p.size() - cp::format::header_bytes);
         },
         cp::errc::codec_mismatch},
        {"flipped body bit", [](auto& p) { flip(p, 100); }, cp::errc::checksum_mismatch},
        {"flipped count bit", [](auto& p) { flip(p, 8); }, cp::errc::checksum_mismatch},
        {"flipped crc bit", [](auto& p) { flip(p, 60); }, cp::errc::checksum_mismatch},
        {"absurd body length",
         [](auto& p) {
           for (int i = 16; i < 24; ++i)
             p[static_cast<std::size_t>(i)] = std::byte{0xff};
         },
         cp::errc::truncated},
    };
    for (const auto& h : table) {
      CAPTURE(h.what);
      auto p = make_payload(100);
      h.damage(p);
      std::vector<float> out(100, 7.0f);
      try {
        cp::decode(cp::cpu::seq, cp::cast{}, std::span<const std::byte>(p), std::span(out));
        FAIL("decode accepted a hostile payload");
      } catch (const cp::error& e) {
        CHECK(e.code() == h.expected);
        CHECK(std::string(e.what()).rfind("commpress: ", 0) == 0);
      }
      for (float v : out)
        REQUIRE(v == 7.0f);
    }
  }

  TEST_CASE("payload: a payload decoded with another codec, configuration or size is refused") {
    const auto p = make_payload(100);
    std::vector<float> out(100);
    auto code_of = [&](auto&& fn) {
      try {
        fn();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::identity{}, std::span(p), std::span(out));
          }) == cp::errc::codec_mismatch);
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::cast{.to = cp::dtype::f16}, std::span(p), std::span(out));
          }) == cp::errc::codec_mismatch);
    std::vector<float> wrong(99);
    CHECK(code_of([&] { cp::decode(cp::cpu::seq, cp::cast{}, std::span(p), std::span(wrong)); }) ==
          cp::errc::size_mismatch);
  }
}
