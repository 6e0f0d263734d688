// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The host backend contract (codec_ops.hpp, detail::host_codec_impl): every codec of
// compress/codec_list.hpp meets it under cpu::seq and cpu::par, and implementations that break
// it (a missing flag, a flag without its member, a misspelt member) fail it instead of silently
// taking another path.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <span>

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
}
