// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The host backend contract (codec_ops.hpp, detail::host_codec_impl): every codec of
// compress/codec_list.hpp meets it under cpu::seq and cpu::par, and implementations that break
// it (a missing flag, a flag without its member, a misspelt member) fail it instead of silently
// taking another path.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "commpress/commpress.hpp"

namespace cp = commpress;

namespace {

template <class C, class Policy>
constexpr bool meets = cp::detail::host_codec_impl<cp::detail::codec_impl<C, Policy>, C, Policy>;

template <class... C> constexpr bool every_codec_meets(cp::codec_list<C...>) {
  return ((meets<C, cp::cpu::seq_t> && meets<C, cp::cpu::par_t>)&&...);
}

// The identity codec's members, to build broken implementations from.
struct base_impl {
  static std::uint64_t workspace_bytes(const cp::identity&, std::uint64_t) { return 0; }
  template <cp::element T>
  static std::size_t encode_body(const cp::cpu::seq_t&, const cp::identity&, const cp::context&,
                                 std::span<const T>, unsigned char*, std::span<std::byte>) {
    return 0;
  }
  template <cp::element T>
  static void decode_body(const cp::cpu::seq_t&, const cp::identity&, const cp::payload_header&,
                          const unsigned char*, std::span<T>) {}
  static void accumulate_body(const cp::cpu::seq_t&, const cp::identity&, const cp::payload_header&,
                              const unsigned char*, std::span<float>, float) {}
};
struct complete : base_impl {
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = false;
};
struct no_flags : base_impl {};
struct roundtrip_flag_without_member : base_impl {
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;
};
struct misspelt_roundtrip : base_impl {
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;
  static std::size_t round_trip(const cp::cpu::seq_t&, const cp::identity&, const cp::context&,
                                std::span<float>, std::span<std::byte>) {
    return 0;
  }
};
struct hashing_flag_without_members : base_impl {
  static constexpr bool hashes_body = true;
  static constexpr bool custom_roundtrip = false;
};

template <class Impl>
constexpr bool contract = cp::detail::host_codec_impl<Impl, cp::identity, cp::cpu::seq_t>;

/// Encodes 1000 elements of T under `policy` with a workspace of exactly
/// encode_workspace_bytes, which must give the payload a workspace_bytes one gives and leave the
/// bytes after it as they were; a byte less must be refused, and so must a roundtrip with that
/// workspace where it is short of workspace_bytes. Returns how many of these broke.
template <class T, class Policy, class C>
std::size_t encode_workspace_breaks(const Policy& policy, const C& c) {
  const std::size_t n = 1000;
  std::vector<T> x(n);
  std::vector<float> xf(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = cp::from_float<T>(static_cast<float>(i % 37) - 18.5f);
    xf[i] = cp::to_float(x[i]);
  }
  const std::uint64_t need = cp::encode_workspace_bytes(policy, c, n);
  const std::uint64_t all = cp::workspace_bytes(policy, c, n);
  constexpr std::size_t guard = 64;
  std::vector<std::byte> exact(need + guard, std::byte{0xa5}), full(all);
  std::vector<std::byte> a(cp::max_payload_bytes(c, n)), b(a.size());
  const cp::context ctx{.seed = 2, .step = 1};
  std::size_t breaks = need > all ? 1u : 0u;
  const std::span<std::byte> ws = std::span(exact).first(need);
  const auto ra = cp::encode(policy, c, ctx, std::span<const T>(x), a, ws);
  const auto rb = cp::encode(policy, c, ctx, std::span<const T>(x), b, full);
  breaks += ra.bytes != rb.bytes || !std::equal(a.begin(), a.begin() + ra.bytes, b.begin());
  breaks += !std::all_of(exact.begin() + need, exact.end(),
                         [](std::byte v) { return v == std::byte{0xa5}; });
  const auto refused = [&](auto&& call) {
    try {
      call();
    } catch (const cp::error& e) {
      return e.code() == cp::errc::buffer_too_small;
    }
    return false;
  };
  if (need > 0)
    breaks +=
        !refused([&] { cp::encode(policy, c, ctx, std::span<const T>(x), a, ws.first(need - 1)); });
  if (need < all)
    breaks += !refused([&] { cp::roundtrip(policy, c, ctx, std::span(xf), ws); });
  return breaks;
}

/// encode_workspace_breaks of c under cpu::seq and cpu::par, for fp32 and bf16 inputs.
template <class C> std::size_t encode_workspace_breaks(const C& c) {
  const cp::cpu::par_t par{.threads = 2, .grain = 256};
  return encode_workspace_breaks<float>(cp::cpu::seq, c) + encode_workspace_breaks<float>(par, c) +
         encode_workspace_breaks<cp::bfloat16>(cp::cpu::seq, c) +
         encode_workspace_breaks<cp::bfloat16>(par, c);
}

template <class... C> std::size_t encode_workspace_breaks(cp::codec_list<C...>) {
  return (encode_workspace_breaks(C{}) + ...);
}

} // namespace

static_assert(every_codec_meets(cp::all_codecs{}),
              "a codec of codec_list.hpp lacks a conforming CPU implementation");

TEST_SUITE("compress") {
  TEST_CASE("contract: every listed codec meets the host backend contract; broken "
            "implementations do not") {
    CHECK(every_codec_meets(cp::all_codecs{}));
    CHECK(contract<complete>);
    CHECK_FALSE(contract<no_flags>);
    CHECK_FALSE(contract<roundtrip_flag_without_member>);
    CHECK_FALSE(contract<misspelt_roundtrip>);
    CHECK_FALSE(contract<hashing_flag_without_members>);
    CHECK(cp::detail::codec_impl<cp::quantize, cp::cpu::seq_t>::hashes_body);
    CHECK_FALSE(cp::detail::codec_impl<cp::quantize, cp::cpu::par_t>::hashes_body);
    CHECK_FALSE(cp::detail::codec_impl<cp::mxfp8, cp::cpu::seq_t>::custom_roundtrip);
  }

  TEST_CASE("contract: encode needs only encode_workspace_bytes, and roundtrip all of "
            "workspace_bytes") {
    CHECK(encode_workspace_breaks(cp::all_codecs{}) == 0);
    CHECK(encode_workspace_breaks(cp::rotated_codecs{}) == 0);
    // Kept values sent quantized: their encode's workspace holds the values to quantize.
    CHECK(encode_workspace_breaks(cp::top_k{.count = 30, .value_quantizer = {.bits = 4}}) == 0);
    CHECK(encode_workspace_breaks(cp::top_k{
              .count = 2, .row_length = 40, .value_quantizer = {.bits = 2, .group = 32}}) == 0);
    CHECK(encode_workspace_breaks(cp::random_k{.count = 64, .value_quantizer = {.bits = 2}}) == 0);
    // A codec whose roundtrip encodes into the workspace needs the body's bytes more.
    const cp::mxfp8 c{};
    CHECK(cp::workspace_bytes(cp::cpu::seq, c, 1000) ==
          cp::encode_workspace_bytes(cp::cpu::seq, c, 1000) + c.body_bytes(1000));
  }
}
