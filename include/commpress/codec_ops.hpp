// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codec entry points for host memory: encode, decode, decode_accumulate, roundtrip.
///
/// Every call takes the execution policy first (`commpress::cpu::seq`), then the codec, and
/// works on caller-provided spans; nothing allocates. Sizes are asked for first:
/// `max_payload_bytes(codec, n)` for the payload and `workspace_bytes(policy, codec, n)` for
/// scratch (CUB's temporary-storage idiom); `encode_workspace_bytes(policy, codec, n)` is what
/// `encode` alone asks for, less where roundtrip encodes into the workspace (a caller that
/// never calls `roundtrip` may size by it).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "commpress/core/concepts.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/body_checksum.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

/// @brief Policies whose spans live in host memory (the CPU backends).
template <class Policy>
concept host_policy = Policy::host_memory;

namespace detail {

/// One element type's half of host_codec_impl.
template <class Impl, class C, class Policy, class T>
concept host_codec_impl_for = requires(const Policy& p, const C& c, const context& ctx,
                                       std::span<const T> in, unsigned char* body,
                                       std::span<std::byte> ws, const payload_header& h,
                                       const unsigned char* encoded, std::span<T> out,
                                       format::body_checksum& sum) {
  { Impl::encode_body(p, c, ctx, in, body, ws) } -> std::same_as<std::size_t>;
  { Impl::decode_body(p, c, h, encoded, out) } -> std::same_as<void>;
  requires !Impl::hashes_body || requires {
    { Impl::encode_body(p, c, ctx, in, body, ws, sum) } -> std::same_as<std::size_t>;
  };
};

/// @brief The contract of a host backend's codec implementation, codec_impl<C, Policy> (the
/// CPU backends' specialisations, and the kit's for block-scaled codecs):
/// - `workspace_bytes(c, n)`: its own scratch for n elements;
/// - `encode_body(policy, c, ctx, in, body, ws)` -> the NaN/Inf count, writing the body at
///   `body`, for every element type; `decode_body(policy, c, header, body, out)` for every
///   element type; `accumulate_body(policy, c, header, body, acc, weight)`;
/// - `hashes_body`: true when encode_body also has an overload taking the payload's
///   format::body_checksum, which it feeds while the body is in cache, and `ordered_body_from(c,
///   n)` says where the in-order part of the body starts;
/// - `custom_roundtrip`: true when it has `roundtrip(policy, c, ctx, x, ws)` -> the NaN/Inf
///   count; otherwise roundtrip encodes into the workspace and decodes;
/// - for a variable_body_codec (core/concepts.hpp), `encode_body(policy, c, ctx, in, body, ws,
///   written)` -> the NaN/Inf count, setting `written` to the body's length, at most
///   c.body_bytes(n) (sized_encode_body below); decode_body and accumulate_body read a body of
///   the header's body_bytes.
/// Every implementation declares both flags, so a misspelt optional member does not silently
/// select another path: it fails this concept, which the entry points below assert.
template <class Impl, class C, class Policy>
concept host_codec_impl = requires(const Policy& p, const C& c, std::uint64_t n, const context& ctx,
                                   std::span<float> x, std::span<std::byte> ws,
                                   const payload_header& h, const unsigned char* encoded,
                                   float weight) {
  { Impl::hashes_body } -> std::convertible_to<bool>;
  { Impl::custom_roundtrip } -> std::convertible_to<bool>;
  { Impl::workspace_bytes(c, n) } -> std::same_as<std::uint64_t>;
  { Impl::accumulate_body(p, c, h, encoded, x, weight) } -> std::same_as<void>;
  requires !Impl::hashes_body || requires {
    { Impl::ordered_body_from(c, n) } -> std::same_as<std::size_t>;
  };
  requires !Impl::custom_roundtrip || requires {
    { Impl::roundtrip(p, c, ctx, x, ws) } -> std::same_as<std::size_t>;
  };
}
&&host_codec_impl_for<Impl, C, Policy, float>&& host_codec_impl_for<Impl, C, Policy, half>&&
    host_codec_impl_for<Impl, C, Policy, bfloat16>;

/// The sized encode_body of a variable_body_codec's implementation.
template <class Impl, class C, class Policy>
concept sized_encode_body = requires(const Policy& p, const C& c, const context& ctx,
                                     std::span<const float> in, unsigned char* body,
                                     std::span<std::byte> ws, std::uint64_t& written) {
  { Impl::encode_body(p, c, ctx, in, body, ws, written) } -> std::same_as<std::size_t>;
};

/// codec_impl<C, Policy>, checked against the host backend contract.
template <class C, class Policy> struct host_impl {
  using type = codec_impl<C, Policy>;
  static_assert(host_codec_impl<type, C, Policy>,
                "commpress: codec_impl<Codec, Policy> does not meet the host backend contract "
                "(detail::host_codec_impl in codec_ops.hpp)");
  static_assert(!variable_body_codec<C> || sized_encode_body<type, C, Policy>,
                "commpress: a variable_body_codec's codec_impl needs the encode_body overload "
                "that reports the body's length (detail::host_codec_impl in codec_ops.hpp)");
};
template <class C, class Policy> using host_impl_t = typename host_impl<C, Policy>::type;

/// Refuses an output span too small for a payload with a body of `body` bytes.
inline void check_payload_room(std::span<const std::byte> out, std::uint64_t body) {
  COMMPRESS_EXPECTS(out.size() >= format::header_bytes + body, errc::buffer_too_small, "encode",
                    "output holds " + std::to_string(out.size()) + " bytes, the payload needs " +
                        std::to_string(format::header_bytes + body));
}

/// Number of NaN/Inf elements in `in`.
template <element T> std::size_t count_nonfinite(std::span<const T> in) {
  std::size_t bad = 0;
  for (const T& v : in)
    bad += is_finite(to_float(v)) ? 0u : 1u;
  return bad;
}

template <codec C> void check_can_implement(const C& c, std::uint64_t n) {
  const status s = c.can_implement(n);
  COMMPRESS_EXPECTS(s, s.code, "codec", s.message);
}

/// roundtrip without its checks: the implementation's own roundtrip, or an encode into the
/// workspace and a decode. Returns the NaN/Inf count.
template <class Policy, codec C>
std::size_t roundtrip_body(const Policy& policy, const C& c, const context& ctx, std::span<float> x,
                           std::span<std::byte> workspace) {
  using impl = host_impl_t<C, Policy>;
  if constexpr (impl::custom_roundtrip) {
    return impl::roundtrip(policy, c, ctx, x, workspace);
  } else {
    const std::uint64_t n = x.size();
    const std::uint64_t own = impl::workspace_bytes(c, n);
    auto* body_ptr = reinterpret_cast<unsigned char*>(workspace.data() + own);
    payload_header h = format::header_of(c, ctx, dtype::f32, n);
    std::size_t nonfinite = 0;
    if constexpr (variable_body_codec<C>) {
      nonfinite = impl::encode_body(policy, c, ctx, std::span<const float>(x), body_ptr,
                                    workspace.first(own), h.body_bytes);
    } else {
      nonfinite = impl::encode_body(policy, c, ctx, std::span<const float>(x), body_ptr,
                                    workspace.first(own));
    }
    impl::decode_body(policy, c, h, body_ptr, x);
    return nonfinite;
  }
}

} // namespace detail

/// @brief Scratch bytes `encode` asks for, for n elements (often 0; at most workspace_bytes:
/// without the body that the generic roundtrip encodes into).
template <host_policy Policy, codec C>
std::uint64_t encode_workspace_bytes(const Policy&, const C& c, std::uint64_t n) {
  return detail::host_impl_t<C, Policy>::workspace_bytes(c, n);
}

/// @brief Scratch bytes `encode` and `roundtrip` need for n elements (often 0).
template <host_policy Policy, codec C>
std::uint64_t workspace_bytes(const Policy& policy, const C& c, std::uint64_t n) {
  const std::uint64_t own = encode_workspace_bytes(policy, c, n);
  if constexpr (detail::host_impl_t<C, Policy>::custom_roundtrip) {
    return own;
  } else {
    return own + c.body_bytes(n); // the generic roundtrip encodes into the workspace
  }
}

/// @brief Encodes `in` into a self-describing payload at the front of `out`.
/// @param ctx random stream (seed, step, tensor id) and non-finite policy; recorded in the header
/// @param out at least max_payload_bytes(c, in.size()) bytes
/// @param workspace at least encode_workspace_bytes(policy, c, in.size()) bytes
/// @return the payload's length (max_payload_bytes, or less for a variable body: a receiver
///         decodes the first `bytes` bytes or the whole buffer) and the NaN/Inf count
/// @throws commpress::error invalid configuration, small buffers, or non-finite input under
///         nonfinite_policy::fail; nothing is written then.
template <host_policy Policy, codec C, element T>
encode_result encode(const Policy& policy, const C& c, const context& ctx, std::span<const T> in,
                     std::span<std::byte> out, std::span<std::byte> workspace = {}) {
  using impl = detail::host_impl_t<C, Policy>;
  const std::uint64_t n = in.size();
  detail::check_can_implement(c, n);
  const std::uint64_t body = c.body_bytes(n);
  detail::check_payload_room(out, body);
  COMMPRESS_EXPECTS(workspace.size() >= impl::workspace_bytes(c, n), errc::buffer_too_small,
                    "encode", "workspace smaller than encode_workspace_bytes()");
  if (ctx.on_nonfinite == nonfinite_policy::fail) {
    const std::size_t bad = detail::count_nonfinite(in);
    COMMPRESS_EXPECTS(bad == 0, errc::non_finite, "encode",
                      std::to_string(bad) + " NaN/Inf input elements");
  }
  auto* body_ptr = reinterpret_cast<unsigned char*>(out.data() + format::header_bytes);
  format::write_header(format::header_of(c, ctx, dtype_of_v<T>, n), out.data());
  std::size_t nonfinite = 0;
  std::uint64_t written = body;
  if constexpr (impl::hashes_body) {
    format::body_checksum sum(out.data() + format::header_bytes, body,
                              impl::ordered_body_from(c, n));
    nonfinite = impl::encode_body(policy, c, ctx, in, body_ptr, workspace, sum);
    format::store_checksum(out, sum.finish(out.data()));
  } else if constexpr (variable_body_codec<C>) {
    nonfinite = impl::encode_body(policy, c, ctx, in, body_ptr, workspace, written);
    format::store_body_bytes(out, written);
    format::seal(out, written);
  } else {
    nonfinite = impl::encode_body(policy, c, ctx, in, body_ptr, workspace);
    format::seal(out, body);
  }
  return {static_cast<std::size_t>(format::header_bytes + written), nonfinite};
}

/// @brief Validates `payload` against this codec and writes the decoded tensor to `out`.
/// @throws commpress::error for truncated, corrupted, foreign or mismatched payloads; `out` is
///         untouched then.
template <host_policy Policy, codec C, element T>
payload_header decode(const Policy& policy, const C& c, std::span<const std::byte> payload,
                      std::span<T> out) {
  const std::uint64_t n = out.size();
  detail::check_can_implement(c, n);
  const payload_header h = format::validate_for(payload, c, n);
  const auto* body = reinterpret_cast<const unsigned char*>(payload.data() + format::header_bytes);
  detail::host_impl_t<C, Policy>::decode_body(policy, c, h, body, out);
  return h;
}

/// @brief Validates `payload` and adds `weight * decoded` to `acc` (acc[i] += weight * x[i]),
/// the step that aggregates the payloads of many ranks.
/// @throws commpress::error as decode; `acc` is untouched then.
template <host_policy Policy, codec C>
payload_header decode_accumulate(const Policy& policy, const C& c,
                                 std::span<const std::byte> payload, std::span<float> acc,
                                 float weight = 1.0f) {
  const std::uint64_t n = acc.size();
  detail::check_can_implement(c, n);
  const payload_header h = format::validate_for(payload, c, n);
  const auto* body = reinterpret_cast<const unsigned char*>(payload.data() + format::header_bytes);
  detail::host_impl_t<C, Policy>::accumulate_body(policy, c, h, body, acc, weight);
  return h;
}

/// @brief Replaces `x` by C(x), bit-identical to decode(encode(x)) but without a payload:
/// what error feedback and simulated compression need.
/// @param workspace at least workspace_bytes(policy, c, x.size()) bytes
template <host_policy Policy, codec C>
encode_result roundtrip(const Policy& policy, const C& c, const context& ctx, std::span<float> x,
                        std::span<std::byte> workspace) {
  const std::uint64_t n = x.size();
  detail::check_can_implement(c, n);
  COMMPRESS_EXPECTS(workspace.size() >= workspace_bytes(policy, c, n), errc::buffer_too_small,
                    "roundtrip", "workspace smaller than workspace_bytes()");
  if (ctx.on_nonfinite == nonfinite_policy::fail) {
    const std::size_t bad = detail::count_nonfinite(std::span<const float>(x));
    COMMPRESS_EXPECTS(bad == 0, errc::non_finite, "roundtrip",
                      std::to_string(bad) + " NaN/Inf input elements");
  }
  return {0, detail::roundtrip_body(policy, c, ctx, x, workspace)};
}

} // namespace commpress
