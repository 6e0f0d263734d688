// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

using bytes = std::vector<std::byte>;

std::vector<float> values(std::size_t n, std::uint64_t step) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(51, 6);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = cp::uniform_from_bits(cp::random_u32(key, step, i)) - 0.5f;
  return x;
}

/// Drives a state away from zero with a few steps of its pipeline.
template <class Pipe> typename Pipe::sender_state busy_state(const Pipe& pipe, std::size_t n) {
  auto st = pipe.make_state(n);
  bytes p(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
  for (std::uint64_t t = 0; t < 3; ++t) {
    const auto x = values(n, t);
    if constexpr (Pipe::feedback_type::id == cp::feedback_id::aq_sgd) {
      std::vector<std::uint64_t> ids(n / pipe.feedback.sample_size);
      for (std::size_t r = 0; r < ids.size(); ++r)
        ids[r] = (r + t) % pipe.feedback.samples;
      cp::encode(cp::cpu::seq, pipe, st, {.step = t}, std::span<const std::uint64_t>(ids),
                 std::span<const float>(x), std::span(p), std::span(ws));
    } else {
      cp::encode(cp::cpu::seq, pipe, st, {.step = t}, std::span<const float>(x), std::span(p),
                 std::span(ws));
    }
  }
  return st;
}

template <class State>
void expect_refused(State& st, const bytes& blob, std::uint32_t id, cp::errc code) {
  const State before = st;
  try {
    st.load(blob, id);
    FAIL("expected commpress::error");
  } catch (const cp::error& e) {
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).rfind("commpress: state blob: ", 0) == 0);
  }
  CHECK(st == before);
}

/// Rewrites the blob's CRC after a deliberate edit, so the edit itself is what is detected.
void reseal(bytes& blob) {
  const std::uint32_t crc = cp::detail::crc32c(blob.data(), blob.size() - 4);
  for (int i = 0; i < 4; ++i)
    blob[blob.size() - 4 + i] = static_cast<std::byte>(crc >> (8 * i));
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE("state_blob: every state round-trips into a fresh object") {
    const std::size_t n = 200;
    const cp::quantize q{.bits = 4, .group = 32};
    auto round_trip = [&](const auto& pipe) {
      const auto st = busy_state(pipe, n);
      auto fresh = pipe.make_state(n);
      CHECK(!(fresh == st));
      fresh.load(st.save(77), 77);
      CHECK(fresh == st);
    };
    round_trip(cp::pipeline<cp::ef, cp::quantize>{{}, q});
    round_trip(cp::pipeline<cp::ef21, cp::quantize>{{}, q});
    round_trip(cp::pipeline<cp::loco<cp::store_f32>, cp::quantize>{{.reset_every = 0}, q});
    round_trip(cp::pipeline<cp::loco<cp::store_bf16>, cp::quantize>{{.reset_every = 0}, q});
    round_trip(cp::pipeline<cp::loco<cp::store_int8>, cp::quantize>{{.reset_every = 0}, q});
    round_trip(cp::pipeline<cp::aq_sgd<cp::store_int4>, cp::quantize>{
        {.samples = 7, .sample_size = 50}, q});
  }

  TEST_CASE("state_blob: bad blobs throw a clear error and leave the state unchanged") {
    const std::size_t n = 100;
    const cp::pipeline<cp::ef, cp::quantize> pipe{{}, {.bits = 3}};
    auto st = busy_state(pipe, n);
    const bytes good = busy_state(pipe, n + 0).save(5);
    auto other = st;
    for (float& e : other.residual())
      e += 1.0f; // so a successful load would be visible

    SUBCASE("a flipped payload byte fails the checksum") {
      bytes b = good;
      b[b.size() / 2] ^= std::byte{0x10};
      expect_refused(other, b, 5, cp::errc::checksum_mismatch);
    }
    SUBCASE("a truncated blob") {
      const bytes b(good.begin(), good.end() - 9);
      expect_refused(other, b, 5, cp::errc::truncated);
      expect_refused(other, bytes(good.begin(), good.begin() + 10), 5, cp::errc::truncated);
    }
    SUBCASE("another kind of state") {
      const cp::pipeline<cp::ef21, cp::quantize> p21{{}, {.bits = 3}};
      const bytes b = busy_state(p21, n).save(5);
      expect_refused(other, b, 5, cp::errc::codec_mismatch);
    }
    SUBCASE("another layout version") {
      bytes b = good;
      b[8] = std::byte{2};
      reseal(b);
      expect_refused(other, b, 5, cp::errc::bad_version);
    }
    SUBCASE("another envelope version") {
      bytes b = good;
      b[4] = std::byte{9};
      reseal(b);
      expect_refused(other, b, 5, cp::errc::bad_version);
    }
    SUBCASE("bad magic") {
      bytes b = good;
      b[0] = std::byte{'X'};
      expect_refused(other, b, 5, cp::errc::bad_magic);
    }
    SUBCASE("another tensor id") {
      expect_refused(other, good, 6, cp::errc::stream_mismatch);
    }
    SUBCASE("another tensor size") {
      auto bigger = pipe.make_state(n + 1);
      expect_refused(bigger, good, 5, cp::errc::size_mismatch);
    }
    SUBCASE("another storage format") {
      const cp::pipeline<cp::loco<cp::store_f32>, cp::quantize> pf{{.reset_every = 0}, {}};
      const cp::pipeline<cp::loco<cp::store_int8>, cp::quantize> pi{{.reset_every = 0}, {}};
      auto int8_state = busy_state(pi, n);
      expect_refused(int8_state, busy_state(pf, n).save(5), 5, cp::errc::size_mismatch);
    }
    SUBCASE("the good blob loads") {
      other.load(good, 5);
      CHECK(other == busy_state(pipe, n));
    }
  }

  TEST_CASE("state_blob: writer and reader round-trip sizes, integers, floats and nested blobs") {
    cp::blob_writer inner(cp::state_kind::optimizer_first, 3, 1);
    inner.size(2).put(std::uint32_t{0xdeadbeef});
    const bytes nested = inner.finish();
    cp::blob_writer w(cp::state_kind::optimizer_first, 7, 42);
    const std::vector<float> f{1.5f, -0.0f, 3e-39f};
    w.size(10).size(20).put(std::uint64_t{1} << 60).put(std::span<const float>(f)).put_blob(nested);
    const bytes b = w.finish();
    cp::blob_reader r(b, cp::state_kind::optimizer_first, 7, 42);
    r.expect_sizes({10, 20});
    CHECK(r.get<std::uint64_t>() == std::uint64_t{1} << 60);
    std::vector<float> g(3);
    r.get(std::span<float>(g));
    CHECK(std::bit_cast<std::uint32_t>(g[1]) == 0x80000000u);
    CHECK(g[2] == f[2]);
    const auto in = r.get_blob();
    r.finish();
    cp::blob_reader ri(in, cp::state_kind::optimizer_first, 3, 1);
    CHECK(ri.get<std::uint32_t>() == 0xdeadbeefu);
    CHECK_THROWS_AS(ri.get<std::uint8_t>(), cp::error); // reads past the payload
    CHECK_THROWS_AS(r.expect_sizes({10}), cp::error);
  }
}
