// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../../fuzz/codec_table.hpp"

namespace cp = commpress;
namespace rel = cp::reliability;

namespace {

constexpr std::size_t n = 1000; // a multiple of every row length and column count in the table
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();

template <class T> std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  if (!v.empty())
    std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> ramp(std::size_t m) {
  std::vector<float> x(m);
  for (std::size_t i = 0; i < m; ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 13) - 6);
  return x;
}

template <class C>
std::vector<std::byte> encode_vec(const C& c, const cp::context& ctx, const std::vector<float>& x) {
  std::vector<std::byte> out(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
  const cp::encode_result r =
      cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(x), std::span(out), std::span(ws));
  out.resize(r.bytes); // the payload's own bytes: a variable-length body (qsgd's Elias) is shorter
  return out;
}

template <class C> std::vector<float> decode_vec(const C& c, const std::vector<std::byte>& p) {
  std::vector<float> out(cp::format::read_header(p.data()).count);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(out));
  return out;
}

/// Decodes `payload` with codec c into an output of m elements (f32 and bf16) and into an
/// accumulator, expecting `expected` from all three and untouched destinations.
template <class C>
void expect_refused(const C& c, std::span<const std::byte> payload, std::size_t m,
                    cp::errc expected) {
  std::vector<float> out(m, -3.5f);
  std::vector<cp::bfloat16> narrow(m, cp::to_bfloat16(9.0f));
  std::vector<float> acc(m, 1.25f);
  const auto out0 = bytes_of(out);
  const auto narrow0 = bytes_of(narrow);
  const auto acc0 = bytes_of(acc);
  auto code_of = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const cp::error& e) {
      return e.code();
    }
    return cp::errc::ok;
  };
  CHECK(code_of([&] { cp::decode(cp::cpu::seq, c, payload, std::span(out)); }) == expected);
  CHECK(code_of([&] { cp::decode(cp::cpu::seq, c, payload, std::span(narrow)); }) == expected);
  CHECK(code_of([&] { cp::decode_accumulate(cp::cpu::seq, c, payload, std::span(acc), 0.5f); }) ==
        expected);
  CHECK(bytes_of(out) == out0);
  CHECK(bytes_of(narrow) == narrow0);
  CHECK(bytes_of(acc) == acc0);
}

} // namespace

TEST_SUITE("reliability") {
  TEST_CASE("codecs: every refused payload leaves the caller's output and accumulator untouched") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        const auto good = encode_vec(c, cp::context{.seed = 3, .step = 1}, ramp(n));
        struct damage {
          const char* what;
          std::function<void(std::vector<std::byte>&)> apply;
          cp::errc expected;
        };
        const std::vector<damage> table = {
            {"empty", [](auto& p) { p.clear(); }, cp::errc::truncated},
            {"header only", [](auto& p) { p.resize(cp::format::header_bytes); },
             cp::errc::truncated},
            {"last byte cut", [](auto& p) { p.pop_back(); }, cp::errc::truncated},
            {"bad magic", [](auto& p) { p[1] = std::byte{'X'}; }, cp::errc::bad_magic},
            {"wrong version", [](auto& p) { p[4] = std::byte{7}; }, cp::errc::bad_version},
            {"flipped body bit", [](auto& p) { p.back() ^= std::byte{0x10}; },
             cp::errc::checksum_mismatch},
            {"flipped params bit", [](auto& p) { p[50] ^= std::byte{0x01}; },
             cp::errc::checksum_mismatch},
        };
        for (const auto& d : table) {
          CAPTURE(d.what);
          if (good.size() == cp::format::header_bytes && std::string(d.what) == "header only")
            continue; // an empty body: the header is the whole payload
          auto p = good;
          d.apply(p);
          expect_refused(c, std::span<const std::byte>(p), n, d.expected);
        }
        // Wrong size: the payload holds n elements, the output another count.
        expect_refused(c, std::span<const std::byte>(good), 2 * n, cp::errc::size_mismatch);
        // Wrong codec: every other configuration refuses this payload.
        for (std::size_t other = 0; other < rel::config_count; ++other) {
          if (other == id)
            continue;
          CAPTURE(other);
          rel::with_config(other, [&](const auto& d, bool) {
            expect_refused(d, std::span<const std::byte>(good), n, cp::errc::codec_mismatch);
          });
        }
      });
    }
  }

  TEST_CASE("codecs: a NaN or Inf under the fail policy leaves the payload buffer and the tensor "
            "untouched") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        for (const float bad : {quiet_nan, inf, -inf}) {
          auto x = ramp(n);
          x[n - 1] = bad;
          const cp::context ctx{.on_nonfinite = cp::nonfinite_policy::fail};
          std::vector<std::byte> out(cp::max_payload_bytes(c, n), std::byte{0x3c});
          std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n), std::byte{0x77});
          const auto out0 = bytes_of(out);
          const auto x0 = bytes_of(x);
          try {
            cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(x), std::span(out),
                       std::span(ws));
            FAIL("encode accepted a non-finite tensor under fail");
          } catch (const cp::error& e) {
            CHECK(e.code() == cp::errc::non_finite);
          }
          try {
            cp::roundtrip(cp::cpu::seq, c, ctx, std::span(x), std::span(ws));
            FAIL("roundtrip accepted a non-finite tensor under fail");
          } catch (const cp::error& e) {
            CHECK(e.code() == cp::errc::non_finite);
          }
          CHECK(bytes_of(out) == out0);
          CHECK(bytes_of(x) == x0);
        }
      });
    }
  }

  TEST_CASE("codecs: hostile tensors under zero_and_count decode without NaN and count every "
            "NaN/Inf") {
    struct hostile {
      const char* what;
      std::vector<float> x;
      bool finite_out; // every decoded element must be finite (not only non-NaN)
    };
    auto fill = [](float v) { return std::vector<float>(n, v); };
    std::vector<float> mixed_max(n), nan_block = ramp(n), denormal(n);
    for (std::size_t i = 0; i < n; ++i) {
      mixed_max[i] = i % 2 == 0 ? FLT_MAX : -FLT_MAX;
      denormal[i] = (i % 3 == 0 ? -1.0f : 1.0f) * 1e-45f * static_cast<float>(i % 7 + 1);
    }
    for (std::size_t i = 0; i < 16; ++i)
      nan_block[i] = i % 2 == 0 ? quiet_nan : -inf;
    const std::vector<hostile> table = {
        {"all zero", fill(0.0f), true},
        {"all negative zero", fill(-0.0f), true},
        {"constant", fill(2.75f), true},
        {"all NaN", fill(quiet_nan), true},
        {"all +Inf", fill(inf), true},
        {"a NaN/Inf block", nan_block, true},
        {"denormals", denormal, true},
        {"+-FLT_MAX", mixed_max, false}, // cast and narrow value dtypes overflow to Inf
        {"FLT_MAX constant", fill(FLT_MAX), false},
    };
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        for (const auto& h : table) {
          CAPTURE(h.what);
          const cp::context ctx{.seed = 1, .on_nonfinite = cp::nonfinite_policy::zero_and_count};
          std::vector<std::byte> out(cp::max_payload_bytes(c, n));
          std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n));
          const auto r = cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(h.x),
                                    std::span(out), std::span(ws));
          std::size_t bad = 0;
          for (float v : h.x)
            bad += cp::detail::is_finite(v) ? 0u : 1u;
          CHECK(r.nonfinite == bad);
          const auto y = decode_vec(c, out);
          std::size_t nans = 0, infinite = 0;
          for (float v : y) {
            nans += v != v ? 1u : 0u;
            infinite += cp::detail::is_finite(v) ? 0u : 1u;
          }
          CHECK(nans == 0);
          if (h.finite_out)
            CHECK(infinite == 0);
          // A tensor of zeros (NaN/Inf count as zero here) decodes to exact zeros (C0.4).
          bool zero_in = true;
          for (float v : h.x)
            zero_in = zero_in && (v == 0.0f || !cp::detail::is_finite(v));
          if (zero_in)
            for (float v : y)
              CHECK(v == 0.0f);
        }
      });
    }
  }

  TEST_CASE("codecs: a single element and an empty tensor encode and decode to finite values") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        for (const std::size_t m : {0u, 1u}) {
          if (!c.can_implement(m))
            continue; // row and column layouts need whole rows
          const std::vector<float> x(m, -1.5f);
          const auto y = decode_vec(c, encode_vec(c, cp::context{}, x));
          REQUIRE(y.size() == m);
          for (float v : y)
            CHECK(cp::detail::is_finite(v));
        }
      });
    }
  }

  TEST_CASE("codecs: under propagate a NaN/Inf block makes dense codecs decode NaN/Inf there") {
    for (std::size_t id = 0; id < rel::config_count; ++id) {
      CAPTURE(id);
      rel::with_config(id, [&](const auto& c, bool) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (C::id == cp::codec_id::identity || C::id == cp::codec_id::cast ||
                      C::id == cp::codec_id::sign || C::id == cp::codec_id::quantize) {
          auto x = ramp(n);
          for (std::size_t i = 100; i < 108; ++i)
            x[i] = i % 2 == 0 ? quiet_nan : inf;
          const auto y = decode_vec(c, encode_vec(c, cp::context{}, x));
          for (std::size_t i = 100; i < 108; ++i)
            CHECK_FALSE(cp::detail::is_finite(y[i]));
        }
      });
    }
  }
}
